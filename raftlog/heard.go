package raftlog

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// heardFrom records when the last AppendEntries or snapshot install (what
// only a leader sends) from each peer arrived, on any of its connections:
// when this node last heard from a leader, as the crash election asks it
// (Node.LeaderContact).
//
// Raft's own LastContact would serve, but it moves only once raft has
// handled the request, after the entries are on disk: a leader killed
// just after sending a batch would seem to have been heard from a sync's
// length after its death. So the transport marks each request as it
// decodes it, before raft handles it (watchedTransport): a heartbeat on
// raft's fast path, anything else as it leaves the transport for raft.
type heardFrom struct {
	mu sync.Mutex
	at map[int32]time.Time
}

func newHeardFrom() *heardFrom { return &heardFrom{at: make(map[int32]time.Time)} }

// mark records a request from peer that only a leader sends, arrived at t.
func (h *heardFrom) mark(peer int32, t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t.After(h.at[peer]) {
		h.at[peer] = t
	}
}

// arrived marks rpc, decoded at t, if only a leader sends it; by the node
// its header names, which raft believes too.
func (h *heardFrom) arrived(rpc raft.RPC, t time.Time) {
	var hdr raft.RPCHeader
	switch req := rpc.Command.(type) {
	case *raft.AppendEntriesRequest:
		hdr = req.RPCHeader
	case *raft.InstallSnapshotRequest:
		hdr = req.RPCHeader
	default:
		return
	}
	if id, err := ParseServerID(raft.ServerID(hdr.ID)); err == nil {
		h.mark(id, t)
	}
}

// last is when the latest such request from peer arrived; zero if none has
// since this node started.
func (h *heardFrom) last(peer int32) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.at[peer]
}

// SetHeartbeatHandler hands raft's heartbeat handler to the transport,
// marking each heartbeat as it arrives: heartbeats take raft's fast path,
// never Consumer.
func (t *watchedTransport) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	if cb == nil {
		t.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	t.NetworkTransport.SetHeartbeatHandler(func(rpc raft.RPC) {
		t.heard.arrived(rpc, time.Now())
		cb(rpc)
	})
}
