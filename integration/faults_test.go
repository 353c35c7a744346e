package integration

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/faultproxy"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest/keelproc"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/raftlog"
	"github.com/keel-dev/keel/rpc"
	"github.com/keel-dev/keel/server"
)

// The fault suite: a real cluster of 3 controllers and 3 brokers on
// loopback, every controller link and every broker's link to a controller
// behind a fault proxy (faultproxy_test.go, keelproc's ProxyBrokers),
// admin clients writing and reading topics and their configs (some
// following the leader, some pinned to each controller) while a nemesis
// kills, restarts, cuts off (both ways, or only what a node sends), blips
// and pauses nodes at random. After each run everything is healed and the
// history and the cluster are checked (faults_check_test.go); the gray
// faults (faults_gray_test.go) are judged one by one.
//
// It is bounded by its environment:
//
//	KEEL_FAULT_RUNS      runs, each on a fresh cluster (default 1)
//	KEEL_FAULT_DURATION  faults injected per run (default 15s)
//	KEEL_FAULT_SEED      the first run's seed (default: from the clock);
//	                     run i uses seed+i, and a failing run prints its own
//	KEEL_FAULT_KINDS     the fault kinds to inject, comma-separated
//	                     (default: all of faultKinds)
//
// `make test` runs it once; `make faults` runs it longer.

const (
	fixtureTopic      = "fixed" // never deleted: its leader epochs must only grow
	fixturePartitions = 6
	kvWorkers         = 3
	opTimeout         = 2 * time.Second
	observeEvery      = 50 * time.Millisecond
	healTimeout       = 60 * time.Second
	checkTimeout      = 60 * time.Second // porcupine's budget per run
)

// kvTopics are the names the porcupine workload creates, deletes and reads
// in generation gen. The nemesis starts a new generation after each fault,
// so that an operation whose outcome is unknown, which may take effect at
// any time later and so explain away almost any answer after it, bears only
// on the names of its own fault.
func kvTopics(gen int64) []string {
	names := make([]string, kvTopicsPerGeneration)
	for i := range names {
		names[i] = fmt.Sprintf("k%d-%d", gen, i)
	}
	return names
}

const kvTopicsPerGeneration = 4

// faultKinds are what the nemesis injects, with their weights. The disk
// faults (disks_test.go) run only where this machine can mount file
// systems; each runs at least once in every run that has them.
var faultKinds = []struct {
	name   string
	weight int
}{
	{"kill-leader", 3},
	{"kill-controller", 2},
	{"kill-broker", 3},
	{"restart-broker", 2},
	{"isolate-leader", 3},
	{"cut-leader-out", 2},
	{"pause-leader", 3},
	{"disk-full", 1},
	{"disk-read-only", 1},
	{"blip-link", 3},
	{"blip-leader", 4},
	{"blip-public", 2},
	{"pause-leader-short", 2},
	{"blip-broker", 4},
}

// notReadyWithin bounds how long a controller whose disk failed may go on
// reporting ready: its next raft write fails (the clients keep writing),
// and from then on it is not ready.
const notReadyWithin = 10 * time.Second

type faultSuiteConfig struct {
	runs     int
	duration time.Duration
	seed     int64
}

func faultConfig(t *testing.T) faultSuiteConfig {
	cfg := faultSuiteConfig{runs: 1, duration: 15 * time.Second, seed: time.Now().UnixNano() % 1_000_000}
	if s := os.Getenv("KEEL_FAULT_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("KEEL_FAULT_RUNS=%q: want a positive integer", s)
		}
		cfg.runs = n
	}
	if s := os.Getenv("KEEL_FAULT_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("KEEL_FAULT_DURATION=%q: want a positive duration such as 30s", s)
		}
		cfg.duration = d
	}
	if s := os.Getenv("KEEL_FAULT_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("KEEL_FAULT_SEED=%q: want an integer", s)
		}
		cfg.seed = n
	}
	return cfg
}

// faultsTarget is the make target that replays a run, with the fault kinds
// it was limited to.
func faultsTarget() string {
	if env := os.Getenv("KEEL_FAULT_KINDS"); env != "" {
		return "faults KEEL_FAULT_KINDS=" + env
	}
	return "faults"
}

// chosenFaultKinds returns the fault kinds KEEL_FAULT_KINDS names, or all.
func chosenFaultKinds(t *testing.T) map[string]bool {
	t.Helper()
	kinds := make(map[string]bool)
	env := os.Getenv("KEEL_FAULT_KINDS")
	for _, k := range faultKinds {
		kinds[k.name] = env == ""
	}
	if env == "" {
		return kinds
	}
	for _, name := range strings.Split(env, ",") {
		if _, ok := kinds[strings.TrimSpace(name)]; !ok {
			t.Fatalf("KEEL_FAULT_KINDS=%q: no fault kind %q", env, name)
		}
		kinds[strings.TrimSpace(name)] = true
	}
	return kinds
}

func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault suite starts clusters and runs for a while")
	}
	cfg := faultConfig(t)
	if why, whyRO := disksAvailable(); why != "" {
		t.Logf("disk faults skipped: %s", why)
	} else if whyRO != "" {
		t.Logf("disk-read-only skipped: %s", whyRO)
	}
	runSeeded(t, cfg, "fault suite", faultsTarget(), newFaultTally(), runFaults)
}

// runSeeded runs a fault suite: run once per seed of cfg, each a subtest,
// adding each run's tally to total; then it logs how many runs survived
// with the total, and fails naming each failed seed with the make target
// that replays it.
func runSeeded[T interface {
	Add(T)
	String() string
}](t *testing.T, cfg faultSuiteConfig, suite, target string, total T, run func(*testing.T, int64, time.Duration) T) {
	t.Helper()
	var failed []int64
	for i := range cfg.runs {
		seed := cfg.seed + int64(i)
		var tally T
		var ran bool
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			tally, ran = run(t, seed, cfg.duration), true
		})
		if ran {
			total.Add(tally)
		}
		if !ok {
			failed = append(failed, seed)
		}
	}
	t.Logf("%s: %d of %d runs survived (%s of faults each)\n%s", suite, cfg.runs-len(failed), cfg.runs, cfg.duration, total)
	for _, seed := range failed {
		t.Errorf("run with seed %d failed: replay it with KEEL_FAULT_SEED=%d KEEL_FAULT_RUNS=1 make %s", seed, seed, target)
	}
}

