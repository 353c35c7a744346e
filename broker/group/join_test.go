package group

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The join checks that answer at once, named after Kafka's
// GroupCoordinatorTest.
func TestJoinGroup_Refusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  func(h *harness) *kmsg.JoinGroupRequest
		want int16
	}{
		{"testJoinGroupUnknownConsumerNewGroup", func(*harness) *kmsg.JoinGroupRequest {
			return joinReq("g", "somebody")
		}, kerr.UnknownMemberID.Code},
		{"testJoinGroupSessionTimeoutTooSmall", func(*harness) *kmsg.JoinGroupRequest {
			r := joinReq("g", "")
			r.SessionTimeoutMillis = 5999
			return r
		}, kerr.InvalidSessionTimeout.Code},
		{"testJoinGroupSessionTimeoutTooLarge", func(*harness) *kmsg.JoinGroupRequest {
			r := joinReq("g", "")
			r.SessionTimeoutMillis = int32((30*time.Minute + time.Millisecond).Milliseconds())
			return r
		}, kerr.InvalidSessionTimeout.Code},
		{"testInvalidGroupId", func(*harness) *kmsg.JoinGroupRequest {
			return joinReq("", "")
		}, kerr.InvalidGroupID.Code},
		{"testJoinGroupWithEmptyProtocolType", func(*harness) *kmsg.JoinGroupRequest {
			r := joinReq("g", "")
			r.ProtocolType = ""
			return r
		}, kerr.InconsistentGroupProtocol.Code},
		{"testJoinGroupWithEmptyGroupProtocol", func(*harness) *kmsg.JoinGroupRequest {
			r := joinReq("g", "")
			r.Protocols = nil
			return r
		}, kerr.InconsistentGroupProtocol.Code},
		{"testJoinGroupInconsistentProtocolType", func(h *harness) *kmsg.JoinGroupRequest {
			h.stable("g")
			r := joinReq("g", "")
			r.ProtocolType = "connect"
			return r
		}, kerr.InconsistentGroupProtocol.Code},
		{"testJoinGroupInconsistentGroupProtocol", func(h *harness) *kmsg.JoinGroupRequest {
			h.stable("g")
			return joinReq("g", "", protocol{"roundrobin", nil})
		}, kerr.InconsistentGroupProtocol.Code},
		{"testJoinGroupUnknownConsumerExistingGroup", func(h *harness) *kmsg.JoinGroupRequest {
			h.stable("g")
			return joinReq("g", "other")
		}, kerr.UnknownMemberID.Code},
		{"testJoinGroupRequireKnownMemberId", func(*harness) *kmsg.JoinGroupRequest {
			return joinReq("g", "")
		}, kerr.MemberIDRequired.Code},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			resp := h.c.JoinGroup(h.ctx, tc.req(h))
			if resp.ErrorCode != tc.want {
				t.Fatalf("code %d, want %d", resp.ErrorCode, tc.want)
			}
			if tc.want != kerr.MemberIDRequired.Code && resp.Generation != -1 {
				t.Errorf("generation %d on a refusal, want -1", resp.Generation)
			}
		})
	}
}

func TestJoinGroup_WrongCoordinator(t *testing.T) {
	h := newHarness(t, nil)
	h.c.Elect(0, 2, 2) // now partition 0 of 2: a group of partition 1 is another broker's
	h.awaitLoaded(0)
	group := "a" // PartitionFor("a", 2) = 97 % 2 = 1
	if p := PartitionFor(group, 2); p != 1 {
		t.Fatalf("PartitionFor = %d", p)
	}
	if resp := h.c.JoinGroup(h.ctx, joinReq(group, "")); resp.ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("code %d, want NOT_COORDINATOR", resp.ErrorCode)
	}
}

