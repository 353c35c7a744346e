package group

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// state is a classic group's state, as Kafka's ClassicGroupState.
type state int8

const (
	stateEmpty state = iota
	statePreparingRebalance
	stateCompletingRebalance
	stateStable
	stateDead
)

var stateNames = [...]string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"}

// String is Kafka's name of the state, as DescribeGroups and ListGroups
// answer it.
func (s state) String() string { return stateNames[s] }

type topicPartition struct {
	topic     string
	partition int32
}

// offset is a committed offset.
type offset struct {
	offset       int64
	leaderEpoch  int32
	metadata     string
	commitMillis int64
}

// member is a member of a group. join and sync are the member's waiting
// JoinGroup and SyncGroup requests, answered by the state machine.
type member struct {
	id                 string
	instanceID         *string
	clientID, host     string
	protocolType       string
	protocols          []kmsg.JoinGroupRequestProtocol
	session, rebalance time.Duration
	assignment         []byte
	join               chan joinResult
	sync               chan syncResult
	sessionSeq         uint64
	sessionTimer       stopper
}

// joinResult is what a waiting JoinGroup is answered.
type joinResult struct {
	code           int16
	memberID       string
	generation     int32
	protocolType   string
	protocol       string
	leader         string
	members        []kmsg.JoinGroupResponseMember
	skipAssignment bool
}

// syncResult is what a waiting SyncGroup is answered.
type syncResult struct {
	code                   int16
	assignment             []byte
	protocolType, protocol string
}

// group is one classic group. mu guards everything but wmu, which orders
// the group's appends (see Coordinator).
type group struct {
	c         *Coordinator
	id        string
	partition int32
	ctx       context.Context // the partition's

	wmu sync.Mutex
	mu  sync.Mutex

	state state
	// resigned: Dead because this broker no longer leads the partition
	// (NOT_COORDINATOR), not because the group was deleted.
	resigned     bool
	stateTime    time.Time
	protocolType string
	protocol     string
	generation   int32
	leader       string
	members      map[string]*member
	static       map[string]string  // instance id → member id
	pending      map[string]stopper // KIP-394 member ids given out, not yet joined
	// The running rebalance's join phase: joinSeq tells a fired timer
	// whether it is still the current one; initialJoin, that it is an
	// empty group's InitialDelayedJoin, which waits its delay out.
	joinSeq        uint64
	joinTimer      stopper
	initialJoin    bool
	newMemberAdded bool

	offsets map[topicPartition]offset
	// emptied is closed once the write that the group became Empty (the
	// last storeEmpty) has ended: a LeaveGroup that emptied the group
	// answers after it.
	emptied <-chan struct{}
}

func (g *group) transition(s state) {
	g.state = s
	g.stateTime = g.c.cfg.now()
}

// notAlive is the code for a request to a Dead group: NOT_COORDINATOR when
// its partition was resigned, else (deleted) COORDINATOR_NOT_AVAILABLE, so
// that the client finds the coordinator again and retries on a new group.
func (g *group) notAlive() int16 {
	if g.resigned {
		return kerr.NotCoordinator.Code
	}
	return kerr.CoordinatorNotAvailable.Code
}

// resignLocked makes g Dead as its partition is resigned: every timer
// stops and every waiting request is answered NOT_COORDINATOR.
func (g *group) resignLocked() {
	g.resigned = true
	g.stopTimers()
	for _, m := range g.members {
		g.answer(m, kerr.NotCoordinator.Code)
	}
	g.transition(stateDead)
}

func (g *group) stopTimers() {
	g.joinSeq++
	if g.joinTimer != nil {
		g.joinTimer.Stop()
		g.joinTimer = nil
	}
	for id, t := range g.pending {
		t.Stop()
		delete(g.pending, id)
	}
	for _, m := range g.members {
		m.sessionSeq++
		if m.sessionTimer != nil {
			m.sessionTimer.Stop()
			m.sessionTimer = nil
		}
	}
}

// answer fails m's waiting requests with code.
func (g *group) answer(m *member, code int16) {
	if m.join != nil {
		m.join <- joinResult{code: code, memberID: m.id, generation: -1}
		m.join = nil
	}
	if m.sync != nil {
		m.sync <- syncResult{code: code}
		m.sync = nil
	}
}

// fenced is Kafka's isStaticMemberFenced: instanceID names a static member
// other than memberID.
func (g *group) fenced(instanceID *string, memberID string) bool {
	if instanceID == nil {
		return false
	}
	id, ok := g.static[*instanceID]
	return ok && id != memberID
}

