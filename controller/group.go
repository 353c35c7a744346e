package controller

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/keel-dev/keel/consensus"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// The bounds of the pipeline: how much the event loop may have handed to
// raft, or have decided and not yet answered, before it waits for the
// oldest to commit. Enough entries to keep raft's own pipeline full (it
// sends at most 64 in one AppendEntries, MaxAppendEntries) several times
// over; enough bytes for a few dozen 10,000-partition topics (370 KiB
// each) but a bounded share of the leader's memory and of raft's queues.
const (
	maxInflightEntries = 256
	maxInflightBytes   = 32 << 20
	// maxInflightDecisions bounds decisions in flight, those that wrote
	// nothing and wait for the writes before them included: the channels
	// between the event loop and the answerer hold this many.
	maxInflightDecisions = 1024
)

// The event loop pipelines its decisions (KRaft's QuorumController does
// the same with its deferred write queue and timeline data structures):
//
// Each decision is taken against a speculative image, the committed image
// as every entry the loop has handed to raft and not yet seen commit will
// leave it. The loop computes it by applying each decision's records to the
// image the decision was taken on (images are persistent, so this copies
// nothing and the FSM's image is not touched), hands the entries to raft
// without waiting, and goes on to the next event. One answerer goroutine
// waits for the entries in the order they were handed over and answers
// each caller once its own entries have committed and been applied. So raft
// writes and replicates the entries of many decisions together, and the
// loop decides the next ones while the earlier ones are on their way to the
// followers' disks.
//
// Every decision's records are applied to the speculative image before raft
// sees them: a decision whose records the FSM would refuse is refused there,
// with ErrRefused, takes no log slot and no room in the pipeline, and
// leaves the image the later decisions see as it was. No decision ever
// proposes a batch the FSM refuses. The leader applies each entry once:
// the loop offers each speculative apply to the FSM (fsm.Speculation), and
// when the entry commits the FSM adopts the image the loop computed rather
// than decoding and applying the entry again, once it has checked that the
// entry, its index and term, and the image it applies to are the very ones
// the loop used. Anything else (a follower, a takeover's entry, an image a
// restore replaced, another leader's entry at that index) is applied the
// usual way.
//
// The speculative image applies each entry at the index raft will give it:
// the loop is the only writer while this node is active (the takeover
// writes before the loop starts, and a run event, such as a membership
// change or a restore, runs only once the pipeline is empty), so each entry
// takes the index after the one handed over before it, and when nothing is
// in flight the next index is LastIndex+1 and the speculative image is the
// committed one. If that ever did not hold, the FSM would refuse a record
// whose check depended on it (a broker epoch), and that decision alone
// would fail: the FSM, not the speculative image, has the last word.
//
// A decision that writes nothing (refused, or with nothing to do: create a
// topic that exists, delete one that does not, set a config to its value)
// is answered only once an entry this node handed to raft after taking it
// has committed (confirm, below). That holds two answers back. One is the
// answer from an image holding writes still in flight: it would tell its
// caller of a state no read can see yet (a delete answered "not found"
// because another delete is still in flight, then a read that finds the
// topic); the later entry commits only after them. The other is the answer
// of a deposed leader that has not noticed yet (its raft links reset, a
// pause): its image may miss what a newer leader has written since, and
// only a commit made after the decision shows that no newer leader can
// have written anything before it.
//
// When an entry in flight fails (leadership lost, raft shutting down, an
// entry the FSM refused after all), the image the later decisions were
// taken on may never exist. The loop then decides nothing more until every
// entry in flight has resolved, and starts again from the committed image:
// KRaft renounces leadership for the same reason. The writes already in
// raft still get their own outcome (most fail alike, with
// ErrOutcomeUnknown; one that committed did so on an image the FSM
// accepted it on), and a decision that wrote nothing after the failure is
// answered with ErrOutcomeUnknown.
type pipeline struct {
	// spec is the image after every entry in flight; when nothing is in
	// flight, the committed image is read again.
	spec *fsm.Image
	next uint64 // the raft index of the next entry handed over; with spec
	term uint64 // the raft term the entries are handed over in
	gen  uint64 // moves on every time the loop starts again from the committed image

	decisions, entries, bytes int // in flight
	// broken: an entry in flight failed, so spec may never exist; decide
	// nothing until every one has resolved.
	broken bool
	// unconfirmed counts the decisions that wrote nothing taken since the
	// last entry handed to raft: each waits for an entry handed over after
	// it to commit. confirming: a barrier handed over for the ones before
	// is in flight; those taken meanwhile wait for the next one.
	unconfirmed int
	confirming  bool

	flights chan flight // to the answerer, in order
	landed  chan landed // from the answerer, in the same order
}