// testJoinGroupFromUnchangedFollowerDoesNotRebalance and the basic path:
// one member joins, leads, syncs its assignment, and heartbeats.
func TestJoinGroup_SingleMember(t *testing.T) {
	h := newHarness(t, nil)
	id := h.memberID("g")
	join := h.joinAll("g", joinReq("g", id))[0]
	if join.ErrorCode != 0 || join.Generation != 1 || join.LeaderID != id || join.MemberID != id {
		t.Fatalf("join: %+v", join)
	}
	if len(join.Members) != 1 || join.Members[0].MemberID != id || string(join.Members[0].ProtocolMetadata) != "m" {
		t.Fatalf("leader's members: %+v", join.Members)
	}
	if *join.Protocol != "range" || *join.ProtocolType != "consumer" {
		t.Fatalf("protocol %q type %q", *join.Protocol, *join.ProtocolType)
	}
	if s := h.state("g"); s != stateCompletingRebalance {
		t.Fatalf("state %v", s)
	}
	sync := h.c.SyncGroup(h.ctx, syncReq("g", id, 1, map[string]string{id: "assigned"}))
	if sync.ErrorCode != 0 || string(sync.MemberAssignment) != "assigned" {
		t.Fatalf("sync: code %d assignment %q", sync.ErrorCode, sync.MemberAssignment)
	}
	if s := h.state("g"); s != stateStable {
		t.Fatalf("state %v", s)
	}
	if code := h.heartbeat("g", id, 1); code != 0 {
		t.Fatalf("heartbeat: code %d", code)
	}
	// The assignment was committed as Kafka's GroupMetadata record.
	recs := h.log.records(0)
	d, ok, err := decodeRecord(recs[len(recs)-1])
	if err != nil || !ok || d.meta == nil || d.meta.Generation != 1 || len(d.meta.Members) != 1 || string(d.meta.Members[0].Assignment) != "assigned" {
		t.Fatalf("last record: %+v %v %v", d, ok, err)
	}
	// An unchanged follower's (here the leader's own) rejoin in Stable:
	// the leader's rejoin rebalances, as Kafka's.
	rejoin := h.joinAll("g", joinReq("g", id))[0]
	if rejoin.ErrorCode != 0 || rejoin.Generation != 2 {
		t.Fatalf("leader's rejoin: code %d generation %d", rejoin.ErrorCode, rejoin.Generation)
	}
}

// A v3 join of a new member joins at once, with no MEMBER_ID_REQUIRED.
func TestJoinGroup_OldVersionNoMemberIDRequired(t *testing.T) {
	h := newHarness(t, nil)
	r := joinReq("g", "")
	r.Version = 3
	ch := h.joinAsync(r)
	h.awaitJoining("g", 1)
	h.clock.Advance(0)
	if resp := h.recvJoin(ch); resp.ErrorCode != 0 || resp.MemberID == "" || resp.LeaderID != resp.MemberID {
		t.Fatalf("join: %+v", resp)
	}
}

// Two members: the second's join rebalances the first, which learns of it
// by its heartbeat (testHeartbeatRebalanceInProgress), rejoins, and both
// are answered in the next generation; the followers wait for the
// leader's assignment.
func TestJoinGroup_SecondMemberRebalances(t *testing.T) {
	h := newHarness(t, nil)
	a, gen, b, chB := h.secondJoining("g")
	if s := h.state("g"); s != statePreparingRebalance {
		t.Fatalf("state %v", s)
	}
	if code := h.heartbeat("g", a, gen); code != kerr.RebalanceInProgress.Code {
		t.Fatalf("heartbeat in a rebalance: code %d", code)
	}
	if code := h.c.SyncGroup(h.ctx, syncReq("g", a, gen, nil)).ErrorCode; code != kerr.RebalanceInProgress.Code {
		t.Fatalf("sync in a rebalance: code %d", code)
	}
	chA := h.joinAsync(joinReq("g", a))
	ja, jb := h.recvJoin(chA), h.recvJoin(chB)
	if ja.ErrorCode != 0 || jb.ErrorCode != 0 || ja.Generation != gen+1 || jb.Generation != gen+1 {
		t.Fatalf("joins: %+v %+v", ja, jb)
	}
	if ja.LeaderID != a || len(ja.Members) != 2 || len(jb.Members) != 0 {
		t.Fatalf("leader %q, leader's members %d, follower's %d", ja.LeaderID, len(ja.Members), len(jb.Members))
	}
	// The follower's sync waits for the leader's.
	chSB := h.syncAsync(syncReq("g", b, gen+1, nil))
	h.awaitSyncing("g", 1)
	sa := h.c.SyncGroup(h.ctx, syncReq("g", a, gen+1, map[string]string{a: "pa", b: "pb"}))
	sb := h.recvSync(chSB)
	if sa.ErrorCode != 0 || sb.ErrorCode != 0 || string(sa.MemberAssignment) != "pa" || string(sb.MemberAssignment) != "pb" {
		t.Fatalf("syncs: %d %q, %d %q", sa.ErrorCode, sa.MemberAssignment, sb.ErrorCode, sb.MemberAssignment)
	}
}

