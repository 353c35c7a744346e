package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/raftlog"
)

func conf(members ...string) raft.Configuration {
	var c raft.Configuration
	for _, m := range members {
		var id int32
		var addr string
		suffrage := raft.Voter
		if _, err := fmt.Sscanf(m, "%d@%s", &id, &addr); err != nil {
			panic(m)
		}
		if n := len(addr); n > 1 && addr[n-1] == '~' { // "4@node-4~": a nonvoter
			addr, suffrage = addr[:n-1], raft.Nonvoter
		}
		c.Servers = append(c.Servers, raft.Server{ID: raftlog.ServerID(id), Address: raft.ServerAddress(addr), Suffrage: suffrage})
	}
	return c
}

func TestDecideAddVoter(t *testing.T) {
	three := conf("1@a:1", "2@b:2", "3@c:3")
	tests := []struct {
		name     string
		conf     raft.Configuration
		id       int32
		addr     string
		wantNoop bool
		wantErr  error
	}{
		{name: "a new voter", conf: three, id: 4, addr: "d:4"},
		{name: "the first voter of an empty configuration", conf: conf(), id: 1, addr: "a:1"},
		{name: "a voter already there at that address: nothing to do", conf: three, id: 2, addr: "b:2", wantNoop: true},
		{name: "a voter already there at another address", conf: three, id: 2, addr: "b:9", wantErr: ErrVoterExists},
		{name: "another voter's address", conf: three, id: 4, addr: "c:3", wantErr: ErrVoterExists},
		{name: "a nonvoter at that address is promoted", conf: conf("1@a:1", "4@d:4~"), id: 4, addr: "d:4"},
		{name: "a nonvoter at another address", conf: conf("1@a:1", "4@d:4~"), id: 4, addr: "d:5", wantErr: ErrVoterExists},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			noop, err := decideAddVoter(tt.conf, tt.id, tt.addr)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if noop != tt.wantNoop {
				t.Fatalf("noop = %v, want %v", noop, tt.wantNoop)
			}
		})
	}
}

func TestDecideRemoveVoter(t *testing.T) {
	three := conf("1@a:1", "2@b:2", "3@c:3")
	tests := []struct {
		name     string
		conf     raft.Configuration
		leader   int32
		id       int32
		wantSelf bool
		wantErr  error
	}{
		{name: "a follower", conf: three, leader: 1, id: 3},
		{name: "the leader itself: hand off first", conf: three, leader: 1, id: 1, wantSelf: true},
		{name: "the leader of two", conf: conf("1@a:1", "2@b:2"), leader: 1, id: 1, wantSelf: true},
		{name: "an unknown id", conf: three, leader: 1, id: 9, wantErr: ErrUnknownVoter},
		{name: "the last voter", conf: conf("1@a:1"), leader: 1, id: 1, wantErr: ErrLastVoter},
		{name: "the last voter, with a nonvoter beside it", conf: conf("1@a:1", "4@d:4~"), leader: 1, id: 1, wantErr: ErrLastVoter},
		{name: "a nonvoter beside the last voter", conf: conf("1@a:1", "4@d:4~"), leader: 1, id: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			self, err := decideRemoveVoter(tt.conf, tt.leader, tt.id)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if self != tt.wantSelf {
				t.Fatalf("self = %v, want %v", self, tt.wantSelf)
			}
		})
	}
}