// faultTally counts what a run did, for the report.
type faultTally struct {
	faults  map[string]int
	ops     map[string]int // by kind/outcome
	reads   int            // observations of controllers and brokers
	elected int            // controller epochs seen
	// crashElections: elections started at once on finding the raft
	// leader's process gone (raftlog's crash election).
	crashElections int
	gray           []grayFault // and kills of a leader, judged one by one
	pinned         map[string]int
}

func newFaultTally() *faultTally {
	return &faultTally{faults: make(map[string]int), ops: make(map[string]int), pinned: make(map[string]int)}
}

func (f *faultTally) Add(o *faultTally) {
	for k, v := range o.faults {
		f.faults[k] += v
	}
	for k, v := range o.ops {
		f.ops[k] += v
	}
	f.reads += o.reads
	f.elected += o.elected
	f.crashElections += o.crashElections
	f.gray = append(f.gray, o.gray...)
	for k, v := range o.pinned {
		f.pinned[k] += v
	}
}

func (f *faultTally) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "faults injected:")
	for _, k := range faultKinds {
		fmt.Fprintf(&b, " %s=%d", k.name, f.faults[k.name])
	}
	fmt.Fprintf(&b, "\nadmin operations:")
	for _, k := range sortedKeys(f.ops) {
		fmt.Fprintf(&b, " %s=%d", k, f.ops[k])
	}
	fmt.Fprintf(&b, "\nof them, answers to the no-op clients pinned to a controller:")
	for _, k := range sortedKeys(f.pinned) {
		fmt.Fprintf(&b, " %s=%d", k, f.pinned[k])
	}
	fmt.Fprintf(&b, "\ncontroller epochs: %d; crash elections started: %d; observations of nodes: %d", f.elected, f.crashElections, f.reads)
	fmt.Fprintf(&b, "\ngray faults and kills of a leader, by length (judged: on a healthy quorum, the machine not stalled %v or more):\n%s", stallLimit, summarizeGray(f.gray))
	return b.String()
}

// faultRun is the state of one run shared by its goroutines.
type faultRun struct {
	c       *Cluster
	disks   disks           // nil without disk faults
	kinds   map[string]bool // the fault kinds this run injects
	start   time.Time
	ctrl    map[int32]string // controller id -> listen address
	ctrlInc map[int32]*atomic.Int64
	brkInc  map[int32]*atomic.Int64

	stalls stallWatch   // how long the test process went unscheduled, and when
	gen    atomic.Int64 // the generation of kvTopics in use
	// held is the controller the writers hold off (holdWriters), or 0;
	// busy counts their requests in flight to each controller.
	held  atomic.Int32
	busy  map[int32]*atomic.Int32
	fresh freshness // what the no-op clients read since the writers were held

	mu       sync.Mutex
	history  []recordedOp
	creates  map[string]outcome // the unique-name creates
	ctrlObs  []controllerObs
	brokObs  []brokerObs
	faultLog []string
	faultAt  []time.Duration // when each faultLog line was logged
}

func (r *faultRun) now() time.Duration { return time.Since(r.start) }

func (r *faultRun) logFault(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at := r.now()
	r.faultLog = append(r.faultLog, fmt.Sprintf("%8v ", at.Round(time.Millisecond))+fmt.Sprintf(format, args...))
	r.faultAt = append(r.faultAt, at)
}

// faultsBetween returns the fault log's lines logged from from to to.
func (r *faultRun) faultsBetween(from, to time.Duration) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var lines []string
	for i, at := range r.faultAt {
		if at >= from && at <= to {
			lines = append(lines, r.faultLog[i])
		}
	}
	if len(lines) == 0 {
		return "(none)"
	}
	return strings.Join(lines, "\n")
}

