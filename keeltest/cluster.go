// Package keeltest starts a Keel controller quorum inside a test process,
// for Keel's own tests and as test support for anyone who embeds Keel or
// talks to its controllers: a real quorum without starting processes.
//
// Each controller is a server.Node assembled as `keel controller` and
// `keel dev` assemble one (server.StartLocalQuorumWith): raft over loopback
// TCP through the node's own listener, raft-boltdb in the test's temp dir,
// the gRPC services. Raft's traffic between the nodes runs through fault
// proxies, one per directed link, so that a test can cut the quorum in two
// and heal it; Kill stops a node as a crash would and Restart brings it back
// on its data dir and address.
//
// The helpers follow hashicorp/raft's testing.go: each takes the cluster's
// testing.TB, calls t.Helper, fails the test on error, and waits by polling
// against a deadline, never by sleeping. Everything a Cluster starts is
// stopped when the test ends.
package keeltest

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-dev/keel/internal/faultproxy"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/raftlog"
	"github.com/keel-dev/keel/rpc"
	"github.com/keel-dev/keel/server"
)

// Version is the version every node of a Cluster reports.
const Version = "keeltest"

// WaitTimeout is how long WaitForApplied and Restart wait: far above what
// they take on a loaded two-core machine under -race, so that reaching it
// means something is wrong rather than slow.
const WaitTimeout = 10 * time.Second

// FastTiming is a Cluster's raft timing unless WithTiming says otherwise:
// 150 ms heartbeat, election and lease timeouts, so that elections and
// failovers take a fraction of a second, while a leader still keeps its
// lease through the stalls of a loaded two-core machine under -race beside
// the integration tests' processes (at 50 ms, leaderships were lost there
// mid-test now and then).
func FastTiming() raftlog.Timing {
	return raftlog.Timing{
		HeartbeatTimeout:   150 * time.Millisecond,
		ElectionTimeout:    150 * time.Millisecond,
		LeaderLeaseTimeout: 150 * time.Millisecond,
		CommitTimeout:      5 * time.Millisecond,
		CrashElection:      true,
	}
}

// Option adjusts a Cluster before its nodes start.
type Option func(*options)

type options struct {
	timing         raftlog.Timing
	sessionTimeout time.Duration
	now            func() time.Time
	metrics        bool
	logger         *slog.Logger
	tunes          []func(*server.NodeConfig)
	direct         bool
}

// WithTiming runs raft at t instead of FastTiming; raftlog.DefaultTiming()
// gives production's timings, for benchmarks and for tests of behaviour
// that depends on them.
func WithTiming(t raftlog.Timing) Option { return func(o *options) { o.timing = t } }

// WithSessionTimeout sets the broker session timeout of every node
// (default: controller.DefaultSessionTimeout).
func WithSessionTimeout(d time.Duration) Option {
	return func(o *options) { o.sessionTimeout = d }
}

// WithClock gives every node's controller now as the clock of broker
// sessions, such as a Clock's Now: a test then expires sessions by moving
// the clock, not by waiting for them.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithMetrics gives every node a Prometheus registry of its own
// (Cluster.Metrics), which it keeps across Restart.
func WithMetrics() Option { return func(o *options) { o.metrics = true } }

// WithLogger sends every node's logs to l, each line with the node's id.
// Without it they are dropped, unless KEEL_TEST_LOG is set in the
// environment, which sends them to stderr at debug level.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithDirectRaft has raft dial each peer directly, as in production, with
// no fault proxy on the link: for benchmarks and measurements, whose figures
// must not include the proxies' extra hop. Partition and Heal then fail the
// test.
func WithDirectRaft() Option { return func(o *options) { o.direct = true } }

