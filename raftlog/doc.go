// Package raftlog starts a Keel controller's raft node: the log and stable
// store in the data dir, the snapshot store, the network transport, and the
// bootstrap from the static voter list. It also splits the node's one TCP port
// between raft and gRPC, so a controller has a single address.
//
// It exists so that everything raft needs from the disk and the network is set
// up, checked and torn down in one place, and so that the controller sees raft
// only through consensus.Log, which Node implements (consensus.go), with the
// one careful leadership transfer (transfer.go). raftlog knows no record
// types: it replicates opaque command entries and hands them to a
// consensus.StateMachine, which the controller's applied log implements.
package raftlog