func runFaults(t *testing.T, seed int64, duration time.Duration) *faultTally {
	t.Logf("seed %d: replay with KEEL_FAULT_SEED=%d KEEL_FAULT_RUNS=1 make %s", seed, seed, faultsTarget())
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(seed)>>32|1))
	kinds := chosenFaultKinds(t)
	opts := []clusterOption{withFaultNet(), withBrokerLinks(), withSessionTimeout(testSessionTimeout), withCrashGrace(faultCrashGrace), withMetrics()}
	var ds disks
	why, whyRO := disksAvailable()
	if why == "" {
		// Made before the cluster starts, so unmounted after it stops.
		ds = newDisks(t, "controller", 1, 2, 3)
		opts = append(opts, withControllerDataDirs(ds.dataDir))
	}
	kinds["disk-full"] = kinds["disk-full"] && why == ""
	kinds["disk-read-only"] = kinds["disk-read-only"] && why == "" && whyRO == ""
	c := startCluster(t, 3, opts...)
	c.WaitForActive(t, activeTimeout)
	brokers := []int32{1, 2, 3}
	c.startBrokers(brokers, make([][]brokerOption, len(brokers)))
	c.WaitForBrokers(t, allActive(brokers...))
	ctx, cancel := context.WithTimeout(context.Background(), activeTimeout)
	_, err := c.client.CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: fixtureTopic, Partitions: fixturePartitions, ReplicationFactor: 3})
	cancel()
	if err != nil {
		t.Fatalf("create %s: %v", fixtureTopic, err)
	}

	r := &faultRun{
		c: c, disks: ds, kinds: kinds, start: time.Now(),
		ctrl: make(map[int32]string), ctrlInc: make(map[int32]*atomic.Int64), brkInc: make(map[int32]*atomic.Int64),
		creates: make(map[string]outcome), busy: make(map[int32]*atomic.Int32),
	}
	for _, id := range c.IDs() {
		r.ctrl[id] = c.Addr(id)
		r.ctrlInc[id] = new(atomic.Int64)
		r.busy[id] = new(atomic.Int32)
	}
	for _, id := range brokers {
		r.brkInc[id] = new(atomic.Int64)
	}
	tally := newFaultTally()
	t.Cleanup(func() {
		if t.Failed() {
			r.mu.Lock()
			t.Logf("seed %d: faults injected:\n%s", seed, strings.Join(r.faultLog, "\n"))
			r.mu.Unlock()
		}
	})

	// Clients and observers run until the nemesis is done.
	workCtx, stopWork := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range kvWorkers {
		wg.Add(1)
		go func() { defer wg.Done(); r.kvWorker(workCtx, i, rand.New(rand.NewPCG(uint64(seed), uint64(i+1)))) }()
	}
	clients := clientIDs{len(c.IDs())}
	for i, id := range c.IDs() {
		for j, role := range pinnedRoles {
			wg.Add(1)
			go func() {
				defer wg.Done()
				client := clients.pinned(i, j)
				r.pinnedClient(workCtx, client, id, rand.New(rand.NewPCG(uint64(seed), uint64(200+client))), role)
			}()
		}
	}
	wg.Add(1)
	go func() { defer wg.Done(); r.uniqueCreator(workCtx, rand.New(rand.NewPCG(uint64(seed), 100))) }()
	wg.Add(1)
	go func() { defer wg.Done(); r.stalls.run(workCtx) }()
	for id := range r.ctrl {
		wg.Add(1)
		go func() { defer wg.Done(); r.observeController(workCtx, id) }()
	}
	for _, id := range brokers {
		wg.Add(1)
		go func() { defer wg.Done(); r.observeBroker(workCtx, id) }()
	}

	r.nemesis(t, rng, duration, brokers, tally)
	stopWork()
	wg.Wait()
	// Registered after every restart, so it runs before the processes' own
	// cleanups: a broker's clean stop (a controlled shutdown) needs the
	// controllers, which may have been restarted later than the broker.
	t.Cleanup(func() {
		for _, id := range c.BrokerIDs() {
			if c.BrokerRunning(id) {
				c.StopBroker(id)
			}
		}
	})

	r.healAndCheck(t, brokers, tally)
	return tally
}

// ---------------------------------------------------------------------------
// Nemesis

// nemesis injects one fault at a time, at random, until duration has
// passed; each is held for a while, then undone. It runs on the test's
// goroutine, because the harness fails the test from it.
func (r *faultRun) nemesis(t *testing.T, rng *rand.Rand, duration time.Duration, brokers []int32, tally *faultTally) {
	c := r.c
	deadline := time.Now().Add(duration)
	totalWeight := 0
	for _, k := range faultKinds {
		if r.kinds[k.name] {
			totalWeight += k.weight
		}
	}
	hold := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	// Each disk fault once, first, in random order; then any fault.
	var first []string
	for _, k := range []string{"disk-full", "disk-read-only"} {
		if r.kinds[k] {
			first = append(first, k)
		}
	}
	rng.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	for time.Now().Before(deadline) {
		n := rng.IntN(totalWeight)
		var kind string
		for _, k := range faultKinds {
			if !r.kinds[k.name] {
				continue
			}
			if n < k.weight {
				kind = k.name
				break
			}
			n -= k.weight
		}
		if len(first) > 0 {
			kind, first = first[0], first[1:]
		}
		leader := r.leader()
		switch kind {
		case "kill-leader":
			tally.gray = append(tally.gray, r.logGray(t, r.killLeader(t, rng, hold(200*time.Millisecond, 2*time.Second))))
		case "blip-link", "blip-leader", "blip-public", "pause-leader-short":
			tally.gray = append(tally.gray, r.logGray(t, r.grayFault(t, kind, rng)))
		case "blip-broker":
			tally.gray = append(tally.gray, r.logGray(t, r.brokerBlip(t, rng, brokers)))
		case "kill-controller":
			id := int32(1 + rng.IntN(len(r.ctrl)))
			d := hold(200*time.Millisecond, 2*time.Second)
			r.logFault("%s: kill -9 node %d for %v", kind, id, d)
			r.ctrlInc[id].Add(1)
			c.Kill(id)
			time.Sleep(d) // the fault's length, not synchronisation
			c.Restart(id)
		case "kill-broker":
			id := brokers[rng.IntN(len(brokers))]
			d := hold(200*time.Millisecond, 3*time.Second)
			r.logFault("kill -9 broker %d for %v", id, d)
			r.brkInc[id].Add(1)
			c.KillBroker(id)
			time.Sleep(d)
			c.RestartBroker(id)
		case "restart-broker":
			// A rolling restart's step: SIGTERM, a controlled shutdown that
			// leaves the broker registered and fenced, then a start.
			id := brokers[rng.IntN(len(brokers))]
			d := hold(200*time.Millisecond, 2*time.Second)
			r.logFault("SIGTERM broker %d, start it again after %v", id, d)
			// The old process answers until it has stopped (its
			// controlled shutdown, then its data plane closing): what it
			// says meanwhile is the old incarnation's.
			c.StopBroker(id) // fails the test unless it exits 0
			r.brkInc[id].Add(1)
			r.checkStoppedBrokerFenced(t, id)
			time.Sleep(d)
			c.RestartBroker(id)
		case "isolate-leader":
			if leader == 0 {
				leader = int32(1 + rng.IntN(len(r.ctrl)))
			}
			mode := faultproxy.Drop
			if rng.IntN(2) == 0 {
				mode = faultproxy.Blackhole
			}
			d := hold(500*time.Millisecond, 2500*time.Millisecond)
			release, held := r.maybeHoldWriters(rng, leader)
			r.logFault("isolate node %d (%s) for %v%s", leader, mode, d, held)
			c.net.Isolate(leader, mode)
			time.Sleep(d)
			c.net.Heal()
			release()
		case "cut-leader-out":
			if leader == 0 {
				leader = int32(1 + rng.IntN(len(r.ctrl)))
			}
			d := hold(500*time.Millisecond, 2500*time.Millisecond)
			r.logFault("cut node %d's raft dials to its peers for %v", leader, d)
			c.net.CutOutbound(leader, faultproxy.Drop)
			time.Sleep(d)
			c.net.Heal()
		case "pause-leader":
			if leader == 0 {
				leader = int32(1 + rng.IntN(len(r.ctrl)))
			}
			// Longer than the election timeout (300ms): the others elect
			// a new leader while this one is frozen mid-flight.
			d := hold(600*time.Millisecond, 2*time.Second)
			release, held := r.maybeHoldWriters(rng, leader)
			r.logFault("SIGSTOP node %d for %v%s", leader, d, held)
			c.Pause(leader)
			time.Sleep(d)
			c.Resume(leader)
			release()
		case "disk-full", "disk-read-only":
			id := int32(1 + rng.IntN(len(r.ctrl)))
			r.diskFault(t, kind, id, hold(time.Second, 3*time.Second))
		}
		tally.faults[kind]++
		r.gen.Add(1)
		time.Sleep(hold(100*time.Millisecond, 800*time.Millisecond))
	}
}

