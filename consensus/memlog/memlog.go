// Package memlog is a replicated log in memory, a consensus.Log for the
// controller's tests, as KRaft's controller tests run on LocalLogManager:
// one shared log, leadership claimed per term, every node replaying the
// committed entries into its own state machine on its own goroutine.
//
// It exists because a real raft quorum decides leadership by timers, and
// under load the controller's tests then flaked, while the faults that
// matter most (leadership lost with writes in flight, an append that
// fails, an index the leader did not predict) happened only by chance. Here
// nothing happens by a timer: a test elects and deposes, holds commits and
// fails appends, each by a call, and the controller sees exactly the
// outcomes hashicorp/raft gives.
//
// Of raft it models: terms, each opening with a no-op; the bootstrap
// configuration at index 1; configuration entries that take effect when
// appended and their prevIndex check; a leader that steps down once its own
// removal commits; futures that fail with ErrLeadershipLost when their
// entry is uncommitted at a leadership loss, and resolve only once the
// proposer's state machine has applied them; Barrier as an entry of its
// own; Restore as an entry past both the snapshot's index and the log's
// last, followed by a no-op; a node that no longer hears the leader, or was
// removed, freezing its view (term, leader, indexes, contact) and applying
// nothing more.
//
// It does not model: elections, votes and quorums (commit needs only a
// leader and no hold), per-node logs (there is one log; a lagging node is a
// node that has applied less of it), snapshots the log takes itself, or
// waiting for the previous configuration to commit before a change.
package memlog

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/keel-dev/keel/consensus"
)

// Fate is what becomes of a deposed leader's uncommitted entries. Raft
// does both: a new leader that holds them commits them with its term's
// no-op, one that does not overwrites them.
type Fate int

const (
	// Commit keeps them in the log; the next leader commits them.
	Commit Fate = iota
	// Truncate removes them; the next leader reuses their indexes.
	Truncate
)

// Option configures a Cluster.
type Option func(*Cluster)

// WithTimeouts sets the timeouts every node reports. The log itself waits
// on none of them.
func WithTimeouts(t consensus.Timeouts) Option {
	return func(c *Cluster) { c.timeouts = t }
}

// WithAddress sets the address of each initial voter, and of each node
// AddNode creates until a configuration gives it another; "mem-<id>"
// otherwise.
func WithAddress(addr func(id int32) string) Option {
	return func(c *Cluster) { c.addr = addr }
}

// DefaultTimeouts are small: the controller scales its waits by them.
var DefaultTimeouts = consensus.Timeouts{Heartbeat: 20 * time.Millisecond, Election: 50 * time.Millisecond}

type kind uint8

const (
	kindCommand kind = iota
	kindNoop
	kindBarrier
	kindConfig
	kindRestore
)

// entry is one entry of the shared log. Entries are never changed once
// appended; uncommitted ones may be cut away.
type entry struct {
	index, term uint64
	kind        kind
	data        []byte                  // kindCommand, kindRestore
	conf        consensus.Configuration // kindConfig
}

// Cluster is the shared log and the nodes that follow it. Its methods are
// the test's hands: they make leaders, hold commits and inject faults.
// Every method is safe to call from any goroutine, though never from a
// state machine's ApplyEntry or Restore.
type Cluster struct {
	timeouts consensus.Timeouts
	addr     func(int32) string
	newSM    func(int32) consensus.StateMachine

	mu        sync.Mutex
	entries   []entry // the log; entries[:committed] are committed
	committed int
	term      uint64
	leader    int32 // -1: none
	nodes     map[int32]*Node
	held      bool
	fate      Fate
	failN     int
	failErr   error
	interpose int
	refuse    map[int32]bool
	closed    bool

	done chan struct{}
	wg   sync.WaitGroup
}

