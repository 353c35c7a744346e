package replication

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TestReplicaManager_LogEnd: the leader answers its log end, committed or
// not (what the group coordinator's Load reads up to once the high
// watermark reaches it); a follower is not the leader.
func TestReplicaManager_LogEnd(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2))
	e.produce(1, 2)
	e.catchUp(2)
	e.fetch(2)
	e.produce(1, 2) // above the high watermark
	if end, err := e.ms[1].LogEnd("t", 0); err != nil || end != 4 {
		t.Fatalf("LogEnd on the leader = %d, %v; want 4", end, err)
	}
	if _, err := e.ms[2].LogEnd("t", 0); !isKerr(err, kerr.NotLeaderForPartition) {
		t.Fatalf("LogEnd on a follower: %v, want NOT_LEADER_OR_FOLLOWER", err)
	}
	if _, err := e.ms[1].LogEnd("nope", 0); !isKerr(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("LogEnd of an unknown topic: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
}
