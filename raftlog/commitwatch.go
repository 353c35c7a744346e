package raftlog

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// How far behind the leader a follower is, as it knows it.
//
// A follower learns the commit index only from the leader's AppendEntries
// requests, and raft adopts it (CommitIndex) only up to the last entry it
// has stored: a follower that cannot store entries (a full or read-only
// disk) keeps the commit index it had, applies all of it, and by raft's
// own numbers looks caught up. Its LastContact looks healthy too: raft's
// heartbeats carry no entries and no commit index, so they succeed and
// refresh it while every AppendEntries with entries fails. Nothing raft
// exposes (Stats, LastContact, AppliedIndex, CommitIndex) tells that
// follower it is behind. So the node reads the commit index off each
// AppendEntries request on its way to raft (watchedTransport) and
// remembers when each was first announced (commitWatch): the oldest
// announced index it has not applied yet, and how long ago that was, is
// how long it has been behind the leader. Any leader's commit index is an
// index committed in the quorum, so a deposed leader's late request
// overstates nothing.

// commitSamples and commitSampleEvery bound what commitWatch keeps: an
// announcement within commitSampleEvery of the previous sample raises that
// sample's index instead of adding one (so an index is dated at most that
// much early), and a full ring drops its oldest sample, which by then is
// older than commitSamples-1 times commitSampleEvery: 3.1s, more than any
// lag bound a reader of LeaderCommit is expected to use.
const (
	commitSamples     = 64
	commitSampleEvery = 50 * time.Millisecond
)

// commitWatch remembers when the leader announced commit indexes: a ring
// of samples, oldest first, in increasing index order.
type commitWatch struct {
	mu      sync.Mutex
	samples [commitSamples]commitSample
	head, n int
}

type commitSample struct {
	index uint64
	at    time.Time
}

// announced records that the leader announced commit index at now.
func (w *commitWatch) announced(index uint64, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n > 0 {
		last := &w.samples[(w.head+w.n-1)%commitSamples]
		if index <= last.index {
			return
		}
		if now.Sub(last.at) < commitSampleEvery {
			last.index = index
			return
		}
	}
	if w.n == commitSamples {
		w.head = (w.head + 1) % commitSamples
		w.n--
	}
	w.samples[(w.head+w.n)%commitSamples] = commitSample{index, now}
	w.n++
}

// oldestAbove returns the oldest commit index announced that is above
// applied, and how long before now it was announced; 0 when every
// announced index is applied. Samples at or below applied are dropped.
func (w *commitWatch) oldestAbove(applied uint64, now time.Time) (uint64, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.n > 0 && w.samples[w.head].index <= applied {
		w.head = (w.head + 1) % commitSamples
		w.n--
	}
	if w.n == 0 {
		return 0, 0
	}
	s := w.samples[w.head]
	return s.index, now.Sub(s.at)
}

// watchedTransport is raft's network transport with the requests raft
// consumes passed through a goroutine that reads the commit index off each
// AppendEntries (commitWatch). Everything else is the NetworkTransport's
// own, pre-vote included. Heartbeats take raft's fast path, not Consumer:
// they carry no commit index. Both mark when a leader was last heard
// from (heard).
type watchedTransport struct {
	*raft.NetworkTransport
	progress peerProgress // what the leader hears back from its peers
	peers    *peerWatch   // which peers do not answer; nil logs nothing
	heard    *heardFrom
	ch       chan raft.RPC
	done     chan struct{}
	ended    chan struct{}
}

func newWatchedTransport(t *raft.NetworkTransport, w *commitWatch, heard *heardFrom) *watchedTransport {
	wt := &watchedTransport{
		NetworkTransport: t,
		heard:            heard,
		ch:               make(chan raft.RPC), // unbuffered, as the transport's own
		done:             make(chan struct{}),
		ended:            make(chan struct{}),
	}
	go wt.pass(w)
	return wt
}

func (t *watchedTransport) pass(w *commitWatch) {
	defer close(t.ended)
	in := t.NetworkTransport.Consumer()
	for {
		var rpc raft.RPC
		select {
		case rpc = <-in:
		case <-t.done:
			return
		}
		now := time.Now()
		t.heard.arrived(rpc, now)
		if req, ok := rpc.Command.(*raft.AppendEntriesRequest); ok && req.LeaderCommitIndex > 0 {
			w.announced(req.LeaderCommitIndex, now)
		}
		select {
		case t.ch <- rpc:
		case <-t.done:
			// Raft has stopped; the transport answers the caller that it
			// has shut down.
			return
		}
	}
}

// Consumer is where raft reads the requests its peers send.
func (t *watchedTransport) Consumer() <-chan raft.RPC { return t.ch }

// stop ends the goroutine; raft must have stopped reading Consumer.
func (t *watchedTransport) stop() {
	select {
	case <-t.done:
	default:
		close(t.done)
	}
	<-t.ended
}
