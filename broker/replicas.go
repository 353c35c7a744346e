package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/clock"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
	"github.com/keel-dev/keel/tlsauth"
)

// Kafka's defaults for the replica manager's timing.
const (
	// DefaultReplicaFetchInterval is how often a follower fetches from its
	// leader (Kafka's replica.fetch.wait.max.ms: an empty fetch waits that
	// long on the leader; here the follower waits it between fetches).
	DefaultReplicaFetchInterval = 500 * time.Millisecond
	// DefaultReplicaLagTimeMax is how long an ISR member may go without
	// catching up before its leader removes it from the ISR (Kafka's
	// replica.lag.time.max.ms).
	DefaultReplicaLagTimeMax = 30 * time.Second
)

// Reasons of the errors BrokerService.Fetch answers, carried as a
// google.rpc.ErrorInfo in rpc.ErrorDomain (read them with rpc.ReasonOf):
// Kafka's fetch error codes. Fetch also answers rpc.ReasonFencedLeaderEpoch
// (FailedPrecondition) for a fetch at an older leader epoch than the
// leader's, the follower then waits for the metadata to catch up, and
// rpc.ReasonUnknownTopicOrPartition (NotFound) for a replica the broker
// does not hold.
const (
	// ReasonUnknownLeaderEpoch: the fetch names a newer leader epoch than
	// the leader has applied; the follower retries.
	ReasonUnknownLeaderEpoch = "UNKNOWN_LEADER_EPOCH"
	// ReasonNotLeaderOrFollower: the broker does not lead the partition, or
	// the fetcher is not one of its replicas.
	ReasonNotLeaderOrFollower = "NOT_LEADER_OR_FOLLOWER"
	// ReasonOffsetOutOfRange: the fetch offset is past the log end.
	ReasonOffsetOutOfRange = "OFFSET_OUT_OF_RANGE"
)

const (
	// alterSenders bounds the AlterPartition requests in flight from one
	// broker; each partition has at most one.
	alterSenders = 4
	// fetchTimeout bounds one fetch.
	fetchTimeout = 5 * time.Second
)

// ReplicaManagerConfig configures a ReplicaManager.
type ReplicaManagerConfig struct {
	// FetchInterval is how often a follower fetches; default
	// DefaultReplicaFetchInterval.
	FetchInterval time.Duration
	// LagTimeMax is how long a follower may go without a fetch at the log
	// end before its leader drops it from the ISR; default
	// DefaultReplicaLagTimeMax. The leader checks every LagTimeMax/2, as
	// Kafka does, so a silent follower leaves after 1 to 1.5 times this.
	LagTimeMax time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// TLS, when set, is the mutual TLS to fetch from leaders with: the
	// broker's own (Config.TLS). Nil is plaintext.
	TLS *tlsauth.Config

	// Tests replace the clock and the connection to a leader.
	clock clock.Clock
	dial  func(addr string) (fetchClient, error)
}

// FetchClient is a follower's connection to its partition leader's
// BrokerService (DialLeader makes one).
type FetchClient interface {
	Fetch(ctx context.Context, req *keelpb.FetchRequest) (*keelpb.FetchResponse, error)
	Close() error
}

// fetchClient is this package's short name for FetchClient.
type fetchClient = FetchClient

