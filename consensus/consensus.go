// Package consensus is the seam between the controller and the replicated
// log it runs on: what the controller asks of consensus, and nothing of how
// it is reached. It is KRaft's RaftClient in Keel's words.
//
// raftlog implements Log over hashicorp/raft for production; memlog
// implements it in memory for the controller's tests, with knobs for the
// faults raft produces only under real timing (leadership lost with writes
// in flight, an append that fails, an index the leader did not predict).
// The controller links this package and never raft, so that everything it
// decides can be tested deterministically.
//
// The package holds only types and errors: no goroutines, no I/O.
package consensus

import (
	"context"
	"errors"
	"io"
	"time"
)

// Log is one node's view of the replicated log: the writes its leader
// makes, the leadership it follows, and the membership of its quorum.
// Every method is safe to call from any goroutine.
//
// Committed entries reach the node's state machine, which the Log's owner
// gave it when it was built, in log order; Apply's future resolves once its
// entry has been applied there, with the state machine's response.
type Log interface {
	// Apply appends data as one entry, if this node leads, and returns a
	// future that resolves when the entry has committed and been applied
	// on this node, or failed. An error wrapping ErrNotLeader means nothing
	// was appended; ErrLeadershipLost, ErrShutdown or ErrEnqueueTimeout that
	// the entry's fate is unknown: it may still commit under another leader.
	// The index an entry gets is usually LastIndex()+1 at the call, but not
	// always: a log may append entries of its own (a no-op for a new term,
	// a configuration change), and a caller that predicts indexes must
	// check the future's.
	Apply(data []byte, timeout time.Duration) ApplyFuture
	// Barrier resolves once every entry appended before it has been applied
	// on this node: a new leader's way to learn that its state machine
	// holds everything earlier terms committed. It fails as Apply does.
	Barrier(timeout time.Duration) Future
	// Restore replaces the whole log with a snapshot of the state machine
	// read from r, taken at index and term of its own log, and has every
	// node install it. Leader only; it fails as Apply does.
	Restore(meta SnapshotMeta, r io.Reader, timeout time.Duration) error

	// State is this node's role now.
	State() State
	// Leader returns the leader's id and address as this node knows them,
	// or -1 and "" when it knows none.
	Leader() (id int32, addr string)
	// LeadershipChanges delivers true when this node becomes the leader and
	// false when it stops being one, every change in order. It has exactly
	// one reader, which must drain it promptly and never call the Log from
	// that goroutine while a send could be waiting.
	LeadershipChanges() <-chan bool
	// ObserveLeaders calls fn, on a goroutine of the Log's, with each
	// leader this node learns of (-1: none), until stop is called. An
	// observation may be dropped if fn is slow.
	ObserveLeaders(fn func(leader int32)) (stop func())
	// LastContact is when this node last heard from a leader; the zero time
	// if never. A leader's is the time of the call.
	LastContact() time.Time
	// TransferLeadership hands leadership from this node, the leader, to
	// to, or when to is nil to the other voter whose log this node knows to
	// be the longest: it tells that voter to start an election at once and
	// waits up to two election timeouts for this node to lose leadership.
	// Writes go on meanwhile. It returns the voter it chose. Unless the
	// transfer completed it fails, wrapping ErrTransferFailed, and this
	// node still leads: a target that does not take over is given up on.
	TransferLeadership(ctx context.Context, to *Server) (Server, error)

	// CurrentTerm is this node's term.
	CurrentTerm() uint64
	// LastIndex is the index of the last entry in this node's log,
	// committed or not.
	LastIndex() uint64
	// CommitIndex is the index of the last entry this node knows committed.
	CommitIndex() uint64
	// Timeouts are the log's heartbeat and election timeouts, the scale of
	// everything the controller waits for.
	Timeouts() Timeouts

	// Configuration returns the latest configuration (committed or not) and
	// the index of the entry that made it, 0 if unknown (then a change
	// passing it as prevIndex is not checked against a concurrent one).
	Configuration() (Configuration, uint64, error)
	// AddVoter adds id at addr as a voter (promoting it if it is a
	// nonvoter), AddNonvoter as a nonvoter, and RemoveServer removes id,
	// if the latest configuration is still the one made at prevIndex (0:
	// any). Leader only. A stale prevIndex fails wrapping
	// ErrConfigurationChanged; otherwise they fail as Apply does.
	AddVoter(id int32, addr string, prevIndex uint64, timeout time.Duration) IndexFuture
	AddNonvoter(id int32, addr string, prevIndex uint64, timeout time.Duration) IndexFuture
	RemoveServer(id int32, prevIndex uint64, timeout time.Duration) IndexFuture
}