func TestDecideTransfer(t *testing.T) {
	three := conf("1@a:1", "2@b:2", "3@c:3")
	tests := []struct {
		name     string
		conf     raft.Configuration
		target   int32
		wantTo   raft.ServerID // "" for raft's pick
		wantNoop bool
		wantErr  error
	}{
		{name: "any voter", conf: three, target: 0},
		{name: "a voter", conf: three, target: 3, wantTo: "3"},
		{name: "itself: it leads already", conf: three, target: 1, wantNoop: true},
		{name: "an unknown id", conf: three, target: 9, wantErr: ErrUnknownVoter},
		{name: "a nonvoter", conf: conf("1@a:1", "2@b:2", "4@d:4~"), target: 4, wantErr: ErrNotVoter},
		{name: "any voter, when there is none but itself", conf: conf("1@a:1", "4@d:4~"), target: 0, wantErr: ErrLastVoter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			to, noop, err := decideTransfer(tt.conf, 1, tt.target)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			var gotTo raft.ServerID
			if to != nil {
				gotTo = to.ID
			}
			if noop != tt.wantNoop || gotTo != tt.wantTo {
				t.Fatalf("to, noop = %q, %v; want %q, %v", gotTo, noop, tt.wantTo, tt.wantNoop)
			}
		})
	}
}

func TestOutside(t *testing.T) {
	tests := []struct {
		name string
		conf raft.Configuration
		want bool
	}{
		{name: "no configuration yet (--join)", conf: conf(), want: false},
		{name: "a voter", conf: conf("1@a:1", "4@d:4"), want: false},
		{name: "a nonvoter", conf: conf("1@a:1", "4@d:4~"), want: false},
		{name: "removed", conf: conf("1@a:1", "2@b:2"), want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := outside(tt.conf, 4); got != tt.want {
				t.Fatalf("outside = %v, want %v", got, tt.want)
			}
		})
	}
}

// startJoiner starts node id with empty stores and no bootstrap, as
// `keel controller --join` does, connected to every node.
func (c *testCluster) startJoiner(id int32) *testNode {
	c.t.Helper()
	addr, trans := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("node-%d", id)))
	nd := &testNode{id: id, addr: addr, trans: trans, logs: raft.NewInmemStore(), snaps: raft.NewInmemSnapshotStore()}
	c.nodes[id] = nd
	c.connectAll()
	c.start(nd)
	return nd
}

// voterIDs returns the ids in nd's latest configuration, sorted.
func voterIDs(t *testing.T, nd *testNode) []int32 {
	t.Helper()
	var ids []int32
	for _, m := range quorumMembers(nd.raft.GetConfiguration().Configuration()) {
		ids = append(ids, m.Id)
	}
	slices.Sort(ids)
	return ids
}

func memberIDs(r *MembershipResult) []int32 {
	var ids []int32
	for _, m := range r.Members {
		ids = append(ids, m.Id)
	}
	slices.Sort(ids)
	return ids
}

// waitRemoved runs nd's WaitRemoved in the background; the returned func
// waits for its result (nil if nd did not find itself removed in time).
func waitRemoved(nd *testNode, timeout time.Duration) func() error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	done := make(chan error, 1)
	go func() { done <- nd.ctrl.WaitRemoved(ctx) }()
	return func() error { defer cancel(); return <-done }
}