// ReplicaManager is the reference broker's data plane: a stand-in for a log
// manager whose logs are all empty, that still behaves as Kafka's replicas
// do towards the controllers. A follower fetches from its leader every
// FetchInterval (one fetcher goroutine per leader broker, started and
// stopped with the roles). A leader serves those fetches at its leader
// epoch, adds a follower that fetched at its log end to the ISR, and drops
// one that has not for LagTimeMax, each through AlterPartition, one request
// in flight per partition; after each it waits for the metadata to show the
// partition's next state before deciding again.
//
// Replicas live in memory only: a restarted reference broker holds nothing,
// so there is nothing stray to reconcile (see Handler).
type ReplicaManager struct {
	NopHandler // for methods added to Handler later

	cfg   ReplicaManagerConfig
	log   *slog.Logger
	clock clock.Clock
	link  Link
	self  int32

	img atomic.Pointer[fsm.Image]

	mu       sync.Mutex // guards the fields below
	replicas map[TopicPartition]*replica
	fetchers map[int32]*fetcher // by leader broker id
	// waiting holds the led partitions whose ISR changes wait for metadata.
	waiting map[TopicPartition]struct{}
	// queue holds the led partitions with an ISR change to send.
	queue []TopicPartition

	wake      chan struct{} // pokes the senders
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// replica is one partition replica on this broker.
type replica struct {
	topic       string
	role        string
	leader      int32
	leaderEpoch int32
	// gen counts role changes, so that the answer to a request sent under
	// one role is not applied under the next.
	gen uint64

	// As leader: since when, each follower's fetches at this leader epoch,
	// and the ISR change in progress.
	since     time.Time
	followers map[int32]*followerState
	alter     alterState
	// sending: an AlterPartition is on the wire. Unlike alter it survives a
	// role change, so a partition never has two.
	sending bool

	// As follower: the fetcher it is in (NoLeader: none), and whether its
	// fetches are failing (logged on change only).
	fetchingFrom int32
	fetchFailing bool
}

type followerState struct {
	fetched      bool // has fetched at this leader epoch
	offset       int64
	lastFetch    time.Time
	lastCaughtUp time.Time // last fetch at the log end
}

// alterState is a led partition's ISR change in progress: queued to be
// sent, or answered and waiting (wait) before another is decided.
type alterState struct {
	queued  bool
	waiting bool
	wait    ISRWait
}

type fetcher struct {
	leader int32
	parts  map[TopicPartition]int32 // the leader epoch to fetch at
	cancel context.CancelFunc
}

// NewReplicaManager returns a replica manager, to be given to the agent as
// Config.DataPlane. It fails on a negative duration.
func NewReplicaManager(cfg ReplicaManagerConfig) (*ReplicaManager, error) {
	switch {
	case cfg.FetchInterval < 0:
		return nil, fmt.Errorf("replica fetch interval %v is negative", cfg.FetchInterval)
	case cfg.LagTimeMax < 0:
		return nil, fmt.Errorf("replica lag time max %v is negative", cfg.LagTimeMax)
	}
	if cfg.FetchInterval == 0 {
		cfg.FetchInterval = DefaultReplicaFetchInterval
	}
	if cfg.LagTimeMax == 0 {
		cfg.LagTimeMax = DefaultReplicaLagTimeMax
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.clock == nil {
		cfg.clock = clock.Wall{}
	}
	if cfg.dial == nil {
		creds := insecure.NewCredentials()
		if cfg.TLS != nil {
			creds = credentials.NewTLS(cfg.TLS.Client(tlsauth.RoleBroker))
		}
		cfg.dial = func(addr string) (fetchClient, error) { return DialLeader(addr, creds) }
	}
	rm := &ReplicaManager{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "replicas"),
		clock:    cfg.clock,
		replicas: map[TopicPartition]*replica{},
		fetchers: map[int32]*fetcher{},
		waiting:  map[TopicPartition]struct{}{},
		wake:     make(chan struct{}, alterSenders),
	}
	rm.img.Store(fsm.Empty())
	return rm, nil
}

// Start links the manager to its agent and starts the ISR senders and the
// lag checks.
func (rm *ReplicaManager) Start(link Link) error {
	if err := rm.attach(link); err != nil {
		return err
	}
	for range alterSenders {
		rm.wg.Add(1)
		go rm.runSender()
	}
	rm.wg.Add(1)
	go rm.runLagChecks()
	return nil
}

// attach is Start without the background work, which tests drive by hand
// (sendOne, checkLag). Fetchers start with the roles either way.
func (rm *ReplicaManager) attach(link Link) error {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if rm.link != nil {
		return errors.New("replica manager already started")
	}
	rm.link, rm.self = link, link.BrokerID()
	rm.ctx, rm.cancel = context.WithCancel(context.Background())
	return nil
}

// Close stops every fetcher and sender and waits for them.
func (rm *ReplicaManager) Close() error {
	rm.closeOnce.Do(func() {
		rm.mu.Lock()
		cancel := rm.cancel
		rm.mu.Unlock()
		if cancel != nil {
			cancel()
		}
		rm.wg.Wait()
	})
	return nil
}

// MetadataChanged keeps the image (for ISRs, epochs and the leaders'
// addresses), and lets the ISR changes that waited for it go on.
func (rm *ReplicaManager) MetadataChanged(_, after *fsm.Image) {
	rm.img.Store(after)
	rm.mu.Lock()
	defer rm.mu.Unlock()
	now := rm.clock.Now()
	for tp := range rm.waiting {
		if r := rm.replicas[tp]; r != nil {
			rm.maybeAlter(tp, r, now)
		}
	}
}

// BecomeLeader starts serving the partition's followers at the new epoch.
// Like Kafka, it counts the ISR members as caught up as of now, so that none
// is dropped before it has had LagTimeMax to fetch from the new leader.
func (rm *ReplicaManager) BecomeLeader(p PartitionState) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	tp := TopicPartition{p.TopicID, p.Partition}
	r := rm.reset(tp, p.Topic)
	now := rm.clock.Now()
	r.role, r.leader, r.leaderEpoch, r.since = RoleLeader, p.Leader, p.LeaderEpoch, now
	r.followers = map[int32]*followerState{}
	for _, id := range p.ISR {
		if id != rm.self {
			r.followers[id] = &followerState{lastCaughtUp: now}
		}
	}
	rm.log.Debug("leading", "topic", p.Topic, "partition", p.Partition, "leader_epoch", p.LeaderEpoch)
	// A recovering partition's leader confirms now, not at the next lag check.
	if img := rm.img.Load(); img != nil {
		if cur, ok := img.Partition(tp.TopicID, tp.Partition); ok && cur.Recovering() {
			rm.maybeAlter(tp, r, now)
		}
	}
}

