package raftlog

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/consensus"
)

// Node is the controller's consensus.Log over hashicorp/raft: this file
// translates, raft's ids, states, configurations and errors into the
// seam's, and nothing else. The one leadership transfer is in transfer.go.
var _ consensus.Log = (*Node)(nil)

// Apply appends data as one command entry (consensus.Log).
func (n *Node) Apply(data []byte, timeout time.Duration) consensus.ApplyFuture {
	return applyFuture{n.Raft.Apply(data, timeout)}
}

// Barrier resolves once every entry before it has been applied here.
func (n *Node) Barrier(timeout time.Duration) consensus.Future {
	return future{n.Raft.Barrier(timeout)}
}

// Restore replaces the log with the snapshot read from r (raft's user
// restore: every node installs it).
func (n *Node) Restore(meta consensus.SnapshotMeta, r io.Reader, timeout time.Duration) error {
	m := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: meta.Index, Term: meta.Term, Size: meta.Size}
	return consensusError(n.Raft.Restore(m, r, timeout))
}

// State is raft's state of this node.
func (n *Node) State() consensus.State {
	switch n.Raft.State() {
	case raft.Leader:
		return consensus.Leader
	case raft.Candidate:
		return consensus.Candidate
	case raft.Shutdown:
		return consensus.Shutdown
	}
	return consensus.Follower
}

// Leader is the leader raft knows, or -1 and "".
func (n *Node) Leader() (int32, string) {
	addr, sid := n.Raft.LeaderWithID()
	if sid == "" {
		return -1, ""
	}
	id, err := ParseServerID(sid)
	if err != nil {
		return -1, ""
	}
	return id, string(addr)
}

// LeadershipChanges delivers raft's leadership changes (raft's NotifyCh),
// every one, in order.
func (n *Node) LeadershipChanges() <-chan bool { return n.leadership.out }

// ObserveLeaders calls fn with each leader raft observes (-1: none), from
// a non-blocking raft observer: raft drops an observation rather than wait
// for fn.
func (n *Node) ObserveLeaders(fn func(leader int32)) (stop func()) {
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	n.Raft.RegisterObserver(obs)
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-done:
				return
			case o := <-ch:
				lo := o.Data.(raft.LeaderObservation)
				id := int32(-1)
				if lo.LeaderID != "" {
					if parsed, err := ParseServerID(lo.LeaderID); err == nil {
						id = parsed
					}
				}
				fn(id)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			n.Raft.DeregisterObserver(obs)
			close(done)
			<-exited
		})
	}
}

// LastContact is when this node last heard from a leader; now if it leads.
func (n *Node) LastContact() time.Time {
	if n.Raft.State() == raft.Leader {
		return time.Now()
	}
	return n.Raft.LastContact()
}

// CurrentTerm is raft's current term.
func (n *Node) CurrentTerm() uint64 { return n.Raft.CurrentTerm() }

// LastIndex is the index of the last entry in raft's log.
func (n *Node) LastIndex() uint64 { return n.Raft.LastIndex() }

// CommitIndex is the last index raft knows committed.
func (n *Node) CommitIndex() uint64 { return n.Raft.CommitIndex() }

// Timeouts are raft's heartbeat and election timeouts.
func (n *Node) Timeouts() consensus.Timeouts {
	rc := n.Raft.ReloadableConfig()
	return consensus.Timeouts{Heartbeat: rc.HeartbeatTimeout, Election: rc.ElectionTimeout}
}

// Configuration returns raft's latest configuration (committed or not) and
// the index to pass as prevIndex. raft v1.7's GetConfiguration reports
// index 0 (it copies the configuration without its index), so the index is
// the one of the last configuration the state machine saw commit
// (fsmAdapter), used only while that still is the latest; otherwise 0,
// which raft takes as "no check", leaving raft's one-change-at-a-time rule
// and the caller to serialise changes.
func (n *Node) Configuration() (consensus.Configuration, uint64, error) {
	f := n.Raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return consensus.Configuration{}, 0, consensusError(err)
	}
	conf := f.Configuration()
	index := f.Index()
	if index == 0 {
		if i, committed := n.fsm.committed(); i > 0 && slices.Equal(committed.Servers, conf.Servers) {
			index = i
		}
	}
	out, err := fromRaftConfiguration(conf)
	return out, index, err
}