func TestMembership_AddVoter(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	ctx := context.Background()

	joiner := c.startJoiner(4)
	if ids := voterIDs(t, joiner); len(ids) != 0 {
		t.Fatalf("a joining node has configuration %v before it is added", ids)
	}
	stillOutside := waitRemoved(joiner, 700*time.Millisecond)

	res, err := leader.ctrl.AddVoter(ctx, 4, string(joiner.addr))
	if err != nil {
		t.Fatal(err)
	}
	if got := memberIDs(res); !slices.Equal(got, []int32{1, 2, 3, 4}) || res.Index == 0 || res.LeaderID != leader.id {
		t.Fatalf("AddVoter = %v at index %d by %d", got, res.Index, res.LeaderID)
	}
	// The new voter catches up with the log, epoch and cluster id included.
	index, err := leader.ctrl.Propose(ctx, noOp())
	if err != nil {
		t.Fatal(err)
	}
	c.WaitForApplied(index, 5*time.Second)
	if img := joiner.fsm.Image(); img.ClusterID != "test-cluster" || img.ControllerEpoch != leader.fsm.Image().ControllerEpoch {
		t.Fatalf("the new voter's image: cluster %q epoch %d", img.ClusterID, img.ControllerEpoch)
	}
	if got := voterIDs(t, joiner); !slices.Equal(got, []int32{1, 2, 3, 4}) {
		t.Fatalf("the new voter's configuration = %v", got)
	}
	if err := stillOutside(); err != nil {
		t.Fatalf("a node waiting to be added took itself as removed: %v", err)
	}

	// Again, the same: nothing to change, the same answer.
	again, err := leader.ctrl.AddVoter(ctx, 4, string(joiner.addr))
	if err != nil || again.Index != res.Index || !slices.Equal(memberIDs(again), memberIDs(res)) {
		t.Fatalf("AddVoter again = %+v, %v; want index %d", again, err, res.Index)
	}
	if _, err := leader.ctrl.AddVoter(ctx, 4, "node-elsewhere"); !errors.Is(err, ErrVoterExists) {
		t.Fatalf("AddVoter at another address: err = %v, want ErrVoterExists", err)
	}
	if _, err := leader.ctrl.AddVoter(ctx, 5, string(joiner.addr)); !errors.Is(err, ErrVoterExists) {
		t.Fatalf("AddVoter of another id at node 4's address: err = %v, want ErrVoterExists", err)
	}

	// A follower refuses and names the leader.
	follower := c.nodes[leader.id%4+1]
	var nl *NotLeaderError
	if _, err := follower.ctrl.AddVoter(ctx, 5, "node-5"); !errors.As(err, &nl) || nl.LeaderID != leader.id {
		t.Fatalf("AddVoter on a follower: err = %v, want a NotLeaderError naming %d", err, leader.id)
	}
}

func TestMembership_RemoveVoter(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	ctx := context.Background()
	var victim *testNode
	for _, nd := range c.nodes {
		if nd != leader {
			victim = nd
			break
		}
	}
	removed := waitRemoved(victim, 5*time.Second)

	res, err := leader.ctrl.RemoveVoter(ctx, victim.id)
	if err != nil {
		t.Fatal(err)
	}
	if got := memberIDs(res); len(got) != 2 || slices.Contains(got, victim.id) {
		t.Fatalf("RemoveVoter(%d) = %v", victim.id, got)
	}
	// The removed node notices and says so; the rest still commit.
	if err := removed(); !errors.Is(err, ErrRemoved) {
		t.Fatalf("WaitRemoved on the removed node = %v, want ErrRemoved", err)
	}
	if _, err := leader.ctrl.Propose(ctx, noOp()); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.ctrl.RemoveVoter(ctx, victim.id); !errors.Is(err, ErrUnknownVoter) {
		t.Fatalf("removing it again: err = %v, want ErrUnknownVoter", err)
	}
	if _, err := leader.ctrl.RemoveVoter(ctx, 9); !errors.Is(err, ErrUnknownVoter) {
		t.Fatalf("RemoveVoter(9): err = %v, want ErrUnknownVoter", err)
	}
}

func TestMembership_RemoveTheLastVoter(t *testing.T) {
	c := newTestCluster(t, 1)
	leader := c.WaitForActive(5 * time.Second)
	if _, err := leader.ctrl.RemoveVoter(context.Background(), 1); !errors.Is(err, ErrLastVoter) {
		t.Fatalf("err = %v, want ErrLastVoter", err)
	}
	if _, err := leader.ctrl.TransferLeadership(context.Background(), 0); !errors.Is(err, ErrLastVoter) {
		t.Fatalf("TransferLeadership with no other voter: err = %v, want ErrLastVoter", err)
	}
}