// BecomeFollower moves the partition to the fetcher of its new leader.
func (rm *ReplicaManager) BecomeFollower(p PartitionState) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	tp := TopicPartition{p.TopicID, p.Partition}
	r := rm.reset(tp, p.Topic)
	r.role, r.leader, r.leaderEpoch = RoleFollower, p.Leader, p.LeaderEpoch
	rm.follow(tp, r)
	rm.log.Debug("following", "topic", p.Topic, "partition", p.Partition, "leader", p.Leader, "leader_epoch", p.LeaderEpoch)
}

// StopReplica stops fetching and leading; with delete the replica is
// forgotten, without it stays listed as stopped.
func (rm *ReplicaManager) StopReplica(topicID fsm.TopicID, partition int32, remove bool) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	tp := TopicPartition{topicID, partition}
	r, ok := rm.replicas[tp]
	if !ok {
		return
	}
	rm.reset(tp, r.topic)
	if remove {
		delete(rm.replicas, tp)
		rm.log.Info("replica deleted", "topic", r.topic, "partition", partition)
		return
	}
	r.role = RoleStopped
}

// reset ends the replica's current role: its fetcher, its followers, its
// ISR change. It returns the replica, new if need be. The caller holds mu.
func (rm *ReplicaManager) reset(tp TopicPartition, topic string) *replica {
	r, ok := rm.replicas[tp]
	if !ok {
		r = &replica{topic: topic, fetchingFrom: fsm.NoLeader}
		rm.replicas[tp] = r
	}
	rm.unfollow(tp, r)
	r.gen++
	r.followers, r.alter, r.fetchFailing = nil, alterState{}, false
	delete(rm.waiting, tp)
	if topic != "" {
		r.topic = topic
	}
	return r
}

