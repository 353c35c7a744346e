package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/rpc"
)

const testTimeout = 20 * time.Second

// newClient is a kgo client seeded with addrs, closed in t.Cleanup.
func newClient(t *testing.T, addrs []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.RetryTimeout(testTimeout),
		kgo.RecordRetries(1000)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// consumeN reads n records of topic's partitions from the start.
func consumeN(t *testing.T, addrs []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl := newClient(t, addrs, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var got []*kgo.Record
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before the deadline", len(got), n)
		}
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Logf("fetch error %s/%d: %v", topic, p, err)
			}
		})
		got = append(got, fs.Records()...)
	}
	return got
}

// TestServer_ProduceAndConsumeIdempotent: a franz-go producer (idempotent,
// acks=all: its defaults) and consumer through the listener; the producer
// id comes from a block the controller allocated.
func TestServer_ProduceAndConsumeIdempotent(t *testing.T) {
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	s := startServer(t, 1, meta, backend, nil)
	meta.createTopic("orders", []int32{1}, []int32{1})

	cl := newClient(t, []string{s.Addr()}, kgo.DefaultProduceTopic("orders"))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for i := range 20 {
		r := &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%4), Value: fmt.Appendf(nil, "v%d", i), Partition: int32(i % 2)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
		if r.ProducerID < 0 || r.ProducerEpoch != 0 {
			t.Fatalf("record %d produced without an idempotent producer id: %d/%d", i, r.ProducerID, r.ProducerEpoch)
		}
	}
	if meta.allocs.Load() == 0 {
		t.Fatal("no producer id block was asked of the controller")
	}
	got := consumeN(t, []string{s.Addr()}, "orders", 20)
	perPartition := map[int32][]int64{}
	values := map[string]bool{}
	for _, r := range got {
		perPartition[r.Partition] = append(perPartition[r.Partition], r.Offset)
		values[string(r.Value)] = true
	}
	for p, offs := range perPartition {
		for i, o := range offs {
			if o != int64(i) {
				t.Fatalf("partition %d offsets %v: want 0, 1, 2, ...", p, offs)
			}
		}
	}
	if len(values) != 20 {
		t.Fatalf("consumed %d distinct values, want 20", len(values))
	}
}

