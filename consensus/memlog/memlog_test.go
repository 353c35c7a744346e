package memlog

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/keel-dev/keel/consensus"
	"github.com/keel-dev/keel/internal/poll"
)

func TestCluster_AppliesInOrderOnEveryNode(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2, 3})
	tc.elected(t, 1)
	leader := tc.Node(1)
	// Bootstrap configuration at 1, the term's no-op at 2: the first
	// command is at 3, in term 2, as in raft.
	if got := leader.CurrentTerm(); got != 2 {
		t.Fatalf("term %d, want 2", got)
	}
	var want []string
	for i := range 5 {
		data := string(rune('a' + i))
		wantIndex := leader.LastIndex() + 1
		f := mustApply(t, leader, data)
		if f.Index() != wantIndex {
			t.Fatalf("%s: index %d, want %d", data, f.Index(), wantIndex)
		}
		if got, want := f.Response(), "applied "+strconv.FormatUint(wantIndex, 10); got != want {
			t.Fatalf("%s: response %v, want %v", data, got, want)
		}
		want = append(want, data)
	}
	for _, id := range []int32{1, 2, 3} {
		tc.appliedData(t, id, want...)
	}
	for _, a := range tc.sm(2).applied {
		if a.term != 2 {
			t.Fatalf("entry %d in term %d, want 2", a.index, a.term)
		}
	}
	if got, want := leader.CommitIndex(), leader.LastIndex(); got != want {
		t.Fatalf("commit index %d, want %d", got, want)
	}
}

func TestCluster_LeadershipChangesInOrder(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2, 3})
	n1, n2 := tc.Node(1), tc.Node(2)
	if err := tc.Elect(1); err != nil {
		t.Fatal(err)
	}
	if err := tc.Elect(2); err != nil {
		t.Fatal(err)
	}
	if err := tc.Elect(2); err != nil { // lost and regained: a flap
		t.Fatal(err)
	}
	tc.Depose()
	expectChanges(t, n1, true, false)
	expectChanges(t, n2, true, false, true, false)
	expectNoChange(t, tc.Node(3))
	if got := n2.CurrentTerm(); got != 4 {
		t.Fatalf("term %d, want 4 after three elections", got)
	}
	if id, addr := n1.Leader(); id != -1 || addr != "" {
		t.Fatalf("leader %d %q after Depose, want none", id, addr)
	}
	if got := tc.Leader(); got != -1 {
		t.Fatalf("cluster leader %d, want -1", got)
	}
}

func TestCluster_ElectRefusals(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2})
	tc.AddNode(4)
	tc.elected(t, 1)
	if err := tc.Node(1).AddNonvoter(5, "mem-5", 0, time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	tc.AddNode(5)
	tc.Shutdown(2)
	for _, tt := range []struct {
		name string
		id   int32
	}{
		{"no node", 9},
		{"not a member", 4},
		{"a nonvoter", 5},
		{"shut down", 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tc.Elect(tt.id); err == nil {
				t.Fatalf("elect %d: no error", tt.id)
			}
			if got := tc.Leader(); got != 1 {
				t.Fatalf("leader %d, want 1 still", got)
			}
		})
	}
}

// TestElect_TruncatedConfiguration: a voter added by an uncommitted
// change that a Truncate deposition would cut away cannot be elected.
func TestElect_TruncatedConfiguration(t *testing.T) {
	for _, tt := range []struct {
		name    string
		fate    Fate
		wantErr bool
	}{
		{"committed by the next leader", Commit, false},
		{"truncated", Truncate, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestCluster(t, []int32{1, 2})
			tc.AddNode(3)
			tc.SetFate(tt.fate)
			tc.elected(t, 1)
			tc.HoldCommits()
			add := tc.Node(1).AddVoter(3, "mem-3", 0, time.Second)
			if err := tc.Elect(3); (err != nil) != tt.wantErr {
				t.Fatalf("elect: %v, want an error: %v", err, tt.wantErr)
			}
			if tt.wantErr {
				if tc.Leader() != 1 || resolved(add) {
					t.Fatalf("a refused election changed leader (%d) or the change", tc.Leader())
				}
				return
			}
			if err := add.Error(); !errors.Is(err, consensus.ErrLeadershipLost) {
				t.Fatalf("the change: %v, want ErrLeadershipLost", err)
			}
		})
	}
}

