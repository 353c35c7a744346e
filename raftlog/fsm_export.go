package raftlog

import (
	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/consensus"
)

// RaftFSM adapts sm to the raft.FSM interface, for code that builds a raft
// instance itself (tests with in-memory transports do).
func RaftFSM(sm consensus.StateMachine) raft.BatchingFSM { return &fsmAdapter{sm: sm} }
