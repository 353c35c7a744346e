// Package integration runs real keel processes on loopback and kills them.
//
// TestMain builds the keel binary once into a temp dir; every test starts its
// own controllers (and brokers: broker_harness_test.go) on free ports with
// their own data dirs, and stops every process it started, by PID, in
// t.Cleanup. Nothing here sleeps to synchronise: each wait polls for a
// condition until a deadline.
package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/faultproxy"
	"github.com/keel-dev/keel/proto/keelpb"
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

// ---------------------------------------------------------------------------
// Processes

// proc is one keel process. Its exit is observed by one goroutine, which
// closes done; every other user waits on done and never calls Wait.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // from cmd.Wait; read only after done is closed
}

// startProc starts keel with args, its stdout and stderr going to stdout and
// stderr (a nil writer discards), and registers a cleanup that stops it
// (SIGTERM, then SIGKILL after a grace period) if it is still running. With
// mustStopCleanly, that cleanup also fails the test unless SIGTERM alone
// made the process exit with status 0.
func startProc(t testing.TB, mustStopCleanly bool, stdout, stderr *os.File, args ...string) (*proc, error) {
	t.Helper()
	cmd := exec.Command(keelBin, args...)
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if stderr != nil {
		cmd.Stderr = stderr
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.running() {
			return
		}
		if clean := p.stop(10 * time.Second); mustStopCleanly && !clean {
			t.Errorf("pid %d (keel %s) did not exit with status 0 on SIGTERM: %v",
				p.pid(), strings.Join(args, " "), p.err)
		}
	})
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// wait reports whether the process exited within timeout.
func (p *proc) wait(timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// signal sends sig to the process by PID; a process that has already exited
// is left alone (os.Process never signals a reaped PID).
func (p *proc) signal(sig syscall.Signal) {
	if p.running() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// stop sends SIGTERM, waits up to grace, then SIGKILL and waits. It reports
// whether the process exited with status 0 without needing the SIGKILL.
func (p *proc) stop(grace time.Duration) (clean bool) {
	if !p.running() {
		return p.err == nil
	}
	p.signal(syscall.SIGTERM)
	if !p.wait(grace) {
		p.signal(syscall.SIGKILL)
		<-p.done
		return false
	}
	return p.err == nil
}

// exitCode is the exit status; only valid once the process has exited.
func (p *proc) exitCode() int { return p.cmd.ProcessState.ExitCode() }

// runKeel runs a keel subcommand to completion (at most timeout) and returns
// its stdout, stderr and exit code.
func runKeel(t testing.TB, timeout time.Duration, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	dir := t.TempDir()
	outF, errF := mustCreate(t, filepath.Join(dir, "stdout")), mustCreate(t, filepath.Join(dir, "stderr"))
	p, err := startProc(t, false, outF, errF, args...)
	outF.Close()
	errF.Close()
	if err != nil {
		t.Fatalf("start keel %s: %v", strings.Join(args, " "), err)
	}
	if !p.wait(timeout) {
		p.stop(time.Second)
		t.Fatalf("keel %s did not exit within %s", strings.Join(args, " "), timeout)
	}
	o, _ := os.ReadFile(filepath.Join(dir, "stdout"))
	e, _ := os.ReadFile(filepath.Join(dir, "stderr"))
	return string(o), string(e), p.exitCode()
}

func mustCreate(t testing.TB, path string) *os.File {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// freePorts returns n distinct loopback ports that were free a moment ago.
// They are held open together so that no two are the same.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	lns := make([]net.Listener, n)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("pick a free port: %v", err)
		}
		lns[i] = ln
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// ---------------------------------------------------------------------------
// Cluster

// Cluster is a quorum of keel controller processes on loopback, and the
// brokers a test starts against it (broker_harness_test.go).
type Cluster struct {
	t      testing.TB
	dir    string
	opts   clusterOptions
	nodes  []*procNode     // nodes[id-1]
	voters string          // the --voters value
	net    *faultproxy.Net // with withFaultNet: the proxies between the nodes
	client *rpc.Client     // knows every node's address

	brokerMu    sync.Mutex
	brokers     map[int32]*procNode          // by broker id
	brokerConns map[string]*rpc.BrokerClient // by broker address, for Inspect
}

// procNode is one keel process a test starts, stops and restarts: a
// controller or a broker, with its own data dir and log file.
type procNode struct {
	name    string // "node 1", "broker 1": how messages name it
	ready   string // the log line that says it has started
	id      int32
	addr    string
	dataDir string
	logPath string
	args    []string
	proc    *proc // the latest process; nil before the first start
	logFrom int64 // where the latest process's output starts in the log
	paused  bool  // sent SIGSTOP, not yet SIGCONT
}

type clusterOptions struct {
	faultNet        bool
	clusterID       string
	deferred        []int32
	controllerFlags []string
	tls             *testPKI // withTLS: every process and client uses mutual TLS
	// nodeFlags, if set, gives each controller flags of its own, after
	// controllerFlags; it is called again on each start attempt.
	nodeFlags func(id int32) []string
}

// clusterOption adjusts how startCluster runs the controllers.
type clusterOption func(*clusterOptions)

// withClusterID passes --cluster-id to every controller.
func withClusterID(id string) clusterOption {
	return func(o *clusterOptions) { o.clusterID = id }
}

// withDeferred leaves the given nodes unstarted; Start starts them later.
func withDeferred(ids ...int32) clusterOption {
	return func(o *clusterOptions) { o.deferred = append(o.deferred, ids...) }
}

// withSessionTimeout passes --session-timeout to every controller: how long
// a broker may go without a heartbeat before it is fenced.
func withSessionTimeout(d time.Duration) clusterOption {
	return func(o *clusterOptions) {
		o.controllerFlags = append(o.controllerFlags, "--session-timeout", d.String())
	}
}

const (
	startTimeout  = 20 * time.Second
	stopTimeout   = 15 * time.Second
	bindAttempts  = 5
	pollInterval  = 10 * time.Millisecond
	describeLimit = time.Second
)

// errBind is a controller that could not bind its port (someone took the
// port between freePorts and the process binding it).
var errBind = errors.New("address already in use")

// startCluster starts n controllers on free loopback ports, each with its own
// data dir and log file in the test's temp dir, and waits until every one has
// started (not until there is a leader: see WaitForActive). If a port turns
// out to be taken, it starts over with new ports. On test failure the tail of
// every node's log is printed.
func startCluster(t testing.TB, n int, opts ...clusterOption) *Cluster {
	t.Helper()
	c := &Cluster{t: t, dir: t.TempDir()}
	for _, o := range opts {
		o(&c.opts)
	}
	// Registered before any process starts, so it runs after their cleanups:
	// the logs are complete when it prints them.
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
	var lastErr error
	for attempt := 1; attempt <= bindAttempts; attempt++ {
		ports := freePorts(t, n)
		c.nodes = make([]*procNode, n)
		voters := make([]string, n)
		if c.opts.faultNet {
			net, err := faultproxy.NewNet(listenAddrs(ports))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(net.Close)
			c.net = net
		}
		for i, p := range ports {
			id := int32(i + 1)
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
			voters[i] = fmt.Sprintf("%d@%s", id, c.voterAddr(id, addr))
			c.nodes[i] = c.newControllerNode(id)
			c.nodes[i].addr = addr
		}
		c.voters = strings.Join(voters, ",")
		for _, nd := range c.nodes {
			nd.args = c.controllerArgs(nd, "--voters", c.voters)
			// A previous attempt's data names other ports: start afresh.
			if err := os.RemoveAll(nd.dataDir); err != nil {
				t.Fatal(err)
			}
			if slices.Contains(c.opts.deferred, nd.id) {
				continue
			}
			if err := c.launch(nd); err != nil {
				t.Fatalf("start node %d: %v", nd.id, err)
			}
		}
		lastErr = nil
		for _, nd := range c.nodes {
			if nd.proc == nil {
				continue
			}
			if err := c.waitStarted(nd); err != nil {
				lastErr = err
				break
			}
		}
		if lastErr == nil {
			addrs := c.Addrs()
			cl, err := rpc.NewClient(addrs, c.opts.rpcOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			c.client = cl
			return c
		}
		for _, nd := range c.nodes {
			if nd.proc != nil {
				nd.proc.stop(5 * time.Second)
				nd.proc = nil
			}
		}
		if !errors.Is(lastErr, errBind) {
			t.Fatalf("start a %d-node cluster: %v", n, lastErr)
		}
		t.Logf("start attempt %d: %v; retrying with new ports", attempt, lastErr)
	}
	t.Fatalf("start a %d-node cluster: %d attempts: %v", n, bindAttempts, lastErr)
	return nil
}

// newControllerNode is controller id, not started: its data dir and log
// file in the test's temp dir.
func (c *Cluster) newControllerNode(id int32) *procNode {
	return &procNode{
		name:    fmt.Sprintf("node %d", id),
		ready:   `msg="controller started"`,
		id:      id,
		dataDir: filepath.Join(c.dir, fmt.Sprintf("n%d", id)),
		logPath: filepath.Join(c.dir, fmt.Sprintf("n%d.log", id)),
	}
}

// controllerArgs is nd's command line: how it joins the quorum (--voters
// LIST, or --join), then every flag the cluster's options give a
// controller.
func (c *Cluster) controllerArgs(nd *procNode, membership ...string) []string {
	args := append([]string{"controller",
		"--node-id", strconv.Itoa(int(nd.id)),
		"--listen", nd.addr,
		"--data-dir", nd.dataDir,
	}, membership...)
	if c.opts.clusterID != "" {
		args = append(args, "--cluster-id", c.opts.clusterID)
	}
	if c.net != nil {
		args = append(args, "--raft-dial", c.net.RaftDial(nd.id))
	}
	args = append(args, c.opts.tlsFlags(fmt.Sprintf("controller-%d", nd.id))...)
	args = append(args, c.opts.controllerFlags...)
	if c.opts.nodeFlags != nil {
		args = append(args, c.opts.nodeFlags(nd.id)...)
	}
	return args
}

// launch starts nd's process, appending its output to nd's log.
func (c *Cluster) launch(nd *procNode) error {
	f, err := os.OpenFile(nd.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close() // the child has its own copy of the descriptor
	fmt.Fprintf(f, "=== %s keel %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(nd.args, " "))
	off, err := f.Seek(0, 2)
	if err != nil {
		return err
	}
	p, err := startProc(c.t, true, f, f, nd.args...)
	if err != nil {
		return err
	}
	nd.proc, nd.logFrom = p, off
	return nil
}

// output is what nd's latest process has written so far.
func (nd *procNode) output() string {
	b, err := os.ReadFile(nd.logPath)
	if err != nil || int64(len(b)) < nd.logFrom {
		return ""
	}
	return string(b[nd.logFrom:])
}

// waitStarted waits until nd's process logs that it has started, or exits.
func (c *Cluster) waitStarted(nd *procNode) error {
	deadline := time.Now().Add(startTimeout)
	for {
		if strings.Contains(nd.output(), nd.ready) {
			return nil
		}
		if !nd.proc.running() {
			out := strings.TrimSpace(nd.output())
			if strings.Contains(out, "address already in use") {
				return fmt.Errorf("%s on %s: %w", nd.name, nd.addr, errBind)
			}
			return fmt.Errorf("%s exited with status %d before it started: %s", nd.name, nd.proc.exitCode(), lastLines(out, 5))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not start within %s", nd.name, startTimeout)
		}
		time.Sleep(pollInterval)
	}
}

func (c *Cluster) node(id int32) *procNode {
	c.t.Helper()
	if id < 1 || int(id) > len(c.nodes) {
		c.t.Fatalf("no node %d in a %d-node cluster", id, len(c.nodes))
	}
	return c.nodes[id-1]
}

// Addrs returns every node's address, in id order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		addrs[i] = nd.addr
	}
	return addrs
}

// VotersFlag returns the --voters value every node was given.
func (c *Cluster) VotersFlag() string { return c.voters }

// Addr returns node id's address.
func (c *Cluster) Addr(id int32) string { return c.node(id).addr }

// DataDir returns node id's data dir.
func (c *Cluster) DataDir(id int32) string { return c.node(id).dataDir }

// IDs returns every node id.
func (c *Cluster) IDs() []int32 {
	ids := make([]int32, len(c.nodes))
	for i, nd := range c.nodes {
		ids[i] = nd.id
	}
	return ids
}

// Live returns the ids of the nodes whose process is running and not
// paused (Pause).
func (c *Cluster) Live() []int32 {
	var ids []int32
	for _, nd := range c.nodes {
		if nd.proc != nil && nd.proc.running() && !nd.paused {
			ids = append(ids, nd.id)
		}
	}
	return ids
}

// Client returns a client that knows every node's address.
func (c *Cluster) Client() *rpc.Client { return c.client }

// Kill sends SIGKILL to node id and waits for it to exit.
func (c *Cluster) Kill(id int32) {
	c.t.Helper()
	c.killNodes(c.node(id))
}

// Stop sends SIGTERM to node id, waits for it to exit, and fails the test
// unless it exited with status 0.
func (c *Cluster) Stop(id int32) {
	c.t.Helper()
	c.stopNode(c.node(id))
}

// Pause sends SIGSTOP to node id: it keeps its connections and its port but
// answers nothing, as a hung or partitioned node would. Resume (or the end
// of the test, before the process is stopped) sends SIGCONT.
func (c *Cluster) Pause(id int32) {
	t := c.t
	t.Helper()
	nd := c.node(id)
	if nd.proc == nil || !nd.proc.running() || nd.paused {
		t.Fatalf("Pause(%d): node is not running, or already paused", id)
	}
	nd.proc.signal(syscall.SIGSTOP)
	nd.paused = true
	// Runs before the process's own cleanup (registered earlier), so that
	// its SIGTERM is handled.
	t.Cleanup(func() {
		if nd.paused {
			nd.proc.signal(syscall.SIGCONT)
			nd.paused = false
		}
	})
}

// Resume sends SIGCONT to node id, paused by Pause.
func (c *Cluster) Resume(id int32) {
	t := c.t
	t.Helper()
	nd := c.node(id)
	if !nd.paused {
		t.Fatalf("Resume(%d): node is not paused", id)
	}
	nd.proc.signal(syscall.SIGCONT)
	nd.paused = false
}

// killNodes sends SIGKILL to every one of nds before it waits for any, so
// that they die together, then waits for each to exit.
func (c *Cluster) killNodes(nds ...*procNode) {
	t := c.t
	t.Helper()
	for _, nd := range nds {
		if nd.proc == nil || !nd.proc.running() {
			t.Fatalf("kill %s: it is not running", nd.name)
		}
	}
	for _, nd := range nds {
		nd.proc.signal(syscall.SIGKILL)
	}
	for _, nd := range nds {
		if !nd.proc.wait(stopTimeout) {
			t.Fatalf("kill %s: pid %d still running %s after SIGKILL", nd.name, nd.proc.pid(), stopTimeout)
		}
	}
}

// stopNode sends SIGTERM to nd, waits for it to exit, and fails the test
// unless it exited with status 0.
func (c *Cluster) stopNode(nd *procNode) {
	t := c.t
	t.Helper()
	if nd.proc == nil || !nd.proc.running() {
		t.Fatalf("stop %s: it is not running", nd.name)
	}
	nd.proc.signal(syscall.SIGTERM)
	if !nd.proc.wait(stopTimeout) {
		t.Fatalf("stop %s: pid %d still running %s after SIGTERM", nd.name, nd.proc.pid(), stopTimeout)
	}
	if code := nd.proc.exitCode(); code != 0 {
		t.Fatalf("stop %s: exit status %d, want 0; output ends:\n%s", nd.name, code, lastLines(nd.output(), 10))
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
	t := c.t
	t.Helper()
	nd := c.node(id)
	if nd.proc != nil && nd.proc.running() {
		t.Fatalf("Start(%d): node is still running", id)
	}
	if err := c.launch(nd); err != nil {
		t.Fatalf("Start(%d): %v", id, err)
	}
	if err := c.waitStarted(nd); err != nil {
		t.Fatalf("Start(%d): %v", id, err)
	}
}

// Describe asks node id for its own view of the quorum.
func (c *Cluster) Describe(ctx context.Context, id int32) (*keelpb.DescribeQuorumResponse, error) {
	cl, err := c.client.Controller(c.node(id).addr)
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
	deadline := time.Now().Add(timeout)
	for {
		live := c.Live()
		views, errs := c.Views(context.Background(), live)
		if id, ep, ok := activeAgreed(live, views); ok {
			return id, ep
		}
		if time.Now().After(deadline) {
			t.Fatalf("no agreed active controller among live nodes %v within %s:\n%s", live, timeout, formatViews(views, errs))
		}
		time.Sleep(pollInterval)
	}
}

// WaitForApplied polls until every node in ids has applied index.
func (c *Cluster) WaitForApplied(t testing.TB, ids []int32, index uint64) map[int32]*keelpb.DescribeQuorumResponse {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c.requireRunning(t, ids)
		views, errs := c.Views(context.Background(), ids)
		done := len(views) == len(ids)
		for _, v := range views {
			done = done && v.AppliedIndex >= index
		}
		if done {
			return views
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes %v did not all apply index %d within 20s:\n%s", ids, index, formatViews(views, errs))
		}
		time.Sleep(pollInterval)
	}
}

// WaitForConverged polls until every node in ids reports the same applied
// index, at least index, with the same leader and controller epoch: an idle
// quorum that has caught up.
func (c *Cluster) WaitForConverged(t testing.TB, ids []int32, index uint64) map[int32]*keelpb.DescribeQuorumResponse {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c.requireRunning(t, ids)
		views, errs := c.Views(context.Background(), ids)
		if converged(ids, views, index) {
			return views
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes %v did not converge on one applied index >= %d within 20s:\n%s", ids, index, formatViews(views, errs))
		}
		time.Sleep(pollInterval)
	}
}

// requireRunning fails the test at once if any of ids has exited: waiting
// for it would only time out.
func (c *Cluster) requireRunning(t testing.TB, ids []int32) {
	t.Helper()
	for _, id := range ids {
		nd := c.node(id)
		if nd.proc == nil {
			t.Fatalf("node %d was never started", id)
		}
		if !nd.proc.running() {
			t.Fatalf("node %d exited with status %d; its output ends:\n%s", id, nd.proc.exitCode(), lastLines(nd.output(), 5))
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

// checkLogs fails the test if any node or broker reported a data race (a
// keel built with KEEL_INTEGRATION_RACE=1) or panicked.
func (c *Cluster) checkLogs(t testing.TB) {
	t.Helper()
	for _, nd := range c.procNodes() {
		b, err := os.ReadFile(nd.logPath)
		if err != nil {
			continue
		}
		for _, bad := range []string{"WARNING: DATA RACE", "panic: ", "fatal error: "} {
			if i := bytes.Index(b, []byte(bad)); i >= 0 {
				t.Errorf("%s's log (%s) reports %q:\n%s", nd.name, nd.logPath, bad, firstLines(string(b[i:]), 40))
			}
		}
	}
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
	for _, nd := range c.procNodes() {
		b, err := os.ReadFile(nd.logPath)
		if err != nil {
			continue
		}
		c.t.Logf("--- %s log (%s), last lines:\n%s", nd.name, nd.logPath, lastLines(string(b), 40))
	}
}

// procNodes returns the controllers in id order, then the brokers in id order.
func (c *Cluster) procNodes() []*procNode {
	out := slices.Clone(c.nodes)
	c.brokerMu.Lock()
	defer c.brokerMu.Unlock()
	ids := make([]int32, 0, len(c.brokers))
	for id := range c.brokers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		out = append(out, c.brokers[id])
	}
	return out
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
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

// pollUntil calls check until it reports done, failing the test with its
// last description at timeout.
func pollUntil(t testing.TB, timeout time.Duration, what string, check func() (done bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done, state := check()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last seen:\n%s", what, timeout, state)
		}
		time.Sleep(pollInterval)
	}
}
