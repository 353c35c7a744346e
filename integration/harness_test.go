// Package integration runs real keel processes on loopback and kills them.
//
// TestMain builds the keel binary once into a temp dir; every test starts its
// own controllers (and brokers: broker_harness_test.go) through
// keeltest/keelproc, on free ports with their own data dirs, and stops every
// process it started, by PID, in t.Cleanup. Nothing here sleeps to
// synchronise: each wait polls (internal/poll) for a condition until a
// deadline.
package integration

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/faultproxy"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest/keelproc"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/raftlog"
	"github.com/keel-dev/keel/rpc"
)

// keelBin is the keel binary TestMain built.
var keelBin string

// TestMain builds the keel binary once for every test and removes it after.
// KEEL_INTEGRATION_RACE=1 builds it with the race detector.
func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if spec := os.Getenv(groupMemberEnv); spec != "" {
		return runGroupMember(spec) // a child of a group test (groups_harness_test.go)
	}
	dir, err := os.MkdirTemp("", "keel-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	keelBin = filepath.Join(dir, "keel")
	args := []string{"build", "-o", keelBin}
	if os.Getenv("KEEL_INTEGRATION_RACE") != "" {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/keel")
	build := exec.Command("go", args...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "integration: go %s: %v\n%s", strings.Join(args, " "), err, out)
		return 1
	}
	return m.Run()
}

// moduleRoot finds the directory of go.mod, falling back to the parent of
// this package's directory.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err == nil {
		if mod := strings.TrimSpace(string(out)); mod != "" && mod != os.DevNull {
			return filepath.Dir(mod), nil
		}
	}
	root, err := filepath.Abs("..")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("cannot find the module root: %v", err)
	}
	return root, nil
}

// runKeel runs a keel subcommand to completion (at most timeout) and returns
// its stdout, stderr and exit code.
func runKeel(t testing.TB, timeout time.Duration, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	stdout, stderr, code, err := keelproc.Run(keelBin, timeout, args...)
	if err != nil {
		t.Fatal(err)
	}
	return stdout, stderr, code
}

