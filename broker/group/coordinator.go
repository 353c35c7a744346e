package group

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Config configures a Coordinator; zero values take Kafka's defaults.
type Config struct {
	// Log is where the groups' state is written and loaded from. Required.
	Log    Log
	Logger *slog.Logger
	// Metrics registers the keel_group_* metrics when not nil.
	Metrics prometheus.Registerer
	// InitialRebalanceDelay is how long an empty group's first rebalance
	// waits for more members (group.initial.rebalance.delay.ms, 3s when
	// zero); a negative value waits none, as a flag's 0s means.
	InitialRebalanceDelay time.Duration
	// MinSessionTimeout and MaxSessionTimeout bound a member's session
	// timeout (group.min.session.timeout.ms 6s, group.max.session.timeout.ms 30m).
	MinSessionTimeout, MaxSessionTimeout time.Duration
	// MaxGroupSize bounds a group's members (group.max.size; 0: unbounded).
	MaxGroupSize int
	// OffsetMetadataMaxBytes bounds a commit's metadata
	// (offset.metadata.max.bytes, 4096).
	OffsetMetadataMaxBytes int
	// OffsetsRetention is how long an Empty group's offsets are kept
	// (offsets.retention.minutes, 7 days).
	OffsetsRetention time.Duration

	// now and afterFunc are the clock, for tests.
	now       func() time.Time
	afterFunc func(d time.Duration, f func()) stopper
}

// stopper is a timer: time.AfterFunc's, or a test clock's.
type stopper interface{ Stop() bool }

// Kafka's defaults.
const (
	defaultInitialRebalanceDelay  = 3 * time.Second
	defaultMinSessionTimeout      = 6 * time.Second
	defaultMaxSessionTimeout      = 30 * time.Minute
	defaultOffsetMetadataMaxBytes = 4096
)

// Coordinator is the group coordinator of the __consumer_offsets
// partitions this broker leads. It implements package broker/kafka's
// Groups.
//
// Locks: mu guards the partitions and their group maps; each group has its
// own lock for its state (Kafka's group lock) and a write lock that orders
// its appends, held across Log.Append so that the log's order of a group's
// records is the order in which they are applied in memory. The order is
// mu, then a group's write lock, then its state lock; mu is never held
// across an append.
type Coordinator struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	mu         sync.Mutex
	closed     bool
	partitions int32 // __consumer_offsets's partition count, from Elect
	parts      map[int32]*partition
	expiry     stopper // the next sweep of expired offsets

	// bg counts the loads and background writes that Close waits for.
	bgMu     sync.Mutex
	bgClosed bool
	bg       sync.WaitGroup
}

// partition is one __consumer_offsets partition this broker leads.
type partition struct {
	epoch int32
	// ctx ends when the partition is resigned: its loads and appends stop.
	ctx    context.Context
	cancel context.CancelFunc
	loaded bool
	groups map[string]*group
}

