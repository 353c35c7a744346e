package group

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SyncGroup hands the leader's assignment to the members, as Kafka's
// handleSyncGroup: the leader's assignment is committed to the log (a
// GroupMetadata record) before any member is answered; the followers wait
// for it.
func (c *Coordinator) SyncGroup(ctx context.Context, r *kmsg.SyncGroupRequest) *kmsg.SyncGroupResponse {
	resp := r.ResponseKind().(*kmsg.SyncGroupResponse)
	g, code := c.lookup(r.Group, false)
	if code == 0 && g == nil {
		code = kerr.UnknownMemberID.Code
	}
	if code != 0 {
		resp.ErrorCode = code
		return resp
	}
	g.mu.Lock()
	ch, res, store := g.syncLocked(r)
	g.mu.Unlock()
	if store != nil {
		store(ctx)
	}
	if ch != nil {
		select {
		case res = <-ch:
		case <-ctx.Done():
			res = syncResult{code: kerr.CoordinatorNotAvailable.Code}
		}
	}
	resp.ErrorCode = res.code
	resp.MemberAssignment = res.assignment
	if res.code == 0 {
		g.mu.Lock()
		resp.ProtocolType = kmsg.StringPtr(g.protocolType)
		resp.Protocol = kmsg.StringPtr(g.protocol)
		g.mu.Unlock()
	}
	return resp
}

// syncLocked handles a sync under the group's lock: an answer now, or the
// channel the answer will come on and, for the leader, the write to run
// (without the lock) that answers it.
func (g *group) syncLocked(r *kmsg.SyncGroupRequest) (chan syncResult, syncResult, func(context.Context)) {
	fail := func(code int16) (chan syncResult, syncResult, func(context.Context)) {
		return nil, syncResult{code: code}, nil
	}
	switch {
	case g.state == stateDead:
		return fail(g.notAlive())
	case g.members[r.MemberID] == nil:
		return fail(kerr.UnknownMemberID.Code)
	case r.Generation != g.generation:
		return fail(kerr.IllegalGeneration.Code)
	case r.ProtocolType != nil && *r.ProtocolType != g.protocolType,
		r.Protocol != nil && *r.Protocol != g.protocol:
		return fail(kerr.InconsistentGroupProtocol.Code)
	case g.fenced(r.InstanceID, r.MemberID):
		return fail(kerr.FencedInstanceID.Code)
	}
	m := g.members[r.MemberID]
	switch g.state {
	case statePreparingRebalance:
		return fail(kerr.RebalanceInProgress.Code)
	case stateStable:
		g.armSession(m)
		return nil, syncResult{assignment: m.assignment}, nil
	case stateCompletingRebalance:
	default: // Empty
		return fail(kerr.UnknownMemberID.Code)
	}
	if m.sync != nil {
		m.sync <- syncResult{code: kerr.UnknownMemberID.Code} // superseded
	}
	m.sync = make(chan syncResult, 1)
	if m.id != g.leader {
		return m.sync, syncResult{}, nil
	}
	assignments := make(map[string][]byte, len(g.members))
	for _, a := range r.GroupAssignment {
		if g.members[a.MemberID] != nil {
			assignments[a.MemberID] = a.MemberAssignment
		}
	}
	gen := g.generation
	rec := g.metadataRecord(assignments)
	return m.sync, syncResult{}, func(ctx context.Context) { g.storeAssignment(ctx, gen, rec, assignments) }
}

// storeAssignment commits the leader's assignment, then, if the group is
// still in the generation it was made for, answers every waiting member
// and makes the group Stable; a failed write answers them the error and
// starts a rebalance, as Kafka's doSyncGroup.
func (g *group) storeAssignment(ctx context.Context, gen int32, rec Record, assignments map[string][]byte) {
	g.wmu.Lock()
	code := g.appendRecords(ctx, []Record{rec}, false)
	g.wmu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != stateCompletingRebalance || g.generation != gen {
		return // a rebalance or a resign overtook it, and answered the members
	}
	if code != 0 {
		for _, m := range g.members {
			m.assignment = nil
			if m.sync != nil {
				m.sync <- syncResult{code: code}
				m.sync = nil
			}
		}
		g.prepareRebalance()
		return
	}
	for _, m := range g.members {
		m.assignment = assignments[m.id]
		if m.sync != nil {
			m.sync <- syncResult{assignment: m.assignment}
			m.sync = nil
			g.armSession(m)
		}
	}
	g.transition(stateStable)
}

