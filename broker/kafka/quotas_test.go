package kafka

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/tlsauth"
)

// TestRate_QuotaViolation is ClientQuotaManagerTest.testQuotaViolation
// on the rate alone: a quota of 500 B/s, 400 B each second for 10 s, then
// a spike of 2,300 B half way into the next window is 6,300 B over 10.5 s,
// 600 B/s: throttled (600-500)/500 x 10.5 s = 2,100 ms; once the spike's
// window has rolled over, no throttle.
func TestRate_QuotaViolation(t *testing.T) {
	var r rate
	now := int64(1_000_000)
	for range 10 {
		if d := r.throttle(400, 500, now); d != 0 {
			t.Fatalf("throttled %v under the quota", d)
		}
		now += 1000
	}
	now += 500 - 1000
	if d := r.throttle(2300, 500, now); d != 2100*time.Millisecond {
		t.Fatalf("spike throttled %v; want 2.1s", d)
	}
	now += 2100
	for range 10 {
		r.throttle(400, 500, now)
		now += 1000
	}
	if d := r.throttle(0, 500, now); d != 0 {
		t.Fatalf("throttled %v once the spike rolled over", d)
	}
}

// TestRate_Windows: a new client is measured over at least ten windows;
// samples older than eleven windows count no more.
func TestRate_Windows(t *testing.T) {
	for _, tt := range []struct {
		name    string
		records [][2]int64 // (ms offset, value)
		at      int64
		want    float64
		span    int64
	}{
		{name: "one record is spread over ten windows", records: [][2]int64{{0, 1000}}, at: 0, want: 100, span: 10_000},
		{name: "twelve windows on, it is gone", records: [][2]int64{{0, 1000}}, at: 12_000, want: 0, span: 10_000},
		{name: "a full eleven windows", records: [][2]int64{{0, 1100}, {5000, 1100}, {10_500, 1100}}, at: 10_999, want: 3300 / 10.999, span: 10_999},
	} {
		var r rate
		for _, rec := range tt.records {
			r.record(float64(rec[1]), 1_000_000+rec[0])
		}
		got, span := r.measure(1_000_000 + tt.at)
		if span != tt.span || got < tt.want-0.01 || got > tt.want+0.01 {
			t.Errorf("%s: %.2f/s over %d ms; want %.2f over %d", tt.name, got, span, tt.want, tt.span)
		}
	}
}

// TestQuotaFilter: DescribeClientQuotas' filters, as Kafka's
// ClientQuotasImageTest and DescribeClientQuotas match them.
func TestQuotaFilter(t *testing.T) {
	u, c := fsm.Named("alice"), fsm.Named("app")
	entities := []fsm.QuotaEntity{{User: u}, {User: u, ClientID: c}, {User: fsm.DefaultName}, {ClientID: c}, {ClientID: fsm.DefaultName}}
	comp := func(typ string, mt kmsg.QuotasMatchType, match *string) kmsg.DescribeClientQuotasRequestComponent {
		return kmsg.DescribeClientQuotasRequestComponent{EntityType: typ, MatchType: mt, Match: match}
	}
	alice, app := kmsg.StringPtr("alice"), kmsg.StringPtr("app")
	for _, tt := range []struct {
		name    string
		strict  bool
		comps   []kmsg.DescribeClientQuotasRequestComponent
		want    []int // indexes into entities
		wantErr *kerr.Error
	}{
		{name: "no filter matches all", want: []int{0, 1, 2, 3, 4}},
		{name: "no filter, strict, matches none", strict: true},
		{name: "exact user", comps: []kmsg.DescribeClientQuotasRequestComponent{comp("user", kmsg.QuotasMatchTypeExact, alice)}, want: []int{0, 1}},
		{name: "exact user, strict", strict: true, comps: []kmsg.DescribeClientQuotasRequestComponent{comp("user", kmsg.QuotasMatchTypeExact, alice)}, want: []int{0}},
		{name: "default user", comps: []kmsg.DescribeClientQuotasRequestComponent{comp("user", kmsg.QuotasMatchTypeDefault, nil)}, want: []int{2}},
		{name: "any client id", comps: []kmsg.DescribeClientQuotasRequestComponent{comp("client-id", kmsg.QuotasMatchTypeAny, nil)}, want: []int{1, 3, 4}},
		{name: "exact user and client id", comps: []kmsg.DescribeClientQuotasRequestComponent{
			comp("user", kmsg.QuotasMatchTypeExact, alice), comp("client-id", kmsg.QuotasMatchTypeExact, app)}, want: []int{1}},
		{name: "a type twice", comps: []kmsg.DescribeClientQuotasRequestComponent{
			comp("user", kmsg.QuotasMatchTypeAny, nil), comp("user", kmsg.QuotasMatchTypeDefault, nil)}, wantErr: kerr.InvalidRequest},
		{name: "an exact match without a name", comps: []kmsg.DescribeClientQuotasRequestComponent{comp("user", kmsg.QuotasMatchTypeExact, nil)}, wantErr: kerr.InvalidRequest},
		{name: "a default match with a name", comps: []kmsg.DescribeClientQuotasRequestComponent{comp("user", kmsg.QuotasMatchTypeDefault, alice)}, wantErr: kerr.InvalidRequest},
		{name: "an unknown entity type", comps: []kmsg.DescribeClientQuotasRequestComponent{comp("group", kmsg.QuotasMatchTypeAny, nil)}, wantErr: kerr.UnsupportedVersion},
		{name: "an unknown match type", comps: []kmsg.DescribeClientQuotasRequestComponent{comp("user", 7, nil)}, wantErr: kerr.UnsupportedVersion},
		{name: "ip with user", comps: []kmsg.DescribeClientQuotasRequestComponent{
			comp("ip", kmsg.QuotasMatchTypeAny, nil), comp("user", kmsg.QuotasMatchTypeAny, nil)}, wantErr: kerr.InvalidRequest},
	} {
		r := kmsg.NewPtrDescribeClientQuotasRequest()
		r.Components, r.Strict = tt.comps, tt.strict
		f, ke, _ := parseQuotaFilter(r)
		if ke != tt.wantErr {
			t.Errorf("%s: error %v; want %v", tt.name, ke, tt.wantErr)
			continue
		}
		if ke != nil {
			continue
		}
		var got []int
		for i, e := range entities {
			if f.matches(e) {
				got = append(got, i)
			}
		}
		if len(got) != len(tt.want) {
			t.Errorf("%s: matched %v; want %v", tt.name, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("%s: matched %v; want %v", tt.name, got, tt.want)
				break
			}
		}
	}
}