// Replicas lists the replicas this broker holds, with each one's ISR and
// partition epoch from the latest image.
func (rm *ReplicaManager) Replicas() []ReplicaStatus {
	img := rm.img.Load()
	rm.mu.Lock()
	out := make([]ReplicaStatus, 0, len(rm.replicas))
	for tp, r := range rm.replicas {
		s := ReplicaStatus{Topic: r.topic, TopicID: tp.TopicID, Partition: tp.Partition, Role: r.role,
			Leader: r.leader, LeaderEpoch: r.leaderEpoch}
		if p, ok := img.Partition(tp.TopicID, tp.Partition); ok {
			s.PartitionEpoch, s.Replicas, s.ISR = p.PartitionEpoch, p.Replicas, p.ISR
		}
		out = append(out, s)
	}
	rm.mu.Unlock()
	sortReplicas(out)
	return out
}

func sortReplicas(rs []ReplicaStatus) {
	slices.SortFunc(rs, func(a, b ReplicaStatus) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
}

// ReplicaFetch serves a follower's fetch as the partition's leader. The log
// is empty, so its end is offset 0 and every fetch at the leader's epoch is
// at the log end: it counts as the follower catching up.
func (rm *ReplicaManager) ReplicaFetch(_ context.Context, req *keelpb.FetchRequest) (*keelpb.FetchResponse, error) {
	id, err := fsm.ParseTopicID(req.GetTopicId())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "topic_id: %v", err)
	}
	if req.GetFetchOffset() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "fetch_offset: %d is negative", req.GetFetchOffset())
	}
	const logEnd = 0
	tp := TopicPartition{id, req.GetPartition()}
	rm.mu.Lock()
	defer rm.mu.Unlock()
	r, ok := rm.replicas[tp]
	if !ok {
		return nil, withReason(codes.NotFound, rpc.ReasonUnknownTopicOrPartition,
			fmt.Sprintf("broker %d holds no replica of %s/%d", rm.self, id, tp.Partition))
	}
	switch e := req.GetLeaderEpoch(); {
	case r.role != RoleLeader:
		return nil, withReason(codes.FailedPrecondition, ReasonNotLeaderOrFollower,
			fmt.Sprintf("broker %d does not lead %s/%d (leader %d)", rm.self, r.topic, tp.Partition, r.leader))
	case e < r.leaderEpoch:
		return nil, withReason(codes.FailedPrecondition, rpc.ReasonFencedLeaderEpoch,
			fmt.Sprintf("%s/%d: fetch at leader epoch %d, the leader is at %d", r.topic, tp.Partition, e, r.leaderEpoch))
	case e > r.leaderEpoch:
		return nil, withReason(codes.FailedPrecondition, ReasonUnknownLeaderEpoch,
			fmt.Sprintf("%s/%d: fetch at leader epoch %d, the leader is still at %d", r.topic, tp.Partition, e, r.leaderEpoch))
	}
	p, ok := rm.img.Load().Partition(id, tp.Partition)
	if !ok || req.GetReplicaId() == rm.self || !slices.Contains(p.Replicas, req.GetReplicaId()) {
		return nil, withReason(codes.FailedPrecondition, ReasonNotLeaderOrFollower,
			fmt.Sprintf("broker %d is not a follower of %s/%d", req.GetReplicaId(), r.topic, tp.Partition))
	}
	if req.GetFetchOffset() > logEnd {
		return nil, withReason(codes.OutOfRange, ReasonOffsetOutOfRange,
			fmt.Sprintf("%s/%d: fetch offset %d is past the log end %d", r.topic, tp.Partition, req.GetFetchOffset(), logEnd))
	}
	now := rm.clock.Now()
	f := r.followers[req.GetReplicaId()]
	if f == nil {
		f = &followerState{}
		r.followers[req.GetReplicaId()] = f
	}
	f.fetched, f.offset, f.lastFetch = true, req.GetFetchOffset(), now
	if f.offset >= logEnd {
		f.lastCaughtUp = now
	}
	rm.maybeAlter(tp, r, now)
	return &keelpb.FetchResponse{LogEndOffset: logEnd, HighWatermark: logEnd}, nil
}

// The leader's ISR management.