// checkStoppedBrokerFenced checks that broker id, stopped with SIGTERM, is
// still registered and fenced in every live controller's list: it keeps its
// place in placement and replica sets while it restarts.
func (r *faultRun) checkStoppedBrokerFenced(t *testing.T, id int32) {
	t.Helper()
	c := r.c
	ok := poll.Wait(t.Context(), healTimeout, 20*time.Millisecond, "", func() (bool, error) {
		live := c.Live()
		lists, _ := c.brokerLists(t.Context(), live)
		if len(live) == 0 || len(lists) != len(live) {
			return false, nil
		}
		for _, l := range lists {
			if b, found := l[id]; !found || b.GetState() != stateFenced {
				return false, nil
			}
		}
		return true, nil
	}) == nil
	if !ok {
		live := c.Live()
		lists, errs := c.brokerLists(t.Context(), live)
		t.Errorf("broker %d, stopped with SIGTERM, is not listed fenced by every live controller within %v:\n%s",
			id, healTimeout, formatBrokerLists(lists, errs))
	}
}

// diskFault fills node id's file system, or turns it read-only, under the
// running node while the clients write; checks that the node reports not
// ready (/readyz) within notReadyWithin, or has stopped (a node that cannot
// store a new raft term exits with one line); holds the fault for d once
// seen; then undoes it. A full disk is emptied and the node carries on (or
// is started again if it stopped); a read-only one is repaired as an
// operator would: the node is killed, the file system checked and mounted
// again, and the node started. That it is ready again is checked with
// everything else once the run is healed.
func (r *faultRun) diskFault(t *testing.T, kind string, id int32, d time.Duration) {
	t.Helper()
	c, dk := r.c, r.disks[id]
	nd := c.node(id)
	// Ready first, so that what follows is this fault's doing (a node
	// whose disk just failed may still be catching up).
	poll.UntilState(t, healTimeout, fmt.Sprintf("node %d ready before its disk fails", id), func() (bool, string) {
		code, body, err := get("http://" + nd.MetricsAddr() + "/readyz")
		return err == nil && code == http.StatusOK, fmt.Sprintf("%d %s %v", code, strings.TrimSpace(body), err)
	})
	start := time.Now()
	switch kind {
	case "disk-full":
		if err := dk.fill(); err != nil {
			t.Fatalf("fill node %d's disk: %v", id, err)
		}
	case "disk-read-only":
		if err := dk.turnReadOnly(); err != nil {
			t.Fatalf("turn node %d's disk read-only: %v", id, err)
		}
	}
	var seen string
	err := poll.Wait(context.Background(), notReadyWithin, observeEvery, fmt.Sprintf("node %d to report not ready", id), func() (bool, error) {
		// Whether it runs is asked first: once it has exited, its output
		// holds all it will write.
		if !nd.Running() {
			seen = fmt.Sprintf("exited with status %d: %s", nd.ExitCode(), keelproc.LastLines(strings.TrimSpace(nd.Output()), 1))
		} else if code, body, err := get("http://" + nd.MetricsAddr() + "/readyz"); err == nil && code == http.StatusServiceUnavailable {
			seen = strings.TrimSpace(body)
		}
		return seen != "", nil
	})
	if err != nil {
		t.Errorf("%s: node %d's disk failed, and it still reports ready: %v", kind, id, err)
	}
	r.logFault("%s: node %d's disk for %v; after %v: %s", kind, id, d, time.Since(start).Round(time.Millisecond), seen)
	t.Logf("%s on node %d: after %v, %s", kind, id, time.Since(start).Round(time.Millisecond), seen)
	time.Sleep(d) // the fault's length, not synchronisation

	switch kind {
	case "disk-full":
		if err := dk.unfill(); err != nil {
			t.Fatalf("empty node %d's disk: %v", id, err)
		}
		if !nd.Running() {
			r.ctrlInc[id].Add(1)
			c.Restart(id)
		}
	case "disk-read-only":
		r.ctrlInc[id].Add(1)
		if nd.Running() {
			c.Kill(id)
		}
		if err := dk.repair(); err != nil {
			t.Fatalf("repair node %d's disk: %v", id, err)
		}
		c.Restart(id)
	}
}

// waitAllReady polls every controller's /readyz until each answers 200
// (with disk faults, the controllers serve it).
func (r *faultRun) waitAllReady(t *testing.T) {
	t.Helper()
	if r.disks == nil {
		return
	}
	poll.UntilState(t, healTimeout, "every controller ready (/readyz)", func() (bool, string) {
		var why []string
		for _, id := range r.c.IDs() {
			code, body, err := get("http://" + r.c.node(id).MetricsAddr() + "/readyz")
			if err != nil || code != http.StatusOK {
				why = append(why, fmt.Sprintf("node %d: %d %s %v", id, code, strings.TrimSpace(body), err))
			}
		}
		return len(why) == 0, strings.Join(why, "; ")
	})
}

// leader is the active controller with the highest epoch in the latest
// observations, or 0 when none is known.
func (r *faultRun) leader() int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	latest := make(map[int32]controllerObs)
	for _, o := range r.ctrlObs {
		latest[o.Node] = o
	}
	var id int32
	var epoch int64
	for _, o := range latest {
		if o.ActiveEpoch > epoch {
			id, epoch = o.Node, o.ActiveEpoch
		}
	}
	return id
}

