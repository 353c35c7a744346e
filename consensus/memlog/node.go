package memlog

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/keel-dev/keel/consensus"
)

// Node is one member's consensus.Log.
type Node struct {
	c  *Cluster
	id int32
	sm consensus.StateMachine

	// Guarded by c.mu.
	view      view
	silenced  bool
	killed    bool
	next      int    // position in c.entries of the next entry to apply
	applied   uint64 // index of the last entry applied
	pending   map[uint64]*future
	queue     []bool // leadership changes not yet delivered
	observers map[int]chan int32
	observerN int

	changes chan bool
	wake    chan struct{} // the applier has entries to apply
	notify  chan struct{} // the notifier has changes to deliver
}

// view is what a node knows of the log: current while it hears the
// leader, frozen at the last it heard otherwise.
type view struct {
	term                   uint64
	leader                 int32
	lastIndex, commitIndex uint64
	committed              int // position: entries[:committed] may be applied
	conf                   consensus.Configuration
	confIndex              uint64
	contact                time.Time
	live                   bool
}

var _ consensus.Log = (*Node)(nil)

// applier applies committed entries to the node's state machine in order,
// outside the cluster's lock, as raft's FSM goroutine does, and resolves
// the futures the node proposed once their entries are applied here.
func (n *Node) applier() {
	c := n.c
	defer c.wg.Done()
	for {
		select {
		case <-n.wake:
		case <-c.done:
			return
		}
		for {
			c.mu.Lock()
			if c.closed || n.killed || n.next >= n.view.committed {
				c.mu.Unlock()
				break
			}
			e := c.entries[n.next]
			c.mu.Unlock()

			var resp any
			var err error
			switch e.kind {
			case kindCommand:
				resp = n.sm.ApplyEntry(e.index, e.term, e.data)
			case kindRestore:
				err = n.sm.Restore(bytes.NewReader(e.data))
			}

			c.mu.Lock()
			n.next++
			n.applied = e.index
			if f, ok := n.pending[e.index]; ok {
				delete(n.pending, e.index)
				f.resolve(resp, err)
			}
			c.mu.Unlock()
		}
	}
}

// notifier delivers leadership changes on n.changes in order, so that
// the cluster never blocks on the channel's reader.
func (n *Node) notifier() {
	c := n.c
	defer c.wg.Done()
	for {
		c.mu.Lock()
		if len(n.queue) == 0 {
			c.mu.Unlock()
			select {
			case <-n.notify:
				continue
			case <-c.done:
				return
			}
		}
		v := n.queue[0]
		n.queue = n.queue[1:]
		c.mu.Unlock()
		select {
		case n.changes <- v:
		case <-c.done:
			return
		}
	}
}

// wakeLocked tells the applier there may be entries to apply.
func (n *Node) wakeLocked() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

func (n *Node) deliverLocked(leader bool) {
	n.queue = append(n.queue, leader)
	select {
	case n.notify <- struct{}{}:
	default:
	}
}

func (n *Node) observeLocked(leader int32) {
	for _, ch := range n.observers {
		select {
		case ch <- leader:
		default: // a slow observer misses it, as raft's non-blocking ones do
		}
	}
}

// failPendingLocked fails the futures of entries after index.
func (n *Node) failPendingLocked(after uint64, err error) {
	for i, f := range n.pending {
		if i > after {
			delete(n.pending, i)
			f.resolve(nil, fmt.Errorf("memlog: node %d: index %d: %w", n.id, i, err))
		}
	}
}

// Apply appends data as a command entry if n leads.
func (n *Node) Apply(data []byte, _ time.Duration) consensus.ApplyFuture {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.admitLocked(n); err != nil {
		return failed(err)
	}
	if c.interpose > 0 {
		c.interpose--
		c.pushLocked(entry{kind: kindNoop}, 0)
	}
	f := c.proposeLocked(n, entry{kind: kindCommand, data: slices.Clone(data)}, 0)
	c.commitLocked()
	c.refreshLocked()
	return f
}

// Barrier appends a barrier entry, which resolves once n has applied
// everything before it.
func (n *Node) Barrier(_ time.Duration) consensus.Future {
	return n.appendOwn(entry{kind: kindBarrier})
}

