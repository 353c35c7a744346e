package controller

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/keel-dev/keel/consensus"
	"github.com/keel-dev/keel/consensus/memlog"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

// The pipeline's failure paths, each driven by a call on an in-memory log
// (memlog) rather than left to raft's timers: leadership lost with writes
// in flight, a decision that writes nothing on a deposed leader, an append
// that fails mid-pipeline, an index the loop did not predict, a takeover
// the log keeps failing, a transfer the target refuses. Nothing here waits
// on a timer to happen; every wait polls for a condition.

// caughtUp waits until every live node has applied the whole log.
func (q *memQuorum) caughtUp() {
	q.t.Helper()
	leader := q.log.Leader()
	if leader < 0 {
		q.t.Fatal("caughtUp needs a leader")
	}
	last := q.log.Node(leader).LastIndex()
	poll.Until(q.t, quorumWait, fmt.Sprintf("every node to apply up to %d", last), func() bool {
		for id := range q.ctrls {
			if q.log.Applied(id) < last {
				return false
			}
		}
		return true
	})
}

// sameImages fails the test unless every node's image is at the same
// offset with the same digest (of the entries applied), and no node's FSM
// refused an entry.
func (q *memQuorum) sameImages() {
	q.t.Helper()
	q.caughtUp()
	var want fsm.Digest
	for id, a := range q.applied {
		f := a.FSM()
		if n := f.Refused(); n != 0 {
			q.t.Errorf("node %d's FSM refused %d entries: a batch it refuses was proposed", id, n)
		}
		d, ok := f.LatestDigest()
		if !ok {
			q.t.Fatalf("node %d has no digest", id)
		}
		if offset := f.Image().Offset; offset != d.Index {
			q.t.Errorf("node %d's image is at offset %d, its last entry at %d", id, offset, d.Index)
		}
		if want.Index == 0 {
			want = d
		} else if d.Index != want.Index || d.Sum != want.Sum {
			q.t.Errorf("node %d's image is %v, another's %v", id, d, want)
		}
	}
}

// written is what each node applied of the tests' writes: request id to
// the index it was applied at.
func (q *memQuorum) written(id int32) map[string]uint64 {
	q.t.Helper()
	entries, ok, _ := q.applied[id].Since(0, math.MaxInt)
	if !ok {
		q.t.Fatalf("node %d's history does not start at 0", id)
	}
	out := map[string]uint64{}
	for _, e := range entries {
		batch, err := fsm.DecodeBatch(e.Data)
		if err != nil {
			q.t.Fatalf("node %d, entry %d: %v", id, e.Offset, err)
		}
		for _, r := range batch.GetRecords() {
			if rid := r.GetNoOp().GetRequestId(); rid != "" {
				out[rid] = e.Offset
			}
		}
	}
	return out
}

// acknowledged fails the test unless every write answered as committed is
// on every node, at the index it was answered with, and no write that was
// not is on any node when truncated says none may be.
func (q *memQuorum) acknowledged(acked map[string]uint64, unacked []string, truncated bool) {
	q.t.Helper()
	q.caughtUp()
	for id := range q.ctrls {
		w := q.written(id)
		for rid, index := range acked {
			if got, ok := w[rid]; !ok || got != index {
				q.t.Errorf("node %d: %s was answered as committed at %d, but the node has it at %d (present: %v)", id, rid, index, got, ok)
			}
		}
		if truncated {
			for _, rid := range unacked {
				if index, ok := w[rid]; ok {
					q.t.Errorf("node %d: %s is at %d, but its entry was truncated", id, rid, index)
				}
			}
		}
	}
}

// holdLoop holds l's event loop on a run event until release, so that
// the decisions queued meanwhile are taken back to back.
func holdLoop(t *testing.T, l *leadership) (release func()) {
	t.Helper()
	held, ch := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release)
	if err := l.Run(context.Background(), func() { close(held); <-ch }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(quorumWait):
		t.Fatal("the event loop did not take the event that holds it")
	}
	return release
}

// step is one decision a test queues: a write of a no-op with its request
// id, or (rid "") one that writes nothing and answers with err. before, if
// set, runs on the event loop as the decision is taken, before its entry
// is handed to the log.
type step struct {
	rid    string
	err    error
	before func()
}