func alterQuota(t *testing.T, cl *kgo.Client, validateOnly bool, entries ...kmsg.AlterClientQuotasRequestEntry) []kmsg.AlterClientQuotasResponseEntry {
	t.Helper()
	req := kmsg.NewPtrAlterClientQuotasRequest()
	req.Entries, req.ValidateOnly = entries, validateOnly
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Entries
}

func quotaEntry(typ string, name *string, key string, value float64) kmsg.AlterClientQuotasRequestEntry {
	return kmsg.AlterClientQuotasRequestEntry{
		Entity: []kmsg.AlterClientQuotasRequestEntryEntity{{Type: typ, Name: name}},
		Ops:    []kmsg.AlterClientQuotasRequestEntryOp{{Key: key, Value: value}},
	}
}

// TestServer_ClientQuotas: AlterClientQuotas is checked, then forwarded
// with the client's principal; DescribeClientQuotas answers from the
// image; a produce over its client id's quota is answered at once with
// throttle_time_ms and the connection's next request waits that long.
func TestServer_ClientQuotas(t *testing.T) {
	meta := newFakeMeta(t)
	reg := prometheus.NewRegistry()
	s := startServer(t, 1, meta, NewMemoryBackend(), func(c *Config) { c.Metrics = reg })
	meta.createTopic("t", []int32{1})
	cl := newClient(t, []string{s.Addr()}, kgo.ClientID("slow"))

	bad := alterQuota(t, cl, false,
		quotaEntry("client-id", kmsg.StringPtr("a"), "producer_bytes", 1),
		quotaEntry("client-id", kmsg.StringPtr("b"), fsm.ProducerByteRate, -1),
		quotaEntry("group", kmsg.StringPtr("c"), fsm.ProducerByteRate, 1),
		quotaEntry("client-id", kmsg.StringPtr("d"), "controller_mutation_rate", 1),
		kmsg.AlterClientQuotasRequestEntry{Entity: []kmsg.AlterClientQuotasRequestEntryEntity{{Type: "user", Name: kmsg.StringPtr("e")}, {Type: "user"}},
			Ops: []kmsg.AlterClientQuotasRequestEntryOp{{Key: fsm.ProducerByteRate, Value: 1}}},
	)
	for i, e := range bad {
		if e.ErrorCode != kerr.InvalidRequest.Code || e.ErrorMessage == nil || *e.ErrorMessage == "" {
			t.Errorf("bad entry %d: %v %v; want INVALID_REQUEST with a message", i, kerr.ErrorForCode(e.ErrorCode), e.ErrorMessage)
		}
	}
	if got := alterQuota(t, cl, true, quotaEntry("client-id", kmsg.StringPtr("slow"), fsm.ProducerByteRate, 1024)); got[0].ErrorCode != 0 {
		t.Fatalf("validate only: %v", kerr.ErrorForCode(got[0].ErrorCode))
	}
	if n := meta.Image().ClientQuotaCount(); n != 0 {
		t.Fatalf("%d quotas after bad entries and a validate-only one; want none", n)
	}
	if got := alterQuota(t, cl, false, quotaEntry("client-id", kmsg.StringPtr("slow"), fsm.ProducerByteRate, 1024)); got[0].ErrorCode != 0 {
		t.Fatalf("alter: %v", kerr.ErrorForCode(got[0].ErrorCode))
	}

	dreq := kmsg.NewPtrDescribeClientQuotasRequest()
	dreq.Components = []kmsg.DescribeClientQuotasRequestComponent{{EntityType: "client-id", MatchType: kmsg.QuotasMatchTypeAny}}
	dresp, err := dreq.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(dresp.Entries) != 1 || len(dresp.Entries[0].Values) != 1 || dresp.Entries[0].Values[0].Key != fsm.ProducerByteRate ||
		dresp.Entries[0].Values[0].Value != 1024 || *dresp.Entries[0].Entity[0].Name != "slow" {
		t.Fatalf("describe: %+v", dresp.Entries)
	}

	// Raw frames carry client id "t": a quota on it, and 12 KiB at
	// 1 KiB/s over the ten windows a new client is measured over is about
	// 1.2 KiB/s, a throttle of about 2 s.
	if got := alterQuota(t, cl, false, quotaEntry("client-id", kmsg.StringPtr("t"), fsm.ProducerByteRate, 1024)); got[0].ErrorCode != 0 {
		t.Fatalf("alter: %v", kerr.ErrorForCode(got[0].ErrorCode))
	}
	produce := func(c net.Conn) (*kmsg.ProduceResponse, time.Duration) {
		t.Helper()
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = 7, -1, 5000
		req.Topics = []kmsg.ProduceRequestTopic{{Topic: "t", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: batchOf(make([]byte, 12<<10))}}}}
		start := time.Now()
		writeFrame(t, c, frame(0, 7, 1, req.AppendTo(nil)))
		body := readFrame(t, c)
		resp := kmsg.NewPtrProduceResponse()
		resp.Version = 7
		if err := resp.ReadFrom(body[4:]); err != nil {
			t.Fatal(err)
		}
		return resp, time.Since(start)
	}
	c := dial(t, s.Addr())
	resp, took := produce(c)
	throttle := time.Duration(resp.ThrottleMillis) * time.Millisecond
	if resp.Topics[0].Partitions[0].ErrorCode != 0 || throttle < time.Second || throttle > 4*time.Second {
		t.Fatalf("over the quota: error %d, throttle %v; want none, and about 2 s", resp.Topics[0].Partitions[0].ErrorCode, throttle)
	}
	if took >= throttle {
		t.Fatalf("the throttled produce took %v to answer: not at once", took)
	}
	if got := counterValue(t, reg, MetricThrottleSeconds); got < throttle.Seconds()-0.01 {
		t.Fatalf("%s = %v; want the %v throttle counted", MetricThrottleSeconds, got, throttle)
	}
	// KIP-219: the connection's next request waits out the throttle.
	if _, took := produce(c); took < throttle/2 {
		t.Fatalf("the next request was answered after %v, within the %v throttle", took, throttle)
	}
	// Removing the quota lifts it for every new request at once.
	rm := quotaEntry("client-id", kmsg.StringPtr("t"), fsm.ProducerByteRate, 0)
	rm.Ops[0].Remove = true
	if got := alterQuota(t, cl, false, rm); got[0].ErrorCode != 0 {
		t.Fatalf("remove: %v", kerr.ErrorForCode(got[0].ErrorCode))
	}
	if resp, _ := produce(dial(t, s.Addr())); resp.ThrottleMillis != 0 {
		t.Fatalf("throttled %d ms after the quota was removed", resp.ThrottleMillis)
	}
}

