package raftlog

import (
	"context"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/internal/poll"
)

// crashRaft is a raftView whose answers a test sets.
type crashRaft struct {
	mu     sync.Mutex
	state  raft.RaftState
	leader int32
	term   uint64
	voters []int32
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

func (f *crashRaft) setLeader(id int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leader = id
}

func (f *crashRaft) CurrentTerm() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.term
}

func (f *crashRaft) GetConfiguration() raft.ConfigurationFuture {
	var c raft.Configuration
	for _, id := range f.voters {
		c.Servers = append(c.Servers, raft.Server{Suffrage: raft.Voter, ID: ServerID(id), Address: raft.ServerAddress(fakeAddr(id))})
	}
	return crashConfFuture{c}
}

type crashConfFuture struct{ c raft.Configuration }

func (f crashConfFuture) Error() error                      { return nil }
func (f crashConfFuture) Index() uint64                     { return 1 }
func (f crashConfFuture) Configuration() raft.Configuration { return f.c }

func fakeAddr(id int32) string { return fmt.Sprintf("node-%d:9093", id) }

// probeAnswer is what a dial to a fake address does.
type probeAnswer int

const (
	accepts probeAnswer = iota
	refuses
	timesOut
)

func (a probeAnswer) err() error {
	switch a {
	case refuses:
		return fmt.Errorf("dial tcp: %w", syscall.ECONNREFUSED)
	case timesOut:
		return context.DeadlineExceeded
	}
	return nil
}

// TestLeaderCrash_Rules drives leaderCrash with a fake raft and fake dials:
// this node is 2 in a quorum whose leader is 1, unless a case says
// otherwise.
func TestLeaderCrash_Rules(t *testing.T) {
	type probes map[int32][]probeAnswer // by node, one per successive dial; the last repeats
	tests := []struct {
		name     string
		self     int32
		voters   []int32
		state    raft.RaftState
		peer     int32 // whose connection ended
		appended bool
		probes   probes
		// newLeader and newTerm, if set, are the leader raft names and its
		// term once the other voters have been dialled.
		newLeader int32
		newTerm   uint64
		wantElect bool
	}{
		{name: "leader gone, this node ranks first", self: 2, voters: []int32{1, 2, 3}, peer: 1, appended: true,
			probes: probes{1: {refuses}, 3: {accepts}}, wantElect: true},
		{name: "leader gone, listener closed a moment after its connections", self: 2, voters: []int32{1, 2, 3}, peer: 1, appended: true,
			probes: probes{1: {accepts, refuses}, 3: {accepts}}, wantElect: true},
		{name: "leader alive: it accepts every dial", self: 2, voters: []int32{1, 2, 3}, peer: 1, appended: true,
			probes: probes{1: {accepts}, 3: {accepts}}},
		{name: "leader silent: its dial times out", self: 2, voters: []int32{1, 2, 3}, peer: 1, appended: true,
			probes: probes{1: {timesOut}, 3: {accepts}}},
		{name: "no quorum without the leader: a cut of this node's own", self: 2, voters: []int32{1, 2, 3}, peer: 1, appended: true,
			probes: probes{1: {refuses}, 3: {refuses}}},
		{name: "five voters, two reachable besides this one", self: 2, voters: []int32{1, 2, 3, 4, 5}, peer: 1, appended: true,
			probes: probes{1: {refuses}, 3: {accepts}, 4: {accepts}, 5: {refuses}}, wantElect: true},
		{name: "five voters, one reachable besides this one", self: 2, voters: []int32{1, 2, 3, 4, 5}, peer: 1, appended: true,
			probes: probes{1: {refuses}, 3: {accepts}, 4: {timesOut}, 5: {refuses}}},
		{name: "second in rank, nobody has won meanwhile", self: 3, voters: []int32{1, 2, 3}, peer: 1, appended: true,
			probes: probes{1: {refuses}, 2: {accepts}}, wantElect: true},
		{name: "second in rank, the first has won", self: 3, voters: []int32{1, 2, 3}, peer: 1, appended: true,
			probes: probes{1: {refuses}, 2: {accepts}}, newLeader: 2},
		{name: "second in rank, the first's election under way (this node's term moved)", self: 3, voters: []int32{1, 2, 3}, peer: 1, appended: true,
			probes: probes{1: {refuses}, 2: {accepts}}, newTerm: 8},
		{name: "the first in rank is gone too: the second acts", self: 3, voters: []int32{1, 2, 3, 4, 5}, peer: 1, appended: true,
			probes: probes{1: {refuses}, 2: {refuses}, 4: {accepts}, 5: {accepts}}, wantElect: true},
		{name: "connection of a voter that is not the leader", self: 2, voters: []int32{1, 2, 3}, peer: 3, appended: true,
			probes: probes{1: {refuses}, 3: {refuses}}},
		{name: "connection that carried no AppendEntries", self: 2, voters: []int32{1, 2, 3}, peer: 1, appended: false,
			probes: probes{1: {refuses}, 3: {accepts}}},
		{name: "this node is a candidate already", self: 2, voters: []int32{1, 2, 3}, state: raft.Candidate, peer: 1, appended: true,
			probes: probes{1: {refuses}, 3: {accepts}}},
		{name: "this node is not a voter", self: 4, voters: []int32{1, 2, 3}, peer: 1, appended: true,
			probes: probes{1: {refuses}, 2: {accepts}, 3: {accepts}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fr := &crashRaft{state: tt.state, leader: 1, term: 7, voters: tt.voters}
			if tt.state == 0 {
				fr.state = raft.Follower
			}
			var mu sync.Mutex
			dials := map[string]int{}
			elected := 0
			w := newLeaderCrash(tt.self, testLogger(t),
				func(_ int32, conf raft.ServerAddress) string { return string(conf) },
				func() error { mu.Lock(); elected++; mu.Unlock(); return nil })
			w.probe = func(_ context.Context, addr string) error {
				mu.Lock()
				defer mu.Unlock()
				var id int32
				_, _ = fmt.Sscanf(addr, "node-%d:9093", &id)
				ans := tt.probes[id]
				n := dials[addr]
				dials[addr]++
				if id != 1 && tt.newLeader != 0 {
					fr.setLeader(tt.newLeader)
				}
				if id != 1 && tt.newTerm != 0 {
					fr.mu.Lock()
					fr.term = tt.newTerm
					fr.mu.Unlock()
				}
				if len(ans) == 0 {
					return refuses.err()
				}
				return ans[min(n, len(ans)-1)].err()
			}
			w.setRaft(fr)
			w.connEnded(tt.peer, tt.appended)
			w.connEnded(tt.peer, tt.appended) // the leader's other connections: one look
			w.wg.Wait()                       // the look, to its end
			w.stop()
			mu.Lock()
			defer mu.Unlock()
			want := 0
			if tt.wantElect {
				want = 1
			}
			if elected != want {
				t.Errorf("elections started: %d, want %d (dials: %v)", elected, want, dials)
			}
			if got := w.elected.Load(); got != uint64(want) {
				t.Errorf("elected counter %d, want %d", got, want)
			}
		})
	}
}

