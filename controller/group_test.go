package controller_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// refusedByFSM is a record the FSM refuses: it fences a broker that is
// not registered.
var refusedByFSM = &keelpb.Record{Record: &keelpb.Record_FenceBroker{FenceBroker: &keelpb.FenceBrokerRecord{BrokerId: 99, BrokerEpoch: 1}}}

// Decisions queued together are taken together: each sees the image the
// ones before it leave, at the very index raft gives them, and a decision
// that is refused (by the FSM, or because its records do not encode) fails
// alone, leaving the image the later ones see as it was. The last decision
// of a group is checked as the others are: it takes no log slot either.
func TestGroupCommit_DecisionsSeeEachOther(t *testing.T) {
	for _, tc := range []struct {
		name    string
		bad     *keelpb.Record
		refused int // which of the 5 decisions writes bad
	}{
		{"refused by the FSM", refusedByFSM, 2},
		{"refused by the FSM, last in the group", refusedByFSM, 4},
		// Invalid UTF-8 in a string field: protobuf will not marshal it.
		{"does not encode", &keelpb.Record{Record: &keelpb.Record_NoOp{NoOp: &keelpb.NoOpRecord{RequestId: "\xff"}}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) { testGroupCommit(t, tc.bad, tc.refused) })
	}
}

// TestGroupCommit_RefusedDecisionTakesNoLogSlot: a decision alone on the
// event loop whose records the FSM would refuse is refused before raft
// sees it, with ErrRefused and the FSM's reason: its records take no log
// slot (the FSM refuses no entry; raft's log grows only by the barrier
// that confirmed the refusal, which the FSM never sees), and the next
// write takes the index the loop gave it (the FSM adopts it).
func TestGroupCommit_RefusedDecisionTakesNoLogSlot(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	ctrl := leader.Controller()
	ctx := context.Background()
	first, err := ctrl.Propose(ctx, noOp())
	if err != nil {
		t.Fatal(err)
	}
	refused := leader.FSM().Refused()
	if _, err := ctrl.Propose(ctx, refusedByFSM); !errors.Is(err, controller.ErrRefused) || !strings.Contains(err.Error(), "broker 99 is not registered") {
		t.Fatalf("a batch the FSM refuses: err = %v, want %v with the FSM's reason", err, controller.ErrRefused)
	}
	adopted := leader.FSM().Adopted()
	next, err := ctrl.Propose(ctx, noOp())
	if err != nil {
		t.Fatal(err)
	}
	if first >= next || leader.FSM().Adopted() <= adopted {
		t.Fatalf("the next write committed at %d (after %d), adopted as decided: %v", next, first, leader.FSM().Adopted() > adopted)
	}
	if got := leader.FSM().Refused(); got != refused {
		t.Fatalf("the FSM refused %d entries: the refused decision reached raft", got-refused)
	}
}