// maybeAlter queues an ISR change for a led partition if one is due and
// none is in progress. The caller holds mu.
func (rm *ReplicaManager) maybeAlter(tp TopicPartition, r *replica, now time.Time) {
	if r.role != RoleLeader || r.alter.queued || r.sending {
		return
	}
	img := rm.img.Load()
	p, ok := img.Partition(tp.TopicID, tp.Partition)
	// The image may be a batch ahead of the role calls; they follow at once.
	if !ok || p.Leader != rm.self || p.LeaderEpoch != r.leaderEpoch {
		return
	}
	if r.alter.waiting {
		if !r.alter.wait.Lifted(p, img, now) {
			return
		}
		r.alter = alterState{}
		delete(rm.waiting, tp)
	}
	if rm.desiredISR(p, r, img, now) == nil {
		return
	}
	r.alter.queued = true
	rm.queue = append(rm.queue, tp)
	select {
	case rm.wake <- struct{}{}:
	default:
	}
}

// desiredISR is the ISR the leader wants, or nil when it wants the current
// one: the ISR without members that lag or may not be in it, plus the
// replicas that have caught up and may be. A recovering partition wants an
// AlterPartition even with its ISR unchanged, to confirm its recovery. Nothing is wanted while this
// broker itself may not lead (fenced or in controlled shutdown): the
// controller would refuse, and is moving leadership away anyway.
func (rm *ReplicaManager) desiredISR(p *fsm.Partition, r *replica, img *fsm.Image, now time.Time) []int32 {
	eligible := func(id int32) bool {
		b, ok := img.Broker(id)
		return ok && b.Eligible()
	}
	if !eligible(rm.self) {
		return nil
	}
	isr := make([]int32, 0, len(p.Replicas))
	for _, id := range p.ISR {
		if id == rm.self || (eligible(id) && !rm.lagging(r, id, now)) {
			isr = append(isr, id)
		}
	}
	for _, id := range p.Replicas {
		if id != rm.self && !p.InISR(id) && eligible(id) && rm.caughtUp(r, id, now) {
			isr = append(isr, id)
		}
	}
	if slices.Equal(isr, p.ISR) && !p.Recovering() {
		return nil
	}
	// A leader elected uncleanly leads a RECOVERING partition (KIP-704)
	// until its AlterPartition says RECOVERED, which every one of this data
	// plane's does: its replicas hold no log to recover, so, like Kafka's
	// leaders today, it confirms at once, with the ISR as it is if nothing
	// else changes.
	return isr
}

// lagging: an ISR member has not caught up for LagTimeMax.
func (rm *ReplicaManager) lagging(r *replica, id int32, now time.Time) bool {
	last := r.since
	if f := r.followers[id]; f != nil && f.lastCaughtUp.After(last) {
		last = f.lastCaughtUp
	}
	return now.Sub(last) > rm.cfg.LagTimeMax
}

// caughtUp: a replica outside the ISR has fetched at the log end, at this
// leader epoch, within LagTimeMax.
func (rm *ReplicaManager) caughtUp(r *replica, id int32, now time.Time) bool {
	f := r.followers[id]
	return f != nil && f.fetched && !f.lastCaughtUp.IsZero() && now.Sub(f.lastCaughtUp) <= rm.cfg.LagTimeMax
}

// checkLag looks at every led partition: ISR members that fell behind go,
// and changes that waited for a retry time may go on.
func (rm *ReplicaManager) checkLag() {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	now := rm.clock.Now()
	for tp, r := range rm.replicas {
		if r.role == RoleLeader {
			rm.maybeAlter(tp, r, now)
		}
	}
}

func (rm *ReplicaManager) runLagChecks() {
	defer rm.wg.Done()
	for {
		select {
		case <-rm.ctx.Done():
			return
		case <-rm.clock.After(max(rm.cfg.LagTimeMax/2, time.Millisecond)):
		}
		rm.checkLag()
	}
}

func (rm *ReplicaManager) runSender() {
	defer rm.wg.Done()
	for {
		for rm.ctx.Err() == nil && rm.sendOne(rm.ctx) {
		}
		select {
		case <-rm.ctx.Done():
			return
		case <-rm.wake:
		}
	}
}