// WithTune adjusts each node's config after the Cluster has set its own
// fields, just before the node starts, for anything the other options do
// not cover (a cluster id, snapshot thresholds, --restore-from). It runs for
// every node, by id, and again for a node StartJoiner starts; Restart reuses
// the config it produced. Given more than once, the funcs run in order.
func WithTune(tune func(*server.NodeConfig)) Option {
	return func(o *options) { o.tunes = append(o.tunes, tune) }
}

// Cluster is a quorum of controllers in this process. Its methods are
// meant for the test's goroutine, though Node, Nodes and Addrs may be
// called from any.
type Cluster struct {
	t    testing.TB
	opts options
	dir  string
	net  *faultproxy.Net

	mu      sync.Mutex
	members map[int32]*member
	client  *rpc.Client
	closed  bool
}

// member is one node of the cluster, running or killed.
type member struct {
	// cfg is the config the node last started with, its pre-bound listener
	// cleared: Restart starts it again from this, at the same address.
	cfg     server.NodeConfig
	node    *server.Node
	killed  bool
	metrics *prometheus.Registry
}

// NewCluster starts n controllers on free loopback ports with their data in
// t.TempDir(), each raft link between them through a fault proxy (unless
// WithDirectRaft), and stops them all when the test ends. It does not wait
// for an election: WaitForActive does. It fails t if anything cannot start.
func NewCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	o := options{timing: FastTiming()}
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = defaultLogger()
	}
	c := &Cluster{t: t, opts: o, dir: t.TempDir(), members: make(map[int32]*member)}
	t.Cleanup(c.Close)

	var netErr error
	q, err := server.StartLocalQuorumWith(n, c.dir, o.timing, Version, o.logger, func(cfg *server.NodeConfig) {
		// The first node's config is the first moment every node's address
		// is known (the quorum binds them all before it starts any), and
		// each node must know its peers' proxies before it starts.
		if !o.direct && c.net == nil && netErr == nil {
			listen := make(map[int32]string, len(cfg.Voters))
			for _, v := range cfg.Voters {
				listen[v.ID] = v.Address
			}
			c.net, netErr = faultproxy.NewNet(listen)
		}
		if c.net != nil {
			cfg.RaftDial = make(map[int32]string, len(cfg.Voters)-1)
			for _, v := range cfg.Voters {
				if v.ID != cfg.NodeID {
					cfg.RaftDial[v.ID] = c.net.Link(cfg.NodeID, v.ID).Addr()
				}
			}
		}
		c.configure(cfg)
	})
	if err != nil {
		t.Fatalf("keeltest: start %d controllers: %v", n, errors.Join(err, netErr))
	}
	c.mu.Lock()
	for _, node := range q.Nodes {
		c.members[node.ID()].node = node
	}
	c.mu.Unlock()
	if netErr != nil {
		t.Fatalf("keeltest: fault proxies: %v", netErr)
	}
	return c
}

