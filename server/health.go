package server

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

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
}

// errStopping: Close has begun; load balancers should drain the node.
var errStopping = errors.New("the node is stopping")

// check decides readiness: nil when the node is ready, else why not. A
// follower is ready once it knows a leader and has applied everything up
// to the commit index it last heard, so that its reads are as fresh as the
// leader's commits it knows of. The raft leader is ready once it is the
// active controller: it has then committed its epoch record from an image
// holding everything committed before it, and any index it has committed
// but not applied yet is its own write in flight, which it applies before
// answering.
func (r readiness) check() error {
	switch {
	case r.stopping:
		return errStopping
	case r.state == raft.Leader && !r.active:
		return errors.New("this node leads raft but is not the active controller yet (taking over)")
	case r.state == raft.Leader:
		return nil
	case r.leaderID < 0:
		return fmt.Errorf("no raft leader known (raft state %s)", r.state)
	case r.appliedIndex < r.commitIndex:
		return fmt.Errorf("applied up to index %d of the leader's commit index %d", r.appliedIndex, r.commitIndex)
	}
	return nil
}

// Ready reports whether the node is ready to serve (nil) or why not: see
// readiness.check. It backs /readyz and the keel.v1.ControllerService
// health status.
func (s *Node) Ready() error {
	r := readiness{
		stopping:     s.stopping.Load(),
		state:        s.node.Raft.State(),
		commitIndex:  s.node.Raft.CommitIndex(),
		appliedIndex: max(s.node.StateMachineIndex(), s.fsm.Image().Offset),
	}
	r.leaderID, _ = s.ctrl.Leader()
	r.active, _ = s.ctrl.Active()
	return r.check()
}
