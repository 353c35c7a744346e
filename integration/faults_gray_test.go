package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/faultproxy"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

// The fault suite's gray faults (issue 26): faults between up and down that
// a correct cluster rides out with the leader it has, and the kill -9 of a
// healthy quorum's leader, which a crash election must follow. Each is
// injected on a healthy quorum (healthyQuorum; the nemesis waits for one),
// on its leader but for blip-broker, watched for blipWatch after it, and
// judged by grayViolations (faults_check_test.go):
//
//	blip-link           one directed raft link of the leader's (to or from
//	                    one follower) drops or resets its connections
//	blip-leader         every link of the leader's, raft and public: a
//	                    proxy or sidecar restart
//	blip-public         the leader's public address (brokers, leader hints)
//	pause-leader-short  SIGSTOP shorter than the election timeout: a GC pause
//	blip-broker         every link of one broker's to the controllers (each
//	                    broker dials them through proxies of its own):
//	                    shorter than the crash grace, or one time in four
//	                    longer, the broker process alive throughout
//
// A broker's blip waits for the brokers to be healthy too
// (healthyBrokers), is watched for brokerBlipWatch from its start, and is
// judged by its fences as well: a fence is a committed record that every broker
// replays in offset order and logs (broker.LoggingHandler), so the
// brokers' logs show every one, however soon it is undone, whichever
// controller decided it, and across controller restarts (a controller's
// fence counters are its process's, and ListBrokers, polled, misses a
// fence undone within a heartbeat).
//
// Meanwhile clients pinned to each controller (pinnedRoles) send it
// requests whatever it answers, never following a leader hint, so that a
// leader deposed without knowing it yet is asked too: no-op clients send
// writes that change nothing on the controller's own image (create a topic
// that exists, delete one that does not, set a config to its value), a
// reader linearizable reads, a writer writes that change the topic. A
// deposed leader must not answer a no-op from its own image (issue 26's
// item 1): the admin history's linearizability check catches it, once a
// new leader has taken a write the old one has not seen. For most of the
// faults that cut off or pause the leader, the clients that write for real
// hold off it meanwhile (holdWriters), as a leader that only idempotent
// requests reach: one write in flight would hold its later answers back.

const (
	// blipMin and blipMax bound a blip's length.
	blipMin = 50 * time.Millisecond
	blipMax = 800 * time.Millisecond
	// shortPauseMax: the longest pause-leader-short, a third of the
	// election timeout (300 ms): with up to 60 ms since the leader's last
	// heartbeat, it wakes with its lease (250 ms) still good, and every
	// follower's heartbeat timeout (300 ms or more) far off.
	shortPauseMax = 100 * time.Millisecond
	// shortLeaderBlipMax: the longest blip of every link of the leader's
	// that is meant to fall under leaderBlipNoChangeBelow. Raft alone keeps
	// the leader through it: the leader's last heartbeat was at most 60 ms
	// before, and after the blip its next one follows within a 10 ms
	// back-off and a 30-60 ms interval, so no follower goes unheard for
	// more than about 210 ms, within the 250 ms lease.
	shortLeaderBlipMax = 80 * time.Millisecond
	// blipWatch: how long after a gray fault ends a leader change is still
	// put down to it. A crash election fires within milliseconds of a
	// connection's end (150 ms more per rank); an election of raft's own
	// within two heartbeat timeouts (600 ms) of the last contact.
	blipWatch = time.Second
	// healthyWithin bounds the wait for a healthy quorum before a gray
	// fault; past it the fault is injected anyway, and not judged.
	healthyWithin = 10 * time.Second
	// faultContext: how far back a failure message lists the faults
	// before an answer that broke linearizability.
	faultContext = 5 * time.Second
	// brokerBlipShortMax: the longest blip of a broker's links meant to be
	// shorter than the crash grace, with room for the broker to be seen
	// again before the grace ends (tens of milliseconds at the median).
	brokerBlipShortMax = faultCrashGrace - 50*time.Millisecond
	// brokerBlipLongMin: the shortest blip meant to outlast the grace, by
	// enough that the controller's dial at the grace's end comes while the
	// links are still down.
	brokerBlipLongMin = faultCrashGrace + 100*time.Millisecond
	// brokerBlipLongShare: how often a broker's blip outlasts the grace.
	brokerBlipLongShare = 0.25
	// brokerBlipWatch: how long from a broker's blip's start a fence is
	// still put down to it: a session (its last heartbeat was at most an
	// interval before the blip), and a quarter of one more for the
	// controller's session checks (every eighth of a session), the fence's
	// commit and its replay.
	brokerBlipWatch = testSessionTimeout + testSessionTimeout/4
)

