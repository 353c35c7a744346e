package replication

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/broker/partlog"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/clock"
	"github.com/keel-dev/keel/tlsauth"
)

// logsDir is the folder of the broker's data dir that holds the logs.
const logsDir = "logs"

// alterSenders bounds the AlterPartition requests in flight from one broker;
// each partition has at most one.
const alterSenders = 4

// Both contracts of a data plane: the agent's and the Kafka listener's.
var (
	_ broker.DataPlane = (*Manager)(nil)
	_ broker.Backend   = (*Manager)(nil)
)

// Manager is the reference broker's data plane (see the package doc). Make
// one with New, give it to broker.Start as Config.DataPlane and to the Kafka
// listener as its Backend (kafka.Config.Backend), or call Produce, Fetch,
// ListOffsets and OffsetForLeaderEpoch for the partitions this broker leads.
type Manager struct {
	broker.NopHandler // for methods added to Handler later

	cfg   Config
	log   *slog.Logger
	clock clock.Clock
	link  broker.Link
	self  int32
	dir   string

	img atomic.Pointer[fsm.Image]

	// mu guards the fields below up to alterMu: the replicas held (not
	// their role state: each replica's own mu guards that, so that
	// partitions do not serialise on one lock), the connections and
	// fetchers. The lock order is a replica's roleMu, then mu, then a
	// replica's mu, then alterMu; no goroutine holds two replicas' mu at
	// once, and a fetcher's and the throttles' locks are taken last. The
	// hot paths (a produce, a fetch session's round, a follower applying
	// an answer) take mu at most shared, to look replicas up.
	mu          sync.RWMutex
	replicas    map[broker.TopicPartition]*replica
	byName      map[string]fsm.TopicID // topics held, for Produce and Fetch by name
	strayDone   bool
	conns       map[string]fetchClient // by leader address
	fetchers    map[int32]*fetcher     // by leader broker (fetcher.go)
	closed      bool
	wake        chan struct{} // pokes the senders
	ctx         context.Context
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	closeOnce   sync.Once
	closeResult error
	failed      chan error // Failed: the first log that failed to write
	// reports are the replicas' logs reported to the controllers
	// (recovery.go).
	reports logReporter
	// scrubMetrics count what the scrubs read and found (scrub.go).
	scrubMetrics scrubMetrics
	// cleanerMetrics count the log cleaner's work (cleaner.go).
	cleanerMetrics cleanerMetrics
	// throttle holds the replication throttles' quotas (throttle.go).
	throttle *throttles
	// sessionMetrics count the fetch sessions (sessionmetrics.go).
	sessionMetrics sessionMetrics
	// imaged is closed (and replaced) at each new image, under mu: a
	// DeleteRecords waiting for its replicas looks again when a broker is
	// fenced.
	imaged chan struct{}

	// alterMu guards the ISR changes to send, which maybeAlter queues
	// under a replica's mu.
	alterMu sync.Mutex
	// waiting holds the led partitions whose ISR changes wait for metadata.
	waiting map[broker.TopicPartition]struct{}
	// queue holds the led partitions with an ISR change to send.
	queue []broker.TopicPartition
}

// replica is one partition replica on this broker. roleMu is held shared
// by whoever writes to the log under the current role (a produce, a
// follower's fetched batches) and exclusively by role changes, so that no
// write of an old role lands after a new one has started (Kafka's
// leaderIsrUpdateLock). mu guards the role state, the fields after it; it
// is the replica's own, taken after roleMu and Manager.mu (see Manager.mu
// for the order), so that one partition's fetches and produces do not wait
// for another's.
type replica struct {
	tp     broker.TopicPartition
	topic  string // written under Manager.mu and mu, only when it differs
	log    *partlog.Log
	roleMu sync.RWMutex
	// segments are the segment configs the log has now (segments.go);
	// guarded by Manager.mu.
	segments segmentConfig

	mu          sync.Mutex
	role        string
	leader      int32
	leaderEpoch int32
	// gen counts role changes, so that what was decided under one role is
	// not applied under the next.
	gen uint64
	// hw is the high watermark: the leader's, or as the leader last said
	// (at most the log end); leaderHW, a follower's, as the leader said.
	hw           int64
	leaderHW     int64
	checkpointed int64
	// changed is closed (and replaced) whenever the log end, the high
	// watermark or the role changes: waiting fetches and produces watch it.
	changed chan struct{}
	// watches are called at each change too (Manager.Watch).
	watches map[*func()]struct{}

	// As leader: where this epoch starts, since when it leads, each
	// follower's fetches at this epoch, the ISR change in progress and
	// the ISR it asks for while in flight.
	epochStart int64
	since      time.Time
	followers  map[int32]*follower
	alter      alterState
	sending    bool
	inflight   []int32

	// As follower: the fetch loop's stop, and the fetches failing now
	// (logged on change only).
	stopFetch    context.CancelFunc
	fetchFailing failStreak

	// damage is what the scrub found in the log, and a follower in its
	// leader's answers (scrub.go).
	damage replicaDamage
}

