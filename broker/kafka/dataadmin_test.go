package kafka

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/keel-dev/keel/tlsauth"
)

// TestServer_DataAdminVersions: DeleteRecords, DescribeLogDirs and
// DescribeProducers are listed at the versions served whole.
func TestServer_DataAdminVersions(t *testing.T) {
	s := startServer(t, 1, newFakeMeta(t), NewMemoryBackend(), nil)
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(context.Background(), newClient(t, []string{s.Addr()}))
	if err != nil {
		t.Fatal(err)
	}
	served := map[int16]kmsg.ApiVersionsResponseApiKey{}
	for _, k := range resp.ApiKeys {
		served[k.ApiKey] = k
	}
	for key, want := range map[int16][2]int16{21: {0, 2}, 35: {0, 4}, 61: {0, 0}} {
		if k, ok := served[key]; !ok || k.MinVersion != want[0] || k.MaxVersion != want[1] {
			t.Errorf("%s: served %+v, want %d-%d", kmsg.NameForKey(key), k, want[0], want[1])
		}
	}
}

// atVersion is a client of addr that sends req's API at version at most.
func atVersion(t *testing.T, addr string, key, version int16) *kgo.Client {
	vs := kversion.Stable()
	vs.SetMaxKeyVersion(key, version)
	return newClient(t, []string{addr}, kgo.MaxVersions(vs))
}

// ask sends req to broker id itself.
func ask(t *testing.T, cl *kgo.Client, id int32, req kmsg.Request) kmsg.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	resp, err := cl.Broker(int(id)).Request(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", kmsg.NameForKey(req.Key()), err)
	}
	return resp
}

// produceValues produces each value as a batch of its own to topic's
// partition p.
func produceValues(t *testing.T, cl *kgo.Client, topic string, p int32, values ...string) {
	t.Helper()
	for _, v := range values {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: p, Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatalf("produce %q: %v", v, err)
		}
	}
}

