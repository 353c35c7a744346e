package controller_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/internal/poll"
)

// voterIDs returns the ids in nd's latest configuration, sorted.
func voterIDs(t *testing.T, nd *member) []int32 {
	t.Helper()
	var ids []int32
	// Describe's voters are the latest configuration, as the log has it.
	for _, m := range nd.Controller().Describe("").Voters {
		ids = append(ids, m.Id)
	}
	slices.Sort(ids)
	return ids
}

func memberIDs(r *controller.MembershipResult) []int32 {
	var ids []int32
	for _, m := range r.Members {
		ids = append(ids, m.Id)
	}
	slices.Sort(ids)
	return ids
}

// waitRemoved runs nd's WaitRemoved in the background; the returned func
// waits for its result (nil if nd did not find itself removed in time).
// (TestMembership_RemoveVoter and TestMembership_RemoveTheLeader, which
// wait for a removed node to notice, run on raft in package server.)
func waitRemoved(nd *member, timeout time.Duration) func() error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	done := make(chan error, 1)
	go func() { done <- nd.Controller().WaitRemoved(ctx) }()
	return func() error { defer cancel(); return <-done }
}

func TestMembership_AddVoter(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	ctx := context.Background()

	joiner := c.StartJoiner(4)
	if ids := voterIDs(t, joiner); len(ids) != 0 {
		t.Fatalf("a joining node has configuration %v before it is added", ids)
	}
	stillOutside := waitRemoved(joiner, 700*time.Millisecond)

	res, err := leader.Controller().AddVoter(ctx, 4, joiner.Addr(), false)
	if err != nil {
		t.Fatal(err)
	}
	if got := memberIDs(res); !slices.Equal(got, []int32{1, 2, 3, 4}) || res.Index == 0 || res.LeaderID != leader.ID() {
		t.Fatalf("AddVoter = %v at index %d by %d", got, res.Index, res.LeaderID)
	}
	// The new voter catches up with the log, epoch and cluster id included.
	index, err := leader.Controller().Propose(ctx, noOp())
	if err != nil {
		t.Fatal(err)
	}
	c.WaitForApplied(index)
	if img := joiner.FSM().Image(); img.ClusterID != clusterID || img.ControllerEpoch != leader.FSM().Image().ControllerEpoch {
		t.Fatalf("the new voter's image: cluster %q epoch %d", img.ClusterID, img.ControllerEpoch)
	}
	if got := voterIDs(t, joiner); !slices.Equal(got, []int32{1, 2, 3, 4}) {
		t.Fatalf("the new voter's configuration = %v", got)
	}
	if err := stillOutside(); err != nil {
		t.Fatalf("a node waiting to be added took itself as removed: %v", err)
	}

	// Again, the same: nothing to change, the same answer.
	again, err := leader.Controller().AddVoter(ctx, 4, joiner.Addr(), false)
	if err != nil || again.Index != res.Index || !slices.Equal(memberIDs(again), memberIDs(res)) {
		t.Fatalf("AddVoter again = %+v, %v; want index %d", again, err, res.Index)
	}
	if _, err := leader.Controller().AddVoter(ctx, 4, "node-elsewhere", false); !errors.Is(err, controller.ErrVoterExists) {
		t.Fatalf("AddVoter at another address: err = %v, want ErrVoterExists", err)
	}
	if _, err := leader.Controller().AddVoter(ctx, 5, joiner.Addr(), false); !errors.Is(err, controller.ErrVoterExists) {
		t.Fatalf("AddVoter of another id at node 4's address: err = %v, want ErrVoterExists", err)
	}

	// A follower refuses and names the leader.
	follower := c.Node(leader.ID()%4 + 1)
	var nl *controller.NotLeaderError
	if _, err := follower.Controller().AddVoter(ctx, 5, "node-5", false); !errors.As(err, &nl) || nl.LeaderID != leader.ID() {
		t.Fatalf("AddVoter on a follower: err = %v, want a NotLeaderError naming %d", err, leader.ID())
	}
}