// grayFault injects a gray fault of kind on the leader of a healthy quorum,
// watches for blipWatch after it, and returns what it saw.
func (r *faultRun) grayFault(t *testing.T, kind string, rng *rand.Rand) grayFault {
	t.Helper()
	c := r.c
	f := r.grayStart(kind, rng, nil)
	hold := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	mode := faultproxy.Drop
	if rng.IntN(2) == 0 {
		mode = faultproxy.Reset
	}
	d := hold(blipMin, blipMax)
	var cut, heal func()
	release := func() {}
	switch kind {
	case "blip-link":
		var peers []int32
		for _, id := range c.IDs() {
			if id != f.Leader {
				peers = append(peers, id)
			}
		}
		from, to := f.Leader, peers[rng.IntN(len(peers))]
		if rng.IntN(2) == 0 {
			from, to = to, from
		}
		p := c.net.Link(from, to)
		f.What = fmt.Sprintf("node %d's raft dials to node %d, %s", from, to, mode)
		cut, heal = func() { p.Set(mode) }, func() { p.Set(faultproxy.Up) }
	case "blip-leader":
		var held string
		if rng.IntN(2) == 0 { // half of them judged by the tighter rule
			d = hold(blipMin, shortLeaderBlipMax)
		} else {
			release, held = r.maybeHoldWriters(rng, f.Leader)
		}
		f.What = fmt.Sprintf("every link of node %d's, %s%s", f.Leader, mode, held)
		cut, heal = func() { c.net.Isolate(f.Leader, mode) }, c.net.Heal
	case "blip-public":
		p := c.net.Public(f.Leader)
		f.What = fmt.Sprintf("node %d's public address, %s", f.Leader, mode)
		cut, heal = func() { p.Set(mode) }, func() { p.Set(faultproxy.Up) }
	case "pause-leader-short":
		d = hold(20*time.Millisecond, shortPauseMax)
		f.What = fmt.Sprintf("SIGSTOP node %d", f.Leader)
		cut, heal = func() { c.Pause(f.Leader) }, func() { c.Resume(f.Leader) }
	default:
		t.Fatalf("no gray fault %q", kind)
	}
	r.logFault("%s: %s for %v", kind, f.What, d)
	start := time.Now()
	f.At = r.now()
	cut()
	time.Sleep(d) // the fault's length, not synchronisation
	heal()
	f.Len = time.Since(start)
	release()
	time.Sleep(blipWatch) // the window a leader change it caused shows in
	r.grayEnd(&f, start, time.Now())
	return f
}

