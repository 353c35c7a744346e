package controller_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
)

// TestFeatures_NewClusterStartsAtLatest: a new cluster's first active
// controller writes the binary's latest level, and the active controller
// registers every voter's range (metadata.version 2 allows it).
func TestFeatures_NewClusterStartsAtLatest(t *testing.T) {
	c := newCluster(t, 3)
	c.WaitForActive(10 * time.Second)
	poll.Until(t, 20*time.Second, "three controller registrations on every node", func() bool {
		for _, nd := range c.Nodes() {
			img := nd.FSM().Image()
			if img.MetadataVersion != fsm.MaxMetadataVersion || len(img.Controllers()) != 3 {
				return false
			}
		}
		return true
	})
}

// TestFeatures_RaiseOnceEveryControllerSupportsIt is a rolling upgrade of a
// quorum in Kafka's way (QuorumControllerTest's feature checks): a cluster
// started at level 1 with a voter that says it supports only level 1 (as
// an older binary) refuses the raise, naming it; once that voter is
// restarted on the "new binary" the raise goes through, the voters are
// registered, and a downgrade that would drop the registrations is
// refused.
func TestFeatures_RaiseOnceEveryControllerSupportsIt(t *testing.T) {
	var oldNode3 atomic.Bool
	oldNode3.Store(true)
	c := newCluster(t, 3, withTune(func(cfg *controller.Config) {
		cfg.InitialMetadataVersion = 1
		if cfg.NodeID == 3 && oldNode3.Load() {
			cfg.MaxMetadataVersion = 1
		}
	}))
	c.WaitForActive(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var err error
	poll.UntilState(t, 30*time.Second, "the raise to be refused because of controller 3", func() (bool, string) {
		act := c.Active()
		if act == nil {
			return false, "no active controller"
		}
		_, err = act.Controller().UpdateFeatures(ctx, 2, false)
		return errors.Is(err, controller.ErrUnsupportedMetadataVersion) && strings.Contains(err.Error(), "controller 3 supports 1-1"), errString(err)
	})
	if img := c.Active().FSM().Image(); img.FinalizedMetadataVersion() != 1 || len(img.Controllers()) != 0 {
		t.Fatalf("after the refusal: level %d, registrations %v", img.FinalizedMetadataVersion(), img.Controllers())
	}

	oldNode3.Store(false)
	c.Kill(3)
	c.Restart(3)
	raiseLevel(ctx, t, c, 2)
	poll.Until(t, 20*time.Second, "every node at level 2 with three registrations", func() bool {
		for _, nd := range c.Nodes() {
			img := nd.FSM().Image()
			if img.MetadataVersion != 2 || len(img.Controllers()) != 3 {
				return false
			}
		}
		return true
	})
	// Leadership may move on a loaded machine: ask whichever node is active.
	poll.UntilState(t, 30*time.Second, "the downgrade to be refused for the registrations", func() (bool, string) {
		act := c.Active()
		if act == nil {
			return false, "no active controller"
		}
		_, err = act.Controller().UpdateFeatures(ctx, 1, true)
		return errors.Is(err, controller.ErrUnsafeDowngrade) && strings.Contains(err.Error(), "3 controller registrations (metadata.version 2) would be dropped"), errString(err)
	})
	var f *controller.Features
	poll.UntilState(t, 30*time.Second, "a description of every node", func() (bool, string) {
		act := c.Active()
		if act == nil {
			return false, "no active controller"
		}
		f, err = act.Controller().DescribeFeatures(ctx)
		return err == nil, errString(err)
	})
	if f.Level != 2 || len(f.Nodes) != 3 {
		t.Fatalf("described %+v", f)
	}
	for _, n := range f.Nodes {
		if n.Err != "" || n.Max != fsm.MaxMetadataVersion {
			t.Fatalf("node %+v", n)
		}
	}
}

// raiseLevel raises the cluster's metadata.version to level through
// whichever node is active, asking again until it is done.
func raiseLevel(ctx context.Context, t *testing.T, c *quorum, level uint32) {
	t.Helper()
	poll.UntilState(t, 30*time.Second, fmt.Sprintf("the raise to level %d", level), func() (bool, string) {
		act := c.Active()
		if act == nil {
			return false, "no active controller"
		}
		u, err := act.Controller().UpdateFeatures(ctx, level, false)
		return err == nil && u.Level == level, errString(err)
	})
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}
