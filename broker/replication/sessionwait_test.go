package replication

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

// A request that arrives while the leader long-polls the last one ends the
// wait: the round in progress is answered, then the new request, each
// once and in order, well before the wait.

// longPoll is a wait that no test waits for: the answers must come before.
const longPoll = 10 * time.Second

// TestFetchSession_RequestEndsLongPoll: a partition added to a session the
// leader long-polls is answered at once; the idle round is answered
// first, empty.
func TestFetchSession_RequestEndsLongPoll(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2))
	e.addPartitions(2, 1, 2)
	s := e.openSession(1)
	wait := int32(longPoll / time.Millisecond)
	if got := roundTrip(t, s, &keelpb.FetchSessionRequest{ReplicaId: 2, BrokerEpoch: 3, MaxWaitMs: wait,
		Partitions: []*keelpb.FetchSessionPartition{partFetch(0, 0, 0)}}); len(got.GetPartitions()) != 1 {
		t.Fatalf("first answer: %v, want t-0", got.GetPartitions())
	}
	start := time.Now()
	// The second request is sent while the leader long-polls the first,
	// which has nothing new; sent beside the receiving, as over gRPC.
	sent := make(chan error, 1)
	go func() {
		if err := s.Send(&keelpb.FetchSessionRequest{ReplicaId: 2, BrokerEpoch: 3, MaxWaitMs: wait}); err != nil {
			sent <- err
			return
		}
		sent <- s.Send(&keelpb.FetchSessionRequest{ReplicaId: 2, BrokerEpoch: 3, MaxWaitMs: wait,
			Partitions: []*keelpb.FetchSessionPartition{partFetch(1, 0, 0)}})
	}()
	defer func() {
		if err := <-sent; err != nil {
			t.Error(err)
		}
	}()
	idle, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	added, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if len(idle.GetPartitions()) != 0 {
		t.Errorf("the idle round's answer: %v, want none", idle.GetPartitions())
	}
	if got := added.GetPartitions(); len(got) != 1 || got[0].GetPartition() != 1 {
		t.Errorf("the answer to adding t-1: %v, want t-1", got)
	}
	if took > 2*time.Second {
		t.Errorf("both answers took %v with a long-poll of %v: the added partition waited for it", took, longPoll)
	}
}

// TestFetcher_AddedPartitionNotDelayedByLongPoll: with a fetch interval
// of 10 s, followers whose sessions with the leader are idle follow a
// partition it starts to lead (a leader change) at once: its first
// acks=all write commits well within the interval.
func TestFetcher_AddedPartitionNotDelayedByLongPoll(t *testing.T) {
	e := startedEnvWait(t, false, longPoll, 1, 2, 3)
	for _, id := range []int32{2, 3} {
		poll.Until(t, 5*time.Second, "a session with the leader", func() bool {
			return gaugeValue(e.ms[id].sessionMetrics.following) == 1
		})
	}
	if _, err := e.ms[1].Produce(context.Background(), "t", 0, makeBatch(t, 2, 0, 0), AcksAll, 5*time.Second); err != nil {
		t.Fatalf("acks=all produce to t-0: %v", err)
	}
	// The sessions are idle now, long-polling; t-1 joins them.
	e.addPartitions(2, 1, 2, 3)
	start := time.Now()
	if _, err := e.ms[1].Produce(context.Background(), "t", 1, makeBatch(t, 2, 0, 0), AcksAll, longPoll); err != nil {
		t.Fatalf("acks=all produce to t-1: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the first acks=all write to the new partition took %v, with a fetch interval of %v", took, longPoll)
	}
}