// ---------------------------------------------------------------------------
// Clients

// call runs one admin request against one controller, once: the suite
// judges the cluster's answers, so the client must not retry on its own
// (a retried create would answer "exists" to its own first attempt).
func (r *faultRun) call(ctx context.Context, node int32, timeout time.Duration, fn func(context.Context, keelpb.ControllerServiceClient) error) error {
	cl, err := r.c.client.Controller(r.ctrl[node])
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return fn(ctx, cl)
}

// classify turns a write's error into its outcome.
func classify(err error) outcome {
	if err == nil {
		return outOK
	}
	switch status.Code(err) {
	case codes.AlreadyExists:
		return outExists
	case codes.NotFound:
		return outNotFound
	case codes.FailedPrecondition, codes.ResourceExhausted, codes.InvalidArgument:
		// Not the active controller, or a request refused on its merits:
		// refused before anything was proposed.
		return outRefused
	case codes.Unavailable:
		if rpc.ReasonOf(err) == rpc.ReasonNotReady {
			return outRefused // a leader still taking over proposes nothing
		}
		if _, ok := rpc.LeaderHintOf(err); ok {
			return outRefused // not the active controller, and it knows none
		}
		if neverSent(err) {
			return outRefused
		}
	}
	// No answer, a lost leadership, a deadline: it may have committed.
	return outUnknown
}

// neverSent reports whether err is gRPC's refusal to send a request at all:
// the connection to the controller could not be made (nothing listens:
// the process was killed), so the request never left this process.
func neverSent(err error) bool {
	return status.Code(err) == codes.Unavailable && strings.Contains(status.Convert(err).Message(), "connect: connection refused")
}

// nextTarget is where a client goes after err from node: the leader it was
// told of, else another node.
func (r *faultRun) nextTarget(rng *rand.Rand, node int32, err error) int32 {
	if h, ok := rpc.LeaderHintOf(err); ok && h.GetLeaderId() > 0 {
		if _, known := r.ctrl[h.GetLeaderId()]; known {
			return h.GetLeaderId()
		}
	}
	if err == nil {
		return node
	}
	return int32(1 + rng.IntN(len(r.ctrl)))
}

// kvWorker sends the workload's operations (randomOp) on the kvTopics, one
// request at a time, to the controller it was last told leads.
func (r *faultRun) kvWorker(ctx context.Context, client int, rng *rand.Rand) {
	node := int32(1 + rng.IntN(len(r.ctrl)))
	for ctx.Err() == nil {
		_, err := r.do(ctx, client, node, opTimeout, randomOp(rng, kvTopics(r.gen.Load())))
		node = r.nextTarget(rng, node, err)
		r.think(ctx, rng, err)
	}
}

// randomOp is a client's next operation: creates, deletes and config
// changes (each often one that changes nothing: the topic exists, it does
// not, the config has that value), and linearizable reads.
func randomOp(rng *rand.Rand, names []string) topicOp {
	op := topicOp{Topic: names[rng.IntN(len(names))]}
	switch n := rng.IntN(20); {
	case n < 6:
		op.Kind, op.Partitions = "create", int32(1+rng.IntN(2))
	case n < 9:
		op.Kind = "delete"
	case n < 13:
		op.Kind, op.Config = "alter", rng.IntN(len(kvConfigs))
		if rng.IntN(5) > 0 { // else delete the topic's own value
			op.Value = kvConfigValues[kvConfigs[op.Config]][rng.IntN(2)]
		}
	case n < 17:
		op.Kind = "describe"
	default:
		op.Kind = "describe-configs"
	}
	return op
}

// do sends op to node, once, waiting for its answer at most timeout, and
// records it in the history with its answer; a read that got no answer
// changed nothing and is left out.
func (r *faultRun) do(ctx context.Context, client int, node int32, timeout time.Duration, op topicOp) (topicResult, error) {
	if role, pinned := (clientIDs{len(r.ctrl)}).role(client); !pinned || role == changes {
		defer r.writerSends(ctx, node)()
	}
	call := r.now()
	var res topicResult
	resource := &keelpb.ConfigResource{Type: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC, Name: op.Topic}
	err := r.call(ctx, node, timeout, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		switch op.Kind {
		case "create":
			_, err := cl.CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: op.Topic, Partitions: op.Partitions, ReplicationFactor: 1})
			return err
		case "delete":
			_, err := cl.DeleteTopic(ctx, &keelpb.DeleteTopicRequest{Name: op.Topic})
			return err
		case "alter":
			c := &keelpb.AlterableConfig{Name: kvConfigs[op.Config], Op: keelpb.AlterConfigOp_ALTER_CONFIG_OP_SET, Value: op.Value}
			if op.Value == "" {
				c.Op = keelpb.AlterConfigOp_ALTER_CONFIG_OP_DELETE
			}
			_, err := cl.IncrementalAlterConfigs(ctx, &keelpb.IncrementalAlterConfigsRequest{Resource: resource, Configs: []*keelpb.AlterableConfig{c}})
			return err
		case "describe-configs":
			resp, err := cl.DescribeConfigs(ctx, &keelpb.DescribeConfigsRequest{Resource: resource, Linearizable: true})
			own := make(map[string]string)
			for _, e := range resp.GetConfigs() {
				if e.GetSource() == keelpb.ConfigSource_CONFIG_SOURCE_TOPIC {
					own[e.GetName()] = e.GetValue()
				}
			}
			res.Configs = ownConfigs(own)
			return err
		}
		resp, err := cl.DescribeTopic(ctx, &keelpb.DescribeTopicRequest{Name: op.Topic, Linearizable: true})
		res.Partitions = int32(len(resp.GetTopic().GetPartitions()))
		res.Configs = ownConfigs(resp.GetTopic().GetConfigs())
		return err
	})
	ret := r.now()
	res.Outcome = classify(err)
	if isRead(op.Kind) && (res.Outcome == outUnknown || res.Outcome == outRefused) {
		return res, err // a read that got no answer changed nothing
	}
	r.mu.Lock()
	r.history = append(r.history, recordedOp{Client: client, Op: op, Result: res, Call: call, Return: ret, Operator: fmt.Sprint(node)})
	r.mu.Unlock()
	return res, err
}

