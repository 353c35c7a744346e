package replication

import (
	"context"
	"testing"
	"time"

	"github.com/keel-dev/keel/proto/keelpb"
)

// TestManager_ReplicasLockedApart: while one replica's lock is held (its
// partition busy), another partition of the same broker takes an acks=all
// produce, a consumer's fetch, a ListOffsets and a follower's fetch: no
// path of one partition takes another's lock, nor waits on the Manager's
// lock while someone holds it waiting for a replica's.
func TestManager_ReplicasLockedApart(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1))
	e.addPartitions(2, 1)
	m := e.ms[1]
	busy := e.replica(1) // t-0
	ctx := context.Background()
	done := make(chan error, 1)
	busy.mu.Lock()
	go func() {
		_, err := m.Produce(ctx, "t", 1, makeBatch(t, 2, 0, 0), AcksAll, 5*time.Second)
		if err == nil {
			_, err = m.Fetch(ctx, "t", 1, -1, 0, 1<<20, 0)
		}
		if err == nil {
			_, err = m.ListOffsets(ctx, "t", 1, -1, LatestTimestamp)
		}
		if err == nil {
			_, err = m.ReplicaFetch(ctx, &keelpb.FetchRequest{ReplicaId: 2, TopicId: topicT.String(), Partition: 1, FetchOffset: 0})
		}
		done <- err
	}()
	select {
	case err := <-done:
		busy.mu.Unlock()
		if err != nil {
			t.Fatalf("t-1 while t-0 is busy: %v", err)
		}
	case <-time.After(10 * time.Second):
		busy.mu.Unlock()
		<-done
		t.Fatal("t-1's produce and fetches waited for t-0's lock")
	}
}
