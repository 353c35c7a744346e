package raftlog

import (
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// A peer that does not answer the leader, told in two lines.
//
// While a voter is down, raft's heartbeat goroutine fails a request to it
// about every HeartbeatTimeout/2 and its replication goroutine with a
// back-off, each logging a line (185 lines in 30 s with one of three
// controllers stopped), and nothing when the voter answers again. Every
// request the leader sends a peer leaves through the transport, though
// (watchedTransport), so peerWatch reads the answers there: the first
// failed request of an outage is one WARN, the first answer after it one
// INFO with how long it lasted and how many requests failed; raft's own
// lines go to Debug (relevel). A peer paused or cut off without its
// connections closing fails no request before the transport's timeout:
// raft's lease check says first that it is silent ("failed to contact"),
// which the adapter passes on (silent).
//
// A peer that flaps would still write two lines per outage, so the WARNs
// about a peer are at least peerQuietWindow apart. An outage that starts
// within the window is logged when the window ends if it lasts that long,
// and otherwise counted in the next WARN: a flapping peer is never silent
// for longer than the window.

// The lines of an outage, as tests look for them.
const (
	PeerDownMessage = "raft peer does not answer the leader; retrying"
	PeerBackMessage = "raft peer answers the leader again"
)

// peerQuietWindow is the least time between two WARNs about one peer.
const peerQuietWindow = 10 * time.Second

// peerWatch tracks, per peer, whether the leader's requests to it fail.
type peerWatch struct {
	log   *slog.Logger
	quiet time.Duration

	mu    sync.Mutex
	peers map[raft.ServerID]*peerOutage
	term  uint64 // the latest leadership's
}

// peerOutage is one peer's state as this node, leading in term, sees it.
type peerOutage struct {
	term  uint64
	down  bool      // the latest request failed
	since time.Time // the first failed request of the outage
	// heartbeats and appends count the outage's failed requests.
	heartbeats, appends int
	warned              bool      // the outage has had its WARN
	lastWarn            time.Time // the latest WARN about the peer
	// unlogged counts the outages since lastWarn that ended before they
	// could be logged.
	unlogged int
}

func newPeerWatch(log *slog.Logger) *peerWatch {
	return &peerWatch{log: log, quiet: peerQuietWindow, peers: map[raft.ServerID]*peerOutage{}}
}

// answered records the outcome of a request to id at target: err is the
// transport's, nil for any answer.
func (w *peerWatch) answered(id raft.ServerID, target raft.ServerAddress, req *raft.AppendEntriesRequest, err error, now time.Time) {
	if w == nil || req == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.term = max(w.term, req.Term)
	p := w.peer(id, req.Term)
	if p == nil {
		return // a late answer from an older leadership
	}
	if err == nil {
		w.recovered(id, target, p, now)
		return
	}
	w.down(p, now)
	if isHeartbeat(req) {
		p.heartbeats++
	} else {
		p.appends++
	}
	w.warn(id, p, now, "address", string(target), "err", err)
}

// silent records that the leader, checking its lease, has heard nothing
// from id for d: a peer that is paused or cut off without its connections
// closing fails no request until the transport's timeout (10 s).
func (w *peerWatch) silent(id raft.ServerID, d time.Duration, now time.Time) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.peer(id, w.term)
	if p == nil || p.down {
		return
	}
	w.down(p, now.Add(-d))
	w.warn(id, p, now, "err", "no answer within the leader's lease")
}

// silentArgs is silent with raft's "failed to contact" args: server-id and
// time.
func (w *peerWatch) silentArgs(args []any, now time.Time) {
	id, _ := argValue(args, "server-id").(raft.ServerID)
	d, _ := argValue(args, "time").(time.Duration)
	if id != "" {
		w.silent(id, d, now)
	}
}

// peer is id's state in term, made or started over as needed; nil if term
// is older than its state's. The caller holds w.mu.
func (w *peerWatch) peer(id raft.ServerID, term uint64) *peerOutage {
	p := w.peers[id]
	switch {
	case p == nil:
		p = &peerOutage{term: term}
		w.peers[id] = p
	case term < p.term:
		return nil
	case term > p.term:
		// A new leadership: an outage of the old one, if any, is no longer
		// watched here (this node stopped leading meanwhile); the WARNs
		// stay spaced.
		*p = peerOutage{term: term, lastWarn: p.lastWarn, unlogged: p.unlogged}
	}
	return p
}

// down starts an outage of p at since, unless one is on.
func (w *peerWatch) down(p *peerOutage, since time.Time) {
	if !p.down {
		p.down, p.since, p.heartbeats, p.appends, p.warned = true, since, 0, 0, false
	}
}

// warn logs p's outage, with args, unless it was or a WARN about the peer
// is too recent. The caller holds w.mu.
func (w *peerWatch) warn(id raft.ServerID, p *peerOutage, now time.Time, args ...any) {
	if p.warned || (!p.lastWarn.IsZero() && now.Sub(p.lastWarn) < w.quiet) {
		return
	}
	p.warned, p.lastWarn = true, now
	args = append([]any{"peer", string(id)}, args...)
	if now.After(p.since) {
		args = append(args, "down_for", now.Sub(p.since).Round(time.Millisecond).String())
	}
	if p.unlogged > 0 {
		args = append(args, "earlier_outages", p.unlogged)
		p.unlogged = 0
	}
	w.log.Warn(PeerDownMessage, args...)
}

// recovered ends p's outage, if any, on an answer.
func (w *peerWatch) recovered(id raft.ServerID, target raft.ServerAddress, p *peerOutage, now time.Time) {
	if !p.down {
		return
	}
	p.down = false
	args := []any{"peer", string(id), "address", string(target), "down_for", now.Sub(p.since).Round(time.Millisecond).String(),
		"failed_heartbeats", p.heartbeats, "failed_appends", p.appends}
	if !p.warned {
		p.unlogged++
		w.log.Debug(PeerBackMessage, args...)
		return
	}
	w.log.Info(PeerBackMessage, args...)
}

// isHeartbeat reports whether req is one of raft's heartbeats, which carry
// only the leader's term and id: any other AppendEntries names the entry
// before its own and the commit index, both past zero once the log has an
// entry.
func isHeartbeat(req *raft.AppendEntriesRequest) bool {
	return len(req.Entries) == 0 && req.PrevLogEntry == 0 && req.LeaderCommitIndex == 0
}