// killLeader kills the leader of a healthy quorum with SIGKILL, holds it
// down for d, and longer until a crash election shows in the controllers'
// logs or crashElectionWithin has passed since the kill, then restarts it
// and waits until a new leader's epoch shows.
func (r *faultRun) killLeader(t *testing.T, rng *rand.Rand, d time.Duration) grayFault {
	t.Helper()
	c := r.c
	f := r.grayStart("kill-leader", rng, nil)
	f.What = "kill -9"
	f.CrashBefore = c.crashElections()
	r.logFault("kill-leader: kill -9 node %d for %v", f.Leader, d)
	r.ctrlInc[f.Leader].Add(1)
	start := time.Now()
	f.At = r.now()
	c.Kill(f.Leader)
	time.Sleep(d) // the fault's length, not synchronisation
	if left := crashElectionWithin - time.Since(start); left > 0 && f.Unhealthy == "" {
		_ = poll.Wait(context.Background(), left, 100*time.Millisecond, "", func() (bool, error) {
			return c.crashElections() > f.CrashBefore, nil
		})
	}
	f.CrashAfter = c.crashElections()
	f.Len = time.Since(start)
	judged := time.Now()
	c.Restart(f.Leader)
	// For the report: the epoch the next leader took over in.
	_ = poll.Wait(context.Background(), healthyWithin, observeEvery, "", func() (bool, error) {
		epoch, _ := r.highestEpoch(r.now() - time.Since(start))
		return epoch > f.EpochBefore, nil
	})
	r.grayEnd(&f, start, judged)
	return f
}

// brokerBlip cuts every link of one of brokers to the controllers
// (dropping or resetting their connections, and refusing new ones) for
// 50-450 ms, shorter than the crash grace, or brokerBlipLongShare of the
// times for 600-800 ms, longer than it, while the brokers and a healthy
// quorum carry on; then it watches until brokerBlipWatch after the start
// and returns what it saw: the leader change it was followed by, the
// fences of the broker the brokers replayed (fencesLoggedSince), and the
// controllers' dials of its port at the end of the grace that found it
// listening.
func (r *faultRun) brokerBlip(t *testing.T, rng *rand.Rand, brokers []int32) grayFault {
	t.Helper()
	c := r.c
	f := r.grayStart("blip-broker", rng, func(leader int32, epoch int64) string {
		return r.brokersHealthy(brokers, leader, epoch)
	})
	f.Broker = brokers[rng.IntN(len(brokers))]
	hold := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	mode := faultproxy.Drop
	if rng.IntN(2) == 0 {
		mode = faultproxy.Reset
	}
	d := hold(blipMin, brokerBlipShortMax)
	if rng.Float64() < brokerBlipLongShare {
		d = hold(brokerBlipLongMin, blipMax)
	}
	f.What = fmt.Sprintf("every link of broker %d's to the controllers, %s", f.Broker, mode)
	r.logFault("blip-broker: %s for %v", f.What, d)
	mark := c.brokerLogMark()
	probes, probed := c.listeningProbes()
	start := time.Now()
	f.At = r.now()
	c.setBrokerLinks(f.Broker, mode)
	time.Sleep(d) // the fault's length, not synchronisation
	c.setBrokerLinks(f.Broker, faultproxy.Up)
	f.Len = time.Since(start)
	// The window a fence it caused shows in.
	time.Sleep(time.Until(start.Add(brokerBlipWatch)))
	byReporter := make(map[int32]int)
	for _, fc := range c.fencesLoggedSince(mark) {
		if fc.id == f.Broker {
			byReporter[fc.reporter]++
			f.Fences = max(f.Fences, byReporter[fc.reporter])
		}
	}
	f.Listening = -1
	if after, ok := c.listeningProbes(); ok && probed && after >= probes {
		f.Listening = int(after - probes)
	}
	r.grayEnd(&f, start, time.Now())
	return f
}

// brokersHealthy says why brokers are not healthy for a blip of one's
// links (healthyBrokers) under the active controller leader in epoch, or
// "" if they are.
func (r *faultRun) brokersHealthy(brokers []int32, leader int32, epoch int64) string {
	ctx, cancel := context.WithTimeout(context.Background(), describeLimit)
	defer cancel()
	lists, _ := r.c.brokerLists(ctx, r.c.IDs())
	views := make(map[int32]*keelpb.InspectResponse)
	for _, id := range brokers {
		if v, err := r.c.InspectE(ctx, id); err == nil {
			views[id] = v
		}
	}
	return healthyBrokers(r.c.IDs(), brokers, lists, views, leader, epoch)
}

