package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func noOp() *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_NoOp{NoOp: &keelpb.NoOpRecord{}}}
}

func TestController_FirstActiveWritesClusterIDAndEpochOne(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	_, epoch := leader.ctrl.Active()
	if epoch != 1 {
		t.Fatalf("first epoch = %d, want 1", epoch)
	}
	img := leader.fsm.Image()
	if img.ClusterID != "test-cluster" || img.ControllerEpoch != 1 || img.ControllerLeaderID != leader.id {
		t.Fatalf("image after takeover = %+v", img)
	}
	c.WaitForApplied(img.Offset, 5*time.Second)
	for _, nd := range c.live() {
		if got := nd.fsm.Image(); got.ControllerEpoch != 1 || got.ClusterID != "test-cluster" {
			t.Fatalf("node %d image = %+v", nd.id, got)
		}
	}
}

// Each takeover adds exactly one to the epoch, and the cluster id written by
// the first controller survives them all.
func TestFailover_EpochIncrementsByOnePerTakeover(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	for want := int64(2); want <= 5; want++ {
		old := leader.id
		c.Kill(old)
		leader = c.WaitForActive(5 * time.Second)
		_, epoch := leader.ctrl.Active()
		if epoch != want || leader.id == old {
			t.Fatalf("after killing node %d: node %d active with epoch %d, want a new leader with epoch %d", old, leader.id, epoch, want)
		}
		c.Restart(old)
		c.WaitForApplied(leader.fsm.Image().Offset, 5*time.Second)
	}
	for _, nd := range c.live() {
		if img := nd.fsm.Image(); img.ClusterID != "test-cluster" || img.ControllerEpoch != 5 {
			t.Fatalf("node %d image = %+v", nd.id, img)
		}
	}
}

func TestController_ProposeCommitsOnEveryNode(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	index, err := leader.ctrl.Propose(context.Background(), noOp(), noOp())
	if err != nil {
		t.Fatalf("Propose: %v", err)
	}
	c.WaitForApplied(index, 5*time.Second)
}

func TestController_FollowerRefusesWithLeaderHint(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	for _, nd := range c.live() {
		if nd == leader {
			continue
		}
		waitFor(t, 5*time.Second, "follower to learn the leader", func() bool {
			id, _ := nd.ctrl.Leader()
			return id == leader.id
		})
		_, err := nd.ctrl.Propose(context.Background(), noOp())
		var nl *NotLeaderError
		if !errors.As(err, &nl) || !errors.Is(err, ErrNotLeader) {
			t.Fatalf("Propose on follower: err = %v, want *NotLeaderError", err)
		}
		if nl.LeaderID != leader.id || nl.LeaderAddress != string(leader.addr) {
			t.Fatalf("hint = %d@%s, want %d@%s", nl.LeaderID, nl.LeaderAddress, leader.id, leader.addr)
		}
	}
}

// A leader cut off from the quorum stops being active and its writes fail
// within a bounded time; the majority carries on with the next epoch; after
// healing the old leader follows and agrees.
func TestFailover_PartitionedLeaderStepsDown(t *testing.T) {
	c := newTestCluster(t, 3)
	old := c.WaitForActive(5 * time.Second)
	_, oldEpoch := old.ctrl.Active()
	c.Partition(old.id)

	start := time.Now()
	_, err := old.ctrl.Propose(context.Background(), noOp())
	if err == nil {
		t.Fatal("a write on a partitioned leader succeeded")
	}
	if !errors.Is(err, ErrOutcomeUnknown) && !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrNotReady) {
		t.Fatalf("partitioned write: err = %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("partitioned write took %v to fail", d)
	}
	waitFor(t, 5*time.Second, "the partitioned leader to stop being active", func() bool {
		ok, _ := old.ctrl.Active()
		return !ok
	})

	var others []int32
	for _, nd := range c.live() {
		if nd != old {
			others = append(others, nd.id)
		}
	}
	leader := c.WaitForActive(5*time.Second, others...)
	if _, epoch := leader.ctrl.Active(); epoch != oldEpoch+1 {
		t.Fatalf("new epoch = %d, want %d", epoch, oldEpoch+1)
	}
	c.Heal()
	index, err := leader.ctrl.Propose(context.Background(), noOp())
	if err != nil {
		t.Fatalf("Propose after heal: %v", err)
	}
	c.WaitForApplied(index, 5*time.Second)
	if img := old.fsm.Image(); img.ControllerEpoch != oldEpoch+1 {
		t.Fatalf("healed node's epoch = %d, want %d", img.ControllerEpoch, oldEpoch+1)
	}
}

func TestController_WriteWithoutQuorumFailsInBoundedTime(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	for _, nd := range c.live() {
		if nd != leader {
			c.Kill(nd.id)
		}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := leader.ctrl.Propose(ctx, noOp()); err == nil {
		t.Fatal("a write without a quorum succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("write without quorum took %v to fail", d)
	}
}

func TestLeadership_SubmitRefusesWhenFullOrClosed(t *testing.T) {
	c := &Controller{cfg: Config{EventQueueSize: 2, SessionTimeout: time.Second}, fsm: fsm.New()}
	l := c.newLeadership()
	defer l.cancel()
	ev := event{run: func() {}, abandon: func(error) {}}
	for i := 0; i < 2; i++ {
		if err := l.submit(context.Background(), ev); err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
	if err := l.submit(context.Background(), ev); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("submit to a full queue: err = %v, want ErrQueueFull", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.submit(ctx, ev); !errors.Is(err, context.Canceled) {
		t.Fatalf("submit with a cancelled context: err = %v", err)
	}
}

// A linearizable read needs an active controller that a quorum still
// follows: a follower refuses with the leader hint, a partitioned leader
// refuses rather than answer from an image the new leader has moved past,
// and the new leader's answer holds its latest write.
func TestController_ReadImageIsLinearizable(t *testing.T) {
	c := newTestCluster(t, 3)
	old := c.WaitForActive(5 * time.Second)
	img, err := old.ctrl.ReadImage(context.Background())
	if err != nil {
		t.Fatalf("ReadImage on the active controller: %v", err)
	}
	_, epoch := old.ctrl.Active()
	if img.ControllerEpoch != epoch {
		t.Fatalf("ReadImage epoch = %d, want the active epoch %d", img.ControllerEpoch, epoch)
	}
	for _, nd := range c.live() {
		if nd == old {
			continue
		}
		waitFor(t, 5*time.Second, "follower to learn the leader", func() bool {
			id, _ := nd.ctrl.Leader()
			return id == old.id
		})
		if _, err := nd.ctrl.ReadImage(context.Background()); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("ReadImage on follower %d: err = %v, want not-leader", nd.id, err)
		}
	}

	c.Partition(old.id)
	var others []int32
	for _, nd := range c.live() {
		if nd != old {
			others = append(others, nd.id)
		}
	}
	leader := c.WaitForActive(5*time.Second, others...)
	index, err := leader.ctrl.Propose(context.Background(), noOp())
	if err != nil {
		t.Fatalf("Propose on the new leader: %v", err)
	}
	// The old leader may not have noticed yet; either way it must not answer.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if img, err := old.ctrl.ReadImage(ctx); err == nil {
		t.Fatalf("partitioned old leader answered a linearizable read (epoch %d, offset %d)", img.ControllerEpoch, img.Offset)
	}
	img, err = leader.ctrl.ReadImage(context.Background())
	if err != nil {
		t.Fatalf("ReadImage on the new leader: %v", err)
	}
	if img.Offset < index {
		t.Fatalf("new leader's linearizable image is at %d, before its acknowledged write at %d", img.Offset, index)
	}
}
