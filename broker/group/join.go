package group

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// JoinGroup joins a member to a group, as Kafka's handleJoinGroup: a new
// dynamic member of a v4+ request first gets its member id with
// MEMBER_ID_REQUIRED (KIP-394); a join waits until the group's join phase
// completes, and the leader's answer carries the members' metadata.
func (c *Coordinator) JoinGroup(ctx context.Context, r *kmsg.JoinGroupRequest) *kmsg.JoinGroupResponse {
	resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
	res := c.join(ctx, r)
	resp.ErrorCode = res.code
	resp.MemberID = res.memberID
	resp.Generation = res.generation
	resp.LeaderID = res.leader
	resp.Members = res.members
	resp.SkipAssignment = res.skipAssignment
	if res.code == 0 {
		resp.ProtocolType = kmsg.StringPtr(res.protocolType)
		resp.Protocol = kmsg.StringPtr(res.protocol)
	}
	return resp
}

func (c *Coordinator) join(ctx context.Context, r *kmsg.JoinGroupRequest) joinResult {
	fail := func(code int16) joinResult { return joinResult{code: code, memberID: r.MemberID, generation: -1} }
	session := time.Duration(r.SessionTimeoutMillis) * time.Millisecond
	if session < c.cfg.MinSessionTimeout || session > c.cfg.MaxSessionTimeout {
		return fail(kerr.InvalidSessionTimeout.Code)
	}
	rebalance := session // v0 has no rebalance timeout: Kafka takes the session's
	if r.Version >= 1 {
		rebalance = time.Duration(r.RebalanceTimeoutMillis) * time.Millisecond
	}
	g, code := c.lookup(r.Group, r.MemberID == "")
	if code != 0 {
		return fail(code)
	}
	if g == nil {
		return fail(kerr.UnknownMemberID.Code)
	}
	client := clientFrom(ctx)
	g.mu.Lock()
	ch, res := g.joinLocked(r, client, session, rebalance)
	g.mu.Unlock()
	if ch == nil {
		if res.code != 0 {
			c.dropIfUnused(g)
		}
		return res
	}
	select {
	case res := <-ch:
		return res
	case <-ctx.Done():
		return fail(kerr.CoordinatorNotAvailable.Code)
	}
}

// joinLocked handles a join under the group's lock: it answers at once
// (res), or returns the channel the answer will come on.
func (g *group) joinLocked(r *kmsg.JoinGroupRequest, client Client, session, rebalance time.Duration) (chan joinResult, joinResult) {
	fail := func(code int16) (chan joinResult, joinResult) {
		return nil, joinResult{code: code, memberID: r.MemberID, generation: -1}
	}
	if g.state == stateDead {
		return fail(g.notAlive())
	}
	if !g.supports(r.ProtocolType, r.Protocols) {
		return fail(kerr.InconsistentGroupProtocol.Code)
	}
	newMember := func(id string) *member {
		return &member{
			id: id, instanceID: r.InstanceID, clientID: client.ID, host: client.Host,
			protocolType: r.ProtocolType, protocols: r.Protocols, session: session, rebalance: rebalance,
		}
	}
	if r.MemberID == "" {
		id := client.ID + "-" + uuid.NewString()
		if r.InstanceID != nil {
			if old, ok := g.static[*r.InstanceID]; ok {
				return g.replaceStatic(r, g.members[old], newMember(id))
			}
		}
		if g.full() {
			return fail(kerr.GroupMaxSizeReached.Code)
		}
		if r.InstanceID != nil {
			return g.addAndRebalance(newMember(id))
		}
		if r.Version >= 4 {
			// KIP-394: the member id is given out first, so that a client
			// that retries a lost answer does not add a member each time.
			g.addPending(id, session)
			return nil, joinResult{code: kerr.MemberIDRequired.Code, memberID: id, generation: -1}
		}
		return g.addAndRebalance(newMember(id))
	}
	if t, ok := g.pending[r.MemberID]; ok {
		t.Stop()
		delete(g.pending, r.MemberID)
		if r.InstanceID != nil {
			// Kafka: a pending member id is a dynamic member's.
			return fail(kerr.UnknownMemberID.Code)
		}
		if g.full() {
			return fail(kerr.GroupMaxSizeReached.Code)
		}
		return g.addAndRebalance(newMember(r.MemberID))
	}
	if g.fenced(r.InstanceID, r.MemberID) {
		return fail(kerr.FencedInstanceID.Code)
	}
	m := g.members[r.MemberID]
	if m == nil || r.InstanceID != nil && g.static[*r.InstanceID] == "" {
		return fail(kerr.UnknownMemberID.Code)
	}
	switch g.state {
	case statePreparingRebalance:
		return g.updateAndRebalance(m, r, session, rebalance)
	case stateCompletingRebalance:
		if m.sameProtocols(r.Protocols) {
			// The member lost the join's answer: answer it again.
			res := g.joinResult(m)
			if m.id == g.leader {
				res.members = g.joinMembers()
			}
			return nil, res
		}
		return g.updateAndRebalance(m, r, session, rebalance)
	case stateStable:
		if m.id == g.leader || !m.sameProtocols(r.Protocols) {
			return g.updateAndRebalance(m, r, session, rebalance)
		}
		g.armSession(m)
		return nil, g.joinResult(m)
	default: // Empty
		return fail(kerr.UnknownMemberID.Code)
	}
}

