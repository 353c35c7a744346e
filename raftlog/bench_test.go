package raftlog

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

// The log store benchmarks: a three-node cluster in this process, raft over
// loopback TCP through the Mux, each node's store on disk under b.TempDir(),
// production timing, and raft entries that are real encoded Keel batches of
// partition records. The state machine only counts, so what is measured is
// raft plus the log store. Run them with
//
//	go test -run '^$' -bench LogStore -benchtime 3s -count 5 ./raftlog/
//
// and compare the boltdb and wal sub-benchmarks.

// countSM is a state machine that only counts entries.
type countSM struct{ n atomic.Int64 }

func (s *countSM) ApplyEntry(uint64, uint64, []byte) any { return s.n.Add(1) }

func (s *countSM) Snapshot() (func(w io.Writer) error, error) {
	return func(io.Writer) error { return nil }, nil
}

func (s *countSM) Restore(io.Reader) error { return nil }

// benchLeader starts a three-node cluster with store and returns its leader
// once a first entry has committed; cleanup stops every node.
func benchLeader(b *testing.B, store string) *raft.Raft {
	b.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	muxes := make([]*Mux, 3)
	var voters []Voter
	for i := range muxes {
		muxes[i] = listen(b, "127.0.0.1:0")
		voters = append(voters, Voter{ID: int32(i + 1), Address: muxes[i].Addr().String()})
	}
	nodes := make([]*Node, len(muxes))
	for i, m := range muxes {
		n, err := Open(Config{
			NodeID:    int32(i + 1),
			Advertise: m.Addr().String(),
			DataDir:   b.TempDir(),
			LogStore:  store,
			Voters:    voters,
			Timing:    DefaultTiming(),
			Logger:    logger,
		}, &countSM{}, m)
		if err != nil {
			b.Fatal(err)
		}
		nodes[i] = n
		b.Cleanup(func() { _ = n.Close() })
	}
	var leader *raft.Raft
	poll.Until(b, 30*time.Second, "a leader", func() bool {
		for _, n := range nodes {
			if n.Raft.State() == raft.Leader {
				leader = n.Raft
				return true
			}
		}
		return false
	})
	if err := leader.Barrier(10 * time.Second).Error(); err != nil {
		b.Fatal(err)
	}
	return leader
}

// partitionBatch encodes n partition records as one raft entry, the way the
// controller writes a topic creation or a reassignment.
func partitionBatch(b *testing.B, first, n int) []byte {
	b.Helper()
	topic := bytes.Repeat([]byte{0xab}, 16)
	recs := make([]*keelpb.Record, n)
	for i := range recs {
		p := int32(first + i)
		replicas := []int32{p%5 + 1, (p+1)%5 + 1, (p+2)%5 + 1}
		recs[i] = &keelpb.Record{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{
			TopicId: topic, Partition: p, Replicas: replicas, Isr: replicas, Leader: replicas[0],
		}}}
	}
	data, err := fsm.EncodeBatch(recs...)
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// singleEntries is a ring of one-record entries, each another partition.
func singleEntries(b *testing.B) [][]byte {
	entries := make([][]byte, 1024)
	for i := range entries {
		entries[i] = partitionBatch(b, i, 1)
	}
	return entries
}

func benchStores(b *testing.B, f func(b *testing.B, store string)) {
	for _, store := range logStores {
		b.Run(store, func(b *testing.B) { f(b, store) })
	}
}

func reportRecords(b *testing.B, records int) {
	b.ReportMetric(float64(records)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkLogStore_SingleWriter: one record per entry, one writer waiting
// for each commit: commit latency.
func BenchmarkLogStore_SingleWriter(b *testing.B) {
	benchStores(b, func(b *testing.B, store string) {
		leader := benchLeader(b, store)
		entries := singleEntries(b)
		b.ResetTimer()
		for i := range b.N {
			if err := leader.Apply(entries[i%len(entries)], 0).Error(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/commit")
		reportRecords(b, b.N)
	})
}

// BenchmarkLogStore_Batch1000: 1,000 partition records per entry (about
// 30 KB), one writer: the controller's large decisions.
func BenchmarkLogStore_Batch1000(b *testing.B) {
	benchStores(b, func(b *testing.B, store string) {
		leader := benchLeader(b, store)
		const perEntry = 1000
		entry := partitionBatch(b, 0, perEntry)
		b.SetBytes(int64(len(entry)))
		b.ResetTimer()
		for range b.N {
			if err := leader.Apply(entry, 0).Error(); err != nil {
				b.Fatal(err)
			}
		}
		reportRecords(b, b.N*perEntry)
	})
}

// BenchmarkLogStore_Concurrent16: 16 writers of one record per entry, each
// waiting for its own commit; raft batches what queues up behind a write.
func BenchmarkLogStore_Concurrent16(b *testing.B) {
	benchStores(b, func(b *testing.B, store string) {
		leader := benchLeader(b, store)
		entries := singleEntries(b)
		const writers = 16
		var next atomic.Int64
		var failed atomic.Value
		var wg sync.WaitGroup
		b.ResetTimer()
		for range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1) - 1
					if i >= int64(b.N) {
						return
					}
					if err := leader.Apply(entries[i%int64(len(entries))], 0).Error(); err != nil {
						failed.CompareAndSwap(nil, fmt.Sprint(err))
						return
					}
				}
			}()
		}
		wg.Wait()
		b.StopTimer()
		if err := failed.Load(); err != nil {
			b.Fatal(err)
		}
		reportRecords(b, b.N)
	})
}