// sendOne sends the first queued ISR change, decided afresh from the latest
// image, and handles the answer. It reports whether the queue had one.
func (rm *ReplicaManager) sendOne(ctx context.Context) bool {
	rm.mu.Lock()
	if len(rm.queue) == 0 {
		rm.mu.Unlock()
		return false
	}
	tp := rm.queue[0]
	rm.queue = slices.Delete(rm.queue, 0, 1)
	r := rm.replicas[tp]
	if r == nil || !r.alter.queued {
		rm.mu.Unlock()
		return true
	}
	r.alter.queued = false
	img := rm.img.Load()
	p, ok := img.Partition(tp.TopicID, tp.Partition)
	if r.role != RoleLeader || !ok || p.Leader != rm.self || p.LeaderEpoch != r.leaderEpoch {
		rm.mu.Unlock()
		return true
	}
	isr := rm.desiredISR(p, r, img, rm.clock.Now())
	if isr == nil {
		rm.mu.Unlock()
		return true
	}
	change := ISRChange{TopicID: tp.TopicID, Partition: tp.Partition, LeaderEpoch: r.leaderEpoch,
		PartitionEpoch: p.PartitionEpoch, ISR: isr}
	r.sending = true
	gen, sentAt := r.gen, img.Offset
	rm.log.Info("changing ISR", "topic", r.topic, "partition", tp.Partition, "isr", p.ISR, "new_isr", isr,
		"leader_epoch", change.LeaderEpoch, "partition_epoch", change.PartitionEpoch)
	rm.mu.Unlock()

	actx, cancel := context.WithTimeout(ctx, AlterPartitionTimeout)
	desc, err := rm.link.AlterPartition(actx, change)
	cancel()

	rm.mu.Lock()
	defer rm.mu.Unlock()
	r.sending = false
	if rm.replicas[tp] != r || r.gen != gen {
		// The role changed meanwhile; the new role may want a change too.
		if cur := rm.replicas[tp]; cur != nil {
			rm.maybeAlter(tp, cur, rm.clock.Now())
		}
		return true
	}
	rm.answered(tp, r, change, sentAt, desc, err)
	return true
}

// answered makes the leader wait (WaitAfterAlterPartition) for the metadata
// after an AlterPartition. The caller holds mu.
func (rm *ReplicaManager) answered(tp TopicPartition, r *replica, change ISRChange, sentAt uint64, desc *keelpb.PartitionDescription, err error) {
	now := rm.clock.Now()
	log := rm.log.With("topic", r.topic, "partition", tp.Partition, "new_isr", change.ISR,
		"leader_epoch", change.LeaderEpoch, "partition_epoch", change.PartitionEpoch)
	r.alter = alterState{waiting: true, wait: WaitAfterAlterPartition(log, change, sentAt, desc, err, now)}
	rm.waiting[tp] = struct{}{}
	// The image may already show what the answer waits for.
	rm.maybeAlter(tp, r, now)
}

// The follower's fetchers.

// follow puts a follower replica in the fetcher of its leader, starting the
// fetcher if need be. The caller holds mu.
func (rm *ReplicaManager) follow(tp TopicPartition, r *replica) {
	if r.leader == fsm.NoLeader || r.leader == rm.self || rm.ctx == nil {
		return
	}
	f := rm.fetchers[r.leader]
	if f == nil {
		ctx, cancel := context.WithCancel(rm.ctx)
		f = &fetcher{leader: r.leader, parts: map[TopicPartition]int32{}, cancel: cancel}
		rm.fetchers[r.leader] = f
		rm.wg.Add(1)
		go rm.runFetcher(ctx, f)
	}
	f.parts[tp] = r.leaderEpoch
	r.fetchingFrom = r.leader
}

// unfollow takes a replica out of its fetcher, and stops the fetcher when
// it has nothing left to fetch. The caller holds mu.
func (rm *ReplicaManager) unfollow(tp TopicPartition, r *replica) {
	if r.fetchingFrom == fsm.NoLeader {
		return
	}
	if f := rm.fetchers[r.fetchingFrom]; f != nil {
		delete(f.parts, tp)
		if len(f.parts) == 0 {
			f.cancel()
			delete(rm.fetchers, r.fetchingFrom)
		}
	}
	r.fetchingFrom = fsm.NoLeader
}

