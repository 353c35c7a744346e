package controller_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-dev/keel/consensus"
	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/internal/poll"
)

// withTakeoverFault fails takeover attempts on the nodes for which fault
// returns an error.
func withTakeoverFault(fault func(id int32) error) quorumOption {
	return withTune(func(cfg *controller.Config) {
		id := cfg.NodeID
		controller.SetTakeoverFault(cfg, func() error { return fault(id) })
	})
}

var errInjected = errors.New("injected takeover fault")

// faultLog counts the takeover attempts a fault failed and when the first
// and the last were.
type faultLog struct {
	attempts    atomic.Int32
	first, last atomic.Int64 // unix nanoseconds
}

func (f *faultLog) fail() error {
	now := time.Now().UnixNano()
	f.first.CompareAndSwap(0, now)
	f.last.Store(now)
	f.attempts.Add(1)
	return errInjected
}

func (f *faultLog) failingFor() time.Duration {
	return time.Duration(f.last.Load() - f.first.Load())
}

// TestTakeover_RetriedUntilTheFaultClears: a leader whose takeover keeps
// failing, with no other voter to hand leadership to, keeps trying for as
// long as it leads, past the bound after which it tries to hand leadership
// away, and becomes active once the fault clears. It used to give up after
// three attempts and stay leader, never active, answering NOT_READY.
func TestTakeover_RetriedUntilTheFaultClears(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	var faults faultLog
	c := newCluster(t, 1, withTakeoverFault(func(int32) error {
		if !failing.Load() {
			return nil
		}
		return faults.fail()
	}))
	nd := c.Node(1)
	if err := c.Log().Elect(1); err != nil {
		t.Fatal(err)
	}
	_, _, giveUp := nd.Controller().TakeoverTiming()
	poll.Until(t, 10*time.Second, "takeover to keep failing past the bound and the old three attempts", func() bool {
		return faults.attempts.Load() > 3 && faults.failingFor() > 2*giveUp
	})
	if nd.Log().State() != consensus.Leader {
		t.Fatalf("the node is %v, want the leader it has been throughout", nd.Log().State())
	}
	if active, _ := nd.Controller().Active(); active {
		t.Fatal("active although every takeover attempt failed")
	}
	if _, err := nd.Controller().Propose(context.Background(), noOp()); !errors.Is(err, controller.ErrNotReady) {
		t.Fatalf("a write before takeover: %v, want ErrNotReady", err)
	}

	failing.Store(false)
	c.WaitForActive(5 * time.Second)
	if _, epoch := nd.Controller().Active(); epoch != 1 {
		t.Fatalf("epoch after the takeover = %d, want 1", epoch)
	}
	if _, err := nd.Controller().Propose(context.Background(), noOp()); err != nil {
		t.Fatalf("a write once active: %v", err)
	}
}

// TestTakeover_PersistentFaultHandsLeadershipAway: the first leader cannot
// take over, ever. It keeps trying for the bound, then hands leadership to
// another node, which becomes active.
func TestTakeover_PersistentFaultHandsLeadershipAway(t *testing.T) {
	var bad atomic.Int32
	var faults faultLog
	c := newCluster(t, 3, withTakeoverFault(func(id int32) error {
		// Only leaders take over: the first to try is the first leader.
		bad.CompareAndSwap(0, id)
		if id == bad.Load() {
			return faults.fail()
		}
		return nil
	}))
	active := c.WaitForActive(10 * time.Second)
	if active.ID() == bad.Load() {
		t.Fatalf("node %d is active although its every takeover attempt failed", active.ID())
	}
	if state := c.Node(bad.Load()).Log().State(); state == consensus.Leader {
		t.Fatalf("node %d, which cannot take over, still leads", bad.Load())
	}
	// It hands leadership away once the failures have lasted the bound:
	// the last failed attempt comes at most a few milliseconds before it.
	_, longest, giveUp := active.Controller().TakeoverTiming()
	if n, d := faults.attempts.Load(), faults.failingFor(); n < 4 || d < giveUp-longest/2 {
		t.Fatalf("node %d handed leadership away after %d attempts over %v, want it to retry for %v", bad.Load(), n, d, giveUp)
	}
	if _, err := active.Controller().Propose(context.Background(), noOp()); err != nil {
		t.Fatalf("a write on the new active controller: %v", err)
	}
}

// TestTakeover_RetriesEndOnStop: Stop (like losing leadership, which
// cancels the same context) ends a takeover that is still retrying.
func TestTakeover_RetriesEndOnStop(t *testing.T) {
	var faults faultLog
	c := newCluster(t, 1, withTakeoverFault(func(int32) error { return faults.fail() }))
	nd := c.Node(1)
	if err := c.Log().Elect(1); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, "takeover to fail twice", func() bool { return faults.attempts.Load() >= 2 })
	stopped := make(chan struct{})
	go func() {
		nd.Controller().Stop()
		close(stopped)
	}()
	// Stop waits for the leadership's goroutines, establish among them.
	_, longest, _ := nd.Controller().TakeoverTiming()
	poll.Until(t, longest+time.Second, "Stop to end the takeover retries", func() bool {
		select {
		case <-stopped:
			return true
		default:
			return false
		}
	})
	if active, _ := nd.Controller().Active(); active {
		t.Fatal("active after Stop")
	}
}
