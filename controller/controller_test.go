package controller_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// clusterID is the id the first active controller of a test cluster writes.
const clusterID = "test-cluster"

func noOp() *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_NoOp{NoOp: &keelpb.NoOpRecord{}}}
}

func TestController_FirstActiveWritesClusterIDAndEpochOne(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	_, epoch := leader.Controller().Active()
	if epoch != 1 {
		t.Fatalf("first epoch = %d, want 1", epoch)
	}
	img := leader.FSM().Image()
	if img.ClusterID != clusterID || img.ControllerEpoch != 1 || img.ControllerLeaderID != leader.ID() {
		t.Fatalf("image after takeover = %+v", img)
	}
	c.WaitForApplied(img.Offset)
	for _, nd := range c.Nodes() {
		if got := nd.FSM().Image(); got.ControllerEpoch != 1 || got.ClusterID != clusterID {
			t.Fatalf("node %d image = %+v", nd.ID(), got)
		}
	}
}

// Each takeover adds exactly one to the epoch (the FSM refuses an epoch record
// that does not follow the current one), and the cluster id written by the
// first controller survives them all: each kill raises the epoch, and every
// node ends on the same one.
func TestFailover_EpochIncrementsByOnePerTakeover(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	_, last := leader.Controller().Active()
	for kill := 0; kill < 4; kill++ {
		old := leader.ID()
		c.Kill(old)
		leader = c.WaitForActive(5 * time.Second)
		_, epoch := leader.Controller().Active()
		if epoch <= last || leader.ID() == old {
			t.Fatalf("after killing node %d: node %d active with epoch %d, want a new leader with an epoch above %d", old, leader.ID(), epoch, last)
		}
		last = epoch
		c.Restart(old)
		c.WaitForApplied(leader.FSM().Image().Offset)
	}
	leader = c.WaitForActive(5 * time.Second)
	_, last = leader.Controller().Active()
	c.WaitForApplied(leader.FSM().Image().Offset)
	for _, nd := range c.Nodes() {
		if img := nd.FSM().Image(); img.ClusterID != clusterID || img.ControllerEpoch != last {
			t.Fatalf("node %d image = %+v, want cluster %s at epoch %d", nd.ID(), img, clusterID, last)
		}
	}
}

func TestController_ProposeCommitsOnEveryNode(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	index, err := leader.Controller().Propose(context.Background(), noOp(), noOp())
	if err != nil {
		t.Fatalf("Propose: %v", err)
	}
	c.WaitForApplied(index)
}

func TestController_FollowerRefusesWithLeaderHint(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	for _, nd := range c.Nodes() {
		if nd == leader {
			continue
		}
		poll.Until(t, 5*time.Second, "follower to learn the leader", func() bool {
			id, _ := nd.Controller().Leader()
			return id == leader.ID()
		})
		_, err := nd.Controller().Propose(context.Background(), noOp())
		var nl *controller.NotLeaderError
		if !errors.As(err, &nl) || !errors.Is(err, controller.ErrNotLeader) {
			t.Fatalf("Propose on follower: err = %v, want *NotLeaderError", err)
		}
		if nl.LeaderID != leader.ID() || nl.LeaderAddress != leader.Addr() {
			t.Fatalf("hint = %d@%s, want %d@%s", nl.LeaderID, nl.LeaderAddress, leader.ID(), leader.Addr())
		}
	}
}

// A leader cut off from the quorum stops being active and its writes fail
// within a bounded time; the majority carries on with the next epoch; after
// healing the old leader follows and agrees.
func TestFailover_PartitionedLeaderStepsDown(t *testing.T) {
	c := newCluster(t, 3)
	old := c.WaitForActive(5 * time.Second)
	_, oldEpoch := old.Controller().Active()
	// A write in flight when the leader is cut off.
	c.Log().HoldCommits()
	last := old.Log().LastIndex()
	done := make(chan error, 1)
	go func() {
		_, err := old.Controller().Propose(context.Background(), noOp())
		done <- err
	}()
	poll.Until(t, 5*time.Second, "the write to be appended", func() bool { return old.Log().LastIndex() > last })
	start := time.Now()
	c.Partition(old.ID())
	c.Log().ReleaseCommits()
	err := <-done
	if err == nil {
		t.Fatal("a write on a partitioned leader succeeded")
	}
	if !errors.Is(err, controller.ErrOutcomeUnknown) && !errors.Is(err, controller.ErrNotLeader) && !errors.Is(err, controller.ErrNotReady) {
		t.Fatalf("partitioned write: err = %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("partitioned write took %v to fail", d)
	}
	poll.Until(t, 5*time.Second, "the partitioned leader to stop being active", func() bool {
		ok, _ := old.Controller().Active()
		return !ok
	})

	var others []int32
	for _, nd := range c.Nodes() {
		if nd != old {
			others = append(others, nd.ID())
		}
	}
	leader := c.WaitForActive(5*time.Second, others...)
	if _, epoch := leader.Controller().Active(); epoch != oldEpoch+1 {
		t.Fatalf("new epoch = %d, want %d", epoch, oldEpoch+1)
	}
	c.Heal()
	index, err := leader.Controller().Propose(context.Background(), noOp())
	if err != nil {
		t.Fatalf("Propose after heal: %v", err)
	}
	c.WaitForApplied(index)
	if img := old.FSM().Image(); img.ControllerEpoch != oldEpoch+1 {
		t.Fatalf("healed node's epoch = %d, want %d", img.ControllerEpoch, oldEpoch+1)
	}
}

// TestController_WriteWithoutQuorumFailsInBoundedTime: a write in flight
// when the leader loses its quorum (the log commits nothing more, and the
// leader steps down) fails, in bounded time, with its outcome unknown.
func TestController_WriteWithoutQuorumFailsInBoundedTime(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	followers := make([]int32, 0, 2)
	for _, nd := range c.Nodes() {
		if nd != leader {
			followers = append(followers, nd.ID())
		}
	}
	c.Kill(followers[0])
	c.Log().HoldCommits() // the write is in flight until the quorum is gone
	last := leader.Log().LastIndex()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := leader.Controller().Propose(ctx, noOp())
		done <- err
	}()
	poll.Until(t, 5*time.Second, "the write to be appended", func() bool { return leader.Log().LastIndex() > last })
	start := time.Now()
	c.Kill(followers[1])
	if err := <-done; !errors.Is(err, controller.ErrOutcomeUnknown) {
		t.Fatalf("a write in flight when the quorum was lost: err = %v, want %v", err, controller.ErrOutcomeUnknown)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("write without quorum took %v to fail", d)
	}
}

