package raftlog

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/internal/listenprobe"
)

// CrashElectionMessage is what a node logs (at WARN) when it starts a crash
// election: operators and Keel's fault suites count it.
const CrashElectionMessage = "the raft leader is gone (its connection ended, its port refused through the confirmation window, and a quorum of voters has not heard from it); starting an election at once"

// A leader that is killed is noticed by raft only when a follower's
// heartbeat timeout passes without contact: between one and three timeouts
// (300–900 ms by default), and then the first candidate is refused by the
// other followers until their own timeouts pass, since they still know a
// leader. Yet the kernel says at once that the process died: its raft
// connections end, and its port refuses new ones.
//
// leaderCrash acts on that. When a raft connection from the leader that
// carried requests ends (in plaintext, any that did: nothing says whose),
// it confirms over a short window
// (Timing.CrashConfirm, at least two fifths of the heartbeat timeout:
// crashWindow) that the leader is gone rather than blinking:
//
//   - its port refuses every probe across the window (the first few may be
//     accepted: a dying process's listener may outlive its connections a
//     moment), where a connection reset, a proxy restart or a blip of the
//     leader's links shorter than the window ends with a probe accepted;
//   - nothing arrives from the leader on this node after its connection
//     ended (past contactSlack: a dead leader's last requests may be read
//     late);
//   - then, at the window's end, the other voters are asked
//     (Config.AskLeaderContact, which server wires to the peer service; a
//     first question goes out with the probes, to open the connections and
//     find an election already under way): voters other than the leader,
//     this one included, that have gone the window without hearing from it
//     in the same term must make a majority of all the voters, the leader
//     counted. A blip of one link,
//     of any length, or a port that refuses only this node (a firewall, a
//     port saturated by strangers' connections) ends there: the others
//     still hear the leader, and a leader that a quorum hears is never
//     deposed.
//
// The voter whose log is the most up to date among the silent quorum that
// answered (ties: the lowest id) then starts an election at once, by
// sending itself raft's TimeoutNow, as a leadership transfer's target does:
// it skips its pre-vote, and the others vote for it although they still
// know the dead leader, which they grant only to a log as up to date as
// theirs, so it wins in one round. The others wait crashRankDelay per rank,
// and step in only if no leader has appeared and their term has not moved
// meanwhile.
//
// Everything else is left to raft's timeouts: a leader that is silent (a
// network cut that drops packets, a paused process, a host that died
// without a FIN: its port accepts, or the probe times out), and any doubt.
// Raft's safety never depends on this: a TimeoutNow only starts an
// election. Only looks under way are deduplicated: one that found the
// leader alive leaves the next connection's end free to start another.
type leaderCrash struct {
	self int32
	log  *slog.Logger
	// window is Timing.crashWindow: CrashConfirm, or more.
	window time.Duration
	// addr is where voter id is dialled (--raft-dial, else its address in
	// the configuration).
	addr func(id int32, conf raft.ServerAddress) string
	// electSelf tells this node to start an election at once.
	electSelf func() error
	// probe dials addr: nil if something accepted and held the
	// connection, a refusal's error if nothing listens (tests replace it).
	probe func(ctx context.Context, addr string) error
	// ask asks voter id, at addr, about leader (Config.AskLeaderContact).
	ask func(ctx context.Context, id int32, addr string, leader int32) (LeaderContact, error)
	// heard is when requests from each leader last arrived here.
	heard *heardFrom
	// vetoLogs holds back repeats of a veto worth an operator's look: a
	// flapping link would report one every window.
	vetoLogs *logLimiter

	// looks counts the looks that ended, elected the elections started,
	// and vetoes the looks that started none, by reason.
	looks, elected atomic.Uint64
	vetoes         [numCrashVetoes]atomic.Uint64

	mu      sync.Mutex
	raft    raftView          // nil until raft runs
	running map[crashKey]bool // the looks under way
	wg      sync.WaitGroup
	// ctx ends with stop: the looks under way give up.
	ctx    context.Context
	cancel context.CancelFunc
}

// raftView is what leaderCrash reads of raft (raftNode; tests fake it).
type raftView interface {
	State() raft.RaftState
	LeaderWithID() (raft.ServerAddress, raft.ServerID)
	CurrentTerm() uint64
	GetConfiguration() raft.ConfigurationFuture
	// LastEntry is the index and term of the last log entry, or of the
	// snapshot if it goes further: what an election compares.
	LastEntry() (index, term uint64)
}

