package controller

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/listenprobe"
	"github.com/keel-dev/keel/proto/keelpb"
)

// Crash detection: a broker whose process dies is fenced within a short
// grace, not a whole session timeout later.
//
// When a broker process dies (kill -9, a crash, an OOM kill), its kernel
// closes its sockets, and the active controller's end of the connection that
// carried the broker's metadata stream closes at once. Silence (a network
// cut, a paused process, a frozen host) closes nothing: it still takes the
// session timeout. So the active controller notes each metadata stream of a
// broker that ends while it is active, with a way to ask whether the
// stream's connection has closed (the server knows; see WithConnClosed). If,
// crashGrace after the end, that connection has closed, and the broker has
// neither opened a stream nor registered or heartbeated since, and its
// epoch is still the one whose stream ended and it is still unfenced, it
// looks dead.
//
// A connection also closes when only the link broke (a reset by a
// middlebox, a proxy or sidecar that restarted), and a live broker that was
// cut off that way may not be back within the grace. So before it fences,
// the crash fencer asks the broker's own port (listenprobe): it dials the
// address the broker registered. A dead process's port refuses (or, behind
// a proxy, is closed as soon as it is accepted): the broker is fenced, with
// the same records and the same decision path as a session that expired. A
// port that accepts and holds the dial is a live process: it is not fenced
// for a crash, and its session decides, as for any broker that falls
// silent. A dial that does not answer in time is a doubt, left to the
// session too: a process that died on a live host refuses at once. One
// thing overrules a listening port: a new incarnation of the broker asked
// to register after the end (and was refused, since this one held the id),
// before the dial or after it. The port is then the new process's, and the
// old one is gone: without this, a broker restarted within the grace would
// wait a whole session for its id.
//
// What never counts: a stream the controller ends itself (it lost
// leadership: the leadership's tracker goes with it, and a new active
// controller starts with no ended stream to see), a stream the broker
// cancels on a live connection (a reconnect, the end of a controlled
// shutdown), a broker that reconnects or heartbeats within the grace, and a
// broker that registers again (a new epoch) meanwhile.

// WithConnClosed returns a context for a StreamMetadata call that carries
// closed, which reports whether the network connection the call arrived on
// has closed. The server that carries the stream sets it (server's
// connection tracker); without it a stream's end never counts as a crash.
func WithConnClosed(ctx context.Context, closed func() bool) context.Context {
	return context.WithValue(ctx, connClosedKey{}, closed)
}

type connClosedKey struct{}

func connClosedFrom(ctx context.Context) func() bool {
	f, _ := ctx.Value(connClosedKey{}).(func() bool)
	return f
}

// brokerStreams is what the active controller knows of one broker's
// metadata streams.
type brokerStreams struct {
	epoch int64 // the broker epoch of the streams counted
	open  int   // streams open at epoch
	// ended is when the last stream at epoch ended on the broker's side
	// (zero: none pending), and closed asks whether its connection has
	// closed since.
	ended  time.Time
	closed func() bool
	// successor: a new incarnation of the broker asked to register after
	// ended, and was refused because this epoch held the id.
	successor bool
	// leftToSession: the dial at the end of the grace did not find the
	// process gone; the end is kept only for a successor to re-arm.
	leftToSession bool
}

// streamOpened notes a metadata stream of broker id at epoch: the broker is
// back, and no earlier end of its streams counts any more.
func (s *sessionTracker) streamOpened(id int32, epoch int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.streams[id]
	if st == nil || st.epoch != epoch {
		st = &brokerStreams{epoch: epoch}
		s.streams[id] = st
	}
	st.open++
	st.clearEnd()
}

// clearEnd forgets the pending end, if any: the broker is back, or it was
// decided on.
func (st *brokerStreams) clearEnd() {
	st.ended, st.closed, st.successor, st.leftToSession = time.Time{}, nil, false, false
}

