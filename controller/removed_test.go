package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-dev/keel/consensus"
	"github.com/keel-dev/keel/internal/poll"
)

// TestRemovedBy: whose word takes a node that still lists itself as
// removed. Node 1's configuration is 1, 2, 3 (voters) and 4 (a nonvoter).
func TestRemovedBy(t *testing.T) {
	conf := consensus.Configuration{Servers: []consensus.Server{
		{ID: 1, Suffrage: consensus.Voter}, {ID: 2, Suffrage: consensus.Voter},
		{ID: 3, Suffrage: consensus.Voter}, {ID: 4, Suffrage: consensus.Nonvoter},
	}}
	without := []int32{2, 3, 4}
	with := []int32{1, 2, 3, 4}
	answer := func(id int32, leads bool, members []int32) peersAnswer {
		return peersAnswer{id: id, status: PeerStatus{ClusterID: "c", Leads: leads, Members: members}}
	}
	for _, tc := range []struct {
		name    string
		answers []peersAnswer
		want    string // "": not removed
	}{
		{"nobody answers", nil, ""},
		{"the leader holds a configuration without it", []peersAnswer{answer(2, true, without)},
			"node 2, the leader, holds a configuration without node 1"},
		{"the leader lists it", []peersAnswer{answer(2, true, with), answer(3, false, without)}, ""},
		{"the leader lists it, whatever a majority holds", []peersAnswer{answer(2, true, with), answer(3, false, without), answer(4, false, without)}, ""},
		{"two claim to lead and one lists it", []peersAnswer{answer(2, true, without), answer(3, true, with)}, ""},
		{"a majority of the voters without it", []peersAnswer{answer(2, false, without), answer(3, false, without)},
			"nodes 2, 3, a majority of the voters, hold a configuration without node 1"},
		{"one voter without it", []peersAnswer{answer(2, false, without)}, ""},
		{"a voter and a nonvoter without it: the nonvoter does not count", []peersAnswer{answer(2, false, without), answer(4, false, without)}, ""},
		{"a voter lagging behind the removal", []peersAnswer{answer(2, false, without), answer(3, false, with)}, ""},
		{"a node with no configuration says nothing", []peersAnswer{answer(2, true, nil)}, ""},
		{"a node of another cluster says nothing", []peersAnswer{{id: 2, status: PeerStatus{ClusterID: "other", Leads: true, Members: without}}}, ""},
		{"a node that does not know its cluster yet counts", []peersAnswer{{id: 2, status: PeerStatus{Leads: true, Members: without}}},
			"node 2, the leader, holds a configuration without node 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			who, removed := removedBy(1, conf, "c", tc.answers)
			if removed != (tc.want != "") || who != tc.want {
				t.Fatalf("removedBy = %q, %v; want %q", who, removed, tc.want)
			}
		})
	}
}

// askingQuorum is a memQuorum whose controllers ask their peers
// (Config.AskPeer) for what their memlog node knows; a node that is cut
// neither asks nor is asked.
type askingQuorum struct {
	*memQuorum

	mu   sync.Mutex
	cut  map[int32]bool
	asks map[int32]int // the questions each node asked
}

func newAskingQuorum(t *testing.T, n int) *askingQuorum {
	t.Helper()
	q := &askingQuorum{cut: make(map[int32]bool), asks: make(map[int32]int)}
	q.memQuorum = newMemQuorum(t, n, func(c *Config) {
		from := c.NodeID
		c.AskPeer = func(_ context.Context, to int32, _ string) (PeerStatus, error) { return q.ask(from, to) }
	})
	return q
}

// ask answers from to's node, as server's askPeer does from its
// DescribeQuorum.
func (q *askingQuorum) ask(from, to int32) (PeerStatus, error) {
	q.mu.Lock()
	q.asks[from]++
	cut := q.cut[from] || q.cut[to]
	q.mu.Unlock()
	if cut {
		return PeerStatus{}, errors.New("connection refused")
	}
	n := q.log.Node(to)
	conf, _, err := n.Configuration()
	if err != nil {
		return PeerStatus{}, err
	}
	st := PeerStatus{LastIndex: n.LastIndex(), Ready: true, ClusterID: q.ctrls[to].fsm.Image().ClusterID, Leads: n.State() == consensus.Leader}
	for _, s := range conf.Servers {
		st.Members = append(st.Members, s.ID)
	}
	return st, nil
}