// flight is a decision the loop has taken and not yet answered: its
// entries in raft, or, when it wrote nothing, its answer; or a barrier the
// loop handed to raft to confirm the decisions before it (barrier set, no
// event).
type flight struct {
	ev        event
	futures   []consensus.ApplyFuture // nil: a decision that wrote nothing, or a barrier
	barrier   consensus.Future
	bytes     int
	submitted time.Time
	err       error  // the answer of one that wrote nothing
	gen       uint64 // the pipeline generation it was decided in
}

// landed is a flight the answerer has answered.
type landed struct {
	entries, bytes int
	failed         bool
	barrier        bool
}

func newPipeline() *pipeline {
	// One more than the bound: a barrier may be handed over when the
	// pipeline is full (of decisions waiting for it).
	return &pipeline{
		flights: make(chan flight, maxInflightDecisions+1),
		landed:  make(chan landed, maxInflightDecisions+1),
	}
}

// full reports whether the loop must wait for a flight to land before it
// takes another decision.
func (p *pipeline) full() bool {
	return p.decisions >= maxInflightDecisions || p.entries >= maxInflightEntries || p.bytes >= maxInflightBytes
}

// land accounts for a flight the answerer has answered. Once nothing is in
// flight the committed image is the one to decide on again.
func (p *pipeline) land(ld landed) {
	p.decisions--
	p.entries -= ld.entries
	p.bytes -= ld.bytes
	if ld.failed {
		p.broken = true
	}
	if ld.barrier {
		p.confirming = false
	}
	if p.decisions == 0 {
		p.spec, p.broken = nil, false
		p.gen++
	}
}

// landQueued accounts for every flight the answerer has reported, without
// waiting.
func (p *pipeline) landQueued() {
	for {
		select {
		case ld := <-p.landed:
			p.land(ld)
		default:
			return
		}
	}
}

// drain waits until every flight has landed, or the leadership ends
// (false). The decisions that wrote nothing land only once confirmed, so it
// confirms them as it goes.
func (l *leadership) drain(p *pipeline) bool {
	for p.decisions > 0 {
		l.confirm(p)
		select {
		case <-l.ctx.Done():
			return false
		case ld := <-p.landed:
			p.land(ld)
		}
	}
	return true
}

// confirm hands raft a barrier when decisions that wrote nothing wait for
// an entry handed over after them and none is on its way: one round at a
// time, so that the decisions taken while it is in flight share the next
// (as etcd batches its ReadIndex requests). The loop never waits for it;
// the answerer answers them once it has committed.
//
// Why a raft entry, and not raft's VerifyLeader: a verify future is
// satisfied by the response to any heartbeat or AppendEntries, including
// one sent before the call (hashicorp/raft's replication loops call
// notifyAll on every success), so after a pause the responses buffered
// from before it can confirm a leader that was deposed meanwhile. An entry
// appended after the decision commits only once a majority has accepted an
// AppendEntries that carries it, sent after it was appended, in this
// node's term: each of them had then voted in no later term, and any later
// leader needs one of them. So no later leader was elected, and no other
// write committed, before the decision; its answer holds at that point.
// The takeover's own entries are never reused for this: decisions are
// taken only once the loop runs, after them.
//
// The barrier takes a log index like any entry (raft does not hand it to
// the FSM), so the loop counts it as in flight and gives it the next index.
func (l *leadership) confirm(p *pipeline) {
	if p.unconfirmed == 0 || p.confirming {
		return
	}
	p.flights <- flight{barrier: l.c.quorum.Barrier(l.c.cfg.ApplyTimeout), gen: p.gen, submitted: time.Now()}
	p.next++
	p.decisions++
	p.entries++
	p.unconfirmed, p.confirming = 0, true
}