func TestSyncGroup_Refusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  func(h *harness) *kmsg.SyncGroupRequest
		want int16
	}{
		{"testSyncGroupFromUnknownGroup", func(*harness) *kmsg.SyncGroupRequest {
			return syncReq("g", "m", 1, nil)
		}, kerr.UnknownMemberID.Code},
		{"testSyncGroupFromUnknownMember", func(h *harness) *kmsg.SyncGroupRequest {
			h.stable("g")
			return syncReq("g", "other", 1, nil)
		}, kerr.UnknownMemberID.Code},
		{"testSyncGroupFromIllegalGeneration", func(h *harness) *kmsg.SyncGroupRequest {
			id, gen := h.stable("g")
			return syncReq("g", id, gen+1, nil)
		}, kerr.IllegalGeneration.Code},
		{"testSyncGroupWithWrongProtocolName", func(h *harness) *kmsg.SyncGroupRequest {
			id, gen := h.stable("g")
			r := syncReq("g", id, gen, nil)
			r.Protocol = kmsg.StringPtr("roundrobin")
			return r
		}, kerr.InconsistentGroupProtocol.Code},
		{"testSyncGroupWithWrongProtocolType", func(h *harness) *kmsg.SyncGroupRequest {
			id, gen := h.stable("g")
			r := syncReq("g", id, gen, nil)
			r.ProtocolType = kmsg.StringPtr("connect")
			return r
		}, kerr.InconsistentGroupProtocol.Code},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			if code := h.c.SyncGroup(h.ctx, tc.req(h)).ErrorCode; code != tc.want {
				t.Fatalf("code %d, want %d", code, tc.want)
			}
		})
	}
}

func TestHeartbeat_Refusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		member func(id string) string
		gen    func(gen int32) int32
		want   int16
	}{
		{"testHeartbeatUnknownConsumerExistingGroup", func(string) string { return "other" }, func(g int32) int32 { return g }, kerr.UnknownMemberID.Code},
		{"testHeartbeatIllegalGeneration", func(id string) string { return id }, func(g int32) int32 { return g + 1 }, kerr.IllegalGeneration.Code},
		{"testValidHeartbeat", func(id string) string { return id }, func(g int32) int32 { return g }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			id, gen := h.stable("g")
			if code := h.heartbeat("g", tc.member(id), tc.gen(gen)); code != tc.want {
				t.Fatalf("code %d, want %d", code, tc.want)
			}
		})
	}
	t.Run("testHeartbeatUnknownGroup", func(t *testing.T) {
		h := newHarness(t, nil)
		if code := h.heartbeat("g", "m", 1); code != kerr.UnknownMemberID.Code {
			t.Fatalf("code %d", code)
		}
	})
}

// testSessionTimeout: a member that stops heartbeating is removed after
// its session, and its group rebalances (to Empty, alone); heartbeats
// within the session keep it.
func TestHeartbeat_SessionExpiry(t *testing.T) {
	h := newHarness(t, nil)
	id, gen := h.stable("g")
	for range 3 {
		h.clock.Advance(testSession - time.Second)
		if code := h.heartbeat("g", id, gen); code != 0 {
			t.Fatalf("heartbeat within the session: code %d", code)
		}
	}
	h.clock.Advance(testSession)
	if s := h.state("g"); s != stateEmpty {
		t.Fatalf("state after the session: %v", s)
	}
	if code := h.heartbeat("g", id, gen); code != kerr.UnknownMemberID.Code {
		t.Fatalf("heartbeat of an expired member: code %d", code)
	}
}

// testRebalanceCompletesBeforeMemberJoins: a member that does not rejoin
// within the rebalance timeout is removed, and the others go on.
func TestJoinGroup_RebalanceTimeoutRemovesLaggard(t *testing.T) {
	h := newHarness(t, nil)
	a, gen, b, chB := h.secondJoining("g")
	// a keeps heartbeating, but never rejoins.
	for elapsed := time.Duration(0); elapsed < testRebalance; elapsed += 5 * time.Second {
		h.heartbeat("g", a, gen)
		h.clock.Advance(5 * time.Second)
	}
	jb := h.recvJoin(chB)
	if jb.ErrorCode != 0 || jb.LeaderID != b || len(jb.Members) != 1 {
		t.Fatalf("join after the rebalance timeout: %+v", jb)
	}
	if code := h.heartbeat("g", a, gen); code != kerr.UnknownMemberID.Code {
		t.Fatalf("heartbeat of the removed member: code %d", code)
	}
}

