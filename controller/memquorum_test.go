package controller_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-dev/keel/consensus"
	"github.com/keel-dev/keel/consensus/memlog"
	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/fsm"
	keelclock "github.com/keel-dev/keel/internal/clock"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

// quorum is a controller quorum over an in-memory log (memlog), as KRaft's
// controller tests run on LocalLogManager: each member is controller.New
// over its own FSM and applied log, started on its memlog node. Nothing
// happens by a timer: leadership moves only when the test (or a helper
// standing in for raft: WaitForActive, Kill, Partition) elects or deposes,
// or a controller transfers it,
// so that the tests drive the faults they prove (Log's HoldCommits, SetFate,
// FailAppends...) instead of waiting for raft's timings to produce them.
//
// It has the part of keeltest.Cluster's API these tests use; every helper
// calls t.Helper and polls against a deadline; everything it starts is
// stopped when the test ends.
type quorum struct {
	t    testing.TB
	opts quorumOptions
	log  *memlog.Cluster

	mu      sync.Mutex
	members map[int32]*member
	cut     map[int32]bool    // silenced by Partition
	fresh   map[int32]*member // made by newStateMachine, for start
	// lost: Kill left fewer than a majority of the voters running, so the
	// log commits nothing and elects no one until Restart brings one back.
	lost   bool
	closed bool
}

// member is one controller of a quorum, as last started.
type member struct {
	q       *quorum
	id      int32
	cfg     controller.Config
	fsm     *fsm.FSM
	applied *controller.AppliedLog
	ctrl    *controller.Controller
	node    *memlog.Node
	killed  bool
}

// ID is the member's node id.
func (m *member) ID() int32 { return m.id }

// Addr is the member's address in the log's configuration.
func (m *member) Addr() string { return memAddr(m.id) }

// Controller is the member's controller.
func (m *member) Controller() *controller.Controller { return m.ctrl }

// FSM is the member's state machine.
func (m *member) FSM() *fsm.FSM { return m.fsm }

// Log is the member's node of the in-memory log.
func (m *member) Log() *memlog.Node { return m.node }

// Ready is the member's readiness, as server's /readyz judges it from the
// controller and the log: not while its image has diverged or it takes
// over, and as a follower once it knows a leader and has applied what it
// knows committed.
func (m *member) Ready() error {
	active, _ := m.ctrl.Active()
	leader, _ := m.ctrl.Leader()
	switch applied, commit := m.q.log.Applied(m.id), m.node.CommitIndex(); {
	case m.node.State() == consensus.Shutdown:
		return errors.New("stopped")
	case m.ctrl.Diverged() != nil:
		d := m.ctrl.Diverged()
		return fmt.Errorf("this node's metadata image diverged at index %d: %s; it does not act on it", d.Index, d.Reason)
	case m.node.State() == consensus.Leader && !active:
		return errors.New("this node leads the log but is not the active controller yet (taking over)")
	case m.node.State() == consensus.Leader:
		return nil
	case leader < 0:
		return errors.New("no leader known")
	case applied < commit:
		return fmt.Errorf("applied up to index %d of the leader's commit index %d", applied, commit)
	}
	return nil
}

func memAddr(id int32) string { return fmt.Sprintf("mem-%d", id) }

type quorumOptions struct {
	sessionTimeout time.Duration
	now            func() time.Time
	metrics        bool
	tunes          []func(*controller.Config)
	registries     map[int32]*prometheus.Registry
}

// quorumOption adjusts a quorum before its members start.
type quorumOption func(*quorumOptions)

// withSessionTimeout sets every member's broker session timeout.
func withSessionTimeout(d time.Duration) quorumOption {
	return func(o *quorumOptions) { o.sessionTimeout = d }
}

// withClock gives every member's controller now as the sessions' clock.
func withClock(now func() time.Time) quorumOption {
	return func(o *quorumOptions) { o.now = now }
}

// withMetrics gives every member a registry of its own (quorum.Metrics),
// kept across Restart.
func withMetrics() quorumOption { return func(o *quorumOptions) { o.metrics = true } }

// withTune adjusts each member's controller config (cfg.NodeID says
// whose) after the quorum has set its own fields, at every start.
func withTune(tune func(*controller.Config)) quorumOption {
	return func(o *quorumOptions) { o.tunes = append(o.tunes, tune) }
}