// NewCluster starts a cluster of the given voters, bootstrapped as raft is:
// their configuration is the committed entry at index 1, term 1. sm makes
// each node's state machine, for these and for nodes AddNode adds. No node
// leads until Elect.
func NewCluster(voters []int32, sm func(id int32) consensus.StateMachine, opts ...Option) *Cluster {
	c := &Cluster{
		timeouts: DefaultTimeouts,
		addr:     func(id int32) string { return fmt.Sprintf("mem-%d", id) },
		newSM:    sm,
		leader:   -1,
		nodes:    make(map[int32]*Node),
		refuse:   make(map[int32]bool),
		done:     make(chan struct{}),
	}
	for _, o := range opts {
		o(c)
	}
	var conf consensus.Configuration
	for _, id := range voters {
		conf.Servers = append(conf.Servers, consensus.Server{ID: id, Address: c.addr(id), Suffrage: consensus.Voter})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries = []entry{{index: 1, term: 1, kind: kindConfig, conf: conf}}
	c.committed = 1
	c.term = 1
	for _, id := range voters {
		c.addNodeLocked(id)
	}
	c.refreshLocked()
	return c
}

// AddNode starts a node outside the configuration, as a raft server started
// without bootstrap: it applies nothing and knows no leader until a leader
// adds it. It panics if id already has a node.
func (c *Cluster) AddNode(id int32) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.addNodeLocked(id)
	c.refreshLocked()
	return n
}

func (c *Cluster) addNodeLocked(id int32) *Node {
	if _, ok := c.nodes[id]; ok {
		panic(fmt.Sprintf("memlog: node %d already exists", id))
	}
	n := &Node{
		c:         c,
		id:        id,
		sm:        c.newSM(id),
		view:      view{leader: -1},
		pending:   make(map[uint64]*future),
		changes:   make(chan bool),
		observers: make(map[int]chan int32),
		wake:      make(chan struct{}, 1),
		notify:    make(chan struct{}, 1),
	}
	c.nodes[id] = n
	c.wg.Add(2)
	go n.applier()
	go n.notifier()
	return n
}

// Node returns id's node. It panics if there is none: a test's mistake.
func (c *Cluster) Node(id int32) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[id]
	if !ok {
		panic(fmt.Sprintf("memlog: no node %d", id))
	}
	return n
}

// Close shuts every node down: futures still pending fail with
// ErrShutdown, and every goroutine of the cluster's (appliers, leadership
// notifiers, observers) has returned when Close does. It is idempotent.
func (c *Cluster) Close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		for _, n := range c.nodes {
			n.failPendingLocked(0, consensus.ErrShutdown)
		}
		close(c.done)
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// Elect makes id the leader in a new term, as an election does: the
// current leader, if any (id itself included, a lost-then-regained flap),
// is deposed first; then the term's no-op is appended and id is sent true
// on its LeadershipChanges. It fails if id is not a live voter.
func (c *Cluster) Elect(id int32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("memlog: elect %d: %w", id, consensus.ErrShutdown)
	}
	n, ok := c.nodes[id]
	switch {
	case !ok:
		return fmt.Errorf("memlog: elect %d: no such node", id)
	case n.killed:
		return fmt.Errorf("memlog: elect %d: %w", id, consensus.ErrShutdown)
	case !isVoter(c.latestLocked(c.survivingLocked()), id):
		return fmt.Errorf("memlog: elect %d: not a voter in the latest configuration", id)
	}
	c.electLocked(n)
	return nil
}

func (c *Cluster) electLocked(n *Node) {
	c.deposeLocked()
	c.term++
	c.leader = n.id
	c.pushLocked(entry{kind: kindNoop}, 0)
	n.deliverLocked(true)
	c.commitLocked()
	c.refreshLocked()
}

// Depose leaves the cluster with no leader: the leader is sent false, its
// uncommitted entries' futures fail with ErrLeadershipLost, and the entries
// meet the Fate SetFate chose.
func (c *Cluster) Depose() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deposeLocked()
	c.refreshLocked()
}

func (c *Cluster) deposeLocked() {
	if c.leader < 0 {
		return
	}
	n := c.nodes[c.leader]
	c.leader = -1
	n.failPendingLocked(c.commitIndexLocked(), consensus.ErrLeadershipLost)
	if c.fate == Truncate {
		c.entries = c.entries[:c.committed]
	}
	n.deliverLocked(false)
}