// TestServer_DescribeLogDirs: every replica the backend holds, by topic,
// with its size; a topic list asks for those partitions only; total and
// usable bytes from v4 (ReplicaManager.describeLogDirs).
func TestServer_DescribeLogDirs(t *testing.T) {
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	s := startServer(t, 1, meta, backend, nil)
	meta.createTopic("orders", []int32{1}, []int32{1})
	meta.createTopic("audit", []int32{1})
	cl := newClient(t, []string{s.Addr()}, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produceValues(t, cl, "orders", 0, "a", "b")
	produceValues(t, cl, "orders", 1, "c")
	produceValues(t, cl, "audit", 0, "d")

	type replica struct {
		topic     string
		partition int32
	}
	for _, version := range []int16{0, 2, 4} {
		cl := atVersion(t, s.Addr(), 35, version)
		for _, tc := range []struct {
			name   string
			topics []kmsg.DescribeLogDirsRequestTopic
			want   []replica
		}{
			{"all", nil, []replica{{"audit", 0}, {"orders", 0}, {"orders", 1}}},
			{"one partition", []kmsg.DescribeLogDirsRequestTopic{{Topic: "orders", Partitions: []int32{1}}}, []replica{{"orders", 1}}},
			{"none held", []kmsg.DescribeLogDirsRequestTopic{{Topic: "orders", Partitions: []int32{7}}, {Topic: "nope", Partitions: []int32{0}}}, nil},
		} {
			req := kmsg.NewPtrDescribeLogDirsRequest()
			req.Topics = tc.topics
			resp := ask(t, cl, 1, req).(*kmsg.DescribeLogDirsResponse)
			if resp.Version != version || resp.ErrorCode != 0 || len(resp.Dirs) != 1 || resp.Dirs[0].Dir != "memory" {
				t.Fatalf("v%d %s: %+v", version, tc.name, resp)
			}
			d := resp.Dirs[0]
			if version >= 4 && (d.TotalBytes != -1 || d.UsableBytes != -1) {
				t.Errorf("v%d %s: total %d, usable %d; want -1, -1 for memory", version, tc.name, d.TotalBytes, d.UsableBytes)
			}
			var got []replica
			for _, dt := range d.Topics {
				for _, p := range dt.Partitions {
					got = append(got, replica{dt.Topic, p.Partition})
					if p.Size <= 0 || p.OffsetLag != 0 || p.IsFuture {
						t.Errorf("v%d %s: %s/%d: %+v", version, tc.name, dt.Topic, p.Partition, p)
					}
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("v%d %s: replicas %v, want %v", version, tc.name, got, tc.want)
			}
		}
	}
}

// TestServer_DeleteRecords: DeleteRecords moves the log start; a consumer
// then starts there, ListOffsets earliest answers it, and fetches below it
// are out of range. Bad input is refused per partition, deleting nothing.
func TestServer_DeleteRecords(t *testing.T) {
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	s := startServer(t, 1, meta, backend, nil)
	meta.createTopic("orders", []int32{1})
	meta.createTopic("elsewhere", []int32{2})
	cl := newClient(t, []string{s.Addr()}, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produceValues(t, cl, "orders", 0, "v0", "v1", "v2", "v3", "v4")

	earliest := func() int64 {
		t.Helper()
		p := listOffsetsAt(t, s.Addr(), 7, "orders", -2)
		if p.ErrorCode != 0 {
			t.Fatalf("ListOffsets earliest: %v", kerr.ErrorForCode(p.ErrorCode))
		}
		return p.Offset
	}
	type part struct {
		topic     string
		partition int32
		offset    int64
	}
	for _, tc := range []struct {
		name      string
		parts     []part
		wantCodes []*kerr.Error
		wantLow   []int64
		wantStart int64
	}{
		{"past the high watermark", []part{{"orders", 0, 6}}, []*kerr.Error{kerr.OffsetOutOfRange}, []int64{-1}, 0},
		{"negative, not -1", []part{{"orders", 0, -2}}, []*kerr.Error{kerr.OffsetOutOfRange}, []int64{-1}, 0},
		{"named twice", []part{{"orders", 0, 1}, {"orders", 0, 2}}, []*kerr.Error{kerr.InvalidRequest, kerr.InvalidRequest}, []int64{-1, -1}, 0},
		{"unknown topic", []part{{"nope", 0, 1}}, []*kerr.Error{kerr.UnknownTopicOrPartition}, []int64{-1}, 0},
		{"unknown partition", []part{{"orders", 3, 1}}, []*kerr.Error{kerr.UnknownTopicOrPartition}, []int64{-1}, 0},
		{"led elsewhere", []part{{"elsewhere", 0, 1}}, []*kerr.Error{kerr.NotLeaderForPartition}, []int64{-1}, 0},
		{"to 2, beside a refusal", []part{{"orders", 0, 2}, {"nope", 0, 1}}, []*kerr.Error{nil, kerr.UnknownTopicOrPartition}, []int64{2, -1}, 2},
		{"backwards: nothing", []part{{"orders", 0, 1}}, []*kerr.Error{nil}, []int64{2}, 2},
		{"-1: the high watermark", []part{{"orders", 0, -1}}, []*kerr.Error{nil}, []int64{5}, 5},
	} {
		for _, version := range []int16{0, 2} {
			req := kmsg.NewPtrDeleteRecordsRequest()
			req.TimeoutMillis = 5000
			for _, p := range tc.parts {
				rt := kmsg.NewDeleteRecordsRequestTopic()
				rt.Topic = p.topic
				rp := kmsg.NewDeleteRecordsRequestTopicPartition()
				rp.Partition, rp.Offset = p.partition, p.offset
				rt.Partitions = append(rt.Partitions, rp)
				req.Topics = append(req.Topics, rt)
			}
			resp := ask(t, atVersion(t, s.Addr(), 21, version), 1, req).(*kmsg.DeleteRecordsResponse)
			if len(resp.Topics) != len(tc.parts) {
				t.Fatalf("%s v%d: %d topics answered, want %d", tc.name, version, len(resp.Topics), len(tc.parts))
			}
			for i, rt := range resp.Topics {
				p := rt.Partitions[0]
				want := int16(0)
				if tc.wantCodes[i] != nil {
					want = tc.wantCodes[i].Code
				}
				if p.ErrorCode != want || p.LowWatermark != tc.wantLow[i] {
					t.Errorf("%s v%d: %s/%d: %v, low watermark %d; want %v, %d", tc.name, version, rt.Topic, p.Partition,
						kerr.ErrorForCode(p.ErrorCode), p.LowWatermark, tc.wantCodes[i], tc.wantLow[i])
				}
			}
			if got := earliest(); got != tc.wantStart {
				t.Fatalf("%s v%d: earliest offset %d, want %d", tc.name, version, got, tc.wantStart)
			}
		}
	}
	// Produced on from 5; a consumer from the start begins there.
	produceValues(t, cl, "orders", 0, "v5")
	got := consumeN(t, []string{s.Addr()}, "orders", 1)
	if got[0].Offset != 5 || string(got[0].Value) != "v5" {
		t.Fatalf("consumed from the start: offset %d %q, want 5 \"v5\"", got[0].Offset, got[0].Value)
	}
	fetch := kmsg.NewPtrFetchRequest()
	fetch.MaxBytes = 1 << 20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "orders"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.FetchOffset, fp.PartitionMaxBytes, fp.CurrentLeaderEpoch = 4, 1<<20, -1
	ft.Partitions = append(ft.Partitions, fp)
	fetch.Topics = append(fetch.Topics, ft)
	fr := ask(t, cl, 1, fetch).(*kmsg.FetchResponse)
	if p := fr.Topics[0].Partitions[0]; p.ErrorCode != kerr.OffsetOutOfRange.Code || p.LogStartOffset != -1 && p.LogStartOffset != 5 {
		t.Fatalf("fetch at 4, below the log start: %v (log start %d), want OFFSET_OUT_OF_RANGE", kerr.ErrorForCode(p.ErrorCode), p.LogStartOffset)
	}
}

// TestServer_DescribeProducers: the idempotent producer that wrote, with
// its epoch and last sequence, and no transaction; an unknown topic or
// partition is UNKNOWN_TOPIC_OR_PARTITION with a message.
func TestServer_DescribeProducers(t *testing.T) {
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	s := startServer(t, 1, meta, backend, nil)
	meta.createTopic("orders", []int32{1})
	cl := newClient(t, []string{s.Addr()})
	produceValues(t, cl, "orders", 0, "a", "b", "c")
	req := kmsg.NewPtrDescribeProducersRequest()
	req.Topics = []kmsg.DescribeProducersRequestTopic{{Topic: "orders", Partitions: []int32{0, 4}}, {Topic: "nope", Partitions: []int32{0}}}
	resp := ask(t, cl, 1, req).(*kmsg.DescribeProducersResponse)
	if len(resp.Topics) != 2 || len(resp.Topics[0].Partitions) != 2 || len(resp.Topics[1].Partitions) != 1 {
		t.Fatalf("answer %+v", resp)
	}
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != 0 || len(p.ActiveProducers) != 1 {
		t.Fatalf("orders/0: %v, producers %+v", kerr.ErrorForCode(p.ErrorCode), p.ActiveProducers)
	}
	ap := p.ActiveProducers[0]
	if ap.ProducerID < 0 || ap.ProducerEpoch != 0 || ap.LastSequence != 2 || ap.LastTimestamp <= 0 || ap.CoordinatorEpoch != -1 || ap.CurrentTxnStartOffset != -1 {
		t.Fatalf("orders/0's producer: %+v", ap)
	}
	for _, p := range []kmsg.DescribeProducersResponseTopicPartition{resp.Topics[0].Partitions[1], resp.Topics[1].Partitions[0]} {
		if p.ErrorCode != kerr.UnknownTopicOrPartition.Code || p.ErrorMessage == nil || len(p.ActiveProducers) != 0 {
			t.Errorf("partition %d: %v (%v), want UNKNOWN_TOPIC_OR_PARTITION with a message", p.Partition, kerr.ErrorForCode(p.ErrorCode), p.ErrorMessage)
		}
	}
}

// TestServer_DeleteRecordsNeedsDelete: in TLS a certificate that may not
// delete the topic's records is refused TOPIC_AUTHORIZATION_FAILED and
// deletes nothing; an admin's deletes.
func TestServer_DeleteRecordsNeedsDelete(t *testing.T) {
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
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	s := startServer(t, 1, meta, backend, func(c *Config) { c.TLS = certs["broker-1"] })
	meta.createTopic("orders", []int32{1})
	client := func(cn string) *kgo.Client {
		return newClient(t, []string{s.Addr()}, kgo.DialTLSConfig(certs[cn].Client(tlsauth.RoleBroker)), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
	produceValues(t, client("broker-2"), "orders", 0, "a", "b")
	deleteTo := func(cl *kgo.Client, offset int64) kmsg.DeleteRecordsResponseTopicPartition {
		req := kmsg.NewPtrDeleteRecordsRequest()
		req.TimeoutMillis = 5000
		req.Topics = []kmsg.DeleteRecordsRequestTopic{{Topic: "orders", Partitions: []kmsg.DeleteRecordsRequestTopicPartition{{Partition: 0, Offset: offset}}}}
		return ask(t, cl, 1, req).(*kmsg.DeleteRecordsResponse).Topics[0].Partitions[0]
	}
	if p := deleteTo(newClient(t, []string{s.Addr()}, kgo.DialTLSConfig(userTLS(t, ca, "app-orders"))), 1); p.ErrorCode != kerr.TopicAuthorizationFailed.Code || p.LowWatermark != -1 {
		t.Fatalf("an application's certificate with no ACL: %v, low watermark %d; want TOPIC_AUTHORIZATION_FAILED", kerr.ErrorForCode(p.ErrorCode), p.LowWatermark)
	}
	if p := deleteTo(client("admin"), 1); p.ErrorCode != 0 || p.LowWatermark != 1 {
		t.Fatalf("an admin's certificate: %v, low watermark %d; want 1", kerr.ErrorForCode(p.ErrorCode), p.LowWatermark)
	}
}

// TestServer_DataAdminBadInput: a DeleteRecords, DescribeLogDirs or
// DescribeProducers that does not parse, or whose frame is over the limit,
// closes its own connection and deletes nothing; one naming 20,000
// partitions of an unknown topic is answered whole, each refused.
func TestServer_DataAdminBadInput(t *testing.T) {
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	s := startServer(t, 1, meta, backend, func(c *Config) { c.MaxOtherRequestSize = 64 << 10 })
	meta.createTopic("orders", []int32{1})
	cl := newClient(t, []string{s.Addr()}, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produceValues(t, cl, "orders", 0, "a", "b", "c")

	deleteAll := kmsg.NewPtrDeleteRecordsRequest()
	deleteAll.Topics = []kmsg.DeleteRecordsRequestTopic{{Topic: "orders", Partitions: []kmsg.DeleteRecordsRequestTopicPartition{{Partition: 0, Offset: -1}}}}
	whole := deleteAll.AppendTo(nil)
	oversized := kmsg.NewPtrDeleteRecordsRequest()
	oversized.Topics = []kmsg.DeleteRecordsRequestTopic{{Topic: "orders"}}
	for i := range 8 << 10 {
		oversized.Topics[0].Partitions = append(oversized.Topics[0].Partitions, kmsg.DeleteRecordsRequestTopicPartition{Partition: int32(i), Offset: -1})
	}
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"a DeleteRecords cut short", frame(21, 1, 1, whole[:len(whole)-6])},
		{"a DeleteRecords whose partition count lies", frame(21, 1, 1, []byte{0, 0, 0, 1, 0, 6, 'o', 'r', 'd', 'e', 'r', 's', 0x7f, 0xff, 0xff, 0xff})},
		{"a DeleteRecords over the size limit", frame(21, 1, 1, oversized.AppendTo(nil))},
		{"a DescribeLogDirs whose topic count lies", frame(35, 1, 1, []byte{0x7f, 0xff, 0xff, 0xff})},
		// Flexible: the header's tags, then one topic whose name is cut.
		{"a DescribeProducers cut short", frame(61, 0, 1, []byte{0, 2, 7, 'o', 'r'})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, s.Addr())
			writeFrame(t, c, tc.frame)
			_ = c.SetReadDeadline(time.Now().Add(testTimeout))
			if n, err := c.Read(make([]byte, 1)); err == nil {
				t.Fatalf("read %d bytes of an answer; want the connection closed", n)
			} else if !errors.Is(err, io.EOF) && !isReset(err) {
				t.Fatalf("read: %v; want the connection closed", err)
			}
		})
	}
	if p := listOffsetsAt(t, s.Addr(), 7, "orders", -2); p.ErrorCode != 0 || p.Offset != 0 {
		t.Fatalf("earliest after the bad input: %d (%v), want 0: nothing deleted", p.Offset, kerr.ErrorForCode(p.ErrorCode))
	}

	many := kmsg.NewPtrDeleteRecordsRequest()
	many.TimeoutMillis = 5000
	many.Topics = []kmsg.DeleteRecordsRequestTopic{{Topic: "nope"}}
	for i := range 20_000 {
		many.Topics[0].Partitions = append(many.Topics[0].Partitions, kmsg.DeleteRecordsRequestTopicPartition{Partition: int32(i), Offset: 1})
	}
	s2 := startServer(t, 2, meta, backend, nil)
	resp := ask(t, newClient(t, []string{s2.Addr()}), 2, many).(*kmsg.DeleteRecordsResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 20_000 {
		t.Fatalf("answered %d topics", len(resp.Topics))
	}
	for _, p := range resp.Topics[0].Partitions {
		if p.ErrorCode != kerr.UnknownTopicOrPartition.Code || p.LowWatermark != -1 {
			t.Fatalf("partition %d: %v, low watermark %d; want UNKNOWN_TOPIC_OR_PARTITION", p.Partition, kerr.ErrorForCode(p.ErrorCode), p.LowWatermark)
		}
	}
}

// stuckDeletes is a MemoryBackend whose DeleteRecords waits never see the
// replicas follow: each ends only with its context, and says so on ended.
type stuckDeletes struct {
	*MemoryBackend
	ended chan error
}

func (b stuckDeletes) DeleteRecords(topic string, partition int32, offset int64) (func(context.Context) (int64, error), error) {
	if _, err := b.MemoryBackend.DeleteRecords(topic, partition, offset); err != nil {
		return nil, err
	}
	return func(ctx context.Context) (int64, error) {
		<-ctx.Done()
		b.ended <- ctx.Err()
		return -1, kerr.RequestTimedOut
	}, nil
}

// TestServer_DeleteRecordsWaitEnds: the wait for the replicas ends at the
// request's timeout (REQUEST_TIMED_OUT), or when the client closes its
// connection, long before.
func TestServer_DeleteRecordsWaitEnds(t *testing.T) {
	meta, backend := newFakeMeta(t), stuckDeletes{NewMemoryBackend(), make(chan error, 2)}
	s := startServer(t, 1, meta, backend, nil)
	meta.createTopic("orders", []int32{1})
	produceValues(t, newClient(t, []string{s.Addr()}, kgo.RecordPartitioner(kgo.ManualPartitioner())), "orders", 0, "a", "b")
	deleteTo1 := func(timeoutMillis int32) *kmsg.DeleteRecordsRequest {
		req := kmsg.NewPtrDeleteRecordsRequest()
		req.TimeoutMillis = timeoutMillis
		req.Topics = []kmsg.DeleteRecordsRequestTopic{{Topic: "orders", Partitions: []kmsg.DeleteRecordsRequestTopicPartition{{Partition: 0, Offset: 1}}}}
		return req
	}

	resp := kmsg.NewPtrDeleteRecordsResponse()
	rawRequest(t, s.Addr(), deleteTo1(200), resp)
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != kerr.RequestTimedOut.Code || p.LowWatermark != -1 {
		t.Fatalf("a wait past its 200 ms: %v, low watermark %d; want REQUEST_TIMED_OUT", kerr.ErrorForCode(p.ErrorCode), p.LowWatermark)
	}
	if err := <-backend.ended; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the wait ended with %v, want its deadline", err)
	}

	c := dial(t, s.Addr())
	req := deleteTo1(60_000)
	writeFrame(t, c, frame(req.Key(), 1, 1, req.AppendTo(nil)))
	c.Close()
	select {
	case err := <-backend.ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the wait ended with %v, want its connection's end", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wait of a closed connection went on")
	}
}
