package raftlog

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// CrashElectionMessage is what a node logs (at WARN) when it starts a crash
// election: operators and Keel's fault suites count it.
const CrashElectionMessage = "the raft leader's process is gone (its connection closed and its port refuses); starting an election at once"

// A leader that is killed is noticed by raft only when a follower's
// heartbeat timeout passes without contact: between one and three timeouts
// (300–900 ms by default), and then the first candidate is refused by the
// other followers until their own timeouts pass, since they still know a
// leader. Yet the kernel says at once that the process died: its raft
// connections end, and its port refuses new ones.
//
// leaderCrash acts on that, as the controller's crash grace does for a
// broker whose connection closed: when a raft connection that carried the
// leader's AppendEntries ends, it dials the leader's address. A refusal
// means no process listens there any more; the surviving voter that ranks
// first (lowest id among those that answer a dial) then starts an election
// at once, by sending itself raft's TimeoutNow, as a leadership transfer's
// target does: it skips its pre-vote, and the others vote for it although
// they still know the dead leader. The others wait crashRankDelay per rank,
// and step in only if no leader has appeared meanwhile (the first one's log
// was behind, say).
//
// Everything else is left to raft's timeouts: a leader that is silent (a
// network cut, a paused process, a host that died without a FIN), one whose
// port still accepts, and any doubt (a dial that times out, a quorum this
// node cannot reach). Raft's safety never depends on this: a TimeoutNow
// only starts an election, which the others grant only to a log as up to
// date as theirs.
type leaderCrash struct {
	self int32
	log  *slog.Logger
	// addr is where voter id is dialled (--raft-dial, else its address in
	// the configuration).
	addr func(id int32, conf raft.ServerAddress) string
	// electSelf tells this node to start an election at once.
	electSelf func() error
	// probe dials addr: nil if something accepted, a refusal's error if
	// nothing listens (tests replace it).
	probe func(ctx context.Context, addr string) error

	// looks and elected count the crashes this looked into, and the
	// elections it started.
	looks, elected atomic.Uint64

	mu      sync.Mutex
	raft    raftView          // nil until raft runs
	handled map[crashKey]bool // one look per leader and term
	wg      sync.WaitGroup
	// ctx ends with stop: the looks under way give up.
	ctx    context.Context
	cancel context.CancelFunc
}

// raftView is what leaderCrash reads of raft (*raft.Raft; tests fake it).
type raftView interface {
	State() raft.RaftState
	LeaderWithID() (raft.ServerAddress, raft.ServerID)
	CurrentTerm() uint64
	GetConfiguration() raft.ConfigurationFuture
}

// setRaft starts the watch on r.
func (w *leaderCrash) setRaft(r raftView) {
	w.mu.Lock()
	w.raft = r
	w.mu.Unlock()
}

type crashKey struct {
	leader int32
	term   uint64
}

const (
	// crashProbeTimeout bounds each dial of the look: one that takes longer
	// is a doubt, left to raft's timeouts.
	crashProbeTimeout = 200 * time.Millisecond
	// crashProbes and crashProbeGap: the leader's connections may close a
	// moment before its listener does (a process's descriptors close one by
	// one as it exits), so an accepted dial is tried again before the
	// leader is taken to be alive.
	crashProbes   = 3
	crashProbeGap = 20 * time.Millisecond
	// crashProbeHold is how long an accepted probe waits to see whether
	// the far end closes it at once: a proxy whose target refused it
	// closes within a round trip.
	crashProbeHold = 20 * time.Millisecond
	// crashRankDelay is how long each surviving voter waits per voter that
	// ranks before it: long enough for that one's election (a round trip
	// and a write of its vote on each voter).
	crashRankDelay = 150 * time.Millisecond
)

func newLeaderCrash(self int32, log *slog.Logger, addr func(int32, raft.ServerAddress) string, electSelf func() error) *leaderCrash {
	ctx, cancel := context.WithCancel(context.Background())
	return &leaderCrash{
		ctx:       ctx,
		cancel:    cancel,
		self:      self,
		log:       log,
		addr:      addr,
		electSelf: electSelf,
		probe:     probeListener,
		handled:   make(map[crashKey]bool),
	}
}

// probeListener dials addr over TCP: nil if a listener accepted and held
// the connection, else the dial's error, or errClosedAtOnce if the far end
// accepted and closed at once. The latter is what a TCP proxy in front of
// a dead process does (it accepts, dials its target, is refused, and
// closes): a Keel node's own port holds a new connection open, waiting
// for its first byte, far longer than crashProbeHold.
func probeListener(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(crashProbeHold))
	var b [1]byte
	_, err = c.Read(b[:])
	var ne net.Error
	switch {
	case err == nil, errors.As(err, &ne) && ne.Timeout():
		return nil // held open, or it even spoke: something lives there
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		return errClosedAtOnce
	}
	return err
}

// errClosedAtOnce: the far end accepted a connection and closed it at
// once (probeListener).
var errClosedAtOnce = errors.New("the connection was closed as soon as it was accepted")