func TestMembership_TransferLeadership(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	ctx := context.Background()

	if got, err := leader.Controller().TransferLeadership(ctx, leader.ID()); err != nil || got != leader.ID() {
		t.Fatalf("TransferLeadership to itself = %d, %v; want %d, nothing done", got, err, leader.ID())
	}
	if _, err := leader.Controller().TransferLeadership(ctx, 9); !errors.Is(err, controller.ErrUnknownVoter) {
		t.Fatalf("TransferLeadership to 9: err = %v, want ErrUnknownVoter", err)
	}
	target := c.Node(leader.ID()%3 + 1)
	got, err := leader.Controller().TransferLeadership(ctx, target.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got != target.ID() && got != -1 {
		t.Fatalf("TransferLeadership(%d) answered %d", target.ID(), got)
	}
	c.WaitForActive(5*time.Second, target.ID())
	// Without a target, the log picks.
	got, err = target.Controller().TransferLeadership(ctx, 0)
	if err != nil || got == target.ID() {
		t.Fatalf("TransferLeadership(any) = %d, %v", got, err)
	}
	var others []int32
	for _, nd := range c.Nodes() {
		if nd.ID() != target.ID() {
			others = append(others, nd.ID())
		}
	}
	c.WaitForActive(5*time.Second, others...)
}

// TestMembership_ConfigurationIndex: the controller knows the index of the
// last committed configuration (raft v1.7's GetConfiguration reports 0, so
// raftlog takes it from the state machine), and a change guarded by a stale
// one is refused.
func TestMembership_ConfigurationIndex(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	_, index, err := leader.Controller().Configuration()
	if err != nil || index != 1 {
		t.Fatalf("configuration index = %d, %v; want 1, the bootstrap's", index, err)
	}
	joiner := c.StartJoiner(4)
	res, err := leader.Controller().AddVoter(context.Background(), 4, joiner.Addr(), false)
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, "the change to reach the state machine", func() bool {
		_, index, _ = leader.Controller().Configuration()
		return index == res.Index
	})
	// A change guarded by the configuration before is refused.
	err = controller.ConfigChangeError(leader.Log().RemoveServer(4, 1, time.Second).Error())
	if !errors.Is(err, controller.ErrConfigurationChanged) {
		t.Fatalf("a change at a stale index: err = %v, want ErrConfigurationChanged", err)
	}
}

// withPeers gives every node's controller ask, which says how a voter is
// (the quorum's nodes answer for themselves otherwise).
func withPeers(ask func(id int32) (controller.PeerStatus, error)) quorumOption {
	return withTune(func(cfg *controller.Config) {
		cfg.AskPeer = func(_ context.Context, id int32, _ string) (controller.PeerStatus, error) { return ask(id) }
	})
}