// raftNode is a *raft.Raft as leaderCrash reads it.
type raftNode struct{ *raft.Raft }

// LastEntry reads raft's last log entry and snapshot from its stats, the
// only place raft exposes their terms, and keeps the later, as raft's own
// getLastEntry does.
func (r raftNode) LastEntry() (index, term uint64) {
	s := r.Stats()
	num := func(k string) uint64 {
		v, _ := strconv.ParseUint(s[k], 10, 64)
		return v
	}
	index, term = num("last_log_index"), num("last_log_term")
	if snap := num("last_snapshot_index"); snap > index {
		index, term = snap, num("last_snapshot_term")
	}
	return index, term
}

// LeaderContact is what a voter says of a leader when another voter's
// crash election asks it (Node.LeaderContact).
type LeaderContact struct {
	NodeID int32
	State  raft.RaftState
	// Term is its current term, and Leader the leader it follows in it (0:
	// none known).
	Term   uint64
	Leader int32
	// Since is how long ago a request that only a leader sends
	// (AppendEntries, heartbeats included, or a snapshot install) last
	// arrived from the node asked about; negative if none has since this
	// node started.
	Since time.Duration
	// LastIndex and LastTerm are its log's last entry (or its snapshot's,
	// if that goes further).
	LastIndex, LastTerm uint64
}

// contactOf is r's answer, as node self, about a leader from which a
// request last arrived at heard (zero: never).
func contactOf(r raftView, self int32, heard, now time.Time) LeaderContact {
	c := stateOf(r, self)
	if !heard.IsZero() {
		c.Since = now.Sub(heard)
	}
	c.LastIndex, c.LastTerm = r.LastEntry()
	return c
}

// stateOf is the part of contactOf that says where r stands: its state,
// term and leader (what movedOn reads), without the cost of its log.
func stateOf(r raftView, self int32) LeaderContact {
	c := LeaderContact{NodeID: self, State: r.State(), Term: r.CurrentTerm(), Since: -1}
	if _, id := r.LeaderWithID(); id != "" {
		c.Leader, _ = ParseServerID(id)
	}
	return c
}

type crashKey struct {
	leader int32
	term   uint64
}

// crashVeto is why a look started no election.
type crashVeto int

const (
	// vetoPortAccepts: the leader's port took a probe and held it.
	vetoPortAccepts crashVeto = iota
	// vetoProbeFailed: a probe failed otherwise (it timed out): a doubt.
	vetoProbeFailed
	// vetoContact: a request from the leader arrived after its connection
	// ended.
	vetoContact
	// vetoUnanswered: fewer than a quorum of voters answered that they had
	// not heard from the leader, and none that it still hears from it.
	vetoUnanswered
	// vetoOthersHear: voters still hear from the leader, and those that do
	// not are short of a quorum.
	vetoOthersHear
	// vetoElectionUnderWay: a term moved, or a new leader is known, here or
	// at a voter asked: another voter's election is under way or won.
	vetoElectionUnderWay
	numCrashVetoes

	// Outcomes that are no veto, and not counted as one.
	noVeto      // the leader is gone: elect
	vetoIgnored // not this node's to judge (not a voter), or it is stopping
)

// CrashVetoReasons name, for keel_raft_crash_election_vetoes_total, why a
// look at a leader whose connection ended started no election (see
// Node.CrashElectionVetoes).
var CrashVetoReasons = [numCrashVetoes]string{
	vetoPortAccepts:      "port_accepts",
	vetoProbeFailed:      "probe_failed",
	vetoContact:          "contact",
	vetoUnanswered:       "unanswered",
	vetoOthersHear:       "others_hear",
	vetoElectionUnderWay: "election_under_way",
}

func (v crashVeto) String() string {
	if v >= 0 && v < numCrashVetoes {
		return CrashVetoReasons[v]
	}
	return "crashVeto(" + strconv.Itoa(int(v)) + ")"
}

