package integration

// The broker side of the harness: `keel broker` processes started against a
// Cluster (keelproc.Cluster.StartBrokers), each with its own data dir and log
// file in the test's temp dir, stopped by PID in t.Cleanup (SIGTERM must make
// them exit 0), their logs checked for races and panics and printed when the
// test fails.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest/keelproc"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

const (
	// testSessionTimeout is the --session-timeout the broker tests give the
	// controllers, and testHeartbeat the brokers' --heartbeat-interval: ten
	// heartbeats per session, as KRaft's defaults (2s, 9s) allow a few.
	testSessionTimeout = 2 * time.Second
	testHeartbeat      = 200 * time.Millisecond

	// brokersTimeout bounds a wait for the brokers to reach a state that
	// needs no session to expire (registration, unfencing, catching up).
	brokersTimeout = 20 * time.Second

	// The broker states of `keel broker list` (DESIGN.md).
	stateActive = "active"
	stateFenced = "fenced"
)

// brokerOption adjusts how StartBroker runs a broker.
type brokerOption func(*keelproc.BrokerSpec)

// withRack passes --rack.
func withRack(rack string) brokerOption {
	return func(s *keelproc.BrokerSpec) { s.Rack = rack }
}

// withBrokerFlags passes flags to a broker, after the harness's own.
func withBrokerFlags(flags ...string) brokerOption {
	return func(s *keelproc.BrokerSpec) { s.Flags = append(s.Flags, flags...) }
}

// brokerArgs is the command line of a broker started by hand, outside the
// cluster, heartbeating as the cluster's brokers do.
func brokerArgs(id int32, listen, dataDir string, controllers []string) []string {
	return keelproc.BrokerArgs{ID: id, Listen: listen, DataDir: dataDir, Controllers: controllers, Heartbeat: testHeartbeat}.Build()
}

// startBrokerCluster starts a quorum of controllers with a session timeout
// of testSessionTimeout, then one broker per id (with rack "r<id>"), and
// waits until every broker is active on every controller. It returns the
// active controller and its epoch as they are once the brokers are active.
func startBrokerCluster(t *testing.T, controllers int, brokers ...int32) (c *Cluster, leader int32, epoch int64) {
	t.Helper()
	return startBrokerClusterWith(t, controllers, nil, brokers...)
}

// startBrokerClusterWith is startBrokerCluster with more options for the
// controllers (after the session timeout, which they may override).
func startBrokerClusterWith(t *testing.T, controllers int, opts []clusterOption, brokers ...int32) (c *Cluster, leader int32, epoch int64) {
	t.Helper()
	c = startCluster(t, controllers, append([]clusterOption{withSessionTimeout(testSessionTimeout)}, opts...)...)
	c.WaitForActive(t, activeTimeout)
	var bopts [][]brokerOption
	for _, id := range brokers {
		bopts = append(bopts, []brokerOption{withRack(fmt.Sprintf("r%d", id))})
	}
	c.startBrokers(brokers, bopts)
	c.WaitForBrokers(t, allActive(brokers...))
	leader, epoch = c.WaitForActive(t, activeTimeout)
	return c, leader, epoch
}

// allActive is the WaitForBrokers argument for ids all active.
func allActive(ids ...int32) map[int32]string {
	want := make(map[int32]string, len(ids))
	for _, id := range ids {
		want[id] = stateActive
	}
	return want
}

// StartBroker starts broker id on a free loopback port with its own data
// dir and log file, pointed at every controller, and waits until it has
// started (not until it has registered: see WaitForBrokers).
func (c *Cluster) StartBroker(id int32, opts ...brokerOption) {
	c.t.Helper()
	c.startBrokers([]int32{id}, [][]brokerOption{opts})
}

// startBrokers starts the brokers ids (opts[i] for ids[i]) together, each
// heartbeating every testHeartbeat, then waits until each has started; one
// whose port was taken meanwhile is started again on another port.
func (c *Cluster) startBrokers(ids []int32, opts [][]brokerOption) {
	t := c.t
	t.Helper()
	specs := make([]keelproc.BrokerSpec, len(ids))
	for i, id := range ids {
		if c.h.Broker(id) != nil {
			t.Fatalf("StartBroker(%d): broker %d was started before; use RestartBroker", id, id)
		}
		specs[i] = keelproc.BrokerSpec{ID: id, Heartbeat: testHeartbeat}
		for _, opt := range opts[i] {
			opt(&specs[i])
		}
	}
	if err := c.h.StartBrokers(context.Background(), specs...); err != nil {
		t.Fatal(err)
	}
}

