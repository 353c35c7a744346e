package integration

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

const activeTimeout = 20 * time.Second

// quorumStatusJSON is `keel quorum status -o json` (DESIGN.md).
type quorumStatusJSON struct {
	ClusterID       string `json:"cluster_id"`
	LeaderID        int32  `json:"leader_id"`
	ControllerEpoch int64  `json:"controller_epoch"`
	RaftTerm        uint64 `json:"raft_term"`
	CommitIndex     uint64 `json:"commit_index"`
	Voters          []struct {
		ID           int32  `json:"id"`
		Address      string `json:"address"`
		State        string `json:"state"`
		LastIndex    uint64 `json:"last_index"`
		AppliedIndex uint64 `json:"applied_index"`
	} `json:"voters"`
}

// quorumStatus runs `keel quorum status -o json` against addrs.
func quorumStatus(t *testing.T, addrs []string) quorumStatusJSON {
	t.Helper()
	stdout, stderr, code := runKeel(t, 30*time.Second, "quorum", "status", "--controllers", strings.Join(addrs, ","), "-o", "json")
	if code != 0 {
		t.Fatalf("keel quorum status: exit %d: %s", code, stderr)
	}
	var st quorumStatusJSON
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		t.Fatalf("keel quorum status: bad JSON: %v\n%s", err, stdout)
	}
	return st
}

func TestQuorum_ElectsOneLeader(t *testing.T) {
	c := startCluster(t, 3)
	leader, epoch := c.WaitForActive(t, activeTimeout)
	if epoch < 1 {
		t.Fatalf("controller epoch %d, want >= 1", epoch)
	}

	views, errs := c.Views(context.Background(), c.IDs())
	if len(errs) > 0 {
		t.Fatalf("nodes did not answer: %v", errs)
	}
	clusterID := views[leader].ClusterId
	if clusterID == "" {
		t.Errorf("the active controller reports no cluster id")
	}
	var leaders, followers int
	for id, v := range views {
		if v.NodeId != id {
			t.Errorf("node at %s says it is node %d, want %d", c.Addr(id), v.NodeId, id)
		}
		switch v.State {
		case "leader":
			leaders++
		case "follower":
			followers++
		}
		if v.Active != (id == leader) {
			t.Errorf("node %d: active=%v, but the active controller is node %d", id, v.Active, leader)
		}
		if v.LeaderId != leader || v.ControllerEpoch != epoch || v.ClusterId != clusterID {
			t.Errorf("node %d sees leader %d epoch %d cluster %q; want %d, %d, %q",
				id, v.LeaderId, v.ControllerEpoch, v.ClusterId, leader, epoch, clusterID)
		}
		if v.LeaderId >= 0 && v.LeaderAddress != c.Addr(leader) {
			t.Errorf("node %d gives the leader's address as %q, want %q", id, v.LeaderAddress, c.Addr(leader))
		}
		if v.ControllerEpochLeaderId != leader {
			t.Errorf("node %d: epoch %d was committed by node %d, want %d", id, epoch, v.ControllerEpochLeaderId, leader)
		}
		if len(v.Voters) != 3 {
			t.Errorf("node %d knows %d voters, want 3", id, len(v.Voters))
		}
	}
	if leaders != 1 || followers != 2 {
		t.Errorf("raft states: %d leaders, %d followers; want 1 and 2", leaders, followers)
	}

	st := quorumStatus(t, c.Addrs())
	if st.LeaderID != leader || st.ControllerEpoch != epoch || st.ClusterID != clusterID {
		t.Errorf("quorum status: leader %d epoch %d cluster %q; want %d, %d, %q",
			st.LeaderID, st.ControllerEpoch, st.ClusterID, leader, epoch, clusterID)
	}
	if len(st.Voters) != 3 {
		t.Fatalf("quorum status lists %d voters, want 3: %+v", len(st.Voters), st.Voters)
	}
	for i, v := range st.Voters {
		id := int32(i + 1)
		if v.ID != id || v.Address != c.Addr(id) {
			t.Errorf("quorum status voter %d: id %d address %q; want %d, %q", i, v.ID, v.Address, id, c.Addr(id))
		}
		want := "follower"
		if v.ID == leader {
			want = "leader"
		}
		if v.State != want {
			t.Errorf("quorum status: voter %d is %q, want %q", v.ID, v.State, want)
		}
		if v.AppliedIndex == 0 || v.LastIndex < v.AppliedIndex {
			t.Errorf("quorum status: voter %d last_index %d applied_index %d", v.ID, v.LastIndex, v.AppliedIndex)
		}
	}

	// quorum verify commits through the active controller, even when it is
	// given only a follower's address.
	follower := otherThan(c.IDs(), leader)[0]
	stdout, stderr, code := runKeel(t, 30*time.Second, "quorum", "verify", "--controllers", c.Addr(follower), "-o", "json")
	if code != 0 {
		t.Fatalf("keel quorum verify: exit %d: %s", code, stderr)
	}
	var vr struct {
		Index           uint64  `json:"index"`
		ControllerEpoch int64   `json:"controller_epoch"`
		LatencyMS       float64 `json:"latency_ms"`
	}
	if err := json.Unmarshal([]byte(stdout), &vr); err != nil {
		t.Fatalf("keel quorum verify: bad JSON: %v\n%s", err, stdout)
	}
	if vr.Index <= st.CommitIndex || vr.ControllerEpoch != epoch || vr.LatencyMS <= 0 {
		t.Errorf("quorum verify = %+v; want index > %d, epoch %d, latency > 0", vr, st.CommitIndex, epoch)
	}
	c.WaitForApplied(t, c.IDs(), vr.Index)
}

