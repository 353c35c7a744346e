package server_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/keeltest"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/raftlog"
	"github.com/keel-dev/keel/server"
)

// startCluster starts n controllers at production timings (keeltest: real
// TCP on loopback, raft-boltdb on disk), stopped when the test ends, and
// waits for the active controller. Benchmarks and measurements add
// keeltest.WithDirectRaft, so that their figures are production's, without
// the fault proxies' hop.
func startCluster(tb testing.TB, n int, opts ...keeltest.Option) (*keeltest.Cluster, *server.Node) {
	tb.Helper()
	c := keeltest.NewCluster(tb, n, append([]keeltest.Option{keeltest.WithTiming(raftlog.DefaultTiming())}, opts...)...)
	return c, c.WaitForActive(10 * time.Second)
}

func noOps(n int) []*keelpb.Record {
	recs := make([]*keelpb.Record, n)
	for i := range recs {
		recs[i] = &keelpb.Record{Record: &keelpb.Record_NoOp{NoOp: &keelpb.NoOpRecord{}}}
	}
	return recs
}

// BenchmarkCommit_SingleWriter: one small record per raft entry, one writer
// waiting for each commit: the latency-bound case.
func BenchmarkCommit_SingleWriter(b *testing.B) {
	_, active := startCluster(b, 3, keeltest.WithDirectRaft())
	rec := noOps(1)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := active.Controller().Propose(ctx, rec...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkCommit_Batched: 1,000 small records per raft entry, as the
// controller writes large decisions.
func BenchmarkCommit_Batched(b *testing.B) {
	_, active := startCluster(b, 3, keeltest.WithDirectRaft())
	const perBatch = 1000
	recs := noOps(perBatch)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := active.Controller().Propose(ctx, recs...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*perBatch)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkCommit_ConcurrentWriters: many writers of one record each; the
// event loop takes them one at a time and pipelines them.
func BenchmarkCommit_ConcurrentWriters(b *testing.B) {
	_, active := startCluster(b, 3, keeltest.WithDirectRaft())
	rec := noOps(1)
	ctx := context.Background()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := active.Controller().Propose(ctx, rec...); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkCommit_ConcurrentBatches: four writers of 1,000-record batches,
// as concurrent large decisions (topic creations) reach the event loop,
// which pipelines them.
func BenchmarkCommit_ConcurrentBatches(b *testing.B) {
	_, active := startCluster(b, 3, keeltest.WithDirectRaft())
	const perBatch = 1000
	recs := noOps(perBatch)
	ctx := context.Background()
	b.SetParallelism(max(1, 4/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := active.Controller().Propose(ctx, recs...); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N*perBatch)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkDescribeTopic10k renders a topic of 10,000 partitions (RF 3) as
// CreateTopic answers with it.
func BenchmarkDescribeTopic10k(b *testing.B) {
	id := fsm.TopicID{0xd}
	recs := []*keelpb.Record{
		{Record: &keelpb.Record_ClusterId{ClusterId: &keelpb.ClusterIdRecord{ClusterId: "c"}}},
		{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{Name: fsm.MetadataVersionFeature, Level: fsm.MaxMetadataVersion}}},
		{Record: &keelpb.Record_ControllerEpoch{ControllerEpoch: &keelpb.ControllerEpochRecord{Epoch: 1, LeaderId: 1}}},
	}
	for broker := int32(1); broker <= 3; broker++ {
		recs = append(recs, &keelpb.Record{Record: &keelpb.Record_BrokerRegistration{BrokerRegistration: &keelpb.BrokerRegistrationRecord{
			BrokerId: broker, IncarnationId: "i", Address: "127.0.0.1:9201", MinMetadataVersion: 1, MaxMetadataVersion: fsm.MaxMetadataVersion}}})
	}
	recs = append(recs, &keelpb.Record{Record: &keelpb.Record_Topic{Topic: &keelpb.TopicRecord{Name: "t", TopicId: id[:]}}})
	for p := range int32(10_000) {
		recs = append(recs, &keelpb.Record{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{
			TopicId: id[:], Partition: p, Replicas: []int32{1, 2, 3}, Isr: []int32{1, 2, 3}, Leader: 1}}})
	}
	img, err := fsm.Apply(fsm.Empty(), 1, 1, &keelpb.RecordBatch{Records: recs})
	if err != nil {
		b.Fatal(err)
	}
	t, ok := img.Topic("t")
	if !ok {
		b.Fatal("no topic")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if d := server.DescribeTopic(img, t); len(d.Partitions) != 10_000 {
			b.Fatalf("%d partitions", len(d.Partitions))
		}
	}
}