func (q *askingQuorum) setCut(id int32) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.cut[id] = true
}

func (q *askingQuorum) asked(id int32) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.asks[id]
}

// removeUnheard has the active controller, 1, asked to remove itself:
// it hands leadership on, and node 1 hears nothing more (Silence) before
// the new leader removes it, as raft's leader stops replicating to a node
// once its removal is the latest configuration. It returns the new leader.
func (q *askingQuorum) removeUnheard() int32 {
	q.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := q.ctrls[1].RemoveVoter(ctx, 1)
	var nl *NotLeaderError
	if !errors.As(err, &nl) || !nl.HandedOff {
		q.t.Fatalf("RemoveVoter(1) on the active controller 1 = %v; want leadership handed off", err)
	}
	q.log.Silence(1)
	leader := q.log.Leader()
	if leader < 0 || leader == 1 {
		q.t.Fatalf("leader after the hand-off is %d", leader)
	}
	q.active(leader, nil)
	if _, err := q.ctrls[leader].RemoveVoter(ctx, 1); err != nil {
		q.t.Fatalf("RemoveVoter(1) on the new leader %d: %v", leader, err)
	}
	if conf, _, _ := q.log.Node(1).Configuration(); !conf.Has(1) {
		q.t.Fatalf("node 1 received its removal (%s): the test needs it not to", memberList(conf))
	}
	return leader
}

// waitRemoved runs id's WaitRemoved until the test ends, and returns
// where its outcome goes.
func (q *askingQuorum) waitRemoved(id int32) <-chan error {
	q.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		out <- q.ctrls[id].WaitRemoved(ctx)
	}()
	q.t.Cleanup(func() { cancel(); <-done })
	return out
}

// stillWaits asserts that id's WaitRemoved has not returned once id has
// asked its peers three more rounds, one a window.
func (q *askingQuorum) stillWaits(id int32, out <-chan error) {
	q.t.Helper()
	want := q.asked(id) + 3*(len(q.ctrls)-1)
	poll.Until(q.t, 20*time.Second, fmt.Sprintf("node %d to ask its peers three times", id), func() bool {
		select {
		case err := <-out:
			q.t.Fatalf("WaitRemoved on node %d returned %v; want it to wait on", id, err)
		default:
		}
		return q.asked(id) >= want
	})
	select {
	case err := <-out:
		q.t.Fatalf("WaitRemoved on node %d returned %v; want it to wait on", id, err)
	default:
	}
}

// TestWaitRemoved_NeverHeardOfItsRemoval: the active controller asked to
// remove itself hands leadership on, and the new leader removes it before
// it has heard so (the bug: its process ran on for good as a voter of its
// own configuration). The leader's word tells it it was removed.
func TestWaitRemoved_NeverHeardOfItsRemoval(t *testing.T) {
	q := newAskingQuorum(t, 3)
	q.elect(1)
	leader := q.removeUnheard()
	select {
	case err := <-q.waitRemoved(1):
		if !errors.Is(err, ErrRemoved) || !strings.Contains(err.Error(), fmt.Sprintf("node %d, the leader", leader)) {
			t.Fatalf("WaitRemoved = %v; want ErrRemoved naming the leader, node %d", err, leader)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("WaitRemoved on node 1, removed without hearing of it, did not return in 20s")
	}
}

// TestWaitRemoved_PartitionedMemberWaits: a member that hears from no
// leader, but whose peers still list it, is not removed.
func TestWaitRemoved_PartitionedMemberWaits(t *testing.T) {
	q := newAskingQuorum(t, 3)
	q.elect(1)
	q.log.Silence(3)
	q.stillWaits(3, q.waitRemoved(3))
}

// TestWaitRemoved_NobodyAnswers: a node that was removed without hearing
// of it, but reaches none of its peers, cannot tell it from a partition,
// and waits.
func TestWaitRemoved_NobodyAnswers(t *testing.T) {
	q := newAskingQuorum(t, 3)
	q.elect(1)
	q.removeUnheard()
	q.setCut(1)
	q.stillWaits(1, q.waitRemoved(1))
}