// New makes a Coordinator that leads no partition yet.
func New(cfg Config) (*Coordinator, error) {
	if cfg.Log == nil {
		return nil, errors.New("group: Config.Log is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case cfg.InitialRebalanceDelay == 0:
		cfg.InitialRebalanceDelay = defaultInitialRebalanceDelay
	case cfg.InitialRebalanceDelay < 0:
		cfg.InitialRebalanceDelay = 0
	}
	if cfg.MinSessionTimeout == 0 {
		cfg.MinSessionTimeout = defaultMinSessionTimeout
	}
	if cfg.MaxSessionTimeout == 0 {
		cfg.MaxSessionTimeout = defaultMaxSessionTimeout
	}
	if cfg.MinSessionTimeout > cfg.MaxSessionTimeout {
		return nil, fmt.Errorf("group: min session timeout %v is above the max %v", cfg.MinSessionTimeout, cfg.MaxSessionTimeout)
	}
	if cfg.MaxGroupSize < 0 {
		return nil, fmt.Errorf("group: max group size %d is negative", cfg.MaxGroupSize)
	}
	if cfg.OffsetMetadataMaxBytes == 0 {
		cfg.OffsetMetadataMaxBytes = defaultOffsetMetadataMaxBytes
	}
	if cfg.OffsetsRetention < 0 {
		return nil, fmt.Errorf("group: offsets retention %v is negative", cfg.OffsetsRetention)
	}
	if cfg.OffsetsRetention == 0 {
		cfg.OffsetsRetention = defaultOffsetsRetention
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.afterFunc == nil {
		cfg.afterFunc = func(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }
	}
	c := &Coordinator{cfg: cfg, log: cfg.Logger, parts: make(map[int32]*partition)}
	m, err := newMetrics(c, cfg.Metrics)
	if err != nil {
		return nil, err
	}
	c.metrics = m
	c.armExpiry()
	return c, nil
}

// Elect tells the coordinator that this broker leads partition of
// partitions in leaderEpoch: it loads the partition's groups in the
// background (COORDINATOR_LOAD_IN_PROGRESS for them meanwhile). An Elect
// of the epoch already loaded or loading changes nothing; a newer epoch
// drops the partition's groups and loads them again, since another leader
// may have written in between.
func (c *Coordinator) Elect(p, leaderEpoch, partitions int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || partitions <= 0 || p < 0 || p >= partitions {
		return
	}
	c.partitions = partitions
	if old := c.parts[p]; old != nil {
		if leaderEpoch <= old.epoch {
			return
		}
		c.dropLocked(p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	part := &partition{epoch: leaderEpoch, ctx: ctx, cancel: cancel, groups: make(map[string]*group)}
	c.parts[p] = part
	c.background(func() { c.load(p, part) })
}

// Resign tells the coordinator that this broker no longer leads p: its
// groups are dropped, and every request waiting on one of them is answered
// NOT_COORDINATOR, so that its client finds the new coordinator.
func (c *Coordinator) Resign(p int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked(p)
}

// Close resigns every partition and waits for the loads to stop.
func (c *Coordinator) Close() {
	c.mu.Lock()
	c.closed = true
	c.expiry.Stop()
	for p := range c.parts {
		c.dropLocked(p)
	}
	c.mu.Unlock()
	c.bgMu.Lock()
	c.bgClosed = true
	c.bgMu.Unlock()
	c.bg.Wait()
}

func (c *Coordinator) dropLocked(p int32) {
	part := c.parts[p]
	if part == nil {
		return
	}
	delete(c.parts, p)
	part.cancel()
	for _, g := range part.groups {
		g.mu.Lock()
		g.resignLocked()
		g.mu.Unlock()
	}
	c.log.Info("group coordinator resigned a partition", "partition", p, "epoch", part.epoch, "groups", len(part.groups))
}

// lookup finds id's group: code is NOT_COORDINATOR when this broker does
// not lead its partition, COORDINATOR_LOAD_IN_PROGRESS while it loads it.
// A group not known is made (Empty) when create is true, else g is nil.
func (c *Coordinator) lookup(id string, create bool) (g *group, code int16) {
	if id == "" {
		return nil, kerr.InvalidGroupID.Code
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := PartitionFor(id, c.partitions)
	part := c.parts[p]
	if part == nil || c.partitions == 0 {
		return nil, kerr.NotCoordinator.Code
	}
	if !part.loaded {
		return nil, kerr.CoordinatorLoadInProgress.Code
	}
	g = part.groups[id]
	if g == nil && create {
		g = c.newGroup(id, p, part)
		part.groups[id] = g
	}
	return g, 0
}

// existing finds a known group: code is lookup's, or missing when the
// group is not known.
func (c *Coordinator) existing(id string, missing int16) (*group, int16) {
	g, code := c.lookup(id, false)
	if code == 0 && g == nil {
		code = missing
	}
	return g, code
}

// forget removes a deleted group from its partition's map, if it is still
// the one there.
func (c *Coordinator) forget(g *group) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if part := c.parts[g.partition]; part != nil && part.groups[g.id] == g {
		delete(part.groups, g.id)
	}
}

// dropIfUnused forgets g when it holds nothing: no members, pending member
// ids, offsets or generation, as a group that a refused join or commit
// made is left, so that lists do not show it.
func (c *Coordinator) dropIfUnused(g *group) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != stateEmpty || len(g.members) > 0 || len(g.pending) > 0 || len(g.offsets) > 0 || g.generation > 0 {
		return
	}
	if part := c.parts[g.partition]; part != nil && part.groups[g.id] == g {
		delete(part.groups, g.id)
		g.transition(stateDead) // a request holding it retries on a new one
	}
}

func (c *Coordinator) newGroup(id string, p int32, part *partition) *group {
	return &group{
		c:         c,
		id:        id,
		partition: p,
		ctx:       part.ctx,
		state:     stateEmpty,
		members:   make(map[string]*member),
		static:    make(map[string]string),
		pending:   make(map[string]stopper),
		offsets:   make(map[topicPartition]offset),
		stateTime: c.cfg.now(),
	}
}

// appendCode maps a Log.Append error to the code a client gets, as Kafka's
// GroupMetadataManager maps a failed append: commit tells whether the
// records were offsets (INVALID_COMMIT_OFFSET_SIZE for a batch too large)
// or a group's metadata (UNKNOWN_SERVER_ERROR).
func appendCode(err error, commit bool) int16 {
	var ke *kerr.Error
	switch {
	case err == nil:
		return 0
	case errors.Is(err, kerr.NotLeaderForPartition), errors.Is(err, kerr.KafkaStorageError):
		return kerr.NotCoordinator.Code
	case errors.Is(err, kerr.NotEnoughReplicas), errors.Is(err, kerr.NotEnoughReplicasAfterAppend),
		errors.Is(err, kerr.RequestTimedOut), errors.Is(err, kerr.UnknownTopicOrPartition),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return kerr.CoordinatorNotAvailable.Code
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge), errors.Is(err, kerr.InvalidFetchSize):
		if commit {
			return kerr.InvalidCommitOffsetSize.Code
		}
		return kerr.UnknownServerError.Code
	case errors.As(err, &ke):
		return ke.Code
	default:
		return kerr.UnknownServerError.Code
	}
}

// appendRecords appends records to g's partition, holding g's write lock
// (the caller's), with a context that also ends when the partition is
// resigned. A resigned partition's append answers NOT_COORDINATOR.
func (g *group) appendRecords(ctx context.Context, records []Record, commit bool) int16 {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(g.ctx, cancel)
	defer stop()
	err := g.c.cfg.Log.Append(ctx, g.partition, records)
	if err == nil {
		return 0
	}
	if g.ctx.Err() != nil {
		return kerr.NotCoordinator.Code
	}
	g.c.log.Warn("group coordinator append failed", "group", g.id, "partition", g.partition, "err", err)
	return appendCode(err, commit)
}