// Leader is the id of the leader, -1 if none.
func (c *Cluster) Leader() int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

// SetFate chooses what a leadership loss does to uncommitted entries;
// Commit by default.
func (c *Cluster) SetFate(f Fate) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fate = f
}

// HoldCommits stops the log committing: entries are appended, and their
// futures wait, until ReleaseCommits. Writes are then in flight.
func (c *Cluster) HoldCommits() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held = true
}

// ReleaseCommits commits everything appended, if there is a leader, and
// lets later entries commit as they are appended.
func (c *Cluster) ReleaseCommits() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held = false
	c.commitLocked()
	c.refreshLocked()
}

// FailAppends makes the next n appends (Apply, Barrier, Restore, a
// membership change) fail with err, appending nothing, as raft's
// ErrEnqueueTimeout does.
func (c *Cluster) FailAppends(n int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failN, c.failErr = n, err
}

// InterposeNoop makes the log append a no-op of its own just before the
// next Apply's entry, so that the entry's index is LastIndex()+2 at the
// call: raft appends a term's no-op or a configuration change whenever it
// must, and a caller that predicts indexes has to notice.
func (c *Cluster) InterposeNoop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.interpose++
}

// AppendNoop appends a no-op of the log's own now, if there is a leader.
func (c *Cluster) AppendNoop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leader < 0 || c.closed {
		return
	}
	c.pushLocked(entry{kind: kindNoop}, 0)
	c.commitLocked()
	c.refreshLocked()
}

// RefuseTransfers makes id refuse (or, with false, accept again) to take
// over in TransferLeadership: the transfer fails and the leader leads on.
func (c *Cluster) RefuseTransfers(id int32, refuse bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refuse[id] = refuse
}

// Silence makes id stop hearing from the leader, as behind a partition:
// its view (leader, term, indexes) freezes, its LastContact ages, and it
// applies nothing more, while leadership does not change. A leader is
// silenced only once it stops leading.
func (c *Cluster) Silence(id int32) {
	c.setSilenced(id, true)
}

// Hear undoes Silence: id catches up at once.
func (c *Cluster) Hear(id int32) {
	c.setSilenced(id, false)
}

func (c *Cluster) setSilenced(id int32, s bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.nodes[id]; ok {
		n.silenced = s
		c.refreshLocked()
	}
}

// Shutdown stops node id, as raft's Shutdown, until Restart: its pending
// futures fail with ErrShutdown, it applies nothing more and answers every
// call with ErrShutdown; a leader is deposed first.
func (c *Cluster) Shutdown(id int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[id]
	if !ok || n.killed {
		return
	}
	if c.leader == id {
		c.deposeLocked()
	}
	n.killed = true
	n.failPendingLocked(0, consensus.ErrShutdown)
	c.refreshLocked()
}

// Applied is the index of the last entry id's node has applied (state
// machine entries or the log's own), for tests to poll.
func (c *Cluster) Applied(id int32) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id].applied
}

// survivingLocked is how many entries survive deposing the leader: with
// Truncate, only the committed ones. Whom an election or a transfer may
// choose is decided on the configuration they leave.
func (c *Cluster) survivingLocked() int {
	if c.leader >= 0 && c.fate == Truncate {
		return c.committed
	}
	return len(c.entries)
}

// lastIndexLocked is the index of the last entry.
func (c *Cluster) lastIndexLocked() uint64 {
	return c.entries[len(c.entries)-1].index
}

func (c *Cluster) commitIndexLocked() uint64 {
	return c.entries[c.committed-1].index
}

// latestLocked is the configuration in effect after entries[:pos], and the
// index of the entry that made it.
func (c *Cluster) latestLocked(pos int) consensus.Configuration {
	conf, _ := c.latestIndexLocked(pos)
	return conf
}