func (n *Node) appendOwn(e entry) *future {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.admitLocked(n); err != nil {
		return failed(err)
	}
	f := c.proposeLocked(n, e, 0)
	c.commitLocked()
	c.refreshLocked()
	return f
}

// Restore appends the snapshot read from r as an entry at an index past
// both meta.Index and the log's last, which every node installs in its
// state machine when it reaches it, then a no-op, as raft's Restore does;
// it returns once n has applied both.
func (n *Node) Restore(meta consensus.SnapshotMeta, r io.Reader, _ time.Duration) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("memlog: node %d: reading the snapshot: %w", n.id, err)
	}
	c := n.c
	c.mu.Lock()
	if err := c.admitLocked(n); err != nil {
		c.mu.Unlock()
		return err
	}
	restored := c.proposeLocked(n, entry{kind: kindRestore, data: data}, meta.Index+1)
	noop := c.proposeLocked(n, entry{kind: kindNoop}, 0)
	c.commitLocked()
	c.refreshLocked()
	c.mu.Unlock()
	if err := restored.Error(); err != nil {
		return err
	}
	return noop.Error()
}

// State is n's role.
func (n *Node) State() consensus.State {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed || n.killed:
		return consensus.Shutdown
	case c.leader == n.id:
		return consensus.Leader
	}
	return consensus.Follower
}

// Leader is the leader n last heard of, with its address in n's latest
// configuration.
func (n *Node) Leader() (int32, string) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if n.view.leader < 0 {
		return -1, ""
	}
	for _, s := range n.view.conf.Servers {
		if s.ID == n.view.leader {
			return s.ID, s.Address
		}
	}
	return n.view.leader, c.addr(n.view.leader)
}

// LeadershipChanges delivers n's gains (true) and losses (false) of
// leadership in order.
func (n *Node) LeadershipChanges() <-chan bool { return n.changes }

// ObserveLeaders calls fn with each leader n learns of, on a goroutine
// of its own, until stop; observations fn is too slow for are dropped.
func (n *Node) ObserveLeaders(fn func(leader int32)) (stop func()) {
	c := n.c
	ch := make(chan int32, 16)
	quit := make(chan struct{})
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return func() {}
	}
	key := n.observerN
	n.observerN++
	n.observers[key] = ch
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		for {
			select {
			case l := <-ch:
				fn(l)
			case <-quit:
				return
			case <-c.done:
				return
			}
		}
	}()
	var stopped bool
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !stopped {
			stopped = true
			delete(n.observers, key)
			close(quit)
		}
	}
}

// LastContact is now while n leads or hears a leader, and otherwise when it
// last did.
func (n *Node) LastContact() time.Time {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if (c.leader == n.id || n.view.live && n.view.leader >= 0) && !c.closed && !n.killed {
		return time.Now()
	}
	return n.view.contact
}

// TransferLeadership moves leadership from n to to, or when to is nil to
// the other live voter with the longest log (the lowest id among equals),
// by electing it in a new term; a target RefuseTransfers names does not
// take over, and n leads on.
func (n *Node) TransferLeadership(ctx context.Context, to *consensus.Server) (consensus.Server, error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || n.killed {
		return consensus.Server{}, fmt.Errorf("memlog: node %d: %w", n.id, consensus.ErrShutdown)
	}
	if c.leader != n.id {
		return consensus.Server{}, fmt.Errorf("memlog: node %d: %w", n.id, consensus.ErrNotLeader)
	}
	target, ok := c.transferTargetLocked(n.id, to)
	switch {
	case !ok && to != nil:
		return consensus.Server{}, fmt.Errorf("memlog: transfer to %d: not another live voter: %w", to.ID, consensus.ErrTransferFailed)
	case !ok:
		return consensus.Server{}, fmt.Errorf("memlog: no other live voter: %w", consensus.ErrTransferFailed)
	case ctx.Err() != nil:
		return target, fmt.Errorf("memlog: transfer to %d: %w: %w", target.ID, consensus.ErrTransferFailed, ctx.Err())
	case c.refuse[target.ID]:
		return target, fmt.Errorf("memlog: %d did not take over: %w", target.ID, consensus.ErrTransferFailed)
	}
	c.electLocked(c.nodes[target.ID])
	return target, nil
}

