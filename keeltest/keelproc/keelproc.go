// Package keelproc runs real `keel controller` and `keel broker` processes
// on loopback, and starts, stops, kills, pauses and restarts them (and
// emulates a broker's power loss: PowerLoss): the
// integration suite and `keel bench` both run their quorums through it, so
// that there is one way to pick ports, lay out data dirs and logs, tell that
// a process has started, and retry when a port was taken meanwhile.
//
// Every process of a Cluster gets free loopback ports, a data dir and a log
// file under one directory; the controllers may reach each other through an
// internal/faultproxy.Net, so that a caller can cut links between them.
// Nothing here takes a testing.T: every operation returns an error for the
// caller to fail a test with or report, and every wait polls
// (internal/poll) until a deadline.
package keelproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/keel-dev/keel/internal/faultproxy"
	"github.com/keel-dev/keel/internal/poll"
)

const (
	// DefaultStartTimeout bounds the wait for a process to log that it
	// has started.
	DefaultStartTimeout = 20 * time.Second
	// DefaultStopTimeout bounds the wait for a process to exit after
	// Stop's SIGTERM or Kill's SIGKILL.
	DefaultStopTimeout = 15 * time.Second
	// DefaultAttempts is how many times a start is tried on fresh ports
	// when a port turns out to be taken.
	DefaultAttempts = 5

	// closeGrace is how long Close lets each process shut down on SIGTERM
	// before it sends SIGKILL.
	closeGrace = 10 * time.Second
	// abandonGrace is the same for the processes of a start attempt that
	// is given up.
	abandonGrace = 5 * time.Second
)

var (
	// ErrPortTaken is a process that exited before it started because
	// another process took its port between FreeAddrs and its bind.
	ErrPortTaken = errors.New("address already in use")
	// ErrNotRunning is an operation on a process that was never started
	// or has exited.
	ErrNotRunning = errors.New("not running")
)

// Config describes a cluster.
type Config struct {
	// Keel is the keel executable.
	Keel string
	// Dir holds every process's data dir and log file; it is created if
	// missing and never removed.
	Dir string
	// Controllers is how many controllers make up the quorum (ids 1..n).
	Controllers int
	// Env is added to every process's environment.
	Env []string

	// ClusterID, if set, is every controller's --cluster-id.
	ClusterID string
	// ControllerFlags are given to every controller, after the harness's
	// own flags and its TLS flags.
	ControllerFlags []string
	// TLSFlags, if set, returns the --tls-* flags of the certificate for
	// a common name: controller-<id> for a controller, broker-<id> for a
	// broker.
	TLSFlags func(cn string) []string
	// FaultNet puts the controllers behind a faultproxy.Net (Net): their
	// --voters addresses are its proxies, and each dials its peers through
	// its own (--raft-dial).
	FaultNet bool
	// ProxyBrokers makes each broker dial each controller through a
	// faultproxy.Proxy of its own (brokerlinks.go), so that a caller can
	// cut one broker's links to the quorum (SetBrokerLinks, BrokerLink)
	// while its process and port live. It sets the brokers'
	// --test-dial-via.
	ProxyBrokers bool
	// Metrics gives every controller a --metrics-addr on a free port
	// (Node.MetricsAddr).
	Metrics bool
	// Deferred controllers are not started by Start; StartNodes starts
	// them.
	Deferred []int32
	// ControllerDataDir, if set, gives controller id's data dir instead of
	// Dir/controller-<id> (a test puts it on a file system of its own).
	// Like the default, it is emptied before each start attempt.
	ControllerDataDir func(id int32) string
	// BrokerDataDir, if set, gives broker id's data dir instead of
	// Dir/broker-<id>, as ControllerDataDir does for controllers.
	BrokerDataDir func(id int32) string

	// Attempts (DefaultAttempts) is how many times a start is tried on
	// fresh ports.
	Attempts int
	// StartTimeout (DefaultStartTimeout) and StopTimeout
	// (DefaultStopTimeout) bound the waits for a process to start and to
	// exit.
	StartTimeout time.Duration
	StopTimeout  time.Duration
	// Retrying, if set, is told of each start that failed on a taken port,
	// before it is tried again on other ports; err says which and what
	// happens next.
	Retrying func(err error)
}