// follower is what a leader knows of one follower from its fetches at the
// leader's current epoch (Kafka's Replica state).
type follower struct {
	fetched     bool
	leo         int64
	logStart    int64
	brokerEpoch int64
	// lastCaughtUp: the last time the follower had everything the leader
	// had (Kafka's lastCaughtUpTimeMs).
	lastCaughtUp time.Time
	// The leader's log end and the time at the previous fetch.
	lastFetchLeaderLEO int64
	lastFetch          time.Time
}

// New makes a Manager. It fails on a bad config; the logs are opened as the
// metadata assigns replicas.
func New(cfg Config) (*Manager, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.dial == nil {
		creds := insecure.NewCredentials()
		if cfg.TLS != nil {
			creds = credentials.NewTLS(cfg.TLS.Client(tlsauth.RoleBroker))
		}
		dialer := cfg.Dialer
		cfg.dial = func(addr string) (fetchClient, error) { return dialLeader(addr, creds, dialer) }
	}
	m := &Manager{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "replication"),
		clock:    cfg.clock,
		dir:      filepath.Join(cfg.DataDir, logsDir),
		replicas: map[broker.TopicPartition]*replica{},
		byName:   map[string]fsm.TopicID{},
		waiting:  map[broker.TopicPartition]struct{}{},
		conns:    map[string]fetchClient{},
		fetchers: map[int32]*fetcher{},
		imaged:   make(chan struct{}),
		wake:     make(chan struct{}, alterSenders),
		failed:   make(chan error, 1),
		reports:  newLogReporter(),

		scrubMetrics:   newScrubMetrics(),
		cleanerMetrics: newCleanerMetrics(),
		throttle:       newThrottles(),
		sessionMetrics: newSessionMetrics(),
	}
	m.img.Store(fsm.Empty())
	return m, nil
}

// Start links the manager to its agent and starts the ISR senders, the lag
// checks, the high-watermark checkpoints, the flushes and retention.
func (m *Manager) Start(link broker.Link) error {
	if err := m.attach(link); err != nil {
		return err
	}
	if reg := m.cfg.Metrics; reg != nil {
		for _, c := range slices.Concat(m.scrubMetrics.collectors(), m.cleanerMetrics.collected, m.throttle.collectors(), m.sessionMetrics.collectors()) {
			if err := reg.Register(c); err != nil {
				return fmt.Errorf("replication: register the data plane's metrics: %v", err)
			}
		}
	}
	if m.cfg.ScrubBytesPerSecond > 0 {
		m.wg.Add(1)
		go m.runScrub()
	}
	for range alterSenders {
		m.wg.Add(1)
		go m.runSender()
	}
	m.wg.Add(1)
	go m.runLogReports()
	m.every(max(m.cfg.ReplicaLagTimeMax/2, time.Millisecond), m.checkLag)
	m.every(m.cfg.HighWatermarkCheckpointInterval, m.checkpointHighWatermarks)
	if m.cfg.FlushInterval > 0 {
		m.every(m.cfg.FlushCheckInterval, m.maybeFlush)
	}
	m.every(m.cfg.RetentionCheckInterval, m.retain)
	m.wg.Add(1)
	go m.runCleaner()
	return nil
}