func TestNode_StateAndLeader(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2}, WithAddress(func(id int32) string { return "host-" + strconv.Itoa(int(id)) }))
	tc.elected(t, 2)
	for _, tt := range []struct {
		id    int32
		state consensus.State
	}{{1, consensus.Follower}, {2, consensus.Leader}} {
		n := tc.Node(tt.id)
		if got := n.State(); got != tt.state {
			t.Errorf("node %d: state %v, want %v", tt.id, got, tt.state)
		}
		if id, addr := n.Leader(); id != 2 || addr != "host-2" {
			t.Errorf("node %d: leader %d %q, want 2 host-2", tt.id, id, addr)
		}
	}
	tc.Shutdown(1)
	if got := tc.Node(1).State(); got != consensus.Shutdown {
		t.Fatalf("state %v after Shutdown", got)
	}
}

func TestNode_Timeouts(t *testing.T) {
	custom := consensus.Timeouts{Heartbeat: time.Second, Election: 2 * time.Second}
	for _, tt := range []struct {
		name string
		opts []Option
		want consensus.Timeouts
	}{
		{"default", nil, DefaultTimeouts},
		{"WithTimeouts", []Option{WithTimeouts(custom)}, custom},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestCluster(t, []int32{1}, tt.opts...)
			if got := tc.Node(1).Timeouts(); got != tt.want {
				t.Fatalf("timeouts %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestAppend_Refusals: every kind of append refuses on a follower, on a
// node shut down, and when FailAppends says so, and appends nothing.
func TestAppend_Refusals(t *testing.T) {
	ops := []struct {
		name   string
		append func(n *Node) error
	}{
		{"Apply", func(n *Node) error { return n.Apply([]byte("x"), time.Second).Error() }},
		{"Barrier", func(n *Node) error { return n.Barrier(time.Second).Error() }},
		{"AddVoter", func(n *Node) error { return n.AddVoter(7, "mem-7", 0, time.Second).Error() }},
		{"AddNonvoter", func(n *Node) error { return n.AddNonvoter(7, "mem-7", 0, time.Second).Error() }},
		{"RemoveServer", func(n *Node) error { return n.RemoveServer(3, 0, time.Second).Error() }},
		{"Restore", func(n *Node) error {
			return n.Restore(consensus.SnapshotMeta{Index: 50}, stateMachineData("snap"), time.Second)
		}},
	}
	faults := []struct {
		name    string
		setup   func(tc *testCluster)
		on      int32
		wantErr error
	}{
		{"follower", func(*testCluster) {}, 2, consensus.ErrNotLeader},
		{"shut down", func(tc *testCluster) { tc.Shutdown(3) }, 3, consensus.ErrShutdown},
		{"enqueue timeout", func(tc *testCluster) { tc.FailAppends(1, consensus.ErrEnqueueTimeout) }, 1, consensus.ErrEnqueueTimeout},
	}
	for _, op := range ops {
		for _, fault := range faults {
			t.Run(op.name+"/"+fault.name, func(t *testing.T) {
				tc := newTestCluster(t, []int32{1, 2, 3})
				tc.elected(t, 1)
				leader := tc.Node(1)
				fault.setup(tc)
				last := leader.LastIndex()
				err := op.append(tc.Node(fault.on))
				if !errors.Is(err, fault.wantErr) {
					t.Fatalf("error %v, want %v", err, fault.wantErr)
				}
				if got := leader.LastIndex(); got != last {
					t.Fatalf("last index %d, want %d: something was appended", got, last)
				}
				if fault.on == 1 { // the fault was one append; the next succeeds
					if err := op.append(leader); err != nil {
						t.Fatalf("the next append: %v", err)
					}
				}
			})
		}
	}
}

// TestHoldCommits: held entries are appended but neither committed nor
// applied, and their futures wait, until ReleaseCommits.
func TestHoldCommits(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2})
	tc.elected(t, 1)
	leader := tc.Node(1)
	mustApply(t, leader, "before")
	tc.HoldCommits()
	a := leader.Apply([]byte("held-a"), time.Second)
	b := leader.Barrier(time.Second).(consensus.IndexFuture) // memlog's futures all carry their index
	if a.Index() != b.Index()-1 {
		t.Fatalf("indexes %d and %d, want consecutive", a.Index(), b.Index())
	}
	if got := leader.LastIndex(); got != b.Index() {
		t.Fatalf("last index %d, want %d", got, b.Index())
	}
	if got := leader.CommitIndex(); got != a.Index()-1 {
		t.Fatalf("commit index %d, want %d", got, a.Index()-1)
	}
	tc.appliedData(t, 2, "before")
	if resolved(a) || resolved(b) {
		t.Fatal("a held entry's future resolved")
	}
	if got := tc.sm(1).data(); !slices.Equal(got, []string{"before"}) {
		t.Fatalf("leader applied %q while held", got)
	}
	tc.ReleaseCommits()
	if err := b.Error(); err != nil {
		t.Fatal(err)
	}
	// The barrier resolved, so the leader has applied everything before it.
	if got := tc.sm(1).data(); !slices.Equal(got, []string{"before", "held-a"}) {
		t.Fatalf("leader applied %q at the barrier", got)
	}
	if err := a.Error(); err != nil {
		t.Fatal(err)
	}
	tc.appliedData(t, 2, "before", "held-a")
}

// TestDepose_WritesInFlight: a leader deposed with uncommitted entries
// fails their futures with ErrLeadershipLost (an unknown outcome); the
// next leader commits them or they are gone, as the Fate says.
func TestDepose_WritesInFlight(t *testing.T) {
	for _, tt := range []struct {
		name     string
		fate     Fate
		wantData []string
	}{
		{"committed by the next leader", Commit, []string{"done", "in-flight-1", "in-flight-2", "next"}},
		{"truncated", Truncate, []string{"done", "next"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestCluster(t, []int32{1, 2, 3})
			tc.SetFate(tt.fate)
			tc.elected(t, 1)
			old := tc.Node(1)
			mustApply(t, old, "done")
			tc.HoldCommits()
			inFlight := []consensus.ApplyFuture{
				old.Apply([]byte("in-flight-1"), time.Second),
				old.Apply([]byte("in-flight-2"), time.Second),
			}
			tc.Depose()
			expectChanges(t, old, false)
			for _, f := range inFlight {
				if err := f.Error(); !errors.Is(err, consensus.ErrLeadershipLost) || !consensus.OutcomeUnknown(err) {
					t.Fatalf("in-flight entry %d: %v, want ErrLeadershipLost", f.Index(), err)
				}
			}
			tc.ReleaseCommits() // no leader: nothing commits yet
			if got := old.CommitIndex(); got >= inFlight[0].Index() {
				t.Fatalf("commit index %d with no leader", got)
			}
			tc.elected(t, 2)
			mustApply(t, tc.Node(2), "next")
			for _, id := range []int32{1, 2, 3} {
				tc.appliedData(t, id, tt.wantData...)
			}
		})
	}
}

// TestDepose_CommittedEntryStillResolves: an entry committed before the
// leadership loss resolves with its response on the deposed proposer once
// it applies it, as raft's committed futures do.
func TestDepose_CommittedEntryStillResolves(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2})
	tc.elected(t, 1)
	f := tc.Node(1).Apply([]byte("a"), time.Second)
	tc.Depose()
	if err := f.Error(); err != nil {
		t.Fatalf("a committed entry: %v", err)
	}
	if got := f.Response(); got != "applied "+strconv.FormatUint(f.Index(), 10) {
		t.Fatalf("response %v", got)
	}
}