// BrokerSpec is how to run one broker: its id and its own flags.
type BrokerSpec struct {
	ID int32
	// Rack and Heartbeat are --rack and --heartbeat-interval, if set.
	Rack      string
	Heartbeat time.Duration
	// Metrics gives the broker a --metrics-addr on a free port
	// (Node.MetricsAddr).
	Metrics bool
	// Flags come after every other flag, TLS ones included.
	Flags []string
}

// Cluster is a quorum of keel controller processes on loopback, and the
// brokers started against it. Its methods are safe for concurrent use.
type Cluster struct {
	cfg Config

	mu      sync.Mutex
	started bool
	ctrls   []*Node // ctrls[id-1]
	brokers map[int32]*Node
	voters  string
	net     *faultproxy.Net
	seq     int // processes launched so far: Close stops the latest first
	// brokerLinks are each broker's proxies to the controllers, by
	// broker, then controller (Config.ProxyBrokers).
	brokerLinks map[int32]map[int32]*faultproxy.Proxy
}

// New checks cfg and makes its directory; Start starts the controllers.
func New(cfg Config) (*Cluster, error) {
	switch {
	case cfg.Keel == "":
		return nil, errors.New("keelproc: no keel executable")
	case cfg.Dir == "":
		return nil, errors.New("keelproc: no directory for the data dirs and logs")
	case cfg.Controllers < 1:
		return nil, fmt.Errorf("keelproc: %d controllers; want at least 1", cfg.Controllers)
	}
	if cfg.Attempts < 1 {
		cfg.Attempts = DefaultAttempts
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	return &Cluster{cfg: cfg, brokers: make(map[int32]*Node)}, nil
}

type role int

const (
	controllerRole role = iota
	brokerRole
)

// Node is one controller or broker: its data dir, log file, address and
// command line, and its latest process.
type Node struct {
	c       *Cluster
	role    role
	id      int32
	name    string // "controller 1", "broker 1": how errors name it
	ready   string // the log line that says it has started
	dataDir string
	logPath string
	metrics bool // has a --metrics-addr, which moves with its port

	mu          sync.Mutex
	addr        string
	metricsAddr string
	args        []string
	proc        *Proc // the latest process; nil before the first start
	logFrom     int64 // where the latest process's output starts in the log
	paused      bool  // sent SIGSTOP, not yet SIGCONT
	launched    int   // Cluster.seq when the latest process started
}

func (c *Cluster) newNode(r role, id int32) *Node {
	kind, ready := "controller", `msg="controller started"`
	if r == brokerRole {
		kind, ready = "broker", `msg="broker started"`
	}
	base := fmt.Sprintf("%s-%d", kind, id)
	dataDir := filepath.Join(c.cfg.Dir, base)
	if r == controllerRole && c.cfg.ControllerDataDir != nil {
		dataDir = c.cfg.ControllerDataDir(id)
	}
	if r == brokerRole && c.cfg.BrokerDataDir != nil {
		dataDir = c.cfg.BrokerDataDir(id)
	}
	return &Node{
		c:       c,
		role:    r,
		id:      id,
		name:    fmt.Sprintf("%s %d", kind, id),
		ready:   ready,
		dataDir: dataDir,
		logPath: filepath.Join(c.cfg.Dir, base+".log"),
	}
}

// Start starts every controller but the deferred ones, and waits until each
// has logged that it has started (not until there is a leader). If a port
// turns out to be taken, it stops them and starts over on other ports, with
// empty data dirs, up to Config.Attempts times. It is called once.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	started := c.started
	c.started = true
	c.mu.Unlock()
	if started {
		return errors.New("keelproc: the cluster was started before")
	}
	for attempt := 1; ; attempt++ {
		err := c.startControllers(ctx)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrPortTaken) || attempt == c.cfg.Attempts {
			return fmt.Errorf("start %d controllers (attempt %d of %d): %w", c.cfg.Controllers, attempt, c.cfg.Attempts, err)
		}
		c.retrying(fmt.Errorf("start attempt %d: %w; starting the controllers again on other ports", attempt, err))
	}
}