func defaultLogger() *slog.Logger {
	if os.Getenv("KEEL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	// Not a handler writing to io.Discard: that would still format every
	// line, work a loaded machine can ill afford at fast timings.
	return slog.New(slog.DiscardHandler)
}

// configure applies the cluster's options to a node's config and records it
// as the node's, for Restart.
func (c *Cluster) configure(cfg *server.NodeConfig) {
	m := &member{}
	if c.opts.sessionTimeout > 0 {
		cfg.SessionTimeout = c.opts.sessionTimeout
	}
	if c.opts.now != nil {
		cfg.Now = c.opts.now
	}
	if c.opts.metrics {
		m.metrics = prometheus.NewRegistry()
		cfg.Metrics = m.metrics
	}
	for _, tune := range c.opts.tunes {
		tune(cfg)
	}
	m.cfg = *cfg
	// The listener is the node's to close; a restart binds the address
	// again (an empty Listen means the node's voter address).
	m.cfg.Mux = nil
	c.mu.Lock()
	c.members[cfg.NodeID] = m
	c.mu.Unlock()
}

// StartJoiner starts node id as `keel controller --join` starts one: an
// empty data dir, no voter list, no bootstrap; it waits until the active
// controller adds it (Controller().AddVoter(ctx, id, node.Addr(), false)). It gets
// the cluster's options, but it is outside the fault proxies: Partition
// does not cut it off. Kill and Restart work on it as on the others.
func (c *Cluster) StartJoiner(id int32) *server.Node {
	c.t.Helper()
	if c.member(id) != nil {
		c.t.Fatalf("keeltest: StartJoiner(%d): the cluster already has node %d", id, id)
	}
	mux, err := raftlog.Listen("127.0.0.1:0")
	if err != nil {
		c.t.Fatalf("keeltest: StartJoiner(%d): %v", id, err)
	}
	cfg := server.NodeConfig{
		NodeID:  id,
		Join:    true,
		Listen:  mux.Addr().String(),
		Mux:     mux,
		DataDir: filepath.Join(c.dir, fmt.Sprintf("controller-%d", id)),
		Timing:  c.opts.timing,
		Version: Version,
		Logger:  c.opts.logger.With("node", id),
	}
	c.configure(&cfg)
	node, err := server.StartNode(cfg) // closes mux if it fails
	if err != nil {
		c.t.Fatalf("keeltest: StartJoiner(%d): %v", id, err)
	}
	c.mu.Lock()
	c.members[id].node = node
	c.mu.Unlock()
	return node
}

func (c *Cluster) member(id int32) *member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[id]
}

// mustMember is member, failing the test for an id the cluster does not have.
func (c *Cluster) mustMember(op string, id int32) *member {
	c.t.Helper()
	m := c.member(id)
	if m == nil || m.node == nil {
		c.t.Fatalf("keeltest: %s(%d): no such node", op, id)
	}
	return m
}

// ids lists the cluster's node ids, in order.
func (c *Cluster) ids() []int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]int32, 0, len(c.members))
	for id, m := range c.members {
		if m.node != nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Node returns node id as last started: after Kill, the stopped node (its
// FSM and controller still answer for what they held), after Restart, the
// new one. It fails the test for an id the cluster does not have.
func (c *Cluster) Node(id int32) *server.Node {
	c.t.Helper()
	m := c.mustMember("Node", id)
	c.mu.Lock()
	defer c.mu.Unlock()
	return m.node
}

// Nodes returns the running nodes (not killed), by id.
func (c *Cluster) Nodes() []*server.Node {
	var out []*server.Node
	for _, id := range c.ids() {
		c.mu.Lock()
		if m := c.members[id]; !m.killed {
			out = append(out, m.node)
		}
		c.mu.Unlock()
	}
	return out
}

// Addrs lists every node's address, by id, killed ones included (a
// client tries them in turn): the quorum's addresses as clients know them.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, id := range c.ids() {
		c.mu.Lock()
		out = append(out, c.members[id].addr())
		c.mu.Unlock()
	}
	return out
}

// addr is the address the node listens on, and listens on again after
// Restart.
func (m *member) addr() string { return m.node.Addr() }

// Metrics returns node id's registry, with WithMetrics; nil without it.
func (c *Cluster) Metrics(id int32) *prometheus.Registry {
	c.t.Helper()
	return c.mustMember("Metrics", id).metrics
}

// Client returns a client of the whole quorum (every address in Addrs when
// first called), which follows leadership as Keel's tools do. It is the
// same client on every call, closed when the test ends.
func (c *Cluster) Client() *rpc.Client {
	c.t.Helper()
	c.mu.Lock()
	cl := c.client
	c.mu.Unlock()
	if cl != nil {
		return cl
	}
	cl, err := rpc.NewClient(c.Addrs())
	if err != nil {
		c.t.Fatalf("keeltest: client: %v", err)
	}
	c.mu.Lock()
	c.client = cl
	c.mu.Unlock()
	return cl
}