type fetchWork struct {
	tp    TopicPartition
	epoch int32
}

// runFetcher fetches every partition f follows from f's leader, at once and
// then every FetchInterval, until its context ends.
func (rm *ReplicaManager) runFetcher(ctx context.Context, f *fetcher) {
	defer rm.wg.Done()
	var conn fetchClient
	var addr string
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for {
		rm.mu.Lock()
		work := make([]fetchWork, 0, len(f.parts))
		for tp, epoch := range f.parts {
			work = append(work, fetchWork{tp, epoch})
		}
		rm.mu.Unlock()

		b, ok := rm.img.Load().Broker(f.leader)
		switch {
		case !ok:
			rm.log.Debug("leader not registered; not fetching", "leader", f.leader)
		case b.Address != addr || conn == nil:
			if conn != nil {
				conn.Close()
				conn = nil
			}
			c, err := rm.cfg.dial(b.Address)
			if err != nil {
				rm.log.Warn("cannot connect to leader", "leader", f.leader, "address", b.Address, "err", err)
				break
			}
			conn, addr = c, b.Address
		}
		if conn != nil && ok {
			for _, w := range work {
				if ctx.Err() != nil {
					return
				}
				fctx, cancel := context.WithTimeout(ctx, fetchTimeout)
				_, err := conn.Fetch(fctx, &keelpb.FetchRequest{ReplicaId: rm.self, TopicId: w.tp.TopicID.String(),
					Partition: w.tp.Partition, LeaderEpoch: w.epoch, FetchOffset: 0})
				cancel()
				rm.fetched(w.tp, f.leader, w.epoch, err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-rm.clock.After(rm.cfg.FetchInterval):
		}
	}
}

// fetched notes a fetch's outcome, logging when a follower starts or stops
// failing (a stale epoch is normal for a moment after a leader change: the
// next BecomeFollower brings the new one).
func (rm *ReplicaManager) fetched(tp TopicPartition, leader, epoch int32, err error) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	r := rm.replicas[tp]
	if r == nil || r.role != RoleFollower || r.leader != leader || r.leaderEpoch != epoch {
		return
	}
	switch {
	case err == nil:
		if r.fetchFailing {
			r.fetchFailing = false
			rm.log.Info("fetching from the leader again", "topic", r.topic, "partition", tp.Partition, "leader", leader)
		}
	case !r.fetchFailing:
		r.fetchFailing = true
		rm.log.Info("fetch from the leader failed; retrying", "topic", r.topic, "partition", tp.Partition,
			"leader", leader, "leader_epoch", epoch, "reason", rpc.ReasonOf(err), "err", errorText(err))
	}
}

// withReason builds a status error carrying an ErrorInfo reason.
func withReason(code codes.Code, reason, msg string) error {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: rpc.ErrorDomain}); err == nil {
		return d.Err()
	}
	return st.Err()
}

// grpcFetchClient is a gRPC connection to a leader's BrokerService.
type grpcFetchClient struct {
	cc *grpc.ClientConn
	keelpb.BrokerServiceClient
}

func (c grpcFetchClient) Fetch(ctx context.Context, req *keelpb.FetchRequest) (*keelpb.FetchResponse, error) {
	return c.BrokerServiceClient.Fetch(ctx, req)
}

func (c grpcFetchClient) Close() error { return c.cc.Close() }

// DialLeader connects lazily to a partition leader's BrokerService at addr,
// with creds and opts (a data plane whose fetches carry records raises the
// receive size). Reconnects back off to a second at most (not gRPC's two
// minutes), so a restarted leader is fetched from again within a fetch
// interval or two.
func DialLeader(addr string, creds credentials.TransportCredentials, opts ...grpc.DialOption) (FetchClient, error) {
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           grpcbackoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
	}, append(rpc.PooledDialOptions(), opts...)...)...)
	if err != nil {
		return nil, fmt.Errorf("leader address %q: %w", addr, err)
	}
	return grpcFetchClient{cc: cc, BrokerServiceClient: keelpb.NewBrokerServiceClient(cc)}, nil
}