func write(rid string) step { return step{rid: rid} }

// requestNoOp is a no-op record that carries rid, for written to find.
func requestNoOp(rid string) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_NoOp{NoOp: &keelpb.NoOpRecord{RequestId: rid}}}
}

// answered is a step's outcome.
type answered struct {
	index uint64
	err   error
}

// inFlight puts the steps in flight on l, the leader's leadership: with
// commits held, it queues them behind a held event loop, so that the loop
// takes them back to back, each on the image the ones before it leave;
// waits until the log has the entries they append (entries); then calls
// then, and returns their outcomes, failing the test if any caller waits
// longer than quorumWait. Commits stay held unless then releases them.
func (q *memQuorum) inFlight(l *leadership, steps []step, entries int, then func()) []answered {
	q.t.Helper()
	leader := q.log.Leader()
	from := q.log.Node(leader).LastIndex()
	release := holdLoop(q.t, l)
	q.log.HoldCommits()
	waits := make([]func() (uint64, error), len(steps))
	for i, s := range steps {
		wait, err := l.Queue(context.Background(), func(*fsm.Image) ([]*keelpb.Record, error) {
			if s.before != nil {
				s.before()
			}
			if s.rid == "" {
				return nil, s.err
			}
			return []*keelpb.Record{requestNoOp(s.rid)}, nil
		})
		if err != nil {
			q.t.Fatalf("queueing step %d: %v", i, err)
		}
		waits[i] = wait
	}
	release()
	q.appended(leader, from, entries)
	then()
	out := make([]answered, len(steps))
	for i, wait := range waits {
		done := make(chan struct{})
		go func() { defer close(done); out[i].index, out[i].err = wait() }()
		select {
		case <-done:
		case <-time.After(quorumWait):
			q.t.Fatalf("step %d: no answer", i)
		}
	}
	return out
}

// appended waits until the leader's log has n entries after from.
func (q *memQuorum) appended(id int32, from uint64, n int) {
	q.t.Helper()
	node := q.log.Node(id)
	poll.Until(q.t, quorumWait, fmt.Sprintf("%d entries appended after %d", n, from), func() bool {
		return node.LastIndex() >= from+uint64(n)
	})
}

// unconfirmedAnswer reports whether err is an answer a decision that wrote
// nothing may get when it could not be confirmed: it says nothing of the
// decision's own answer.
func unconfirmedAnswer(err error) bool {
	return errors.Is(err, ErrLeadershipUnconfirmed) || errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNotReady) ||
		errors.Is(err, ErrOutcomeUnknown)
}

// TestPipelineFaults_LeadershipLostWithWritesInFlight: the leader loses
// leadership with a pipeline of writes appended and none committed, and a
// decision that writes nothing among them. No caller is told its write
// committed, or given the decision's own answer; each write gets
// ErrOutcomeUnknown. What becomes of the entries is the log's: kept, the
// next leader commits them, and every node has them; cut away, no node
// does. Either way the next leader takes over and writes, and every
// node's image is the same.
func TestPipelineFaults_LeadershipLostWithWritesInFlight(t *testing.T) {
	for _, tc := range []struct {
		name string
		fate memlog.Fate
		next int32 // the node elected next: 1 again is a lost-then-regained flap
	}{
		{"kept, another leader", memlog.Commit, 2},
		{"cut away, another leader", memlog.Truncate, 2},
		{"kept, the same leader again", memlog.Commit, 1},
		{"cut away, the same leader again", memlog.Truncate, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newMemQuorum(t, 3, nil)
			l := q.elect(1)
			errExists := errors.New("the topic exists")
			steps := []step{write("w0"), write("w1"), write("w2"), {err: errExists}, write("w3"), write("w4")}
			out := q.inFlight(l, steps, 5, func() {
				q.log.SetFate(tc.fate)
				if err := q.log.Elect(tc.next); err != nil {
					t.Fatal(err)
				}
			})
			var rids []string
			for i, s := range steps {
				got := out[i]
				switch {
				case s.rid == "" && !unconfirmedAnswer(got.err):
					t.Errorf("step %d, which wrote nothing, was answered %v though its leader was deposed before confirming it", i, got.err)
				case s.rid != "" && !errors.Is(got.err, ErrOutcomeUnknown):
					t.Errorf("write %s: (%d, %v), want %v: its entry was in flight", s.rid, got.index, got.err, ErrOutcomeUnknown)
				}
				if s.rid != "" {
					rids = append(rids, s.rid)
				}
			}
			q.log.ReleaseCommits()
			nl := q.active(tc.next, l)
			index, err := nl.decide(context.Background(), func(*fsm.Image) ([]*keelpb.Record, error) {
				return []*keelpb.Record{requestNoOp("after")}, nil
			})
			if err != nil {
				t.Fatalf("a write on the next leader: %v", err)
			}
			q.acknowledged(map[string]uint64{"after": index}, rids, tc.fate == memlog.Truncate)
			if tc.fate == memlog.Commit {
				for id := range q.ctrls {
					if w := q.written(id); len(w) != len(rids)+1 {
						t.Errorf("node %d has %d of the %d writes the log kept, and the one after", id, len(w), len(rids))
					}
				}
			}
			q.sameImages()
		})
	}
}

