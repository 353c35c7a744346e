package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-dev/keel/consensus"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/listenprobe"
	"github.com/keel-dev/keel/proto/keelpb"
)

// Config configures a Controller.
type Config struct {
	NodeID int32
	// ClusterID is written by the first active controller of a new cluster;
	// empty means a random UUID.
	ClusterID string
	// ApplyTimeout bounds how long a write may wait to enter raft.
	ApplyTimeout time.Duration
	// EventQueueSize bounds the event loop's queue; beyond it writes get ErrQueueFull.
	EventQueueSize int
	// SessionTimeout is how long a broker stays alive without a heartbeat
	// before it is fenced (KRaft's broker.session.timeout.ms, 9s).
	SessionTimeout time.Duration
	// CrashGrace is how long a broker whose metadata stream's connection
	// closed may take to come back before it is fenced (crash.go); zero
	// turns crash detection off, leaving the session timeout.
	CrashGrace time.Duration
	// LeaderImbalanceCheckInterval is how often automatic leader rebalance
	// runs (Kafka's leader.imbalance.check.interval.seconds, 300s); a
	// negative value turns it off.
	LeaderImbalanceCheckInterval time.Duration
	// LeaderImbalanceRatio is the share of a broker's preferred
	// partitions it may fail to lead before a rebalance (10%).
	LeaderImbalanceRatio float64
	// RestoreFrom is a snapshot file the first active controller of a brand
	// new cluster restores, keeping its cluster id and epoch (disaster
	// recovery into an empty quorum). Ignored once the cluster has state.
	RestoreFrom string
	// Now is the clock for broker sessions; tests pass a fake one.
	Now    func() time.Time
	Logger *slog.Logger
	// Metrics, when set, gets the controller's metrics (metrics.go) once
	// Start is called, until Stop; nil registers none.
	Metrics prometheus.Registerer
	// AskPeer asks voter id at addr how it is (server wires it to the
	// voter's DescribeQuorum): a leadership transfer goes only to a voter
	// that is ready and caught up (handOn). Nil: no voter is asked; a
	// transfer goes to the voter named, or to the one whose log the log
	// knows to be longest, unchecked.
	AskPeer func(ctx context.Context, id int32, addr string) (PeerStatus, error)
	// InitialMetadataVersion is the metadata.version a new cluster starts
	// at (0: MaxMetadataVersion); lower keeps it readable by older nodes.
	InitialMetadataVersion uint32
	// MaxMetadataVersion is the highest metadata.version this node says it
	// supports (0: the binary's, fsm.MaxMetadataVersion). Test wiring: a
	// lower value pretends an older binary.
	MaxMetadataVersion uint32
	// CompareImage asks voter id at addr for its image digest (server wires
	// it to the voter's CompareImage): the active controller compares the
	// voters' every ImageCheckInterval (integrity.go). Nil: no comparison.
	CompareImage func(ctx context.Context, id int32, addr string, req *keelpb.CompareImageRequest) (*keelpb.CompareImageResponse, error)
	// ImageCheckInterval is how often the active controller compares the
	// voters' image digests (0: DefaultImageCheckInterval; negative: never).
	ImageCheckInterval time.Duration

	// takeoverFault, when set, is called at the start of every takeover
	// attempt and fails it with the error it returns. Tests only: a leader
	// that keeps leading but cannot take over (a full disk, say) is a fault
	// the in-memory raft cluster cannot produce.
	takeoverFault func() error
	// probeBroker dials a broker's registered address before the broker is
	// fenced for a crash (crash.go); nil is listenprobe.Dial. Tests
	// replace it (SetBrokerProbe), so that no real port decides.
	probeBroker func(ctx context.Context, addr string) error
	// submitFault, when set, is called for every entry the controller hands
	// to raft; an error it returns fails that entry's future instead, as
	// raft fails an entry it could not enqueue in time, and raft never sees
	// the entry. Tests only: a write that fails in the middle of a pipeline
	// of writes that do not.
	submitFault func() error
}

// DefaultSessionTimeout is KRaft's default broker session timeout.
const DefaultSessionTimeout = 9 * time.Second

// DefaultCrashGrace is the default crash grace of a controller process
// (keel controller --crash-grace).
const DefaultCrashGrace = 500 * time.Millisecond