// Kill stops node id as a crash would (server.Node.Crash): no leadership
// handoff, so the others elect a new leader after their election timeout.
// Its data dir is kept for Restart.
func (c *Cluster) Kill(id int32) {
	c.t.Helper()
	m := c.mustMember("Kill", id)
	if m.killed {
		c.t.Fatalf("keeltest: Kill(%d): the node is not running", id)
	}
	if err := m.node.Crash(); err != nil {
		c.t.Fatalf("keeltest: Kill(%d): %v", id, err)
	}
	c.mu.Lock()
	m.killed = true
	c.mu.Unlock()
}

// Restart starts a killed node again with the config it last started
// with: the same data dir, from which it rejoins with its log, and the same
// address, where its peers (and their proxies) dial it.
func (c *Cluster) Restart(id int32) {
	c.t.Helper()
	m := c.mustMember("Restart", id)
	if !m.killed {
		c.t.Fatalf("keeltest: Restart(%d): the node is running", id)
	}
	addr := m.addr()
	cfg := m.cfg
	// The port was the node's a moment ago, but the kernel may have handed
	// it to an outgoing connection since as its local port: try again until
	// that connection is gone.
	var lastErr error
	poll.UntilState(c.t, WaitTimeout, fmt.Sprintf("node %d's address %s to be free again", id, addr), func() (bool, string) {
		cfg.Mux, lastErr = raftlog.Listen(addr)
		if lastErr != nil {
			return false, lastErr.Error()
		}
		return true, ""
	})
	node, err := server.StartNode(cfg) // closes cfg.Mux if it fails
	if err != nil {
		c.t.Fatalf("keeltest: Restart(%d): %v", id, err)
	}
	c.mu.Lock()
	m.node, m.killed = node, false
	c.mu.Unlock()
}

// Partition cuts the raft links between the nodes in ids and every other
// node, both ways, and leaves the links within each side up: the side with
// a majority elects a leader, the other cannot. Cut links drop their
// connections and refuse new ones at once, as a link that is down and says
// so (faultproxy.Drop), rather than going silent. Clients still reach every
// node: the nodes' own addresses are not behind the proxies. Heal undoes
// it.
func (c *Cluster) Partition(ids ...int32) {
	c.t.Helper()
	c.mustProxies("Partition")
	cut := make(map[int32]bool, len(ids))
	for _, id := range ids {
		c.mustMember("Partition", id)
		cut[id] = true
	}
	for _, a := range c.ids() {
		for _, b := range c.ids() {
			if cut[a] == cut[b] {
				continue
			}
			// Nil for a node StartJoiner started: it is outside the net.
			if p := c.net.Link(a, b); p != nil {
				p.Set(faultproxy.Drop)
			}
		}
	}
}

// Heal brings every raft link up again.
func (c *Cluster) Heal() {
	c.t.Helper()
	c.mustProxies("Heal")
	c.net.Heal()
}

// mustProxies fails the test when the cluster has no fault proxies to cut.
func (c *Cluster) mustProxies(op string) {
	c.t.Helper()
	if c.net == nil {
		c.t.Fatalf("keeltest: %s: the cluster was started WithDirectRaft, with no fault proxies", op)
	}
}

// Active returns the running node that is the active controller now, or
// nil when none is (or, for a moment around a failover, the first of two):
// for a condition the test polls itself. To wait for one, WaitForActive.
func (c *Cluster) Active() *server.Node {
	for _, node := range c.Nodes() {
		if ok, _ := node.Controller().Active(); ok {
			return node
		}
	}
	return nil
}

