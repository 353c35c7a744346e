package replication

import (
	"bytes"
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// benchEnv is brokers 1-3 with their fetch loops running on the wall clock,
// fetching from each other in process, t-0 led by 1 with ISR isr.
func benchEnv(b *testing.B, isr ...int32) *env { return benchEnvParts(b, 1, isr...) }

// benchEnvParts is benchEnv with partitions t-0 to t-(parts-1), each led by
// 1 with ISR isr.
func benchEnvParts(b *testing.B, parts int32, isr ...int32) *env {
	img := clusterImage(b, nil, isr...)
	for p := int32(1); p < parts; p++ {
		img = applyBatch(b, img, &keelpb.Record{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{
			TopicId: bytes.Clone(topicT[:]), Partition: p, Replicas: []int32{1, 2, 3}, Isr: isr, Leader: 1}}})
	}
	e := &env{ctl: &fakeController{t: b, img: img}, ms: map[int32]*Manager{},
		seen: map[int32]*fsm.Image{}, dirs: map[int32]string{}}
	for id := int32(1); id <= 3; id++ {
		dir := b.TempDir()
		e.dirs[id] = dir
		m, err := New(Config{DataDir: dir, FetchMaxWait: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
			dial: func(addr string) (fetchClient, error) { return netConn{e, addr}, nil }})
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Start(ctlLink{e.ctl, id}); err != nil {
			b.Fatal(err)
		}
		e.ms[id] = m
	}
	b.Cleanup(func() {
		for _, m := range e.ms {
			m.Close()
		}
	})
	img = e.ctl.image()
	for id, m := range e.ms {
		m.MetadataChanged(fsm.Empty(), img)
		ch := broker.DiffReplicas(id, fsm.Empty(), img)
		for _, p := range ch.Leaders {
			m.BecomeLeader(p)
		}
		for _, p := range ch.Followers {
			m.BecomeFollower(p)
		}
	}
	return e
}

// BenchmarkManager_Produce: one producer appending small batches (74 bytes) of
// record to t-0 on broker 1, with acks=1 (ISR [1]) and acks=all with the
// two followers fetching in process (ISR [1 2 3]): the replication round
// trip an acks=all write waits for, without a network.
func BenchmarkManager_Produce(b *testing.B) {
	for _, tc := range []struct {
		name string
		acks int16
		isr  []int32
	}{
		{"acks=1", AcksLeader, []int32{1}},
		{"acks=all,rf=3", AcksAll, []int32{1, 2, 3}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e := benchEnv(b, tc.isr...)
			batch := makeBatch(b, 1, 0, 0)
			// The first write waits for every follower's first fetch (one
			// that came before its leader knew its role backs off 1s).
			if _, err := e.ms[1].Produce(context.Background(), "t", 0, batch, tc.acks, 10*time.Second); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(batch)))
			b.ResetTimer()
			for b.Loop() {
				if _, err := e.ms[1].Produce(context.Background(), "t", 0, batch, tc.acks, 10*time.Second); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkManager_ProduceParallel: producers appending small batches at
// once on broker 1, each to its own partition of t (benchParts of them,
// followed by brokers 2 and 3 on one fetch session each, in process), with
// acks=1 and acks=all: what the partitions' produces, high-watermark waits
// and session rounds make each other wait for, on one broker.
func BenchmarkManager_ProduceParallel(b *testing.B) {
	const benchParts = 16
	for _, tc := range []struct {
		name string
		acks int16
	}{
		{"acks=1", AcksLeader},
		{"acks=all", AcksAll},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e := benchEnvParts(b, benchParts, 1, 2, 3)
			batch := makeBatch(b, 1, 0, 0)
			// As in BenchmarkManager_Produce: the first writes wait for
			// the followers' first fetches.
			for p := range int32(benchParts) {
				if _, err := e.ms[1].Produce(context.Background(), "t", p, batch, AcksAll, 10*time.Second); err != nil {
					b.Fatal(err)
				}
			}
			var next atomic.Int32
			b.SetBytes(int64(len(batch)))
			b.SetParallelism(benchParts / 2) // -cpu 2: a producer per partition
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				p := (next.Add(1) - 1) % benchParts
				for pb.Next() {
					if _, err := e.ms[1].Produce(context.Background(), "t", p, batch, tc.acks, 10*time.Second); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
