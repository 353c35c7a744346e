package controller

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/keel-dev/keel/fsm"
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
// neither opened a stream nor heartbeated since, and its epoch is still the
// one whose stream ended and it is still unfenced, it is fenced: the same
// records and the same decision path as a session that expired.
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
	st.ended, st.closed = time.Time{}, nil
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

// crashCandidate is a broker whose stream end is due for a look.
type crashCandidate struct {
	id    int32
	epoch int64
}

// crashesDue returns the brokers that look dead now (crashed), in id
// order, and when the next pending stream end is due (zero: none). A due
// end that does not look like a crash (the connection is still open, the
// broker was heard from) is dropped.
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
		if s.crashedLocked(id, st.epoch, now, grace) {
			due = append(due, crashCandidate{id, st.epoch})
		} else {
			st.ended, st.closed = time.Time{}, nil
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
		st.ended, st.closed = time.Time{}, nil
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

// fenceCrashed fences, one decision per broker, the brokers whose metadata
// stream's connection closed and that have not come back within the crash
// grace. It runs while this node is the active controller; the decisions go
// through the event loop like any other, so a heartbeat or a registration
// that came meanwhile is seen.
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
		type queued struct {
			crashCandidate
			wait func() (uint64, error)
		}
		waits := make([]queued, 0, len(due))
		for _, cand := range due {
			wait, err := l.queue(l.ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
				recs := crashRecords(img, l.sessions, cand.id, cand.epoch, l.c.cfg.Now(), grace)
				if len(recs) > 0 {
					l.log.Info("fencing broker: its connection closed and it did not come back", "broker_id", cand.id,
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