// listeningProbes sums over the controllers the dials of a broker's port,
// at the end of the crash grace, that found it listening; ok is false if a
// controller's metrics did not answer. (A restarted controller counts
// from 0 again: a count that went down is no count.)
func (c *Cluster) listeningProbes() (n float64, ok bool) {
	byNode, _ := scrapeAll(c.metricsAddrs(c.IDs()), probesListening)
	for _, s := range byNode {
		n += s[probesListening]
	}
	return n, len(byNode) == len(c.IDs())
}

// logGray logs what became of gray fault f, and returns it.
func (r *faultRun) logGray(t *testing.T, f grayFault) grayFault {
	t.Helper()
	outcome := "the leader kept"
	if f.leaderChanged() {
		outcome = fmt.Sprintf("the leader changed: epoch %d to %d (node %d)", f.EpochBefore, f.EpochAfter, f.ActiveAfter)
	}
	switch f.Kind {
	case "kill-leader":
		outcome += fmt.Sprintf(", %d crash elections", f.CrashAfter-f.CrashBefore)
	case "blip-broker":
		outcome += fmt.Sprintf(", broker %d fenced %d times, its port found listening by %d dials", f.Broker, f.Fences, f.Listening)
	}
	judged := "judged"
	if ok, why := f.judged(); !ok {
		judged = "not judged: " + why
	}
	t.Logf("%s: %s; %s", f, outcome, judged)
	return f
}

// grayStart waits up to healthyWithin for a healthy quorum, on which more
// (if not nil) finds nothing wrong either, and begins the record of a gray
// fault on its leader; without one, on the leader last observed (or any
// node), and unjudged.
func (r *faultRun) grayStart(kind string, rng *rand.Rand, more func(leader int32, epoch int64) string) grayFault {
	f := grayFault{Kind: kind}
	_ = poll.Wait(context.Background(), healthyWithin, observeEvery, "", func() (bool, error) {
		ids := r.c.IDs()
		if live := r.c.Live(); len(live) != len(ids) {
			f.Unhealthy = fmt.Sprintf("only nodes %v are running", live)
			return false, nil
		}
		views, _ := r.c.Views(context.Background(), ids)
		f.Leader, f.EpochBefore, f.Unhealthy = healthyQuorum(ids, views)
		if f.Unhealthy == "" && more != nil {
			f.Unhealthy = more(f.Leader, f.EpochBefore)
		}
		return f.Unhealthy == "", nil
	})
	if f.Unhealthy != "" {
		f.Leader = r.leader()
		f.EpochBefore, _ = r.highestEpoch(0)
		if f.Leader == 0 {
			f.Leader = int32(1 + rng.IntN(len(r.ctrl)))
		}
	}
	return f
}

// grayEnd completes the record of a gray fault that began at start: the
// highest controller epoch seen since, and the longest stall until judged,
// when what it is judged by was seen.
func (r *faultRun) grayEnd(f *grayFault, start, judged time.Time) {
	f.EpochAfter, f.ActiveAfter = r.highestEpoch(r.now() - time.Since(start))
	views, _ := r.c.Views(context.Background(), r.c.Live())
	for _, v := range views {
		if v.GetControllerEpoch() > f.EpochAfter {
			f.EpochAfter, f.ActiveAfter = v.GetControllerEpoch(), v.GetControllerEpochLeaderId()
		}
	}
	f.Stall = r.stalls.longest(start, judged)
}

// highestEpoch returns the highest controller epoch the observers saw in
// any controller's image from since on, with the node it belongs to.
func (r *faultRun) highestEpoch(since time.Duration) (int64, int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var epoch int64
	var leader int32
	for _, o := range r.ctrlObs {
		if o.At >= since && o.Epoch > epoch {
			epoch, leader = o.Epoch, o.EpochLeader
		}
	}
	return epoch, leader
}