// TestPipelineFaults_NothingWrittenOnDeposedLeader: decisions that write
// nothing (a read, a create of a topic that exists, one with nothing to
// do) on a leader deposed before the barrier that was to confirm them
// commits get no answer as if confirmed: only one that says leadership
// could not be confirmed, or names the leader. The new leader then answers
// a read.
func TestPipelineFaults_NothingWrittenOnDeposedLeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		fate memlog.Fate // of the barrier
	}{{"kept", memlog.Commit}, {"cut away", memlog.Truncate}} {
		t.Run(tc.name, func(t *testing.T) {
			q := newMemQuorum(t, 3, nil)
			l := q.elect(1)
			from := q.log.Node(1).LastIndex()
			release := holdLoop(t, l)
			q.log.HoldCommits()
			errExists := errors.New("the topic exists")
			type outcome struct {
				what string
				err  error
			}
			results := make(chan outcome, 3)
			go func() {
				_, err := q.ctrls[1].ReadImage(context.Background())
				results <- outcome{"read", err}
			}()
			go func() {
				_, err := l.decide(context.Background(), func(*fsm.Image) ([]*keelpb.Record, error) { return nil, errExists })
				results <- outcome{"create of an existing topic", err}
			}()
			go func() {
				_, err := l.decide(context.Background(), func(*fsm.Image) ([]*keelpb.Record, error) { return nil, nil })
				results <- outcome{"nothing to do", err}
			}()
			// Taken back to back, they share one barrier: appended, not
			// committed.
			poll.Until(t, quorumWait, "the three decisions to be queued", func() bool { return len(l.events) == 3 })
			release()
			q.appended(1, from, 1)
			q.log.SetFate(tc.fate)
			if err := q.log.Elect(2); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				select {
				case o := <-results:
					if !errors.Is(o.err, ErrLeadershipUnconfirmed) && !errors.Is(o.err, ErrNotLeader) {
						t.Errorf("%s on a deposed leader: %v, want %v or %v", o.what, o.err, ErrLeadershipUnconfirmed, ErrNotLeader)
					}
				case <-time.After(quorumWait):
					t.Fatal("a decision that wrote nothing got no answer")
				}
			}
			q.log.ReleaseCommits()
			q.active(2, nil)
			if _, err := q.ctrls[2].ReadImage(context.Background()); err != nil {
				t.Fatalf("a read on the new leader: %v", err)
			}
			q.sameImages()
		})
	}
}