// refused reports whether err says that nothing listens at the address.
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, errClosedAtOnce)
}

// connEnded is told that an inbound raft connection from peer ended (not
// closed by this node, not refused by the guard); appended says whether it
// carried AppendEntries, which only a leader sends.
func (w *leaderCrash) connEnded(peer int32, appended bool) {
	w.mu.Lock()
	r := w.raft
	w.mu.Unlock()
	if r == nil || !appended || peer == w.self || r.State() != raft.Follower {
		return
	}
	_, leaderID := r.LeaderWithID()
	if id, err := ParseServerID(leaderID); err != nil || id != peer {
		return
	}
	key := crashKey{leader: peer, term: r.CurrentTerm()}
	w.mu.Lock()
	if w.ctx.Err() != nil || w.handled[key] {
		w.mu.Unlock()
		return
	}
	w.handled[key] = true
	// Forget older terms' looks: one per leadership is all that is kept.
	for k := range w.handled {
		if k.term < key.term {
			delete(w.handled, k)
		}
	}
	w.wg.Add(1)
	w.mu.Unlock()
	go func() {
		defer w.wg.Done()
		w.look(r, key)
	}()
}

// look decides whether leader key.leader died, and if so whether and when
// this node starts an election.
func (w *leaderCrash) look(r raftView, key crashKey) {
	defer w.looks.Add(1)
	ctx := w.ctx
	f := r.GetConfiguration()
	if f.Error() != nil {
		return
	}
	conf := f.Configuration()
	var leaderAddr raft.ServerAddress
	var others []int32 // the other voters but the leader, by id
	addrs := make(map[int32]raft.ServerAddress)
	selfVotes := false
	for _, s := range conf.Servers {
		id, err := ParseServerID(s.ID)
		if err != nil || s.Suffrage != raft.Voter {
			continue
		}
		switch id {
		case key.leader:
			leaderAddr = s.Address
		case w.self:
			selfVotes = true
		default:
			others = append(others, id)
			addrs[id] = s.Address
		}
	}
	if !selfVotes || leaderAddr == "" {
		return
	}
	if !w.leaderGone(ctx, w.addr(key.leader, leaderAddr)) {
		return
	}

	// Rank among the survivors that answer: a voter that cannot reach a
	// quorum of them (a cut of its own, which also closes connections)
	// starts nothing.
	// The dials go out side by side: each live one is held for
	// crashProbeHold.
	slices.Sort(others)
	answered := make([]bool, len(others))
	var dials sync.WaitGroup
	for i, id := range others {
		dials.Add(1)
		go func() {
			defer dials.Done()
			pctx, pcancel := context.WithTimeout(ctx, crashProbeTimeout)
			defer pcancel()
			answered[i] = w.probe(pctx, w.addr(id, addrs[id])) == nil
		}()
	}
	dials.Wait()
	reachable := 1 // this node
	rank := 0
	for i, id := range others {
		if !answered[i] {
			continue
		}
		reachable++
		if id < w.self {
			rank++
		}
	}
	voters := len(others) + 2
	if reachable < voters/2+1 {
		w.log.Info("the raft leader's process is gone, but this node reaches no quorum without it; leaving the election to raft's timeouts",
			"leader", key.leader, "term", key.term, "reachable_voters", reachable)
		return
	}
	if rank > 0 {
		t := time.NewTimer(time.Duration(rank) * crashRankDelay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
	// Still following the dead leader, or nobody, in its term: nothing
	// else has won, and no election is under way (a candidate's vote
	// request would have raised this node's term; a second election on top
	// of it would only cost it a round).
	if st := r.State(); st != raft.Follower && st != raft.Candidate {
		return
	}
	if _, id := r.LeaderWithID(); id != "" && id != ServerID(key.leader) {
		return
	}
	if rank > 0 && r.CurrentTerm() != key.term {
		return
	}
	w.log.Warn(CrashElectionMessage,
		"leader", key.leader, "term", key.term, "rank", rank)
	if err := w.electSelf(); err != nil {
		w.log.Warn("cannot start an election at once; raft's timeouts will", "err", err)
		return
	}
	w.elected.Add(1)
}

// leaderGone dials the leader's address crashProbes times: true once a dial
// is refused, false if every one was accepted or one failed otherwise.
func (w *leaderCrash) leaderGone(ctx context.Context, addr string) bool {
	for i := range crashProbes {
		if i > 0 {
			t := time.NewTimer(crashProbeGap)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return false
			}
		}
		pctx, cancel := context.WithTimeout(ctx, crashProbeTimeout)
		err := w.probe(pctx, addr)
		cancel()
		switch {
		case err == nil:
			continue
		case refused(err):
			return true
		default:
			return false // a doubt: raft's timeouts decide
		}
	}
	return false
}

// stop ends the looks under way and waits for them.
func (w *leaderCrash) stop() {
	// Under mu, so that no look starts (wg.Add) once it is cancelled.
	w.mu.Lock()
	w.cancel()
	w.mu.Unlock()
	w.wg.Wait()
}