func TestFailover_KilledLeaderIsReplacedAndRejoins(t *testing.T) {
	c := startCluster(t, 3)
	oldLeader, oldEpoch := c.WaitForActive(t, activeTimeout)
	before := c.appendNoOp(t, 10*time.Second)
	if before.ControllerEpoch != oldEpoch {
		t.Errorf("no-op committed in epoch %d, want %d", before.ControllerEpoch, oldEpoch)
	}
	c.WaitForApplied(t, c.IDs(), before.Index)

	c.Kill(oldLeader)
	leader, epoch := c.WaitForActive(t, activeTimeout)
	if leader == oldLeader {
		t.Fatalf("node %d is still the active controller after kill -9", leader)
	}
	if epoch != oldEpoch+1 {
		t.Fatalf("controller epoch after failover = %d, want exactly %d", epoch, oldEpoch+1)
	}

	st := quorumStatus(t, c.Addrs())
	if st.LeaderID != leader || st.ControllerEpoch != epoch {
		t.Errorf("quorum status: leader %d epoch %d, want %d, %d", st.LeaderID, st.ControllerEpoch, leader, epoch)
	}
	for _, v := range st.Voters {
		if (v.ID == oldLeader) != (v.State == "unreachable") {
			t.Errorf("quorum status: voter %d is %q (node %d was killed)", v.ID, v.State, oldLeader)
		}
	}

	// Something for the restarted node to catch up on.
	after := c.appendNoOp(t, 10*time.Second)
	if after.ControllerEpoch != epoch || after.Index <= before.Index {
		t.Errorf("no-op after failover: index %d epoch %d; want index > %d, epoch %d", after.Index, after.ControllerEpoch, before.Index, epoch)
	}

	c.Restart(oldLeader)
	views := c.WaitForConverged(t, c.IDs(), after.Index)
	old := views[oldLeader]
	if old.State != "follower" || old.Active || old.LeaderId != leader || old.ControllerEpoch != epoch {
		t.Errorf("restarted node %d: state %s active %v leader %d epoch %d; want follower of %d in epoch %d",
			oldLeader, old.State, old.Active, old.LeaderId, old.ControllerEpoch, leader, epoch)
	}
	if got, ep := c.WaitForActive(t, activeTimeout); got != leader || ep != epoch {
		t.Errorf("after the old leader rejoined: active %d epoch %d, want %d, %d (no disruption)", got, ep, leader, epoch)
	}
}

func TestRestart_EpochNeverGoesBackwards(t *testing.T) {
	c := startCluster(t, 3)
	leader, epoch := c.WaitForActive(t, activeTimeout)
	resp := c.appendNoOp(t, 10*time.Second)
	views := c.WaitForApplied(t, c.IDs(), resp.Index)
	clusterID := views[leader].ClusterId

	// Followers first: once both are gone the leader cannot commit a new
	// epoch, so epoch is the last one this cluster had.
	for _, id := range otherThan(c.IDs(), leader) {
		c.Stop(id)
	}
	c.Stop(leader)

	for _, id := range c.IDs() {
		c.Restart(id)
	}
	_, newEpoch := c.WaitForActive(t, activeTimeout)
	if newEpoch <= epoch {
		t.Fatalf("controller epoch after restarting every node = %d, want > %d", newEpoch, epoch)
	}
	views = c.WaitForApplied(t, c.IDs(), resp.Index)
	for id, v := range views {
		if v.ClusterId != clusterID {
			t.Errorf("node %d: cluster id %q after restart, want %q", id, v.ClusterId, clusterID)
		}
		if v.ControllerEpoch < newEpoch {
			t.Errorf("node %d: epoch %d, want %d", id, v.ControllerEpoch, newEpoch)
		}
	}
	if r := c.appendNoOp(t, 10*time.Second); r.ControllerEpoch != newEpoch || r.Index <= resp.Index {
		t.Errorf("no-op after restart: index %d epoch %d; want index > %d, epoch %d", r.Index, r.ControllerEpoch, resp.Index, newEpoch)
	}
}