func (c *Cluster) transferTargetLocked(from int32, to *consensus.Server) (consensus.Server, bool) {
	var best consensus.Server
	var bestLast uint64
	found := false
	for _, s := range sortedServers(c.latestLocked(c.survivingLocked())) {
		m, ok := c.nodes[s.ID]
		if s.ID == from || s.Suffrage != consensus.Voter || !ok || m.killed || (to != nil && s.ID != to.ID) {
			continue
		}
		if !found || m.view.lastIndex > bestLast {
			best, bestLast, found = s, m.view.lastIndex, true
		}
	}
	return best, found
}

// CurrentTerm is the term n last heard of.
func (n *Node) CurrentTerm() uint64 {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.view.term
}

// LastIndex is the last index n has heard of.
func (n *Node) LastIndex() uint64 {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.view.lastIndex
}

// CommitIndex is the last index n knows committed.
func (n *Node) CommitIndex() uint64 {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.view.commitIndex
}

// Timeouts are the cluster's, which nothing in the log waits on.
func (n *Node) Timeouts() consensus.Timeouts { return n.c.timeouts }

// Configuration is the latest configuration n has heard of, committed or
// not, and the index of its entry.
func (n *Node) Configuration() (consensus.Configuration, uint64, error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || n.killed {
		return consensus.Configuration{}, 0, fmt.Errorf("memlog: node %d: %w", n.id, consensus.ErrShutdown)
	}
	return consensus.Configuration{Servers: slices.Clone(n.view.conf.Servers)}, n.view.confIndex, nil
}

// AddVoter adds id as a voter, or promotes it and updates its address.
func (n *Node) AddVoter(id int32, addr string, prevIndex uint64, _ time.Duration) consensus.IndexFuture {
	return n.changeConfiguration(prevIndex, func(servers []consensus.Server) []consensus.Server {
		if i := serverIndex(servers, id); i >= 0 {
			servers[i].Address, servers[i].Suffrage = addr, consensus.Voter
			return servers
		}
		return append(servers, consensus.Server{ID: id, Address: addr, Suffrage: consensus.Voter})
	})
}

// AddNonvoter adds id as a nonvoter; a member keeps its suffrage and takes
// the new address, as in raft.
func (n *Node) AddNonvoter(id int32, addr string, prevIndex uint64, _ time.Duration) consensus.IndexFuture {
	return n.changeConfiguration(prevIndex, func(servers []consensus.Server) []consensus.Server {
		if i := serverIndex(servers, id); i >= 0 {
			servers[i].Address = addr
			return servers
		}
		return append(servers, consensus.Server{ID: id, Address: addr, Suffrage: consensus.Nonvoter})
	})
}

// RemoveServer removes id; removing a non-member appends an unchanged
// configuration, as in raft.
func (n *Node) RemoveServer(id int32, prevIndex uint64, _ time.Duration) consensus.IndexFuture {
	return n.changeConfiguration(prevIndex, func(servers []consensus.Server) []consensus.Server {
		if i := serverIndex(servers, id); i >= 0 {
			return slices.Delete(servers, i, i+1)
		}
		return servers
	})
}

func serverIndex(servers []consensus.Server, id int32) int {
	return slices.IndexFunc(servers, func(s consensus.Server) bool { return s.ID == id })
}

// changeConfiguration appends the configuration change makes of a copy of
// the latest one, if n leads and prevIndex is 0 or the latest's index.
func (n *Node) changeConfiguration(prevIndex uint64, change func([]consensus.Server) []consensus.Server) consensus.IndexFuture {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.admitLocked(n); err != nil {
		return failed(err)
	}
	latest, latestIndex := c.latestIndexLocked(len(c.entries))
	if prevIndex != 0 && prevIndex != latestIndex {
		return failed(fmt.Errorf("memlog: configuration at %d, not %d: %w", latestIndex, prevIndex, consensus.ErrConfigurationChanged))
	}
	conf := consensus.Configuration{Servers: change(slices.Clone(latest.Servers))}
	f := c.proposeLocked(n, entry{kind: kindConfig, conf: conf}, 0)
	c.commitLocked()
	c.refreshLocked()
	return f
}