// newCluster starts n controllers, ids 1 to n, on an in-memory log, with
// clusterID for the first active controller to write. No member leads
// until WaitForActive elects one.
func newCluster(t testing.TB, n int, opts ...quorumOption) *quorum {
	t.Helper()
	q := &quorum{
		t:       t,
		members: make(map[int32]*member),
		cut:     make(map[int32]bool),
		fresh:   make(map[int32]*member),
	}
	q.opts.registries = make(map[int32]*prometheus.Registry)
	for _, o := range opts {
		o(&q.opts)
	}
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(i + 1)
	}
	t.Cleanup(q.Close)
	q.log = memlog.NewCluster(ids, q.newStateMachine, memlog.WithAddress(memAddr))
	for _, id := range ids {
		q.start(id, q.log.Node(id))
	}
	return q
}

// newStateMachine is the log's sm: member id's controller config, and a
// fresh FSM and applied log, which start then builds the controller over.
// It runs under the log's lock, so it takes only q.mu, which is never held
// across a call to the log.
func (q *quorum) newStateMachine(id int32) consensus.StateMachine {
	cfg := controller.Config{
		NodeID:         id,
		ClusterID:      clusterID,
		SessionTimeout: q.opts.sessionTimeout,
		Now:            q.opts.now,
		Logger:         testLogger().With("node", id),
		AskPeer:        q.askPeer,
		CompareImage:   q.compareImage,
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.opts.metrics {
		reg, ok := q.opts.registries[id]
		if !ok {
			reg = prometheus.NewRegistry()
			q.opts.registries[id] = reg
		}
		cfg.Metrics = reg
	}
	for _, tune := range q.opts.tunes {
		tune(&cfg)
	}
	// A member pretending an older binary applies as one too, as server's
	// nodes do.
	f := fsm.NewWithMaxMetadataVersion(cfg.MaxMetadataVersion)
	m := &member{q: q, id: id, cfg: cfg, fsm: f, applied: controller.NewAppliedLog(f, 0, 0)}
	q.fresh[id] = m
	return m.applied
}

// start starts the controller of the member the log just made for id.
func (q *quorum) start(id int32, node *memlog.Node) *member {
	q.t.Helper()
	q.mu.Lock()
	m := q.fresh[id]
	delete(q.fresh, id)
	q.mu.Unlock()
	m.node = node
	m.ctrl = controller.New(m.cfg, m.applied)
	m.ctrl.Start(node)
	q.mu.Lock()
	q.members[id] = m
	q.mu.Unlock()
	return m
}

func testLogger() *slog.Logger {
	if os.Getenv("KEEL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// Log is the in-memory log: the test's hands on leadership and commits.
func (q *quorum) Log() *memlog.Cluster { return q.log }

// askPeer answers for member id as server's DescribeQuorum would: its log
// position, cluster id and metadata.version range, and ready once it knows
// a leader and has applied what it knows committed.
func (q *quorum) askPeer(_ context.Context, id int32, _ string) (controller.PeerStatus, error) {
	m := q.running(id)
	if m == nil {
		return controller.PeerStatus{}, fmt.Errorf("node %d: connection refused", id)
	}
	st := controller.PeerStatus{LastIndex: m.node.LastIndex(), ClusterID: m.fsm.Image().ClusterID, Leads: m.node.State() == consensus.Leader}
	if conf, _, err := m.node.Configuration(); err == nil {
		for _, s := range conf.Servers {
			st.Members = append(st.Members, s.ID)
		}
	}
	st.MinMetadataVersion, st.MaxMetadataVersion = m.ctrl.SupportedMetadataVersions()
	if err := m.Ready(); err != nil {
		st.NotReady = err.Error()
	}
	st.Ready = st.NotReady == ""
	return st, nil
}

// compareImage asks member id's controller, as server's CompareImage
// does.
func (q *quorum) compareImage(ctx context.Context, id int32, _ string, req *keelpb.CompareImageRequest) (*keelpb.CompareImageResponse, error) {
	m := q.running(id)
	if m == nil {
		return nil, fmt.Errorf("node %d: connection refused", id)
	}
	return m.ctrl.AnswerCompareImage(ctx, req), nil
}

// running is member id if it is running, else nil.
func (q *quorum) running(id int32) *member {
	q.mu.Lock()
	defer q.mu.Unlock()
	if m := q.members[id]; m != nil && !m.killed && !q.closed {
		return m
	}
	return nil
}

func (q *quorum) ids() []int32 {
	q.mu.Lock()
	defer q.mu.Unlock()
	ids := make([]int32, 0, len(q.members))
	for id := range q.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Node is member id as last started (after Kill, the stopped one).
func (q *quorum) Node(id int32) *member {
	q.t.Helper()
	q.mu.Lock()
	defer q.mu.Unlock()
	m := q.members[id]
	if m == nil {
		q.t.Fatalf("quorum: Node(%d): no such node", id)
	}
	return m
}

// Nodes are the running members, by id.
func (q *quorum) Nodes() []*member {
	var out []*member
	for _, id := range q.ids() {
		if m := q.running(id); m != nil {
			out = append(out, m)
		}
	}
	return out
}

// Metrics is member id's registry, with withMetrics.
func (q *quorum) Metrics(id int32) *prometheus.Registry {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.opts.registries[id]
}

// Active is the running member that is the active controller now, or nil.
func (q *quorum) Active() *member {
	for _, m := range q.Nodes() {
		if ok, _ := m.ctrl.Active(); ok {
			return m
		}
	}
	return nil
}

// elect makes a running voter among ids leader, as raft's election would,
// when the log has no leader: the lowest id not cut off by Partition (the
// log is shared, so every running node's is as long). It does nothing when
// a leader leads or no one can.
func (q *quorum) elect(ids []int32) {
	q.mu.Lock()
	lost := q.lost
	q.mu.Unlock()
	if lost || q.log.Leader() >= 0 {
		return
	}
	for _, id := range ids {
		q.mu.Lock()
		ok := q.members[id] != nil && !q.members[id].killed && !q.cut[id]
		q.mu.Unlock()
		if ok && q.log.Elect(id) == nil {
			return
		}
	}
}

// WaitForActive waits until exactly one running member among ids (every
// running member when none are given) is the active controller, and the
// others among ids follow it and have applied its epoch record, and
// returns it. When the log has no leader, it elects one among ids first.
func (q *quorum) WaitForActive(timeout time.Duration, ids ...int32) *member {
	q.t.Helper()
	if len(ids) == 0 {
		ids = q.ids()
	}
	var active *member
	poll.UntilState(q.t, timeout, fmt.Sprintf("one active controller among nodes %v, followed by the others", ids), func() (bool, string) {
		q.elect(ids)
		active = nil
		var activeEpoch int64
		type follower struct {
			leader int32
			epoch  int64
		}
		var followers []follower
		var seen []string
		n := 0
		for _, id := range ids {
			m := q.running(id)
			if m == nil {
				seen = append(seen, fmt.Sprintf("node %d: killed", id))
				continue
			}
			if ok, epoch := m.ctrl.Active(); ok {
				active, activeEpoch, n = m, epoch, n+1
				seen = append(seen, fmt.Sprintf("node %d: active at epoch %d", id, epoch))
				continue
			}
			f := follower{epoch: m.fsm.Image().ControllerEpoch}
			f.leader, _ = m.ctrl.Leader()
			followers = append(followers, f)
			seen = append(seen, fmt.Sprintf("node %d: following node %d, at epoch %d", id, f.leader, f.epoch))
		}
		done := n == 1
		for _, f := range followers {
			done = done && f.leader == active.ID() && f.epoch >= activeEpoch
		}
		return done, strings.Join(seen, "\n")
	})
	return active
}

// WaitForApplied waits until every running member's state machine has
// applied index.
func (q *quorum) WaitForApplied(index uint64) {
	q.t.Helper()
	poll.UntilState(q.t, 10*time.Second, fmt.Sprintf("every running node to apply index %d", index), func() (bool, string) {
		done := true
		var seen []string
		for _, m := range q.Nodes() {
			at := m.fsm.Image().Offset
			done = done && at >= index
			seen = append(seen, fmt.Sprintf("node %d: applied %d", m.id, at))
		}
		return done, strings.Join(seen, "\n")
	})
}

// Kill stops member id as a crash would: its log node shuts down (a
// leader's writes in flight fail) and its controller stops. If it led, a
// running voter is elected in its place, as raft's election would. If
// fewer than a majority of the voters are left running, the log holds its
// commits and deposes its leader, as raft's leader steps down once its
// lease runs out without a quorum: its writes in flight fail.
func (q *quorum) Kill(id int32) {
	q.t.Helper()
	m := q.running(id)
	if m == nil {
		q.t.Fatalf("quorum: Kill(%d): the node is not running", id)
	}
	led := q.log.Leader() == id
	q.log.Shutdown(id)
	m.ctrl.Stop()
	q.mu.Lock()
	m.killed = true
	q.mu.Unlock()
	if !q.majorityRuns() {
		q.mu.Lock()
		q.lost = true
		q.mu.Unlock()
		q.log.HoldCommits()
		q.log.Depose()
		return
	}
	if led {
		q.elect(q.ids())
	}
}

// majorityRuns reports whether a majority of the voters in the latest
// configuration run.
func (q *quorum) majorityRuns() bool {
	for _, m := range q.Nodes() {
		conf, _, err := m.node.Configuration()
		if err != nil || len(conf.Servers) == 0 {
			continue
		}
		running := 0
		for _, s := range conf.Servers {
			if s.Suffrage == consensus.Voter && q.running(s.ID) != nil {
				running++
			}
		}
		return running > conf.Voters()/2
	}
	return false
}

// Restart starts a killed member again: a new FSM, applied log and
// controller on the same id, which replay the whole log. When it brings
// back a majority, the log commits again (ReleaseCommits).
func (q *quorum) Restart(id int32) {
	q.t.Helper()
	q.mu.Lock()
	m := q.members[id]
	q.mu.Unlock()
	if m == nil || !m.killed {
		q.t.Fatalf("quorum: Restart(%d): the node is not killed", id)
	}
	q.start(id, q.log.Restart(id))
	q.mu.Lock()
	regained := q.lost && !q.closed
	q.mu.Unlock()
	if regained && q.majorityRuns() {
		q.mu.Lock()
		q.lost = false
		q.mu.Unlock()
		q.log.ReleaseCommits()
	}
}

// StartJoiner starts member id outside the configuration, as `keel
// controller --join` does: it applies nothing until the active controller
// adds it (AddVoter(ctx, id, node.Addr(), ...)).
func (q *quorum) StartJoiner(id int32) *member {
	q.t.Helper()
	if q.running(id) != nil {
		q.t.Fatalf("quorum: StartJoiner(%d): the quorum already has node %d", id, id)
	}
	return q.start(id, q.log.AddNode(id))
}

// Partition cuts the members in ids off from the others, as raft's
// partition would once the leader's lease ran out: they stop hearing the
// log (memlog's Silence), and a leader among them is deposed. The others
// elect a leader at the next WaitForActive among them. Heal undoes it.
func (q *quorum) Partition(ids ...int32) {
	q.t.Helper()
	q.mu.Lock()
	for _, id := range ids {
		q.cut[id] = true
	}
	q.mu.Unlock()
	if slices.Contains(ids, q.log.Leader()) {
		q.log.Depose()
	}
	for _, id := range ids {
		q.log.Silence(id)
	}
}

// Heal lets every member hear the log again.
func (q *quorum) Heal() {
	q.t.Helper()
	q.mu.Lock()
	cut := q.cut
	q.cut = make(map[int32]bool)
	q.mu.Unlock()
	for id := range cut {
		q.log.Hear(id)
	}
}

// Close stops the log (pending writes fail with ErrShutdown) and then
// every controller. The test's cleanup calls it.
func (q *quorum) Close() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.closed = true
	var ms []*member
	for _, m := range q.members {
		if !m.killed {
			ms = append(ms, m)
			m.killed = true
		}
	}
	q.mu.Unlock()
	q.log.Close()
	for _, m := range ms {
		m.ctrl.Stop()
	}
}

// clock is the fake clock of broker sessions: a test expires them by
// moving it (Advance), not by waiting.
type clock = keelclock.Fake

func newClock() *clock { return keelclock.NewFake() }