func testGroupCommit(t *testing.T, bad *keelpb.Record, refused int) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	l := leader.Controller().ActiveLeadership()

	// Hold the event loop so that the decisions queue up behind it.
	releaseLoop := holdEventLoop(t, l)
	before := leader.FSM().Image().Offset
	adopted, refusedEntries := leader.FSM().Adopted(), leader.FSM().Refused()

	const n = 5
	seen := make([]uint64, n)
	index := make([]uint64, n)
	errs := make([]error, n)
	// Queued one after the other from here, so in this order. (Other events
	// may fall between them, such as the takeover's scan for leaderless
	// partitions: it writes nothing here, so it moves no offset.)
	waits := make([]func() (uint64, error), n)
	for i := range n {
		wait, err := l.Queue(context.Background(), func(img *fsm.Image) ([]*keelpb.Record, error) {
			seen[i] = img.Offset
			if i == refused {
				return []*keelpb.Record{bad}, nil
			}
			return []*keelpb.Record{noOp()}, nil
		})
		if err != nil {
			t.Fatalf("queueing decision %d: %v", i, err)
		}
		waits[i] = wait
	}
	releaseLoop()
	for i, wait := range waits {
		index[i], errs[i] = wait()
	}

	want := before
	for i := range n {
		if seen[i] != want {
			t.Errorf("decision %d saw offset %d, want %d (the entries before it in the group)", i, seen[i], want)
		}
		if i == refused {
			if errs[i] == nil {
				t.Errorf("decision %d: a record the FSM refuses was committed at %d", i, index[i])
			}
			continue
		}
		if errs[i] != nil {
			t.Fatalf("decision %d: %v", i, errs[i])
		}
		// The next index raft gives, unless a barrier that confirmed a
		// decision that wrote nothing took it.
		if index[i] <= want {
			t.Errorf("decision %d committed at %d, not after %d", i, index[i], want)
		}
		want = index[i]
	}
	c.WaitForApplied(want)
	if got := leader.FSM().Image().Offset; got != want {
		t.Fatalf("applied offset %d, want %d", got, want)
	}
	// Each write was applied at the very index its decision was taken for:
	// the leader's FSM adopted the image the loop computed for every one.
	if got := leader.FSM().Adopted() - adopted; got != n-1 {
		t.Errorf("the leader's FSM adopted %d of %d entries", got, n-1)
	}
	if got := leader.FSM().Refused() - refusedEntries; got != 0 {
		t.Errorf("the FSM refused %d entries: the refused decision reached raft", got)
	}
}

// TestGroupCommit_RefusalWaitsForTheWritesItSaw: a decision refused
// because of a write queued before it in the same group (a delete answered
// "not found" because another delete of the topic is in flight) is
// answered only once that write has committed, so that no read after the
// answer can still see what it says is gone. (The fault suite's history
// caught this as a linearizability violation.)
func TestGroupCommit_RefusalWaitsForTheWritesItSaw(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	l := leader.Controller().ActiveLeadership()
	release := holdEventLoop(t, l)
	before := leader.FSM().Image().Offset
	ctx := context.Background()

	errGone := errors.New("gone: the write before it took it")
	waitWrite, err := l.Queue(ctx, func(*fsm.Image) ([]*keelpb.Record, error) {
		return []*keelpb.Record{noOp()}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	waitRefusal, err := l.Queue(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		if img.Offset > before {
			return nil, errGone
		}
		return []*keelpb.Record{noOp()}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var (
		refusedErr  error
		seenRefused uint64 // the committed offset when the refusal was answered
		refused     = make(chan struct{})
	)
	go func() {
		defer close(refused)
		_, refusedErr = waitRefusal()
		seenRefused = leader.FSM().Image().Offset
	}()
	release()
	writeIndex, writeErr := waitWrite()
	<-refused
	if writeErr != nil {
		if leader.Controller().ActiveLeadership() != l {
			t.Skipf("leadership moved during the test (%v): nothing to judge", writeErr)
		}
		t.Fatal(writeErr)
	}
	if !errors.Is(refusedErr, errGone) {
		t.Fatalf("second decision: %v, want %v", refusedErr, errGone)
	}
	if seenRefused < writeIndex {
		t.Errorf("the refusal was answered with the committed image at %d, before the write it saw committed at %d", seenRefused, writeIndex)
	}
}

// holdEventLoop blocks l's event loop until the returned release is
// called, so that decisions queue up behind it. The test's end releases it
// too, before the cluster stops: a test that fails while holding it must
// not leave the event loop, and the cluster's shutdown, waiting forever.
func holdEventLoop(t *testing.T, l *controller.Leadership) (release func()) {
	t.Helper()
	ch := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release)
	held := make(chan struct{})
	if err := l.Run(context.Background(), func() { close(held); <-ch }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		// Leadership lost before the event's turn: it was abandoned.
		t.Fatal("the event loop did not take the event that holds it")
	}
	return release
}