// A linearizable read needs an active controller that a quorum still
// follows: a follower refuses with the leader hint, a partitioned leader
// refuses rather than answer from an image the new leader has moved past,
// and the new leader's answer holds its latest write.
func TestController_ReadImageIsLinearizable(t *testing.T) {
	c := newCluster(t, 3)
	old := c.WaitForActive(5 * time.Second)
	img, err := old.Controller().ReadImage(context.Background())
	if err != nil {
		t.Fatalf("ReadImage on the active controller: %v", err)
	}
	_, epoch := old.Controller().Active()
	if img.ControllerEpoch != epoch {
		t.Fatalf("ReadImage epoch = %d, want the active epoch %d", img.ControllerEpoch, epoch)
	}
	for _, nd := range c.Nodes() {
		if nd == old {
			continue
		}
		poll.Until(t, 5*time.Second, "follower to learn the leader", func() bool {
			id, _ := nd.Controller().Leader()
			return id == old.ID()
		})
		if _, err := nd.Controller().ReadImage(context.Background()); !errors.Is(err, controller.ErrNotLeader) {
			t.Fatalf("ReadImage on follower %d: err = %v, want not-leader", nd.ID(), err)
		}
	}

	c.Partition(old.ID())
	var others []int32
	for _, nd := range c.Nodes() {
		if nd != old {
			others = append(others, nd.ID())
		}
	}
	leader := c.WaitForActive(5*time.Second, others...)
	index, err := leader.Controller().Propose(context.Background(), noOp())
	if err != nil {
		t.Fatalf("Propose on the new leader: %v", err)
	}
	// The old leader may not have noticed yet; either way it must not answer.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if img, err := old.Controller().ReadImage(ctx); err == nil {
		t.Fatalf("partitioned old leader answered a linearizable read (epoch %d, offset %d)", img.ControllerEpoch, img.Offset)
	}
	img, err = leader.Controller().ReadImage(context.Background())
	if err != nil {
		t.Fatalf("ReadImage on the new leader: %v", err)
	}
	if img.Offset < index {
		t.Fatalf("new leader's linearizable image is at %d, before its acknowledged write at %d", img.Offset, index)
	}
}

// A whole quorum restarted on its data dirs: each node's state machine has
// applied nothing of the log when a leader is elected, so the takeover must
// wait for the log of earlier terms before deciding (no second cluster id,
// the next epoch), and no node refuses any committed entry.
func TestTakeover_WholeQuorumRestartRefusesNothing(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	if _, err := leader.Controller().Propose(context.Background(), noOp(), noOp()); err != nil {
		t.Fatal(err)
	}
	_, before := leader.Controller().Active()
	c.WaitForApplied(leader.FSM().Image().Offset)
	for _, nd := range c.Nodes() {
		c.Kill(nd.ID())
	}
	for _, id := range []int32{1, 2, 3} {
		c.Restart(id)
	}
	leader = c.WaitForActive(10 * time.Second)
	c.WaitForApplied(leader.FSM().Image().Offset)
	for _, nd := range c.Nodes() {
		img := nd.FSM().Image()
		if n := nd.FSM().Refused(); n != 0 {
			t.Errorf("node %d refused %d committed entries", nd.ID(), n)
		}
		if img.ClusterID != clusterID || img.ControllerEpoch <= before {
			t.Errorf("node %d: cluster %q epoch %d, want cluster %q and an epoch above %d", nd.ID(), img.ClusterID, img.ControllerEpoch, clusterID, before)
		}
	}
}