// The initial rebalance delay of an empty group waits for more members,
// extended while they come, as Kafka's InitialDelayedJoin
// (testInitialRebalanceDelay…).
func TestJoinGroup_InitialRebalanceDelay(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.InitialRebalanceDelay = 3 * time.Second })
	a := h.memberID("g")
	chA := h.joinAsync(joinReq("g", a))
	h.awaitJoining("g", 1)
	h.clock.Advance(2 * time.Second)
	b := h.memberID("g")
	chB := h.joinAsync(joinReq("g", b))
	h.awaitJoining("g", 2)
	h.clock.Advance(time.Second + time.Millisecond) // the first delay ends; b extends it
	select {
	case r := <-chA:
		t.Fatalf("answered before the extended delay: %+v", r)
	default:
	}
	h.clock.Advance(3 * time.Second)
	ja, jb := h.recvJoin(chA), h.recvJoin(chB)
	if ja.ErrorCode != 0 || jb.ErrorCode != 0 || ja.Generation != 1 || jb.Generation != 1 {
		t.Fatalf("joins: %+v %+v", ja, jb)
	}
}

func TestJoinGroup_MaxSize(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxGroupSize = 1 })
	h.stable("g")
	if code := h.c.JoinGroup(h.ctx, joinReq("g", "")).ErrorCode; code != kerr.GroupMaxSizeReached.Code {
		t.Fatalf("code %d, want GROUP_MAX_SIZE_REACHED", code)
	}
}

func TestLeaveGroup(t *testing.T) {
	h := newHarness(t, nil)
	id, _ := h.stable("g")
	r := kmsg.NewPtrLeaveGroupRequest()
	r.Version = 5
	r.Group = "g"
	r.Members = []kmsg.LeaveGroupRequestMember{{MemberID: id}, {MemberID: "stranger"}}
	resp := h.c.LeaveGroup(h.ctx, r)
	if resp.ErrorCode != 0 || len(resp.Members) != 2 || resp.Members[0].ErrorCode != 0 || resp.Members[1].ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("batched leave: %+v", resp)
	}
	if s := h.state("g"); s != stateEmpty {
		t.Fatalf("state after the last member left: %v", s)
	}
	// v0-2: one member, the code at the top.
	old := kmsg.NewPtrLeaveGroupRequest()
	old.Version = 1
	old.Group, old.MemberID = "g", id
	if code := h.c.LeaveGroup(h.ctx, old).ErrorCode; code != kerr.UnknownMemberID.Code {
		t.Fatalf("v1 leave of a gone member: code %d", code)
	}
}

// Resign answers every waiting SyncGroup NOT_COORDINATOR.
func TestResign_FailsWaitingSyncs(t *testing.T) {
	h := newHarness(t, nil)
	a, b := h.memberID("g"), h.memberID("g")
	js := h.joinAll("g", joinReq("g", a), joinReq("g", b))
	follower := b
	if js[0].LeaderID == b {
		follower = a
	}
	ch := h.syncAsync(syncReq("g", follower, js[0].Generation, nil))
	h.awaitSyncing("g", 1)
	h.c.Resign(0)
	if code := h.recvSync(ch).ErrorCode; code != kerr.NotCoordinator.Code {
		t.Fatalf("waiting sync after Resign: code %d", code)
	}
}

// Resign answers every waiting JoinGroup NOT_COORDINATOR, and the group is
// another coordinator's from then on.
func TestResign_FailsWaitingJoins(t *testing.T) {
	h := newHarness(t, nil)
	a, _ := h.stable("g")
	b := h.memberID("g")
	chB := h.joinAsync(joinReq("g", b))
	h.awaitJoining("g", 1)
	h.c.Resign(0)
	if resp := h.recvJoin(chB); resp.ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("waiting join after Resign: code %d", resp.ErrorCode)
	}
	if code := h.heartbeat("g", a, 1); code != kerr.NotCoordinator.Code {
		t.Fatalf("heartbeat after Resign: code %d", code)
	}
}