// TestServer_QuotaRequestsBadInput: a malformed AlterClientQuotas or
// DescribeClientQuotas closes its connection only, and an oversized name
// is refused alone; nothing is written either way.
func TestServer_QuotaRequestsBadInput(t *testing.T) {
	meta := newFakeMeta(t)
	s := startServer(t, 1, meta, NewMemoryBackend(), nil)
	for _, tt := range []struct {
		name string
		req  kmsg.Request
	}{
		{"AlterClientQuotas", func() kmsg.Request {
			r := kmsg.NewPtrAlterClientQuotasRequest()
			r.Entries = []kmsg.AlterClientQuotasRequestEntry{quotaEntry("user", kmsg.StringPtr("alice"), fsm.ProducerByteRate, 1024)}
			return r
		}()},
		{"DescribeClientQuotas", kmsg.NewPtrDescribeClientQuotasRequest()},
	} {
		body := tt.req.AppendTo(nil)
		c := dial(t, s.Addr())
		// Truncated: the body's last bytes are missing.
		writeFrame(t, c, frame(tt.req.Key(), 0, 1, body[:len(body)-3]))
		_ = c.SetReadDeadline(time.Now().Add(testTimeout))
		if n, err := c.Read(make([]byte, 1)); err == nil {
			t.Errorf("%s truncated: the connection answered %d bytes; want it closed", tt.name, n)
		}
	}
	cl := newClient(t, []string{s.Addr()})
	long := string(make([]byte, 1000)) // beyond any principal's bound
	if got := alterQuota(t, cl, false, quotaEntry("user", &long, fsm.ProducerByteRate, 1024)); got[0].ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("an oversized name: %v; want INVALID_REQUEST", kerr.ErrorForCode(got[0].ErrorCode))
	}
	if n := meta.Image().ClientQuotaCount(); n != 0 {
		t.Fatalf("%d quotas written by bad input", n)
	}
}

