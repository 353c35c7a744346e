package server

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/fsm"
)

// applyLagBound is how long a follower may leave unapplied a commit index
// the leader announced to it before it is not ready: far above the
// milliseconds a healthy follower takes to store and apply an entry, a GC
// pause or an fsync stall, and below a readiness probe's usual failure
// threshold. A follower that cannot store entries (a full or read-only
// disk), or catching up from far behind, passes it.
const applyLagBound = 2 * time.Second

// readiness is what a controller node's readiness is decided from: a
// moment's view of its raft node and controller.
type readiness struct {
	stopping bool
	state    raft.RaftState
	leaderID int32 // -1: no leader known
	active   bool  // this node is the active controller
	// commitIndex is raft's commit index as this node knows it: a
	// follower's is the one it last heard from the leader.
	commitIndex uint64
	// appliedIndex is how far the state machine has got: the last entry it
	// finished with, or its image's offset if that is further (a snapshot).
	appliedIndex uint64
	// announced is the oldest commit index a leader announced to this node
	// that it has not applied, announcedAgo how long ago (0: none): how
	// long it has been behind the leader, which raft's commit index does
	// not tell a follower that cannot store entries (raftlog.LeaderCommit).
	announced    uint64
	announcedAgo time.Duration
	// storageFailedAt is when the raft log or stable store last failed a
	// write (zero: none since the last that succeeded), storageErr how.
	storageFailedAt time.Time
	storageErr      error
	// diverged is why this node does not act on its image, or nil
	// (controller/integrity.go).
	diverged *fsm.Divergence
}

// errStopping: Close has begun; load balancers should drain the node.
var errStopping = errors.New("the node is stopping")

// errNotStarted: raft has not started yet (the node asks its peers first).
var errNotStarted = errors.New("the node is starting")

// check decides readiness: nil when the node is ready, else why not. A
// node whose image diverged is never ready again (in this process). A
// node whose raft storage failed a write is not ready until a write
// succeeds. A follower is ready once it knows a leader, has applied
// everything up to the commit index raft adopted, and has not left a
// commit index the leader announced unapplied for longer than
// applyLagBound, so that its reads are as fresh as the leader's commits.
// The raft leader is ready once it is the active controller: it has then
// committed its epoch record from an image holding everything committed
// before it, and any index it has committed but not applied yet is its
// own write in flight, which it applies before answering.
func (r readiness) check() error {
	switch {
	case r.stopping:
		return errStopping
	case r.diverged != nil:
		return fmt.Errorf("this node's metadata image diverged at index %d: %s; it does not act on it", r.diverged.Index, r.diverged.Reason)
	case !r.storageFailedAt.IsZero():
		return fmt.Errorf("raft storage failed at %s: %v (ready again once a write succeeds)",
			r.storageFailedAt.UTC().Format(time.RFC3339Nano), r.storageErr)
	case r.state == raft.Leader && !r.active:
		return errors.New("this node leads raft but is not the active controller yet (taking over)")
	case r.state == raft.Leader:
		return nil
	case r.leaderID < 0:
		return fmt.Errorf("no raft leader known (raft state %s)", r.state)
	case r.appliedIndex < r.commitIndex:
		return fmt.Errorf("applied up to index %d of the leader's commit index %d", r.appliedIndex, r.commitIndex)
	case r.announced > r.appliedIndex && r.announcedAgo > applyLagBound:
		return fmt.Errorf("applied up to index %d; the leader announced commit index %d %s ago",
			r.appliedIndex, r.announced, r.announcedAgo.Round(time.Millisecond))
	}
	return nil
}

// Ready reports whether the node is ready to serve (nil) or why not: see
// readiness.check. It backs /readyz and the keel.v1.ControllerService
// health status.
func (s *Node) Ready() error {
	if !s.started.Load() {
		return errNotStarted
	}
	r := readiness{
		stopping:     s.stopping.Load(),
		state:        s.node.Raft.State(),
		commitIndex:  s.node.Raft.CommitIndex(),
		appliedIndex: s.appliedIndex(),
	}
	r.announced, r.announcedAgo = s.node.LeaderCommit(r.appliedIndex)
	r.storageFailedAt, r.storageErr = s.node.StorageFailure()
	r.leaderID, _ = s.ctrl.Leader()
	r.active, _ = s.ctrl.Active()
	r.diverged = s.ctrl.Diverged()
	return r.check()
}