func mustCreate(t testing.TB, path string) *os.File {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// freeAddrs returns n distinct loopback addresses that were free a moment
// ago.
func freeAddrs(t testing.TB, n int) []string {
	t.Helper()
	addrs, err := keelproc.FreeAddrs(n)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// ---------------------------------------------------------------------------
// Cluster

// Cluster is a quorum of keel controller processes on loopback, and the
// brokers a test starts against it (broker_harness_test.go): a
// keelproc.Cluster whose errors fail the test, with the clients and the
// assertions the tests share.
type Cluster struct {
	t      testing.TB
	h      *keelproc.Cluster
	opts   clusterOptions
	net    *faultproxy.Net // with withFaultNet: the proxies between the nodes
	client *rpc.Client     // knows every node's address

	brokerMu    sync.Mutex
	brokerConns map[string]*rpc.BrokerClient // by broker address, for Inspect
}

type clusterOptions struct {
	cfg keelproc.Config
	tls *testPKI // withTLS: every process and client uses mutual TLS
}

// clusterOption adjusts how startCluster runs the controllers.
type clusterOption func(*clusterOptions)

// withClusterID passes --cluster-id to every controller.
func withClusterID(id string) clusterOption {
	return func(o *clusterOptions) { o.cfg.ClusterID = id }
}

// withDeferred leaves the given nodes unstarted; Start starts them later.
func withDeferred(ids ...int32) clusterOption {
	return func(o *clusterOptions) { o.cfg.Deferred = append(o.cfg.Deferred, ids...) }
}

// withSessionTimeout passes --session-timeout to every controller: how long
// a broker may go without a heartbeat before it is fenced.
func withSessionTimeout(d time.Duration) clusterOption {
	return withControllerFlags("--session-timeout", d.String())
}

// withCrashGrace passes --crash-grace to every controller: how long a
// broker whose stream's connection closed may take to come back before it
// is fenced (0: crash detection off).
func withCrashGrace(d time.Duration) clusterOption {
	return withControllerFlags("--crash-grace", d.String())
}

// withControllerFlags passes flags to every controller.
func withControllerFlags(flags ...string) clusterOption {
	return func(o *clusterOptions) { o.cfg.ControllerFlags = append(o.cfg.ControllerFlags, flags...) }
}

// withControllerDataDirs puts controller id's data dir at dataDir(id).
func withControllerDataDirs(dataDir func(id int32) string) clusterOption {
	return func(o *clusterOptions) { o.cfg.ControllerDataDir = dataDir }
}

// withBrokerDataDirs puts broker id's data dir at dataDir(id).
func withBrokerDataDirs(dataDir func(id int32) string) clusterOption {
	return func(o *clusterOptions) { o.cfg.BrokerDataDir = dataDir }
}

// withFaultNet runs the controllers behind a faultproxy.Net (Cluster.net):
// their voter addresses are proxies, and each dials its peers through its
// own.
func withFaultNet() clusterOption {
	return func(o *clusterOptions) { o.cfg.FaultNet = true }
}

const describeLimit = time.Second

// startCluster starts n controllers on free loopback ports, each with its own
// data dir and log file in the test's temp dir, and waits until every one has
// started (not until there is a leader: see WaitForActive). If a port turns
// out to be taken, it starts over with new ports. Every process still
// running at the end of the test is stopped, and the test fails unless
// SIGTERM made it exit with status 0; on test failure the tail of every
// node's log is printed.
func startCluster(t testing.TB, n int, opts ...clusterOption) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	for _, o := range opts {
		o(&c.opts)
	}
	cfg := c.opts.cfg
	if cfg.Keel == "" { // withKeel may run another executable
		cfg.Keel = keelBin
	}
	cfg.Dir, cfg.Controllers = t.TempDir(), n
	cfg.TLSFlags = c.opts.tlsFlags
	cfg.Retrying = func(err error) { t.Log(err) }
	h, err := keelproc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.h = h
	// Registered before the processes' Close, so it runs after it: the
	// logs are complete when it checks and prints them.
	t.Cleanup(func() {
		if c.client != nil {
			c.client.Close()
		}
		c.closeBrokerConns()
		c.checkLogs(t)
		if t.Failed() || os.Getenv("KEEL_INTEGRATION_LOGS") != "" {
			c.dumpLogs()
		}
	})
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := h.Start(context.Background()); err != nil {
		t.Fatalf("start a %d-node cluster: %v", n, err)
	}
	c.net = h.Net()
	cl, err := rpc.NewClient(h.Addrs(), c.opts.rpcOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	c.client = cl
	return c
}

func (c *Cluster) node(id int32) *keelproc.Node {
	c.t.Helper()
	nd := c.h.Controller(id)
	if nd == nil {
		c.t.Fatalf("no node %d in a %d-node cluster", id, len(c.h.Controllers()))
	}
	return nd
}

// Addrs returns every node's address, in id order.
func (c *Cluster) Addrs() []string { return c.h.Addrs() }

// VotersFlag returns the --voters value every node was given.
func (c *Cluster) VotersFlag() string { return c.h.Voters() }

// Addr returns node id's address.
func (c *Cluster) Addr(id int32) string { return c.node(id).Addr() }

// DataDir returns node id's data dir.
func (c *Cluster) DataDir(id int32) string { return c.node(id).DataDir() }

// IDs returns every node id.
func (c *Cluster) IDs() []int32 {
	nds := c.h.Controllers()
	ids := make([]int32, len(nds))
	for i, nd := range nds {
		ids[i] = nd.ID()
	}
	return ids
}

// Live returns the ids of the nodes whose process is running and not
// paused (Pause).
func (c *Cluster) Live() []int32 { return c.h.Live() }

// Client returns a client that knows every node's address.
func (c *Cluster) Client() *rpc.Client { return c.client }

// Kill sends SIGKILL to node id and waits for it to exit.
func (c *Cluster) Kill(id int32) {
	c.t.Helper()
	if err := c.h.Kill(c.node(id)); err != nil {
		c.t.Fatal(err)
	}
}

// Stop sends SIGTERM to node id, waits for it to exit, and fails the test
// unless it exited with status 0.
func (c *Cluster) Stop(id int32) {
	c.t.Helper()
	if err := c.h.Stop(c.node(id)); err != nil {
		c.t.Fatal(err)
	}
}

// Pause sends SIGSTOP to node id: it keeps its connections and its port but
// answers nothing, as a hung or partitioned node would. Resume (or the end
// of the test, before the process is stopped) sends SIGCONT.
func (c *Cluster) Pause(id int32) {
	c.t.Helper()
	if err := c.h.Pause(c.node(id)); err != nil {
		c.t.Fatal(err)
	}
}

// Resume sends SIGCONT to node id, paused by Pause.
func (c *Cluster) Resume(id int32) {
	c.t.Helper()
	if err := c.h.Resume(c.node(id)); err != nil {
		c.t.Fatal(err)
	}
}

// Restart starts node id again with the same flags and data dir, and waits
// until it has started.
func (c *Cluster) Restart(id int32) {
	c.t.Helper()
	c.Start(id)
}

// Start starts node id (a deferred node for the first time, or a stopped
// one again) with its flags and data dir, and waits until it has started.
func (c *Cluster) Start(id int32) {
	c.t.Helper()
	if err := c.h.StartNodes(context.Background(), c.node(id)); err != nil {
		c.t.Fatalf("Start(%d): %v", id, err)
	}
}

// Describe asks node id for its own view of the quorum.
func (c *Cluster) Describe(ctx context.Context, id int32) (*keelpb.DescribeQuorumResponse, error) {
	cl, err := c.client.Controller(c.node(id).Addr())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, describeLimit)
	defer cancel()
	return cl.DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{})
}

