package kafka

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/broker/batchcheck"
)

// TestServer_RefusesPoisonBatch: a partition whose batch does not decode
// (records of garbage under a good CRC) gets INVALID_RECORD with the
// record at fault and a message (Produce v8+), is counted by reason, and
// reaches no log; the request's other partition is appended as usual.
func TestServer_RefusesPoisonBatch(t *testing.T) {
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	reg := prometheus.NewRegistry()
	s := startServer(t, 1, meta, backend, func(c *Config) { c.Metrics = reg })
	meta.createTopic("mine", []int32{1}, []int32{1})
	cl := newClient(t, []string{s.Addr()})
	seedMetadata(t, cl)

	poison := batchOf([]byte("a value that is garbage once its bytes are"))
	for i := 61; i < len(poison); i++ {
		poison[i] = 0xff
	}
	binary.BigEndian.PutUint32(poison[17:], crc32c(poison[21:]))

	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "mine"
	for p, records := range [][]byte{batchOf([]byte("good")), poison} {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = int32(p), records
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	raw, err := cl.Broker(1).Request(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	resp := raw.(*kmsg.ProduceResponse)
	if resp.Version < 8 {
		t.Fatalf("produced at v%d: the test wants v8+ (record errors)", resp.Version)
	}
	good, bad := resp.Topics[0].Partitions[0], resp.Topics[0].Partitions[1]
	if good.ErrorCode != 0 || good.BaseOffset != 0 {
		t.Fatalf("the good partition: %v at offset %d, want no error at 0", kerr.ErrorForCode(good.ErrorCode), good.BaseOffset)
	}
	if bad.ErrorCode != kerr.InvalidRecord.Code || bad.BaseOffset != -1 {
		t.Fatalf("the poisoned partition: %v at offset %d, want INVALID_RECORD at -1", kerr.ErrorForCode(bad.ErrorCode), bad.BaseOffset)
	}
	if bad.ErrorMessage == nil || len(bad.ErrorRecords) != 1 || bad.ErrorRecords[0].RelativeOffset != 0 {
		t.Fatalf("the poisoned partition's record errors %+v, message %v: want record 0 named", bad.ErrorRecords, bad.ErrorMessage)
	}
	t.Logf("the poisoned partition: %s", *bad.ErrorMessage)
	if n := backend.appends.Load(); n != 1 {
		t.Fatalf("%d batches appended, want the good one only", n)
	}
	byReason := refusals(t, reg)
	if len(byReason) != len(batchcheck.Reasons) || byReason["records"] != 1 {
		t.Fatalf("%s: %v, want records at 1 and every other reason (%d in all) at 0", MetricProduceRefused, byReason, len(batchcheck.Reasons))
	}
}

// refusals is MetricProduceRefused in reg, by reason.
func refusals(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	return counters(t, reg, MetricProduceRefused, "reason")
}
