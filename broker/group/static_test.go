package group

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func staticJoinReq(group, member, instance string, protocols ...protocol) *kmsg.JoinGroupRequest {
	r := joinReq(group, member, protocols...)
	r.InstanceID = kmsg.StringPtr(instance)
	return r
}

// stableStatic makes a Stable group of static members a and b: their
// member ids and the generation.
func (h *harness) stableStatic(group string) (a, b string, gen int32) {
	h.t.Helper()
	js := h.joinAll(group, staticJoinReq(group, "", "ia"), staticJoinReq(group, "", "ib"))
	leader := js[0].LeaderID
	a, b = js[0].MemberID, js[1].MemberID
	chF := h.syncAsync(syncReq(group, map[bool]string{true: b, false: a}[leader == a], js[0].Generation, nil))
	h.awaitSyncing(group, 1)
	if s := h.c.SyncGroup(h.ctx, syncReq(group, leader, js[0].Generation, map[string]string{a: "pa", b: "pb"})); s.ErrorCode != 0 {
		h.t.Fatalf("leader's sync: %d", s.ErrorCode)
	}
	if s := h.recvSync(chF); s.ErrorCode != 0 {
		h.t.Fatalf("follower's sync: %d", s.ErrorCode)
	}
	return a, b, js[0].Generation
}

// testStaticMemberRejoinWithKnownLeaderId… / testStaticMemberFollowerRejoin:
// a static member that rejoins with a new member id and the same
// protocols gets the current generation with no rebalance (its leader is
// told to skip the assignment); the old member id is fenced.
func TestStaticMember_RejoinWithoutRebalance(t *testing.T) {
	h := newHarness(t, nil)
	a, b, gen := h.stableStatic("g")
	j := h.recvJoin(h.joinAsync(staticJoinReq("g", "", "ib")))
	if j.ErrorCode != 0 || j.Generation != gen || j.MemberID == b {
		t.Fatalf("rejoin: %+v", j)
	}
	if s := h.state("g"); s != stateStable {
		t.Fatalf("state %v: a static rejoin rebalanced", s)
	}
	if code := h.heartbeat("g", a, gen); code != 0 {
		t.Fatalf("the other member's heartbeat: %d", code)
	}
	fenced := kmsg.NewPtrHeartbeatRequest()
	fenced.Version = 4
	fenced.Group, fenced.MemberID, fenced.Generation, fenced.InstanceID = "g", b, gen, kmsg.StringPtr("ib")
	if code := h.c.Heartbeat(h.ctx, fenced).ErrorCode; code != kerr.FencedInstanceID.Code {
		t.Fatalf("the old member id's heartbeat: %d, want FENCED_INSTANCE_ID", code)
	}
	sync := h.c.SyncGroup(h.ctx, syncReq("g", j.MemberID, gen, nil))
	if sync.ErrorCode != 0 || string(sync.MemberAssignment) != "pb" {
		t.Fatalf("the new member id keeps the assignment: %d %q", sync.ErrorCode, sync.MemberAssignment)
	}
}

// testStaticMemberRejoinWithChangedProtocol…: a static member that
// rejoins with other protocols rebalances the group.
func TestStaticMember_ChangedProtocolRebalances(t *testing.T) {
	h := newHarness(t, nil)
	a, _, gen := h.stableStatic("g")
	chB := h.joinAsync(staticJoinReq("g", "", "ib", protocol{"range", []byte("other")}))
	h.awaitJoining("g", 1)
	if s := h.state("g"); s != statePreparingRebalance {
		t.Fatalf("state %v", s)
	}
	ja := h.recvJoin(h.joinAsync(staticJoinReq("g", a, "ia")))
	jb := h.recvJoin(chB)
	if ja.ErrorCode != 0 || jb.ErrorCode != 0 || ja.Generation != gen+1 || jb.Generation != gen+1 {
		t.Fatalf("joins: %+v %+v", ja, jb)
	}
}

// The static leader's rejoin is told to skip the assignment (KIP-814),
// with the members' metadata.
func TestStaticMember_LeaderRejoinSkipsAssignment(t *testing.T) {
	h := newHarness(t, nil)
	_, b, gen := h.stableStatic("g")
	leaderInstance := "ia"
	g := h.group("g")
	g.mu.Lock()
	if g.leader == b {
		leaderInstance = "ib"
	}
	g.mu.Unlock()
	j := h.recvJoin(h.joinAsync(staticJoinReq("g", "", leaderInstance)))
	if j.ErrorCode != 0 || j.Generation != gen || !j.SkipAssignment || j.LeaderID != j.MemberID || len(j.Members) != 2 {
		t.Fatalf("leader's rejoin: %+v", j)
	}
}

// A failed write of a static member's new id puts the old member back
// and answers the join the error.
func TestStaticMember_RejoinAppendErrorReverts(t *testing.T) {
	h := newHarness(t, nil)
	_, b, gen := h.stableStatic("g")
	h.log.failAppends(kerr.NotEnoughReplicas)
	j := h.recvJoin(h.joinAsync(staticJoinReq("g", "", "ib")))
	if j.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("rejoin: %d", j.ErrorCode)
	}
	h.log.failAppends(nil)
	if code := h.heartbeat("g", b, gen); code != 0 {
		t.Fatalf("the old member id after the revert: %d", code)
	}
}

// testLeaveGroupStaticMemberByInstanceId / testStaticMemberFenced…: a
// static member leaves by its instance id; a member id that is not the
// instance's is fenced.
func TestStaticMember_Leave(t *testing.T) {
	h := newHarness(t, nil)
	a, b, _ := h.stableStatic("g")
	r := kmsg.NewPtrLeaveGroupRequest()
	r.Version = 4
	r.Group = "g"
	r.Members = []kmsg.LeaveGroupRequestMember{
		{MemberID: a, InstanceID: kmsg.StringPtr("ib")},
		{InstanceID: kmsg.StringPtr("ia")},
		{InstanceID: kmsg.StringPtr("nobody")},
	}
	resp := h.c.LeaveGroup(h.ctx, r)
	var codes []int16
	for _, m := range resp.Members {
		codes = append(codes, m.ErrorCode)
	}
	if len(codes) != 3 || codes[0] != kerr.FencedInstanceID.Code || codes[1] != 0 || codes[2] != kerr.UnknownMemberID.Code {
		t.Fatalf("codes %v", codes)
	}
	g := h.group("g")
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.members[a] != nil || g.members[b] == nil || g.state != statePreparingRebalance {
		t.Fatalf("after the leave: members %v state %v", g.memberIDs(), g.state)
	}
}

// A static member's rejoin replaces its old member id: it takes no room
// in a group at group.max.size.
func TestStaticMember_RejoinInAFullGroup(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxGroupSize = 2 })
	_, _, gen := h.stableStatic("g")
	if j := h.recvJoin(h.joinAsync(staticJoinReq("g", "", "ia"))); j.ErrorCode != 0 || j.Generation != gen {
		t.Fatalf("rejoin: %+v", j)
	}
	if code := h.c.JoinGroup(h.ctx, staticJoinReq("g", "", "ic")).ErrorCode; code != kerr.GroupMaxSizeReached.Code {
		t.Fatalf("a third static member: %d", code)
	}
}