// WaitForActive waits until exactly one running node among ids (every
// running node when none are given) is the active controller, and the
// others among ids follow it and have applied its epoch record, and returns
// it. Waiting for the followers too means the leader is in touch with them,
// not just elected by some while another is still starting: a test that
// goes on at once neither loses the leadership to a short lease that a slow
// node could not renew, nor removes a node raft has not yet replicated to
// (raft tells a removed node of its removal only if it can reach it then).
// A node cut off by Partition, or outside the quorum, must not be among ids.
// At timeout it fails the test, saying what each node was doing.
func (c *Cluster) WaitForActive(timeout time.Duration, ids ...int32) *server.Node {
	c.t.Helper()
	if len(ids) == 0 {
		ids = c.ids()
	}
	var active *server.Node
	what := "one active controller, followed by the other nodes"
	if len(ids) < len(c.ids()) {
		what = fmt.Sprintf("one active controller among nodes %v, followed by the others of them", ids)
	}
	poll.UntilState(c.t, timeout, what, func() (bool, string) {
		type follower struct {
			leader int32
			epoch  int64 // the controller epoch its state machine holds
		}
		active = nil
		var activeEpoch int64
		var followers []follower
		var seen []string
		n := 0
		for _, id := range ids {
			c.mu.Lock()
			m := c.members[id]
			node, killed := m.node, m.killed
			c.mu.Unlock()
			if killed {
				seen = append(seen, fmt.Sprintf("node %d: killed", id))
				continue
			}
			if ok, epoch := node.Controller().Active(); ok {
				active, activeEpoch, n = node, epoch, n+1
				seen = append(seen, fmt.Sprintf("node %d: active at epoch %d", id, epoch))
				continue
			}
			f := follower{epoch: node.FSM().Image().ControllerEpoch}
			f.leader, _ = node.Controller().Leader()
			followers = append(followers, f)
			if f.leader >= 0 {
				seen = append(seen, fmt.Sprintf("node %d: not active, following node %d, at epoch %d", id, f.leader, f.epoch))
			} else {
				seen = append(seen, fmt.Sprintf("node %d: not active, no leader known, at epoch %d", id, f.epoch))
			}
		}
		done := n == 1
		for _, f := range followers {
			done = done && f.leader == active.ID() && f.epoch >= activeEpoch
		}
		return done, strings.Join(seen, "\n")
	})
	return active
}

// WaitForApplied waits until every running node's state machine has
// applied index, failing the test after WaitTimeout with where each was.
func (c *Cluster) WaitForApplied(index uint64) {
	c.t.Helper()
	poll.UntilState(c.t, WaitTimeout, fmt.Sprintf("every running node to apply index %d", index), func() (bool, string) {
		done := true
		var seen []string
		for _, node := range c.Nodes() {
			at := node.FSM().Image().Offset
			done = done && at >= index
			seen = append(seen, fmt.Sprintf("node %d: applied %d", node.ID(), at))
		}
		return done, strings.Join(seen, "\n")
	})
}

// Close stops everything the cluster started: the client, every running
// node and the fault proxies. The test's cleanup calls it; a test calls it
// itself to free the cluster's memory and ports before it goes on. Nodes
// are stopped as Kill stops them: at the end of a test a leadership
// handoff would only cost time. Errors fail the test.
func (c *Cluster) Close() {
	c.t.Helper()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	cl := c.client
	c.mu.Unlock()
	var nodes []*server.Node
	for _, id := range c.ids() {
		c.mu.Lock()
		if m := c.members[id]; !m.killed {
			nodes = append(nodes, m.node)
			m.killed = true
		}
		c.mu.Unlock()
	}
	if cl != nil {
		_ = cl.Close() // its connections' errors say nothing about the quorum
	}
	// One after the other: raft nodes stopping at the same moment can wait
	// on each other's in-flight RPCs (each node's shutdown waits for its
	// RPCs, and the peer answers only once it has stopped) until the
	// transport's 10 s I/O timeout breaks the wait.
	var errs []error
	for _, node := range nodes {
		if err := node.Crash(); err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", node.ID(), err))
		}
	}
	if c.net != nil {
		c.net.Close()
	}
	if err := errors.Join(errs...); err != nil {
		c.t.Errorf("keeltest: stopping the cluster: %v", err)
	}
}
