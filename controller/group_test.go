package controller_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// Decisions queued together are taken together: each sees the image the
// ones before it leave, at the very index raft gives them, and a decision
// that is refused (by the FSM, or because its records do not encode) fails
// alone, leaving the image the later ones see as it was.
func TestGroupCommit_DecisionsSeeEachOther(t *testing.T) {
	for _, tc := range []struct {
		name string
		bad  *keelpb.Record
	}{
		{"refused by the FSM", &keelpb.Record{Record: &keelpb.Record_FenceBroker{FenceBroker: &keelpb.FenceBrokerRecord{BrokerId: 99, BrokerEpoch: 1}}}},
		// Invalid UTF-8 in a string field: protobuf will not marshal it.
		{"does not encode", &keelpb.Record{Record: &keelpb.Record_NoOp{NoOp: &keelpb.NoOpRecord{RequestId: "\xff"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) { testGroupCommit(t, tc.bad) })
	}
}

func testGroupCommit(t *testing.T, bad *keelpb.Record) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	l := leader.Controller().ActiveLeadership()

	// Hold the event loop so that the decisions queue up behind it.
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseLoop := func() { releaseOnce.Do(func() { close(release) }) }
	// A test that fails while it holds the loop must still let it go, or
	// stopping the cluster would wait for the loop forever.
	t.Cleanup(releaseLoop)
	held := make(chan struct{})
	if err := l.Run(context.Background(), func() { close(held); <-release }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		// Leadership lost before the event's turn: it was abandoned.
		t.Fatal("the event loop did not take the event that holds it")
	}
	before := leader.FSM().Image().Offset

	const n = 5
	const refused = 2 // this decision writes bad
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
		if index[i] != want+1 {
			t.Errorf("decision %d committed at %d, want %d", i, index[i], want+1)
		}
		want = index[i]
	}
	c.WaitForApplied(want)
	if got := leader.FSM().Image().Offset; got != want {
		t.Fatalf("applied offset %d, want %d", got, want)
	}
}
