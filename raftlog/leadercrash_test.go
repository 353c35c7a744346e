package raftlog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/internal/listenprobe"
	"github.com/keel-dev/keel/internal/poll"
)

// crashRaft is a raftView whose answers a test sets.
type crashRaft struct {
	mu     sync.Mutex
	state  raft.RaftState
	leader int32
	term   uint64
	voters []int32
	last   [2]uint64 // index, term
}

func (f *crashRaft) State() raft.RaftState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state
}

func (f *crashRaft) LeaderWithID() (raft.ServerAddress, raft.ServerID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leader == 0 {
		return "", ""
	}
	return raft.ServerAddress(fakeAddr(f.leader)), ServerID(f.leader)
}

func (f *crashRaft) CurrentTerm() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.term
}

func (f *crashRaft) LastEntry() (uint64, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last[0], f.last[1]
}

func (f *crashRaft) GetConfiguration() raft.ConfigurationFuture {
	var c raft.Configuration
	for _, id := range f.voters {
		c.Servers = append(c.Servers, raft.Server{Suffrage: raft.Voter, ID: ServerID(id), Address: raft.ServerAddress(fakeAddr(id))})
	}
	return crashConfFuture{c}
}

// set changes what the fake raft says: a new leader or term (0 keeps it).
func (f *crashRaft) set(leader int32, term uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if leader != 0 {
		f.leader = leader
	}
	if term != 0 {
		f.term = term
	}
}

type crashConfFuture struct{ c raft.Configuration }

func (f crashConfFuture) Error() error                      { return nil }
func (f crashConfFuture) Index() uint64                     { return 1 }
func (f crashConfFuture) Configuration() raft.Configuration { return f.c }

func fakeAddr(id int32) string { return fmt.Sprintf("node-%d:9093", id) }

func fakeID(addr string) int32 {
	var id int32
	_, _ = fmt.Sscanf(addr, "node-%d:9093", &id)
	return id
}

// probeAnswer is what a dial to the leader's fake address does.
type probeAnswer int

const (
	accepts      probeAnswer = iota
	refuses                  // nothing listens
	closesAtOnce             // a proxy in front of nothing, or a port full of strangers
	timesOut
	heardAgain  // refuses, and a request from the leader arrives
	refusesLate // refuses, but answers only after the window (a loaded machine)
)

func (a probeAnswer) err() error {
	switch a {
	case refuses, heardAgain, refusesLate:
		return fmt.Errorf("dial tcp: %w", syscall.ECONNREFUSED)
	case closesAtOnce:
		return listenprobe.ErrClosedAtOnce
	case timesOut:
		return context.DeadlineExceeded
	}
	return nil
}

const (
	testWindow = minCrashConfirm
	silence    = time.Second          // an answer that has not heard from the leader
	hearing    = 5 * time.Millisecond // one that has, a heartbeat ago
)

// peer is a voter's answer in a test: a zero Term is the leader's term, 7.
func peer(since time.Duration, lastIndex, term uint64) LeaderContact {
	return LeaderContact{State: raft.Follower, Leader: 1, Term: term, Since: since, LastIndex: lastIndex, LastTerm: 7}
}