// TestServer_MetadataFollowsLeaderChange: two brokers' listeners over one
// image; the partition's leader moves from 1 to 2 in the image, and the
// same client, answered NOT_LEADER_OR_FOLLOWER by broker 1, refreshes its
// metadata and produces to broker 2.
func TestServer_MetadataFollowsLeaderChange(t *testing.T) {
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	s1 := startServer(t, 1, meta, backend, nil)
	s2 := startServer(t, 2, meta, backend, nil)
	meta.createTopic("moves", []int32{1, 2})

	cl := newClient(t, []string{s1.Addr()}, kgo.DefaultProduceTopic("moves"))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	md := metadataOf(t, cl, "moves")
	if p := md.Topics[0].Partitions[0]; p.Leader != 1 || p.LeaderEpoch != 0 || !slices.Equal(p.ISR, []int32{1, 2}) || len(md.Brokers) != 2 {
		t.Fatalf("metadata before the move: brokers %v, partition %+v", md.Brokers, p)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("before")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	meta.moveLeader("moves", 0, 2)
	md = metadataOf(t, cl, "moves")
	if p := md.Topics[0].Partitions[0]; p.Leader != 2 || p.LeaderEpoch != 1 {
		t.Fatalf("metadata after the move: partition %+v", p)
	}
	// Broker 1 is no longer the leader: it says so.
	resp := produceRaw(t, cl, 1, "moves", 0, []byte("x"))
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("broker 1 answered %v, want NOT_LEADER_OR_FOLLOWER", kerr.ErrorForCode(code))
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	got := consumeN(t, []string{s2.Addr()}, "moves", 2)
	if string(got[0].Value) != "before" || string(got[1].Value) != "after" {
		t.Fatalf("consumed %q, %q", got[0].Value, got[1].Value)
	}
}

// metadataOf asks for topic's metadata.
func metadataOf(t *testing.T, cl *kgo.Client, topic string) *kmsg.MetadataResponse {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// produceRaw sends one produce request straight to broker id, with records
// as the partition's bytes (a real batch unless raw is given).
func produceRaw(t *testing.T, cl *kgo.Client, id int32, topic string, p int32, value []byte) *kmsg.ProduceResponse {
	t.Helper()
	return produceBytes(t, cl, id, topic, p, batchOf(value))
}

func produceBytes(t *testing.T, cl *kgo.Client, id int32, topic string, p int32, records []byte) *kmsg.ProduceResponse {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = p, records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := cl.Broker(int(id)).Request(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.(*kmsg.ProduceResponse)
}

// batchOf is a v2 batch of one record holding value, not idempotent.
func batchOf(value []byte) []byte {
	rec := kmsg.Record{Value: value}
	rec.Length = int32(len(rec.AppendTo(nil)) - 1) // the length's own varint, 0, is one byte
	body := rec.AppendTo(nil)
	b := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: 0, ProducerID: -1, ProducerEpoch: -1,
		FirstSequence: -1, NumRecords: 1, Records: body,
		FirstTimestamp: time.Now().UnixMilli(), MaxTimestamp: time.Now().UnixMilli(),
	}
	raw := b.AppendTo(nil)
	b.Length = int32(len(raw) - 12)
	raw = b.AppendTo(nil)
	b.CRC = int32(crc32c(raw[21:]))
	return b.AppendTo(nil)
}

// TestServer_Errors: what a client is answered when the image, the data
// plane or the request says no, as Kafka answers it.
func TestServer_Errors(t *testing.T) {
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	s := startServer(t, 1, meta, backend, func(c *Config) { c.MaxBatchSize = 1024 })
	meta.addBroker(2, "127.0.0.1:1") // another broker, never dialled
	meta.createTopic("mine", []int32{1})
	meta.createTopic("theirs", []int32{2})
	meta.createTopic("refused", []int32{1})
	backend.setRefusal("refused", 0, fmt.Errorf("the ISR is short: %w", kerr.NotEnoughReplicas))
	cl := newClient(t, []string{s.Addr()})
	seedMetadata(t, cl)

	tests := []struct {
		name    string
		topic   string
		records []byte
		want    *kerr.Error
	}{
		{"ok", "mine", batchOf([]byte("a")), nil},
		{"unknown topic", "nope", batchOf([]byte("a")), kerr.UnknownTopicOrPartition},
		{"another broker leads", "theirs", batchOf([]byte("a")), kerr.NotLeaderForPartition},
		{"the data plane refuses, wrapped", "refused", batchOf([]byte("a")), kerr.NotEnoughReplicas},
		{"a batch over the limit", "mine", batchOf(make([]byte, 2048)), kerr.MessageTooLarge},
		{"a truncated batch", "mine", []byte{0, 1, 2}, kerr.CorruptMessage},
		{"two batches", "mine", append(batchOf([]byte("a")), batchOf([]byte("b"))...), kerr.InvalidRecord},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := produceBytes(t, cl, 1, tt.topic, 0, tt.records)
			var want int16
			if tt.want != nil {
				want = tt.want.Code
			}
			if got := resp.Topics[0].Partitions[0].ErrorCode; got != want {
				t.Fatalf("error %v, want %v", kerr.ErrorForCode(got), tt.want)
			}
		})
	}

	t.Run("fetch and list offsets from a follower", func(t *testing.T) {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "theirs"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := cl.Broker(1).Request(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if code := resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].ErrorCode; code != kerr.NotLeaderForPartition.Code {
			t.Fatalf("ListOffsets: %v", kerr.ErrorForCode(code))
		}
		freq := kmsg.NewPtrFetchRequest()
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "theirs"
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes = 1 << 20
		ft.Partitions = append(ft.Partitions, fp)
		freq.Topics = append(freq.Topics, ft)
		freq.MaxBytes = 1 << 20
		fresp, err := cl.Broker(1).Request(context.Background(), freq)
		if err != nil {
			t.Fatal(err)
		}
		if code := fresp.(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode; code != kerr.NotLeaderForPartition.Code {
			t.Fatalf("Fetch: %v", kerr.ErrorForCode(code))
		}
	})

	t.Run("transactions are refused", func(t *testing.T) {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID = kmsg.StringPtr("tx")
		raw, err := cl.Broker(1).Request(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp := raw.(*kmsg.InitProducerIDResponse); resp.ErrorCode != kerr.UnsupportedVersion.Code {
			t.Fatalf("InitProducerId with a transactional id: %v", kerr.ErrorForCode(resp.ErrorCode))
		}
	})
}

// seedMetadata makes cl learn the brokers, so that broker ids resolve.
func seedMetadata(t *testing.T, cl *kgo.Client) {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	if _, err := req.RequestWith(context.Background(), cl); err != nil {
		t.Fatal(err)
	}
}

// TestServer_ApiVersions: the APIs served, none of transactions or
// consumer groups; a newer ApiVersions gets KIP-511's answer.
func TestServer_ApiVersions(t *testing.T) {
	meta := newFakeMeta(t)
	s := startServer(t, 1, meta, NewMemoryBackend(), nil)
	cl := newClient(t, []string{s.Addr()})
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	served := map[int16]kmsg.ApiVersionsResponseApiKey{}
	for _, k := range resp.ApiKeys {
		served[k.ApiKey] = k
	}
	for key, want := range map[int16][2]int16{0: {0, 11}, 1: {4, 12}, 2: {0, 7}, 3: {0, 12}, 18: {0, 4}, 19: {0, 7}, 20: {0, 6}, 22: {0, 4}, 23: {2, 4}, 37: {0, 3}, 43: {0, 2}, 45: {0, 0}, 46: {0, 0}, 55: {0, 2}, 57: {0, 1}, 60: {0, 1}} {
		if k, ok := served[key]; !ok || k.MinVersion != want[0] || k.MaxVersion != want[1] {
			t.Errorf("%s: served %+v, want %d-%d", kmsg.NameForKey(key), k, want[0], want[1])
		}
	}
	// Groups (8-16, 42, 47: not without a coordinator, Config.Groups;
	// 68, 69: KIP-848) and transactions (24-28, 65, 66).
	for _, key := range []int16{8, 9, 10, 11, 12, 13, 14, 15, 16, 24, 25, 26, 27, 28, 42, 47, 65, 66, 68, 69} {
		if _, ok := served[key]; ok {
			t.Errorf("%s is listed", kmsg.NameForKey(key))
		}
	}
	// The SASL requests are listed only where SASL is offered
	// (TestServer_SASLStateMachine).
	if len(served) != len(versions)-2-len(groupKeys) {
		t.Errorf("%d APIs listed, %d served", len(served), len(versions)-2-len(groupKeys))
	}

	// KIP-511: ApiVersions v99, whose body this broker cannot read.
	c := dial(t, s.Addr())
	writeFrame(t, c, frame(18, 99, 7, []byte{0xde, 0xad}))
	body := readFrame(t, c)
	if corr := int32(binary.BigEndian.Uint32(body)); corr != 7 {
		t.Fatalf("correlation id %d, want 7", corr)
	}
	v0 := kmsg.NewPtrApiVersionsResponse()
	v0.Version = 0
	if err := v0.ReadFrom(body[4:]); err != nil {
		t.Fatal(err)
	}
	if v0.ErrorCode != kerr.UnsupportedVersion.Code || len(v0.ApiKeys) != 1 || v0.ApiKeys[0].ApiKey != 18 || v0.ApiKeys[0].MaxVersion != 4 {
		t.Fatalf("KIP-511 answer %+v", v0)
	}
}

// TestServer_BadInputClosesTheConnectionOnly: a frame over the size limit,
// a body that does not parse, an API or version not served, a header cut
// short: each closes its own connection, and the listener serves the next
// client as before.
func TestServer_BadInputClosesTheConnectionOnly(t *testing.T) {
	meta := newFakeMeta(t)
	s := startServer(t, 1, meta, NewMemoryBackend(), func(c *Config) { c.MaxRequestSize = 1 << 20 })
	meta.createTopic("t", []int32{1})

	huge := make([]byte, 4)
	binary.BigEndian.PutUint32(huge, 1<<30)
	negative := []byte{0xff, 0xff, 0xff, 0xf0}
	tests := []struct {
		name  string
		bytes []byte
	}{
		{"a 1 GiB frame", huge},
		{"a negative size", negative},
		{"a header cut short", sized([]byte{0, 3, 0})},
		{"an API not served whose body does not parse (JoinGroup)", frame(11, 5, 1, nil)},
		{"a version not served (Fetch v3)", frame(1, 3, 1, nil)},
		{"an unknown API key", frame(999, 0, 1, nil)},
		{"a Metadata body that does not parse", frame(3, 1, 1, []byte{0x7f, 0xff, 0xff, 0xff})},
		{"a DescribeConfigs whose resource count lies", frame(32, 1, 1, []byte{0x7f, 0xff, 0xff, 0xff})},
		{"an IncrementalAlterConfigs whose config count lies", frame(44, 0, 1, []byte{0, 0, 0, 1, 2, 0, 1, 't', 0x7f, 0xff, 0xff, 0xff})},
		{"a Produce whose partition count lies", frame(0, 7, 1, []byte{0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 't', 0x7f, 0xff, 0xff, 0xff})},
		// The controller admin APIs (flexible but ElectLeaders v1: a 0 for
		// the header's tags, then a topic count that lies).
		{"an ElectLeaders whose topic count lies", frame(43, 1, 1, []byte{0, 0x7f, 0xff, 0xff, 0xff})},
		{"an AlterPartitionReassignments whose topic count lies", frame(45, 0, 1, []byte{0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})},
		{"a ListPartitionReassignments whose topic count lies", frame(46, 0, 1, []byte{0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})},
		{"a DescribeQuorum whose topic count lies", frame(55, 2, 1, []byte{0, 0xff, 0xff, 0xff, 0xff, 0x0f})},
		{"an UpdateFeatures whose update count lies", frame(57, 1, 1, []byte{0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, s.Addr())
			if _, err := c.Write(tt.bytes); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(testTimeout))
			if n, err := c.Read(make([]byte, 1)); err == nil {
				t.Fatalf("read %d bytes of an answer; want the connection closed", n)
			} else if !errors.Is(err, io.EOF) && !isReset(err) {
				t.Fatalf("read: %v; want the connection closed", err)
			}
		})
	}
	// Still serving.
	cl := newClient(t, []string{s.Addr()})
	if md := metadataOf(t, cl, "t"); len(md.Topics) != 1 || md.Topics[0].ErrorCode != 0 {
		t.Fatalf("metadata after the bad input: %+v", md.Topics)
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

// TestServer_CreateAndDeleteTopicsForwarded: kgo's admin requests reach
// the controller through the listener, and their refusals come back as
// Kafka errors.
func TestServer_CreateAndDeleteTopicsForwarded(t *testing.T) {
	meta := newFakeMeta(t)
	s := startServer(t, 1, meta, NewMemoryBackend(), nil)
	cl := newClient(t, []string{s.Addr()})
	create := func(name string, partitions int32, rf int16) kmsg.CreateTopicsResponseTopic {
		t.Helper()
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, rf
		req.Topics = append(req.Topics, rt)
		req.TimeoutMillis = 5000
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0]
	}
	if got := create("fresh", 3, 1); got.ErrorCode != 0 || got.NumPartitions != 3 || got.ReplicationFactor != 1 {
		t.Fatalf("create: %+v (%v)", got, kerr.ErrorForCode(got.ErrorCode))
	}
	if md := metadataOf(t, cl, "fresh"); md.Topics[0].ErrorCode != 0 || len(md.Topics[0].Partitions) != 3 {
		t.Fatalf("metadata right after the create: %+v", md.Topics[0])
	}
	for _, tt := range []struct {
		name string
		part int32
		rf   int16
		want *kerr.Error
	}{
		{"fresh", 1, 1, kerr.TopicAlreadyExists},
		{"bad/name", 1, 1, kerr.InvalidTopicException},
		{"too-many-replicas", 1, 9, kerr.InvalidReplicationFactor},
		{"no-partitions", 0, 1, kerr.InvalidPartitions},
	} {
		if got := create(tt.name, tt.part, tt.rf); got.ErrorCode != tt.want.Code {
			t.Errorf("create %s: %v, want %v", tt.name, kerr.ErrorForCode(got.ErrorCode), tt.want)
		}
	}
	del := kmsg.NewPtrDeleteTopicsRequest()
	for _, name := range []string{"fresh", "missing"} {
		dt := kmsg.NewDeleteTopicsRequestTopic()
		dt.Topic = kmsg.StringPtr(name)
		del.Topics = append(del.Topics, dt)
	}
	del.TimeoutMillis = 5000
	dresp, err := del.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(dresp.Topics) != 2 || dresp.Topics[0].ErrorCode != 0 || dresp.Topics[1].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("delete: %+v", dresp.Topics)
	}
	if _, ok := meta.Image().Topic("fresh"); ok {
		t.Fatal("the topic is still there")
	}
	// Without TLS a client is nobody in particular: every request forwarded
	// says so, for a controller with TLS to refuse.
	for _, p := range meta.forwardedPrincipals() {
		if p != rpc.PlaintextPrincipal {
			t.Fatalf("principals forwarded: %q; want each %q", meta.forwardedPrincipals(), rpc.PlaintextPrincipal)
		}
	}
}

// TestServer_DescribeCluster lists every live broker's Kafka listener.
func TestServer_DescribeCluster(t *testing.T) {
	meta := newFakeMeta(t)
	s := startServer(t, 1, meta, NewMemoryBackend(), nil)
	meta.addBroker(2, "127.0.0.1:19092")
	cl := newClient(t, []string{s.Addr()})
	resp, err := kmsg.NewPtrDescribeClusterRequest().RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != 0 || resp.ClusterID != "kafka-test" || resp.ControllerID != 1 || len(resp.Brokers) != 2 ||
		resp.Brokers[1].NodeID != 2 || resp.Brokers[1].Port != 19092 {
		t.Fatalf("DescribeCluster = %+v", resp)
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// frame is a request frame: size, header v1 (client id "t"), body.
func frame(key, version int16, corr int32, body []byte) []byte {
	var h bytes.Buffer
	binary.Write(&h, binary.BigEndian, key)
	binary.Write(&h, binary.BigEndian, version)
	binary.Write(&h, binary.BigEndian, corr)
	binary.Write(&h, binary.BigEndian, int16(1))
	h.WriteByte('t')
	h.Write(body)
	return sized(h.Bytes())
}

func sized(b []byte) []byte {
	out := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
	return append(out, b...)
}

func writeFrame(t *testing.T, c net.Conn, f []byte) {
	t.Helper()
	if _, err := c.Write(f); err != nil {
		t.Fatal(err)
	}
}

func readFrame(t testing.TB, c net.Conn) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(testTimeout))
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatal(err)
	}
	return body
}