func isRead(kind string) bool { return kind == "describe" || kind == "describe-configs" }

// ownConfigs picks the kvConfigs out of a topic's own configs.
func ownConfigs(own map[string]string) topicConfigs {
	var c topicConfigs
	for i, name := range kvConfigs {
		c[i] = own[name]
	}
	return c
}

// think paces a client: a moment between requests, longer after a failure,
// so that a node that is down is not hammered and the history stays small
// enough to check.
func (r *faultRun) think(ctx context.Context, rng *rand.Rand, err error) {
	d := 5*time.Millisecond + time.Duration(rng.Int64N(int64(20*time.Millisecond)))
	if err != nil && status.Code(err) != codes.AlreadyExists && status.Code(err) != codes.NotFound {
		d += 50 * time.Millisecond
	}
	sleepCtx(ctx, d)
}

// uniqueCreator creates topics whose names are never reused, so that each
// create's fate can be checked on its own at the end.
func (r *faultRun) uniqueCreator(ctx context.Context, rng *rand.Rand) {
	node := int32(1 + rng.IntN(len(r.ctrl)))
	for seq := 0; ctx.Err() == nil; seq++ {
		name := fmt.Sprintf("u%d", seq)
		sent := r.writerSends(ctx, node)
		err := r.call(ctx, node, opTimeout, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
			_, err := cl.CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: name, Partitions: 1, ReplicationFactor: 1})
			return err
		})
		sent()
		r.mu.Lock()
		r.creates[name] = classify(err)
		r.mu.Unlock()
		node = r.nextTarget(rng, node, err)
		r.think(ctx, rng, err)
	}
}

// ---------------------------------------------------------------------------
// Observers

// observeController records node id's own view every observeEvery.
func (r *faultRun) observeController(ctx context.Context, id int32) {
	look := func(ctx context.Context) (*keelpb.DescribeQuorumResponse, error) { return r.c.Describe(ctx, id) }
	observe(ctx, r.ctrlInc[id], look, func(v *keelpb.DescribeQuorumResponse, inc int64) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.ctrlObs = append(r.ctrlObs, controllerObs{
			At: r.now(), Node: id, Incarnation: int(inc),
			ActiveEpoch: v.GetActiveEpoch(), Epoch: v.GetControllerEpoch(), EpochLeader: v.GetControllerEpochLeaderId(),
		})
	})
}