func TestQuorum_FiveNodesSurviveTwoKills(t *testing.T) {
	c := startCluster(t, 5)
	leader, epoch := c.WaitForActive(t, activeTimeout)
	c.WaitForApplied(t, c.IDs(), c.appendNoOp(t, 10*time.Second).Index)

	// The leader and one follower at once.
	victims := []int32{leader, otherThan(c.IDs(), leader)[0]}
	for _, id := range victims {
		c.Kill(id)
	}
	newLeader, newEpoch := c.WaitForActive(t, activeTimeout)
	if slices.Contains(victims, newLeader) || newEpoch <= epoch {
		t.Fatalf("after killing %v: active %d epoch %d; want a survivor, epoch > %d", victims, newLeader, newEpoch, epoch)
	}
	resp := c.appendNoOp(t, 10*time.Second)
	if resp.ControllerEpoch != newEpoch {
		t.Errorf("no-op committed in epoch %d, want %d", resp.ControllerEpoch, newEpoch)
	}
	c.WaitForApplied(t, c.Live(), resp.Index)
}

func TestQuorum_NoQuorumRefusesWrites(t *testing.T) {
	c := startCluster(t, 3)
	leader, epoch := c.WaitForActive(t, activeTimeout)
	c.WaitForApplied(t, c.IDs(), c.appendNoOp(t, 10*time.Second).Index)

	down := otherThan(c.IDs(), leader)
	for _, id := range down {
		c.Kill(id)
	}

	// Straight to the node that was leader: it may still think it leads for
	// a lease, but must not hang the write beyond its own bound. The client
	// context is longer than the bound we require, so the answer has to come
	// from the server.
	cl, err := c.Client().Controller(c.Addr(leader))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	_, err = cl.AppendNoOp(ctx, &keelpb.AppendNoOpRequest{RequestId: newRequestID()})
	cancel()
	if code := status.Code(err); code != codes.Unavailable || time.Since(start) > 15*time.Second {
		t.Fatalf("AppendNoOp on the lone node: %v (code %s) after %s; want Unavailable within 15s", err, code, time.Since(start))
	}
	t.Logf("lone node refused the write after %s: %v", time.Since(start).Round(time.Millisecond), err)

	// Through the client, which retries every address until its deadline.
	start = time.Now()
	ctx, cancel = context.WithTimeout(context.Background(), 6*time.Second)
	_, err = c.Client().AppendNoOp(ctx, newRequestID())
	cancel()
	if code := status.Code(err); code != codes.Unavailable || time.Since(start) > 15*time.Second {
		t.Fatalf("client AppendNoOp without quorum: %v (code %s) after %s; want Unavailable within 15s", err, code, time.Since(start))
	}
	t.Logf("client gave up after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if v, err := c.Describe(context.Background(), leader); err != nil || v.Active {
		t.Errorf("lone node %d: %v, active=%v; want an answer, not active", leader, err, v.GetActive())
	}

	c.Restart(down[0])
	resp := c.appendNoOp(t, 20*time.Second)
	newLeader, newEpoch := c.WaitForActive(t, activeTimeout)
	if newEpoch <= epoch || resp.ControllerEpoch != newEpoch {
		t.Errorf("after quorum returned: active %d epoch %d, write in epoch %d; want epoch > %d",
			newLeader, newEpoch, resp.ControllerEpoch, epoch)
	}
	c.WaitForApplied(t, c.Live(), resp.Index)
}

func TestWrite_FollowerRedirectsToLeader(t *testing.T) {
	c := startCluster(t, 3)
	leader, epoch := c.WaitForActive(t, activeTimeout)
	follower := otherThan(c.IDs(), leader)[0]

	cl, err := c.Client().Controller(c.Addr(follower))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = cl.AppendNoOp(ctx, &keelpb.AppendNoOpRequest{RequestId: newRequestID()})
	if code := status.Code(err); code != codes.FailedPrecondition {
		t.Fatalf("AppendNoOp on follower %d: %v (code %s), want FailedPrecondition", follower, err, code)
	}
	hint, ok := rpc.LeaderHintOf(err)
	if !ok {
		t.Fatalf("follower's refusal carries no LeaderHint: %v", err)
	}
	if hint.LeaderId != leader || hint.LeaderAddress != c.Addr(leader) {
		t.Fatalf("LeaderHint = node %d at %q, want node %d at %q", hint.LeaderId, hint.LeaderAddress, leader, c.Addr(leader))
	}

	only, err := rpc.NewClient([]string{c.Addr(follower)})
	if err != nil {
		t.Fatal(err)
	}
	defer only.Close()
	resp, err := only.AppendNoOp(ctx, newRequestID())
	if err != nil {
		t.Fatalf("client given only follower %d: %v", follower, err)
	}
	if resp.ControllerEpoch != epoch || resp.Index == 0 {
		t.Errorf("AppendNoOp = index %d epoch %d, want epoch %d", resp.Index, resp.ControllerEpoch, epoch)
	}
	c.WaitForApplied(t, c.IDs(), resp.Index)
}

// otherThan returns ids without id, in order.
func otherThan(ids []int32, id int32) []int32 {
	var out []int32
	for _, x := range ids {
		if x != id {
			out = append(out, x)
		}
	}
	return out
}