// startControllers is one attempt of Start: fresh ports, fresh nodes.
func (c *Cluster) startControllers(ctx context.Context) error {
	n := c.cfg.Controllers
	perNode := 1
	if c.cfg.Metrics {
		perNode = 2
	}
	addrs, err := FreeAddrs(perNode * n)
	if err != nil {
		return err
	}
	nodes := make([]*Node, n)
	listen := make(map[int32]string, n)
	for i := range nodes {
		nd := c.newNode(controllerRole, int32(i+1))
		nd.addr = addrs[i]
		if c.cfg.Metrics {
			nd.metrics, nd.metricsAddr = true, addrs[n+i]
		}
		nodes[i], listen[nd.id] = nd, nd.addr
	}
	var fnet *faultproxy.Net
	if c.cfg.FaultNet {
		if fnet, err = faultproxy.NewNet(listen); err != nil {
			return err
		}
	}
	voters := make([]string, n)
	for i, nd := range nodes {
		addr := nd.addr
		if fnet != nil {
			addr = fnet.VoterAddr(nd.id)
		}
		voters[i] = fmt.Sprintf("%d@%s", nd.id, addr)
	}
	c.mu.Lock()
	if c.net != nil {
		c.net.Close() // the previous attempt's, whose processes are gone
	}
	c.ctrls, c.net, c.voters = nodes, fnet, strings.Join(voters, ",")
	c.mu.Unlock()

	var launched []*Node
	for _, nd := range nodes {
		nd.SetArgs(c.controllerArgs(nd, false))
		// A previous attempt's data names other ports: start afresh.
		if err := os.RemoveAll(nd.dataDir); err != nil {
			return err
		}
		if slices.Contains(c.cfg.Deferred, nd.id) {
			continue
		}
		if err := c.launch(nd); err != nil {
			abandon(launched)
			return err
		}
		launched = append(launched, nd)
	}
	for _, nd := range launched {
		if err := c.waitStarted(ctx, nd); err != nil {
			abandon(launched)
			return err
		}
	}
	return nil
}

// controllerArgs is nd's command line: how it joins the quorum (the
// cluster's --voters, or --join), then the flags the Config gives it.
func (c *Cluster) controllerArgs(nd *Node, join bool) []string {
	a := ControllerArgs{
		ID:          nd.id,
		Listen:      nd.Addr(),
		DataDir:     nd.dataDir,
		Voters:      c.Voters(),
		Join:        join,
		ClusterID:   c.cfg.ClusterID,
		MetricsAddr: nd.MetricsAddr(),
		Flags:       append(c.tlsFlags(fmt.Sprintf("controller-%d", nd.id)), c.cfg.ControllerFlags...),
	}
	if fnet := c.Net(); fnet != nil {
		a.RaftDial = fnet.RaftDial(nd.id)
	}
	return a.Build()
}

func (c *Cluster) tlsFlags(cn string) []string {
	if c.cfg.TLSFlags == nil {
		return nil
	}
	return slices.Clone(c.cfg.TLSFlags(cn))
}

func (c *Cluster) retrying(err error) {
	if c.cfg.Retrying != nil {
		c.cfg.Retrying(err)
	}
}

// abandon stops the processes of a start attempt that is given up.
func abandon(nodes []*Node) {
	for _, nd := range nodes {
		if p := nd.process(); p != nil {
			p.Stop(abandonGrace)
		}
	}
}