// addMember adds m, the group's leader when it has none.
func (g *group) addMember(m *member) {
	if len(g.members) == 0 {
		g.protocolType = m.protocolType
	}
	g.members[m.id] = m
	if m.instanceID != nil {
		g.static[*m.instanceID] = m.id
	}
	if g.leader == "" {
		g.leader = m.id
	}
}

// removeMember removes m; its waiting requests get UNKNOWN_MEMBER_ID. A
// leader's leaving makes another member (the least id) the leader.
func (g *group) removeMember(m *member) {
	g.answer(m, kerr.UnknownMemberID.Code)
	m.sessionSeq++
	if m.sessionTimer != nil {
		m.sessionTimer.Stop()
		m.sessionTimer = nil
	}
	delete(g.members, m.id)
	if m.instanceID != nil && g.static[*m.instanceID] == m.id {
		delete(g.static, *m.instanceID)
	}
	if g.leader == m.id {
		g.leader = ""
		for _, id := range g.memberIDs() {
			g.leader = id
			break
		}
	}
}

// memberIDs are the members' ids in order, so that answers are stable.
func (g *group) memberIDs() []string {
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// removeAndUpdate removes m and moves the group on: a rebalance may now be
// complete, or one starts, as Kafka's removeMemberAndUpdateGroup.
func (g *group) removeAndUpdate(m *member) {
	g.removeMember(m)
	switch g.state {
	case statePreparingRebalance:
		g.tryCompleteJoin()
	case stateStable, stateCompletingRebalance:
		g.prepareRebalance()
	}
}

// armSession (re)starts m's session timer: Kafka's
// completeAndScheduleNextHeartbeatExpiration. A member whose JoinGroup or
// SyncGroup is waiting is kept alive; the answer re-arms the timer.
func (g *group) armSession(m *member) {
	m.sessionSeq++
	if m.sessionTimer != nil {
		m.sessionTimer.Stop()
	}
	seq := m.sessionSeq
	m.sessionTimer = g.c.cfg.afterFunc(m.session, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if m.sessionSeq != seq || g.members[m.id] != m || g.state == stateDead {
			return
		}
		m.sessionTimer = nil
		if m.join != nil || m.sync != nil {
			return
		}
		g.c.log.Info("group member's session expired", "group", g.id, "member", m.id, "session", m.session)
		g.removeAndUpdate(m)
	})
}

// rebalanceTimeout is the longest of the members' rebalance timeouts, as
// Kafka's GroupMetadata.rebalanceTimeoutMs.
func (g *group) rebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalance)
	}
	return d
}

// canRebalance is Kafka's validPreviousStates of PreparingRebalance.
func (g *group) canRebalance() bool {
	return g.state == stateStable || g.state == stateCompletingRebalance || g.state == stateEmpty
}

// prepareRebalance starts a rebalance: the members must rejoin within the
// rebalance timeout. An empty group's first one waits the initial delay
// for more members, extended while members keep coming (Kafka's
// InitialDelayedJoin), up to the rebalance timeout.
func (g *group) prepareRebalance() {
	if !g.canRebalance() {
		return
	}
	if g.state == stateCompletingRebalance {
		// The assignment the members wait for will not come.
		for _, m := range g.members {
			m.assignment = nil
			if m.sync != nil {
				m.sync <- syncResult{code: kerr.RebalanceInProgress.Code}
				m.sync = nil
			}
		}
	}
	initial := g.state == stateEmpty
	g.transition(statePreparingRebalance)
	g.c.metrics.rebalances.Inc()
	g.joinSeq++
	if g.joinTimer != nil {
		g.joinTimer.Stop()
	}
	g.initialJoin = initial
	if initial {
		delay := min(g.c.cfg.InitialRebalanceDelay, g.rebalanceTimeout())
		g.armInitialJoin(delay, max(g.rebalanceTimeout()-g.c.cfg.InitialRebalanceDelay, 0))
		return
	}
	seq := g.joinSeq
	g.joinTimer = g.c.cfg.afterFunc(g.rebalanceTimeout(), func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.joinSeq == seq && g.state == statePreparingRebalance {
			g.completeJoin()
		}
	})
	g.tryCompleteJoin()
}

