package controller

import (
	"slices"
	"sync"
	"time"

	"github.com/keel-dev/keel/fsm"
)

// sessionTracker holds broker sessions in the active controller's memory
// (Kafka's BrokerHeartbeatManager): heartbeats are not logged; only what
// they change is.
type sessionTracker struct {
	timeout time.Duration

	mu       sync.Mutex
	sessions map[int32]session
	// streams are the brokers' metadata streams, for crash detection
	// (crash.go); wake tells the crash fencer that one ended.
	streams map[int32]*brokerStreams
	wake    chan struct{}
}

type session struct {
	epoch int64
	// contact is when the broker was last heard from (or when a new active
	// controller started the session); the session ends timeout after it.
	contact time.Time
	offset  uint64 // the metadata offset the broker last reported applied
	// heard: the broker itself has registered or heartbeated at this epoch
	// since the session started, rather than a takeover starting it afresh.
	heard bool
	// leaving: its last heartbeat asked to shut down, or to be fenced
	// (want_fence): this incarnation does not want to run.
	leaving bool
}

func newSessionTracker(timeout time.Duration) *sessionTracker {
	return &sessionTracker{timeout: timeout, sessions: map[int32]session{},
		streams: map[int32]*brokerStreams{}, wake: make(chan struct{}, 1)}
}

// reset gives every registered broker a fresh session. A new active
// controller does this before it fences anyone, so a broker that died during
// the failover is still fenced, one session later (KAFKA-18138).
func (s *sessionTracker) reset(brokers []*fsm.Broker, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions = make(map[int32]session, len(brokers))
	for _, b := range brokers {
		s.sessions[b.ID] = session{epoch: b.Epoch, contact: now}
	}
}

// touch renews the session of broker id at epoch on a heartbeat, noting the
// metadata offset it reports and whether it asks to shut down or to be
// fenced (leaving).
func (s *sessionTracker) touch(id int32, epoch int64, now time.Time, offset uint64, leaving bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions[id] = session{epoch: epoch, contact: now, offset: offset, heard: true, leaving: leaving}
}

// registered renews the session of broker id at epoch on a registration.
// A registration retried at the same epoch keeps the offset reported
// before, which a controlled shutdown of another broker may be waiting on.
func (s *sessionTracker) registered(id int32, epoch int64, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sessions[id]
	if ss.epoch != epoch {
		ss = session{epoch: epoch}
	}
	ss.contact, ss.heard, ss.leaving = now, true, false
	s.sessions[id] = ss
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
	return s.left(id, epoch, now)
}

func (s *sessionTracker) left(id int32, epoch int64, now time.Time) time.Duration {
	ss, ok := s.sessions[id]
	if !ok || ss.epoch != epoch {
		return 0
	}
	return max(ss.contact.Add(s.timeout).Sub(now), 0)
}

// holding is how long the registration b holds its broker id against a new
// incarnation (0: not at all): Kafka's BrokerHeartbeatManager.hasValidSession,
// which ClusterControlManager.registerBroker asks. An unfenced broker holds
// it while its session lives. A fenced one does not: fenced by its session's
// expiry, a crash, a controlled shutdown or at its own request (want_fence),
// its next incarnation registers at once. Keel keeps one exception: a fenced
// broker that is heard from and wants to run (it registered or came back,
// and is catching up to be unfenced; its last heartbeat asked neither to
// shut down nor to be fenced) holds its id while its session lives, since
// Keel's broker registers again when told its epoch is stale, and two live
// processes with one id would otherwise supersede each other for ever. A
// session a takeover started afresh is not heard from.
func (s *sessionTracker) holding(b *fsm.Broker, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.Fenced {
		if ss := s.sessions[b.ID]; !ss.heard || ss.leaving {
			return 0
		}
	}
	return s.left(b.ID, b.Epoch, now)
}

func (s *sessionTracker) forget(id int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sessions, id)
	delete(s.streams, id)
}

// expired lists the unfenced brokers of img whose session at their current
// epoch has run out (or was never started), the longest silent first (ties
// in id order): the order they are fenced in.
func (s *sessionTracker) expired(img *fsm.Image, now time.Time) []*fsm.Broker {
	s.mu.Lock()
	defer s.mu.Unlock()
	type stale struct {
		b       *fsm.Broker
		contact time.Time
	}
	var found []stale
	for _, b := range img.Brokers() {
		if b.Fenced {
			continue
		}
		ss, ok := s.sessions[b.ID]
		switch {
		case !ok || ss.epoch != b.Epoch:
			found = append(found, stale{b: b}) // no session: silent since forever
		case !now.Before(ss.contact.Add(s.timeout)):
			found = append(found, stale{b, ss.contact})
		}
	}
	slices.SortStableFunc(found, func(x, y stale) int { return x.contact.Compare(y.contact) })
	out := make([]*fsm.Broker, len(found))
	for i, f := range found {
		out[i] = f.b
	}
	return out
}

// oldestExpired is the broker to fence next (Kafka's findOneStaleBroker):
// of the unfenced brokers of img whose session has run out, the one silent
// the longest.
func (s *sessionTracker) oldestExpired(img *fsm.Image, now time.Time) (*fsm.Broker, bool) {
	exp := s.expired(img, now)
	if len(exp) == 0 {
		return nil, false
	}
	return exp[0], true
}