// launch starts nd's process with its current arguments, appending its
// output to nd's log after a line that says when and how it was started.
func (c *Cluster) launch(nd *Node) error {
	f, err := os.OpenFile(nd.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close() // the child has its own copy of the descriptor
	args := nd.Args()
	fmt.Fprintf(f, "=== %s keel %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	off, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	p, err := StartProc(c.cfg.Keel, c.cfg.Env, f, f, args...)
	if err != nil {
		return fmt.Errorf("start %s: %w", nd.name, err)
	}
	c.mu.Lock()
	c.seq++
	seq := c.seq
	c.mu.Unlock()
	nd.mu.Lock()
	nd.proc, nd.logFrom, nd.paused, nd.launched = p, off, false, seq
	nd.mu.Unlock()
	return nil
}

// waitStarted waits until nd's latest process logs that it has started, and
// fails as soon as it exits before that.
func (c *Cluster) waitStarted(ctx context.Context, nd *Node) error {
	p := nd.process()
	return poll.Wait(ctx, c.cfg.StartTimeout, poll.Interval, nd.name+" to start", func() (bool, error) {
		// Whether it runs is asked first: once it has exited, the log
		// read next holds all it will ever write.
		running := p.Running()
		out := nd.Output()
		if strings.Contains(out, nd.ready) {
			return true, nil
		}
		if running {
			return false, nil
		}
		if strings.Contains(out, ErrPortTaken.Error()) {
			return false, fmt.Errorf("%s on %s exited before it started: %w", nd.name, nd.Addr(), ErrPortTaken)
		}
		return false, fmt.Errorf("%s exited with status %d before it started: %s", nd.name, p.ExitCode(), LastLines(strings.TrimSpace(out), 5))
	})
}

// StartNodes starts each of nodes (deferred controllers for the first time,
// stopped or killed nodes again) with its arguments and data dir, all
// before it waits for any, then waits until each has started. A broker whose
// port was taken meanwhile is started again on another port (a broker's
// address may change across restarts; a controller's, in --voters, may
// not).
func (c *Cluster) StartNodes(ctx context.Context, nodes ...*Node) error {
	for _, nd := range nodes {
		if nd.Running() {
			return fmt.Errorf("start %s: it is still running", nd.name)
		}
	}
	for _, nd := range nodes {
		if err := c.launch(nd); err != nil {
			return err
		}
	}
	for _, nd := range nodes {
		var err error
		if nd.role == brokerRole {
			err = c.waitBrokerStarted(ctx, nd)
		} else {
			err = c.waitStarted(ctx, nd)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// StartBrokers starts the brokers specs on free ports, each with its own
// data dir and log, pointed at every controller (through the fault net's
// proxies, if any), all before it waits for any; then it waits until each
// has started (not until it has registered).
func (c *Cluster) StartBrokers(ctx context.Context, specs ...BrokerSpec) error {
	need := 0
	for _, s := range specs {
		need++
		if s.Metrics {
			need++
		}
	}
	addrs, err := FreeAddrs(need)
	if err != nil {
		return err
	}
	controllers := c.VoterAddrs()
	nodes := make([]*Node, len(specs))
	for i, s := range specs {
		nd := c.newNode(brokerRole, s.ID)
		nd.addr, addrs = addrs[0], addrs[1:]
		if s.Metrics {
			nd.metrics, nd.metricsAddr, addrs = true, addrs[0], addrs[1:]
		}
		links, err := c.linkBroker(s.ID)
		if err != nil {
			return err
		}
		nd.args = BrokerArgs{
			ID:          s.ID,
			Listen:      nd.addr,
			DataDir:     nd.dataDir,
			Controllers: controllers,
			Heartbeat:   s.Heartbeat,
			Rack:        s.Rack,
			MetricsAddr: nd.metricsAddr,
			Flags:       append(append(c.tlsFlags(fmt.Sprintf("broker-%d", s.ID)), links...), s.Flags...),
		}.Build()
		nodes[i] = nd
	}
	c.mu.Lock()
	for i, s := range specs {
		if _, ok := c.brokers[s.ID]; ok || slices.ContainsFunc(specs[:i], func(o BrokerSpec) bool { return o.ID == s.ID }) {
			c.mu.Unlock()
			return fmt.Errorf("broker %d was started before: start it again with StartNodes", s.ID)
		}
	}
	for _, nd := range nodes {
		c.brokers[nd.id] = nd
	}
	c.mu.Unlock()
	for _, nd := range nodes {
		if err := c.launch(nd); err != nil {
			return err
		}
	}
	for _, nd := range nodes {
		if err := c.waitBrokerStarted(ctx, nd); err != nil {
			return err
		}
	}
	return nil
}

// waitBrokerStarted waits until broker nd's latest process has started; if
// its port was taken, it starts nd again on other ports.
func (c *Cluster) waitBrokerStarted(ctx context.Context, nd *Node) error {
	for attempt := 1; ; attempt++ {
		err := c.waitStarted(ctx, nd)
		if err == nil || !errors.Is(err, ErrPortTaken) || attempt == c.cfg.Attempts {
			return err
		}
		c.retrying(fmt.Errorf("%w; starting %s again on another port", err, nd.name))
		if err := nd.newPorts(); err != nil {
			return err
		}
		if err := c.launch(nd); err != nil {
			return err
		}
	}
}

// newPorts moves nd to free ports: its listen address and, if it has one,
// its metrics address, in its arguments too.
func (nd *Node) newPorts() error {
	n := 1
	if nd.metrics {
		n = 2
	}
	addrs, err := FreeAddrs(n)
	if err != nil {
		return err
	}
	nd.mu.Lock()
	defer nd.mu.Unlock()
	nd.addr = addrs[0]
	nd.args = setFlag(nd.args, "--listen", addrs[0])
	if nd.metrics {
		nd.metricsAddr = addrs[1]
		nd.args = setFlag(nd.args, "--metrics-addr", addrs[1])
	}
	return nil
}

// StartJoiner starts the next controller (the id after the highest) on a
// free port with an empty data dir and --join instead of --voters (and the
// flags every controller gets), and waits until it has started: a node
// waiting to be added to the quorum (keel quorum add-voter). From then on
// it is one of the controllers. It is not supported with a fault net,
// which has no proxies for it.
func (c *Cluster) StartJoiner(ctx context.Context) (*Node, error) {
	c.mu.Lock()
	if c.net != nil {
		c.mu.Unlock()
		return nil, errors.New("keelproc: a joining controller is not supported with a fault net")
	}
	nd := c.newNode(controllerRole, int32(len(c.ctrls)+1))
	nd.metrics = c.cfg.Metrics
	c.ctrls = append(c.ctrls, nd)
	c.mu.Unlock()
	var err error
	for attempt := 1; attempt <= c.cfg.Attempts; attempt++ {
		if err = nd.newPorts(); err != nil {
			return nil, err
		}
		nd.SetArgs(c.controllerArgs(nd, true))
		if err = os.RemoveAll(nd.dataDir); err != nil {
			return nil, err
		}
		if err = c.launch(nd); err != nil {
			return nil, err
		}
		if err = c.waitStarted(ctx, nd); err == nil {
			return nd, nil
		}
		abandon([]*Node{nd})
		if !errors.Is(err, ErrPortTaken) {
			break
		}
		if attempt < c.cfg.Attempts {
			c.retrying(fmt.Errorf("%w; starting %s again on another port", err, nd.name))
		}
	}
	return nil, fmt.Errorf("start %s with --join: %w", nd.name, err)
}

// Stop sends SIGTERM to each of nodes, then waits for each to exit. It
// fails for a node that was not running, that does not exit within
// Config.StopTimeout, or that exits with a status other than 0.
func (c *Cluster) Stop(nodes ...*Node) error {
	exited, errs := c.signalAndWait("stop", syscall.SIGTERM, "SIGTERM", nodes)
	for _, nd := range exited {
		if code := nd.ExitCode(); code != 0 {
			errs = append(errs, fmt.Errorf("stop %s: exit status %d, want 0; output ends:\n%s", nd.name, code, LastLines(nd.Output(), 10)))
		}
	}
	return errors.Join(errs...)
}

// Kill sends SIGKILL to each of nodes that is running, every signal before
// any wait so that they die together, then waits for each to exit. It
// fails (ErrNotRunning) for a node that was not running, after killing the
// others, and for one still running Config.StopTimeout after its SIGKILL.
func (c *Cluster) Kill(nodes ...*Node) error {
	_, errs := c.signalAndWait("kill", syscall.SIGKILL, "SIGKILL", nodes)
	return errors.Join(errs...)
}

// signalAndWait sends sig to each of nodes that is running, every signal
// before any wait, then waits up to Config.StopTimeout for each to exit. It
// returns those that exited, and an error for each that was not running or
// did not exit; verb and name say what the caller does and sends, for the
// errors.
func (c *Cluster) signalAndWait(verb string, sig syscall.Signal, name string, nodes []*Node) (exited []*Node, errs []error) {
	var sent []*Node
	for _, nd := range nodes {
		p := nd.process()
		if p == nil || !p.Running() {
			errs = append(errs, fmt.Errorf("%s %s: %w", verb, nd.name, ErrNotRunning))
			continue
		}
		_ = p.Signal(sig)
		sent = append(sent, nd)
	}
	for _, nd := range sent {
		p := nd.process()
		if p.Wait(c.cfg.StopTimeout) {
			exited = append(exited, nd)
			continue
		}
		// Ask a hung process where it is stuck: SIGQUIT makes a Go program
		// write every goroutine's stack to its log, and exit.
		stacks := ""
		if sig != syscall.SIGKILL && p.Signal(syscall.SIGQUIT) == nil && p.Wait(quitGrace) {
			stacks = goroutineDump(nd.Output())
		}
		errs = append(errs, fmt.Errorf("%s %s: pid %d still running %s after %s%s", verb, nd.name, p.Pid(), c.cfg.StopTimeout, name, stacks))
	}
	return exited, errs
}

// goroutineDump is the goroutine stacks a SIGQUIT wrote at the end of a
// process's output, without those that run only the standard library's own
// code, or "". A frame's function names its package path; only paths outside
// the standard library have a dot in their first element (github.com/...,
// google.golang.org/...), which needs no GOROOT of the machine that built it.
func goroutineDump(out string) string {
	i := strings.LastIndex(out, "SIGQUIT: quit")
	if i < 0 {
		return ""
	}
	var kept []string
	for _, block := range strings.Split(out[i:], "\n\n") {
		if !strings.HasPrefix(block, "goroutine ") {
			continue
		}
		for _, line := range strings.Split(block, "\n")[1:] {
			if line == "" || line[0] == '\t' || line[0] == ' ' {
				continue // a file:line, not a function
			}
			first, _, _ := strings.Cut(line, "/")
			if strings.Contains(first, ".") && strings.Contains(line, "/") {
				kept = append(kept, block)
				break
			}
		}
	}
	return "; its goroutines at SIGQUIT (the standard library's own left out):\n" + strings.Join(kept, "\n\n")
}

// Pause sends SIGSTOP to each of nodes: it keeps its connections and its
// port but answers nothing, as a hung or partitioned node would, until
// Resume (or Close). It fails for a node not running or already paused.
func (c *Cluster) Pause(nodes ...*Node) error {
	stop, _, ok := pauseSignals()
	if !ok {
		return errors.New("keelproc: pausing a process needs SIGSTOP")
	}
	var errs []error
	for _, nd := range nodes {
		nd.mu.Lock()
		if nd.proc == nil || !nd.proc.Running() || nd.paused {
			errs = append(errs, fmt.Errorf("pause %s: it is not running, or already paused", nd.name))
		} else if err := nd.proc.Signal(stop); err != nil {
			errs = append(errs, fmt.Errorf("pause %s: %w", nd.name, err))
		} else {
			nd.paused = true
		}
		nd.mu.Unlock()
	}
	return errors.Join(errs...)
}

// Resume sends SIGCONT to each of nodes, paused by Pause.
func (c *Cluster) Resume(nodes ...*Node) error {
	var errs []error
	for _, nd := range nodes {
		if err := nd.resume(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (nd *Node) resume() error {
	_, cont, _ := pauseSignals()
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if !nd.paused || nd.proc == nil || !nd.proc.Running() {
		return fmt.Errorf("resume %s: it is not paused", nd.name)
	}
	if err := nd.proc.Signal(cont); err != nil {
		return fmt.Errorf("resume %s: %w", nd.name, err)
	}
	nd.paused = false
	return nil
}

// Close stops every process still running: paused ones are resumed first,
// so that they can handle the SIGTERM; then each, the latest started first,
// gets SIGTERM and, if it has not exited 10 s later, SIGKILL. The broker
// links and the fault net, if any, close last. It fails, naming them, if any process did not
// exit with status 0 on SIGTERM alone.
func (c *Cluster) Close() error {
	c.mu.Lock()
	fnet := c.net
	c.net = nil
	c.mu.Unlock()
	nodes := c.Nodes()
	for _, nd := range nodes {
		if nd.Paused() {
			_ = nd.resume()
		}
	}
	nodes = slices.DeleteFunc(nodes, func(nd *Node) bool { return !nd.Running() })
	slices.SortFunc(nodes, func(a, b *Node) int { return b.launchSeq() - a.launchSeq() })
	var errs []error
	for _, nd := range nodes {
		p := nd.process()
		if !p.Stop(closeGrace) {
			errs = append(errs, fmt.Errorf("%s (pid %d, keel %s) did not exit with status 0 on SIGTERM: %v",
				nd.name, p.Pid(), strings.Join(nd.Args(), " "), p.Err()))
		}
	}
	c.closeBrokerLinks()
	if fnet != nil {
		fnet.Close()
	}
	return errors.Join(errs...)
}

// Controller returns controller id, or nil if there is none.
func (c *Cluster) Controller(id int32) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id < 1 || int(id) > len(c.ctrls) {
		return nil
	}
	return c.ctrls[id-1]
}

// Controllers returns every controller, in id order.
func (c *Cluster) Controllers() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.ctrls)
}

// Broker returns broker id, or nil if none was started.
func (c *Cluster) Broker(id int32) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.brokers[id]
}

// Brokers returns every broker started, in id order.
func (c *Cluster) Brokers() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Node, 0, len(c.brokers))
	for _, nd := range c.brokers {
		out = append(out, nd)
	}
	slices.SortFunc(out, func(a, b *Node) int { return int(a.id - b.id) })
	return out
}

// Nodes returns the controllers, then the brokers, each in id order.
func (c *Cluster) Nodes() []*Node {
	return append(c.Controllers(), c.Brokers()...)
}

// Live returns the ids of the controllers whose process is running and not
// paused.
func (c *Cluster) Live() []int32 {
	var ids []int32
	for _, nd := range c.Controllers() {
		if nd.Running() && !nd.Paused() {
			ids = append(ids, nd.id)
		}
	}
	return ids
}

// Addrs returns every controller's listen address, in id order: where a
// client on the controllers' side of any fault reaches them.
func (c *Cluster) Addrs() []string {
	ctrls := c.Controllers()
	addrs := make([]string, len(ctrls))
	for i, nd := range ctrls {
		addrs[i] = nd.Addr()
	}
	return addrs
}

// VoterAddrs returns every controller's address as the quorum knows it, in
// id order: its fault net proxy if there is one, its listen address
// otherwise. Brokers are given these.
func (c *Cluster) VoterAddrs() []string {
	addrs := c.Addrs()
	if fnet := c.Net(); fnet != nil {
		for i := range addrs {
			addrs[i] = fnet.VoterAddr(int32(i + 1))
		}
	}
	return addrs
}

// Voters returns the --voters value the controllers were started with.
func (c *Cluster) Voters() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.voters
}

// Net returns the fault net between the controllers (Config.FaultNet), or
// nil.
func (c *Cluster) Net() *faultproxy.Net {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.net
}

// ID is the node's id (a controller's --node-id, a broker's --broker-id).
func (nd *Node) ID() int32 { return nd.id }

// Name is how messages name the node: "controller 1", "broker 1".
func (nd *Node) Name() string { return nd.name }

// DataDir is the node's --data-dir.
func (nd *Node) DataDir() string { return nd.dataDir }

// LogPath is the file every one of the node's processes writes its output
// to, one after another.
func (nd *Node) LogPath() string { return nd.logPath }

// Addr is the node's --listen address. A broker's may change when it is
// started again.
func (nd *Node) Addr() string {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.addr
}

// MetricsAddr is the node's --metrics-addr, or "" without one.
func (nd *Node) MetricsAddr() string {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.metricsAddr
}

// Args returns the arguments the node is started with.
func (nd *Node) Args() []string {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return slices.Clone(nd.args)
}

// SetArgs replaces the arguments the node's next start uses.
func (nd *Node) SetArgs(args []string) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	nd.args = slices.Clone(args)
}

