package controller

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/proto/keelpb"
)

func newTestPushCache() *pushCache {
	return newPushCache(newMetrics())
}

// testPush is the push of one entry after prev, with size bytes of data.
func testPush(prev uint64, size int) *keelpb.MetadataPush {
	return &keelpb.MetadataPush{ControllerEpoch: 1, ControllerId: 1, Body: &keelpb.MetadataPush_Entries{Entries: &keelpb.MetadataEntries{
		Entries: []*keelpb.MetadataEntry{{PrevOffset: prev, Offset: prev + 1, Term: 1, Data: bytes.Repeat([]byte{byte(prev)}, size)}},
	}}}
}

// sendAsGRPC does with p what gRPC's SendMsg does with a WireMarshaler: it
// takes the encoding with a reference, writes it (here: decodes it, as the
// broker will) and frees it.
func sendAsGRPC(t testing.TB, p *sharedPush) *keelpb.MetadataPush {
	data, err := p.enc.MarshalWire()
	if err != nil {
		t.Fatal(err)
	}
	defer data.Free()
	var m keelpb.MetadataPush
	if err := proto.Unmarshal(data.Materialize(), &m); err != nil {
		t.Fatal(err)
	}
	return &m
}

func TestPushCache(t *testing.T) {
	key := func(prev uint64) pushKey { return pushKey{epoch: 1, prev: prev, last: prev + 1} }
	tests := []struct {
		name string
		// run acquires (and sends, and releases) pushes; build counts the
		// encodings the cache asked for.
		run         func(t *testing.T, pc *pushCache, acquire func(prev uint64) *keelpb.MetadataPush)
		wantEncodes int
	}{
		{
			name: "streams at one position share one encoding",
			run: func(t *testing.T, pc *pushCache, acquire func(uint64) *keelpb.MetadataPush) {
				var wg sync.WaitGroup
				for range 16 {
					wg.Go(func() { acquire(7) })
				}
				wg.Wait()
			},
			wantEncodes: 1,
		},
		{
			name: "streams at other positions get their own pushes",
			run: func(t *testing.T, pc *pushCache, acquire func(uint64) *keelpb.MetadataPush) {
				for _, prev := range []uint64{3, 4, 3, 5, 4} {
					if m := acquire(prev); m.GetEntries().GetEntries()[0].GetPrevOffset() != prev {
						t.Fatalf("the push after %d carries %v", prev, m)
					}
				}
			},
			wantEncodes: 3,
		},
		{
			name: "a stream further behind than the cache encodes its own",
			run: func(t *testing.T, pc *pushCache, acquire func(uint64) *keelpb.MetadataPush) {
				for prev := range uint64(maxSharedPushes + 1) {
					acquire(prev)
				}
				acquire(0)                   // evicted: encoded again
				acquire(maxSharedPushes / 2) // still cached
			},
			wantEncodes: maxSharedPushes + 2,
		},
		{
			name: "after the leadership no push is kept",
			run: func(t *testing.T, pc *pushCache, acquire func(uint64) *keelpb.MetadataPush) {
				acquire(1)
				pc.close()
				acquire(1)
				acquire(1)
				if len(pc.byKey) != 0 || len(pc.order) != 0 {
					t.Fatalf("closed cache holds %d pushes", len(pc.byKey))
				}
			},
			wantEncodes: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pc := newTestPushCache()
			var builds atomic.Int32
			acquire := func(prev uint64) *keelpb.MetadataPush {
				p, err := pc.acquire(key(prev), func() *keelpb.MetadataPush {
					builds.Add(1)
					return testPush(prev, 1000)
				})
				if err != nil {
					t.Error(err)
					return nil
				}
				defer pc.release(p)
				return sendAsGRPC(t, p)
			}
			tt.run(t, pc, acquire)
			if got := int(builds.Load()); got != tt.wantEncodes {
				t.Errorf("built %d pushes, want %d", got, tt.wantEncodes)
			}
			if got := int(counterValue(pc.metrics.pushEncodes)); got != tt.wantEncodes {
				t.Errorf("encodes counter %d, want %d", got, tt.wantEncodes)
			}
			pc.close()
		})
	}
}

// BenchmarkPushFanOut sends pushes of a 512 KiB batch to 100 broker
// streams at the same position, as gRPC would (a reference taken, the
// bytes written, freed): encoded once and shared (shared), against one
// encoding per stream (per_stream, as before). An op is one push to one
// broker, so B/op is what each broker's push allocated on the controller.
func BenchmarkPushFanOut(b *testing.B) {
	const brokers = 100
	push := testPush(1, 512<<10)
	sink := make([]byte, 0, 1<<20)
	b.Run("shared", func(b *testing.B) {
		pc := newTestPushCache()
		defer pc.close()
		b.ReportAllocs()
		for i := range b.N {
			k := pushKey{epoch: 1, prev: uint64(i / brokers), last: uint64(i/brokers) + 1}
			p, err := pc.acquire(k, func() *keelpb.MetadataPush { return push })
			if err != nil {
				b.Fatal(err)
			}
			data, _ := p.enc.MarshalWire()
			sink = sink[:0]
			for _, buf := range data {
				sink = append(sink, buf.ReadOnlyData()...)
			}
			data.Free()
			pc.release(p)
		}
		b.ReportMetric(counterValue(pc.metrics.pushEncodes)/float64(b.N), "encodes/op")
	})
	b.Run("per_stream", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			data, err := proto.Marshal(push)
			if err != nil {
				b.Fatal(err)
			}
			sink = append(sink[:0], data...)
		}
		b.ReportMetric(1, "encodes/op")
	})
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