// TestServer_FetchNeverAnswersNullRecords: a partition with nothing to
// return, at the high watermark or refused, is answered with empty records
// (length 0), as Kafka answers it, never null (length -1): librdkafka 2.0
// takes null for a bad message and fetches again, so kcat -e never ended.
// Fetch v11 is librdkafka's version, v12 the first flexible one.
func TestServer_FetchNeverAnswersNullRecords(t *testing.T) {
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	s := startServer(t, 1, meta, backend, nil)
	meta.createTopic("empty", []int32{1})
	for _, version := range []int16{4, 11, 12} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			req := kmsg.NewPtrFetchRequest()
			req.Version, req.ReplicaID, req.MaxBytes = version, -1, 1<<20
			for _, topic := range []string{"empty", "nope"} {
				rt := kmsg.NewFetchRequestTopic()
				rt.Topic = topic
				rp := kmsg.NewFetchRequestTopicPartition()
				rp.PartitionMaxBytes = 1 << 20
				rt.Partitions = append(rt.Partitions, rp)
				req.Topics = append(req.Topics, rt)
			}
			resp := kmsg.NewPtrFetchResponse()
			rawRequest(t, s.Addr(), req, resp)
			if len(resp.Topics) != 2 {
				t.Fatalf("answer for %d topics, want 2", len(resp.Topics))
			}
			for i, want := range []int16{0, kerr.UnknownTopicOrPartition.Code} {
				p := resp.Topics[i].Partitions[0]
				if p.ErrorCode != want || p.RecordBatches == nil || len(p.RecordBatches) != 0 {
					t.Errorf("%s: error %v, records %v (nil: %t); want %v, empty, not null",
						resp.Topics[i].Topic, kerr.ErrorForCode(p.ErrorCode), p.RecordBatches, p.RecordBatches == nil, kerr.ErrorForCode(want))
				}
			}
		})
	}
}

