package fsm

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/keel-dev/keel/proto/keelpb"
)

// bigImage builds an image of n partitions (RF 3 over 100 brokers) in
// topics of 10,000, through Apply as the log would.
func bigImage(tb testing.TB, n int) *Image {
	tb.Helper()
	img := Empty()
	var err error
	if img, err = Apply(img, 1, 1, batch(clusterID("c"), featureLevel(1), epoch(1, 1))); err != nil {
		tb.Fatal(err)
	}
	for b := int32(0); b < 100; b++ {
		if img, err = Apply(img, uint64(2+b), 1, batch(register(b, "x"))); err != nil {
			tb.Fatal(err)
		}
	}
	index := uint64(200)
	for t := 0; t*10_000 < n; t++ {
		id := TopicID{byte(t >> 8), byte(t), 1}
		recs := []*keelpb.Record{topicRec(fmt.Sprintf("t%d", t), id, nil)}
		for p := 0; p < 10_000 && t*10_000+p < n; p++ {
			r := []int32{int32(p % 100), int32((p + 1) % 100), int32((p + 2) % 100)}
			recs = append(recs, partRec(id, int32(p), r, r, r[0]))
		}
		index++
		if img, err = Apply(img, index, 1, batch(recs...)); err != nil {
			tb.Fatal(err)
		}
	}
	return img
}

// BenchmarkSnapshot_Read100k: restoring an image of 100,000 partitions.
func BenchmarkSnapshot_Read100k(b *testing.B) {
	var buf bytes.Buffer
	if err := WriteSnapshot(&buf, bigImage(b, 100_000)); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(buf.Len()))
	b.ResetTimer()
	cpu := cpuTime()
	for i := 0; i < b.N; i++ {
		if _, err := ReadSnapshot(bytes.NewReader(buf.Bytes())); err != nil {
			b.Fatal(err)
		}
	}
	perRecord(b, cpu, 100_000, "partition")
}

// BenchmarkSnapshot_Write100k: writing an image of 100,000 partitions.
func BenchmarkSnapshot_Write100k(b *testing.B) {
	img := bigImage(b, 100_000)
	b.ResetTimer()
	cpu := cpuTime()
	for i := 0; i < b.N; i++ {
		if err := WriteSnapshot(io_discard{}, img); err != nil {
			b.Fatal(err)
		}
	}
	perRecord(b, cpu, 100_000, "partition")
}

// BenchmarkApply_CreateTopic10k: one batch creating a topic of 10,000 partitions.
func BenchmarkApply_CreateTopic10k(b *testing.B) {
	base := bigImage(b, 10_000)
	recs := []*keelpb.Record{topicRec("new", TopicID{0xff}, nil)}
	for p := 0; p < 10_000; p++ {
		r := []int32{int32(p % 100), int32((p + 1) % 100), int32((p + 2) % 100)}
		recs = append(recs, partRec(TopicID{0xff}, int32(p), r, r, r[0]))
	}
	benchApply(b, base, batch(recs...))
}

// benchApply applies bt to base b.N times (base never changes, so every
// iteration does the same work) and reports the cost per record.
func benchApply(b *testing.B, base *Image, bt *keelpb.RecordBatch) {
	b.Helper()
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for i := 0; i < b.N; i++ {
		if _, err := Apply(base, base.Offset+1, base.Term, bt); err != nil {
			b.Fatal(err)
		}
	}
	perRecord(b, cpu, len(bt.Records), "record")
}

// perRecord reports the wall and CPU time of each of the n things (records,
// partitions) that one iteration handles. CPU time counts every thread
// (the GC's too) and is the steadier figure on a shared machine.
func perRecord(b *testing.B, cpuStart time.Duration, n int, unit string) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/"+unit)
	b.ReportMetric(float64((cpuTime()-cpuStart).Nanoseconds())/float64(b.N*n), "cpu-ns/"+unit)
}

// The million-partition image is built once per test binary: building it
// takes seconds, and the benchmarks only read it.
var (
	million     *Image
	millionOnce sync.Once
)

func millionImage(b *testing.B) *Image {
	b.Helper()
	millionOnce.Do(func() { million = bigImage(b, 1_000_000) })
	return million
}

// leaderMoves is a PartitionChange for each of parts, moving its
// leadership from its first replica to its second (bigImage's ISR holds both).
func leaderMoves(parts []*Partition) []*keelpb.Record {
	recs := make([]*keelpb.Record, 0, len(parts))
	for _, p := range parts {
		recs = append(recs, change(p.TopicID, p.Partition, leader(p.Replicas[1]), nil, nil))
	}
	return recs
}