// maybeHoldWriters holds the writers off node (holdWriters) heldShare of
// the times, and returns what undoes it and a note for the fault log.
func (r *faultRun) maybeHoldWriters(rng *rand.Rand, node int32) (release func(), note string) {
	if rng.Float64() >= heldShare {
		return func() {}, ""
	}
	return r.holdWriters(node), " (writers held off it)"
}

// heldShare is how often the writers hold off a leader that a fault cuts
// off or pauses for longer than a new leader takes to be elected: most of
// the times, since only then can it answer stale (issue 26's item 1), and
// not always, since a busy leader must hold as well.
const heldShare = 0.75

// holdWriters makes the clients that write for real (the kvWorkers, the
// pinned writers, the unique creator) send node nothing until release is
// called, and waits (at most healthyWithin) until what they sent it before
// has been answered, and then until node's no-op clients have each read
// every topic anew from its image, which no longer moves. A leader cut off
// or paused meanwhile is then sent only the no-op clients' requests, which
// change nothing on its image (even those a pause keeps them from reading
// before), as a leader that only idempotent "make sure it exists" requests
// reach: one write in flight would hold every later answer back until it
// resolves, and with it the stale ones issue 26's item 1 is about.
func (r *faultRun) holdWriters(node int32) (release func()) {
	r.held.Store(node)
	_ = poll.Wait(context.Background(), healthyWithin, time.Millisecond, "", func() (bool, error) {
		return r.busy[node].Load() == 0, nil
	})
	var noops []int
	for j, role := range pinnedRoles {
		if role == noopWrites {
			noops = append(noops, clientIDs{len(r.ctrl)}.pinned(int(node)-1, j))
		}
	}
	r.fresh.reset(node)
	_ = poll.Wait(context.Background(), healthyWithin, time.Millisecond, "", func() (bool, error) {
		return r.fresh.complete(node, noops, kvTopics(r.gen.Load())), nil
	})
	return func() { r.held.Store(0) }
}

// freshness records which topics each no-op client has read from its
// controller's image since holdWriters last started over for it.
type freshness struct {
	mu   sync.Mutex
	seen map[int32]map[int]map[string]bool // node -> client -> topics
}

func (f *freshness) reset(node int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen == nil {
		f.seen = make(map[int32]map[int]map[string]bool)
	}
	f.seen[node] = make(map[int]map[string]bool)
}

// saw records that client read topic from node's image.
func (f *freshness) saw(node int32, client int, topic string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	byClient, ok := f.seen[node]
	if !ok {
		return // not watched
	}
	if byClient[client] == nil {
		byClient[client] = make(map[string]bool)
	}
	byClient[client][topic] = true
}

// complete reports whether every one of clients has read every one of
// topics from node's image since reset.
func (f *freshness) complete(node int32, clients []int, topics []string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range clients {
		for _, t := range topics {
			if !f.seen[node][c][t] {
				return false
			}
		}
	}
	return true
}

// writerSends waits while the writers are held off node, then counts a
// request to it in flight until sent is called.
func (r *faultRun) writerSends(ctx context.Context, node int32) (sent func()) {
	// Counted before the look, so that holdWriters, which sets held and
	// then waits for the count, cannot miss a request about to go out.
	for r.busy[node].Add(1); r.held.Load() == node && ctx.Err() == nil; r.busy[node].Add(1) {
		r.busy[node].Add(-1)
		sleepCtx(ctx, time.Millisecond)
	}
	return func() { r.busy[node].Add(-1) }
}

// noopTimeout bounds a no-op client's wait for an answer: short, so that
// it asks a paused controller again during the pause, and the request it
// sent last, after a new leader changed the topic, is still awaited when
// the old one wakes up and answers.
const noopTimeout = 300 * time.Millisecond

// pinnedRole is what a client pinned to a controller sends it.
type pinnedRole int

