package controller

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// maxGroup bounds the decisions taken together: raft writes at most 64
// entries (MaxAppendEntries) in one disk write anyway.
const maxGroup = 64

// runGroup takes decisions that were queued together and commits them in
// one raft round: group commit. Each decision is taken against the image
// as the decisions before it in the group will leave it, which the leader
// computes by applying their records to a private copy of the committed
// image (images are persistent, so the copy costs nothing and the FSM's
// image is not touched). Their entries go to raft back to back, so the
// followers write them in one AppendEntries and one fsync, and every caller
// gets the outcome of its own entries.
//
// Every decision's records are applied to that copy before raft sees them,
// the last decision's too: a decision whose records the FSM would refuse is
// refused there, with ErrRefused, takes no log slot, and leaves the copy the
// later decisions see as it was. No decision ever proposes a batch the FSM
// refuses. (This costs one apply on the leader per decision, beside the
// FSM's own: a fraction of a commit.)
//
// The copy applies each entry at the index raft will give it: the event loop
// is the only writer while this node is active, and the group starts only
// once every earlier entry is applied, so the next index is LastIndex+1. If
// that ever did not hold, the FSM would refuse a record whose check
// depended on it (a broker epoch), and that decision alone would fail: the
// FSM, not the copy, has the last word.
//
// A decision that writes nothing (refused, or with nothing to do) after
// others in the group that write is answered only once their entries have
// committed: it was taken on the image they leave, and answering earlier
// would tell its caller of a state no read can see yet (a delete answered
// "not found" because of another delete still in flight, then a read that
// finds the topic). Should one of them fail, so that the image it was
// decided on may never exist, its outcome is unknown too.
func (l *leadership) runGroup(group []event) {
	if l.ctx.Err() != nil {
		for _, ev := range group {
			ev.finish(0, l.c.notLeader())
		}
		return
	}
	img := l.c.fsm.Image()
	next := l.c.raft.LastIndex() + 1
	type pending struct {
		ev        event
		futures   []raft.ApplyFuture // nil: a decision that wrote nothing
		submitted time.Time
		err       error // the answer of one that wrote nothing
	}
	pend := make([]pending, 0, len(group))
	writes := 0 // decisions in pend that wrote
	// answer answers a decision that writes nothing: at once if it was
	// taken on the committed image, else after the writes before it.
	answer := func(ev event, err error) {
		if writes == 0 {
			ev.finish(0, err)
			return
		}
		pend = append(pend, pending{ev: ev, err: err})
	}
	for _, ev := range group {
		if err := ev.ctx.Err(); err != nil { // the caller has given up: write nothing
			ev.finish(0, err)
			continue
		}
		records, err := ev.decision(img)
		if err != nil || len(records) == 0 {
			answer(ev, err)
			continue
		}
		parts := splitRecords(records, MaxEntryBytes)
		// Everything that can refuse the decision comes before the
		// speculative image moves on and before raft sees an entry: a
		// refused decision leaves both as they were, for the next one.
		entries, err := encodeEntries(parts)
		if err != nil {
			answer(ev, err)
			continue
		}
		spec, err := applyParts(img, next, parts)
		if err != nil {
			answer(ev, fmt.Errorf("%w; nothing was written: %w", ErrRefused, err))
			continue
		}
		img = spec // later decisions in the group see this one
		submitted := time.Now()
		pend = append(pend, pending{ev: ev, futures: l.c.submitEntries(entries), submitted: submitted})
		writes++
		next += uint64(len(entries))
	}
	var failed error // the first write in the group that did not commit
	for _, p := range pend {
		switch {
		case p.futures != nil:
			index, err := l.c.waitEntries(p.futures, p.submitted)
			if err != nil && failed == nil {
				failed = err
			}
			p.ev.finish(index, err)
		case failed != nil:
			p.ev.finish(0, fmt.Errorf("%w: it was decided after writes that did not commit (%v)", ErrOutcomeUnknown, failed))
		default:
			p.ev.finish(0, p.err)
		}
	}
}

// applyParts applies a decision's entries to img at indexes from next on,
// as the FSM will.
func applyParts(img *fsm.Image, next uint64, parts [][]*keelpb.Record) (*fsm.Image, error) {
	for i, part := range parts {
		var err error
		if img, err = fsm.Apply(img, next+uint64(i), img.Term, &keelpb.RecordBatch{Records: part}); err != nil {
			return nil, err
		}
	}
	return img, nil
}