const (
	// DefaultCrashConfirm is Timing.CrashConfirm's default: twice the
	// longest blip of a whole node's links (a proxy or sidecar restart,
	// 100 ms) it is meant to ride out, and short enough to keep a kill's
	// failover near a quarter of a second.
	DefaultCrashConfirm = 200 * time.Millisecond
	// minCrashConfirm: a window must hold a few probes.
	minCrashConfirm = 50 * time.Millisecond

	// crashProbeTimeout bounds each dial of the look: one that takes longer
	// is a doubt, left to raft's timeouts.
	crashProbeTimeout = 200 * time.Millisecond
	// crashProbes: the leader's connections may close a moment before its
	// listener does (a process's descriptors close one by one as it exits),
	// so up to this many probes may be accepted before the first refusal.
	crashProbes = 3
	// crashProbeGap is the pause between two probes of the window.
	crashProbeGap = 20 * time.Millisecond
	// crashAskTimeout bounds the question to the other voters; one that
	// has not answered by then is not counted.
	crashAskTimeout = 150 * time.Millisecond
	// crashRankDelay is how long each voter waits per voter that ranks
	// before it: long enough for that one's election (a round trip and a
	// write of its vote on each voter).
	crashRankDelay = 150 * time.Millisecond
)

func newLeaderCrash(self int32, log *slog.Logger, window time.Duration, heard *heardFrom,
	addr func(int32, raft.ServerAddress) string, electSelf func() error,
	ask func(ctx context.Context, id int32, addr string, leader int32) (LeaderContact, error),
) *leaderCrash {
	ctx, cancel := context.WithCancel(context.Background())
	return &leaderCrash{
		ctx:       ctx,
		cancel:    cancel,
		self:      self,
		log:       log,
		window:    window,
		heard:     heard,
		addr:      addr,
		electSelf: electSelf,
		ask:       ask,
		probe:     listenprobe.Dial,
		running:   make(map[crashKey]bool),
		vetoLogs:  newLogLimiter(10 * time.Second),
	}
}

// setRaft starts the watch on r.
func (w *leaderCrash) setRaft(r raftView) {
	w.mu.Lock()
	w.raft = r
	w.mu.Unlock()
}

// connEnded is told that an inbound raft connection that carried requests
// ended (not closed by this node, not refused by the guard), from
// controller peer, or 0 when nothing says who sent them (plaintext): then
// it may be the leader's, and the look at the leader decides.
func (w *leaderCrash) connEnded(peer int32) {
	ended := time.Now()
	w.mu.Lock()
	r := w.raft
	w.mu.Unlock()
	if r == nil || peer == w.self || r.State() != raft.Follower {
		return
	}
	_, leaderID := r.LeaderWithID()
	leader, err := ParseServerID(leaderID)
	if err != nil || peer != 0 && leader != peer {
		return
	}
	key := crashKey{leader: leader, term: r.CurrentTerm()}
	w.mu.Lock()
	// The leader's other connections end with it: one look at a time.
	if w.ctx.Err() != nil || w.running[key] {
		w.mu.Unlock()
		return
	}
	w.running[key] = true
	w.wg.Add(1)
	w.mu.Unlock()
	go func() {
		defer w.wg.Done()
		v := w.look(r, key, ended)
		if v < numCrashVetoes {
			w.vetoes[v].Add(1)
		}
		w.looks.Add(1)
		w.mu.Lock()
		delete(w.running, key)
		w.mu.Unlock()
	}()
}