func (c *Cluster) broker(id int32) *keelproc.Node {
	c.t.Helper()
	nd := c.h.Broker(id)
	if nd == nil {
		c.t.Fatalf("no broker %d was started", id)
	}
	return nd
}

// BrokerAddr returns broker id's address (its --listen).
func (c *Cluster) BrokerAddr(id int32) string {
	c.t.Helper()
	return c.broker(id).Addr()
}

// BrokerDataDir returns broker id's data dir.
func (c *Cluster) BrokerDataDir(id int32) string {
	c.t.Helper()
	return c.broker(id).DataDir()
}

// BrokerIDs returns the id of every broker started, in order.
func (c *Cluster) BrokerIDs() []int32 {
	var ids []int32
	for _, nd := range c.h.Brokers() {
		ids = append(ids, nd.ID())
	}
	return ids
}

// KillBroker sends SIGKILL to broker id and waits for it to exit.
func (c *Cluster) KillBroker(id int32) {
	c.t.Helper()
	if err := c.h.Kill(c.broker(id)); err != nil {
		c.t.Fatal(err)
	}
}

// KillTogether sends SIGKILL to the controllers ctrls and the brokers
// brokers at the same moment (every signal before any wait), then waits for
// each to exit.
func (c *Cluster) KillTogether(ctrls, brokers []int32) {
	c.t.Helper()
	var nds []*keelproc.Node
	for _, id := range ctrls {
		nds = append(nds, c.node(id))
	}
	for _, id := range brokers {
		nds = append(nds, c.broker(id))
	}
	if err := c.h.Kill(nds...); err != nil {
		c.t.Fatal(err)
	}
}

// StopBroker sends SIGTERM to broker id, waits for it to exit, and fails the
// test unless it exited with status 0.
func (c *Cluster) StopBroker(id int32) {
	c.t.Helper()
	if err := c.h.Stop(c.broker(id)); err != nil {
		c.t.Fatal(err)
	}
}

// RestartBroker starts broker id again with the same flags and data dir
// (and port, unless it has been taken meanwhile), and waits until it has
// started.
func (c *Cluster) RestartBroker(id int32) {
	c.t.Helper()
	if err := c.h.StartNodes(context.Background(), c.broker(id)); err != nil {
		c.t.Fatalf("RestartBroker(%d): %v", id, err)
	}
}

// BrokerRunning reports whether broker id's latest process is running.
func (c *Cluster) BrokerRunning(id int32) bool {
	c.t.Helper()
	return c.broker(id).Running()
}

// ListBrokersOn asks controller ctrl for the brokers of its own committed
// image (a stale read: a follower answers too).
func (c *Cluster) ListBrokersOn(ctx context.Context, ctrl int32) (map[int32]*keelpb.BrokerInfo, error) {
	c.t.Helper()
	cl, err := c.client.Controller(c.node(ctrl).Addr())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, describeLimit)
	defer cancel()
	resp, err := cl.ListBrokers(ctx, &keelpb.ListBrokersRequest{Stale: true})
	if err != nil {
		return nil, err
	}
	out := make(map[int32]*keelpb.BrokerInfo, len(resp.Brokers))
	for _, b := range resp.Brokers {
		if _, dup := out[b.Id]; dup {
			return nil, fmt.Errorf("controller %d lists broker %d twice", ctrl, b.Id)
		}
		out[b.Id] = b
	}
	return out, nil
}

// brokerLists asks each of ctrls, in parallel, for its broker list. A
// controller that does not answer is absent from lists, its error in errs.
func (c *Cluster) brokerLists(ctx context.Context, ctrls []int32) (lists map[int32]map[int32]*keelpb.BrokerInfo, errs map[int32]error) {
	lists = make(map[int32]map[int32]*keelpb.BrokerInfo, len(ctrls))
	errs = make(map[int32]error)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range ctrls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.ListBrokersOn(ctx, id)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[id] = err
			} else {
				lists[id] = l
			}
		}()
	}
	wg.Wait()
	return lists, errs
}

// WaitForBrokers polls ListBrokers on every live controller until each of
// them lists exactly the brokers of want, in the states want gives (a
// broker that must not be listed is left out of want). It returns the list
// of the lowest-numbered live controller. It fails the test at once if a
// broker that want has active has exited, and at brokersTimeout otherwise.
func (c *Cluster) WaitForBrokers(t testing.TB, want map[int32]string) map[int32]*keelpb.BrokerInfo {
	t.Helper()
	return c.waitForBrokerLists(t, want, "brokers "+formatWant(want), nil)
}