// streamEnded notes that a metadata stream of broker id at epoch ended at
// now, on the broker's side, on a connection closed reports on (nil: one
// that cannot be asked, whose end never counts). It wakes the crash fencer.
func (s *sessionTracker) streamEnded(id int32, epoch int64, now time.Time, closed func() bool) {
	s.mu.Lock()
	st := s.streams[id]
	if st == nil || st.epoch != epoch {
		s.mu.Unlock()
		return // a newer epoch's streams are counted now
	}
	st.open = max(st.open-1, 0)
	if closed != nil && st.open == 0 {
		st.clearEnd()
		st.ended, st.closed = now, closed
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// crashed reports whether broker id at epoch looks dead: its last metadata
// stream ended at least grace before now, on a connection that has closed
// since, and it has neither opened a stream nor registered or heartbeated
// at epoch after that end.
func (s *sessionTracker) crashed(id int32, epoch int64, now time.Time, grace time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.crashedLocked(id, epoch, now, grace)
}

func (s *sessionTracker) crashedLocked(id int32, epoch int64, now time.Time, grace time.Duration) bool {
	st := s.streams[id]
	if st == nil || st.epoch != epoch || st.open > 0 || st.ended.IsZero() || now.Before(st.ended.Add(grace)) {
		return false
	}
	if ss, ok := s.sessions[id]; ok && ss.epoch == epoch && ss.heard && ss.contact.After(st.ended) {
		return false // heard from since: alive
	}
	return st.closed()
}

// successorAsked notes that a new incarnation of broker id asked to
// register while the incarnation at epoch held the id: if epoch's stream
// has ended on a closed connection and it has not come back, that process
// is gone, whatever listens at its address now (the new one, which may
// have bound it just before the crash fencer's dial). It wakes the crash
// fencer.
func (s *sessionTracker) successorAsked(id int32, epoch int64) {
	s.mu.Lock()
	st := s.streams[id]
	armed := st != nil && st.epoch == epoch && !st.ended.IsZero()
	if armed {
		st.successor = true
	}
	s.mu.Unlock()
	if armed {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// leftToSession notes that the dial of broker id's address at the end of
// the grace did not find its process gone: its stream end is no longer due,
// unless a new incarnation asks to register (successorAsked).
func (s *sessionTracker) leftToSession(id int32, epoch int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.streams[id]; st != nil && st.epoch == epoch && !st.ended.IsZero() {
		st.leftToSession = true
	}
}

// crashCandidate is a broker whose stream end is due for a look.
type crashCandidate struct {
	id    int32
	epoch int64
	// successor: a new incarnation asked to register since the end.
	successor bool
}

// crashesDue returns the brokers that look dead now (crashed), in id
// order, and when the next pending stream end is due (zero: none). A due
// end that does not look like a crash (the connection is still open, the
// broker was heard from) is dropped; one left to its session is not due
// unless a successor asked to register.
func (s *sessionTracker) crashesDue(now time.Time, grace time.Duration) (due []crashCandidate, next time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, st := range s.streams {
		if st.ended.IsZero() {
			continue
		}
		at := st.ended.Add(grace)
		if now.Before(at) {
			if next.IsZero() || at.Before(next) {
				next = at
			}
			continue
		}
		switch {
		case !s.crashedLocked(id, st.epoch, now, grace):
			st.clearEnd()
		case st.leftToSession && !st.successor:
			// Its port answered: the session decides, unless a successor
			// asks to register.
		default:
			due = append(due, crashCandidate{id, st.epoch, st.successor})
		}
	}
	slices.SortFunc(due, func(x, y crashCandidate) int { return cmp.Compare(x.id, y.id) })
	return due, next
}

// crashHandled notes that the stream end of broker id at epoch was decided
// on. If the decision fenced the broker, its registration no longer holds
// the broker id against a new incarnation either: the process is gone, and
// its next one registers at once.
func (s *sessionTracker) crashHandled(id int32, epoch int64, fenced bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.streams[id]; st != nil && st.epoch == epoch {
		st.clearEnd()
	}
	if ss, ok := s.sessions[id]; ok && ss.epoch == epoch && fenced {
		ss.heard = false
		s.sessions[id] = ss
	}
}

// crashRecords decides the fencing of broker id at epoch for a crash: the
// session expiry's records (fenceRecords), if b is still registered at
// epoch, unfenced, and looks dead to sessions; else nothing.
func crashRecords(img *fsm.Image, s *sessionTracker, id int32, epoch int64, now time.Time, grace time.Duration) []*keelpb.Record {
	b, ok := img.Broker(id)
	if !ok || b.Epoch != epoch || b.Fenced || !s.crashed(id, epoch, now, grace) {
		return nil
	}
	return fenceRecords(img, []*fsm.Broker{b})
}

// crashProbeTimeout bounds the dial of a broker's registered address
// before it is fenced for a crash: a process that died on a live host
// refuses within a round trip, so a dial that takes longer is a doubt, not
// a death.
const crashProbeTimeout = 250 * time.Millisecond

// probeResult is what a dial of a broker's registered address said.
type probeResult int

const (
	probeRefused   probeResult = iota // nothing listens there: the process is gone
	probeListening                    // accepted and held: the process lives
	probeNoAnswer                     // timed out, or failed otherwise: a doubt
)

// probeResultOf reads a listenprobe.Dial answer.
func probeResultOf(err error) probeResult {
	switch {
	case err == nil:
		return probeListening
	case listenprobe.Refused(err):
		return probeRefused
	}
	return probeNoAnswer
}

// String is the result as keel_controller_broker_crash_probes_total
// labels it.
func (r probeResult) String() string {
	switch r {
	case probeRefused:
		return "refused"
	case probeListening:
		return "listening"
	}
	return "no_answer"
}

// crashConfirmed reports whether a broker that looks dead by its
// connections (crashed) is dead: a new incarnation asked to register since
// its stream ended, or nothing listens at its address.
func crashConfirmed(successor bool, probe probeResult) bool {
	return successor || probe == probeRefused
}

// confirmCrashes keeps, of due, the brokers whose process is gone
// (crashConfirmed), and leaves the others to their sessions. The registered address of each broker that no successor
// proved dead is dialled, side by side, here on the crash fencer's
// goroutine, never on the event loop. A candidate the image no longer
// holds at its epoch is kept undialled: its decision finds nothing to do.
func (l *leadership) confirmCrashes(due []crashCandidate) []crashCandidate {
	img := l.c.fsm.Image()
	addrs := make([]string, len(due))
	results := make([]probeResult, len(due))
	errs := make([]error, len(due))
	var wg sync.WaitGroup
	for i, cand := range due {
		b, ok := img.Broker(cand.id)
		if cand.successor || !ok || b.Epoch != cand.epoch {
			continue
		}
		addrs[i] = b.Address
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(l.ctx, crashProbeTimeout)
			defer cancel()
			errs[i] = l.c.cfg.probeBroker(ctx, addrs[i])
			results[i] = probeResultOf(errs[i])
		}()
	}
	wg.Wait()
	if l.ctx.Err() != nil {
		return nil // no longer active: the dials were cut short
	}
	kept := due[:0]
	for i, cand := range due {
		if addrs[i] == "" {
			kept = append(kept, cand)
			continue
		}
		l.c.metrics.crashProbes.WithLabelValues(results[i].String()).Inc()
		if crashConfirmed(cand.successor, results[i]) {
			kept = append(kept, cand)
			continue
		}
		msg := "broker's connection closed, but its process still listens at its address; not fencing it for a crash (its session decides)"
		if results[i] == probeNoAnswer {
			msg = "broker's connection closed, but its address did not answer a dial; not fencing it for a crash (its session decides)"
		}
		l.log.Info(msg, "broker_id", cand.id, "broker_epoch", cand.epoch, "address", addrs[i], "probe_err", errs[i])
		l.sessions.leftToSession(cand.id, cand.epoch)
	}
	return kept
}

// fenceCrashed fences, one decision per broker, the brokers whose metadata
// stream's connection closed, that have not come back within the crash
// grace, and whose process is gone (confirmCrashes). It runs while this
// node is the active controller; the decisions go through the event loop
// like any other, so a heartbeat or a registration that came meanwhile is
// seen.
func (l *leadership) fenceCrashed() {
	defer l.wg.Done()
	grace := l.c.cfg.CrashGrace
	// The wait is bounded so that a clock that is not the wall's (tests)
	// is looked at again.
	poll := max(grace/4, 10*time.Millisecond)
	timer := time.NewTimer(poll)
	defer timer.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-l.sessions.wake:
		case <-timer.C:
		}
		now := l.c.cfg.Now()
		due, next := l.sessions.crashesDue(now, grace)
		if len(due) > 0 {
			due = l.confirmCrashes(due)
		}
		type queued struct {
			crashCandidate
			wait func() (uint64, error)
		}
		waits := make([]queued, 0, len(due))
		for _, cand := range due {
			why := "nothing listens at its address"
			if cand.successor {
				why = "a new incarnation asked to register"
			}
			wait, err := l.queue(l.ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
				recs := crashRecords(img, l.sessions, cand.id, cand.epoch, l.c.cfg.Now(), grace)
				if len(recs) > 0 {
					l.log.Info("fencing broker: its connection closed, it did not come back, and "+why, "broker_id", cand.id,
						"broker_epoch", cand.epoch, "crash_grace", grace)
				}
				return recs, nil
			})
			if err != nil {
				if l.ctx.Err() == nil {
					l.log.Warn("fencing crashed brokers failed", "err", err)
				}
				break
			}
			waits = append(waits, queued{cand, wait})
		}
		for _, q := range waits {
			index, err := q.wait()
			switch {
			case err != nil:
				if l.ctx.Err() == nil {
					l.log.Warn("fencing a crashed broker failed", "broker_id", q.id, "err", err)
				}
			default:
				l.sessions.crashHandled(q.id, q.epoch, index > 0)
				if index > 0 {
					l.c.metrics.fenced.WithLabelValues(FenceCauseCrash).Inc()
				}
			}
		}
		wait := poll
		if !next.IsZero() {
			wait = min(max(next.Sub(l.c.cfg.Now()), time.Millisecond), poll)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}