// TestPipelineFaults_AppendFailsMidPipeline: one append among several in
// flight fails (the log could not take it in time). It gets
// ErrOutcomeUnknown; the decision that wrote nothing after it, taken on
// the image the failed write was to leave, is not answered from that
// image; the writes handed over before and after it commit at the index
// each was answered with, on every node, though those after it land one
// index earlier than the loop predicted; no FSM refuses an entry; and the
// next decision is taken on the committed image and lands where predicted.
func TestPipelineFaults_AppendFailsMidPipeline(t *testing.T) {
	q := newMemQuorum(t, 3, nil)
	l := q.elect(1)
	errExists := errors.New("the topic exists")
	fail := func() { q.log.FailAppends(1, consensus.ErrEnqueueTimeout) }
	steps := []step{
		write("w0"), write("w1"), {rid: "failed", before: fail}, {err: errExists}, write("w3"), write("w4"),
	}
	// Every decision is taken before the first write lands, so the loop
	// cannot know of the failure yet. Four entries: the writes but the
	// failed one.
	out := q.inFlight(l, steps, 4, q.log.ReleaseCommits)
	acked := map[string]uint64{}
	for i, s := range steps {
		got := out[i]
		switch {
		case s.rid == "failed":
			if !errors.Is(got.err, ErrOutcomeUnknown) {
				t.Errorf("the failed write: (%d, %v), want %v", got.index, got.err, ErrOutcomeUnknown)
			}
		case s.rid == "":
			if !errors.Is(got.err, ErrOutcomeUnknown) {
				t.Errorf("step %d, taken on the image of a write that failed: %v, want %v", i, got.err, ErrOutcomeUnknown)
			}
		case got.err != nil:
			t.Errorf("write %s: %v; it was handed to the log and committed", s.rid, got.err)
		default:
			acked[s.rid] = got.index
		}
	}
	q.acknowledged(acked, []string{"failed"}, true)
	q.sameImages()

	// The loop starts again from the committed image, at LastIndex+1: the
	// FSM adopts the image it speculated.
	ctrl := q.ctrls[1]
	last, adopted, committed := q.log.Node(1).LastIndex(), ctrl.fsm.Adopted(), ctrl.fsm.Image().Offset
	var seen uint64
	index, err := l.decide(context.Background(), func(img *fsm.Image) ([]*keelpb.Record, error) {
		seen = img.Offset
		return []*keelpb.Record{requestNoOp("next")}, nil
	})
	if err != nil {
		t.Fatalf("the write after the failure: %v", err)
	}
	if seen != committed || index != last+1 || ctrl.fsm.Adopted() != adopted+1 {
		t.Errorf("after the failure the next decision saw %d and committed at %d (adopted %d), want %d, %d and 1",
			seen, index, ctrl.fsm.Adopted()-adopted, committed, last+1)
	}
	q.acknowledged(map[string]uint64{"next": index}, nil, false)
}

// TestPipelineFaults_ConfirmingBarrierFails: the barrier that was to
// confirm a decision that wrote nothing fails to append. The decision is
// answered with ErrLeadershipUnconfirmed, not its own answer, though this
// node still leads; the write before it commits; and the loop, which
// counted an index for the barrier, predicts the next write's index from
// the log again.
func TestPipelineFaults_ConfirmingBarrierFails(t *testing.T) {
	q := newMemQuorum(t, 3, nil)
	l := q.elect(1)
	errExists := errors.New("the topic exists")
	fail := func() { q.log.FailAppends(1, consensus.ErrEnqueueTimeout) }
	// One entry: the write; the barrier after the decision fails.
	out := q.inFlight(l, []step{write("w0"), {err: errExists, before: fail}}, 1, q.log.ReleaseCommits)
	if out[0].err != nil {
		t.Fatalf("the write before the barrier: %v", out[0].err)
	}
	if !errors.Is(out[1].err, ErrLeadershipUnconfirmed) {
		t.Errorf("the decision whose barrier failed: %v, want %v", out[1].err, ErrLeadershipUnconfirmed)
	}
	ctrl := q.ctrls[1]
	last, adopted := q.log.Node(1).LastIndex(), ctrl.fsm.Adopted()
	index, err := l.decide(context.Background(), func(*fsm.Image) ([]*keelpb.Record, error) {
		return []*keelpb.Record{requestNoOp("next")}, nil
	})
	if err != nil {
		t.Fatalf("the write after the failed barrier: %v", err)
	}
	if index != last+1 || ctrl.fsm.Adopted() != adopted+1 {
		t.Errorf("the write after the failed barrier committed at %d (adopted %d), want %d and 1", index, ctrl.fsm.Adopted()-adopted, last+1)
	}
	q.acknowledged(map[string]uint64{"w0": out[0].index, "next": index}, nil, false)
	q.sameImages()
}

