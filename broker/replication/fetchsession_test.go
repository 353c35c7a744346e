package replication

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

// TestFetchSessionWire_IsProtobuf: the answer a leader encodes itself is
// FetchSessionResponse's protobuf encoding, and the follower's parser reads
// proto's encoding, in one buffer or split across several.
func TestFetchSessionWire_IsProtobuf(t *testing.T) {
	records := makeBatch(t, 3, 0, 0)
	parts := []partitionData{
		{tp: broker.TopicPartition{TopicID: topicT, Partition: 0}, hw: 5, logStart: 1, logEnd: 9, records: records},
		{tp: broker.TopicPartition{TopicID: topicT, Partition: 7}, hw: 3, logEnd: 4, diverging: &keelpb.EpochEndOffset{Epoch: 2, EndOffset: 3}},
		{tp: broker.TopicPartition{TopicID: topicT, Partition: 2}, err: &keelpb.FetchPartitionError{Code: int32(codes.OutOfRange),
			Reason: ReasonOffsetOutOfRange, Message: "out", LogStartOffset: 4, LogEndOffset: 8}},
		{tp: broker.TopicPartition{TopicID: topicT, Partition: 3}},
	}
	// Enough partitions for the headers to take several pooled chunks.
	for p := int32(10); p < 400; p++ {
		parts = append(parts, partitionData{tp: broker.TopicPartition{TopicID: topicT, Partition: p}, hw: int64(p), logEnd: int64(p)})
	}
	want := &keelpb.FetchSessionResponse{}
	for _, d := range parts {
		want.Partitions = append(want.Partitions, &keelpb.FetchSessionPartitionData{TopicId: topicT[:], Partition: d.tp.Partition,
			HighWatermark: d.hw, LogStartOffset: d.logStart, LogEndOffset: d.logEnd, DivergingEpoch: d.diverging, Error: d.err, Records: d.records})
	}

	var w answerWriter
	for i := range parts {
		w.add(&parts[i], nil)
	}
	data, err := answerWire{w.finish()}.MarshalWire()
	if err != nil {
		t.Fatal(err)
	}
	wire := data.Materialize()
	data.Free()
	got := &keelpb.FetchSessionResponse{}
	if err := proto.Unmarshal(wire, got); err != nil {
		t.Fatalf("proto cannot decode the leader's answer: %v", err)
	}
	if !proto.Equal(want, got) {
		t.Fatalf("the leader's answer as proto reads it: %v, want %v", got, want)
	}
	if canon, _ := (proto.MarshalOptions{Deterministic: true}).Marshal(want); !bytes.Equal(canon, wire) {
		t.Errorf("the leader's answer is %d bytes, proto's %d: not the same encoding", len(wire), len(canon))
	}

	canon, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	for _, split := range []int{len(canon), 7, len(canon) - 3} {
		in := mem.BufferSlice{mem.SliceBuffer(canon[:split])}
		if split < len(canon) {
			in = append(in, mem.SliceBuffer(canon[split:]))
		}
		var a sessionAnswer
		if err := a.UnmarshalWire(in); err != nil {
			t.Fatalf("split at %d: %v", split, err)
		}
		if len(a.parts) != len(parts) {
			t.Fatalf("split at %d: %d partitions, want %d", split, len(a.parts), len(parts))
		}
		for i, d := range a.parts {
			p := parts[i]
			if d.tp != p.tp || d.hw != p.hw || d.logStart != p.logStart || d.logEnd != p.logEnd || !bytes.Equal(d.records, p.records) ||
				!proto.Equal(d.diverging, p.diverging) || !proto.Equal(d.err, p.err) {
				t.Errorf("split at %d: partition %d parsed as %+v, want %+v", split, i, d, p)
			}
		}
		a.release()
	}
	var a sessionAnswer
	if err := a.UnmarshalWire(mem.BufferSlice{mem.SliceBuffer(canon[:len(canon)-1])}); err == nil {
		t.Error("a truncated answer parsed")
	}
}

// addPartitions adds partitions 1..n-1 of t, led by 1 on 1,2,3 with ISR isr.
func (e *env) addPartitions(n int32, isr ...int32) {
	e.t.Helper()
	for p := int32(1); p < n; p++ {
		e.ctl.commit(&keelpb.Record{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{
			TopicId: bytes.Clone(topicT[:]), Partition: p, Replicas: []int32{1, 2, 3}, Isr: isr, Leader: 1}}})
	}
	e.publish()
}

// openSession opens follower's session with leader, in process.
func (e *env) openSession(leader int32) keelpb.BrokerService_FetchSessionClient {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := netConn{e, fmt.Sprintf("broker-%d", leader)}.FetchSession(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		cancel()
		<-s.(*sessionPipe).done
	})
	return s
}