// gatedBackend is a MemoryBackend that appends at once and holds each
// acks=all commit until the test opens its gate.
type gatedBackend struct {
	*MemoryBackend
	mu        sync.Mutex
	appended  []string // the batches' values, in append order
	gates     map[string]chan struct{}
	committed atomic.Int32
}

func (b *gatedBackend) gate(value string) chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gates[value] == nil {
		b.gates[value] = make(chan struct{})
	}
	return b.gates[value]
}

func (b *gatedBackend) ProduceAppend(topic string, partition int32, batch []byte, acks int16) (broker.ProduceResult, func(context.Context, time.Duration) error, error) {
	res, _, err := b.MemoryBackend.ProduceAppend(topic, partition, batch, acks)
	if err != nil {
		return res, nil, err
	}
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(batch); err != nil {
		return res, nil, err
	}
	var rec kmsg.Record
	if err := rec.ReadFrom(rb.Records); err != nil {
		return res, nil, err
	}
	value := string(rec.Value)
	b.mu.Lock()
	b.appended = append(b.appended, value)
	b.mu.Unlock()
	gate := b.gate(value)
	return res, func(ctx context.Context, _ time.Duration) error {
		defer b.committed.Add(1)
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return kerr.RequestTimedOut
		}
	}, nil
}

