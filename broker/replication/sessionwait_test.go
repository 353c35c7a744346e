package replication

import (
	"context"
	"testing"
	"time"

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