// TestQuotas_RequestPercentageCapped: a request_percentage throttle is at
// most one window, as ClientRequestQuotaManager caps it; a byte rate's is
// not; a client under another entity's quota is not charged.
func TestQuotas_RequestPercentageCapped(t *testing.T) {
	e := fsm.QuotaEntity{ClientID: fsm.Named("busy")}
	img, err := fsm.Apply(fsm.Empty(), 1, 1, &keelpb.RecordBatch{Records: []*keelpb.Record{
		{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{Name: fsm.MetadataVersionFeature, Level: fsm.ClientQuotaMetadataVersion}}},
		{Record: &keelpb.Record_ClientQuota{ClientQuota: &keelpb.ClientQuotaRecord{Entity: e.Data(), Key: fsm.RequestPercentage, Value: 1}}},
		{Record: &keelpb.Record_ClientQuota{ClientQuota: &keelpb.ClientQuotaRecord{Entity: e.Data(), Key: fsm.ProducerByteRate, Value: 1}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	q, err := newQuotas(nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_000_000, 0)
	if d := q.charge(img, fsm.RequestPercentage, "anyone", "busy", 500, now, false); d != quotaWindow {
		t.Errorf("500%% of a thread against 1%%: throttled %v; want one window, %v", d, quotaWindow)
	}
	if d := q.charge(img, fsm.ProducerByteRate, "anyone", "busy", 100, now, false); d <= quotaWindow {
		t.Errorf("100 bytes against 1 B/s: throttled %v; want more than a window", d)
	}
	if d := q.charge(img, fsm.RequestPercentage, "anyone", "idle", 500, now, false); d != 0 {
		t.Errorf("a client without a quota was throttled %v", d)
	}
}

// TestServer_QuotaMutesAcksZero: an acks=0 produce over its quota has no
// answer to carry throttle_time_ms, but its connection is muted all the
// same: the next request waits.
func TestServer_QuotaMutesAcksZero(t *testing.T) {
	meta := newFakeMeta(t)
	s := startServer(t, 1, meta, NewMemoryBackend(), nil)
	meta.createTopic("t", []int32{1})
	if got := alterQuota(t, newClient(t, []string{s.Addr()}), false, quotaEntry("client-id", kmsg.StringPtr("t"), fsm.ProducerByteRate, 1024)); got[0].ErrorCode != 0 {
		t.Fatalf("alter: %v", kerr.ErrorForCode(got[0].ErrorCode))
	}
	c := dial(t, s.Addr())
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 7, 0, 5000
	req.Topics = []kmsg.ProduceRequestTopic{{Topic: "t", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: batchOf(make([]byte, 12<<10))}}}}
	writeFrame(t, c, frame(0, 7, 1, req.AppendTo(nil)))
	// 12 KiB at 1 KiB/s, over ten windows: a throttle of about 2 s.
	start := time.Now()
	writeFrame(t, c, frame(apiVersionsKey, 0, 2, nil))
	readFrame(t, c)
	if took := time.Since(start); took < time.Second {
		t.Fatalf("the request after an acks=0 produce over its quota was answered after %v; want it held about 2 s", took)
	}
}

// TestServer_ClientQuotasAuthorized: over TLS, altering and describing
// client quotas needs ALTER_CONFIGS and DESCRIBE_CONFIGS on the cluster
// (allowed): refused with CLUSTER_AUTHORIZATION_FAILED to a broker's
// certificate, nothing forwarded; an admin's is forwarded with its
// principal.
func TestServer_ClientQuotasAuthorized(t *testing.T) {
	ca, err := tlsauth.NewCA("kafka test CA")
	if err != nil {
		t.Fatal(err)
	}
	certs := map[string]*tlsauth.Config{}
	for _, cn := range []string{"broker-1", "broker-2", "admin"} {
		if certs[cn], err = ca.Config(cn, "127.0.0.1"); err != nil {
			t.Fatal(err)
		}
	}
	meta := newFakeMeta(t)
	s := startServer(t, 1, meta, NewMemoryBackend(), func(c *Config) { c.TLS = certs["broker-1"] })
	client := func(cn string) *kgo.Client {
		return newClient(t, []string{s.Addr()}, kgo.DialTLSConfig(certs[cn].Client(tlsauth.RoleBroker)))
	}
	entry := quotaEntry("user", kmsg.StringPtr("app"), fsm.ConsumerByteRate, 4096)
	app := newClient(t, []string{s.Addr()}, kgo.DialTLSConfig(userTLS(t, ca, "app-orders")))
	if got := alterQuota(t, app, false, entry); got[0].ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("AlterClientQuotas with an application's certificate: %v", kerr.ErrorForCode(got[0].ErrorCode))
	}
	resp, err := kmsg.NewPtrDescribeClientQuotasRequest().RequestWith(context.Background(), app)
	if err != nil || resp.ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("DescribeClientQuotas with an application's certificate: %v, %v", err, resp)
	}
	if got := alterQuota(t, client("admin"), false, entry); got[0].ErrorCode != 0 {
		t.Fatalf("AlterClientQuotas with an admin's certificate: %v", kerr.ErrorForCode(got[0].ErrorCode))
	}
	if got := meta.forwardedPrincipals(); !slices.Equal(got, []string{"User:admin"}) {
		t.Fatalf("principals forwarded: %q; want [User:admin]", got)
	}
}