func roundTrip(t *testing.T, s keelpb.BrokerService_FetchSessionClient, req *keelpb.FetchSessionRequest) *keelpb.FetchSessionResponse {
	t.Helper()
	if err := s.Send(req); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func partFetch(p int32, epoch int32, offset int64) *keelpb.FetchSessionPartition {
	return &keelpb.FetchSessionPartition{TopicId: topicT[:], Partition: p, LeaderEpoch: epoch, FetchOffset: offset}
}

// TestFetchSession_AnswersOnlyNews (KIP-227's FetchSessionTest): the first
// answer has every partition; an idle session's answer none; new records
// are answered for their partition only; a high watermark that moved is
// answered without records; a refusal once, not again while it stands.
func TestFetchSession_AnswersOnlyNews(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2))
	e.addPartitions(3, 1, 2)
	s := e.openSession(1)
	full := &keelpb.FetchSessionRequest{ReplicaId: 2, BrokerEpoch: 3,
		Partitions: []*keelpb.FetchSessionPartition{partFetch(0, 0, 0), partFetch(1, 0, 0), partFetch(2, 0, 0)}}
	if got := roundTrip(t, s, full); len(got.GetPartitions()) != 3 {
		t.Fatalf("first answer: %d partitions, want all 3", len(got.GetPartitions()))
	}
	idle := &keelpb.FetchSessionRequest{ReplicaId: 2, BrokerEpoch: 3}
	if got := roundTrip(t, s, idle); len(got.GetPartitions()) != 0 {
		t.Fatalf("idle session answered %v", got.GetPartitions())
	}
	e.produce(1, 2) // t-0
	got := roundTrip(t, s, idle)
	if len(got.GetPartitions()) != 1 || got.GetPartitions()[0].GetPartition() != 0 || len(got.GetPartitions()[0].GetRecords()) == 0 {
		t.Fatalf("after a produce to t-0: %v, want t-0's records only", got.GetPartitions())
	}
	// The follower has them: the high watermark moves, and is news.
	got = roundTrip(t, s, &keelpb.FetchSessionRequest{ReplicaId: 2, BrokerEpoch: 3, Partitions: []*keelpb.FetchSessionPartition{partFetch(0, 0, 2)}})
	if len(got.GetPartitions()) != 1 || got.GetPartitions()[0].GetHighWatermark() != 2 || len(got.GetPartitions()[0].GetRecords()) != 0 {
		t.Fatalf("after fetching at 2: %v, want t-0 with high watermark 2 and no records", got.GetPartitions())
	}
	if e.hw(1) != 2 {
		t.Fatalf("leader's high watermark %d, want 2", e.hw(1))
	}
	// A fetch at a newer epoch than the leader's is refused for that
	// partition only, once.
	bad := &keelpb.FetchSessionRequest{ReplicaId: 2, BrokerEpoch: 3, Partitions: []*keelpb.FetchSessionPartition{partFetch(1, 5, 0)}}
	got = roundTrip(t, s, bad)
	if len(got.GetPartitions()) != 1 || got.GetPartitions()[0].GetError().GetReason() != ReasonUnknownLeaderEpoch {
		t.Fatalf("fetch at epoch 5: %v, want t-1 refused %s", got.GetPartitions(), ReasonUnknownLeaderEpoch)
	}
	if got := roundTrip(t, s, idle); len(got.GetPartitions()) != 0 {
		t.Fatalf("the standing refusal was answered again: %v", got.GetPartitions())
	}
	// Forgotten partitions are not answered.
	e.produce(1, 1)
	got = roundTrip(t, s, &keelpb.FetchSessionRequest{ReplicaId: 2, BrokerEpoch: 3,
		Forgotten: []*keelpb.FetchSessionPartitionKey{{TopicId: topicT[:], Partition: 0}}})
	if len(got.GetPartitions()) != 0 {
		t.Fatalf("forgotten t-0 answered: %v", got.GetPartitions())
	}
}