// TestServer_ProducePipelined: a connection's second acks=all produce is
// appended while the first still waits to commit, and the answers come in
// the order of the requests even when the second commits first.
func TestServer_ProducePipelined(t *testing.T) {
	meta := newFakeMeta(t)
	backend := &gatedBackend{MemoryBackend: NewMemoryBackend(), gates: map[string]chan struct{}{}}
	reg := prometheus.NewRegistry()
	s := startServer(t, 1, meta, backend, func(c *Config) { c.Metrics = reg })
	meta.createTopic("pipe", []int32{1})
	c := dial(t, s.Addr())
	produce := func(corr int32, value string) {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = 7, -1, 10_000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "pipe"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = batchOf([]byte(value))
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		writeFrame(t, c, frame(req.Key(), req.Version, corr, req.AppendTo(nil)))
	}
	produce(1, "first")
	produce(2, "second")
	poll.Until(t, testTimeout, "both batches appended, the first still uncommitted", func() bool {
		backend.mu.Lock()
		defer backend.mu.Unlock()
		return len(backend.appended) == 2
	})
	backend.mu.Lock()
	if got := strings.Join(backend.appended, ","); got != "first,second" {
		t.Fatalf("appended %s, want first,second", got)
	}
	backend.mu.Unlock()
	// The second commits first; its answer must still come second.
	close(backend.gate("second"))
	poll.Until(t, testTimeout, "the second batch's commit", func() bool { return backend.committed.Load() == 1 })
	close(backend.gate("first"))
	for i, want := range []int64{0, 1} {
		raw := readFrame(t, c)
		if corr := int32(binary.BigEndian.Uint32(raw)); corr != int32(i+1) {
			t.Fatalf("answer %d has correlation id %d, want %d", i, corr, i+1)
		}
		resp := kmsg.NewPtrProduceResponse()
		resp.SetVersion(7)
		if err := resp.ReadFrom(raw[4:]); err != nil {
			t.Fatal(err)
		}
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 || p.BaseOffset != want {
			t.Fatalf("answer %d: error %d, base offset %d; want 0, %d", i, p.ErrorCode, p.BaseOffset, want)
		}
	}
	// Each answer is timed once written, and each acks=all produce's wait
	// for its commit; the first waited at least until its gate opened.
	poll.Until(t, testTimeout, "both produces timed", func() bool {
		return histogramCount(t, reg, MetricRequestDuration, "Produce") == 2
	})
	if n := histogramCount(t, reg, MetricProduceCommitWait, ""); n != 2 {
		t.Fatalf("%s counted %d produces, want 2", MetricProduceCommitWait, n)
	}
	if n := histogramCount(t, reg, MetricRequestDuration, "Metadata"); n != 0 {
		t.Fatalf("%s counted %d Metadata requests, want none", MetricRequestDuration, n)
	}
}

// histogramCount is the sample count of the histogram name in reg, of the
// series whose request label is request ("": unlabelled).
func histogramCount(t *testing.T, reg *prometheus.Registry, name, request string) uint64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			label := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "request" {
					label = l.GetValue()
				}
			}
			if label == request {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}
