package raftlog

import (
	"testing"
	"time"

	"github.com/keel-dev/keel/consensus"
	"github.com/keel-dev/keel/consensus/consensustest"
)

// TestContract runs the contract every consensus.Log keeps (the one the
// in-memory log the controller's tests run on keeps too) against raftlog
// over hashicorp/raft: three nodes on loopback. At 500 ms timings, so that
// an election under a loaded machine's stalls does not lose the suite's
// writes (at 50 ms it does: consensustest.NewCluster).
func TestContract(t *testing.T) {
	logger := testLogger(t)
	timing := Timing{
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
		LeaderLeaseTimeout: 500 * time.Millisecond,
		CommitTimeout:      5 * time.Millisecond,
	}
	consensustest.Run(t, func(t *testing.T, ids []int32, sm func(int32) consensus.StateMachine) map[int32]consensus.Log {
		muxes := make(map[int32]*Mux, len(ids))
		var voters []Voter
		for _, id := range ids {
			muxes[id] = listen(t, "127.0.0.1:0")
			voters = append(voters, Voter{ID: id, Address: muxes[id].Addr().String()})
		}
		logs := make(map[int32]consensus.Log, len(ids))
		for _, id := range ids {
			node, err := Open(Config{
				NodeID: id, Advertise: muxes[id].Addr().String(), DataDir: t.TempDir(),
				Voters: voters, Timing: timing, Logger: logger,
			}, sm(id), muxes[id])
			if err != nil {
				t.Fatalf("Open node %d: %v", id, err)
			}
			t.Cleanup(func() { _ = node.Close() })
			logs[id] = node
		}
		return logs
	})
}