// TestLeaderCrash_Judge: the decision at the window's end, from this node's
// own contact with leader 1 (term 7) and the other voters' answers.
func TestLeaderCrash_Judge(t *testing.T) {
	key := crashKey{leader: 1, term: 7}
	me := func(id int32, lastIndex uint64) LeaderContact {
		c := peer(silence, lastIndex, 7)
		c.NodeID = id
		return c
	}
	other := func(id int32, c LeaderContact) LeaderContact {
		c.NodeID = id
		if c.Term == 0 {
			c.Term = 7
		}
		return c
	}
	tests := []struct {
		name     string
		voters   int
		self     LeaderContact
		answers  []LeaderContact
		wantRank int
		wantVeto crashVeto
	}{
		// Firing.
		{name: "three voters, the other silent too, equal logs: the lower id goes first", voters: 3, self: me(2, 10),
			answers: []LeaderContact{other(3, peer(silence, 10, 0))}, wantRank: 0, wantVeto: noVeto},
		{name: "equal logs, this node has the higher id: second", voters: 3, self: me(3, 10),
			answers: []LeaderContact{other(2, peer(silence, 10, 0))}, wantRank: 1, wantVeto: noVeto},
		{name: "the other has a longer log: it goes first, though its id is higher", voters: 3, self: me(2, 9),
			answers: []LeaderContact{other(3, peer(silence, 10, 0))}, wantRank: 1, wantVeto: noVeto},
		{name: "the other's last entry has a later term: it goes first", voters: 3, self: me(2, 12),
			answers: []LeaderContact{other(3, LeaderContact{State: raft.Follower, Leader: 1, Since: silence, LastIndex: 10, LastTerm: 8})}, wantRank: 1, wantVeto: noVeto},
		{name: "this node's log is the longest: first, though its id is higher", voters: 3, self: me(3, 11),
			answers: []LeaderContact{other(2, peer(silence, 10, 0))}, wantRank: 0, wantVeto: noVeto},
		{name: "a voter that never heard from the leader since it started is silent", voters: 3, self: me(2, 10),
			answers: []LeaderContact{other(3, peer(-1, 10, 0))}, wantRank: 0, wantVeto: noVeto},
		{name: "a voter already a candidate (its own timeout) in the same term is silent", voters: 3, self: me(2, 10),
			answers: []LeaderContact{other(3, LeaderContact{State: raft.Candidate, Since: silence, LastIndex: 10, LastTerm: 7})}, wantRank: 0, wantVeto: noVeto},
		{name: "heard within the contact slack of the window: silent", voters: 3, self: me(2, 10),
			answers: []LeaderContact{other(3, peer(testWindow-contactSlack(testWindow), 10, 0))}, wantRank: 0, wantVeto: noVeto},
		{name: "five voters, three silent: the most up to date first", voters: 5, self: me(2, 10),
			answers: []LeaderContact{other(3, peer(silence, 12, 0)), other(4, peer(silence, 11, 0)), other(5, peer(hearing, 13, 0))}, wantRank: 2, wantVeto: noVeto},
		{name: "five voters, a silent quorum though one still hears", voters: 5, self: me(2, 10),
			answers: []LeaderContact{other(3, peer(silence, 10, 0)), other(4, peer(silence, 10, 0)), other(5, peer(hearing, 10, 0))}, wantRank: 0, wantVeto: noVeto},

		// Vetoes.
		{name: "a blip of one link: the other voter still hears the leader", voters: 3, self: me(2, 10),
			answers: []LeaderContact{other(3, peer(hearing, 10, 0))}, wantVeto: vetoOthersHear},
		{name: "heard a little less than the window ago (past the slack): still hears", voters: 3, self: me(2, 10),
			answers: []LeaderContact{other(3, peer(testWindow-contactSlack(testWindow)-time.Millisecond, 10, 0))}, wantVeto: vetoOthersHear},
		{name: "five voters, two silent, two hear", voters: 5, self: me(2, 10),
			answers: []LeaderContact{other(3, peer(silence, 10, 0)), other(4, peer(hearing, 10, 0)), other(5, peer(hearing, 10, 0))}, wantVeto: vetoOthersHear},
		{name: "the other voter did not answer", voters: 3, self: me(2, 10), wantVeto: vetoUnanswered},
		{name: "five voters, two silent, the others did not answer", voters: 5, self: me(2, 10),
			answers: []LeaderContact{other(3, peer(silence, 10, 0))}, wantVeto: vetoUnanswered},
		{name: "a voter that lags behind the term says nothing of this leadership", voters: 3, self: me(2, 10),
			answers: []LeaderContact{other(3, peer(silence, 10, 6))}, wantVeto: vetoUnanswered},
		{name: "this node heard from the leader within the window", voters: 3, self: func() LeaderContact { c := me(2, 10); c.Since = hearing; return c }(),
			answers: []LeaderContact{other(3, peer(silence, 10, 0))}, wantVeto: vetoContact},
		{name: "the other voter's term moved: an election is under way", voters: 3, self: me(2, 10),
			answers: []LeaderContact{other(3, peer(silence, 10, 8))}, wantVeto: vetoElectionUnderWay},
		{name: "the other voter leads", voters: 3, self: me(2, 10),
			answers: []LeaderContact{other(3, LeaderContact{State: raft.Leader, Term: 8, Since: silence, LastIndex: 10, LastTerm: 7})}, wantVeto: vetoElectionUnderWay},
		{name: "the other voter follows another leader", voters: 3, self: me(2, 10),
			answers: []LeaderContact{other(3, LeaderContact{State: raft.Follower, Leader: 4, Since: silence, LastIndex: 10, LastTerm: 7})}, wantVeto: vetoElectionUnderWay},
		{name: "this node's term moved", voters: 3, self: func() LeaderContact { c := me(2, 10); c.Term = 8; return c }(),
			answers: []LeaderContact{other(3, peer(silence, 10, 0))}, wantVeto: vetoElectionUnderWay},
		{name: "this node leads", voters: 3, self: func() LeaderContact { c := me(2, 10); c.State = raft.Leader; return c }(),
			answers: []LeaderContact{other(3, peer(silence, 10, 0))}, wantVeto: vetoElectionUnderWay},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rank, v := judge(key, testWindow, tt.voters, tt.self, tt.answers)
			if v != tt.wantVeto || v == noVeto && rank != tt.wantRank {
				t.Errorf("judge = rank %d, veto %v; want rank %d, veto %v", rank, v, tt.wantRank, tt.wantVeto)
			}
		})
	}
}