// fromRaftConfiguration turns raft's server ids into node ids.
func fromRaftConfiguration(conf raft.Configuration) (consensus.Configuration, error) {
	out := consensus.Configuration{Servers: make([]consensus.Server, 0, len(conf.Servers))}
	for _, s := range conf.Servers {
		id, err := ParseServerID(s.ID)
		if err != nil {
			return consensus.Configuration{}, fmt.Errorf("raft configuration: %v", err)
		}
		suffrage := consensus.Voter
		if s.Suffrage != raft.Voter {
			suffrage = consensus.Nonvoter
		}
		out.Servers = append(out.Servers, consensus.Server{ID: id, Address: string(s.Address), Suffrage: suffrage})
	}
	return out, nil
}

// AddVoter adds id at addr as a voter (raft's AddVoter).
func (n *Node) AddVoter(id int32, addr string, prevIndex uint64, timeout time.Duration) consensus.IndexFuture {
	return indexFuture{n.Raft.AddVoter(ServerID(id), raft.ServerAddress(addr), prevIndex, timeout)}
}

// AddNonvoter adds id at addr as a nonvoter (raft's AddNonvoter).
func (n *Node) AddNonvoter(id int32, addr string, prevIndex uint64, timeout time.Duration) consensus.IndexFuture {
	return indexFuture{n.Raft.AddNonvoter(ServerID(id), raft.ServerAddress(addr), prevIndex, timeout)}
}

// RemoveServer removes id (raft's RemoveServer).
func (n *Node) RemoveServer(id int32, prevIndex uint64, timeout time.Duration) consensus.IndexFuture {
	return indexFuture{n.Raft.RemoveServer(ServerID(id), prevIndex, timeout)}
}

// consensusError wraps raft's error in the consensus error it means,
// keeping raft's text.
func consensusError(err error) error {
	var to error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader):
		to = consensus.ErrNotLeader
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		to = consensus.ErrLeadershipLost
	case errors.Is(err, raft.ErrEnqueueTimeout):
		to = consensus.ErrEnqueueTimeout
	case errors.Is(err, raft.ErrRaftShutdown):
		to = consensus.ErrShutdown
	case strings.Contains(err.Error(), "configuration changed since"):
		// raft's own words (nextConfiguration) for a stale prevIndex.
		to = consensus.ErrConfigurationChanged
	default:
		return err
	}
	return fmt.Errorf("%w: %v", to, err)
}

// future, indexFuture and applyFuture are raft's futures with their errors
// translated.
type future struct{ f raft.Future }

func (f future) Error() error { return consensusError(f.f.Error()) }

type indexFuture struct{ f raft.IndexFuture }

func (f indexFuture) Error() error  { return consensusError(f.f.Error()) }
func (f indexFuture) Index() uint64 { return f.f.Index() }

type applyFuture struct{ f raft.ApplyFuture }

func (f applyFuture) Error() error  { return consensusError(f.f.Error()) }
func (f applyFuture) Index() uint64 { return f.f.Index() }
func (f applyFuture) Response() any { return f.f.Response() }

// leadershipQueue is the channel raft reports leadership changes on
// (raft.Config.NotifyCh), drained at once into a queue that
// LeadershipChanges delivers in order. Raft blocks on NotifyCh until it is
// read, and a node whose owner does not read its changes (raftlog's own
// tests, a node that is only being checked) must not stall raft.
type leadershipQueue struct {
	in   chan bool
	out  chan bool
	done chan struct{}
	// exited is closed when run returns.
	exited chan struct{}
	once   sync.Once
}

func newLeadershipQueue() *leadershipQueue {
	q := &leadershipQueue{in: make(chan bool), out: make(chan bool), done: make(chan struct{}), exited: make(chan struct{})}
	go q.run()
	return q
}

func (q *leadershipQueue) run() {
	defer close(q.exited)
	var pending []bool
	for {
		var out chan bool
		var next bool
		if len(pending) > 0 {
			out, next = q.out, pending[0]
		}
		select {
		case v := <-q.in:
			pending = append(pending, v)
		case out <- next:
			pending = pending[1:]
		case <-q.done:
			return
		}
	}
}

// stop ends the queue, once raft no longer sends to it (raft's final
// send, on shutdown, does not wait).
func (q *leadershipQueue) stop() {
	q.once.Do(func() {
		close(q.done)
		<-q.exited
	})
}
