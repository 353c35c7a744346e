package memlog

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/keel-dev/keel/consensus"
)

// TestRestore: every node installs the same snapshot, a node that was not
// hearing installs it when it catches up, and the log continues past both
// the snapshot's index and its own last, after Restore's no-op.
func TestRestore(t *testing.T) {
	for _, tt := range []struct {
		name      string
		metaIndex uint64
		wantIndex func(last uint64) uint64 // of the restore entry
	}{
		{"past the log", 100, func(uint64) uint64 { return 101 }},
		{"behind the log", 1, func(last uint64) uint64 { return last + 1 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestCluster(t, []int32{1, 2, 3})
			tc.elected(t, 1)
			leader := tc.Node(1)
			mustApply(t, leader, "a")
			tc.appliedData(t, 3, "a")
			tc.Silence(3)
			want := tt.wantIndex(leader.LastIndex())
			if err := leader.Restore(consensus.SnapshotMeta{Index: tt.metaIndex, Term: 1}, stateMachineData("snap"), time.Second); err != nil {
				t.Fatal(err)
			}
			if got := leader.LastIndex(); got != want+1 {
				t.Fatalf("last index %d after Restore, want %d (the restore, then a no-op)", got, want+1)
			}
			if f := mustApply(t, leader, "b"); f.Index() != want+2 {
				t.Fatalf("next entry at %d, want %d", f.Index(), want+2)
			}
			tc.appliedData(t, 1, "b")
			tc.appliedData(t, 2, "b")
			tc.appliedData(t, 3, "a")
			tc.Hear(3)
			tc.appliedData(t, 3, "b")
			for _, id := range []int32{1, 2, 3} {
				sm := tc.sm(id)
				sm.mu.Lock()
				restored := slices.Clone(sm.restored)
				sm.mu.Unlock()
				if len(restored) != 1 || string(restored[0]) != "snap" {
					t.Fatalf("node %d restored %q, want [snap]", id, restored)
				}
			}
		})
	}
}

func TestRestore_LeaderRefusesTheSnapshot(t *testing.T) {
	tc := newTestCluster(t, []int32{1})
	tc.elected(t, 1)
	err := tc.Node(1).Restore(consensus.SnapshotMeta{Index: 5}, stateMachineData("bad"), time.Second)
	if err == nil || err.Error() != "a bad snapshot" {
		t.Fatalf("error %v, want the state machine's", err)
	}
}

// TestShutdown: a node shut down with writes in flight fails them, leads
// no more, and answers every call with ErrShutdown; the others go on.
func TestShutdown(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2, 3})
	tc.elected(t, 1)
	n := tc.Node(1)
	tc.HoldCommits()
	f := n.Apply([]byte("in flight"), time.Second)
	tc.Shutdown(1)
	if err := f.Error(); !consensus.OutcomeUnknown(err) {
		t.Fatalf("in-flight entry: %v, want an unknown outcome", err)
	}
	expectChanges(t, n, false)
	if got := n.State(); got != consensus.Shutdown {
		t.Fatalf("state %v", got)
	}
	if err := n.Apply([]byte("x"), time.Second).Error(); !errors.Is(err, consensus.ErrShutdown) {
		t.Fatalf("apply: %v", err)
	}
	if _, _, err := n.Configuration(); !errors.Is(err, consensus.ErrShutdown) {
		t.Fatalf("configuration: %v", err)
	}
	if _, err := n.TransferLeadership(t.Context(), nil); !errors.Is(err, consensus.ErrShutdown) {
		t.Fatalf("transfer: %v", err)
	}
	tc.ReleaseCommits()
	tc.elected(t, 2)
	mustApply(t, tc.Node(2), "after")
	tc.appliedData(t, 3, "in flight", "after")
	if got := tc.sm(1).data(); len(got) != 0 {
		t.Fatalf("a node shut down applied %q", got)
	}
}

// TestClose: pending futures fail with ErrShutdown, every later call
// fails with it, and no goroutine outlives Close (TestMain checks), even
// with leadership changes nobody read.
func TestClose(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2})
	if err := tc.Elect(1); err != nil { // its true is never read
		t.Fatal(err)
	}
	n := tc.Node(1)
	stop := n.ObserveLeaders(func(int32) {})
	defer stop()
	tc.HoldCommits()
	f := n.Apply([]byte("pending"), time.Second)
	tc.Close()
	tc.Close()
	if err := f.Error(); !errors.Is(err, consensus.ErrShutdown) {
		t.Fatalf("pending: %v", err)
	}
	if err := n.Barrier(time.Second).Error(); !errors.Is(err, consensus.ErrShutdown) {
		t.Fatalf("barrier after Close: %v", err)
	}
	if err := tc.Elect(2); !errors.Is(err, consensus.ErrShutdown) {
		t.Fatalf("elect after Close: %v", err)
	}
	if got := n.State(); got != consensus.Shutdown {
		t.Fatalf("state %v", got)
	}
	n.ObserveLeaders(func(int32) {})() // starts nothing
}

// TestBarrier_NewLeader: a new leader's barrier resolves only once its
// state machine holds everything earlier terms committed, the way the
// controller learns its image is complete.
func TestBarrier_NewLeader(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2})
	tc.elected(t, 1)
	tc.Silence(2)
	for _, d := range []string{"a", "b", "c"} {
		mustApply(t, tc.Node(1), d)
	}
	tc.Depose()
	tc.Hear(2)
	tc.elected(t, 2)
	if err := tc.Node(2).Barrier(time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if got := tc.sm(2).data(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("applied %q at the barrier", got)
	}
}