// BenchmarkApply_PartitionChange10k: one batch of 10,000 leader moves
// spread over ten topics of a 100,000-partition image.
func BenchmarkApply_PartitionChange10k(b *testing.B) {
	base := bigImage(b, 100_000)
	var parts []*Partition
	for _, t := range base.Topics() {
		parts = append(parts, base.Partitions(t.ID)[:1_000]...)
	}
	benchApply(b, base, batch(leaderMoves(parts)...))
}

// BenchmarkApply_BrokerRegistration: a broker re-registering in a
// million-partition image.
func BenchmarkApply_BrokerRegistration(b *testing.B) {
	benchApply(b, millionImage(b), batch(register(7, "again")))
}

// fenceBatch is what the controller commits when broker id is fenced: the
// fence record and a PartitionChange for every partition on the broker,
// dropping it from the ISR and moving its leaderships.
func fenceBatch(img *Image, id int32) *keelpb.RecordBatch {
	br, _ := img.Broker(id)
	recs := []*keelpb.Record{fence(id, br.Epoch)}
	img.PartitionsOnBroker(id, func(p *Partition) bool {
		isr := make([]int32, 0, len(p.ISR))
		for _, r := range p.ISR {
			if r != id {
				isr = append(isr, r)
			}
		}
		ldr := p.Leader
		if ldr == id {
			ldr = isr[0]
		}
		recs = append(recs, change(p.TopicID, p.Partition, leader(ldr), isr, nil))
		return true
	})
	return batch(recs...)
}

// unfenced returns img with broker id active, so that it can be fenced.
func unfenced(b *testing.B, img *Image, id int32) *Image {
	b.Helper()
	br, _ := img.Broker(id)
	img, err := Apply(img, img.Offset+1, img.Term, batch(unfence(id, br.Epoch)))
	if err != nil {
		b.Fatal(err)
	}
	return img
}

// BenchmarkApply_FenceBroker: fencing a broker of a million-partition image
// (100 brokers, RF 3): one batch of the fence and 30,000 partition changes.
func BenchmarkApply_FenceBroker(b *testing.B) {
	img := unfenced(b, millionImage(b), 7)
	benchApply(b, img, fenceBatch(img, 7))
}

// BenchmarkApply_UnfenceBroker: the unfence record alone, in a
// million-partition image.
func BenchmarkApply_UnfenceBroker(b *testing.B) {
	img := millionImage(b)
	br, _ := img.Broker(7)
	benchApply(b, img, batch(unfence(7, br.Epoch)))
}

// BenchmarkSnapshot_Read1M: restoring an image of a million partitions, the
// controller's start-up cost.
func BenchmarkSnapshot_Read1M(b *testing.B) {
	var buf bytes.Buffer
	if err := WriteSnapshot(&buf, millionImage(b)); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(buf.Len()))
	b.ResetTimer()
	cpu := cpuTime()
	for i := 0; i < b.N; i++ {
		if _, err := ReadSnapshot(bytes.NewReader(buf.Bytes())); err != nil {
			b.Fatal(err)
		}
	}
	perRecord(b, cpu, 1_000_000, "partition")
}

// BenchmarkSnapshot_Write1M: writing an image of a million partitions.
func BenchmarkSnapshot_Write1M(b *testing.B) {
	img := millionImage(b)
	b.ResetTimer()
	cpu := cpuTime()
	for i := 0; i < b.N; i++ {
		if err := WriteSnapshot(io_discard{}, img); err != nil {
			b.Fatal(err)
		}
	}
	perRecord(b, cpu, 1_000_000, "partition")
}

// heapOf reports the live heap that build adds, in bytes per partition.
func heapOf(b *testing.B, partitions int, build func() *Image) {
	b.Helper()
	var before, after runtime.MemStats
	for i := 0; i < b.N; i++ {
		runtime.GC()
		runtime.ReadMemStats(&before)
		img := build()
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(partitions), "B/partition")
		runtime.KeepAlive(img)
	}
}

// BenchmarkHeap_Apply1M: the heap one image of a million partitions holds,
// built through Apply as the log builds it.
func BenchmarkHeap_Apply1M(b *testing.B) {
	heapOf(b, 1_000_000, func() *Image { return bigImage(b, 1_000_000) })
}

// BenchmarkHeap_Restore1M: the same image's heap when read from a snapshot,
// as a restarting controller builds it.
func BenchmarkHeap_Restore1M(b *testing.B) {
	var buf bytes.Buffer
	if err := WriteSnapshot(&buf, bigImage(b, 1_000_000)); err != nil {
		b.Fatal(err)
	}
	heapOf(b, 1_000_000, func() *Image {
		img, err := ReadSnapshot(bytes.NewReader(buf.Bytes()))
		if err != nil {
			b.Fatal(err)
		}
		return img
	})
}

type io_discard struct{}

func (io_discard) Write(p []byte) (int, error) { return len(p), nil }