// attach is Start without the background work, which tests drive by hand.
// Followers' fetch loops start with the roles either way.
func (m *Manager) attach(link broker.Link) error {
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		return fmt.Errorf("replication: %v", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.link != nil {
		return errors.New("replication: already started")
	}
	m.link, m.self = link, link.BrokerID()
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return nil
}

// every runs f every d until Close.
func (m *Manager) every(d time.Duration, f func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			select {
			case <-m.ctx.Done():
				return
			case <-m.clock.After(d):
			}
			f()
		}
	}()
}

// Close stops every fetch loop and sender, checkpoints each high watermark
// and closes every log (which fsyncs it). It returns the first failure.
func (m *Manager) Close() error {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.closed = true
		cancel := m.cancel
		m.mu.Unlock()
		if cancel != nil {
			cancel()
		}
		m.wg.Wait()
		m.mu.Lock()
		defer m.mu.Unlock()
		var errs []error
		for _, r := range m.replicas {
			r.mu.Lock()
			hw := r.hw
			r.mu.Unlock()
			if hw = min(hw, r.log.LogEndOffset()); hw != r.log.HighWatermark() {
				if err := r.log.CheckpointHighWatermark(hw); err != nil {
					errs = append(errs, err)
				}
			}
			if err := r.log.Close(); err != nil {
				errs = append(errs, err)
			}
			r.mu.Lock()
			r.notify()
			r.mu.Unlock()
		}
		for _, c := range m.conns {
			c.Close()
		}
		m.closeResult = errors.Join(errs...)
	})
	return m.closeResult
}

// notify wakes whoever waits on the replica's changes. The caller holds
// r.mu.
func (r *replica) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
	for w := range r.watches {
		(*w)()
	}
}

// MetadataChanged keeps the image, lets the ISR changes that waited for it
// go on, applies changed segment configs to the open logs, and, once the image has reached this broker's registration,
// deletes the logs it holds that the image does not assign to it.
func (m *Manager) MetadataChanged(before, after *fsm.Image) {
	m.img.Store(after)
	m.mu.Lock()
	close(m.imaged)
	m.imaged = make(chan struct{})
	rs := make([]*replica, 0, len(m.replicas))
	for _, r := range m.replicas {
		rs = append(rs, r)
	}
	checkStrays := !m.strayDone && m.link != nil && m.link.BrokerEpoch() > 0 && after.Offset >= uint64(m.link.BrokerEpoch())
	if checkStrays {
		m.strayDone = true
	}
	changed := m.segmentChanges(before, after)
	m.mu.Unlock()
	m.alterMu.Lock()
	waiting := maps.Clone(m.waiting)
	m.alterMu.Unlock()
	now := m.clock.Now()
	for _, r := range rs {
		r.mu.Lock()
		if _, ok := waiting[r.tp]; ok {
			m.maybeAlter(r, now)
		}
		// An ISR that changed may move a leader's high watermark.
		if r.role == broker.RoleLeader {
			m.maybeIncrementHW(r, after)
		}
		r.mu.Unlock()
	}
	m.reconfigure(changed)
	if checkStrays {
		m.deleteStrays(after)
	}
}

// deleteStrays deletes the logs on disk of replicas img does not assign to
// this broker: topics deleted, or replicas moved away, while it was down.
func (m *Manager) deleteStrays(img *fsm.Image) {
	entries, err := os.ReadDir(m.dir)
	if err != nil {
		m.log.Warn("cannot list the logs to find stray replicas", "dir", m.dir, "err", err)
		return
	}
	var held []broker.TopicPartition
	for _, e := range entries {
		if tp, ok := parseLogDir(e.Name()); ok && e.IsDir() {
			held = append(held, tp)
		}
	}
	for _, tp := range broker.StrayReplicas(img, m.self, held) {
		m.mu.Lock()
		_, open := m.replicas[tp]
		m.mu.Unlock()
		if open {
			continue
		}
		dir := filepath.Join(m.dir, logDirName(tp))
		if err := os.RemoveAll(dir); err != nil {
			m.log.Warn("cannot delete a stray replica's log", "dir", dir, "err", err)
			continue
		}
		m.log.Info("stray replica deleted", "topic_id", tp.TopicID.String(), "partition", tp.Partition, "dir", dir)
	}
}

