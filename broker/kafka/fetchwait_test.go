package kafka

import (
	"context"
	"encoding/binary"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/internal/poll"
)

// fetchOf is a consumer's Fetch v11 (librdkafka's version) of each
// partition in parts from offset 0, waiting up to maxWait for minBytes.
func fetchOf(maxWait time.Duration, minBytes int32, parts ...tp) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.ReplicaID, req.MaxBytes = 11, -1, 1<<20
	req.MaxWaitMillis, req.MinBytes = int32(maxWait/time.Millisecond), minBytes
	for _, p := range parts {
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = p.topic
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = p.partition, 1<<20, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
	}
	return req
}

// gaugeValue is the value of the unlabelled gauge name in reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s in the registry", name)
	return 0
}

// TestFetchWait_Answers: when a fetch that found too little is answered,
// and with what (Kafka's DelayedFetch: MinBytes over all its partitions,
// a failure, or the wait's end, whichever comes first; the broker's cap on
// the wait, whatever the client asks).
func TestFetchWait_Answers(t *testing.T) {
	one := batchOf([]byte("v"))
	a0, a1 := tp{"a", 0}, tp{"a", 1}
	tests := []struct {
		name    string
		cap     time.Duration // Config.FetchMaxWait
		before  []tp          // a batch produced to each before the fetch
		req     *kmsg.FetchRequest
		during  func(t *testing.T, b *MemoryBackend) // once the fetch watches
		within  time.Duration                        // answered in less than this
		atLeast time.Duration                        // and not sooner
		want    map[tp]int                           // batches answered per partition
		errs    map[tp]int16
	}{
		{name: "data already there", cap: time.Hour, before: []tp{a0},
			req: fetchOf(24*time.Hour, 1, a0, a1), within: 5 * time.Second, want: map[tp]int{a0: 1}},
		{name: "a day asked, the broker's cap answers", cap: 300 * time.Millisecond,
			req: fetchOf(24*time.Hour, 1, a0, a1), within: 5 * time.Second, atLeast: 250 * time.Millisecond},
		{name: "the client's shorter wait answers", cap: time.Hour,
			req: fetchOf(300*time.Millisecond, 1, a0), within: 5 * time.Second, atLeast: 250 * time.Millisecond},
		{name: "no wait asked", cap: time.Hour, req: fetchOf(0, 1, a0), within: 5 * time.Second},
		{name: "a record while waiting answers at once", cap: time.Hour,
			req:    fetchOf(24*time.Hour, 1, a0, a1),
			during: func(t *testing.T, b *MemoryBackend) { mustAppend(t, b, a1, one) },
			within: 5 * time.Second, want: map[tp]int{a1: 1}},
		{name: "MinBytes are counted over every partition", cap: time.Hour,
			before: []tp{a0}, req: fetchOf(24*time.Hour, int32(2*len(one)), a0, a1),
			during: func(t *testing.T, b *MemoryBackend) { mustAppend(t, b, a1, one) },
			within: 5 * time.Second, want: map[tp]int{a0: 1, a1: 1}},
		{name: "MinBytes not reached waits to the end", cap: 300 * time.Millisecond,
			req:    fetchOf(24*time.Hour, int32(2*len(one)), a0, a1),
			during: func(t *testing.T, b *MemoryBackend) { mustAppend(t, b, a1, one) },
			within: 5 * time.Second, atLeast: 250 * time.Millisecond, want: map[tp]int{a1: 1}},
		{name: "a failure while waiting answers at once", cap: time.Hour,
			req:    fetchOf(24*time.Hour, 1, a0, a1),
			during: func(t *testing.T, b *MemoryBackend) { b.setRefusal("a", 1, kerr.NotLeaderForPartition) },
			within: 5 * time.Second, errs: map[tp]int16{a1: kerr.NotLeaderForPartition.Code}},
		{name: "a partition named 1,000 times is watched once", cap: time.Hour,
			req: fetchOf(24*time.Hour, 1, append(repeat(a0, 1000), a1)...),
			during: func(t *testing.T, b *MemoryBackend) {
				if n := b.watching(); n != 2 {
					t.Errorf("%d watches, want 2", n)
				}
				mustAppend(t, b, a1, one)
			},
			within: 5 * time.Second, want: map[tp]int{a1: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			meta, backend := newFakeMeta(t), NewMemoryBackend()
			s := startServer(t, 1, meta, backend, func(c *Config) { c.FetchMaxWait = tt.cap })
			meta.createTopic("a", []int32{1}, []int32{1})
			for _, p := range tt.before {
				mustAppend(t, backend, p, one)
			}
			if tt.during != nil {
				done := make(chan struct{})
				defer func() { <-done }()
				go func() {
					defer close(done)
					if err := poll.Wait(context.Background(), testTimeout, poll.Interval, "the fetch to watch", func() (bool, error) {
						return backend.watching() > 0, nil
					}); err != nil {
						t.Error(err)
						return
					}
					tt.during(t, backend)
				}()
			}
			start := time.Now()
			resp := kmsg.NewPtrFetchResponse()
			rawRequest(t, s.Addr(), tt.req, resp)
			took := time.Since(start)
			if took >= tt.within || took < tt.atLeast {
				t.Errorf("answered in %v, want [%v, %v)", took, tt.atLeast, tt.within)
			}
			for _, rt := range resp.Topics {
				for _, p := range rt.Partitions {
					k := tp{rt.Topic, p.Partition}
					if got := batchesIn(p.RecordBatches); got != tt.want[k] && p.ErrorCode == 0 {
						t.Errorf("%v: %d batches, want %d", k, got, tt.want[k])
					}
					if p.ErrorCode != tt.errs[k] {
						t.Errorf("%v: %v, want %v", k, kerr.ErrorForCode(p.ErrorCode), kerr.ErrorForCode(tt.errs[k]))
					}
				}
			}
			poll.Until(t, testTimeout, "the watches to stop", func() bool { return backend.watching() == 0 })
		})
	}
}

