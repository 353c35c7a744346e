package controller_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/keel-dev/keel/consensus"
	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

// The event loop pipelines its decisions: it takes each on the image the
// ones before it leave while their entries are still on their way to the
// followers, and answers each caller once its own entries commit. The
// tests queue their decisions behind a held event loop, so that they are
// taken back to back, in a known order.

// pipelined is more decisions than the pipeline holds entries
// (maxInflightEntries), so the loop must also wait for room.
const pipelined = 300

// queueAll queues n decisions on l, decision i being d(i, img), and returns
// their waits.
func queueAll(t *testing.T, l *controller.Leadership, n int, d func(i int, img *fsm.Image) ([]*keelpb.Record, error)) []func() (uint64, error) {
	t.Helper()
	waits := make([]func() (uint64, error), n)
	for i := range n {
		wait, err := l.Queue(context.Background(), func(img *fsm.Image) ([]*keelpb.Record, error) { return d(i, img) })
		if err != nil {
			t.Fatalf("queueing decision %d: %v", i, err)
		}
		waits[i] = wait
	}
	return waits
}

// TestPipeline_ManyDecisionsInFlight: hundreds of decisions taken back to
// back each see the image the ones before them leave, commit in the order
// they were taken, each at the index its decision was taken for (the
// leader's FSM adopts every one), and are answered only once their own
// entry is applied; some were taken while the entries before them had not
// yet committed (the pipeline), and the next decision after them all
// starts from the committed image.
func TestPipeline_ManyDecisionsInFlight(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	l := leader.Controller().ActiveLeadership()
	release := holdEventLoop(t, l)
	before := leader.FSM().Image().Offset
	adopted := leader.FSM().Adopted()

	seen := make([]uint64, pipelined)      // the offset of the image decision i was taken on
	committed := make([]uint64, pipelined) // the committed offset when it was taken
	waits := queueAll(t, l, pipelined, func(i int, img *fsm.Image) ([]*keelpb.Record, error) {
		seen[i], committed[i] = img.Offset, leader.FSM().Image().Offset
		return []*keelpb.Record{noOp()}, nil
	})
	release()
	ahead := 0
	prev := before
	for i, wait := range waits {
		index, err := wait()
		if err != nil {
			if leader.Controller().ActiveLeadership() != l {
				t.Skipf("leadership moved during the test (%v): nothing to judge", err)
			}
			t.Fatalf("decision %d: %v", i, err)
		}
		// The next index, unless a barrier confirming a decision that
		// wrote nothing (another event's) took it.
		if index <= prev {
			t.Fatalf("decision %d committed at %d, not after %d", i, index, prev)
		}
		if seen[i] != prev {
			t.Errorf("decision %d was taken on the image at %d, want %d (the entry before it)", i, seen[i], prev)
		}
		prev = index
		if got := leader.FSM().Image().Offset; got < index {
			t.Errorf("decision %d answered at %d while the committed image is at %d", i, index, got)
		}
		if committed[i] < seen[i] {
			ahead++
		}
	}
	if ahead == 0 {
		t.Errorf("every one of %d decisions was taken on the committed image: nothing was pipelined", pipelined)
	}
	t.Logf("%d of %d decisions taken ahead of the committed image", ahead, pipelined)

	// Nothing in flight: the next decision is taken on the committed image,
	// and its entry takes the next index.
	var seenNext uint64
	wait, err := l.Queue(context.Background(), func(img *fsm.Image) ([]*keelpb.Record, error) {
		seenNext = img.Offset
		return []*keelpb.Record{noOp()}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	index, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if seenNext != prev || index <= prev {
		t.Errorf("the decision after the pipeline saw %d and committed at %d, want %d and after it", seenNext, index, prev)
	}
	// The leader applied each entry once: its FSM adopted the image the
	// loop had computed for every one of them.
	if got := leader.FSM().Adopted() - adopted; got != pipelined+1 {
		t.Errorf("the leader's FSM adopted %d of %d entries", got, pipelined+1)
	}
}

// TestPipeline_DecisionDependsOnInFlightOne: a decision taken on what an
// earlier one, not yet committed, writes (a config set, then a decision
// that refuses unless it finds it) sees it, and both commit.
func TestPipeline_DecisionDependsOnInFlightOne(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	l := leader.Controller().ActiveLeadership()
	release := holdEventLoop(t, l)

	// Decision i needs the value decision i-1 set, and sets its own.
	const n = 50
	value := func(i int) string { return fmt.Sprint(1000 + i) }
	waits := queueAll(t, l, n, func(i int, img *fsm.Image) ([]*keelpb.Record, error) {
		if i > 0 {
			if v, _ := img.ClusterConfig(fsm.RetentionMs); v != value(i-1) {
				return nil, fmt.Errorf("decision %d does not see decision %d's %s (%q)", i, i-1, fsm.RetentionMs, v)
			}
		}
		v := value(i)
		return []*keelpb.Record{{Record: &keelpb.Record_Config{Config: &keelpb.ConfigRecord{
			ResourceType: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER, Name: fsm.RetentionMs, Value: &v}}}}, nil
	})
	release()
	var last uint64
	for i, wait := range waits {
		index, err := wait()
		if err != nil {
			if leader.Controller().ActiveLeadership() != l {
				t.Skipf("leadership moved during the test (%v): nothing to judge", err)
			}
			t.Fatalf("decision %d: %v", i, err)
		}
		last = index
	}
	c.WaitForApplied(last)
	for _, nd := range c.Nodes() {
		if v, _ := nd.FSM().Image().ClusterConfig(fsm.RetentionMs); v != value(n-1) {
			t.Fatalf("node %d: %s = %q, want %s", nd.ID(), fsm.RetentionMs, v, value(n-1))
		}
	}
}

// TestPipeline_RefusedDecisionsTakeNoSlot: decisions the FSM would refuse,
// in the middle of a pipeline, are refused with ErrRefused, answered in
// their turn (after the writes before them), and take no index: the
// writes after them take the next ones.
func TestPipeline_RefusedDecisionsTakeNoSlot(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	l := leader.Controller().ActiveLeadership()
	release := holdEventLoop(t, l)
	before := leader.FSM().Image().Offset
	adopted, refusedEntries := leader.FSM().Adopted(), leader.FSM().Refused()

	refused := func(i int) bool { return i%7 == 3 }
	waits := queueAll(t, l, pipelined, func(i int, img *fsm.Image) ([]*keelpb.Record, error) {
		if refused(i) {
			return []*keelpb.Record{refusedByFSM}, nil
		}
		return []*keelpb.Record{noOp()}, nil
	})
	release()
	want, writes := before, uint64(0)
	for i, wait := range waits {
		index, err := wait()
		if refused(i) {
			if !errors.Is(err, controller.ErrRefused) {
				t.Fatalf("decision %d: err = %v, want %v", i, err, controller.ErrRefused)
			}
			if got := leader.FSM().Image().Offset; got < want {
				t.Errorf("decision %d was refused at committed offset %d, before the write it followed (%d) committed", i, got, want)
			}
			continue
		}
		if err != nil {
			if leader.Controller().ActiveLeadership() != l {
				t.Skipf("leadership moved during the test (%v): nothing to judge", err)
			}
			t.Fatalf("decision %d: %v", i, err)
		}
		if index <= want {
			t.Fatalf("decision %d committed at %d, not after %d", i, index, want)
		}
		want = index
		writes++
	}
	// The refused decisions' records reached no log slot (the FSM refused
	// nothing), and every write was applied at the very index it was
	// decided for: the FSM adopted each.
	if got := leader.FSM().Refused() - refusedEntries; got != 0 {
		t.Errorf("the FSM refused %d entries: refused decisions reached the log", got)
	}
	if got := leader.FSM().Adopted() - adopted; got != writes {
		t.Errorf("the leader's FSM adopted %d of %d entries: a refused decision took a slot", got, writes)
	}
}

// TestPipeline_FailedWriteInTheMiddle: a write that fails with decisions
// in flight behind it (the log could not take its entry, so the entries after
// it land one index earlier than the image they were taken on said) gets
// ErrOutcomeUnknown; the writes already in the log get their own outcome; a
// decision that wrote nothing, taken on the image the failed write was to
// leave, gets ErrOutcomeUnknown rather than an answer from that image; and
// the loop starts again from the committed image: the next decision sees
// it and its entry takes the next index.
func TestPipeline_FailedWriteInTheMiddle(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	l := leader.Controller().ActiveLeadership()
	release := holdEventLoop(t, l)

	const n, failing = 20, 10
	errNothing := errors.New("nothing to write")
	seen := make([]uint64, n)
	waits := queueAll(t, l, n, func(i int, img *fsm.Image) ([]*keelpb.Record, error) {
		seen[i] = img.Offset
		switch {
		case i == failing:
			// The log refuses the entry of this decision: the next append.
			c.Log().FailAppends(1, consensus.ErrEnqueueTimeout)
		case i == failing+1:
			return nil, errNothing
		}
		return []*keelpb.Record{noOp()}, nil
	})
	release()
	for i, wait := range waits {
		index, err := wait()
		if leader.Controller().ActiveLeadership() != l {
			t.Skipf("leadership moved during the test (decision %d: %v): nothing to judge", i, err)
		}
		switch {
		case i == failing:
			if !errors.Is(err, controller.ErrOutcomeUnknown) {
				t.Errorf("the failed write: err = %v, want %v", err, controller.ErrOutcomeUnknown)
			}
		case i == failing+1 && seen[i] > seen[failing]:
			// Taken on the image the failed write was to leave (the loop
			// had not heard of the failure yet): that image never existed.
			if !errors.Is(err, controller.ErrOutcomeUnknown) {
				t.Errorf("decision %d, taken on the image of a write that failed: err = %v, want %v", i, err, controller.ErrOutcomeUnknown)
			}
		case i == failing+1:
			// Taken once the loop had started again from the committed image.
			if !errors.Is(err, errNothing) {
				t.Errorf("decision %d, taken on the committed image: err = %v, want %v", i, err, errNothing)
			}
		case err != nil:
			t.Errorf("decision %d: %v (a write already in the log behind a failed one commits)", i, err)
		case index == 0:
			t.Errorf("decision %d: committed at index 0", i)
		}
	}
	t.Logf("the decision after the failed write was taken on the image at %d (the failed one's was %d)", seen[failing+1], seen[failing])
	// The pipeline starts again from the committed image.
	ctrl := leader.Controller()
	poll.Until(t, 5*time.Second, "the leader to apply its last entry", func() bool {
		return c.Log().Applied(leader.ID()) == leader.Log().LastIndex()
	})
	last, adopted := leader.Log().LastIndex(), leader.FSM().Adopted()
	var seenAfter uint64
	wait, err := ctrl.ActiveLeadership().Queue(context.Background(), func(img *fsm.Image) ([]*keelpb.Record, error) {
		seenAfter = img.Offset
		return []*keelpb.Record{noOp()}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	// Taken on the committed image (the last entry may be a barrier, which
	// the image does not count), at the next index: the FSM adopted it.
	if seenAfter > last || got != last+1 || leader.FSM().Adopted() != adopted+1 {
		t.Fatalf("after the failure the next decision saw %d and committed at %d (adopted: %v), want at most %d and %d",
			seenAfter, got, leader.FSM().Adopted() > adopted, last, last+1)
	}
}

// TestPipeline_LeadershipLostWithDecisionsInFlight: the leader is cut off
// from the others with hundreds of decisions in flight. Every caller is
// answered, each with its commit or with ErrOutcomeUnknown or a not-active
// error; nothing waits forever, and every write answered as committed is
// in the log of the leader the others elect.
func TestPipeline_LeadershipLostWithDecisionsInFlight(t *testing.T) {
	c := newCluster(t, 3)
	old := c.WaitForActive(5 * time.Second)
	l := old.Controller().ActiveLeadership()
	release := holdEventLoop(t, l)

	cut := pipelined / 10
	waits := queueAll(t, l, pipelined, func(i int, img *fsm.Image) ([]*keelpb.Record, error) {
		if i == cut {
			// The entries before this one commit; this one and those
			// after it stay in flight.
			c.Log().HoldCommits()
		}
		return []*keelpb.Record{noOp()}, nil
	})
	release()
	var committed []uint64
	for i, wait := range waits {
		if i == cut {
			// Some have committed; many more are in flight.
			poll.Until(t, 10*time.Second, "decisions in flight", func() bool {
				return old.Log().LastIndex() > old.Log().CommitIndex()+uint64(pipelined/10)
			})
			c.Partition(old.ID())
			c.Log().ReleaseCommits()
		}
		done := make(chan struct{})
		var (
			index uint64
			err   error
		)
		go func() { defer close(done); index, err = wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("decision %d: no answer after the leader was cut off", i)
		}
		switch {
		case err == nil:
			committed = append(committed, index)
		case errors.Is(err, controller.ErrOutcomeUnknown), errors.Is(err, controller.ErrNotLeader), errors.Is(err, controller.ErrNotReady):
		default:
			t.Errorf("decision %d: err = %v, want a commit, %v or not active", i, err, controller.ErrOutcomeUnknown)
		}
	}
	poll.Until(t, 10*time.Second, "the cut-off leader to stop being active", func() bool {
		ok, _ := old.Controller().Active()
		return !ok
	})
	var others []int32
	for _, nd := range c.Nodes() {
		if nd != old {
			others = append(others, nd.ID())
		}
	}
	leader := c.WaitForActive(10*time.Second, others...)
	c.Heal()
	// What the old leader answered as committed, the new one holds: its
	// log has each index, written in the old leader's term.
	for _, index := range committed {
		if index > leader.FSM().Image().Offset {
			t.Fatalf("index %d was answered as committed but the new leader's image is at %d", index, leader.FSM().Image().Offset)
		}
	}
	t.Logf("%d of %d writes committed before the cut", len(committed), pipelined)
	if len(committed) < cut || len(committed) == pipelined {
		t.Fatalf("%d of %d writes committed, want the %d before the cut and not all", len(committed), pipelined, cut)
	}
	index, err := leader.Controller().Propose(context.Background(), noOp())
	if err != nil {
		t.Fatalf("a write on the new leader: %v", err)
	}
	c.WaitForApplied(index)
}