// look decides whether leader key.leader, whose connection ended at ended,
// is gone, and if so whether and when this node starts an election.
func (w *leaderCrash) look(r raftView, key crashKey, ended time.Time) crashVeto {
	ctx := w.ctx
	sc, ok := scopeOf(r, w.self, key.leader)
	if !ok {
		return vetoIgnored
	}
	// The first question goes out beside the probes: it opens the
	// connections the deciding one at the window's end will use, and finds
	// an election another voter has already started.
	early := make(chan []LeaderContact, 1)
	go func() { early <- w.askAll(ctx, sc, key.leader) }()
	v := w.confirmGone(ctx, r, key, ended, w.addr(key.leader, sc.leaderAddr))
	first := <-early
	for _, a := range first {
		if v == noVeto && movedOn(a, key) {
			v = vetoElectionUnderWay
		}
	}
	if v != noVeto {
		w.log.Debug("a raft connection from the leader ended, and it is not gone", "leader", key.leader, "term", key.term, "veto", v)
		return v
	}
	answers := w.askAll(ctx, sc, key.leader)
	self := contactOf(r, w.self, w.heard.last(key.leader), time.Now())
	rank, v := judge(key, w.window, sc.voters, self, answers)
	switch v {
	case noVeto:
	case vetoOthersHear, vetoUnanswered:
		// Its port has refused this node throughout: a fault the operator
		// should see, on this node's path to the leader or on the leader.
		if ok, held := w.vetoLogs.allow(v.String(), time.Now()); ok {
			w.log.Info("the raft leader's port has refused this node through the confirmation window, but not a quorum of voters has lost it; leaving it to raft's timeouts",
				"leader", key.leader, "term", key.term, "veto", v, "window", w.window,
				"silent_voters", silentIDs(self, answers, w.window, key), "answered", len(answers), "voters", sc.voters,
				"similar_not_logged", held)
		}
		return v
	default:
		w.log.Debug("a raft connection from the leader ended, and it is not gone", "leader", key.leader, "term", key.term, "veto", v)
		return v
	}
	if rank > 0 {
		t := time.NewTimer(time.Duration(rank) * crashRankDelay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return vetoIgnored
		}
	}
	// Still following the dead leader, or nobody, in its term: nothing
	// else has won, and no election is under way (a candidate's vote
	// request would have raised this node's term; a second election on
	// top of it would only cost it a round).
	if movedOn(stateOf(r, w.self), key) {
		return vetoElectionUnderWay
	}
	w.log.Warn(CrashElectionMessage,
		"leader", key.leader, "term", key.term, "rank", rank, "window", w.window,
		"silent_voters", silentIDs(self, answers, w.window, key))
	if err := w.electSelf(); err != nil {
		w.log.Warn("cannot start an election at once; raft's timeouts will", "err", err)
		return noVeto
	}
	w.elected.Add(1)
	return noVeto
}

// crashScope is what a look needs of the configuration: the number of
// voters, the leader's address, and the voters it asks (all but the
// leader and this node), by id.
type crashScope struct {
	voters     int
	leaderAddr raft.ServerAddress
	others     []int32
	addrs      map[int32]raft.ServerAddress
}

// scopeOf reads r's configuration; ok is false unless both this node and
// the leader are voters.
func scopeOf(r raftView, self, leader int32) (sc crashScope, ok bool) {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return sc, false
	}
	sc.addrs = make(map[int32]raft.ServerAddress)
	selfVotes := false
	for _, s := range f.Configuration().Servers {
		id, err := ParseServerID(s.ID)
		if err != nil || s.Suffrage != raft.Voter {
			continue
		}
		sc.voters++
		switch id {
		case leader:
			sc.leaderAddr = s.Address
		case self:
			selfVotes = true
		default:
			sc.others = append(sc.others, id)
			sc.addrs[id] = s.Address
		}
	}
	slices.Sort(sc.others)
	return sc, selfVotes && sc.leaderAddr != ""
}

// confirmGone probes the leader's port at addr from its connection's end
// until a probe that began after the window was refused. It returns
// noVeto if every probe from the first refusal on was refused (the first
// crashProbes may be accepted) and no request from the leader arrived
// meanwhile, else the veto.
func (w *leaderCrash) confirmGone(ctx context.Context, r raftView, key crashKey, ended time.Time, addr string) crashVeto {
	end := ended.Add(w.window)
	refusedYet := false
	for i := 0; ; i++ {
		if i > 0 {
			t := time.NewTimer(crashProbeGap)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return vetoIgnored
			}
		}
		if w.heard.last(key.leader).After(ended.Add(contactSlack(w.window))) {
			return vetoContact
		}
		if movedOn(stateOf(r, w.self), key) {
			return vetoElectionUnderWay
		}
		began := time.Now()
		pctx, cancel := context.WithTimeout(ctx, crashProbeTimeout)
		err := w.probe(pctx, addr)
		cancel()
		switch {
		case ctx.Err() != nil:
			return vetoIgnored
		case listenprobe.Refused(err):
			refusedYet = true
		case err != nil:
			return vetoProbeFailed // a doubt: raft's timeouts decide
		case refusedYet || i+1 >= crashProbes:
			return vetoPortAccepts
		}
		// A refusal says how the port was when its probe began (a loaded
		// machine may answer it late): the last must begin after the
		// window, so that a port that came back within it is seen to.
		if refusedYet && !began.Before(end) {
			return noVeto
		}
	}
}

