package raftlog

import (
	"sync"
	"time"
)

// heardFrom records when the last AppendEntries or snapshot install (what
// only a leader sends) from each peer arrived, on any of its connections:
// when this node last heard from a leader, as the crash election asks it
// (Node.LeaderContact).
//
// Raft's own LastContact would serve, but it moves only once raft has
// handled the request, after the entries are on disk: a leader killed
// just after sending a batch would seem to have been heard from a sync's
// length after its death. The guard reads every request before raft does,
// so it marks the arrival itself.
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

// last is when the latest such request from peer arrived; zero if none has
// since this node started.
func (h *heardFrom) last(peer int32) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.at[peer]
}
