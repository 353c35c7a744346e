package server_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/keeltest"
	"github.com/keel-dev/keel/server"
)

// The controller's tests run on the in-memory log, where a removed node,
// like a raft follower the leader stopped replicating to, need not learn
// of its removal, and WaitRemoved (which today looks for its own removal
// in its configuration) would never see it. These tests of removal keep
// to a raft quorum, which tells a removed voter of its removal when it can
// still reach it.

// removedIDs returns the ids of a membership change's members, sorted.
func removedIDs(r *controller.MembershipResult) []int32 {
	var ids []int32
	for _, m := range r.Members {
		ids = append(ids, m.Id)
	}
	slices.Sort(ids)
	return ids
}

// waitRemoved runs nd's WaitRemoved in the background; the returned func
// waits for its result (nil if nd did not find itself removed in time).
func waitRemoved(nd *server.Node, timeout time.Duration) func() error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	done := make(chan error, 1)
	go func() { done <- nd.Controller().WaitRemoved(ctx) }()
	return func() error { defer cancel(); return <-done }
}

func TestMembership_RemoveVoter(t *testing.T) {
	c := keeltest.NewCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	ctx := context.Background()
	var victim *server.Node
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
	if got := removedIDs(res); len(got) != 2 || slices.Contains(got, victim.ID()) {
		t.Fatalf("RemoveVoter(%d) = %v", victim.ID(), got)
	}
	// The removed node notices and says so; the rest still commit.
	if err := removed(); !errors.Is(err, controller.ErrRemoved) {
		t.Fatalf("WaitRemoved on the removed node = %v, want ErrRemoved", err)
	}
	if _, err := leader.Controller().Propose(ctx, noOps(1)...); err != nil {
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
	c := keeltest.NewCluster(t, 3)
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
	if got := removedIDs(res); len(got) != 2 || slices.Contains(got, old.ID()) {
		t.Fatalf("RemoveVoter(%d) at the new leader = %v", old.ID(), got)
	}
	if err := removed(); !errors.Is(err, controller.ErrRemoved) {
		t.Fatalf("WaitRemoved on the old leader = %v, want ErrRemoved", err)
	}
}
