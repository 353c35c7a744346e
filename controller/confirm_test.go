package controller_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

// The answers of decisions that write nothing are given only once this
// node has confirmed, after taking them, that it still led (group.go,
// leadership.confirm).

// deposedCluster starts three nodes and makes node 1 the active
// controller, with broker 1 registered and active.
func deposedCluster(t *testing.T) (*quorum, *member) {
	t.Helper()
	c := newCluster(t, 3)
	old := c.WaitForActive(5 * time.Second)
	if old.ID() != 1 {
		t.Fatalf("node %d is active, want node 1 (the quorum elects the lowest id)", old.ID())
	}
	registerActive(t, old, 1, incA)
	return c, old
}

// TestConfirm_DeposedLeaderAnswersNoDecisionThatWritesNothing: a leader
// whose log no longer commits (cut off from the others, it has not noticed
// yet) is asked to create a topic that exists in its image, delete one that
// does not, set a config to the value it holds, and for a linearizable
// read; then the others elect a leader, which deletes that topic, creates
// the other and changes the value. The deposed leader must not answer any
// of them from its image: each gets the not-active error once it finds it
// no longer leads.
func TestConfirm_DeposedLeaderAnswersNoDecisionThatWritesNothing(t *testing.T) {
	c, old := deposedCluster(t)
	ctx := context.Background()
	one := []*keelpb.PartitionAssignment{{Replicas: []int32{1}}}
	if _, err := old.Controller().CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: "kept", Assignments: one}); err != nil {
		t.Fatal(err)
	}
	retention := func(v string) *keelpb.IncrementalAlterConfigsRequest {
		return &keelpb.IncrementalAlterConfigsRequest{
			Resource: &keelpb.ConfigResource{Type: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER},
			Configs:  []*keelpb.AlterableConfig{{Name: fsm.RetentionMs, Op: keelpb.AlterConfigOp_ALTER_CONFIG_OP_SET, Value: v}},
		}
	}
	if _, err := old.Controller().AlterConfigs(ctx, retention("1000")); err != nil {
		t.Fatal(err)
	}
	c.WaitForApplied(old.FSM().Image().Offset)

	// The asks are taken while node 1 leads, and wait for the barrier that
	// would confirm it, which the held log does not commit.
	c.Log().HoldCommits()
	last := old.Log().LastIndex()
	asks := map[string]func() error{
		"create an existing topic": func() error {
			_, err := old.Controller().CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: "kept", Assignments: one})
			return err
		},
		"delete a missing topic": func() error { return old.Controller().DeleteTopic(ctx, "later") },
		"set a config to its value": func() error {
			_, err := old.Controller().AlterConfigs(ctx, retention("1000"))
			return err
		},
		"linearizable read": func() error {
			img, err := old.Controller().ReadImage(ctx)
			if err == nil {
				if _, ok := img.Topic("kept"); ok {
					return errors.New("the image holds topic kept, deleted by the new active controller")
				}
			}
			return err
		},
	}
	answers := make(map[string]chan error, len(asks))
	for what, ask := range asks {
		ch := make(chan error, 1)
		answers[what] = ch
		go func() { ch <- ask() }()
	}
	poll.Until(t, 5*time.Second, "node 1 to append the barrier that would confirm the asks", func() bool {
		return old.Log().LastIndex() > last
	})
	c.Partition(1)
	c.Log().ReleaseCommits()
	onNext(t, c, "delete topic kept", func(ctrl *controller.Controller) error {
		if err := ctrl.DeleteTopic(ctx, "kept"); !errors.Is(err, controller.ErrUnknownTopic) {
			return err
		}
		return nil // a retry of one that committed
	})
	onNext(t, c, "create topic later", func(ctrl *controller.Controller) error {
		if _, err := ctrl.CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: "later", Assignments: one}); !errors.Is(err, controller.ErrTopicExists) {
			return err
		}
		return nil
	})
	onNext(t, c, "set retention.ms to 2000", func(ctrl *controller.Controller) error {
		_, err := ctrl.AlterConfigs(ctx, retention("2000"))
		return err
	})
	c.Heal()
	for what, ch := range answers {
		select {
		case err := <-ch:
			// The not-active error; or, when it was decided after a write
			// of the deposed leader that did not commit, "outcome
			// unknown": never an answer from its image.
			if !errors.Is(err, controller.ErrNotLeader) && !errors.Is(err, controller.ErrNotReady) &&
				!errors.Is(err, controller.ErrLeadershipUnconfirmed) && !errors.Is(err, controller.ErrOutcomeUnknown) {
				t.Errorf("%s on the deposed leader: err = %v; want the not-active error, never an answer from its image", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s on the deposed leader: no answer within 10s", what)
		}
	}
	// The new active controller's state is what the deposed one's answers
	// would have contradicted.
	var img *fsm.Image
	onNext(t, c, "a linearizable read", func(ctrl *controller.Controller) (err error) {
		img, err = ctrl.ReadImage(ctx)
		return err
	})
	_, kept := img.Topic("kept")
	_, later := img.Topic("later")
	v, _ := img.ClusterConfig(fsm.RetentionMs)
	if kept || !later || v != "2000" {
		t.Fatalf("the new active controller's image: kept %v, later %v, %s=%s", kept, later, fsm.RetentionMs, v)
	}
}

// onNext runs op on the active controller among nodes 2 and 3 until it
// succeeds.
func onNext(t *testing.T, c *quorum, what string, op func(*controller.Controller) error) {
	t.Helper()
	poll.UntilState(t, 20*time.Second, what+" on the new active controller", func() (bool, string) {
		err := op(c.WaitForActive(10*time.Second, 2, 3).Controller())
		return err == nil, fmt.Sprint(err)
	})
}

// TestConfirm_DecisionsThatWriteNothingShareABarrier: decisions that write
// nothing, taken together, are confirmed together: one barrier in the
// log for all of them (as etcd batches ReadIndex requests), each answered
// with its own outcome.
func TestConfirm_DecisionsThatWriteNothingShareABarrier(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	l := leader.Controller().ActiveLeadership()
	release := holdEventLoop(t, l)
	last := leader.Log().LastIndex()

	const n = 50
	errNothing := errors.New("nothing to do")
	waits := queueAll(t, l, n, func(i int, img *fsm.Image) ([]*keelpb.Record, error) {
		if i%2 == 0 {
			return nil, errNothing
		}
		return nil, nil
	})
	release()
	for i, wait := range waits {
		index, err := wait()
		if leader.Controller().ActiveLeadership() != l {
			t.Skipf("leadership moved during the test (decision %d: %v): nothing to judge", i, err)
		}
		var want error
		if i%2 == 0 {
			want = errNothing
		}
		if err != want || index != 0 {
			t.Errorf("decision %d: index %d, err %v; want 0, %v", i, index, err, want)
		}
	}
	// Other events (the controller registrations' refresh, say) may have
	// needed a confirmation of their own; the 50 needed one.
	poll.Until(t, 5*time.Second, "the leader to apply its last entry", func() bool {
		return c.Log().Applied(leader.ID()) == leader.Log().LastIndex()
	})
	if grew := leader.Log().LastIndex() - last; grew == 0 || grew > 2 {
		t.Errorf("the log grew by %d entries for %d decisions that wrote nothing, want one barrier", grew, n)
	}
}
