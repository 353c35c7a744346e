package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/acl"
	"github.com/keel-dev/keel/internal/poll"
)

// hostileFrames are request frames (header v1, or v2 for flexible
// versions) with size/8 of the entries that cost the most once decoded and
// answered: empty topics or partitions.
func hostileFrames(size int) map[string][]byte {
	fetchTopics := kmsg.NewPtrFetchRequest()
	fetchTopics.Version = 12
	fetchPartitions := kmsg.NewPtrFetchRequest()
	fetchPartitions.Version = 12
	fetchPartitions.Topics = []kmsg.FetchRequestTopic{{Topic: "t"}}
	metadata := kmsg.NewPtrMetadataRequest()
	metadata.Version = 12
	listOffsets := kmsg.NewPtrListOffsetsRequest()
	listOffsets.Version = 7
	listOffsets.Topics = []kmsg.ListOffsetsRequestTopic{{Topic: "t"}}
	for i := 0; i < size/8; i++ {
		fetchTopics.Topics = append(fetchTopics.Topics, kmsg.FetchRequestTopic{Partitions: []kmsg.FetchRequestTopicPartition{{}}})
		fetchPartitions.Topics[0].Partitions = append(fetchPartitions.Topics[0].Partitions, kmsg.FetchRequestTopicPartition{Partition: int32(i)})
		metadata.Topics = append(metadata.Topics, kmsg.MetadataRequestTopic{Topic: kmsg.StringPtr("")})
		listOffsets.Topics[0].Partitions = append(listOffsets.Topics[0].Partitions, kmsg.ListOffsetsRequestTopicPartition{Partition: int32(i)})
	}
	out := map[string][]byte{}
	for name, req := range map[string]kmsg.Request{"fetch, empty topics": fetchTopics, "fetch, one topic's partitions": fetchPartitions,
		"metadata, empty topics": metadata, "list offsets": listOffsets} {
		body := req.AppendTo(nil)
		hdr := []byte{0, byte(req.Key()), 0, byte(req.GetVersion()), 0, 0, 0, 1, 0, 1, 't'}
		if req.IsFlexible() {
			hdr = append(hdr, 0)
		}
		out[name] = append(hdr, body...)
	}
	return out
}

// TestLimits_DecodeAmplification measures what a request other than a
// produce costs decoded and answered, per byte of its frame: the bytes
// allocated from reading the frame to encoding its answer, and those still
// held with the answer ready. otherRequestCost must cover the worst.
func TestLimits_DecodeAmplification(t *testing.T) {
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	s := startServer(t, 1, meta, backend, nil)
	meta.createTopic("t", []int32{1})
	for name, f := range hostileFrames(64 << 10) {
		t.Run(name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			a, err := s.handleFrame(context.Background(), &conn{principal: acl.Anonymous, super: true}, f)
			if err != nil {
				t.Fatal(err)
			}
			encoded := a.resp.AppendTo(nil)
			runtime.GC()
			runtime.ReadMemStats(&after)
			allocated := float64(after.TotalAlloc-before.TotalAlloc) / float64(len(f))
			held := (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(len(f))
			t.Logf("%d-byte frame: %.1f bytes allocated and %.1f held per byte, answer %d bytes", len(f), allocated, held, len(encoded))
			runtime.KeepAlive(a)
			if allocated > otherRequestCost {
				t.Errorf("%s costs %.1f bytes per byte of its frame; otherRequestCost is %d", name, allocated, otherRequestCost)
			}
		})
	}
}

// produceFrame is an acks=all Produce v7 of one batch holding value to
// topic's partition 0.
func produceFrame(topic string, corr int32, value string) []byte {
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 7, -1, 10_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batchOf([]byte(value))
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return frame(req.Key(), req.Version, corr, req.AppendTo(nil))
}

// TestServer_RequestBudgetBackPressure: with a broker budget smaller than
// one request, a request takes the whole budget, and another connection's
// request is not read until the first is answered (it waits, counted);
// a connection that closes while it waits holds nothing once its turn is
// over, and every byte comes back once the answers are written.
func TestServer_RequestBudgetBackPressure(t *testing.T) {
	meta := newFakeMeta(t)
	backend := &gatedBackend{MemoryBackend: NewMemoryBackend(), gates: map[string]chan struct{}{}}
	reg := prometheus.NewRegistry()
	s := startServer(t, 1, meta, backend, func(c *Config) { c.Metrics = reg; c.QueuedMaxRequestBytes = 1 })
	meta.createTopic("bp", []int32{1})
	appended := func() string {
		backend.mu.Lock()
		defer backend.mu.Unlock()
		return strings.Join(backend.appended, ",")
	}
	a, b, gone := dial(t, s.Addr()), dial(t, s.Addr()), dial(t, s.Addr())
	writeFrame(t, a, produceFrame("bp", 1, "first"))
	poll.Until(t, testTimeout, "the first batch appended", func() bool { return appended() == "first" })
	if got := s.produceBudget.inUse(); got != 1 {
		t.Fatalf("%d bytes of the budget in use with one request held; want all of it, 1", got)
	}
	writeFrame(t, gone, produceFrame("bp", 1, "gone"))
	writeFrame(t, b, produceFrame("bp", 1, "second"))
	poll.Until(t, testTimeout, "two connections waiting for the budget", func() bool {
		return waiters(s.produceBudget) == 2
	})
	gone.Close()
	if got := appended(); got != "first" {
		t.Fatalf("appended %s while the budget was held; want first only", got)
	}
	close(backend.gate("first"))
	close(backend.gate("second"))
	readFrame(t, a)
	readFrame(t, b)
	// gone's request was sent before its close: it may be read in its
	// turn, before or after second's.
	if got := appended(); got != "first,second" && got != "first,gone,second" && got != "first,second,gone" {
		t.Fatalf("appended %s; want first, then second (and maybe gone)", got)
	}
	poll.Until(t, testTimeout, "the budget free", func() bool { return s.produceBudget.inUse() == 0 })
	if n := counterValue(t, reg, MetricRequestBytesWaits); n < 1 {
		t.Fatalf("%s = %v; want the waits counted", MetricRequestBytesWaits, n)
	}
}

func waiters(b *budget) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.waiters.Len()
}

// counterValue is the value of the unlabelled counter name in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// TestServer_OtherRequestOverLimitClosed: a request other than a produce
// over MaxOtherRequestSize closes its connection before its body is sent
// (the server reads only its size and API key), and a produce of the
// same size is read.
func TestServer_OtherRequestOverLimitClosed(t *testing.T) {
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	s := startServer(t, 1, meta, backend, func(c *Config) { c.MaxOtherRequestSize = 1 << 10 })
	meta.createTopic("big", []int32{1})
	c := dial(t, s.Addr())
	// A 100 MiB Fetch frame: its size and header only.
	head := binary.BigEndian.AppendUint32(nil, 100<<20)
	head = append(head, 0, 1, 0, 12, 0, 0, 0, 1)
	writeFrame(t, c, head)
	_ = c.SetReadDeadline(time.Now().Add(testTimeout))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes; want the connection closed", n)
	} else if !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("want the connection closed, got %v", err)
	}
	// A produce over the other requests' limit is still served.
	p := dial(t, s.Addr())
	writeFrame(t, p, produceFrame("big", 1, strings.Repeat("x", 2<<10)))
	raw := readFrame(t, p)
	resp := kmsg.NewPtrProduceResponse()
	resp.SetVersion(7)
	if err := resp.ReadFrom(raw[4:]); err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("a 2 KiB produce: %v, %+v", err, resp)
	}
}
