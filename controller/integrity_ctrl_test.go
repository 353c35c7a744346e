package controller_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/internal/poll"
)

// activeWatch records every node it sees active, polling every millisecond
// until stopped: a node that took over, even for a moment, is caught
// (its takeover alone takes a round of the log).
type activeWatch struct {
	mu     sync.Mutex
	seen   map[int32]bool
	stop   chan struct{}
	done   chan struct{}
	stopMu sync.Once
}

func watchActive(t *testing.T, c *quorum) *activeWatch {
	w := &activeWatch{seen: map[int32]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			for _, nd := range c.Nodes() {
				if ok, _ := nd.Controller().Active(); ok {
					w.mu.Lock()
					w.seen[nd.ID()] = true
					w.mu.Unlock()
				}
			}
			select {
			case <-w.stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	t.Cleanup(w.halt)
	return w
}

func (w *activeWatch) halt() {
	w.stopMu.Do(func() { close(w.stop) })
	<-w.done
}

func (w *activeWatch) sawActive(id int32) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen[id]
}

// TestIntegrity_OldBinaryNeverActive: a controller restarted on a binary
// too old for the log (its state machine stops at metadata.version 1, the
// cluster is at 2) refuses the committed FeatureLevel record on replay. It
// is then not ready, says why in DescribeQuorum (the entry's index and the
// state machine's error), the active controller's digest comparison finds
// it differing, and when the log makes it leader it never takes over: it
// hands leadership to a voter fit to lead.
func TestIntegrity_OldBinaryNeverActive(t *testing.T) {
	var oldNode3 atomic.Bool
	c := newCluster(t, 3, withMetrics(), withTune(func(cfg *controller.Config) {
		cfg.InitialMetadataVersion = 1
		cfg.ImageCheckInterval = 50 * time.Millisecond
		if cfg.NodeID == 3 && oldNode3.Load() {
			cfg.MaxMetadataVersion = 1
		}
	}))
	c.WaitForActive(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	raiseLevel(ctx, t, c, 2)
	// Node 3 is to be restarted on the old binary: another node leads,
	// handed leadership if node 3 has it.
	poll.Until(t, 30*time.Second, "an active controller other than node 3", func() bool {
		act := c.Active()
		if act == nil {
			return false
		}
		if act.ID() != 3 {
			return true
		}
		_, _ = act.Controller().TransferLeadership(ctx, 1)
		return false
	})
	levelAt := c.WaitForActive(10 * time.Second).FSM().Image().Offset

	// Node 3 on the "old binary": its log replays the raise, which it refuses.
	oldNode3.Store(true)
	c.Kill(3)
	c.Restart(3)
	old := c.Node(3)
	poll.Until(t, 20*time.Second, "node 3 to stop acting on its image", func() bool { return old.Controller().Diverged() != nil })
	d := old.Controller().Diverged()
	if d.Index > levelAt || !strings.Contains(d.Reason, "refused committed entry") ||
		!strings.Contains(d.Reason, "metadata.version 2 is outside the range this binary supports, 1-1") {
		t.Errorf("node 3's divergence = %+v (the raise applied at or before index %d)", d, levelAt)
	}
	if err := old.Ready(); err == nil || !strings.Contains(err.Error(), "diverged at index") {
		t.Errorf("node 3's readiness = %v", err)
	}
	desc := old.Controller().Describe("test")
	if desc.DivergedIndex != d.Index || desc.DivergedReason != d.Reason {
		t.Errorf("DescribeQuorum: diverged %d %q", desc.DivergedIndex, desc.DivergedReason)
	}
	poll.UntilState(t, 20*time.Second, "the active controller's comparison to find node 3 differing", func() (bool, string) {
		act := c.Active()
		if act == nil {
			return false, "no active controller"
		}
		ic := act.Controller().ImageCheck()
		if ic == nil {
			return false, "no comparison yet"
		}
		for _, v := range ic.Voters {
			if v.Id == 3 && v.Result == "differs" {
				return true, ""
			}
		}
		return false, ic.String()
	})
	if got := scrape(t, c.Metrics(c.Active().ID()))[controller.MetricImageMismatches]; got < 1 {
		t.Errorf("%s = %v on the active controller", controller.MetricImageMismatches, got)
	}
	if got := scrape(t, c.Metrics(3))[controller.MetricImageDiverged]; got != 1 {
		t.Errorf("%s = %v on node 3", controller.MetricImageDiverged, got)
	}

	// The log hands node 3 leadership directly (no readiness check), as an
	// election may: it does not take over, and another voter does.
	w := watchActive(t, c)
	act := c.Active()
	epoch := act.FSM().Image().ControllerEpoch
	if err := c.Log().Elect(3); err != nil {
		t.Fatal(err)
	}
	poll.UntilState(t, 20*time.Second, "a new active controller other than node 3", func() (bool, string) {
		act := c.Active()
		if act == nil {
			return false, "none"
		}
		return act.ID() != 3 && act.FSM().Image().ControllerEpoch > epoch, fmt.Sprintf("active: node %d at epoch %d", act.ID(), act.FSM().Image().ControllerEpoch)
	})
	w.halt()
	if w.sawActive(3) {
		t.Fatal("node 3, whose image diverged, became the active controller")
	}
	// Node 3 may have been the first epoch's controller; it must lead none
	// since it diverged (its own image stopped at the divergence).
	for _, nd := range c.Nodes() {
		if img := nd.FSM().Image(); img.ControllerLeaderID == 3 && img.ControllerEpoch > epoch {
			t.Errorf("node %d's image names node 3 as the controller of epoch %d, after it diverged: %+v", nd.ID(), img.ControllerEpoch, img)
		}
	}
}

// TestIntegrity_DivergedActiveControllerStepsDown: the active controller
// finding its own image diverged (its state machine refused an entry, or it
// differed from the majority's digest) stops being active at once and hands
// leadership on.
func TestIntegrity_DivergedActiveControllerStepsDown(t *testing.T) {
	c := newCluster(t, 3)
	act := c.WaitForActive(10 * time.Second)
	w := watchActive(t, c)
	act.FSM().MarkDiverged(act.FSM().Image().Offset, "test: its image digest differed")
	poll.Until(t, 20*time.Second, "another node to be active", func() bool {
		other := c.Active()
		return other != nil && other.ID() != act.ID()
	})
	poll.Until(t, 10*time.Second, "the diverged node to stop leading the log", func() bool {
		id, _ := act.Controller().Leader()
		return id >= 0 && id != act.ID()
	})
	if ok, _ := act.Controller().Active(); ok {
		t.Fatal("the diverged node is still active")
	}
	w.halt()
	// It never came back either.
	if ok, _ := act.Controller().Active(); ok {
		t.Fatal("the diverged node took over again")
	}
}