// TestServer_FetchCappedByQuota: a fetch is bounded to what its client's
// consumer quota allows over ten windows, as Kafka bounds it: 1,000 B/s
// lets a 1 MiB fetch take two of three 4 KiB batches, unthrottled; whole,
// it would be throttled and answered empty, every time.
func TestServer_FetchCappedByQuota(t *testing.T) {
	meta := newFakeMeta(t)
	s := startServer(t, 1, meta, NewMemoryBackend(), nil)
	meta.createTopic("t", []int32{1})
	cl := newClient(t, []string{s.Addr()})
	for range 3 {
		if resp := produceRaw(t, cl, 1, "t", 0, make([]byte, 4<<10)); resp.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("produce: %v", kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode))
		}
	}
	if got := alterQuota(t, cl, false, quotaEntry("client-id", kmsg.StringPtr("t"), fsm.ConsumerByteRate, 1000)); got[0].ErrorCode != 0 {
		t.Fatalf("alter: %v", kerr.ErrorForCode(got[0].ErrorCode))
	}
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.ReplicaID, req.MinBytes, req.MaxBytes = 11, -1, 1, 1<<20
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes = 1 << 20
	req.Topics = []kmsg.FetchRequestTopic{{Topic: "t", Partitions: []kmsg.FetchRequestTopicPartition{rp}}}
	c := dial(t, s.Addr())
	writeFrame(t, c, frame(1, 11, 1, req.AppendTo(nil)))
	resp := kmsg.NewPtrFetchResponse()
	resp.Version = 11
	if err := resp.ReadFrom(readFrame(t, c)[4:]); err != nil {
		t.Fatal(err)
	}
	if resp.ThrottleMillis != 0 || len(resp.Topics) != 1 {
		t.Fatalf("throttled %d ms, %d topics; want an answer, unthrottled", resp.ThrottleMillis, len(resp.Topics))
	}
	n := len(resp.Topics[0].Partitions[0].RecordBatches)
	if n < 8<<10 || n > 10_000 {
		t.Fatalf("answered %d bytes; want two batches, within the quota's 10,000", n)
	}
}
