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
	g, code := c.existing(r.Group, kerr.UnknownMemberID.Code)
	if code == kerr.CoordinatorLoadInProgress.Code {
		// The rebalance's state is lost with the coordinator: the member
		// must rejoin, which older clients learn only from this code.
		code = kerr.RebalanceInProgress.Code
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
		resp.ProtocolType = kmsg.StringPtr(res.protocolType)
		resp.Protocol = kmsg.StringPtr(res.protocol)
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
	case g.fenced(r.InstanceID, r.MemberID):
		return fail(kerr.FencedInstanceID.Code)
	case g.members[r.MemberID] == nil:
		return fail(kerr.UnknownMemberID.Code)
	case r.Generation != g.generation:
		return fail(kerr.IllegalGeneration.Code)
	case r.ProtocolType != nil && *r.ProtocolType != g.protocolType,
		r.Protocol != nil && *r.Protocol != g.protocol:
		return fail(kerr.InconsistentGroupProtocol.Code)
	}
	m := g.members[r.MemberID]
	switch g.state {
	case statePreparingRebalance:
		return fail(kerr.RebalanceInProgress.Code)
	case stateStable:
		g.armSession(m)
		return nil, g.syncResult(m), nil
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
	return m.sync, syncResult{}, func(ctx context.Context) { g.storeAssignment(ctx, gen, assignments) }
}

// storeAssignment commits the leader's assignment, then, if the group is
// still in the generation it was made for, answers every waiting member
// and makes the group Stable; a failed write answers them the error and
// starts a rebalance, as Kafka's doSyncGroup. A group that moved on before
// the write lock was had is not written: whatever moved it answered the
// members, and its own write must not be overtaken by an older state.
func (g *group) storeAssignment(ctx context.Context, gen int32, assignments map[string][]byte) {
	g.wmu.Lock()
	g.mu.Lock()
	if g.state != stateCompletingRebalance || g.generation != gen {
		g.mu.Unlock()
		g.wmu.Unlock()
		return
	}
	rec := g.metadataRecord(assignments)
	g.mu.Unlock()
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
			m.sync <- g.syncResult(m)
			m.sync = nil
			g.armSession(m)
		}
	}
	g.transition(stateStable)
}

// syncResult is m's assignment in the current generation.
func (g *group) syncResult(m *member) syncResult {
	return syncResult{assignment: m.assignment, protocolType: g.protocolType, protocol: g.protocol}
}

// Heartbeat keeps a member's session, and tells it of a rebalance
// (REBALANCE_IN_PROGRESS), as Kafka's handleHeartbeat.
func (c *Coordinator) Heartbeat(ctx context.Context, r *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse {
	resp := r.ResponseKind().(*kmsg.HeartbeatResponse)
	g, code := c.existing(r.Group, kerr.UnknownMemberID.Code)
	if code == kerr.CoordinatorLoadInProgress.Code {
		// Kafka answers a loading coordinator's heartbeats blindly: the
		// member is checked once its group is loaded.
		return resp
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
		var emptied <-chan struct{}
		if g.state == stateEmpty {
			emptied = g.emptied
		}
		g.mu.Unlock()
		// A leave that emptied the group is answered once the group's
		// Empty state is written (or its write failed): a new coordinator
		// then never waits out the session of a member whose leave was
		// acknowledged before a kill -9 of this one.
		if emptied != nil {
			select {
			case <-emptied:
			case <-ctx.Done():
			}
		}
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
	if id != "" && g.fenced(l.InstanceID, id) {
		return kerr.FencedInstanceID.Code
	}
	if t, ok := g.pending[id]; ok {
		t.Stop()
		delete(g.pending, id)
		g.tryCompleteJoin()
		return 0
	}
	if l.InstanceID != nil {
		if known, ok := g.static[*l.InstanceID]; ok {
			id = known
		}
	}
	m := g.members[id]
	if m == nil {
		return kerr.UnknownMemberID.Code
	}
	g.c.log.Info("group member left", "group", g.id, "member", id)
	g.removeAndUpdate(m)
	return 0
}
