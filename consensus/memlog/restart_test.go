package memlog

import (
	"errors"
	"testing"
	"time"

	"github.com/keel-dev/keel/consensus"
)

// TestRestart: a node shut down and restarted gets a new state machine
// that replays the whole committed log, hears the leader again, and can be
// elected; its old Node stays shut down.
func TestRestart(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2, 3})
	tc.elected(t, 1)
	mustApply(t, tc.Node(1), "a")
	tc.appliedData(t, 3, "a")
	old := tc.Node(3)
	tc.Shutdown(3)
	mustApply(t, tc.Node(1), "b")

	n := tc.Restart(3)
	if n == old || tc.Node(3) != n {
		t.Fatal("Restart did not make a new node")
	}
	tc.appliedData(t, 3, "a", "b")
	if id, _ := n.Leader(); id != 1 {
		t.Fatalf("the restarted node knows leader %d, want 1", id)
	}
	if err := old.Apply([]byte("x"), time.Second).Error(); !errors.Is(err, consensus.ErrShutdown) {
		t.Fatalf("the old node's Apply: %v, want ErrShutdown", err)
	}
	tc.elected(t, 3)
	mustApply(t, n, "c")
	tc.appliedData(t, 2, "a", "b", "c")
}

// TestRestart_RunningNodePanics: restarting a node that runs is a test's
// mistake.
func TestRestart_RunningNodePanics(t *testing.T) {
	tc := newTestCluster(t, []int32{1})
	defer func() {
		if recover() == nil {
			t.Fatal("Restart of a running node did not panic")
		}
	}()
	tc.Restart(1)
}