// TestFetcher_CrossingRequestsKeepLogsIdentical: while acks=all writes go
// on to t-0, partitions are added one at a time, each crossing the
// followers' outstanding requests (records of t-0 in flight, answered
// under the older request's fetch state): every write commits, and every
// follower's log ends up byte for byte the leader's.
func TestFetcher_CrossingRequestsKeepLogsIdentical(t *testing.T) {
	e := startedEnvWait(t, false, longPoll, 1, 2, 3)
	const added = 6
	var batches [][]byte
	for seq := int32(0); seq < 1000; seq += 2 {
		batches = append(batches, makeBatch(t, 2, 1, seq))
	}
	stop := make(chan struct{})
	produced := make(chan error, 1)
	go func() {
		for _, b := range batches {
			select {
			case <-stop:
				produced <- nil
				return
			default:
			}
			if _, err := e.ms[1].Produce(context.Background(), "t", 0, b, AcksAll, longPoll); err != nil {
				produced <- err
				return
			}
		}
		produced <- nil
	}()
	for p := int32(1); p <= added; p++ {
		e.ctl.commit(&keelpb.Record{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{
			TopicId: bytes.Clone(topicT[:]), Partition: p, Replicas: []int32{1, 2, 3}, Isr: []int32{1, 2, 3}, Leader: 1}}})
		e.publish()
		if _, err := e.ms[1].Produce(context.Background(), "t", p, makeBatch(t, 2, 0, 0), AcksAll, longPoll); err != nil {
			t.Fatalf("acks=all produce to t-%d: %v", p, err)
		}
	}
	close(stop)
	if err := <-produced; err != nil {
		t.Fatalf("acks=all produce to t-0: %v", err)
	}
	for p := int32(0); p <= added; p++ {
		tp := broker.TopicPartition{TopicID: topicT, Partition: p}
		want := readAll(t, e.ms[1], tp)
		for _, id := range []int32{2, 3} {
			poll.UntilState(t, 5*time.Second, fmt.Sprintf("broker %d's t-%d the leader's", id, p), func() (bool, string) {
				got := readAll(t, e.ms[id], tp)
				return bytes.Equal(got, want), fmt.Sprintf("%d bytes, the leader's %d", len(got), len(want))
			})
		}
	}
}

// readAll reads m's whole log of tp.
func readAll(t *testing.T, m *Manager, tp broker.TopicPartition) []byte {
	t.Helper()
	m.mu.Lock()
	r := m.replicas[tp]
	m.mu.Unlock()
	if r == nil {
		t.Fatalf("no replica of %v", tp)
	}
	res, err := r.log.Read(0, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	return res.Records
}

// TestFetcher_RefusedPartitionRejoinsDuringLongPoll: followers that learn
// of a new partition before its leader does are refused (the leader holds
// no replica yet) and back off out of the session, which then long-polls;
// each comes back when its back-off ends, not after the long-poll, so
// the partition's first acks=all write commits well within it.
func TestFetcher_RefusedPartitionRejoinsDuringLongPoll(t *testing.T) {
	e := startedEnvWait(t, false, longPoll, 1, 2, 3)
	for _, id := range []int32{2, 3} {
		poll.Until(t, 5*time.Second, "a session with the leader", func() bool {
			return gaugeValue(e.ms[id].sessionMetrics.following) == 1
		})
	}
	e.ctl.commit(&keelpb.Record{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{
		TopicId: bytes.Clone(topicT[:]), Partition: 1, Replicas: []int32{1, 2, 3}, Isr: []int32{1, 2, 3}, Leader: 1}}})
	leader := e.ms[1]
	delete(e.ms, 1) // the followers first
	e.publish()
	e.ms[1] = leader
	tp := broker.TopicPartition{TopicID: topicT, Partition: 1}
	for _, id := range []int32{2, 3} {
		m := e.ms[id]
		m.mu.Lock()
		f := m.fetchers[1]
		m.mu.Unlock()
		poll.Until(t, 5*time.Second, fmt.Sprintf("broker %d refused t-1", id), func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			p := f.parts[tp]
			return p != nil && p.failures > 0
		})
	}
	start := time.Now()
	e.publish()
	if _, err := leader.Produce(context.Background(), "t", 1, makeBatch(t, 2, 0, 0), AcksAll, longPoll); err != nil {
		t.Fatalf("acks=all produce to t-1: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the first acks=all write to t-1 took %v, with a fetch interval of %v", took, longPoll)
	}
}