func (c *Cluster) latestIndexLocked(pos int) (consensus.Configuration, uint64) {
	for i := pos - 1; i >= 0; i-- {
		if e := c.entries[i]; e.kind == kindConfig {
			return e.conf, e.index
		}
	}
	return consensus.Configuration{}, 0 // unreachable: index 1 is a configuration
}

func isVoter(conf consensus.Configuration, id int32) bool {
	for _, s := range conf.Servers {
		if s.ID == id {
			return s.Suffrage == consensus.Voter
		}
	}
	return false
}

// admitLocked is the check every append makes first: is the log up, does
// n lead, must this append fail.
func (c *Cluster) admitLocked(n *Node) error {
	switch {
	case c.closed || n.killed:
		return fmt.Errorf("memlog: node %d: %w", n.id, consensus.ErrShutdown)
	case c.leader != n.id:
		return fmt.Errorf("memlog: node %d: %w", n.id, consensus.ErrNotLeader)
	case c.failN > 0:
		c.failN--
		return fmt.Errorf("memlog: node %d: %w", n.id, c.failErr)
	}
	return nil
}

// pushLocked appends e in the current term at the next index, or at
// minIndex if that is later (Restore's jump), and returns its index.
func (c *Cluster) pushLocked(e entry, minIndex uint64) uint64 {
	e.index = max(c.lastIndexLocked()+1, minIndex)
	e.term = c.term
	c.entries = append(c.entries, e)
	return e.index
}

// proposeLocked appends e for n, which leads and has been admitted, with a
// future its applier resolves.
func (c *Cluster) proposeLocked(n *Node, e entry, minIndex uint64) *future {
	f := newFuture(c.pushLocked(e, minIndex))
	n.pending[f.index] = f
	return f
}

// commitLocked commits everything appended, unless there is no leader or
// commits are held; a leader whose removal has committed steps down, as
// raft's does.
func (c *Cluster) commitLocked() {
	if c.leader < 0 || c.held || c.committed == len(c.entries) {
		return
	}
	c.committed = len(c.entries)
	if !c.latestLocked(c.committed).Has(c.leader) {
		c.deposeLocked()
	}
}

// refreshLocked brings every node that hears the leader up to date, after
// any change, and wakes the appliers with committed entries to apply.
func (c *Cluster) refreshLocked() {
	now := time.Now()
	latest, latestIndex := c.latestIndexLocked(len(c.entries))
	for _, n := range c.nodes {
		if c.closed || n.killed || (n.silenced && c.leader != n.id) {
			n.view.live = false // its view stays as it last heard
			continue
		}
		if !latest.Has(n.id) {
			n.view.live = false
			c.removedLocked(n)
			continue
		}
		if n.view.leader != c.leader {
			n.observeLocked(c.leader)
		}
		contact := n.view.contact
		if c.leader >= 0 {
			contact = now
		}
		n.view = view{
			term:        c.term,
			leader:      c.leader,
			lastIndex:   c.lastIndexLocked(),
			commitIndex: c.commitIndexLocked(),
			committed:   c.committed,
			conf:        latest,
			confIndex:   latestIndex,
			contact:     contact,
			live:        true,
		}
		if n.next < n.view.committed {
			n.wakeLocked()
		}
	}
}

// removedLocked lets a node outside the latest configuration apply, as
// the last it hears, the committed entries up to the one that removed it
// (or, for a node never added, the bootstrap configuration): the removed
// leader thus applies its own removal, and its future resolves.
func (c *Cluster) removedLocked(n *Node) {
	for p := n.next; p < c.committed; p++ {
		if e := c.entries[p]; e.kind == kindConfig && !e.conf.Has(n.id) {
			if p+1 > n.view.committed {
				n.view.committed, n.view.commitIndex = p+1, e.index
				n.wakeLocked()
			}
			return
		}
	}
}

// sortedServers returns conf's servers in id order, for a deterministic
// choice among them.
func sortedServers(conf consensus.Configuration) []consensus.Server {
	s := slices.Clone(conf.Servers)
	slices.SortFunc(s, func(a, b consensus.Server) int { return cmp.Compare(a.ID, b.ID) })
	return s
}