// Views asks each of ids, in parallel, for its own view. A node that does
// not answer is absent from the result and its error is in errs.
func (c *Cluster) Views(ctx context.Context, ids []int32) (views map[int32]*keelpb.DescribeQuorumResponse, errs map[int32]error) {
	views = make(map[int32]*keelpb.DescribeQuorumResponse, len(ids))
	errs = make(map[int32]error)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := c.Describe(ctx, id)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[id] = err
			} else {
				views[id] = v
			}
		}()
	}
	wg.Wait()
	return views, errs
}

// activeAgreed reports the active controller and its epoch if exactly one of
// ids reports itself active and all of ids answer, naming that node as leader
// and reporting its epoch.
func activeAgreed(ids []int32, views map[int32]*keelpb.DescribeQuorumResponse) (int32, int64, bool) {
	if len(ids) == 0 || len(views) != len(ids) {
		return 0, 0, false
	}
	var active []*keelpb.DescribeQuorumResponse
	for _, v := range views {
		if v.Active {
			active = append(active, v)
		}
	}
	if len(active) != 1 {
		return 0, 0, false
	}
	leader, epoch := active[0].NodeId, active[0].ControllerEpoch
	for _, v := range views {
		if v.LeaderId != leader || v.ControllerEpoch != epoch {
			return 0, 0, false
		}
	}
	return leader, epoch, true
}

// WaitForActive polls every live node's own view until exactly one reports
// itself the active controller and every live node agrees on the leader's id
// and the controller epoch. It returns them, or fails the test at timeout.
func (c *Cluster) WaitForActive(t testing.TB, timeout time.Duration) (leaderID int32, epoch int64) {
	t.Helper()
	poll.UntilState(t, timeout, "an active controller that every live node agrees on", func() (bool, string) {
		live := c.Live()
		views, errs := c.Views(context.Background(), live)
		var ok bool
		leaderID, epoch, ok = activeAgreed(live, views)
		return ok, fmt.Sprintf("live nodes %v:\n%s", live, formatViews(views, errs))
	})
	return leaderID, epoch
}

// WaitForApplied polls until every node in ids has applied index.
func (c *Cluster) WaitForApplied(t testing.TB, ids []int32, index uint64) map[int32]*keelpb.DescribeQuorumResponse {
	t.Helper()
	var views map[int32]*keelpb.DescribeQuorumResponse
	poll.UntilState(t, 20*time.Second, fmt.Sprintf("nodes %v all to apply index %d", ids, index), func() (bool, string) {
		c.requireRunning(t, ids)
		var errs map[int32]error
		views, errs = c.Views(context.Background(), ids)
		done := len(views) == len(ids)
		for _, v := range views {
			done = done && v.AppliedIndex >= index
		}
		return done, formatViews(views, errs)
	})
	return views
}

// WaitForConverged polls until every node in ids reports the same applied
// index, at least index, with the same leader and controller epoch: an idle
// quorum that has caught up.
func (c *Cluster) WaitForConverged(t testing.TB, ids []int32, index uint64) map[int32]*keelpb.DescribeQuorumResponse {
	t.Helper()
	var views map[int32]*keelpb.DescribeQuorumResponse
	poll.UntilState(t, 20*time.Second, fmt.Sprintf("nodes %v to converge on one applied index >= %d", ids, index), func() (bool, string) {
		c.requireRunning(t, ids)
		var errs map[int32]error
		views, errs = c.Views(context.Background(), ids)
		return converged(ids, views, index), formatViews(views, errs)
	})
	return views
}