func repeat(p tp, n int) []tp {
	out := make([]tp, n)
	for i := range out {
		out[i] = p
	}
	return out
}

func mustAppend(t *testing.T, b *MemoryBackend, p tp, batch []byte) {
	t.Helper()
	if _, _, err := b.ProduceAppend(p.topic, p.partition, batch, 1); err != nil {
		t.Error(err)
	}
}

// batchesIn counts the whole v2 batches in records.
func batchesIn(records []byte) int {
	n := 0
	for len(records) >= batchHeaderSize {
		size := int(int32(binary.BigEndian.Uint32(records[batchLengthAt:]))) + 12
		if size > len(records) {
			break
		}
		records = records[size:]
		n++
	}
	return n
}

// TestFetchWait_EndsWithConnection: fetches waiting on thousands of
// partitions each hold one goroutine, and a client that closes its
// connections releases them at once, whatever wait they asked for (they
// once held a goroutine per partition for up to 24.8 days).
func TestFetchWait_EndsWithConnection(t *testing.T) {
	const conns, partitions = 4, 5000
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	reg := prometheus.NewRegistry()
	s := startServer(t, 1, meta, backend, func(c *Config) { c.FetchMaxWait, c.Metrics = time.Hour, reg })
	replicas := make([][]int32, partitions)
	parts := make([]tp, partitions)
	for i := range replicas {
		replicas[i], parts[i] = []int32{1}, tp{"many", int32(i)}
	}
	meta.createTopic("many", replicas...)
	req := fetchOf(24*time.Hour, 1, parts...)
	body := frame(req.Key(), req.GetVersion(), 1, req.AppendTo(nil))
	before := runtime.NumGoroutine()
	var cs []net.Conn
	for range conns {
		c := dial(t, s.Addr())
		writeFrame(t, c, body)
		cs = append(cs, c)
	}
	poll.Until(t, testTimeout, "every fetch to wait", func() bool {
		return gaugeValue(t, reg, MetricFetchWaits) == conns && backend.watching() == conns*partitions
	})
	// A connection's reader, writer and waiter: no goroutine per partition.
	if n := runtime.NumGoroutine() - before; n > conns*4 {
		t.Errorf("%d fetches of %d partitions waiting take %d goroutines, want at most %d", conns, partitions, n, conns*4)
	}
	closed := time.Now()
	for _, c := range cs {
		c.Close()
	}
	poll.Until(t, testTimeout, "the waits to end", func() bool { return gaugeValue(t, reg, MetricFetchWaits) == 0 })
	// The cap is an hour: only the close ends the waits sooner. The bound
	// leaves room for a loaded machine (they end in milliseconds).
	took := time.Since(closed)
	t.Logf("the waits ended %v after their connections closed", took)
	if took > 10*time.Second {
		t.Errorf("the waits ended %v after their connections closed, want within 10s (the cap is an hour)", took)
	}
	if n := backend.watching(); n != 0 {
		t.Errorf("%d watches left", n)
	}
	poll.Until(t, testTimeout, "the connections' goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
	// The listener still serves.
	resp := kmsg.NewPtrFetchResponse()
	rawRequest(t, s.Addr(), fetchOf(0, 1, parts[0]), resp)
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("a fetch after: %v", kerr.ErrorForCode(code))
	}
}

// TestFetchWait_AnswersInOrder: a connection's requests after a waiting
// fetch are read (so its close is seen) but answered after it, in order.
func TestFetchWait_AnswersInOrder(t *testing.T) {
	meta, backend := newFakeMeta(t), NewMemoryBackend()
	s := startServer(t, 1, meta, backend, func(c *Config) { c.FetchMaxWait = time.Hour })
	meta.createTopic("a", []int32{1})
	req := fetchOf(24*time.Hour, 1, tp{"a", 0})
	c := dial(t, s.Addr())
	writeFrame(t, c, frame(req.Key(), req.GetVersion(), 1, req.AppendTo(nil)))
	writeFrame(t, c, frame(apiVersionsKey, 0, 2, nil))
	poll.Until(t, testTimeout, "the fetch to watch", func() bool { return backend.watching() == 1 })
	_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1)); n > 0 || err == nil {
		t.Fatalf("an answer before the fetch had anything: %d bytes, %v", n, err)
	}
	mustAppend(t, backend, tp{"a", 0}, batchOf([]byte("v")))
	for _, want := range []int32{1, 2} {
		if corr := int32(binary.BigEndian.Uint32(readFrame(t, c))); corr != want {
			t.Fatalf("answer to request %d, want %d", corr, want)
		}
	}
}