const (
	// noopWrites: writes that change nothing on the topic as the
	// controller's own image holds it (knowledge.pick).
	noopWrites pinnedRole = iota
	// changes: writes that change the topic as the controller's own image
	// holds it, so that a new leader's first answers already move what the
	// old one's image holds; and linearizable reads.
	changes
	// reads: linearizable reads, apart from the no-op clients, which a
	// read waiting on a deposed leader's confirmation would hold up.
	reads
)

// pinnedRoles are the clients pinned to each controller. When a paused
// leader wakes up, it decides the requests that queued meanwhile, and
// learns of the new leader, within a millisecond or two of each other: the
// more no-ops wait there, the likelier one is decided first.
var pinnedRoles = []pinnedRole{noopWrites, noopWrites, reads, changes}

// clientIDs numbers the history's clients for n controllers: the kvWorkers
// first, then the pinned clients of each controller (i from 0, in id
// order; j indexes pinnedRoles), then the final reads.
type clientIDs struct{ n int }

func (c clientIDs) pinned(i, j int) int { return kvWorkers + i*len(pinnedRoles) + j }
func (c clientIDs) final() int          { return c.pinned(c.n, 0) }

// role returns client id's role, and whether it is pinned at all.
func (c clientIDs) role(id int) (pinnedRole, bool) {
	if id < kvWorkers || id >= c.final() {
		return 0, false
	}
	return pinnedRoles[(id-kvWorkers)%len(pinnedRoles)], true
}

// pinnedClient sends node, and only node, whatever it answers, what its
// role calls for (pinnedRole).
//
// What it sees of a topic before it writes is node's own image, read stale
// (not in the history: such a read claims nothing): so a no-op client's
// writes change nothing on that image, whatever the other clients did
// meanwhile, and a controller that holds that image and takes itself for
// the leader decides no records for them. If the stale read gets no answer
// within staleReadTimeout (a paused node), what it saw before stands.
func (r *faultRun) pinnedClient(ctx context.Context, client int, node int32, rng *rand.Rand, role pinnedRole) {
	timeout := opTimeout
	if role == noopWrites {
		timeout = noopTimeout
	}
	k := knowledge{}
	for ctx.Err() == nil {
		names := kvTopics(r.gen.Load())
		name := names[rng.IntN(len(names))]
		if role != reads {
			if res, err := r.staleRead(ctx, node, name); err == nil || res.Outcome == outNotFound {
				k.learn(topicOp{Kind: "describe", Topic: name}, res)
				r.fresh.saw(node, client, name)
			}
		}
		op, ok := k.pick(rng, name, role)
		if !ok {
			sleepCtx(ctx, 50*time.Millisecond) // nothing seen yet to write by
			continue
		}
		res, err := r.do(ctx, client, node, timeout, op)
		k.learn(op, res)
		r.think(ctx, rng, err)
	}
}

// staleReadTimeout bounds a pinned client's stale read.
const staleReadTimeout = 100 * time.Millisecond

// staleRead reads topic name from node's own image.
func (r *faultRun) staleRead(ctx context.Context, node int32, name string) (topicResult, error) {
	var res topicResult
	err := r.call(ctx, node, staleReadTimeout, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		resp, err := cl.DescribeTopic(ctx, &keelpb.DescribeTopicRequest{Name: name, Stale: true})
		res.Partitions = int32(len(resp.GetTopic().GetPartitions()))
		res.Configs = ownConfigs(resp.GetTopic().GetConfigs())
		return err
	})
	res.Outcome = classify(err)
	return res, err
}

// knowledge is what a pinned client last saw of each topic it asked about.
type knowledge map[string]topicSeen

// topicSeen is what was last seen of one topic.
type topicSeen struct {
	exists       bool
	configsKnown bool
	configs      topicConfigs
}