// TestInterposeNoop: the log appends an entry of its own between a
// caller's prediction and its Apply, so the future's index is one more
// than predicted; the state machine sees the entry at the future's index.
func TestInterposeNoop(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2})
	tc.elected(t, 1)
	leader := tc.Node(1)
	mustApply(t, leader, "a")
	predicted := leader.LastIndex() + 1
	tc.InterposeNoop()
	f := mustApply(t, leader, "b")
	if f.Index() != predicted+1 {
		t.Fatalf("index %d, want %d (predicted %d plus the log's no-op)", f.Index(), predicted+1, predicted)
	}
	if got := tc.sm(1).applied[1].index; got != f.Index() {
		t.Fatalf("applied at %d, want %d", got, f.Index())
	}
	if f := mustApply(t, leader, "c"); f.Index() != predicted+2 { // once only
		t.Fatalf("index %d after the interposed one, want %d", f.Index(), predicted+2)
	}
	tc.AppendNoop()
	if f := mustApply(t, leader, "d"); f.Index() != predicted+4 {
		t.Fatalf("index %d after AppendNoop, want %d", f.Index(), predicted+4)
	}
	tc.appliedData(t, 2, "a", "b", "c", "d")
}

// TestSilence: a node that stops hearing the leader keeps the leader it
// knew, its LastContact ages and it applies nothing more, while leadership
// does not change; Hear catches it up.
func TestSilence(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2, 3})
	tc.elected(t, 1)
	leader, quiet := tc.Node(1), tc.Node(3)
	mustApply(t, leader, "heard")
	tc.appliedData(t, 3, "heard")
	tc.Silence(3)
	frozen := quiet.LastContact()
	mustApply(t, leader, "missed")
	tc.appliedData(t, 2, "heard", "missed")
	poll.Until(t, waitFor, "the silenced node's contact to age", func() bool {
		return time.Since(quiet.LastContact()) > 0 && quiet.LastContact().Equal(frozen)
	})
	if got := tc.sm(3).data(); !slices.Equal(got, []string{"heard"}) {
		t.Fatalf("silenced node applied %q", got)
	}
	if id, _ := quiet.Leader(); id != 1 {
		t.Fatalf("silenced node's leader %d, want 1", id)
	}
	if quiet.LastIndex() >= leader.LastIndex() {
		t.Fatalf("silenced node's last index %d, leader's %d", quiet.LastIndex(), leader.LastIndex())
	}
	if got := leader.State(); got != consensus.Leader {
		t.Fatalf("leader's state %v", got)
	}
	if lc := tc.Node(2).LastContact(); !lc.After(frozen) {
		t.Fatalf("a hearing follower's contact %v, not after %v", lc, frozen)
	}
	tc.Hear(3)
	tc.appliedData(t, 3, "heard", "missed")
	if !quiet.LastContact().After(frozen) {
		t.Fatal("contact did not resume")
	}
}

func TestObserveLeaders(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2, 3})
	seen := make(chan int32, 10)
	stop := tc.Node(2).ObserveLeaders(func(l int32) { seen <- l })
	for _, id := range []int32{1, 3} {
		if err := tc.Elect(id); err != nil {
			t.Fatal(err)
		}
	}
	tc.Depose()
	for i, want := range []int32{1, 3, -1} {
		select {
		case got := <-seen:
			if got != want {
				t.Fatalf("observation %d: %d, want %d", i, got, want)
			}
		case <-time.After(waitFor):
			t.Fatalf("observation %d (%d) never came", i, want)
		}
	}
	stop()
	stop() // idempotent
	if err := tc.Elect(2); err != nil {
		t.Fatal(err)
	}
	expectChanges(t, tc.Node(2), true)
	select {
	case got := <-seen:
		t.Fatalf("observed %d after stop", got)
	default:
	}
}