// TestPipelineFaults_WriteBehindABarrier: a write taken while the barrier
// confirming a decision that wrote nothing is in flight is speculated at
// the index after the barrier's, where the log puts it: the FSM adopts
// it, and both are answered once committed.
func TestPipelineFaults_WriteBehindABarrier(t *testing.T) {
	q := newMemQuorum(t, 3, nil)
	l := q.elect(1)
	ctrl := q.ctrls[1]
	from := q.log.Node(1).LastIndex()
	q.log.HoldCommits()
	read := make(chan error, 1)
	go func() {
		_, err := l.decide(context.Background(), readNothing)
		read <- err
	}()
	q.appended(1, from, 1) // the barrier, in flight
	adopted := ctrl.fsm.Adopted()
	wait, err := l.Queue(context.Background(), func(*fsm.Image) ([]*keelpb.Record, error) {
		return []*keelpb.Record{requestNoOp("w")}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	q.appended(1, from, 2)
	q.log.ReleaseCommits()
	index, err := wait()
	if err != nil {
		t.Fatalf("the write behind the barrier: %v", err)
	}
	if err := <-read; err != nil {
		t.Errorf("the decision the barrier confirmed: %v", err)
	}
	if index != from+2 || ctrl.fsm.Adopted() != adopted+1 {
		t.Errorf("the write behind the barrier committed at %d (adopted %d), want %d and 1", index, ctrl.fsm.Adopted()-adopted, from+2)
	}
	q.acknowledged(map[string]uint64{"w": index}, nil, false)
	q.sameImages()
}

// TestPipelineFaults_UnpredictedIndex: the log appends an entry of its own
// just before one of several pipelined writes, so that it and those after
// it land one index later than the loop speculated. The FSM notices
// (it does not adopt an image speculated at another index, and applies
// those entries itself), every write is answered with the index it really
// has, no FSM refuses an entry, and every node's image is the same.
func TestPipelineFaults_UnpredictedIndex(t *testing.T) {
	q := newMemQuorum(t, 3, nil)
	l := q.elect(1)
	ctrl := q.ctrls[1]
	adopted := ctrl.fsm.Adopted()
	steps := []step{write("w0"), write("w1"), {rid: "w2", before: q.log.InterposeNoop}, write("w3"), write("w4")}
	// Every decision is taken before the first write lands, so none is
	// predicted again from the log. Six entries: the five writes and the
	// log's own.
	out := q.inFlight(l, steps, 6, q.log.ReleaseCommits)
	acked := map[string]uint64{}
	for i, s := range steps {
		if out[i].err != nil {
			t.Fatalf("write %s: %v", s.rid, out[i].err)
		}
		acked[s.rid] = out[i].index
	}
	if acked["w2"] != acked["w1"]+2 {
		t.Errorf("w2 at %d, w1 at %d: the log's own entry did not come between them", acked["w2"], acked["w1"])
	}
	q.acknowledged(acked, nil, false)
	q.sameImages()
	// Adopted: the two before the log's entry; the others were applied
	// as followers apply them.
	if got := ctrl.fsm.Adopted() - adopted; got != 2 {
		t.Errorf("the leader's FSM adopted %d of the writes, want the 2 before the unpredicted index", got)
	}

	// A registration whose index was not the one predicted is answered
	// with the epoch it has in the image: its index.
	q.log.InterposeNoop()
	resp, err := ctrl.RegisterBroker(context.Background(), registration(1, incarnation(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	q.caughtUp()
	for id, a := range q.applied {
		if b, ok := a.FSM().Image().Broker(1); !ok || b.Epoch != resp.BrokerEpoch {
			t.Errorf("node %d: broker 1 is %+v, registered with epoch %d", id, b, resp.BrokerEpoch)
		}
	}
	q.sameImages()
}

// TestPipelineFaults_TakeoverWhenTheLogFails: a new leader's takeover
// whose appends fail retries, and becomes active once they work; one that
// keeps failing past the give-up time hands leadership to another voter;
// and when no voter will take it, keeps leading and retrying.
func TestPipelineFaults_TakeoverWhenTheLogFails(t *testing.T) {
	// An election timeout of 100 ms: retries after 10, 20, 40 ms..., a
	// transfer only after 500 ms of failures, several times what three
	// retries take.
	timing := memlog.WithTimeouts(consensus.Timeouts{Heartbeat: 25 * time.Millisecond, Election: 100 * time.Millisecond})
	const handedAway = "could not become the active controller; transferring leadership"
	const stillTrying = "leadership transfer failed; still trying to take over"

	t.Run("retries until the log works", func(t *testing.T) {
		q := newMemQuorum(t, 3, nil, timing)
		q.log.FailAppends(3, consensus.ErrEnqueueTimeout)
		l := q.elect(1)
		if epoch := l.epoch.Load(); epoch != 1 {
			t.Errorf("epoch %d after a takeover that failed 3 times, want 1", epoch)
		}
		if got := q.logged.count("takeover attempt failed"); got != 3 {
			t.Errorf("%d failed takeover attempts logged, want 3", got)
		}
		if got := q.logged.count(handedAway); got != 0 {
			t.Errorf("leadership handed away after 3 failures in under the give-up time")
		}
	})

	t.Run("hands leadership away", func(t *testing.T) {
		q := newMemQuorum(t, 3, nil, timing)
		q.log.FailAppends(math.MaxInt, consensus.ErrEnqueueTimeout)
		if err := q.log.Elect(1); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, quorumWait, "the failing leader to hand leadership away", func() bool {
			return q.log.Leader() != 1
		})
		if ok, _ := q.ctrls[1].Active(); ok {
			t.Error("node 1 active though its takeover never wrote")
		}
		q.log.FailAppends(0, nil)
		next := q.log.Leader()
		if l := q.active(next, nil); l.epoch.Load() != 1 {
			t.Errorf("node %d took over at epoch %d, want 1", next, l.epoch.Load())
		}
	})

	t.Run("no voter takes it", func(t *testing.T) {
		q := newMemQuorum(t, 3, nil, timing)
		q.log.RefuseTransfers(2, true)
		q.log.RefuseTransfers(3, true)
		q.log.FailAppends(math.MaxInt, consensus.ErrEnqueueTimeout)
		if err := q.log.Elect(1); err != nil {
			t.Fatal(err)
		}
		term := q.log.Node(1).CurrentTerm()
		poll.Until(t, quorumWait, "a refused transfer, then another takeover attempt", func() bool {
			return q.logged.count(stillTrying) > 0
		})
		failed := q.logged.count("takeover attempt failed")
		poll.Until(t, quorumWait, "another takeover attempt after the refused transfer", func() bool {
			return q.logged.count("takeover attempt failed") > failed
		})
		if q.log.Leader() != 1 || q.log.Node(1).CurrentTerm() != term {
			t.Fatalf("leader %d in term %d after a refused transfer, want 1 still in %d", q.log.Leader(), q.log.Node(1).CurrentTerm(), term)
		}
		q.log.FailAppends(0, nil)
		q.active(1, nil)
	})
}

// TestPipelineFaults_TransferGivenUpOn: a transfer to a voter that does
// not take over fails with ErrTransferFailed, and this node still leads,
// is still active, and still writes.
func TestPipelineFaults_TransferGivenUpOn(t *testing.T) {
	for _, target := range []int32{2, 0} {
		t.Run(fmt.Sprintf("to %d", target), func(t *testing.T) {
			q := newMemQuorum(t, 3, nil)
			q.elect(1)
			q.log.RefuseTransfers(2, true)
			q.log.RefuseTransfers(3, true)
			ctrl := q.ctrls[1]
			_, err := ctrl.TransferLeadership(context.Background(), target)
			if !errors.Is(err, ErrTransferFailed) {
				t.Fatalf("TransferLeadership(%d) to voters that never take over = %v, want %v", target, err, ErrTransferFailed)
			}
			if active, _ := ctrl.Active(); !active || q.log.Leader() != 1 {
				t.Fatalf("after a transfer given up on: active %v, leader %d; want node 1 active", active, q.log.Leader())
			}
			index, _, err := ctrl.AppendNoOp(context.Background(), "after")
			if err != nil {
				t.Fatalf("a write after the transfer given up on: %v", err)
			}
			q.acknowledged(map[string]uint64{"after": index}, nil, false)
		})
	}
}
