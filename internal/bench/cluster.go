package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keel-dev/keel/metrics"
)

// controllerProc is one `keel controller` process of a local quorum.
type controllerProc struct {
	id          int32
	addr        string
	metricsAddr string
	dataDir     string
	logPath     string
	args        []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited
}

// localQuorum runs a quorum of `keel controller` processes on loopback,
// with data dirs under dir.
type localQuorum struct {
	exe   string
	env   []string
	nodes []*controllerProc
}

// controllerFlags are the flags every bench controller gets beside its
// identity: a low snapshot threshold checked every second, so the load
// scenario finds a raft snapshot soon after it asks for one, and no
// automatic leader rebalance, which would move leaderships in the middle
// of a measurement.
var controllerFlags = []string{
	"--snapshot-threshold", "1024",
	"--snapshot-interval", "1s",
	"--leader-imbalance-check-interval", "-1s",
}

// freePorts returns n distinct free ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %v", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// startLocalQuorum starts n controllers from exe (with env added to the
// environment) on free loopback ports, data dirs and logs under dir.
func startLocalQuorum(exe string, env []string, dir string, n int) (*localQuorum, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	q := &localQuorum{exe: exe, env: env}
	var voters []string
	for i := range n {
		id := int32(i + 1)
		p := &controllerProc{
			id:          id,
			addr:        fmt.Sprintf("127.0.0.1:%d", ports[i]),
			metricsAddr: fmt.Sprintf("127.0.0.1:%d", ports[n+i]),
			dataDir:     filepath.Join(dir, fmt.Sprintf("controller-%d", id)),
			logPath:     filepath.Join(dir, fmt.Sprintf("controller-%d.log", id)),
		}
		voters = append(voters, fmt.Sprintf("%d@%s", id, p.addr))
		q.nodes = append(q.nodes, p)
	}
	for _, p := range q.nodes {
		p.args = append([]string{"controller",
			"--node-id", strconv.Itoa(int(p.id)),
			"--listen", p.addr,
			"--data-dir", p.dataDir,
			"--voters", strings.Join(voters, ","),
			"--metrics-addr", p.metricsAddr,
		}, controllerFlags...)
		if err := q.start(p); err != nil {
			q.Close()
			return nil, err
		}
	}
	return q, nil
}

// Addrs are the controllers' addresses, by node id order.
func (q *localQuorum) Addrs() []string {
	out := make([]string, len(q.nodes))
	for i, p := range q.nodes {
		out[i] = p.addr
	}
	return out
}

func (q *localQuorum) node(id int32) *controllerProc {
	for _, p := range q.nodes {
		if p.id == id {
			return p
		}
	}
	return nil
}

func (q *localQuorum) start(p *controllerProc) error {
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(q.exe, p.args...)
	cmd.Env = append(os.Environ(), q.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start controller %d (%s): %v", p.id, q.exe, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	return nil
}

// Start starts a stopped controller again on its data dir.
func (q *localQuorum) Start(id int32) error { return q.start(q.node(id)) }

// Kill kills a controller with SIGKILL (kill -9) and waits until it is gone.
func (q *localQuorum) Kill(id int32) {
	p := q.node(id)
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Close kills every controller.
func (q *localQuorum) Close() {
	for _, p := range q.nodes {
		q.Kill(p.id)
	}
}

// exited names a controller that is no longer running, or returns nil.
func (q *localQuorum) exited() error {
	for _, p := range q.nodes {
		p.mu.Lock()
		done := p.done
		p.mu.Unlock()
		select {
		case <-done:
			return fmt.Errorf("controller %d exited", p.id)
		default:
		}
	}
	return nil
}

// Logs returns the end of every controller's log, for an error report.
func (q *localQuorum) Logs(lines int) string {
	var b strings.Builder
	for _, p := range q.nodes {
		fmt.Fprintf(&b, "--- controller %d (%s), last %d lines of %s\n%s", p.id, p.addr, lines, p.logPath, tail(p.logPath, lines))
	}
	return b.String()
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error() + "\n"
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// snapshotIndexOnDisk is the highest raft index of a complete raft snapshot
// in a controller's data dir (raft's file snapshot store:
// snapshots/TERM-INDEX-MILLIS/, written as .tmp and renamed when complete).
func snapshotIndexOnDisk(dataDir string) uint64 {
	entries, err := os.ReadDir(filepath.Join(dataDir, "snapshots"))
	if err != nil {
		return 0
	}
	var best uint64
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || strings.HasSuffix(name, ".tmp") {
			continue
		}
		parts := strings.Split(name, "-")
		if len(parts) != 3 {
			continue
		}
		if idx, err := strconv.ParseUint(parts[1], 10, 64); err == nil {
			if _, err := os.Stat(filepath.Join(dataDir, "snapshots", name, "state.bin")); err == nil {
				best = max(best, idx)
			}
		}
	}
	return best
}

// memory is what a controller's metrics say of its memory.
type memory struct {
	heapLive uint64 // go_gc_heap_live_bytes, after a collection
	rss      uint64 // process_resident_memory_bytes
}

// readMemory asks a controller's metrics endpoint for its live heap and
// resident set. A heap profile with gc=1 first runs a garbage collection,
// so the go_gc_heap_live_bytes that follows is current, not as of the last
// collection the controller happened to run.
func readMemory(ctx context.Context, metricsAddr string) (memory, error) {
	get := func(path string) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metricsAddr+path, nil)
		if err != nil {
			return "", err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return "", err
		}
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return string(body), nil
	}
	var m memory
	if _, err := get("/debug/pprof/heap?gc=1"); err != nil {
		return m, err
	}
	text, err := get("/metrics")
	if err != nil {
		return m, err
	}
	if m.heapLive, err = parseMetric(text, metrics.HeapLiveMetric); err != nil {
		return m, err
	}
	m.rss, err = parseMetric(text, "process_resident_memory_bytes")
	return m, err
}

// parseMetric finds an unlabelled metric's value in the Prometheus text
// format.
func parseMetric(text, name string) (uint64, error) {
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name+" ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %v", name, err)
		}
		return uint64(v), nil
	}
	return 0, errors.New(name + " not found in the metrics")
}

// waitFor polls cond every interval until it holds, ctx ends, or timeout
// passes; what names the wait in the error.
func waitFor(ctx context.Context, timeout, interval time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