// take decides ev against the speculative image and hands its entries to
// raft, or queues its answer behind the writes in flight.
func (l *leadership) take(p *pipeline, ev event) {
	if l.ctx.Err() != nil {
		ev.finish(0, l.c.notLeader())
		return
	}
	if err := ev.ctx.Err(); err != nil { // the caller has given up: write nothing
		ev.finish(0, err)
		return
	}
	if p.decisions == 0 {
		p.spec = l.c.fsm.Image()
		p.next = l.c.quorum.LastIndex() + 1
		p.term = l.c.quorum.CurrentTerm()
	}
	// answer answers a decision that writes nothing, once an entry handed
	// to raft after it has committed (confirm).
	answer := func(err error) {
		p.decisions++
		p.unconfirmed++
		p.flights <- flight{ev: ev, err: err, gen: p.gen}
	}
	records, err := ev.decision(p.spec)
	if err != nil || len(records) == 0 {
		answer(err)
		return
	}
	parts := splitRecords(records, MaxEntryBytes)
	// Everything that can refuse the decision comes before the speculative
	// image moves on and before raft sees an entry: a refused decision
	// leaves both as they were, for the next one.
	specs, err := speculate(p.spec, p.next, p.term, parts)
	if err == nil {
		if lifted := liftThrottles(p.spec, specs[len(specs)-1].Image()); len(lifted) > 0 {
			parts = splitRecords(slices.Concat(records, lifted), MaxEntryBytes)
			specs, err = speculate(p.spec, p.next, p.term, parts)
		}
	}
	if err != nil {
		answer(err)
		return
	}
	entries := make([][]byte, len(specs))
	size := 0
	for i, s := range specs {
		entries[i] = s.Data()
		size += len(entries[i])
		// Offered before raft sees it: the FSM adopts the speculative
		// image rather than decoding and applying the entry again.
		l.c.fsm.Offer(s)
	}
	p.spec = specs[len(specs)-1].Image() // later decisions see this one
	p.next += uint64(len(entries))
	p.decisions++
	p.entries += len(entries)
	p.bytes += size
	p.unconfirmed = 0 // its entries confirm the decisions before it
	submitted := time.Now()
	p.flights <- flight{ev: ev, futures: l.c.submitEntries(entries), bytes: size, submitted: submitted, gen: p.gen}
}

// answerFlights answers the flights in the order the loop took them, each
// once its entries have been applied, until flights is closed. A decision
// that wrote nothing waits for the next entry (a write or a barrier) to
// resolve: answered as decided if that entry committed, else with the
// not-leader error, since nothing was written and the caller may ask again.
func (l *leadership) answerFlights(flights <-chan flight, done chan<- landed) {
	var (
		gen    uint64
		failed error // the first write of generation gen that did not commit
		// waiting: the decisions that wrote nothing since the last entry,
		// in order (gen moves on only once all have landed).
		waiting []flight
	)
	// settle answers the waiting decisions once an entry handed over after
	// them has resolved; committed is that entry's error (nil: it did).
	settle := func(committed error) {
		for _, w := range waiting {
			err := w.err
			if committed != nil {
				err = l.c.unconfirmed(committed)
			}
			done <- landed{}
			w.ev.finish(0, err)
		}
		waiting = waiting[:0]
	}
	// The loop has stopped: no entry will follow the ones still waiting.
	defer settle(ErrStopped)
	for f := range flights {
		if f.gen != gen {
			gen, failed = f.gen, nil
		}
		switch {
		case f.barrier != nil:
			err := f.barrier.Error()
			settle(err)
			if err != nil && failed == nil {
				failed = err
			}
			// A barrier that failed may have taken no log index: the
			// loop starts again from the committed image.
			done <- landed{entries: 1, failed: err != nil, barrier: true}
			continue
		case f.futures == nil && failed != nil:
			done <- landed{}
			f.ev.finish(0, fmt.Errorf("%w: it was decided after writes that did not commit (%v)", ErrOutcomeUnknown, failed))
			continue
		case f.futures == nil:
			waiting = append(waiting, f)
			continue
		}
		ld := landed{entries: len(f.futures), bytes: f.bytes}
		index, err := l.c.waitEntries(f.futures, f.submitted)
		if err != nil {
			ld.failed = true
			if failed == nil {
				failed = err
			}
		}
		// Its first entry resolved before waitEntries returned; any of
		// them committing confirms the decisions before it.
		settle(f.futures[0].Error())
		// The loop hears of it before the caller does, so that an event
		// the caller queues next finds the pipeline as this answer leaves
		// it.
		done <- ld
		f.ev.finish(index, err)
	}
}

// speculate encodes a decision's parts as raft entries and applies them to
// img at indexes from next on, in term, as the FSM will. It fails if any
// part does not encode or the FSM would refuse it.
func speculate(img *fsm.Image, next, term uint64, parts [][]*keelpb.Record) ([]*fsm.Speculation, error) {
	specs := make([]*fsm.Speculation, 0, len(parts))
	for i, part := range parts {
		s, err := fsm.Speculate(img, next+uint64(i), term, part)
		if err != nil {
			var rerr *fsm.RecordError
			if errors.As(err, &rerr) || errors.Is(err, fsm.ErrEmptyBatch) {
				return nil, fmt.Errorf("%w; nothing was written: %w", ErrRefused, err)
			}
			return nil, fmt.Errorf("encode batch: %w", err)
		}
		specs = append(specs, s)
		img = s.Image()
	}
	return specs, nil
}