// pick chooses the next operation on topic name for a client of role:
//
//   - noopWrites: a write that changes nothing if the topic is as last
//     seen: a create of a topic seen, a delete or a config change of one
//     seen absent, a config set to the value seen (or the deletion of a
//     config seen unset); nothing (false) for a topic never seen;
//   - changes: a write that changes the topic as last seen: a delete or a
//     config set to another value of one seen, a create of one seen absent;
//     or a linearizable read, always for a topic never seen;
//   - reads: a linearizable read.
func (k knowledge) pick(rng *rand.Rand, name string, role pinnedRole) (topicOp, bool) {
	op := topicOp{Topic: name}
	seen, ok := k[op.Topic]
	coin := rng.IntN(2) == 0
	change := role == changes
	switch {
	case role == noopWrites && !ok:
		return op, false
	case role == reads || !ok || change && rng.IntN(10) < 3:
		op.Kind = "describe"
		if coin {
			op.Kind = "describe-configs"
		}
	case change && seen.exists && seen.configsKnown && coin:
		op.Kind, op.Config = "alter", rng.IntN(len(kvConfigs))
		values := kvConfigValues[kvConfigs[op.Config]]
		op.Value = values[0]
		if seen.configs[op.Config] == values[0] {
			op.Value = values[1]
		}
	case change && seen.exists:
		op.Kind = "delete"
	case change:
		op.Kind, op.Partitions = "create", int32(1+rng.IntN(2))
	case seen.exists && seen.configsKnown && coin:
		op.Kind, op.Config = "alter", rng.IntN(len(kvConfigs))
		op.Value = seen.configs[op.Config]
	case seen.exists:
		op.Kind, op.Partitions = "create", 1
	case coin:
		op.Kind = "delete"
	default:
		op.Kind, op.Config = "alter", rng.IntN(len(kvConfigs))
		op.Value = kvConfigValues[kvConfigs[op.Config]][0]
	}
	return op, true
}

// learn updates k with the answer res to op.
func (k knowledge) learn(op topicOp, res topicResult) {
	seen := k[op.Topic]
	switch res.Outcome {
	case outRefused:
		return
	case outUnknown:
		// A write meant to change nothing changed nothing if the topic was
		// as seen, and a read taught nothing: what was seen stands.
		return
	case outNotFound:
		k[op.Topic] = topicSeen{}
		return
	}
	switch op.Kind {
	case "create":
		if res.Outcome == outOK {
			seen = topicSeen{configsKnown: true} // created with no configs of its own
		}
		seen.exists = true
	case "delete":
		seen = topicSeen{}
	case "alter":
		seen.exists = true
		seen.configs[op.Config] = op.Value
	case "describe", "describe-configs":
		seen = topicSeen{exists: true, configsKnown: true, configs: res.Configs}
	}
	k[op.Topic] = seen
}

// stallTick is how often stallWatch wakes.
const stallTick = 5 * time.Millisecond

// stallWatch measures how long the test process goes unscheduled: it wakes
// every stallTick and keeps each wake that came late, by more than a tick.
// A stall that long is the machine's (the processes under test share its
// cores): a gray fault during one is not judged.
type stallWatch struct {
	mu     sync.Mutex
	stalls []stall // in order
}

type stall struct {
	end time.Time
	gap time.Duration // how late the wake at end was
}

func (s *stallWatch) run(ctx context.Context) {
	tick := time.NewTicker(stallTick)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		if gap := now.Sub(last) - stallTick; gap > stallTick {
			s.mu.Lock()
			s.stalls = append(s.stalls, stall{end: now, gap: gap})
			s.mu.Unlock()
		}
		last = now
	}
}

// longest returns the longest stall that overlapped from..to.
func (s *stallWatch) longest(from, to time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var longest time.Duration
	for _, st := range s.stalls {
		if !st.end.Before(from) && !st.end.Add(-st.gap).After(to) {
			longest = max(longest, st.gap)
		}
	}
	return longest
}