// A member that dies during a rebalance is removed at the end of its
// session, and the join phase completes then, before the rebalance
// timeout: the others do not wait for the dead.
func TestJoinGroup_DeadMemberEndsTheJoinPhaseAtItsSession(t *testing.T) {
	h := newHarness(t, nil)
	_, _, b, chB := h.secondJoining("g")
	h.clock.Advance(testSession)
	jb := h.recvJoin(chB)
	if jb.ErrorCode != 0 || jb.LeaderID != b || len(jb.Members) != 1 {
		t.Fatalf("join after the dead member's session: %+v", jb)
	}
}

// KIP-394: a member id given out but never joined with holds a rebalance
// up to its session timeout only.
func TestJoinGroup_PendingMemberExpires(t *testing.T) {
	h := newHarness(t, nil)
	a, _ := h.stable("g")
	h.memberID("g") // never used
	ch := h.joinAsync(joinReq("g", a))
	h.awaitJoining("g", 1)
	select {
	case r := <-ch:
		t.Fatalf("answered while a member id is pending: %+v", r)
	default:
	}
	h.clock.Advance(testSession)
	if j := h.recvJoin(ch); j.ErrorCode != 0 || len(j.Members) != 1 {
		t.Fatalf("join after the pending id expired: %+v", j)
	}
}

// An Elect of a new epoch drops the partition's groups as a Resign does
// (a waiting join gets NOT_COORDINATOR) and loads them again from the
// log.
func TestElect_NewEpochReloads(t *testing.T) {
	h := newHarness(t, nil)
	a, gen, _, chB := h.secondJoining("g")
	h.c.Elect(0, 2, 1)
	if j := h.recvJoin(chB); j.ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("waiting join after a new epoch: %d", j.ErrorCode)
	}
	h.awaitLoaded(0)
	// As the log has it: Stable with a alone.
	if code := h.heartbeat("g", a, gen); code != 0 {
		t.Fatalf("heartbeat after the reload: %d", code)
	}
	if s := h.state("g"); s != stateStable {
		t.Fatalf("state after the reload: %v", s)
	}
}

// A Resign while the leader's assignment is being written ends the write
// (its context is the partition's too) and answers the leader
// NOT_COORDINATOR: the group is another coordinator's now.
func TestResign_EndsAWriteInFlight(t *testing.T) {
	h := newHarness(t, nil)
	id := h.memberID("g")
	join := h.joinAll("g", joinReq("g", id))[0]
	h.log.mu.Lock()
	h.log.appendGate = make(chan struct{}) // never opened
	h.log.mu.Unlock()
	ch := h.syncAsync(syncReq("g", id, join.Generation, map[string]string{id: "a"}))
	h.awaitSyncing("g", 1)
	h.c.Resign(0)
	if code := h.recvSync(ch).ErrorCode; code != kerr.NotCoordinator.Code {
		t.Fatalf("sync after Resign: %d", code)
	}
	if n := len(h.log.records(0)); n != 0 {
		t.Fatalf("%d records written", n)
	}
}

// A leave that empties the group is answered only once the group's Empty
// state is in the log: a coordinator that loads the partition after a
// kill -9 of this one never waits out the session of a member whose leave
// was acknowledged (it would hold the next member's join that long).
func TestLeaveGroup_EmptiedGroupWrittenFirst(t *testing.T) {
	h := newHarness(t, nil)
	id, _ := h.stable("g")
	gate := make(chan struct{})
	h.log.mu.Lock()
	h.log.appendGate = gate
	h.log.mu.Unlock()
	r := kmsg.NewPtrLeaveGroupRequest()
	r.Version = 3
	r.Group = "g"
	r.Members = []kmsg.LeaveGroupRequestMember{{MemberID: id}}
	ch := async(func() *kmsg.LeaveGroupResponse { return h.c.LeaveGroup(h.ctx, r) })
	select {
	case resp := <-ch:
		t.Fatalf("the leave was answered (%+v) before the emptied group was written", resp)
	case <-time.After(100 * time.Millisecond):
	}
	close(gate)
	if resp := recv(t, ch); resp.ErrorCode != 0 || resp.Members[0].ErrorCode != 0 {
		t.Fatalf("leave: %+v", resp)
	}
	again := newHarnessOn(t, h.log, nil)
	if g := again.group("g"); g == nil || g.state != stateEmpty || len(g.members) != 0 {
		t.Fatalf("the group as a new coordinator loads it: %+v", g)
	}
}