// TestLeaderCrash_Look drives whole looks with a fake raft, fake probes
// of the leader's port and fake answers from the other voters: this node
// is 2 in a quorum whose leader is 1, in term 7, unless a case says
// otherwise.
func TestLeaderCrash_Look(t *testing.T) {
	tests := []struct {
		name   string
		self   int32          // 0: 2
		voters []int32        // nil: 1, 2, 3
		state  raft.RaftState // Follower unless set
		peer   int32          // whose connection ended; 0: 1, the leader
		plain  bool           // from a plaintext connection: peer unknown (0)
		probes []probeAnswer  // the leader's port, one per probe; the last repeats
		// answers are the other voters'; one that is missing does not
		// answer.
		answers map[int32]LeaderContact
		// won, if set, is the leader this node follows once the others
		// have been asked at the window's end; moved the term it is in.
		won      int32
		moved    uint64
		want     crashVeto // noVeto: an election started
		wantLook bool      // a look ran at all
	}{
		{name: "leader gone: its port refuses, the other voter has not heard from it",
			probes: []probeAnswer{refuses}, answers: map[int32]LeaderContact{3: peer(silence, 10, 7)}, want: noVeto, wantLook: true},
		{name: "leader gone, its listener closed a moment after its connections",
			probes: []probeAnswer{accepts, accepts, refuses}, answers: map[int32]LeaderContact{3: peer(silence, 10, 7)}, want: noVeto, wantLook: true},
		{name: "leader gone behind a proxy that accepts and closes",
			probes: []probeAnswer{closesAtOnce}, answers: map[int32]LeaderContact{3: peer(silence, 10, 7)}, want: noVeto, wantLook: true},
		{name: "leader alive: its port accepts every probe",
			probes: []probeAnswer{accepts}, answers: map[int32]LeaderContact{3: peer(silence, 10, 7)}, want: vetoPortAccepts, wantLook: true},
		{name: "a refusal shorter than the window: a probe is accepted after it",
			probes: []probeAnswer{refuses, refuses, accepts}, answers: map[int32]LeaderContact{3: peer(silence, 10, 7)}, want: vetoPortAccepts, wantLook: true},
		{name: "a refusal answered only after the window, then the port is back: the window waits for a probe begun after it",
			probes: []probeAnswer{refuses, refusesLate, accepts}, answers: map[int32]LeaderContact{3: peer(silence, 10, 7)}, want: vetoPortAccepts, wantLook: true},
		{name: "leader silent: its dial times out",
			probes: []probeAnswer{timesOut}, answers: map[int32]LeaderContact{3: peer(silence, 10, 7)}, want: vetoProbeFailed, wantLook: true},
		{name: "the leader is heard from again after its connection ended",
			probes: []probeAnswer{refuses, heardAgain, refuses}, answers: map[int32]LeaderContact{3: peer(silence, 10, 7)}, want: vetoContact, wantLook: true},
		{name: "a blip of this node's link: the other voter still hears the leader",
			probes: []probeAnswer{refuses}, answers: map[int32]LeaderContact{3: peer(hearing, 10, 7)}, want: vetoOthersHear, wantLook: true},
		{name: "a port saturated by strangers closes at once, but the other voter hears the leader",
			probes: []probeAnswer{closesAtOnce}, answers: map[int32]LeaderContact{3: peer(hearing, 10, 7)}, want: vetoOthersHear, wantLook: true},
		{name: "the other voter does not answer: no quorum says the leader is gone",
			probes: []probeAnswer{refuses}, want: vetoUnanswered, wantLook: true},
		{name: "the other voter is shutting down: its answer does not count",
			probes: []probeAnswer{refuses}, answers: map[int32]LeaderContact{3: {State: raft.Shutdown, Term: 7, Since: silence}}, want: vetoUnanswered, wantLook: true},
		{name: "the other voter is in a later term: its election is under way",
			probes: []probeAnswer{refuses}, answers: map[int32]LeaderContact{3: peer(silence, 10, 8)}, want: vetoElectionUnderWay, wantLook: true},
		{name: "five voters, a silent quorum", voters: []int32{1, 2, 3, 4, 5},
			probes: []probeAnswer{refuses}, answers: map[int32]LeaderContact{3: peer(silence, 10, 7), 4: peer(silence, 10, 7), 5: peer(hearing, 10, 7)}, want: noVeto, wantLook: true},
		{name: "five voters, two still hear the leader", voters: []int32{1, 2, 3, 4, 5},
			probes: []probeAnswer{refuses}, answers: map[int32]LeaderContact{3: peer(silence, 10, 7), 4: peer(hearing, 10, 7), 5: peer(hearing, 10, 7)}, want: vetoOthersHear, wantLook: true},
		{name: "a shorter log: the other voter goes first and wins",
			probes: []probeAnswer{refuses}, answers: map[int32]LeaderContact{3: peer(silence, 11, 7)}, won: 3, moved: 8, want: vetoElectionUnderWay, wantLook: true},
		{name: "second in rank, the first's election under way (this node's term moved)", self: 3,
			probes: []probeAnswer{refuses}, answers: map[int32]LeaderContact{2: peer(silence, 10, 7)}, moved: 8, want: vetoElectionUnderWay, wantLook: true},
		{name: "second in rank, nobody has won meanwhile: it steps in", self: 3,
			probes: []probeAnswer{refuses}, answers: map[int32]LeaderContact{2: peer(silence, 10, 7)}, want: noVeto, wantLook: true},
		{name: "connection of a voter that is not the leader", peer: 3,
			probes: []probeAnswer{refuses}, answers: map[int32]LeaderContact{3: peer(silence, 10, 7)}},
		{name: "plaintext: a connection from nobody knows whom is taken as the leader's", plain: true,
			probes: []probeAnswer{refuses}, answers: map[int32]LeaderContact{3: peer(silence, 10, 7)}, want: noVeto, wantLook: true},
		{name: "plaintext: a stranger's connection while the leader is alive", plain: true,
			probes: []probeAnswer{accepts}, answers: map[int32]LeaderContact{3: peer(hearing, 10, 7)}, want: vetoPortAccepts, wantLook: true},
		{name: "this node is a candidate already", state: raft.Candidate,
			probes: []probeAnswer{refuses}, answers: map[int32]LeaderContact{3: peer(silence, 10, 7)}},
		{name: "this node is not a voter", self: 4,
			probes: []probeAnswer{refuses}, answers: map[int32]LeaderContact{2: peer(silence, 10, 7), 3: peer(silence, 10, 7)}, want: vetoIgnored, wantLook: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			self, voters, from := cmp.Or(tt.self, 2), tt.voters, cmp.Or(tt.peer, 1)
			if voters == nil {
				voters = []int32{1, 2, 3}
			}
			fr := &crashRaft{state: tt.state, leader: 1, term: 7, voters: voters, last: [2]uint64{10, 7}}
			w, elected := newTestCrash(t, self, fr)
			var mu sync.Mutex
			probes := 0
			w.probe = func(_ context.Context, addr string) error {
				if fakeID(addr) != 1 {
					t.Errorf("probed %s: only the leader's port is probed", addr)
				}
				mu.Lock()
				a := tt.probes[min(probes, len(tt.probes)-1)]
				probes++
				mu.Unlock()
				switch a {
				case heardAgain:
					w.heard.mark(1, time.Now())
				case refusesLate:
					time.Sleep(testWindow + 10*time.Millisecond)
				}
				return a.err()
			}
			asked := map[int32]int{}
			w.ask = func(_ context.Context, id int32, addr string, leader int32) (LeaderContact, error) {
				if fakeID(addr) != id || leader != 1 {
					t.Errorf("asked node %d at %s about %d", id, addr, leader)
				}
				mu.Lock()
				asked[id]++
				final := asked[id] == 2
				mu.Unlock()
				if final && (tt.won != 0 || tt.moved != 0) {
					fr.set(tt.won, tt.moved)
				}
				c, ok := tt.answers[id]
				if !ok {
					return LeaderContact{}, errors.New("connection refused")
				}
				c.NodeID = id
				return c, nil
			}
			if tt.plain {
				from = 0
			}
			w.connEnded(from)
			w.connEnded(from) // the leader's other connections: one look
			w.wg.Wait()       // the look, to its end
			w.stop()
			wantElected := tt.wantLook && tt.want == noVeto
			if got := elected(); got != wantElected {
				t.Errorf("election started: %v, want %v (probes %d, asked %v)", got, wantElected, probes, asked)
			}
			if got := w.elected.Load(); got != boolCount(wantElected) {
				t.Errorf("elected counter %d, want %d", got, boolCount(wantElected))
			}
			if got := w.looks.Load(); got != boolCount(tt.wantLook) {
				t.Errorf("looks %d, want %d", got, boolCount(tt.wantLook))
			}
			for v := range numCrashVetoes {
				want := boolCount(tt.wantLook && tt.want == v)
				if got := w.vetoes[v].Load(); got != want {
					t.Errorf("vetoes %s: %d, want %d", v, got, want)
				}
			}
		})
	}
}

