package controller

import (
	"sync"
	"time"

	"github.com/keel-dev/keel/fsm"
)

// sessionTracker holds broker sessions in the active controller's memory:
// heartbeats are not logged; only what they change is.
type sessionTracker struct {
	timeout time.Duration

	mu       sync.Mutex
	sessions map[int32]session
}

type session struct {
	epoch   int64
	expires time.Time
	offset  uint64 // the metadata offset the broker last reported applied
}

func newSessionTracker(timeout time.Duration) *sessionTracker {
	return &sessionTracker{timeout: timeout, sessions: map[int32]session{}}
}

// reset gives every registered broker a fresh session. A new active
// controller does this before it fences anyone, so a broker that died during
// the failover is still fenced, one session later (KAFKA-18138).
func (s *sessionTracker) reset(brokers []*fsm.Broker, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions = make(map[int32]session, len(brokers))
	for _, b := range brokers {
		s.sessions[b.ID] = session{epoch: b.Epoch, expires: now.Add(s.timeout)}
	}
}

// touch renews the session of broker id at epoch, noting the metadata
// offset it reports.
func (s *sessionTracker) touch(id int32, epoch int64, now time.Time, offset uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions[id] = session{epoch: epoch, expires: now.Add(s.timeout), offset: offset}
}

// allApplied reports whether every eligible broker of img other than except
// has reported applying offset (KRaft's condition for letting a broker in
// controlled shutdown go: everyone has seen the leadership it gave up).
func (s *sessionTracker) allApplied(img *fsm.Image, offset uint64, except int32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range img.Brokers() {
		if b.ID == except || !b.Eligible() {
			continue
		}
		if ss, ok := s.sessions[b.ID]; !ok || ss.epoch != b.Epoch || ss.offset < offset {
			return false
		}
	}
	return true
}

// alive reports whether broker id has an unexpired session at epoch.
func (s *sessionTracker) alive(id int32, epoch int64, now time.Time) bool {
	return s.remaining(id, epoch, now) > 0
}

// remaining is how long broker id's session at epoch has left (0: none).
func (s *sessionTracker) remaining(id int32, epoch int64, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.sessions[id]
	if !ok || ss.epoch != epoch || !now.Before(ss.expires) {
		return 0
	}
	return ss.expires.Sub(now)
}

func (s *sessionTracker) forget(id int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sessions, id)
}

// expired lists the unfenced brokers of img whose session at their current
// epoch has run out (or was never started), in id order.
func (s *sessionTracker) expired(img *fsm.Image, now time.Time) []*fsm.Broker {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*fsm.Broker
	for _, b := range img.Brokers() {
		if b.Fenced {
			continue
		}
		ss, ok := s.sessions[b.ID]
		if !ok || ss.epoch != b.Epoch || !now.Before(ss.expires) {
			out = append(out, b)
		}
	}
	return out
}
