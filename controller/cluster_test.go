package controller

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/raftlog"
)

// testCluster is an in-process quorum on raft's in-memory transport with
// 50 ms timings: the controller's behaviour without sockets or disks.
type testCluster struct {
	t     *testing.T
	nodes map[int32]*testNode
	// sessionTimeout and now configure every node's controller; zero values
	// mean the defaults.
	sessionTimeout time.Duration
	now            func() time.Time
	// metrics gives every node a registry of its own (testNode.metrics).
	metrics bool
	// takeoverFault, when set, fails a takeover attempt on node id with
	// the error it returns.
	takeoverFault func(id int32) error
	// tune adjusts each node's controller config before it starts.
	tune func(id int32, cfg *Config)
}

// clusterOption adjusts a test cluster before its nodes start.
type clusterOption func(*testCluster)

func withSessions(timeout time.Duration, now func() time.Time) clusterOption {
	return func(c *testCluster) { c.sessionTimeout, c.now = timeout, now }
}

// withTune adjusts each node's controller config before it starts.
func withTune(tune func(id int32, cfg *Config)) clusterOption {
	return func(c *testCluster) { c.tune = tune }
}

// withTakeoverFault fails takeover attempts on the nodes for which fault
// returns an error.
func withTakeoverFault(fault func(id int32) error) clusterOption {
	return func(c *testCluster) { c.takeoverFault = fault }
}

type testNode struct {
	id     int32
	addr   raft.ServerAddress
	trans  *raft.InmemTransport
	logs   *raft.InmemStore
	snaps  *raft.InmemSnapshotStore
	fsm    *fsm.FSM
	raft   *raft.Raft
	ctrl   *Controller
	killed bool
	// metrics is the node's registry, with withMetrics.
	metrics *prometheus.Registry
}

func testLogger() *slog.Logger {
	if os.Getenv("KEEL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newTestCluster(t *testing.T, n int, opts ...clusterOption) *testCluster {
	t.Helper()
	c := &testCluster{t: t, nodes: map[int32]*testNode{}}
	for _, o := range opts {
		o(c)
	}
	var servers []raft.Server
	for i := 1; i <= n; i++ {
		id := int32(i)
		addr, trans := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("node-%d", i)))
		c.nodes[id] = &testNode{id: id, addr: addr, trans: trans, logs: raft.NewInmemStore(), snaps: raft.NewInmemSnapshotStore()}
		servers = append(servers, raft.Server{ID: raftlog.ServerID(id), Address: addr})
	}
	c.connectAll()
	for _, nd := range c.nodes {
		if err := raft.BootstrapCluster(c.raftConfig(nd.id, nil), nd.logs, nd.logs, nd.snaps, nd.trans, raft.Configuration{Servers: servers}); err != nil {
			t.Fatalf("bootstrap: %v", err)
		}
		c.start(nd)
	}
	t.Cleanup(c.shutdown)
	return c
}

func (c *testCluster) raftConfig(id int32, notify chan<- bool) *raft.Config {
	cfg := raft.DefaultConfig()
	cfg.LocalID = raftlog.ServerID(id)
	cfg.HeartbeatTimeout = 50 * time.Millisecond
	cfg.ElectionTimeout = 50 * time.Millisecond
	cfg.LeaderLeaseTimeout = 50 * time.Millisecond
	cfg.CommitTimeout = 5 * time.Millisecond
	cfg.NotifyCh = notify
	cfg.Logger = hclog.NewNullLogger()
	return cfg
}

func (c *testCluster) start(nd *testNode) {
	c.t.Helper()
	nd.fsm = fsm.New()
	applied := NewAppliedLog(nd.fsm, 0, 0)
	cfg := Config{NodeID: nd.id, ClusterID: "test-cluster", Logger: testLogger(), ApplyTimeout: time.Second,
		SessionTimeout: c.sessionTimeout, Now: c.now}
	if c.takeoverFault != nil {
		id := nd.id
		cfg.takeoverFault = func() error { return c.takeoverFault(id) }
	}
	if c.tune != nil {
		c.tune(nd.id, &cfg)
	}
	if c.metrics {
		// A restart registers on the same registry: Stop unregistered.
		if nd.metrics == nil {
			nd.metrics = prometheus.NewRegistry()
		}
		cfg.Metrics = nd.metrics
	}
	nd.ctrl = New(cfg, applied)
	r, err := raft.NewRaft(c.raftConfig(nd.id, nd.ctrl.NotifyCh()), raftlog.RaftFSM(applied), nd.logs, nd.logs, nd.snaps, nd.trans)
	if err != nil {
		c.t.Fatalf("raft for node %d: %v", nd.id, err)
	}
	nd.raft = r
	nd.ctrl.Start(r)
	nd.killed = false
}

func (c *testCluster) connectAll() {
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			if a != b {
				a.trans.Connect(b.addr, b.trans)
			}
		}
	}
}

// Kill stops a node as a crash would, keeping its stores for Restart.
func (c *testCluster) Kill(id int32) {
	c.t.Helper()
	nd := c.nodes[id]
	nd.ctrl.Stop()
	if err := nd.raft.Shutdown().Error(); err != nil {
		c.t.Fatalf("shutdown node %d: %v", id, err)
	}
	nd.killed = true
}

// Restart brings a killed node back on its old stores, with a new transport
// at the same address (raft closes a transport on shutdown).
func (c *testCluster) Restart(id int32) {
	c.t.Helper()
	nd := c.nodes[id]
	_, nd.trans = raft.NewInmemTransport(nd.addr)
	c.connectAll()
	c.start(nd)
}

// Partition cuts the given nodes off from all others.
func (c *testCluster) Partition(ids ...int32) {
	cut := map[int32]bool{}
	for _, id := range ids {
		cut[id] = true
	}
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			if cut[a.id] != cut[b.id] {
				a.trans.Disconnect(b.addr)
			}
		}
	}
}

// Heal reconnects every node.
func (c *testCluster) Heal() { c.connectAll() }

func (c *testCluster) shutdown() {
	for _, nd := range c.nodes {
		if !nd.killed {
			nd.ctrl.Stop()
			_ = nd.raft.Shutdown().Error()
		}
	}
}

func (c *testCluster) live() []*testNode {
	var out []*testNode
	for _, nd := range c.nodes {
		if !nd.killed {
			out = append(out, nd)
		}
	}
	return out
}

// waitFor polls cond every few milliseconds until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// WaitForActive waits until exactly one live node among ids (all live nodes
// when none given) is the active controller, and returns it.
func (c *testCluster) WaitForActive(timeout time.Duration, among ...int32) *testNode {
	c.t.Helper()
	candidates := c.live()
	if len(among) > 0 {
		candidates = nil
		for _, id := range among {
			candidates = append(candidates, c.nodes[id])
		}
	}
	var active *testNode
	waitFor(c.t, timeout, "one active controller", func() bool {
		active = nil
		n := 0
		for _, nd := range candidates {
			if ok, _ := nd.ctrl.Active(); ok {
				active, n = nd, n+1
			}
		}
		return n == 1
	})
	return active
}

// WaitForApplied waits until every live node has applied index.
func (c *testCluster) WaitForApplied(index uint64, timeout time.Duration) {
	c.t.Helper()
	waitFor(c.t, timeout, fmt.Sprintf("every live node to apply index %d", index), func() bool {
		for _, nd := range c.live() {
			if nd.fsm.Image().Offset < index {
				return false
			}
		}
		return true
	})
}
