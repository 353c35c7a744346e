package raftlog

import "github.com/hashicorp/raft"

// RaftFSM adapts sm to the raft.FSM interface, for code that builds a raft
// instance itself (tests with in-memory transports do).
func RaftFSM(sm StateMachine) raft.BatchingFSM { return &fsmAdapter{sm: sm} }