// Future is an operation that completes later. Error blocks until it has.
type Future interface {
	Error() error
}

// IndexFuture is an operation that appended an entry.
type IndexFuture interface {
	Future
	// Index is the entry's index, once Error has returned nil.
	Index() uint64
}

// ApplyFuture is an Apply: once Error has returned nil, Index is the
// entry's index and Response what the state machine returned for it.
type ApplyFuture interface {
	IndexFuture
	Response() any
}

// SnapshotMeta says where in its own log a restored snapshot was taken.
type SnapshotMeta struct {
	Index, Term uint64
	Size        int64
}

// State is a node's role in the quorum.
type State int

// The roles of a node.
const (
	Follower State = iota
	Candidate
	Leader
	Shutdown
)

func (s State) String() string {
	switch s {
	case Follower:
		return "Follower"
	case Candidate:
		return "Candidate"
	case Leader:
		return "Leader"
	case Shutdown:
		return "Shutdown"
	}
	return "Unknown"
}

// Suffrage is whether a member votes.
type Suffrage int

// The suffrages of a member.
const (
	Voter Suffrage = iota
	Nonvoter
)

// Server is one member of the quorum.
type Server struct {
	ID       int32
	Address  string
	Suffrage Suffrage
}

// Configuration is the quorum's membership.
type Configuration struct {
	Servers []Server
}

// Has reports whether id is a member, voting or not.
func (c Configuration) Has(id int32) bool {
	for _, s := range c.Servers {
		if s.ID == id {
			return true
		}
	}
	return false
}

// Voters counts the voting members.
func (c Configuration) Voters() int {
	n := 0
	for _, s := range c.Servers {
		if s.Suffrage == Voter {
			n++
		}
	}
	return n
}

// Timeouts are a log's timing.
type Timeouts struct {
	// Heartbeat: how long a follower waits to hear from a leader before it
	// suspects it.
	Heartbeat time.Duration
	// Election: how long a candidate waits for votes; the scale of a
	// failover.
	Election time.Duration
}

// Errors a Log's operations wrap.
var (
	// ErrNotLeader: this node does not lead; nothing was appended.
	ErrNotLeader = errors.New("not the leader")
	// ErrLeadershipLost: leadership was lost with the entry in flight; it
	// may yet commit under the next leader.
	ErrLeadershipLost = errors.New("leadership lost while the entry was in flight")
	// ErrEnqueueTimeout: the entry could not be handed to the log in time;
	// its fate is unknown.
	ErrEnqueueTimeout = errors.New("timed out enqueuing the entry")
	// ErrShutdown: the log is shutting down.
	ErrShutdown = errors.New("the log is shut down")
	// ErrConfigurationChanged: a membership change's prevIndex is stale.
	ErrConfigurationChanged = errors.New("the configuration changed since the index given")
	// ErrTransferFailed: leadership did not move; this node still leads
	// unless another error says it does not.
	ErrTransferFailed = errors.New("leadership transfer failed")
)

// OutcomeUnknown reports whether err leaves an entry's fate unknown: it may
// have committed, or may yet.
func OutcomeUnknown(err error) bool {
	return errors.Is(err, ErrLeadershipLost) || errors.Is(err, ErrEnqueueTimeout) ||
		errors.Is(err, ErrShutdown)
}

// StateMachine is what a Log replicates into, on every node: the
// controller's applied log (controller.AppliedLog) implements it. A Log
// never looks inside an entry.
type StateMachine interface {
	// ApplyEntry applies one committed entry; its return value becomes the
	// ApplyFuture's Response on the node that proposed it.
	ApplyEntry(index, term uint64, data []byte) any
	// Snapshot captures the current state cheaply (entries wait while it
	// runs); the returned function writes the captured state out and may
	// run concurrently with ApplyEntry.
	Snapshot() (func(w io.Writer) error, error)
	// Restore replaces the whole state from a stream written by a function
	// that Snapshot returned.
	Restore(r io.Reader) error
}