// logDirName is a replica's log folder: TOPICID-PARTITION.
func logDirName(tp broker.TopicPartition) string {
	return tp.TopicID.String() + "-" + strconv.Itoa(int(tp.Partition))
}

func parseLogDir(name string) (broker.TopicPartition, bool) {
	i := strings.LastIndexByte(name, '-')
	if i != 36 {
		return broker.TopicPartition{}, false
	}
	id, err := fsm.ParseTopicID(name[:i])
	if err != nil {
		return broker.TopicPartition{}, false
	}
	p, err := strconv.ParseInt(name[i+1:], 10, 32)
	if err != nil || p < 0 || strconv.Itoa(int(p)) != name[i+1:] {
		return broker.TopicPartition{}, false
	}
	return broker.TopicPartition{TopicID: id, Partition: int32(p)}, true
}

// Failed delivers the error of the first log that failed to write (its
// disk is full, or broken), after which that log refuses writes until it
// is reopened, and so recovered: the broker must stop, as Kafka halts a
// broker whose every log dir has failed. A log that fails to write may
// hold a torn batch past its end: it is never trusted again in this
// process, and the next start recovers it.
func (m *Manager) Failed() <-chan error { return m.failed }

// logFailed is every log's partlog OnFail: it hands the first failure to
// Failed, and logs each.
func (m *Manager) logFailed(err error) {
	m.log.Error("a log failed to write; it refuses writes until the broker restarts", "err", err)
	select {
	case m.failed <- err:
	default:
	}
}

// logConfig is the partlog config of a topic's replicas: the segment
// configs from the image (applied again as they change: reconfigure), and
// the broker's largest batch, which bounds what recovery reads as one.
func (m *Manager) logConfig(img *fsm.Image, id fsm.TopicID) (partlog.Config, segmentConfig) {
	cfg := partlog.Config{FlushInterval: m.cfg.FlushInterval, Logger: m.log, Now: m.clock.Now, OnFail: m.logFailed, MaxBatchBytes: m.cfg.MaxBatchBytes}
	t, ok := img.TopicByID(id)
	if !ok {
		return cfg, segmentConfig{}
	}
	sc := segmentConfigOf(img, t)
	sc.apply(&cfg)
	return cfg, sc
}

// open returns the replica of p, opening its log the first time. The log
// is opened outside mu, which produces and fetches of the other replicas
// take: recovering a log (after a crash, every unflushed segment is read)
// may take seconds. Role changes come one at a time (the agent's), so no
// other open of the same log runs meanwhile. A log that cannot be opened
// leaves the replica out: the broker then does not serve it (Kafka marks
// its log dir offline).
func (m *Manager) open(p broker.PartitionState) (*replica, error) {
	tp := broker.TopicPartition{TopicID: p.TopicID, Partition: p.Partition}
	m.mu.Lock()
	if r, ok := m.replicas[tp]; ok {
		m.named(r, p)
		m.mu.Unlock()
		return r, nil
	}
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return nil, errors.New("replication: closed")
	}
	cfg, sc := m.logConfig(m.img.Load(), p.TopicID)
	l, err := partlog.Open(filepath.Join(m.dir, logDirName(tp)), cfg)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		// Close has closed the logs it held; this one is closed here.
		l.Close()
		return nil, errors.New("replication: closed")
	}
	r := &replica{tp: tp, topic: p.Topic, log: l, role: broker.RoleStopped, leader: fsm.NoLeader,
		hw: l.HighWatermark(), checkpointed: l.HighWatermark(), changed: make(chan struct{}), segments: sc}
	m.replicas[tp] = r
	m.named(r, p)
	return r, nil
}

// named records p's topic name for r. The caller holds mu.
func (m *Manager) named(r *replica, p broker.PartitionState) {
	if p.Topic == "" {
		return
	}
	if r.topic != p.Topic {
		r.mu.Lock()
		r.topic = p.Topic
		r.mu.Unlock()
	}
	m.byName[p.Topic] = p.TopicID
}