// waitForBrokerLists is WaitForBrokers with a further condition, ok, that
// every live controller's list must meet too (nil for none); what describes
// the awaited lists for the failure message.
func (c *Cluster) waitForBrokerLists(t testing.TB, want map[int32]string, what string, ok func(map[int32]*keelpb.BrokerInfo) bool) map[int32]*keelpb.BrokerInfo {
	t.Helper()
	var first map[int32]*keelpb.BrokerInfo
	poll.UntilState(t, brokersTimeout, "every live controller to list "+what, func() (bool, string) {
		for id, st := range want {
			if st != stateActive {
				continue
			}
			if nd := c.broker(id); !nd.Running() {
				t.Fatalf("waiting for broker %d to be active, but it has exited (status %d); its output ends:\n%s",
					id, nd.ExitCode(), keelproc.LastLines(nd.Output(), 10))
			}
		}
		live := c.Live()
		lists, errs := c.brokerLists(context.Background(), live)
		done := len(live) > 0 && len(lists) == len(live) && allListsAre(lists, want)
		for _, l := range lists {
			done = done && (ok == nil || ok(l))
		}
		if done {
			first = lists[live[0]]
		}
		return done, fmt.Sprintf("controllers %v:\n%s", live, formatBrokerLists(lists, errs))
	})
	return first
}

// WaitForReregistered waits until every live controller lists the brokers
// of want in their states and broker id at an epoch above old: a restarted
// broker's new registration, not its previous one still in its session.
func (c *Cluster) WaitForReregistered(t testing.TB, want map[int32]string, id int32, old int64) map[int32]*keelpb.BrokerInfo {
	t.Helper()
	return c.waitForBrokerLists(t, want, fmt.Sprintf("brokers %s with broker %d at an epoch above %d", formatWant(want), id, old),
		func(l map[int32]*keelpb.BrokerInfo) bool { return l[id].GetEpoch() > old })
}

func allListsAre(lists map[int32]map[int32]*keelpb.BrokerInfo, want map[int32]string) bool {
	for _, l := range lists {
		if len(l) != len(want) {
			return false
		}
		for id, st := range want {
			if b, ok := l[id]; !ok || b.State != st {
				return false
			}
		}
	}
	return true
}

