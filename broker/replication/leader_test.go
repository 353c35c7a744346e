package replication

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// TestReplicaManager_FetchRefusals: a leader serves its followers' fetches
// only at its own leader epoch, from its replicas at the broker epochs its
// metadata shows, within its log; and a follower serves none.
func TestReplicaManager_FetchRefusals(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2, 3))
	// Broker 1 leads again, at leader epoch 2.
	e.ctl.commit(changeRec(leaderID(2), nil))
	e.ctl.commit(changeRec(leaderID(1), nil))
	e.publish()
	t0 := topicT.String()
	tests := []struct {
		name       string
		req        *keelpb.FetchRequest
		wantCode   codes.Code
		wantReason string
	}{
		{"a stale leader epoch", &keelpb.FetchRequest{ReplicaId: 2, TopicId: t0, LeaderEpoch: 1}, codes.FailedPrecondition, rpc.ReasonFencedLeaderEpoch},
		{"a leader epoch not applied yet", &keelpb.FetchRequest{ReplicaId: 2, TopicId: t0, LeaderEpoch: 3}, codes.FailedPrecondition, ReasonUnknownLeaderEpoch},
		{"not a replica", &keelpb.FetchRequest{ReplicaId: 4, TopicId: t0, LeaderEpoch: 2}, codes.FailedPrecondition, ReasonNotLeaderOrFollower},
		{"from the leader itself", &keelpb.FetchRequest{ReplicaId: 1, TopicId: t0, LeaderEpoch: 2}, codes.FailedPrecondition, ReasonNotLeaderOrFollower},
		{"at a broker epoch the metadata does not show (KIP-903)", &keelpb.FetchRequest{ReplicaId: 2, TopicId: t0, LeaderEpoch: 2, BrokerEpoch: 9}, codes.FailedPrecondition, ReasonNotLeaderOrFollower},
		{"an unknown partition", &keelpb.FetchRequest{ReplicaId: 2, TopicId: t0, Partition: 1, LeaderEpoch: 2}, codes.NotFound, rpc.ReasonUnknownTopicOrPartition},
		{"an unknown topic", &keelpb.FetchRequest{ReplicaId: 2, TopicId: fsm.TopicID{0xa}.String(), LeaderEpoch: 2}, codes.NotFound, rpc.ReasonUnknownTopicOrPartition},
		{"past the log end", &keelpb.FetchRequest{ReplicaId: 2, TopicId: t0, LeaderEpoch: 2, FetchOffset: 1}, codes.OutOfRange, ReasonOffsetOutOfRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.ms[1].ReplicaFetch(context.Background(), tt.req)
			if status.Code(err) != tt.wantCode || rpc.ReasonOf(err) != tt.wantReason {
				t.Fatalf("Fetch = %v, want %v %q", err, tt.wantCode, tt.wantReason)
			}
		})
	}
	e.ctl.mu.Lock()
	sent := len(e.ctl.requests)
	e.ctl.mu.Unlock()
	if sent != 0 {
		t.Fatalf("refused fetches sent %d ISR changes", sent)
	}
	if _, err := e.ms[1].ReplicaFetch(context.Background(), &keelpb.FetchRequest{ReplicaId: 2, TopicId: t0, LeaderEpoch: 2, BrokerEpoch: 3}); err != nil {
		t.Fatalf("a good fetch: %v", err)
	}
	// A follower serves no fetches.
	if _, err := e.ms[2].ReplicaFetch(context.Background(), &keelpb.FetchRequest{ReplicaId: 3, TopicId: t0, LeaderEpoch: 2}); status.Code(err) != codes.FailedPrecondition || rpc.ReasonOf(err) != ReasonNotLeaderOrFollower {
		t.Fatalf("fetch from a follower: %v", err)
	}
}
