package memlog

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/keel-dev/keel/consensus"
)

// TestMembership_Changes: each change applies to the latest configuration
// when prevIndex is 0 or its index, is refused when prevIndex is stale,
// and takes effect when appended; Configuration returns it with the index
// the change's future reports.
func TestMembership_Changes(t *testing.T) {
	voter := func(id int32) consensus.Server {
		return consensus.Server{ID: id, Address: "mem-" + string(rune('0'+id)), Suffrage: consensus.Voter}
	}
	nonvoter := func(id int32) consensus.Server {
		s := voter(id)
		s.Suffrage = consensus.Nonvoter
		return s
	}
	for _, tt := range []struct {
		name    string
		change  func(n *Node, prev uint64) consensus.IndexFuture
		stale   bool // pass a prevIndex one below the latest's
		wantErr error
		want    []consensus.Server
	}{
		{"add a voter", func(n *Node, prev uint64) consensus.IndexFuture { return n.AddVoter(4, "mem-4", prev, time.Second) },
			false, nil, []consensus.Server{voter(1), voter(2), voter(3), voter(4)}},
		{"add a nonvoter", func(n *Node, prev uint64) consensus.IndexFuture { return n.AddNonvoter(4, "mem-4", prev, time.Second) },
			false, nil, []consensus.Server{voter(1), voter(2), voter(3), nonvoter(4)}},
		{"a voter added as a nonvoter stays a voter", func(n *Node, prev uint64) consensus.IndexFuture {
			return n.AddNonvoter(3, "mem-3", prev, time.Second)
		}, false, nil, []consensus.Server{voter(1), voter(2), voter(3)}},
		{"remove a voter", func(n *Node, prev uint64) consensus.IndexFuture { return n.RemoveServer(3, prev, time.Second) },
			false, nil, []consensus.Server{voter(1), voter(2)}},
		{"remove a non-member", func(n *Node, prev uint64) consensus.IndexFuture { return n.RemoveServer(9, prev, time.Second) },
			false, nil, []consensus.Server{voter(1), voter(2), voter(3)}},
		{"stale prevIndex", func(n *Node, prev uint64) consensus.IndexFuture { return n.AddVoter(4, "mem-4", prev, time.Second) },
			true, consensus.ErrConfigurationChanged, []consensus.Server{voter(1), voter(2), voter(3)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestCluster(t, []int32{1, 2, 3})
			tc.elected(t, 1)
			leader := tc.Node(1)
			_, prev, err := leader.Configuration()
			if err != nil {
				t.Fatal(err)
			}
			if prev != 1 {
				t.Fatalf("bootstrap configuration at %d, want 1", prev)
			}
			mustApply(t, leader, "x")
			if tt.stale {
				// A change made since: the caller's prevIndex is now stale.
				if err := leader.AddNonvoter(5, "mem-5", 0, time.Second).Error(); err != nil {
					t.Fatal(err)
				}
				if err := leader.RemoveServer(5, 0, time.Second).Error(); err != nil {
					t.Fatal(err)
				}
			}
			last := leader.LastIndex()
			f := tt.change(leader, prev)
			if err := f.Error(); !errors.Is(err, tt.wantErr) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			conf, index, err := leader.Configuration()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(conf.Servers, tt.want) {
				t.Fatalf("configuration %+v, want %+v", conf.Servers, tt.want)
			}
			if tt.wantErr != nil {
				if leader.LastIndex() != last {
					t.Fatal("a refused change appended an entry")
				}
				return
			}
			if f.Index() != last+1 || index != f.Index() {
				t.Fatalf("change at %d, configuration at %d; want both %d", f.Index(), index, last+1)
			}
		})
	}
}