// full tells whether a new member would take the group past
// group.max.size; the member ids given out count, as they will join.
func (g *group) full() bool {
	limit := g.c.cfg.MaxGroupSize
	return limit > 0 && len(g.members)+len(g.pending) >= limit
}

// joinMembers are the members' metadata of the group's protocol, for the
// leader's JoinGroup answer.
func (g *group) joinMembers() []kmsg.JoinGroupResponseMember {
	var all []kmsg.JoinGroupResponseMember
	for _, id := range g.memberIDs() {
		m := g.members[id]
		all = append(all, kmsg.JoinGroupResponseMember{MemberID: m.id, InstanceID: m.instanceID, ProtocolMetadata: m.metadata(g.protocol)})
	}
	return all
}

// addPending gives out a member id that the member must join with within
// its session timeout.
func (g *group) addPending(id string, session time.Duration) {
	g.pending[id] = g.c.cfg.afterFunc(session, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if _, ok := g.pending[id]; !ok || g.state == stateDead {
			return
		}
		delete(g.pending, id)
		g.tryCompleteJoin()
	})
}

// addAndRebalance adds m, waiting for the join phase, and starts a
// rebalance (Kafka's addMemberAndRebalance).
func (g *group) addAndRebalance(m *member) (chan joinResult, joinResult) {
	ch := make(chan joinResult, 1)
	m.join = ch
	if g.state == statePreparingRebalance && g.initialJoin {
		g.newMemberAdded = true
	}
	g.addMember(m)
	// The member is kept while its join waits; its session starts with
	// the answer.
	g.rebalanceOrComplete()
	return ch, joinResult{}
}

// rebalanceOrComplete starts a rebalance, or completes the running one's
// join phase if every member is in.
func (g *group) rebalanceOrComplete() {
	if g.state == statePreparingRebalance {
		g.tryCompleteJoin()
	} else {
		g.prepareRebalance()
	}
}

// updateAndRebalance takes a known member's new protocols and waits for
// the join phase (Kafka's updateMemberAndRebalance).
func (g *group) updateAndRebalance(m *member, r *kmsg.JoinGroupRequest, session, rebalance time.Duration) (chan joinResult, joinResult) {
	if m.join != nil {
		// A second JoinGroup of a member that waits: the first one's
		// answer would go nowhere; Kafka answers it like this too.
		m.join <- joinResult{code: kerr.UnknownMemberID.Code, memberID: m.id, generation: -1}
	}
	m.protocols, m.session, m.rebalance = r.Protocols, session, rebalance
	ch := make(chan joinResult, 1)
	m.join = ch
	g.rebalanceOrComplete()
	return ch, joinResult{}
}

// replaceStatic gives a known static member its new member id, fencing the
// old one (KIP-345). A Stable group whose member rejoins with the same
// protocols does not rebalance: the member gets the current generation
// (its leader is told to skip the assignment), once the new member id is
// committed.
func (g *group) replaceStatic(r *kmsg.JoinGroupRequest, old, m *member) (chan joinResult, joinResult) {
	wasLeader := g.leader == old.id
	g.answer(old, kerr.FencedInstanceID.Code)
	g.removeMember(old)
	m.assignment = old.assignment
	g.addMember(m)
	if wasLeader {
		g.leader = m.id
	}
	ch := make(chan joinResult, 1)
	m.join = ch
	if g.state == stateStable && old.sameProtocols(r.Protocols) {
		// Kafka persists the new member id before answering, so that a
		// new coordinator fences the old one too; the answer comes from
		// the write (see storeStatic).
		g.storeStatic(m, old)
	} else {
		g.rebalanceOrComplete()
	}
	return ch, joinResult{}
}

// storeStatic commits a Stable group with a static member's new id, then
// answers its join with the current generation; if the write fails, the
// old member is put back (Kafka's revert) and the join gets the error.
func (g *group) storeStatic(m, old *member) {
	gen := g.generation
	g.c.background(func() {
		g.wmu.Lock()
		g.mu.Lock()
		if g.members[m.id] != m || m.join == nil || g.state != stateStable || g.generation != gen {
			// Fenced or removed (answered already), or a rebalance began,
			// whose join phase answers the member and whose sync writes.
			g.mu.Unlock()
			g.wmu.Unlock()
			return
		}
		rec := g.metadataRecord(nil) // as the group stands now, under the write lock
		g.mu.Unlock()
		code := g.appendRecords(context.Background(), []Record{rec}, false)
		g.wmu.Unlock()
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.members[m.id] != m || m.join == nil {
			return // fenced or removed meanwhile: already answered
		}
		if code != 0 {
			ch := m.join
			m.join = nil
			if g.state != stateDead && g.generation == gen {
				led := g.leader == m.id
				g.removeMember(m)
				if _, taken := g.static[*old.instanceID]; !taken {
					g.addMember(old)
					if led {
						g.leader = old.id
					}
					g.armSession(old)
				}
			}
			ch <- joinResult{code: code, memberID: m.id, generation: -1}
			return
		}
		res := g.joinResult(m)
		if m.id == g.leader {
			res.members = g.joinMembers()
			res.skipAssignment = true
		}
		m.join <- res
		m.join = nil
		g.armSession(m)
	})
}