// observeBroker records broker id's own view of the fixture topic.
func (r *faultRun) observeBroker(ctx context.Context, id int32) {
	look := func(ctx context.Context) (*keelpb.InspectResponse, error) { return r.c.InspectE(ctx, id) }
	observe(ctx, r.brkInc[id], look, func(v *keelpb.InspectResponse, inc int64) {
		o := brokerObs{
			At: r.now(), Broker: id, Incarnation: int(inc),
			ControllerID: v.GetControllerId(), ControllerEpoch: v.GetControllerEpoch(), Offset: v.GetMetadataOffset(),
		}
		for _, p := range v.GetPartitions() {
			if p.GetTopic() == fixtureTopic {
				o.Replicas = append(o.Replicas, p)
			}
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.brokObs = append(r.brokObs, o)
	})
}

// observe calls look every observeEvery until ctx ends, and hands keep what
// it saw, with the node's incarnation, unless the node was restarted while
// it was asked (inc counts restarts: the answer may be the old process's or
// the new one's).
func observe[T any](ctx context.Context, inc *atomic.Int64, look func(context.Context) (T, error), keep func(T, int64)) {
	for ctx.Err() == nil {
		before := inc.Load()
		v, err := look(ctx)
		if err == nil && inc.Load() == before {
			keep(v, before)
		}
		sleepCtx(ctx, observeEvery)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// ---------------------------------------------------------------------------
// Heal and check

func (r *faultRun) healAndCheck(t *testing.T, brokers []int32, tally *faultTally) {
	c := r.c
	c.net.Heal()
	for _, id := range c.IDs() {
		if c.node(id).Paused() {
			c.Resume(id)
		}
	}
	c.WaitForActive(t, healTimeout)
	c.WaitForBrokers(t, allActive(brokers...))
	// A node whose disk failed is ready again (its storage failure cleared
	// by a write that succeeded, its log caught up).
	r.waitAllReady(t)

	// Final reads, linearizable, after every fault is undone: part of the
	// history, so they must agree with everything acknowledged before.
	call := r.now()
	final := r.finalTopics(t)
	var kvNames []string
	for gen := range r.gen.Load() + 1 {
		kvNames = append(kvNames, kvTopics(gen)...)
	}
	for _, name := range kvNames {
		d, ok := final[name]
		res := topicResult{Outcome: outNotFound}
		if ok {
			res = topicResult{Outcome: outOK, Partitions: int32(len(d.GetPartitions())), Configs: ownConfigs(d.GetConfigs())}
		}
		r.history = append(r.history, recordedOp{Client: clientIDs{len(r.ctrl)}.final(), Op: topicOp{Kind: "describe", Topic: name}, Result: res, Call: call, Return: r.now(), Operator: "final"})
	}

	for _, op := range r.history {
		tally.ops[op.Op.Kind+"/"+string(op.Result.Outcome)]++
		if role, ok := (clientIDs{len(r.ctrl)}).role(op.Client); ok && role == noopWrites {
			tally.pinned[op.Op.Kind+"/"+string(op.Result.Outcome)]++
		}
	}
	for _, out := range r.creates {
		tally.ops["unique-create/"+string(out)]++
	}
	tally.reads = len(r.ctrlObs) + len(r.brokObs)
	tally.elected = len(epochOwners(r.ctrlObs))
	tally.crashElections = r.c.crashElections()

	// Every acknowledged create is there; no refused one is.
	names := make(map[string]bool, len(final))
	for n := range final {
		names[n] = true
	}
	if bad := ackViolations(r.creates, names); len(bad) > 0 {
		t.Errorf("acknowledged and refused writes:\n%s", summarize(bad, 20))
	}

	// The admin history is linearizable.
	checkStart := time.Now()
	res, info := porcupine.CheckOperationsVerbose(topicModel, porcupineHistory(r.history), checkTimeout)
	t.Logf("the admin history: %d operations on %d topic names, checked in %v", len(r.history), len(kvNames), time.Since(checkStart).Round(time.Millisecond))
	switch res {
	case porcupine.Illegal:
		// Outside the test's temp dir, which is removed when it ends.
		path := filepath.Join(os.TempDir(), fmt.Sprintf("keel-faults-%s.html", strings.ReplaceAll(t.Name(), "/", "-")))
		if err := porcupine.VisualizePath(topicModel, info, path); err == nil {
			t.Logf("the history, drawn (open in a browser): %s", path)
		}
		msg := fmt.Sprintf("the admin history (%d operations) is not linearizable", len(r.history))
		if op, ok := firstUnexplained(r.history, checkTimeout); ok {
			msg += "; the first answer no order explains is " + r.describeAnswer(op)
			// A final read: an operation of unknown outcome may explain a
			// stale answer about the topic before it away. Without them,
			// that is the one.
			var same []recordedOp
			for _, o := range withoutUnknown(r.history) {
				if o.Op.Topic == op.Op.Topic {
					same = append(same, o)
				}
			}
			if op2, ok := firstUnexplained(same, checkTimeout); ok && op.Operator == "final" && op2 != op {
				msg += "; if no operation of unknown outcome took effect, it is " + r.describeAnswer(op2)
			}
		}
		t.Errorf("%s", msg)
	case porcupine.Unknown:
		t.Logf("porcupine did not finish within %s on %d operations: not judged", checkTimeout, len(r.history))
	}

	// Gray faults: no leader change for a blip or a short pause, no fence
	// for a blip of a broker's links, a crash election for every kill of a
	// healthy quorum's leader.
	if bad := grayViolations(tally.gray); len(bad) > 0 {
		t.Errorf("gray faults: %d of %d broke a rule:\n%s\nall of them, by length (judged: on a healthy quorum, the machine not stalled %v or more):\n%s",
			len(bad), len(tally.gray), summarize(bad, 20), stallLimit, summarizeGray(tally.gray))
	}

	// Controllers: one active per epoch, epochs only grow. Judged only if
	// the observers saw controllers being active at all (DescribeQuorum's
	// active_epoch): otherwise the check would pass by seeing nothing.
	if !slices.ContainsFunc(r.ctrlObs, func(o controllerObs) bool { return o.ActiveEpoch > 0 }) {
		t.Errorf("no controller was ever observed active in %d observations: the one-active-per-epoch check judged nothing", len(r.ctrlObs))
	}
	if bad := append(activeViolations(r.ctrlObs), epochRegressions(r.ctrlObs)...); len(bad) > 0 {
		t.Errorf("controller epochs:\n%s", summarize(bad, 20))
	}
	// Brokers: offsets, controller epochs and leader epochs only grow;
	// judged only if the brokers were seen holding the fixture topic.
	if !slices.ContainsFunc(r.brokObs, func(o brokerObs) bool { return len(o.Replicas) > 0 }) {
		t.Errorf("no broker was ever observed holding %s in %d observations: the leader-epoch check judged nothing", fixtureTopic, len(r.brokObs))
	}
	if bad := brokerViolations(r.brokObs, epochOwners(r.ctrlObs)); len(bad) > 0 {
		t.Errorf("broker views:\n%s", summarize(bad, 20))
	}
	// Every partition: leader ∈ ISR ⊆ replicas.
	var bad []string
	for _, name := range sortedKeys(final) {
		bad = append(bad, partitionViolations(name, final[name].GetPartitions())...)
	}
	if len(bad) > 0 {
		t.Errorf("partitions at the end:\n%s", summarize(bad, 20))
	}

	at := r.checkBrokersConverge(t, brokers)
	r.checkLogs(t, at)
}

// describeAnswer renders op for a failure message, with the faults logged
// in the faultContext before its answer and the answers about its topic in
// the second before it (the one no order explains may only pin down a
// stale answer given just before).
func (r *faultRun) describeAnswer(op recordedOp) string {
	var before []string
	for _, o := range r.history {
		if o.Op.Topic == op.Op.Topic && o != op && o.Result.Outcome != outUnknown && o.Return <= op.Return && o.Return >= op.Return-time.Second {
			before = append(before, "  "+describeOp(o))
		}
	}
	if len(before) > 12 {
		before = before[len(before)-12:]
	}
	return fmt.Sprintf("%s; the faults logged in the %v before it:\n%s\nthe answers about %s in the second before it:\n%s\n",
		describeOp(op), faultContext, r.faultsBetween(op.Return-faultContext, op.Return), op.Op.Topic, strings.Join(before, "\n"))
}

// describeOp renders one operation of the history.
func describeOp(op recordedOp) string {
	return fmt.Sprintf("%s, from node %s to client %d (called at %v, answered at %v)",
		topicModel.DescribeOperation(op.Op, op.Result), op.Operator, op.Client, op.Call.Round(time.Millisecond), op.Return.Round(time.Millisecond))
}

// finalTopics reads every topic, linearizably, once the cluster is healed.
func (r *faultRun) finalTopics(t *testing.T) map[string]*keelpb.TopicDescription {
	ctx, cancel := context.WithTimeout(context.Background(), healTimeout)
	defer cancel()
	list, err := r.c.client.ListTopics(ctx, rpc.Linearizable())
	if err != nil {
		t.Fatalf("final list of topics: %v", err)
	}
	final := make(map[string]*keelpb.TopicDescription)
	for _, s := range list.GetTopics() {
		d, err := r.c.client.DescribeTopic(ctx, s.GetName(), rpc.Linearizable())
		if err != nil {
			t.Fatalf("final describe of %s: %v", s.GetName(), err)
		}
		final[s.GetName()] = d.GetTopic()
	}
	return final
}

// checkBrokersConverge commits a no-op, then waits until the controllers
// and every broker have applied the same offset, at or past it, and each
// broker holds the controllers' view of the fixture topic as a linearizable
// read gives it at that moment (brokers rejoining after the faults still
// move ISRs for a while, so the view is read again each time). It returns
// that offset.
func (r *faultRun) checkBrokersConverge(t *testing.T, brokers []int32) uint64 {
	c := r.c
	noop := c.appendNoOp(t, healTimeout)
	var offset uint64
	poll.UntilState(t, healTimeout, "the brokers converging to the controllers' view", func() (bool, string) {
		var why string
		offset, why = r.converged(brokers, noop.GetIndex())
		return why == "", why
	})
	return offset
}

// converged returns the offset everyone has applied, or why they have not
// converged yet.
func (r *faultRun) converged(brokers []int32, min uint64) (uint64, string) {
	ctx, cancel := context.WithTimeout(context.Background(), describeLimit)
	defer cancel()
	views, errs := r.c.Views(ctx, r.c.IDs())
	if len(errs) > 0 || !converged(r.c.IDs(), views, min) {
		return 0, "controllers: " + formatViews(views, errs)
	}
	offset := views[r.c.IDs()[0]].GetAppliedIndex()
	d, err := r.c.client.DescribeTopic(ctx, fixtureTopic, rpc.Linearizable())
	if err != nil {
		return 0, fmt.Sprintf("describe %s: %v", fixtureTopic, err)
	}
	want := make(map[int32]*keelpb.PartitionDescription)
	for _, p := range d.GetTopic().GetPartitions() {
		want[p.GetPartition()] = p
	}
	for _, id := range brokers {
		v, err := r.c.InspectE(ctx, id)
		if err != nil {
			return 0, fmt.Sprintf("broker %d: %v", id, err)
		}
		if v.GetMetadataOffset() != offset {
			return 0, fmt.Sprintf("broker %d is at offset %d, the controllers at %d", id, v.GetMetadataOffset(), offset)
		}
		for _, rs := range v.GetPartitions() {
			p := want[rs.GetPartition()]
			if rs.GetTopic() != fixtureTopic {
				continue
			}
			if p == nil || rs.GetLeader() != p.GetLeader() || rs.GetLeaderEpoch() != p.GetLeaderEpoch() || !slices.Equal(rs.GetIsr(), p.GetIsr()) {
				return 0, fmt.Sprintf("broker %d holds %s-%d as leader %d epoch %d ISR %v; the controllers: %v",
					id, fixtureTopic, rs.GetPartition(), rs.GetLeader(), rs.GetLeaderEpoch(), rs.GetIsr(), p)
			}
		}
	}
	return offset, ""
}

// checkLogs stops the controllers and replays each one's metadata log
// offline: every state it went through must keep leader ∈ ISR ⊆ replicas,
// the controller epoch must only grow, and all three must hold the same
// image at index at, which every one of them has applied. (Stopping hands
// leadership on, so the logs may end at different indexes.)
func (r *faultRun) checkLogs(t *testing.T, at uint64) {
	c := r.c
	// Brokers first: a broker's clean stop is a controlled shutdown, which
	// needs the controllers.
	for _, id := range c.BrokerIDs() {
		c.StopBroker(id)
	}
	images := make(map[int32][]byte)
	for _, id := range c.IDs() {
		c.Stop(id)
		img, bad, err := replayDataDir(c.DataDir(id), at)
		if err != nil {
			t.Errorf("replay node %d's log: %v", id, err)
			continue
		}
		if len(bad) > 0 {
			t.Errorf("node %d's log:\n%s", id, summarize(bad, 20))
		}
		if img != nil {
			images[id] = img
		}
	}
	var first int32
	for _, id := range c.IDs() {
		img, ok := images[id]
		switch {
		case !ok:
		case first == 0:
			first = id
		case !bytes.Equal(images[first], img):
			t.Errorf("node %d's image at index %d differs from node %d's", id, at, first)
		}
	}
}

// replayDataDir restores a stopped controller's latest snapshot and applies
// its log after it, checking each state. It returns the image's snapshot
// bytes as of index at (nil when the snapshot is past at).
func replayDataDir(dir string, at uint64) ([]byte, []string, error) {
	lr, err := raftlog.OpenReadOnly(dir)
	if err != nil {
		return nil, nil, err
	}
	defer lr.Close()
	f := fsm.New()
	from := uint64(1)
	meta, rc, err := lr.LatestSnapshot()
	if err != nil {
		return nil, nil, err
	}
	if rc != nil {
		err := f.Restore(rc)
		rc.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("snapshot %s: %w", meta.ID, err)
		}
		from = meta.Index + 1
	}
	var bad []string
	var atImage []byte
	capture := func() error {
		write, err := f.Snapshot()
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		if err := write(&buf); err != nil {
			return err
		}
		atImage = buf.Bytes()
		return nil
	}
	epoch := f.Image().ControllerEpoch
	err = lr.Entries(from, func(index, term uint64, typ raft.LogType, data []byte) error {
		if index > at && atImage == nil && from <= at+1 {
			if err := capture(); err != nil {
				return err
			}
		}
		if typ != raft.LogCommand {
			return nil
		}
		if e, ok := f.ApplyEntry(index, term, data).(error); ok && e != nil {
			return nil // refused as a whole, as on the live node
		}
		img := f.Image()
		if img.ControllerEpoch < epoch {
			bad = append(bad, fmt.Sprintf("index %d: controller epoch went from %d back to %d", index, epoch, img.ControllerEpoch))
		}
		epoch = img.ControllerEpoch
		for _, tp := range img.Topics() {
			for _, v := range partitionViolations(tp.Name, server.DescribeTopic(img, tp).GetPartitions()) {
				bad = append(bad, fmt.Sprintf("index %d: %s", index, v))
			}
		}
		return nil
	})
	if err == nil && atImage == nil && from <= at+1 && f.Image().Offset <= at {
		err = capture() // the log ends at or before at
	}
	return atImage, bad, err
}
