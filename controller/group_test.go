package controller

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
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
	c := newTestCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	l := leader.ctrl.active.Load()

	// Hold the event loop so that the decisions queue up behind it.
	release := holdEventLoop(t, l)
	before := leader.fsm.Image().Offset

	const n = 5
	const refused = 2 // this decision writes bad
	seen := make([]uint64, n)
	index := make([]uint64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		queued := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			close(queued)
			index[i], errs[i] = l.decide(context.Background(), func(img *fsm.Image) ([]*keelpb.Record, error) {
				seen[i] = img.Offset
				if i == refused {
					return []*keelpb.Record{bad}, nil
				}
				return []*keelpb.Record{noOp()}, nil
			})
		}()
		<-queued
		// In order: wait until it is queued before the next one.
		deadline := time.Now().Add(5 * time.Second)
		for len(l.events) < i+1 {
			if time.Now().After(deadline) {
				t.Fatalf("decision %d was not queued", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	release()
	wg.Wait()

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
	c.WaitForApplied(want, 5*time.Second)
	if got := leader.fsm.Image().Offset; got != want {
		t.Fatalf("applied offset %d, want %d", got, want)
	}
}

// TestGroupCommit_RefusalWaitsForTheWritesItSaw: a decision refused
// because of a write queued before it in the same group (a delete answered
// "not found" because another delete of the topic is in flight) is
// answered only once that write has committed, so that no read after the
// answer can still see what it says is gone. (The fault suite's history
// caught this as a linearizability violation.)
func TestGroupCommit_RefusalWaitsForTheWritesItSaw(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	l := leader.ctrl.active.Load()

	release := holdEventLoop(t, l)
	before := leader.fsm.Image().Offset

	var (
		wg          sync.WaitGroup
		writeIndex  uint64
		writeErr    error
		refusedErr  error
		seenRefused uint64 // the committed offset when the refusal was answered
	)
	errGone := errors.New("gone: the write before it took it")
	wg.Add(2)
	go func() {
		defer wg.Done()
		writeIndex, writeErr = l.decide(context.Background(), func(*fsm.Image) ([]*keelpb.Record, error) {
			return []*keelpb.Record{noOp()}, nil
		})
	}()
	poll.Until(t, 5*time.Second, "the write to be queued", func() bool { return len(l.events) == 1 })
	go func() {
		defer wg.Done()
		_, refusedErr = l.decide(context.Background(), func(img *fsm.Image) ([]*keelpb.Record, error) {
			if img.Offset > before {
				return nil, errGone
			}
			return []*keelpb.Record{noOp()}, nil
		})
		seenRefused = leader.fsm.Image().Offset
	}()
	poll.Until(t, 5*time.Second, "the refusal to be queued", func() bool { return len(l.events) == 2 })
	release()
	wg.Wait()
	if writeErr != nil {
		if leader.ctrl.active.Load() != l {
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
func holdEventLoop(t *testing.T, l *leadership) (release func()) {
	t.Helper()
	ch := make(chan struct{})
	held := make(chan struct{})
	abandoned := make(chan error, 1)
	if err := l.submit(context.Background(), event{
		run:     func() { close(held); <-ch },
		abandon: func(err error) { abandoned <- err },
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case err := <-abandoned:
		t.Skipf("leadership moved before the test began (%v): nothing to judge", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the event loop did not take the holding event")
	}
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release)
	return release
}