// DefaultLeaderImbalanceCheckInterval is Kafka's default.
const DefaultLeaderImbalanceCheckInterval = 300 * time.Second

func (c *Config) setDefaults() {
	if c.ApplyTimeout <= 0 {
		c.ApplyTimeout = 5 * time.Second
	}
	if c.EventQueueSize <= 0 {
		c.EventQueueSize = 4096
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.probeBroker == nil {
		c.probeBroker = listenprobe.Dial
	}
	if c.LeaderImbalanceCheckInterval == 0 {
		c.LeaderImbalanceCheckInterval = DefaultLeaderImbalanceCheckInterval
	}
	if c.LeaderImbalanceRatio <= 0 {
		c.LeaderImbalanceRatio = 0.10
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxMetadataVersion == 0 {
		c.MaxMetadataVersion = fsm.MaxMetadataVersion
	}
	if c.InitialMetadataVersion == 0 {
		c.InitialMetadataVersion = c.MaxMetadataVersion
	}
	if c.ImageCheckInterval == 0 {
		c.ImageCheckInterval = DefaultImageCheckInterval
	}
}

// Controller follows raft leadership and, while this node leads, runs the
// active controller.
type Controller struct {
	cfg     Config
	applied *AppliedLog
	fsm     *fsm.FSM
	log     *slog.Logger

	quorum consensus.Log // set by Start

	metrics *metrics
	// Set by Start when cfg.Metrics is: what to undo in Stop.
	metricsCollectors []prometheus.Collector
	stopObserving     func()

	// active is the leadership in force once its epoch committed; nil otherwise.
	active atomic.Pointer[leadership]

	stop     context.CancelFunc
	stopped  chan struct{}
	stopOnce sync.Once
	// divergenceLogged is closed when watchDivergence has returned.
	divergenceLogged chan struct{}
}

// New returns a controller over the applied log (the state machine the
// consensus log drives). Call Start with the log built over it.
func New(cfg Config, applied *AppliedLog) *Controller {
	cfg.setDefaults()
	return &Controller{
		cfg:     cfg,
		applied: applied,
		fsm:     applied.FSM(),
		log:     cfg.Logger.With("component", "controller", "node_id", cfg.NodeID),
		stopped: make(chan struct{}),
		metrics: newMetrics(),
	}
}

// Start begins following leadership on log.
func (c *Controller) Start(log consensus.Log) {
	c.quorum = log
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	if c.cfg.Metrics != nil {
		c.startMetrics(c.cfg.Metrics)
	}
	c.divergenceLogged = make(chan struct{})
	go func() {
		defer close(c.divergenceLogged)
		c.watchDivergence(ctx)
	}()
	go c.monitorLeadership(ctx)
}

// Stop ends any leadership work and waits for it. The log itself is closed by its owner.
func (c *Controller) Stop() {
	c.stopOnce.Do(func() {
		if c.stop == nil {
			close(c.stopped)
			return
		}
		c.stop()
		<-c.stopped
		<-c.divergenceLogged
		c.stopMetrics()
	})
}

// monitorLeadership is the only reader of the log's leadership changes. It
// starts a leadership when the log says this node leads and revokes it,
// waiting until everything it started has stopped, when it says it no
// longer does.
func (c *Controller) monitorLeadership(ctx context.Context) {
	defer close(c.stopped)
	var current *leadership
	revoke := func() {
		if current != nil {
			current.revoke()
			current = nil
		}
	}
	defer revoke()
	for {
		select {
		case <-ctx.Done():
			return
		case isLeader := <-c.quorum.LeadershipChanges():
			// A lost-then-regained flap is a new leadership: revoke first.
			revoke()
			if isLeader {
				current = c.newLeadership()
				go current.run()
			}
		}
	}
}

// Active reports whether this node is the active controller, and its epoch.
func (c *Controller) Active() (bool, int64) {
	if l := c.active.Load(); l != nil {
		return true, l.epoch.Load()
	}
	return false, 0
}

// Leader returns the raft leader's id and address as this node knows them,
// or -1 and "" when none is known.
func (c *Controller) Leader() (int32, string) { return c.quorum.Leader() }

// notLeader builds the error for a write that reached a node that is not active.
func (c *Controller) notLeader() error {
	if c.quorum.State() == consensus.Leader {
		return ErrNotReady
	}
	id, addr := c.Leader()
	return &NotLeaderError{LeaderID: id, LeaderAddress: addr}
}

// unconfirmed is the answer to a decision that wrote nothing when the
// entry that was to confirm it did not commit (why): this node could not
// show that it still led after taking it, so its answer may be stale.
// Nothing was written, so the caller may ask again: the leader it names,
// or, while raft still has this node lead, this node.
func (c *Controller) unconfirmed(why error) error {
	if c.quorum.State() == consensus.Leader {
		return fmt.Errorf("%w: %v; nothing was written", ErrLeadershipUnconfirmed, why)
	}
	return c.notLeader()
}

// decision decides what to write from the committed image: it runs on the
// event loop, after every earlier decision has been applied, and returns the
// records to commit as one batch (none: nothing to write).
type decision func(img *fsm.Image) ([]*keelpb.Record, error)

// decide runs d on the active controller's event loop and commits its
// records. It returns the raft index they were applied at (0 if d wrote
// nothing). It fails with a *NotLeaderError or ErrNotReady when this node is
// not active, ErrQueueFull when the event queue is full, d's own error,
// ErrOutcomeUnknown when leadership was lost mid-write or the context ended
// while waiting.
func (c *Controller) decide(ctx context.Context, d decision) (uint64, error) {
	l := c.active.Load()
	if l == nil {
		return 0, c.notLeader()
	}
	return l.decide(ctx, d)
}

// Propose commits records as one batch through the active controller's event
// loop and returns the raft index they were applied at. Errors as decide.
func (c *Controller) Propose(ctx context.Context, records ...*keelpb.Record) (uint64, error) {
	return c.decide(ctx, func(*fsm.Image) ([]*keelpb.Record, error) { return records, nil })
}

// commitBatch writes a decision's records to raft, in entries of at most
// MaxEntryBytes where the records allow a cut (splitRecords), and waits
// until the last is applied. It returns the index of the last entry.
func (c *Controller) commitBatch(records ...*keelpb.Record) (uint64, error) {
	entries, err := encodeEntries(splitRecords(records, MaxEntryBytes))
	if err != nil {
		return 0, err
	}
	submitted := time.Now()
	return c.waitEntries(c.submitEntries(entries), submitted)
}

// encodeEntries encodes each part as one raft entry. All are encoded before
// any is submitted, so that a part that does not encode leaves raft
// untouched rather than holding the decision's first parts only.
func encodeEntries(parts [][]*keelpb.Record) ([][]byte, error) {
	entries := make([][]byte, 0, len(parts))
	for _, part := range parts {
		data, err := fsm.EncodeBatch(part...)
		if err != nil {
			return nil, fmt.Errorf("encode batch: %w", err)
		}
		entries = append(entries, data)
	}
	return entries, nil
}

// submitEntries hands each entry to raft, back to back, so that raft writes
// and replicates them together rather than one round trip each.
func (c *Controller) submitEntries(entries [][]byte) []consensus.ApplyFuture {
	futures := make([]consensus.ApplyFuture, 0, len(entries))
	for _, data := range entries {
		if fault := c.cfg.submitFault; fault != nil {
			if err := fault(); err != nil {
				futures = append(futures, failedFuture{err})
				continue
			}
		}
		futures = append(futures, c.quorum.Apply(data, c.cfg.ApplyTimeout))
	}
	return futures
}

// failedFuture is an entry submitFault failed.
type failedFuture struct{ err error }

func (f failedFuture) Error() error  { return f.err }
func (f failedFuture) Index() uint64 { return 0 }
func (f failedFuture) Response() any { return nil }

// waitEntries waits for entries handed to raft at submitted and returns the
// index of the last one, or why one failed. Each committed entry's latency
// goes to the commit time histogram.
func (c *Controller) waitEntries(futures []consensus.ApplyFuture, submitted time.Time) (uint64, error) {
	var index uint64
	for _, f := range futures {
		if err := f.Error(); err != nil {
			if outcomeUnknown(err) {
				return 0, fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
			}
			return 0, err
		}
		c.metrics.commitTime.Observe(time.Since(submitted).Seconds())
		if resp, ok := f.Response().(error); ok && resp != nil {
			return 0, fmt.Errorf("%w (at raft index %d): %w", ErrRefused, f.Index(), resp)
		}
		index = f.Index()
	}
	return index, nil
}

// newClusterID is the id the first active controller writes.
func (c *Controller) newClusterID() string {
	if c.cfg.ClusterID != "" {
		return c.cfg.ClusterID
	}
	return uuid.NewString()
}

// AppendNoOp commits a no-op record and returns its index and the epoch of
// the controller that committed it (not whichever is active afterwards).
func (c *Controller) AppendNoOp(ctx context.Context, requestID string) (uint64, int64, error) {
	l := c.active.Load()
	if l == nil {
		return 0, 0, c.notLeader()
	}
	rec := &keelpb.Record{Record: &keelpb.Record_NoOp{NoOp: &keelpb.NoOpRecord{RequestId: requestID}}}
	index, err := l.decide(ctx, func(*fsm.Image) ([]*keelpb.Record, error) { return []*keelpb.Record{rec}, nil })
	return index, l.epoch.Load(), err
}

// NotActiveError is the error a write gets on this node while it is not the
// active controller: a *NotLeaderError with the leader, or ErrNotReady.
func (c *Controller) NotActiveError() error { return c.notLeader() }

// HandOff passes leadership to another voter if this node leads, so that a
// node being stopped on purpose (SIGTERM, a rolling restart) costs the
// cluster a leadership transfer, a few milliseconds, instead of an election
// timeout: to a voter fit to lead, or when none is the one whose log is
// longest (handOn), told to start an election at once. It returns whether
// leadership moved.
func (c *Controller) HandOff() bool {
	if c.quorum == nil || c.quorum.State() != consensus.Leader {
		return false
	}
	start := time.Now()
	hand := func() error { _, err := c.handOn(context.Background(), nil, true); return err }
	// On the event loop when this node is active: every write queued before
	// has committed and none starts until the transfer ends, so the target
	// catches up with a log that has stopped growing (as raft's own
	// transfer stops writes), and takes over at once.
	err := c.onLoop(context.Background(), func(*leadership) error { return hand() })
	if c.active.Load() == nil && errors.Is(err, ErrNotReady) {
		err = hand() // leading, but not active yet: no writes to stop
	}
	if err != nil {
		c.log.Warn("leadership transfer before stopping failed; the others will elect a leader after the election timeout", "err", err)
		return false
	}
	c.log.Info("leadership transferred before stopping", "took", time.Since(start).Round(time.Microsecond))
	return true
}

// ReadImage returns an image that reflects every write acknowledged, by any
// controller, before ReadImage was called: the read-index rule of the Raft
// paper (section 6.4). Only the active controller can answer: its image holds
// everything committed before its epoch record, and every write it has
// acknowledged since. It then confirms that it still leads, as the answer
// to a decision that writes nothing is confirmed (leadership.confirm): the
// read is such a decision, queued behind the writes before it and answered
// once an entry handed to raft after it has committed. So a deposed leader
// which has not noticed yet (paused, partitioned) cannot answer from an
// image a newer leader has moved past. It fails like a write when this
// node is not active, with the not-active error when leadership is lost
// while confirming, and with ErrLeadershipUnconfirmed when ctx ends first.
func (c *Controller) ReadImage(ctx context.Context) (*fsm.Image, error) {
	l := c.active.Load()
	if l == nil {
		return nil, c.notLeader()
	}
	if _, err := l.decide(ctx, readNothing); err != nil {
		if errors.Is(err, ErrOutcomeUnknown) {
			// A read has no outcome to be unsure of: only a leadership
			// it could not confirm.
			why := err
			if ctx.Err() != nil {
				why = ctx.Err()
			}
			return nil, fmt.Errorf("%w: %v", ErrLeadershipUnconfirmed, why)
		}
		return nil, err
	}
	// Applied up to the confirming entry at least: the answerer answers
	// once it has been.
	return c.fsm.Image(), nil
}

// readNothing is a read's decision: nothing to write.
func readNothing(*fsm.Image) ([]*keelpb.Record, error) { return nil, nil }