// TestMembership_TransferOnlyToAFitVoter: a transfer goes only to a voter
// that answers, is ready and has caught up; otherwise it is refused, naming
// the voter and why, and nothing changes: the same node leads, in the same
// term, and takes writes.
func TestMembership_TransferOnlyToAFitVoter(t *testing.T) {
	var asked atomic.Int32
	status := func(id int32) (controller.PeerStatus, error) {
		asked.Add(1)
		switch id {
		case 1:
			return controller.PeerStatus{}, errors.New("connection refused")
		case 2:
			return controller.PeerStatus{LastIndex: 1 << 40, NotReady: "a storage write failed 2s ago"}, nil
		}
		return controller.PeerStatus{LastIndex: 0, Ready: true}, nil
	}
	c := newCluster(t, 3, withPeers(status))
	leader := c.WaitForActive(5 * time.Second)
	ctrl := leader.Controller()
	term := leader.Log().CurrentTerm()
	for _, tt := range []struct {
		target int32
		want   string
	}{
		{1, "node 1 did not answer: connection refused"},
		{2, "node 2 is not ready: a storage write failed 2s ago"},
		{3, "node 3 is behind: its log ends at index 0"},
	} {
		if tt.target == leader.ID() {
			continue
		}
		_, err := ctrl.TransferLeadership(context.Background(), tt.target)
		if !errors.Is(err, controller.ErrTransferRefused) || !strings.Contains(err.Error(), tt.want) {
			t.Fatalf("TransferLeadership(%d) = %v; want ErrTransferRefused saying %q", tt.target, err, tt.want)
		}
	}
	if _, err := ctrl.TransferLeadership(context.Background(), 0); !errors.Is(err, controller.ErrTransferRefused) {
		t.Fatalf("TransferLeadership(any) with no fit voter = %v; want ErrTransferRefused", err)
	}
	if asked.Load() == 0 {
		t.Fatal("no voter was asked")
	}
	if now := c.WaitForActive(5 * time.Second); now != leader || leader.Log().CurrentTerm() != term {
		t.Fatalf("a refused transfer moved leadership or the term (node %d, term %d → node %d, term %d)", leader.ID(), term, now.ID(), leader.Log().CurrentTerm())
	}
	if _, _, err := ctrl.AppendNoOp(context.Background(), "after"); err != nil {
		t.Fatalf("write after the refusals: %v", err)
	}
}

func TestMembership_RemoveVoter(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	ctx := context.Background()
	var victim *member
	for _, nd := range c.Nodes() {
		if nd != leader {
			victim = nd
			break
		}
	}
	removed := waitRemoved(victim, 5*time.Second)

	res, err := leader.Controller().RemoveVoter(ctx, victim.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got := memberIDs(res); len(got) != 2 || slices.Contains(got, victim.ID()) {
		t.Fatalf("RemoveVoter(%d) = %v", victim.ID(), got)
	}
	// The removed node notices and says so; the rest still commit.
	if err := removed(); !errors.Is(err, controller.ErrRemoved) {
		t.Fatalf("WaitRemoved on the removed node = %v, want ErrRemoved", err)
	}
	if _, err := leader.Controller().Propose(ctx, noOp()); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Controller().RemoveVoter(ctx, victim.ID()); !errors.Is(err, controller.ErrUnknownVoter) {
		t.Fatalf("removing it again: err = %v, want ErrUnknownVoter", err)
	}
	if _, err := leader.Controller().RemoveVoter(ctx, 9); !errors.Is(err, controller.ErrUnknownVoter) {
		t.Fatalf("RemoveVoter(9): err = %v, want ErrUnknownVoter", err)
	}
}

// TestMembership_RemoveTheLeader: the active controller asked to remove
// itself hands leadership on and names the new leader, which removes it.
func TestMembership_RemoveTheLeader(t *testing.T) {
	c := newCluster(t, 3)
	old := c.WaitForActive(5 * time.Second)
	ctx := context.Background()
	removed := waitRemoved(old, 10*time.Second)

	_, err := old.Controller().RemoveVoter(ctx, old.ID())
	var nl *controller.NotLeaderError
	if !errors.As(err, &nl) || !nl.HandedOff || nl.LeaderID == old.ID() || nl.LeaderID < 0 {
		t.Fatalf("RemoveVoter(itself) = %v; want a handed-off NotLeaderError naming the new leader", err)
	}
	if got := len(old.Controller().Describe("").Voters); got != 3 {
		t.Fatalf("the configuration changed before the new leader was asked: %d voters", got)
	}
	next := c.WaitForActive(5*time.Second, nl.LeaderID)
	res, err := next.Controller().RemoveVoter(ctx, old.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got := memberIDs(res); len(got) != 2 || slices.Contains(got, old.ID()) {
		t.Fatalf("RemoveVoter(%d) at the new leader = %v", old.ID(), got)
	}
	if err := removed(); !errors.Is(err, controller.ErrRemoved) {
		t.Fatalf("WaitRemoved on the old leader = %v, want ErrRemoved", err)
	}
}