// TestLeaderCrash_StopEndsTheWait: a node shutting down does not wait out
// its rank's delay, nor start an election after it.
func TestLeaderCrash_StopEndsTheWait(t *testing.T) {
	fr := &crashRaft{state: raft.Follower, leader: 1, term: 3, voters: []int32{1, 2, 3, 4, 5}}
	elected := make(chan struct{}, 1)
	w := newLeaderCrash(5, testLogger(t), func(_ int32, conf raft.ServerAddress) string { return string(conf) },
		func() error { elected <- struct{}{}; return nil })
	dialled := make(chan struct{}, 16)
	w.probe = func(_ context.Context, addr string) error {
		dialled <- struct{}{}
		if addr == fakeAddr(1) {
			return refuses.err()
		}
		return nil
	}
	w.setRaft(fr)
	w.connEnded(1, true)
	// The leader's dial and the three others'; then the rank-3 wait.
	for range 4 {
		<-dialled
	}
	w.stop()
	select {
	case <-elected:
		t.Fatal("an election was started after stop")
	default:
	}
}

// TestCluster_LeaderCrashElectsAtOnce kills the leader of a real 3-node
// cluster with 1 s raft timeouts: the crash election, which takes
// milliseconds, elects the next leader, once (the second survivor sees it
// won), before raft's timeouts could.
func TestCluster_LeaderCrashElectsAtOnce(t *testing.T) {
	logger := testLogger(t)
	slow := Timing{
		HeartbeatTimeout:   time.Second,
		ElectionTimeout:    time.Second,
		LeaderLeaseTimeout: time.Second,
		CommitTimeout:      5 * time.Millisecond,
		CrashElection:      true,
	}
	nodes := startClusterWith(t, 3, func() Config {
		return Config{Timing: slow, Logger: logger, LogStore: LogStoreBoltDB}
	})
	old := waitForLeader(t, nodes)
	if err := apply(t, nodes, "before").Error(); err != nil {
		t.Fatal(err)
	}
	var rest []*testNode
	for _, n := range nodes {
		if n != old {
			rest = append(rest, n)
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

// TestCluster_LeaderAliveNoCrashElection: a leader that closes a connection
// but still listens keeps leading.
func TestCluster_LeaderAliveNoCrashElection(t *testing.T) {
	logger := testLogger(t)
	nodes := startClusterWith(t, 3, func() Config {
		tm := testTiming()
		tm.CrashElection = true
		return Config{Timing: tm, Logger: logger, LogStore: LogStoreBoltDB}
	})
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
	}
}

// TestProbeListener: a port that holds a new connection open is alive; one
// that accepts and closes at once (a proxy in front of a dead process) and
// one that nothing listens on are not.
func TestProbeListener(t *testing.T) {
	holds, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closes, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	goneAddr := gone.Addr().String()
	_ = gone.Close()
	var wg sync.WaitGroup
	serve := func(l net.Listener, hold bool) {
		defer wg.Done()
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if hold {
				held = append(held, c)
				continue
			}
			_ = c.Close()
		}
	}
	wg.Add(2)
	go serve(holds, true)
	go serve(closes, false)
	defer func() {
		_ = holds.Close()
		_ = closes.Close()
		wg.Wait()
	}()
	for _, tt := range []struct {
		name, addr  string
		wantRefused bool
	}{
		{"a listener that holds the connection", holds.Addr().String(), false},
		{"a listener that closes it at once", closes.Addr().String(), true},
		{"nothing listening", goneAddr, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), crashProbeTimeout)
			defer cancel()
			err := probeListener(ctx, tt.addr)
			if refused(err) != tt.wantRefused || (!tt.wantRefused && err != nil) {
				t.Errorf("probeListener = %v (refused: %v), want refused %v", err, refused(err), tt.wantRefused)
			}
		})
	}
}