// Heartbeat keeps a member's session, and tells it of a rebalance
// (REBALANCE_IN_PROGRESS), as Kafka's handleHeartbeat.
func (c *Coordinator) Heartbeat(ctx context.Context, r *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse {
	resp := r.ResponseKind().(*kmsg.HeartbeatResponse)
	g, code := c.lookup(r.Group, false)
	if code == 0 && g == nil {
		code = kerr.UnknownMemberID.Code
	}
	if code != 0 {
		resp.ErrorCode = code
		return resp
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	m := g.members[r.MemberID]
	switch {
	case g.state == stateDead:
		resp.ErrorCode = g.notAlive()
	case g.fenced(r.InstanceID, r.MemberID):
		resp.ErrorCode = kerr.FencedInstanceID.Code
	case m == nil:
		resp.ErrorCode = kerr.UnknownMemberID.Code
	case r.Generation != g.generation:
		resp.ErrorCode = kerr.IllegalGeneration.Code
	case g.state == stateEmpty:
		resp.ErrorCode = kerr.UnknownMemberID.Code
	case g.state == statePreparingRebalance:
		g.armSession(m)
		resp.ErrorCode = kerr.RebalanceInProgress.Code
	default: // CompletingRebalance, Stable
		g.armSession(m)
	}
	return resp
}

// LeaveGroup removes members: v0-2 one member by id, v3+ a batch by id or
// instance id (KIP-345), each with its own code, as Kafka's
// handleLeaveGroup.
func (c *Coordinator) LeaveGroup(ctx context.Context, r *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse {
	resp := r.ResponseKind().(*kmsg.LeaveGroupResponse)
	leaving := r.Members
	if r.Version < 3 {
		leaving = []kmsg.LeaveGroupRequestMember{{MemberID: r.MemberID}}
	}
	g, code := c.lookup(r.Group, false)
	if code != 0 {
		resp.ErrorCode = code
		return resp
	}
	codes := make([]int16, len(leaving))
	if g == nil {
		for i := range codes {
			codes[i] = kerr.UnknownMemberID.Code
		}
	} else {
		g.mu.Lock()
		if g.state == stateDead {
			resp.ErrorCode = g.notAlive()
			g.mu.Unlock()
			return resp
		}
		for i, l := range leaving {
			codes[i] = g.leave(l)
		}
		g.mu.Unlock()
	}
	if r.Version < 3 {
		resp.ErrorCode = codes[0]
		return resp
	}
	for i, l := range leaving {
		resp.Members = append(resp.Members, kmsg.LeaveGroupResponseMember{MemberID: l.MemberID, InstanceID: l.InstanceID, ErrorCode: codes[i]})
	}
	return resp
}

// leave removes one leaving member, under the group's lock.
func (g *group) leave(l kmsg.LeaveGroupRequestMember) int16 {
	id := l.MemberID
	if l.InstanceID != nil {
		known, ok := g.static[*l.InstanceID]
		if !ok {
			return kerr.UnknownMemberID.Code
		}
		if id != "" && id != known {
			return kerr.FencedInstanceID.Code
		}
		id = known
	} else if t, ok := g.pending[id]; ok {
		t.Stop()
		delete(g.pending, id)
		g.tryCompleteJoin()
		return 0
	}
	m := g.members[id]
	if m == nil {
		return kerr.UnknownMemberID.Code
	}
	g.c.log.Info("group member left", "group", g.id, "member", id)
	g.removeAndUpdate(m)
	return 0
}