// TestMembership_RemoveTheLeader: the active controller asked to remove
// itself hands leadership on and names the new leader, which removes it.
func TestMembership_RemoveTheLeader(t *testing.T) {
	c := newTestCluster(t, 3)
	old := c.WaitForActive(5 * time.Second)
	ctx := context.Background()
	removed := waitRemoved(old, 10*time.Second)

	_, err := old.ctrl.RemoveVoter(ctx, old.id)
	var nl *NotLeaderError
	if !errors.As(err, &nl) || !nl.HandedOff || nl.LeaderID == old.id || nl.LeaderID < 0 {
		t.Fatalf("RemoveVoter(itself) = %v; want a handed-off NotLeaderError naming the new leader", err)
	}
	if got := voterIDs(t, old); len(got) != 3 {
		t.Fatalf("the configuration changed before the new leader was asked: %v", got)
	}
	next := c.WaitForActive(5*time.Second, nl.LeaderID)
	res, err := next.ctrl.RemoveVoter(ctx, old.id)
	if err != nil {
		t.Fatal(err)
	}
	if got := memberIDs(res); len(got) != 2 || slices.Contains(got, old.id) {
		t.Fatalf("RemoveVoter(%d) at the new leader = %v", old.id, got)
	}
	if err := removed(); !errors.Is(err, ErrRemoved) {
		t.Fatalf("WaitRemoved on the old leader = %v, want ErrRemoved", err)
	}
}

func TestMembership_TransferLeadership(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	ctx := context.Background()

	if got, err := leader.ctrl.TransferLeadership(ctx, leader.id); err != nil || got != leader.id {
		t.Fatalf("TransferLeadership to itself = %d, %v; want %d, nothing done", got, err, leader.id)
	}
	if _, err := leader.ctrl.TransferLeadership(ctx, 9); !errors.Is(err, ErrUnknownVoter) {
		t.Fatalf("TransferLeadership to 9: err = %v, want ErrUnknownVoter", err)
	}
	target := c.nodes[leader.id%3+1]
	got, err := leader.ctrl.TransferLeadership(ctx, target.id)
	if err != nil {
		t.Fatal(err)
	}
	if got != target.id && got != -1 {
		t.Fatalf("TransferLeadership(%d) answered %d", target.id, got)
	}
	c.WaitForActive(5*time.Second, target.id)
	// Without a target, raft picks.
	got, err = target.ctrl.TransferLeadership(ctx, 0)
	if err != nil || got == target.id {
		t.Fatalf("TransferLeadership(any) = %d, %v", got, err)
	}
	var others []int32
	for id := range c.nodes {
		if id != target.id {
			others = append(others, id)
		}
	}
	c.WaitForActive(5*time.Second, others...)
}

// TestMembership_ConfigurationIndex: raft v1.7's GetConfiguration reports
// index 0, so the controller takes the index of the last committed
// configuration from its state machine, and a stale one is refused.
func TestMembership_ConfigurationIndex(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	if i := leader.raft.GetConfiguration().Index(); i != 0 {
		t.Logf("raft's GetConfiguration now reports index %d: configuration() could use it directly", i)
	}
	_, index, err := leader.ctrl.configuration()
	if err != nil || index != 1 {
		t.Fatalf("configuration index = %d, %v; want 1, the bootstrap's", index, err)
	}
	joiner := c.startJoiner(4)
	res, err := leader.ctrl.AddVoter(context.Background(), 4, string(joiner.addr))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the change to reach the state machine", func() bool {
		_, index, _ = leader.ctrl.configuration()
		return index == res.Index
	})
	// A change guarded by the configuration before is refused.
	err = configChangeError(leader.raft.RemoveServer(raftlog.ServerID(4), 1, time.Second).Error())
	if !errors.Is(err, ErrConfigurationChanged) {
		t.Fatalf("a change at a stale index: err = %v, want ErrConfigurationChanged", err)
	}
}