func (g *group) armInitialJoin(delay, remaining time.Duration) {
	seq := g.joinSeq
	g.joinTimer = g.c.cfg.afterFunc(delay, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.joinSeq != seq || g.state != statePreparingRebalance {
			return
		}
		if g.newMemberAdded && remaining > 0 {
			g.newMemberAdded = false
			d := min(g.c.cfg.InitialRebalanceDelay, remaining)
			g.armInitialJoin(d, max(remaining-d, 0))
			return
		}
		g.completeJoin()
	})
}

// tryCompleteJoin completes the join phase once every member has rejoined
// and no member id given out is still to join; an initial delay is waited
// out whatever.
func (g *group) tryCompleteJoin() {
	if g.state != statePreparingRebalance || g.initialJoin || len(g.pending) > 0 {
		return
	}
	for _, m := range g.members {
		if m.join == nil {
			return
		}
	}
	g.completeJoin()
}

// completeJoin ends the join phase: the members that did not rejoin are
// removed, the generation moves on, and every member that rejoined is
// answered (the leader with the members' metadata), as Kafka's
// onCompleteJoin.
func (g *group) completeJoin() {
	g.joinSeq++
	if g.joinTimer != nil {
		g.joinTimer.Stop()
		g.joinTimer = nil
	}
	g.initialJoin = false
	g.newMemberAdded = false
	for _, m := range g.members {
		if m.join == nil {
			g.c.log.Info("group member removed: did not rejoin in the rebalance timeout", "group", g.id, "member", m.id)
			g.removeMember(m)
		}
	}
	g.generation++
	if len(g.members) == 0 {
		g.protocol = ""
		g.transition(stateEmpty)
		g.storeEmpty()
		return
	}
	g.protocol = g.selectProtocol()
	g.transition(stateCompletingRebalance)
	var all []kmsg.JoinGroupResponseMember
	for _, id := range g.memberIDs() {
		m := g.members[id]
		all = append(all, kmsg.JoinGroupResponseMember{MemberID: m.id, InstanceID: m.instanceID, ProtocolMetadata: m.metadata(g.protocol)})
	}
	for _, m := range g.members {
		res := g.joinResult(m)
		if m.id == g.leader {
			res.members = all
		}
		m.join <- res
		m.join = nil
		g.armSession(m)
	}
}

// joinResult is the current generation's answer to m's JoinGroup.
func (g *group) joinResult(m *member) joinResult {
	return joinResult{memberID: m.id, generation: g.generation, protocolType: g.protocolType, protocol: g.protocol, leader: g.leader}
}

// metadata is m's metadata of protocol.
func (m *member) metadata(protocol string) []byte {
	for _, p := range m.protocols {
		if p.Name == protocol {
			return p.Metadata
		}
	}
	return nil
}

// sameProtocols tells whether m would join again with protocols unchanged
// (Kafka's MemberMetadata.matches).
func (m *member) sameProtocols(ps []kmsg.JoinGroupRequestProtocol) bool {
	return slices.EqualFunc(m.protocols, ps, func(a, b kmsg.JoinGroupRequestProtocol) bool {
		return a.Name == b.Name && bytes.Equal(a.Metadata, b.Metadata)
	})
}

// candidates are the protocols every member supports, in no order.
func (g *group) candidates() map[string]bool {
	var cand map[string]bool
	for _, m := range g.members {
		mine := make(map[string]bool, len(m.protocols))
		for _, p := range m.protocols {
			if cand == nil || cand[p.Name] {
				mine[p.Name] = true
			}
		}
		cand = mine
	}
	return cand
}

// supports tells whether a member of protocolType with protocols may join,
// as Kafka's supportsProtocols: an empty group takes any non-empty choice;
// otherwise the type must match and one protocol be everyone's.
func (g *group) supports(protocolType string, ps []kmsg.JoinGroupRequestProtocol) bool {
	if len(g.members) == 0 {
		return protocolType != "" && len(ps) > 0
	}
	if protocolType != g.protocolType {
		return false
	}
	cand := g.candidates()
	for _, p := range ps {
		if cand[p.Name] {
			return true
		}
	}
	return false
}

// selectProtocol is Kafka's vote: each member votes for the first of its
// protocols that every member supports; the most votes win (ties: the
// least name, so that the choice is deterministic).
func (g *group) selectProtocol() string {
	cand := g.candidates()
	votes := make(map[string]int)
	for _, m := range g.members {
		for _, p := range m.protocols {
			if cand[p.Name] {
				votes[p.Name]++
				break
			}
		}
	}
	best := ""
	for name, n := range votes {
		if best == "" || n > votes[best] || n == votes[best] && name < best {
			best = name
		}
	}
	return best
}