// TestFetchSession_BudgetRotates: with a budget of one byte each answer
// carries one partition's records (one batch at least), and the rounds go
// round the partitions, so that none starves.
func TestFetchSession_BudgetRotates(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2))
	const n = 3
	e.addPartitions(n, 1, 2)
	for p := range int32(n) {
		if _, err := e.ms[1].Produce(context.Background(), "t", p, makeBatch(t, 2, 0, 0), AcksLeader, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	s := e.openSession(1)
	req := &keelpb.FetchSessionRequest{ReplicaId: 2, BrokerEpoch: 3, MaxBytes: 1}
	for p := range int32(n) {
		req.Partitions = append(req.Partitions, partFetch(p, 0, 0))
	}
	seen := map[int32]bool{}
	for range n {
		got := roundTrip(t, s, req)
		req = &keelpb.FetchSessionRequest{ReplicaId: 2, BrokerEpoch: 3, MaxBytes: 1}
		with := 0
		for _, d := range got.GetPartitions() {
			if len(d.GetRecords()) > 0 {
				with++
				seen[d.GetPartition()] = true
			}
		}
		if with != 1 {
			t.Fatalf("an answer with a 1-byte budget carried %d partitions' records, want 1", with)
		}
	}
	if len(seen) != n {
		t.Fatalf("records of %v in %d rounds, want every one of %d partitions", seen, n, n)
	}
}

// startedEnv is newEnv with each broker's fetching running (on the wall
// clock), as a broker runs it.
func startedEnv(t *testing.T, noSessions bool, isr ...int32) *env {
	t.Helper()
	return startedEnvWait(t, noSessions, 50*time.Millisecond, isr...)
}

// startedEnvWait is startedEnv with a fetch interval (long-poll) of wait.
func startedEnvWait(t *testing.T, noSessions bool, wait time.Duration, isr ...int32) *env {
	t.Helper()
	e := &env{t: t, ctl: &fakeController{t: t, img: clusterImage(t, nil, isr...)}, ms: map[int32]*Manager{},
		seen: map[int32]*fsm.Image{}, dirs: map[int32]string{}, noSessions: noSessions}
	for id := int32(1); id <= 3; id++ {
		m, err := New(Config{DataDir: t.TempDir(), FetchMaxWait: wait, FetchBackoff: 50 * time.Millisecond,
			Logger: testLogger(t).With("broker", id), dial: func(addr string) (fetchClient, error) { return netConn{e, addr}, nil }})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.attach(ctlLink{e.ctl, id}); err != nil {
			t.Fatal(err)
		}
		e.ms[id] = m
	}
	t.Cleanup(func() {
		for _, m := range e.ms {
			m.Close()
		}
	})
	e.publish()
	return e
}

// TestFetcher_FallsBackOnUnimplemented: against leaders that answer the
// session Unimplemented (an older broker), followers fetch each partition
// on its own, and acks=all writes commit; with sessions, each follower has
// one session with the leader.
func TestFetcher_FallsBackOnUnimplemented(t *testing.T) {
	for _, noSessions := range []bool{true, false} {
		t.Run(map[bool]string{true: "unimplemented", false: "sessions"}[noSessions], func(t *testing.T) {
			e := startedEnv(t, noSessions, 1, 2, 3)
			e.addPartitions(4, 1, 2, 3)
			for p := range int32(4) {
				if _, err := e.ms[1].Produce(context.Background(), "t", p, makeBatch(t, 2, 0, 0), AcksAll, 10*time.Second); err != nil {
					t.Fatalf("acks=all produce to t-%d: %v", p, err)
				}
			}
			for _, id := range []int32{2, 3} {
				m := e.ms[id]
				m.mu.Lock()
				f := m.fetchers[1]
				m.mu.Unlock()
				poll.Until(t, 5*time.Second, "the fetcher's mode", func() bool {
					f.mu.Lock()
					defer f.mu.Unlock()
					return f.legacy == noSessions
				})
				want := map[bool]float64{true: 0, false: 1}[noSessions]
				poll.Until(t, 5*time.Second, "one session per leader as follower", func() bool {
					return gaugeValue(m.sessionMetrics.following) == want
				})
			}
		})
	}
}

func gaugeValue(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		return -1
	}
	return m.GetGauge().GetValue()
}

// BenchmarkFetchSession_Answer: a leader building one answer for a session
// of 16 partitions, each with a batch of n records to read: the
// allocations per answer do not grow with the records (the batches go out
// of pooled read buffers).
func BenchmarkFetchSession_Answer(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			e := &env{ctl: &fakeController{t: b, img: clusterImage(b, nil, 1)}, ms: map[int32]*Manager{}, seen: map[int32]*fsm.Image{}, dirs: map[int32]string{}}
			m, err := New(Config{DataDir: b.TempDir(), Logger: slog.New(slog.DiscardHandler), manualFetch: true})
			if err != nil {
				b.Fatal(err)
			}
			if err := m.attach(ctlLink{e.ctl, 1}); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { m.Close() })
			e.ms[1] = m
			const parts = 16
			for p := int32(1); p < parts; p++ {
				e.ctl.commit(&keelpb.Record{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{
					TopicId: bytes.Clone(topicT[:]), Partition: p, Replicas: []int32{1, 2, 3}, Isr: []int32{1}, Leader: 1}}})
			}
			img := e.ctl.image()
			m.MetadataChanged(fsm.Empty(), img)
			for _, p := range broker.DiffReplicas(1, fsm.Empty(), img).Leaders {
				m.BecomeLeader(p)
			}
			s := &leaderSession{m: m, from: 2, brokerEpoch: 3, byTP: map[broker.TopicPartition]int{}, wake: make(chan struct{}, 1)}
			s.poke = func() {}
			req := &keelpb.FetchSessionRequest{ReplicaId: 2, BrokerEpoch: 3}
			for p := range int32(parts) {
				if _, err := m.Produce(context.Background(), "t", p, makeBatch(b, n, 0, 0), AcksLeader, time.Second); err != nil {
					b.Fatal(err)
				}
				req.Partitions = append(req.Partitions, partFetch(p, 0, 0))
			}
			s.apply(req)
			defer s.close()
			s.build(true, DefaultFetchResponseMaxBytes)
			bytesOut := 0
			for b.Loop() {
				s.build(false, DefaultFetchResponseMaxBytes)
				bytesOut = s.w.bytes
				s.w.free()
			}
			b.SetBytes(int64(bytesOut))
		})
	}
}