// askAll asks every voter of sc but the leader and this node, side by
// side, about leader, and returns the answers that came within
// crashAskTimeout from the voter asked. A voter that is shutting down
// answers nothing that counts.
func (w *leaderCrash) askAll(ctx context.Context, sc crashScope, leader int32) []LeaderContact {
	ctx, cancel := context.WithTimeout(ctx, crashAskTimeout)
	defer cancel()
	got := make([]*LeaderContact, len(sc.others))
	var wg sync.WaitGroup
	for i, id := range sc.others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := w.ask(ctx, id, w.addr(id, sc.addrs[id]), leader)
			if err == nil && c.NodeID == id && c.State != raft.Shutdown {
				got[i] = &c
			}
		}()
	}
	wg.Wait()
	var answers []LeaderContact
	for _, c := range got {
		if c != nil {
			answers = append(answers, *c)
		}
	}
	return answers
}

// judge decides at the window's end, from this node's own contact with
// leader key.leader and the other voters' answers, whether the leader is
// gone (noVeto), and if so this node's rank among the voters that may
// start the election: those that have not heard from it, the most up to
// date log first (ties: the lowest id). voters counts every voter, the
// leader included.
func judge(key crashKey, window time.Duration, voters int, self LeaderContact, answers []LeaderContact) (rank int, v crashVeto) {
	if movedOn(self, key) {
		return 0, vetoElectionUnderWay
	}
	if !silent(self, window) {
		return 0, vetoContact
	}
	quiet := []LeaderContact{self}
	hears := false
	for _, a := range answers {
		switch {
		case movedOn(a, key):
			return 0, vetoElectionUnderWay
		case a.Term < key.term:
			// It lags behind this leadership: it says nothing of it.
		case silent(a, window):
			quiet = append(quiet, a)
		default:
			hears = true
		}
	}
	if len(quiet) < voters/2+1 {
		if hears {
			return 0, vetoOthersHear
		}
		return 0, vetoUnanswered
	}
	slices.SortFunc(quiet, moreUpToDate)
	return slices.IndexFunc(quiet, func(c LeaderContact) bool { return c.NodeID == self.NodeID }), noVeto
}

// movedOn reports whether c has left the leadership of key: a later term,
// a leadership of its own, another leader in the same term, or (for this
// node's own view) no longer following anyone.
func movedOn(c LeaderContact, key crashKey) bool {
	switch {
	case c.Term > key.term, c.State != raft.Follower && c.State != raft.Candidate:
		return true
	}
	return c.Term == key.term && c.Leader != 0 && c.Leader != key.leader
}

// silent reports whether c has not heard from the leader for the window,
// less its contactSlack.
func silent(c LeaderContact, window time.Duration) bool {
	return c.Since < 0 || c.Since >= window-contactSlack(window)
}

// contactSlack: requests a dying leader had sent just before its end may
// be read a while after one of its connections is seen to end (each
// connection has a reader of its own, which a loaded machine may run
// late). A request read within a quarter of the window of that end, and a
// voter that heard the leader no later than three quarters of the window
// ago, are still taken as silence. Since the window is at least two of
// the leader's longest heartbeat intervals, that is still one and a half
// of them: a voter that hears the leader heard it a heartbeat ago.
func contactSlack(window time.Duration) time.Duration { return window / 4 }

// moreUpToDate orders contacts by their logs as an election does, the
// most up to date first, then by node id.
func moreUpToDate(a, b LeaderContact) int {
	if c := cmp.Compare(b.LastTerm, a.LastTerm); c != 0 {
		return c
	}
	if c := cmp.Compare(b.LastIndex, a.LastIndex); c != 0 {
		return c
	}
	return cmp.Compare(a.NodeID, b.NodeID)
}

// silentIDs names, for the log, the voters that judge counted as silent.
func silentIDs(self LeaderContact, answers []LeaderContact, window time.Duration, key crashKey) []int32 {
	ids := []int32{self.NodeID}
	for _, a := range answers {
		if !movedOn(a, key) && a.Term == key.term && silent(a, window) {
			ids = append(ids, a.NodeID)
		}
	}
	slices.Sort(ids)
	return ids
}

// stop ends the looks under way and waits for them.
func (w *leaderCrash) stop() {
	// Under mu, so that no look starts (wg.Add) once it is cancelled.
	w.mu.Lock()
	w.cancel()
	w.mu.Unlock()
	w.wg.Wait()
}