func boolCount(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// newTestCrash is a leaderCrash for node self on fr, with the test
// window, and a report of whether it started an election.
func newTestCrash(t *testing.T, self int32, fr *crashRaft) (*leaderCrash, func() bool) {
	var mu sync.Mutex
	elected := false
	w := newLeaderCrash(self, testLogger(t), testWindow, newHeardFrom(),
		func(_ int32, conf raft.ServerAddress) string { return string(conf) },
		func() error { mu.Lock(); elected = true; mu.Unlock(); return nil },
		func(context.Context, int32, string, int32) (LeaderContact, error) {
			return LeaderContact{}, errors.New("no answer")
		})
	w.setRaft(fr)
	t.Cleanup(w.stop)
	return w, func() bool { mu.Lock(); defer mu.Unlock(); return elected }
}

// TestLeaderCrash_LookAfterLeaderAlive: a look that found the leader alive
// does not switch the mechanism off for the rest of its term: the next
// connection to end, when the leader has died, is looked at and elects.
func TestLeaderCrash_LookAfterLeaderAlive(t *testing.T) {
	fr := &crashRaft{state: raft.Follower, leader: 1, term: 7, voters: []int32{1, 2, 3}, last: [2]uint64{10, 7}}
	w, elected := newTestCrash(t, 2, fr)
	var mu sync.Mutex
	dead := false
	w.probe = func(context.Context, string) error {
		mu.Lock()
		defer mu.Unlock()
		if dead {
			return refuses.err()
		}
		return accepts.err()
	}
	w.ask = func(_ context.Context, id int32, _ string, _ int32) (LeaderContact, error) {
		c := peer(silence, 10, 7)
		c.NodeID = id
		return c, nil
	}
	w.connEnded(1) // a reset: the leader's port still accepts
	w.wg.Wait()
	if elected() || w.vetoes[vetoPortAccepts].Load() != 1 {
		t.Fatalf("after a reset: elected %v, vetoes %d; want no election, one port_accepts veto", elected(), w.vetoes[vetoPortAccepts].Load())
	}
	mu.Lock()
	dead = true
	mu.Unlock()
	w.connEnded(1) // the kill, in the same term
	w.wg.Wait()
	if !elected() {
		t.Error("the leader's death after a harmless reset in its term started no election")
	}
}

// TestLeaderCrash_StopEndsTheWait: a node shutting down does not wait out
// its rank's delay, nor start an election after it.
func TestLeaderCrash_StopEndsTheWait(t *testing.T) {
	fr := &crashRaft{state: raft.Follower, leader: 1, term: 3, voters: []int32{1, 2, 3, 4, 5}, last: [2]uint64{10, 3}}
	w, elected := newTestCrash(t, 5, fr)
	w.probe = func(context.Context, string) error { return refuses.err() }
	asked := make(chan struct{}, 16)
	w.ask = func(_ context.Context, id int32, _ string, _ int32) (LeaderContact, error) {
		asked <- struct{}{}
		c := peer(silence, 10, 3)
		c.NodeID = id
		return c, nil
	}
	w.connEnded(1)
	// Two questions to each of the three others; then the rank-3 wait.
	for range 6 {
		<-asked
	}
	w.stop()
	if elected() {
		t.Fatal("an election was started after stop")
	}
}

// crashCluster starts a 3-node in-process cluster with the crash election
// on and timing's timeouts; the nodes answer each other's questions
// directly.
func crashCluster(t *testing.T, timing Timing) []*testNode {
	logger := testLogger(t)
	var mu sync.Mutex
	byID := map[int32]*Node{}
	ask := func(_ context.Context, id int32, _ string, leader int32) (LeaderContact, error) {
		mu.Lock()
		n := byID[id]
		mu.Unlock()
		if n == nil {
			return LeaderContact{}, errors.New("not started")
		}
		return n.LeaderContact(leader), nil
	}
	timing.CrashElection = true
	nodes := startClusterWith(t, 3, func() Config {
		return Config{Timing: timing, Logger: logger, LogStore: LogStoreBoltDB, AskLeaderContact: ask}
	})
	mu.Lock()
	for _, n := range nodes {
		byID[n.id] = n.node
	}
	mu.Unlock()
	return nodes
}

// TestCluster_LeaderCrashElectsAtOnce kills the leader of a real 3-node
// cluster with 1 s raft timeouts: the crash election, which takes its
// window and milliseconds, elects the next leader, once (the second
// survivor sees it won), before raft's timeouts could.
func TestCluster_LeaderCrashElectsAtOnce(t *testing.T) {
	nodes := crashCluster(t, Timing{
		HeartbeatTimeout:   time.Second,
		ElectionTimeout:    time.Second,
		LeaderLeaseTimeout: time.Second,
		CommitTimeout:      5 * time.Millisecond,
	})
	old := waitForLeader(t, nodes)
	if err := apply(t, nodes, "before").Error(); err != nil {
		t.Fatal(err)
	}
	var rest []*testNode
	for _, n := range nodes {
		if n != old {
			rest = append(rest, n)
			// The followers hear the leader's heartbeats (every 100 ms).
			if c := n.node.LeaderContact(old.id); c.Since < 0 || c.Since > time.Second || c.Leader != old.id {
				t.Errorf("node %d's contact with the leader: %+v", n.id, c)
			}
		}
	}
	// A killed process's port closes with its connections: the listener
	// first, then the node's connections.
	if err := old.mux.Close(); err != nil {
		t.Fatal(err)
	}
	if err := old.node.Close(); err != nil {
		t.Fatal(err)
	}
	next := waitForLeader(t, rest)
	var started uint64
	for _, n := range rest {
		started += n.node.crash.elected.Load()
	}
	if started != 1 {
		t.Errorf("crash elections started: %d, want 1", started)
	}
	if err := apply(t, rest, "after").Error(); err != nil {
		t.Fatalf("write at the new leader %d: %v", next.id, err)
	}
	waitForEntries(t, rest, []string{"before", "after"})
}

// TestCluster_LeaderAliveNoCrashElection: a leader that closes its
// connections but still listens, and that the other follower still hears,
// keeps leading, and the looks say why.
func TestCluster_LeaderAliveNoCrashElection(t *testing.T) {
	nodes := crashCluster(t, testTiming())
	leader := waitForLeader(t, nodes)
	var followers []*testNode
	for _, n := range nodes {
		if n != leader {
			followers = append(followers, n)
		}
	}
	// Close the connections the leader dialled: its followers see them end,
	// dial it, and are accepted.
	leader.node.stream.mu.Lock()
	var conns []*layerConn
	for c := range leader.node.stream.conns {
		if c.target != 0 {
			conns = append(conns, c)
		}
	}
	leader.node.stream.mu.Unlock()
	if len(conns) == 0 {
		t.Fatal("the leader holds no outbound raft connection")
	}
	for _, c := range conns {
		_ = c.Conn.Close()
	}
	poll.Until(t, waitTimeout, "both followers to look at the leader", func() bool {
		for _, n := range followers {
			if n.node.crash.looks.Load() == 0 {
				return false
			}
		}
		return true
	})
	for _, n := range followers {
		n.node.crash.stop() // waits for the look to end
		if got := n.node.crash.elected.Load(); got != 0 {
			t.Errorf("node %d started %d crash elections against a leader that listens", n.id, got)
		}
		// Its port accepts; and it may reconnect and be heard first.
		if got := n.node.CrashElectionVetoes("port_accepts") + n.node.CrashElectionVetoes("contact"); got == 0 {
			t.Errorf("node %d counted no port_accepts or contact veto", n.id)
		}
	}
}