// TestMembership_RemovedNodeStopsApplying: a removed node applies nothing
// after its removal and keeps its stale view; added back, it catches up on
// everything it missed, as a raft follower does.
func TestMembership_RemovedNodeStopsApplying(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2, 3})
	tc.elected(t, 1)
	leader := tc.Node(1)
	mustApply(t, leader, "a")
	if err := leader.RemoveServer(3, 0, time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	mustApply(t, leader, "b")
	tc.appliedData(t, 2, "a", "b")
	tc.appliedData(t, 3, "a")
	if err := tc.Elect(3); err == nil {
		t.Fatal("elected a removed node")
	}
	conf, _, err := tc.Node(3).Configuration()
	if err != nil {
		t.Fatal(err)
	}
	if !conf.Has(3) {
		t.Fatal("the removed node learned of its removal; raft's may not")
	}
	if err := leader.AddVoter(3, "mem-3", 0, time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	tc.appliedData(t, 3, "a", "b")
}

// TestMembership_NewNodeCatchesUp: a node started outside the
// configuration applies nothing until added, then everything.
func TestMembership_NewNodeCatchesUp(t *testing.T) {
	tc := newTestCluster(t, []int32{1})
	tc.elected(t, 1)
	leader := tc.Node(1)
	mustApply(t, leader, "a")
	fresh := tc.AddNode(2)
	if id, _ := fresh.Leader(); id != -1 {
		t.Fatalf("a node outside the configuration knows leader %d", id)
	}
	if got := tc.sm(2).data(); got != nil {
		t.Fatalf("applied %q before being added", got)
	}
	if err := leader.AddNonvoter(2, "mem-2", 0, time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	tc.appliedData(t, 2, "a")
	if id, _ := fresh.Leader(); id != 1 {
		t.Fatalf("added node knows leader %d, want 1", id)
	}
}

// TestMembership_LeaderRemovesItself: the change resolves, then the leader
// steps down, as raft's does once its removal commits.
func TestMembership_LeaderRemovesItself(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2, 3})
	tc.elected(t, 1)
	leader := tc.Node(1)
	if err := leader.RemoveServer(1, 0, time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	expectChanges(t, leader, false)
	if got := tc.Leader(); got != -1 {
		t.Fatalf("leader %d after the leader's removal, want none", got)
	}
	if err := leader.Apply([]byte("x"), time.Second).Error(); !errors.Is(err, consensus.ErrNotLeader) {
		t.Fatalf("apply after removal: %v", err)
	}
}

func TestTransferLeadership(t *testing.T) {
	to := func(id int32) *consensus.Server { return &consensus.Server{ID: id} }
	for _, tt := range []struct {
		name       string
		setup      func(t *testing.T, tc *testCluster)
		from       int32
		to         *consensus.Server
		ctx        func() context.Context
		wantErr    error
		wantLeader int32
	}{
		{name: "to a voter", from: 1, to: to(3), wantLeader: 3},
		{name: "to the longest log", from: 1, wantLeader: 3, setup: func(t *testing.T, tc *testCluster) {
			tc.Silence(2)
			mustApply(t, tc.Node(1), "2 misses this")
		}},
		{name: "the lowest id among equals", from: 1, wantLeader: 2},
		{name: "refused", from: 1, to: to(2), setup: func(t *testing.T, tc *testCluster) { tc.RefuseTransfers(2, true) },
			wantErr: consensus.ErrTransferFailed, wantLeader: 1},
		{name: "refused, then accepted", from: 1, to: to(2), wantLeader: 2, setup: func(t *testing.T, tc *testCluster) {
			tc.RefuseTransfers(2, true)
			tc.RefuseTransfers(2, false)
		}},
		{name: "to a nonvoter", from: 1, to: to(4), wantErr: consensus.ErrTransferFailed, wantLeader: 1},
		{name: "to itself", from: 1, to: to(1), wantErr: consensus.ErrTransferFailed, wantLeader: 1},
		{name: "no other live voter", from: 1, wantErr: consensus.ErrTransferFailed, wantLeader: 1,
			setup: func(t *testing.T, tc *testCluster) { tc.Shutdown(2); tc.Shutdown(3) }},
		{name: "context done", from: 1, to: to(2), wantErr: context.Canceled, wantLeader: 1, ctx: func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}},
		{name: "from a follower", from: 2, to: to(3), wantErr: consensus.ErrNotLeader, wantLeader: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestCluster(t, []int32{1, 2, 3})
			tc.elected(t, 1)
			if err := tc.Node(1).AddNonvoter(4, "mem-4", 0, time.Second).Error(); err != nil {
				t.Fatal(err)
			}
			if tt.setup != nil {
				tt.setup(t, tc)
			}
			ctx := context.Background()
			if tt.ctx != nil {
				ctx = tt.ctx()
			}
			got, err := tc.Node(tt.from).TransferLeadership(ctx, tt.to)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			if tc.Leader() != tt.wantLeader {
				t.Fatalf("leader %d, want %d", tc.Leader(), tt.wantLeader)
			}
			if err != nil {
				expectNoChange(t, tc.Node(1))
				return
			}
			if got.ID != tt.wantLeader || got.Address != "mem-"+string(rune('0'+tt.wantLeader)) {
				t.Fatalf("chose %+v, want %d", got, tt.wantLeader)
			}
			expectChanges(t, tc.Node(1), false)
			expectChanges(t, tc.Node(tt.wantLeader), true)
		})
	}
}
