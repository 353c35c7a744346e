package raftlog

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// How far each voter is behind, as the leader sees it (Kafka's
// kafka-metadata-quorum describe --replication).
//
// hashicorp/raft keeps each follower's match index and last contact inside
// its replication goroutines and exposes neither. The leader's requests all
// leave through the transport, though: heartbeats and the first appends by
// AppendEntries, the rest through a pipeline. peerProgress reads the answers
// there: any answer is contact, and a successful append means the voter
// holds every entry up to the request's last one.

// peerProgress is what the leader has heard from each peer, per term.
type peerProgress struct {
	mu    sync.Mutex
	peers map[raft.ServerID]*peerSeen
}

type peerSeen struct {
	term    uint64 // the leader's term of the request answered
	contact time.Time
	match   uint64
}

// answered records an answer from id to req at now. err is the transport's:
// no answer, no contact.
func (p *peerProgress) answered(id raft.ServerID, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, err error, now time.Time) {
	if err != nil || req == nil || resp == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.peers == nil {
		p.peers = map[raft.ServerID]*peerSeen{}
	}
	s := p.peers[id]
	if s == nil || s.term < req.Term {
		s = &peerSeen{term: req.Term}
		p.peers[id] = s
	} else if s.term > req.Term {
		return // a late answer from an older leadership
	}
	s.contact = now
	if !resp.Success {
		return
	}
	match := req.PrevLogEntry
	if n := len(req.Entries); n > 0 {
		match = req.Entries[n-1].Index
	}
	s.match = max(s.match, match)
}

// PeerProgress is one peer as the leader has heard from it in a term.
type PeerProgress struct {
	// Match is the last index the peer is known to hold.
	Match uint64
	// Contact is when the peer last answered; zero if it has not.
	Contact time.Time
}

// of returns what was heard from id in term.
func (p *peerProgress) of(id raft.ServerID, term uint64) PeerProgress {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.peers[id]
	if s == nil || s.term != term {
		return PeerProgress{}
	}
	return PeerProgress{Match: s.match, Contact: s.contact}
}

// AppendEntries is the transport's, with the answer recorded (peerProgress):
// raft sends its heartbeats and its first appends to a peer this way.
func (t *watchedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := t.NetworkTransport.AppendEntries(id, target, args, resp)
	now := time.Now()
	t.progress.answered(id, args, resp, err, now)
	t.peers.answered(id, target, args, err, now)
	return err
}

// Progress returns what this node, as leader, has heard from voter id in
// the current term: the last index it holds and when it last answered. It
// is empty when this node does not lead.
func (n *Node) Progress(id int32) PeerProgress {
	if n.Raft.State() != raft.Leader {
		return PeerProgress{}
	}
	return n.watched.progress.of(ServerID(id), n.Raft.CurrentTerm())
}