// TestMembership_TransferOnlyToAFitVoter: a transfer goes only to a voter
// that answers, is ready and has caught up; otherwise it is refused, naming
// the voter and why, and nothing changes: the same node leads, in the same
// term, and takes writes.
func TestMembership_TransferOnlyToAFitVoter(t *testing.T) {
	var asked atomic.Int32
	status := func(id int32) (PeerStatus, error) {
		switch id {
		case 1:
			return PeerStatus{}, errors.New("connection refused")
		case 2:
			return PeerStatus{LastIndex: 1 << 40, NotReady: "a storage write failed 2s ago"}, nil
		}
		return PeerStatus{LastIndex: 0, Ready: true}, nil
	}
	c := newTestCluster(t, 3, withTune(func(_ int32, cfg *Config) {
		cfg.AskPeer = func(_ context.Context, id int32, _ string) (PeerStatus, error) {
			asked.Add(1)
			return status(id)
		}
		cfg.TimeoutNow = func(int32, string) error { t.Error("TimeoutNow was sent to an unfit voter"); return nil }
	}))
	leader := c.WaitForActive(5 * time.Second)
	term := leader.raft.CurrentTerm()
	for _, tt := range []struct {
		target int32
		want   string
	}{
		{1, "node 1 did not answer: connection refused"},
		{2, "node 2 is not ready: a storage write failed 2s ago"},
		{3, "node 3 is behind: its log ends at index 0"},
	} {
		if tt.target == leader.id {
			continue
		}
		_, err := leader.ctrl.TransferLeadership(context.Background(), tt.target)
		if !errors.Is(err, ErrTransferRefused) || !strings.Contains(err.Error(), tt.want) {
			t.Fatalf("TransferLeadership(%d) = %v; want ErrTransferRefused saying %q", tt.target, err, tt.want)
		}
	}
	if _, err := leader.ctrl.TransferLeadership(context.Background(), 0); !errors.Is(err, ErrTransferRefused) {
		t.Fatalf("TransferLeadership(any) with no fit voter = %v; want ErrTransferRefused", err)
	}
	if asked.Load() == 0 {
		t.Fatal("no voter was asked")
	}
	if now := c.WaitForActive(5 * time.Second); now != leader || leader.raft.CurrentTerm() != term {
		t.Fatalf("a refused transfer moved leadership or the term (node %d, term %d → node %d, term %d)", leader.id, term, now.id, leader.raft.CurrentTerm())
	}
	if _, _, err := leader.ctrl.AppendNoOp(context.Background(), "after"); err != nil {
		t.Fatalf("write after the refusals: %v", err)
	}
}

// TestMembership_TransferGivenUpOn: a voter that was fit when asked but
// does not take over (its TimeoutNow is lost) is given up on within two
// election timeouts: the transfer fails, and this node still leads and
// takes writes. (Raft's own transfer refused every write until it
// completed: 80 s behind a follower whose disk had failed.)
func TestMembership_TransferGivenUpOn(t *testing.T) {
	c := newTestCluster(t, 3, withTune(func(_ int32, cfg *Config) {
		cfg.AskPeer = func(context.Context, int32, string) (PeerStatus, error) {
			return PeerStatus{LastIndex: 1 << 40, Ready: true}, nil
		}
		cfg.TimeoutNow = func(int32, string) error { return nil } // lost
	}))
	leader := c.WaitForActive(5 * time.Second)
	target := leader.id%3 + 1
	start := time.Now()
	_, err := leader.ctrl.TransferLeadership(context.Background(), target)
	if !errors.Is(err, ErrTransferFailed) || !strings.Contains(err.Error(), "given up") {
		t.Fatalf("TransferLeadership(%d) to a voter that never takes over = %v; want ErrTransferFailed, given up", target, err)
	}
	// Two election timeouts of 50 ms, and the catching-up window before.
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the transfer was given up on after %v", took)
	}
	if active, _ := leader.ctrl.Active(); !active {
		t.Fatal("the leader is no longer active after a transfer it gave up on")
	}
	if _, _, err := leader.ctrl.AppendNoOp(context.Background(), "after"); err != nil {
		t.Fatalf("write after the given-up transfer: %v", err)
	}
}