// requireRunning fails the test at once if any of ids has exited: waiting
// for it would only time out.
func (c *Cluster) requireRunning(t testing.TB, ids []int32) {
	t.Helper()
	for _, id := range ids {
		nd := c.node(id)
		if nd.Pid() == 0 {
			t.Fatalf("node %d was never started", id)
		}
		if !nd.Running() {
			t.Fatalf("node %d exited with status %d; its output ends:\n%s", id, nd.ExitCode(), keelproc.LastLines(nd.Output(), 5))
		}
	}
}

func converged(ids []int32, views map[int32]*keelpb.DescribeQuorumResponse, index uint64) bool {
	if len(views) != len(ids) || len(ids) == 0 {
		return false
	}
	first := views[ids[0]]
	for _, v := range views {
		if v.AppliedIndex < index || v.AppliedIndex != first.AppliedIndex ||
			v.LeaderId != first.LeaderId || v.ControllerEpoch != first.ControllerEpoch {
			return false
		}
	}
	return true
}

func formatViews(views map[int32]*keelpb.DescribeQuorumResponse, errs map[int32]error) string {
	var ids []int32
	for id := range views {
		ids = append(ids, id)
	}
	for id := range errs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var b strings.Builder
	for _, id := range ids {
		if v, ok := views[id]; ok {
			fmt.Fprintf(&b, "  node %d: state=%s active=%v leader=%d epoch=%d epoch_leader=%d term=%d commit=%d last=%d applied=%d cluster=%s\n",
				id, v.State, v.Active, v.LeaderId, v.ControllerEpoch, v.ControllerEpochLeaderId, v.RaftTerm,
				v.CommitIndex, v.LastIndex, v.AppliedIndex, v.ClusterId)
		} else {
			fmt.Fprintf(&b, "  node %d: %v\n", id, errs[id])
		}
	}
	return b.String()
}

// logs yields every node's and broker's whole log (every process of it)
// that can be read.
func (c *Cluster) logs() iter.Seq2[*keelproc.Node, []byte] {
	return func(yield func(*keelproc.Node, []byte) bool) {
		for _, nd := range c.h.Nodes() {
			b, err := os.ReadFile(nd.LogPath())
			if err != nil {
				continue
			}
			if !yield(nd, b) {
				return
			}
		}
	}
}

// checkLogs fails the test if any node or broker reported a data race (a
// keel built with KEEL_INTEGRATION_RACE=1) or panicked.
func (c *Cluster) checkLogs(t testing.TB) {
	t.Helper()
	for nd, b := range c.logs() {
		for _, bad := range []string{"WARNING: DATA RACE", "panic: ", "fatal error: "} {
			if i := bytes.Index(b, []byte(bad)); i >= 0 {
				t.Errorf("%s's log (%s) reports %q:\n%s", nd.Name(), nd.LogPath(), bad, firstLines(string(b[i:]), 40))
			}
		}
	}
}

// crashElections counts the crash elections the controllers started (the
// raft leader's process found gone), from their logs, restarts included.
func (c *Cluster) crashElections() int {
	n := 0
	for _, b := range c.logs() {
		n += bytes.Count(b, []byte(raftlog.CrashElectionMessage))
	}
	return n
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// dumpLogs prints the tail of every node's and broker's log.
func (c *Cluster) dumpLogs() {
	for _, nd := range c.h.Nodes() {
		tail, err := nd.LogTail(40)
		if err != nil {
			continue
		}
		c.t.Logf("--- %s log (%s), last lines:\n%s", nd.Name(), nd.LogPath(), tail)
	}
}

// newRequestID returns a request id unique within the test run.
func newRequestID() string {
	requestSeq.Lock()
	defer requestSeq.Unlock()
	requestSeq.n++
	return fmt.Sprintf("integration-%d-%d", os.Getpid(), requestSeq.n)
}

var requestSeq struct {
	sync.Mutex
	n int
}

// appendNoOp commits a no-op through the active controller, failing the test
// if it does not commit within timeout.
func (c *Cluster) appendNoOp(t testing.TB, timeout time.Duration) *keelpb.AppendNoOpResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := c.client.AppendNoOp(ctx, newRequestID())
	if err != nil {
		t.Fatalf("AppendNoOp: %v", err)
	}
	return resp
}

// syncBuffer is a bytes.Buffer a process writes while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