func formatWant(want map[int32]string) string {
	ids := make([]int32, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("%d=%s", id, want[id])
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func formatBrokerList(l map[int32]*keelpb.BrokerInfo) string {
	ids := make([]int32, 0, len(l))
	for id := range l {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	parts := make([]string, len(ids))
	for i, id := range ids {
		b := l[id]
		parts[i] = fmt.Sprintf("%d=%s(epoch %d, %s)", id, b.State, b.Epoch, b.Address)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func formatBrokerLists(lists map[int32]map[int32]*keelpb.BrokerInfo, errs map[int32]error) string {
	var ids []int32
	for id := range lists {
		ids = append(ids, id)
	}
	for id := range errs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var b strings.Builder
	for _, id := range ids {
		if l, ok := lists[id]; ok {
			fmt.Fprintf(&b, "  node %d lists %s\n", id, formatBrokerList(l))
		} else {
			fmt.Fprintf(&b, "  node %d: %v\n", id, errs[id])
		}
	}
	return b.String()
}

// waitBrokerState polls every live controller until one of them lists
// broker id in state, and returns when that was first seen. It fails the
// test if that does not happen by deadline.
func (c *Cluster) waitBrokerState(t testing.TB, id int32, state string, deadline time.Time) time.Time {
	t.Helper()
	var seen time.Time
	poll.UntilState(t, time.Until(deadline), fmt.Sprintf("a live controller to list broker %d as %s", id, state), func() (bool, string) {
		live := c.Live()
		lists, errs := c.brokerLists(context.Background(), live)
		for _, l := range lists {
			if b, ok := l[id]; ok && b.State == state {
				seen = time.Now()
				return true, ""
			}
		}
		return false, fmt.Sprintf("controllers %v:\n%s", live, formatBrokerLists(lists, errs))
	})
	return seen
}

// brokerClient returns a (cached) client of the broker service at addr.
func (c *Cluster) brokerClient(addr string) (*rpc.BrokerClient, error) {
	c.brokerMu.Lock()
	defer c.brokerMu.Unlock()
	if bc, ok := c.brokerConns[addr]; ok {
		return bc, nil
	}
	bc, err := rpc.DialBroker(addr, c.opts.rpcOptions()...)
	if err != nil {
		return nil, err
	}
	if c.brokerConns == nil {
		c.brokerConns = make(map[string]*rpc.BrokerClient)
	}
	c.brokerConns[addr] = bc
	return bc, nil
}

func (c *Cluster) closeBrokerConns() {
	c.brokerMu.Lock()
	defer c.brokerMu.Unlock()
	for addr, bc := range c.brokerConns {
		bc.Close()
		delete(c.brokerConns, addr)
	}
}

// InspectE asks broker id for its own view.
func (c *Cluster) InspectE(ctx context.Context, id int32) (*keelpb.InspectResponse, error) {
	bc, err := c.brokerClient(c.BrokerAddr(id))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, describeLimit)
	defer cancel()
	return bc.Inspect(ctx)
}

// Inspect asks broker id for its own view, failing the test if it does not
// answer.
func (c *Cluster) Inspect(t testing.TB, id int32) *keelpb.InspectResponse {
	t.Helper()
	v, err := c.InspectE(context.Background(), id)
	if err != nil {
		t.Fatalf("inspect broker %d at %s: %v", id, c.BrokerAddr(id), err)
	}
	return v
}

// WaitForInspect polls the brokers ids' own views until every one of them
// satisfies ok, and returns those views. what says what is awaited, for the
// failure message.
func (c *Cluster) WaitForInspect(t testing.TB, ids []int32, what string, ok func(*keelpb.InspectResponse) bool) map[int32]*keelpb.InspectResponse {
	t.Helper()
	var views map[int32]*keelpb.InspectResponse
	poll.UntilState(t, brokersTimeout, fmt.Sprintf("brokers %v all %s", ids, what), func() (bool, string) {
		views = make(map[int32]*keelpb.InspectResponse, len(ids))
		errs := make(map[int32]error)
		done := true
		for _, id := range ids {
			if nd := c.broker(id); !nd.Running() {
				t.Fatalf("waiting for broker %d (%s), but it has exited (status %d); its output ends:\n%s",
					id, what, nd.ExitCode(), keelproc.LastLines(nd.Output(), 10))
			}
			v, err := c.InspectE(context.Background(), id)
			if err != nil {
				errs[id] = err
				done = false
				continue
			}
			views[id] = v
			done = done && ok(v)
		}
		return done, formatInspects(views, errs)
	})
	return views
}

// WaitForBrokerOffsets waits until the brokers ids have all applied the
// same metadata offset, at least min, and returns their views.
func (c *Cluster) WaitForBrokerOffsets(t testing.TB, ids []int32, min uint64) map[int32]*keelpb.InspectResponse {
	t.Helper()
	var views map[int32]*keelpb.InspectResponse
	poll.UntilState(t, brokersTimeout, fmt.Sprintf("brokers %v to converge on one metadata offset >= %d", ids, min), func() (bool, string) {
		views = c.WaitForInspect(t, ids, fmt.Sprintf("at metadata offset >= %d", min), func(v *keelpb.InspectResponse) bool {
			return v.MetadataOffset >= min
		})
		same := true
		for _, v := range views {
			same = same && v.MetadataOffset == views[ids[0]].MetadataOffset
		}
		return same, formatInspects(views, nil)
	})
	return views
}

func formatInspects(views map[int32]*keelpb.InspectResponse, errs map[int32]error) string {
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
			fmt.Fprintf(&b, "  broker %d: state=%s epoch=%d controller=%d controller_epoch=%d offset=%d cluster=%s\n",
				id, v.State, v.BrokerEpoch, v.ControllerId, v.ControllerEpoch, v.MetadataOffset, v.ClusterId)
		} else {
			fmt.Fprintf(&b, "  broker %d: %v\n", id, errs[id])
		}
	}
	return b.String()
}

// ---------------------------------------------------------------------------
// The keel CLI's broker commands

// brokerListRow is one row of `keel broker list -o json` (DESIGN.md).
type brokerListRow struct {
	ID      int32  `json:"id"`
	Epoch   int64  `json:"epoch"`
	Address string `json:"address"`
	Rack    string `json:"rack"`
	State   string `json:"state"`
}

// brokerInspectJSON is `keel broker inspect -o json` (DESIGN.md).
type brokerInspectJSON struct {
	brokerInspectFields
	Partitions []json.RawMessage `json:"partitions"`
}

// brokerInspectFields are the scalar fields of `keel broker inspect -o json`.
type brokerInspectFields struct {
	BrokerID        int32  `json:"broker_id"`
	BrokerEpoch     int64  `json:"broker_epoch"`
	ControllerID    int32  `json:"controller_id"`
	ControllerEpoch int64  `json:"controller_epoch"`
	MetadataOffset  uint64 `json:"metadata_offset"`
	ClusterID       string `json:"cluster_id"`
	State           string `json:"state"`
}

// cliBrokerList runs `keel broker list -o json` against every controller
// and returns its rows by id.
func (c *Cluster) cliBrokerList(t testing.TB) map[int32]brokerListRow {
	t.Helper()
	stdout, stderr, code := runKeel(t, 30*time.Second, "broker", "list", "--controllers", strings.Join(c.Addrs(), ","), "-o", "json")
	if code != 0 {
		t.Fatalf("keel broker list: exit %d: %s", code, stderr)
	}
	var rows []brokerListRow
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
		t.Fatalf("keel broker list: bad JSON: %v\n%s", err, stdout)
	}
	out := make(map[int32]brokerListRow, len(rows))
	for i, r := range rows {
		if _, dup := out[r.ID]; dup {
			t.Errorf("keel broker list: broker %d listed twice:\n%s", r.ID, stdout)
		}
		if i > 0 && rows[i-1].ID >= r.ID {
			t.Errorf("keel broker list: rows not in id order:\n%s", stdout)
		}
		out[r.ID] = r
	}
	return out
}

// cliInspect runs `keel broker inspect --address ... -o json` on broker id.
func (c *Cluster) cliInspect(t testing.TB, id int32) brokerInspectJSON {
	t.Helper()
	stdout, stderr, code := runKeel(t, 30*time.Second, "broker", "inspect", "--address", c.BrokerAddr(id), "-o", "json")
	if code != 0 {
		t.Fatalf("keel broker inspect (broker %d): exit %d: %s", id, code, stderr)
	}
	var v brokerInspectJSON
	if err := json.Unmarshal([]byte(stdout), &v); err != nil {
		t.Fatalf("keel broker inspect (broker %d): bad JSON: %v\n%s", id, err, stdout)
	}
	return v
}

// ---------------------------------------------------------------------------
// What the brokers replayed
//
// The reference broker's handler (broker.LoggingHandler) logs every broker
// fence it replays, `msg="broker fenced" ... id=N epoch=E`, and a broker
// replays every committed batch in offset order. So the fence lines in the
// brokers' logs are the fences the cluster committed, including one that was
// undone a moment later and that no poll of `broker list` would catch.

// logMark is where each broker's log ended at some moment.
type logMark map[int32]int64

// brokerLogMark returns where every broker's log ends now.
func (c *Cluster) brokerLogMark() logMark {
	m := logMark{}
	for _, id := range c.BrokerIDs() {
		if fi, err := os.Stat(c.broker(id).LogPath()); err == nil {
			m[id] = fi.Size()
		}
	}
	return m
}

var fencedLine = regexp.MustCompile(`msg="broker fenced".* id=(\d+) epoch=(\d+)`)

// fence is one fence a broker replayed.
type fence struct {
	reporter, id int32
	epoch        int64
	line         string
}

// fencesLoggedSince returns the fences that the brokers' logs show after mark.
func (c *Cluster) fencesLoggedSince(mark logMark) []fence {
	var out []fence
	for _, id := range c.BrokerIDs() {
		b, err := os.ReadFile(c.broker(id).LogPath())
		if err != nil || int64(len(b)) < mark[id] {
			continue
		}
		for _, line := range strings.Split(string(b[mark[id]:]), "\n") {
			m := fencedLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			fid, _ := strconv.Atoi(m[1])
			ep, _ := strconv.ParseInt(m[2], 10, 64)
			out = append(out, fence{reporter: id, id: int32(fid), epoch: ep, line: line})
		}
	}
	return out
}

// checkNoFences fails the test if the brokers' logs show, after mark, a
// fence of any broker but those of except; when says when, for the message.
func (c *Cluster) checkNoFences(t testing.TB, mark logMark, when string, except ...int32) {
	t.Helper()
	var lines []string
	for _, f := range c.fencesLoggedSince(mark) {
		if !slices.Contains(except, f.id) {
			lines = append(lines, fmt.Sprintf("broker %d replayed the fence of broker %d (epoch %d): %s", f.reporter, f.id, f.epoch, f.line))
		}
	}
	if len(lines) > 0 {
		t.Errorf("the brokers replayed %d fences %s:\n  %s", len(lines), when, strings.Join(lines, "\n  "))
	}
}

// waitFenceLogged waits until each of reporters has logged, after mark, that
// it replayed the fence of broker id at epoch.
func (c *Cluster) waitFenceLogged(t testing.TB, mark logMark, reporters []int32, id int32, epoch int64) {
	t.Helper()
	poll.UntilState(t, brokersTimeout, fmt.Sprintf("brokers %v to replay the fence of broker %d (epoch %d)", reporters, id, epoch), func() (bool, string) {
		seen := map[int32]bool{}
		for _, f := range c.fencesLoggedSince(mark) {
			if f.id == id && f.epoch == epoch {
				seen[f.reporter] = true
			}
		}
		missing := slices.DeleteFunc(slices.Clone(reporters), func(r int32) bool { return seen[r] })
		return len(missing) == 0, fmt.Sprintf("no `msg=\"broker fenced\" ... id=%d epoch=%d` in the logs of brokers %v", id, epoch, missing)
	})
}

// ---------------------------------------------------------------------------
// Watching the broker list

// brokerWatch polls ListBrokers on a set of controllers in the background
// and records every answer in which a broker is not active at the epoch it
// had when the watch began.
type brokerWatch struct {
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	started time.Time

	mu      sync.Mutex
	reads   int             // successful ListBrokers answers
	bad     []string        // answers that broke the rule, with when: the first of each listing
	badSeen map[string]bool // the listings in bad
	badN    int             // answers that broke the rule
}

// watchBrokersActive starts polling every controller for its broker list
// every few milliseconds, each controller on its own so that a hung one
// delays no other, until stopWatch (or the end of the test). want holds
// the brokers and the epochs they must keep, all active. A controller that
// does not answer (killed, paused) is skipped.
func (c *Cluster) watchBrokersActive(t testing.TB, want map[int32]int64) *brokerWatch {
	t.Helper()
	w := &brokerWatch{stop: make(chan struct{}), started: time.Now()}
	t.Cleanup(func() { w.stopWatch() })
	for i, addr := range c.Addrs() { // fixed: the watch shares no state with the test
		cl, err := c.client.Controller(addr)
		if err != nil {
			t.Fatal(err)
		}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				resp, err := cl.ListBrokers(ctx, &keelpb.ListBrokersRequest{Stale: true})
				cancel()
				if err == nil {
					w.record(i+1, resp, want)
				}
				select {
				case <-w.stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
	}
	return w
}

func (w *brokerWatch) record(node int, resp *keelpb.ListBrokersResponse, want map[int32]int64) {
	got := make(map[int32]*keelpb.BrokerInfo)
	for _, b := range resp.Brokers {
		got[b.Id] = b
	}
	ok := len(got) == len(want)
	for id, ep := range want {
		b, found := got[id]
		ok = ok && found && b.State == stateActive && b.Epoch == ep
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reads++
	if ok {
		return
	}
	w.badN++
	if listing := formatBrokerList(got); !w.badSeen[listing] && len(w.bad) < 10 {
		if w.badSeen == nil {
			w.badSeen = map[string]bool{}
		}
		w.badSeen[listing] = true
		w.bad = append(w.bad, fmt.Sprintf("first at +%s (node %d): %s", time.Since(w.started).Round(time.Millisecond), node, listing))
	}
}

// stopWatch ends the watch and returns how many answers it read and a
// description of those that broke the rule (none if all kept it).
func (w *brokerWatch) stopWatch() (reads int, bad []string) {
	w.once.Do(func() { close(w.stop) })
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.badN > 0 {
		bad = append([]string{fmt.Sprintf("%d of %d answers since the watch began; each listing seen:", w.badN, w.reads)}, w.bad...)
	}
	return w.reads, bad
}

// watchUntil keeps the watch running until deadline, failing the test early
// if a watched broker process exits meanwhile, then stops it.
func (c *Cluster) watchUntil(t testing.TB, w *brokerWatch, deadline time.Time, brokers []int32) (reads int, bad []string) {
	t.Helper()
	tick := time.NewTicker(poll.Interval)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		for _, id := range brokers {
			if nd := c.broker(id); !nd.Running() {
				_, bad := w.stopWatch()
				t.Fatalf("broker %d exited (status %d) during the watch (which had seen %d bad lists: %v); its output ends:\n%s",
					id, nd.ExitCode(), len(bad), bad, keelproc.LastLines(nd.Output(), 10))
			}
		}
		<-tick.C
	}
	return w.stopWatch()
}
