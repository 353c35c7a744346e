package controller

import (
	"fmt"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// scaleImage is an image of brokers active brokers holding topics of
// perTopic partitions each (RF 3), placed by the controller's own placement,
// partitions in all.
func scaleImage(b *testing.B, brokers, partitions, perTopic int) *fsm.Image {
	b.Helper()
	index := uint64(1)
	img := fsm.Empty()
	applyAt := func(recs []*keelpb.Record) {
		var err error
		if img, err = fsm.Apply(img, index, 1, &keelpb.RecordBatch{Records: recs}); err != nil {
			b.Fatalf("batch %d: %v", index, err)
		}
		index++
	}
	applyAt(clusterStart())
	for id := int32(1); id <= int32(brokers); id++ {
		applyAt([]*keelpb.Record{regRecord(id, incA)})
		epoch := int64(index - 1)
		applyAt([]*keelpb.Record{{Record: &keelpb.Record_UnfenceBroker{UnfenceBroker: &keelpb.UnfenceBrokerRecord{BrokerId: id, BrokerEpoch: epoch}}}})
	}
	for t := 0; t*perTopic < partitions; t++ {
		id := fsm.TopicID{0xb, byte(t >> 8), byte(t)}
		req := &keelpb.CreateTopicRequest{Name: fmt.Sprintf("t%d", t), Partitions: int32(perTopic), ReplicationFactor: 3}
		recs, err := createTopicRecords(img, req, id, t)
		if err != nil {
			b.Fatal(err)
		}
		applyAt(recs)
	}
	return img
}

// BenchmarkPlacement_CreateTopic10k decides a topic of 10,000 partitions
// (RF 3) over 100 brokers: name checks, placement and records.
func BenchmarkPlacement_CreateTopic10k(b *testing.B) {
	img := scaleImage(b, 100, 10_000, 10_000)
	req := &keelpb.CreateTopicRequest{Name: "new", Partitions: 10_000, ReplicationFactor: 3}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := createTopicRecords(img, req, fsm.TopicID{0xff}, i); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10_000, "ns/partition")
}

// BenchmarkElection_FenceLeaderOf10k decides the fencing of a broker that
// leads 10,000 partitions (100,000 partitions over 10 brokers): a new
// leader and a smaller ISR for each of the 30,000 partitions it holds.
func BenchmarkElection_FenceLeaderOf10k(b *testing.B) {
	img := scaleImage(b, 10, 100_000, 10_000)
	victim, _ := img.Broker(1)
	led := 0
	img.PartitionsOnBroker(1, func(p *fsm.Partition) bool {
		if p.Leader == 1 {
			led++
		}
		return true
	})
	b.ResetTimer()
	var recs []*keelpb.Record
	for i := 0; i < b.N; i++ {
		recs = fenceRecords(img, []*fsm.Broker{victim})
	}
	b.StopTimer()
	if led < 9_000 || len(recs) < 3*led-1000 {
		b.Fatalf("broker 1 leads %d partitions; fencing it wrote %d records", led, len(recs))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(recs)), "ns/partition")
}

// BenchmarkElection_ApplyFence10k applies that decision, as every
// controller and broker does.
func BenchmarkElection_ApplyFence10k(b *testing.B) {
	img := scaleImage(b, 10, 100_000, 10_000)
	victim, _ := img.Broker(1)
	batch := &keelpb.RecordBatch{Records: fenceRecords(img, []*fsm.Broker{victim})}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := fsm.Apply(img, img.Offset+1, 1, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(batch.Records)), "ns/partition")
}

// BenchmarkTakeover_LeaderlessScan1M is what every new active controller
// pays, off its critical path, to find partitions left without a leader
// (none here): a walk over 1,000,000 partitions.
func BenchmarkTakeover_LeaderlessScan1M(b *testing.B) {
	img := scaleImage(b, 100, 1_000_000, 10_000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if recs := leaderlessChanges(img); len(recs) != 0 {
			b.Fatalf("%d records for a healthy image", len(recs))
		}
	}
}

// BenchmarkAppliedLog_ApplyAtBound applies a no-op entry to an applied log
// whose history is at its bound, so that every entry applied evicts the
// oldest: the steady state of a long-running controller, paid on raft's FSM
// goroutine under the lock every broker stream takes. The bound is reached
// by entry count, or by bytes with room for as many entries.
func BenchmarkAppliedLog_ApplyAtBound(b *testing.B) {
	data, err := fsm.EncodeBatch(noOp())
	if err != nil {
		b.Fatal(err)
	}
	start, err := fsm.EncodeBatch(clusterStart()...)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name                 string
		maxEntries, maxBytes int
	}{
		{"entries", DefaultHistoryEntries, DefaultHistoryBytes},
		{"bytes", 2 * DefaultHistoryEntries, len(start) + (DefaultHistoryEntries-1)*len(data)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			a := NewAppliedLog(fsm.New(), bc.maxEntries, bc.maxBytes)
			if resp := a.ApplyEntry(1, 1, start); resp != nil {
				b.Fatal(resp)
			}
			index := uint64(1)
			apply := func() {
				index++
				if resp := a.ApplyEntry(index, 1, data); resp != nil {
					b.Fatal(resp)
				}
			}
			for range DefaultHistoryEntries {
				apply()
			}
			if _, ok, _ := a.Since(0, 1<<30); ok {
				b.Fatal("the history is not at its bound: nothing was evicted")
			}
			if got, _, _ := a.Since(1, 1<<30); len(got) != DefaultHistoryEntries {
				b.Fatalf("the history holds %d entries, want %d", len(got), DefaultHistoryEntries)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				apply()
			}
		})
	}
}

// BenchmarkLeader_CreateTopic10k is the active controller's own work for a
// topic of 10,000 partitions (RF 3) over 100 brokers, without raft: decide
// (placement and records), cut into entries, encode and apply each ahead of
// commit, then the FSM's apply of the committed entries: adopted, the
// speculative image offered to the FSM, or applied again, nothing offered
// (as before the FSM could adopt).
func BenchmarkLeader_CreateTopic10k(b *testing.B) {
	img := scaleImage(b, 100, 10_000, 10_000)
	req := &keelpb.CreateTopicRequest{Name: "new", Partitions: 10_000, ReplicationFactor: 3}
	for _, offer := range []bool{true, false} {
		name := map[bool]string{true: "adopted", false: "applied_twice"}[offer]
		b.Run(name, func(b *testing.B) {
			f := fsm.New()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f.Install(img)
				recs, err := createTopicRecords(img, req, fsm.TopicID{0xff}, i)
				if err != nil {
					b.Fatal(err)
				}
				specs, err := speculate(img, img.Offset+1, img.Term, splitRecords(recs, MaxEntryBytes))
				if err != nil {
					b.Fatal(err)
				}
				for _, s := range specs {
					if offer {
						f.Offer(s)
					}
				}
				for _, s := range specs {
					if resp := f.ApplyEntry(s.Index(), img.Term, s.Data()); resp != nil {
						b.Fatal(resp)
					}
				}
			}
			b.StopTimer()
			if want := map[bool]uint64{true: uint64(b.N)}[offer]; f.Adopted() != want {
				b.Fatalf("%d entries adopted, want %d", f.Adopted(), want)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10_000, "ns/partition")
		})
	}
}