func (nd *Node) process() *Proc {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.proc
}

func (nd *Node) launchSeq() int {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.launched
}

// Running reports whether the node's latest process is running (paused
// included).
func (nd *Node) Running() bool {
	p := nd.process()
	return p != nil && p.Running()
}

// Paused reports whether the node's process is paused (Cluster.Pause).
func (nd *Node) Paused() bool {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.paused && nd.proc != nil && nd.proc.Running()
}

// Pid is the latest process's id, or 0 before the first start.
func (nd *Node) Pid() int {
	if p := nd.process(); p != nil {
		return p.Pid()
	}
	return 0
}

// ExitCode is the latest process's exit status, or -1 while it runs, if a
// signal ended it, or before the first start.
func (nd *Node) ExitCode() int {
	if p := nd.process(); p != nil {
		return p.ExitCode()
	}
	return -1
}

// Wait reports whether the latest process has exited within timeout (at
// once if there is none).
func (nd *Node) Wait(timeout time.Duration) bool {
	p := nd.process()
	return p == nil || p.Wait(timeout)
}

// Output is what the node's latest process has written so far.
func (nd *Node) Output() string {
	nd.mu.Lock()
	from := nd.logFrom
	nd.mu.Unlock()
	b, err := os.ReadFile(nd.logPath)
	if err != nil || int64(len(b)) < from {
		return ""
	}
	return string(b[from:])
}

// LogTail returns the last n lines of the node's whole log, every process
// of it.
func (nd *Node) LogTail(n int) (string, error) {
	b, err := os.ReadFile(nd.logPath)
	if err != nil {
		return "", err
	}
	return LastLines(string(b), n), nil
}

// LastLines returns the last n lines of s, without the final newline: the
// end of a process's output, for an error message.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