// reset ends the replica's current role: its fetch loop, its followers, its
// ISR change, and wakes whoever waits on it. The caller holds r.roleMu and
// r.mu.
func (m *Manager) reset(r *replica) {
	if r.stopFetch != nil {
		r.stopFetch()
		r.stopFetch = nil
	}
	r.gen++
	r.followers, r.alter, r.inflight, r.fetchFailing = nil, alterState{}, nil, failStreak{}
	m.alterMu.Lock()
	delete(m.waiting, r.tp)
	m.alterMu.Unlock()
	r.notify()
}

// BecomeLeader makes the replica lead at p.LeaderEpoch: the epoch is
// recorded at the log end before anything is appended in it (Kafka's
// becomeLeader), the followers' log ends are unknown until they fetch, and
// the ISR members count as caught up as of now, so that none is dropped
// before it has had ReplicaLagTimeMax to fetch from the new leader. The
// high watermark stays where it was, maybe behind, until the followers
// report their log ends.
func (m *Manager) BecomeLeader(p broker.PartitionState) {
	r, err := m.open(p)
	if err != nil {
		m.log.Error("cannot open a replica's log; not leading it", "topic", p.Topic, "partition", p.Partition, "err", err)
		return
	}
	r.roleMu.Lock()
	defer r.roleMu.Unlock()
	if ahead, last := logAhead(r, p.LeaderEpoch); ahead {
		// The metadata went back (a restore): leading at this epoch would
		// write below what the log holds. The controller is told, and
		// elects again above it.
		m.log.Warn("not leading: the log holds a leader epoch above the metadata's; reporting it to the controller",
			"topic", p.Topic, "partition", p.Partition, "leader_epoch", p.LeaderEpoch, "log_leader_epoch", last)
		r.mu.Lock()
		m.reset(r)
		r.role, r.leader, r.leaderEpoch = broker.RoleStopped, p.Leader, p.LeaderEpoch
		r.mu.Unlock()
		m.pokeReports()
		return
	}
	if err := r.log.AssignEpoch(p.LeaderEpoch); err != nil {
		m.log.Error("cannot record the leader epoch; not leading", "topic", p.Topic, "partition", p.Partition,
			"leader_epoch", p.LeaderEpoch, "err", err)
		r.mu.Lock()
		m.reset(r)
		r.role = broker.RoleStopped
		r.mu.Unlock()
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m.reset(r)
	now := m.clock.Now()
	r.role, r.leader, r.leaderEpoch, r.since = broker.RoleLeader, p.Leader, p.LeaderEpoch, now
	r.epochStart = r.log.LogEndOffset()
	r.hw = min(r.hw, r.epochStart)
	r.followers = map[int32]*follower{}
	for _, id := range p.Replicas {
		if id != m.self {
			f := &follower{leo: -1, logStart: -1, lastFetchLeaderLEO: -1}
			if slices.Contains(p.ISR, id) {
				f.lastCaughtUp = now
			}
			r.followers[id] = f
		}
	}
	m.log.Info("leading", "topic", p.Topic, "partition", p.Partition, "leader_epoch", p.LeaderEpoch,
		"log_end_offset", r.epochStart, "high_watermark", r.hw, "isr", p.ISR)
	img := m.img.Load()
	// A leader alone in its ISR commits at once; a recovering partition's
	// leader confirms now (KIP-704), not at the next lag check.
	m.maybeIncrementHW(r, img)
	if cur, ok := img.Partition(p.TopicID, p.Partition); ok && cur.Recovering() {
		m.maybeAlter(r, now)
	}
}

// BecomeFollower makes the replica fetch from p.Leader at p.LeaderEpoch, on
// this broker's fetch session with that leader (fetcher.go), as a partition
// new to it (each new epoch starts with a fetch that may find the logs
// diverging, KAFKA-7164).
func (m *Manager) BecomeFollower(p broker.PartitionState) {
	r, err := m.open(p)
	if err != nil {
		m.log.Error("cannot open a replica's log; not following", "topic", p.Topic, "partition", p.Partition, "err", err)
		return
	}
	r.roleMu.Lock()
	defer r.roleMu.Unlock()
	m.mu.Lock() // for the fetchers
	defer m.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	m.reset(r)
	if ahead, last := logAhead(r, p.LeaderEpoch); ahead {
		// A fetch would truncate the log to a leader that may lack what it
		// holds (the metadata went back): the replica stops, so that no
		// fetch answer is applied to it, and its log is reported; the
		// controller elects above it.
		m.log.Warn("not following: the log holds a leader epoch above the metadata's; reporting it to the controller",
			"topic", p.Topic, "partition", p.Partition, "leader", p.Leader, "leader_epoch", p.LeaderEpoch, "log_leader_epoch", last)
		r.role, r.leader, r.leaderEpoch = broker.RoleStopped, p.Leader, p.LeaderEpoch
		m.pokeReports()
		return
	}
	r.role, r.leader, r.leaderEpoch = broker.RoleFollower, p.Leader, p.LeaderEpoch
	r.hw = min(r.hw, r.log.LogEndOffset())
	r.leaderHW = r.hw
	if p.Leader == fsm.NoLeader {
		// It may await its replicas' logs.
		m.pokeReports()
	}
	if p.Leader != fsm.NoLeader && p.Leader != m.self && m.ctx != nil && !m.closed && !m.cfg.manualFetch {
		m.follow(r, p.Leader, p.LeaderEpoch)
	}
	m.log.Debug("following", "topic", p.Topic, "partition", p.Partition, "leader", p.Leader, "leader_epoch", p.LeaderEpoch)
}

// StopReplica stops leading or following the replica. With delete its log
// is closed and removed from disk; without, it stays open, stopped, until
// Close.
func (m *Manager) StopReplica(topicID fsm.TopicID, partition int32, remove bool) {
	tp := broker.TopicPartition{TopicID: topicID, Partition: partition}
	m.mu.Lock()
	r, ok := m.replicas[tp]
	m.mu.Unlock()
	if !ok {
		if remove {
			// A log on disk that this process never opened.
			m.removeDir(tp)
		}
		return
	}
	r.roleMu.Lock()
	defer r.roleMu.Unlock()
	m.mu.Lock()
	r.mu.Lock()
	m.reset(r)
	r.role = broker.RoleStopped
	r.mu.Unlock()
	if remove {
		delete(m.replicas, tp)
		if m.byName[r.topic] == topicID && !m.holdsTopic(topicID) {
			delete(m.byName, r.topic)
		}
	}
	m.mu.Unlock()
	if !remove {
		return
	}
	if err := r.log.Close(); err != nil {
		m.log.Warn("closing a deleted replica's log", "topic", r.topic, "partition", partition, "err", err)
	}
	m.removeDir(tp)
	m.log.Info("replica deleted", "topic", r.topic, "partition", partition)
}

func (m *Manager) holdsTopic(id fsm.TopicID) bool {
	for tp := range m.replicas {
		if tp.TopicID == id {
			return true
		}
	}
	return false
}

func (m *Manager) removeDir(tp broker.TopicPartition) {
	dir := filepath.Join(m.dir, logDirName(tp))
	if err := os.RemoveAll(dir); err != nil {
		m.log.Warn("cannot delete a replica's log", "dir", dir, "err", err)
	}
}

// Replicas lists the replicas this broker holds, with each one's ISR and
// partition epoch from the latest image.
func (m *Manager) Replicas() []broker.ReplicaStatus {
	img := m.img.Load()
	m.mu.Lock()
	out := make([]broker.ReplicaStatus, 0, len(m.replicas))
	for tp, r := range m.replicas {
		r.mu.Lock()
		s := broker.ReplicaStatus{Topic: r.topic, TopicID: tp.TopicID, Partition: tp.Partition, Role: r.role,
			Leader: r.leader, LeaderEpoch: r.leaderEpoch}
		r.mu.Unlock()
		if p, ok := img.Partition(tp.TopicID, tp.Partition); ok {
			s.PartitionEpoch, s.Replicas, s.ISR = p.PartitionEpoch, p.Replicas, p.ISR
		}
		out = append(out, s)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b broker.ReplicaStatus) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}

// ReplicaState is one replica's log as Manager.State reports it.
type ReplicaState struct {
	Role                         string
	LeaderEpoch                  int32
	LogStartOffset, LogEndOffset int64
	HighWatermark                int64
}

// State reports one replica's log bounds and role, false if this broker
// does not hold it.
func (m *Manager) State(topicID fsm.TopicID, partition int32) (ReplicaState, bool) {
	m.mu.Lock()
	r, ok := m.replicas[broker.TopicPartition{TopicID: topicID, Partition: partition}]
	m.mu.Unlock()
	if !ok {
		return ReplicaState{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return ReplicaState{Role: r.role, LeaderEpoch: r.leaderEpoch, LogStartOffset: r.log.LogStartOffset(),
		LogEndOffset: r.log.LogEndOffset(), HighWatermark: r.hw}, true
}

// checkpointHighWatermarks writes each replica's high watermark that moved
// since its last checkpoint (Kafka's replication-offset-checkpoint).
func (m *Manager) checkpointHighWatermarks() {
	m.mu.Lock()
	type todo struct {
		r  *replica
		hw int64
	}
	var work []todo
	for _, r := range m.replicas {
		r.mu.Lock()
		if r.hw != r.checkpointed {
			work = append(work, todo{r, r.hw})
		}
		r.mu.Unlock()
	}
	m.mu.Unlock()
	for _, w := range work {
		hw := min(w.hw, w.r.log.LogEndOffset())
		if err := w.r.log.CheckpointHighWatermark(hw); err != nil {
			if !errors.Is(err, partlog.ErrClosed) {
				m.log.Warn("cannot checkpoint a high watermark", "topic", w.r.topic, "partition", w.r.tp.Partition, "err", err)
			}
			continue
		}
		w.r.mu.Lock()
		w.r.checkpointed = hw
		w.r.mu.Unlock()
	}
}

func (m *Manager) logs() []*replica {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*replica, 0, len(m.replicas))
	for _, r := range m.replicas {
		out = append(out, r)
	}
	return out
}

// maybeFlush fsyncs the logs whose last fsync is older than FlushInterval.
func (m *Manager) maybeFlush() {
	now := m.clock.Now()
	for _, r := range m.logs() {
		if err := r.log.MaybeFlush(now); err != nil && !errors.Is(err, partlog.ErrClosed) {
			m.log.Warn("cannot flush a log", "topic", r.topic, "partition", r.tp.Partition, "err", err)
		}
	}
}

// retain applies each topic's retention.ms and retention.bytes (Kafka's
// deleteOldSegments, every log.retention.check.interval.ms).
func (m *Manager) retain() {
	img := m.img.Load()
	now := m.clock.Now()
	for _, r := range m.logs() {
		t, ok := img.TopicByID(r.tp.TopicID)
		if !ok {
			continue
		}
		if !deletes(img, t) {
			continue // cleanup.policy=compact: the cleaner's
		}
		var ret partlog.Retention
		if n, err := strconv.ParseInt(img.TopicConfig(t, fsm.RetentionMs).Value, 10, 64); err == nil && n > 0 {
			ret.Time = time.Duration(n) * time.Millisecond
		}
		if n, err := strconv.ParseInt(img.TopicConfig(t, fsm.RetentionBytes).Value, 10, 64); err == nil && n > 0 {
			ret.Bytes = n
		}
		if ret.Time == 0 && ret.Bytes == 0 {
			continue
		}
		res, err := r.log.Retain(now, ret)
		switch {
		case err != nil && !errors.Is(err, partlog.ErrClosed):
			m.log.Warn("retention failed", "topic", r.topic, "partition", r.tp.Partition, "err", err)
		case res.Segments > 0:
			m.log.Info("retention deleted segments", "topic", r.topic, "partition", r.tp.Partition,
				"segments", res.Segments, "bytes", res.Bytes, "log_start_offset", res.LogStartOffset)
			r.mu.Lock()
			r.notify()
			r.mu.Unlock()
		}
	}
}
