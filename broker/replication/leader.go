package replication

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/broker/partlog"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// Reasons of the errors ReplicaFetch answers (rpc.ReasonOf), beside
// rpc.ReasonFencedLeaderEpoch and rpc.ReasonUnknownTopicOrPartition: Kafka's
// fetch error codes, as package broker names them for every data plane.
const (
	ReasonUnknownLeaderEpoch  = broker.ReasonUnknownLeaderEpoch
	ReasonNotLeaderOrFollower = broker.ReasonNotLeaderOrFollower
	ReasonOffsetOutOfRange    = broker.ReasonOffsetOutOfRange
	// ReasonStorageError: the leader's log failed (KAFKA_STORAGE_ERROR).
	ReasonStorageError = "KAFKA_STORAGE_ERROR"
)

// Metadata keys of an OFFSET_OUT_OF_RANGE answer: the leader's log bounds,
// which the follower moves into (Kafka's handleOutOfRangeError).
const (
	metaLogStart = "log_start_offset"
	metaLogEnd   = "log_end_offset"
)

// maxFetchWait bounds how long a follower's fetch waits on the leader,
// whatever it asks.
const maxFetchWait = 10 * time.Second

// ReplicaFetch serves a follower's fetch as the partition's leader (Kafka's
// fetchMessages for a follower, and Partition.updateFollowerFetchState):
//
//   - refused unless this broker leads the partition at exactly the
//     follower's leader epoch (FENCED_LEADER_EPOCH below, UNKNOWN_LEADER_EPOCH
//     above), the fetcher is one of its other replicas and, when it says its
//     broker epoch, the one the metadata shows (KIP-903);
//   - a follower whose last fetched epoch ends earlier in this log than it
//     says, or than its fetch offset, gets that epoch and its end
//     (diverging_epoch, KIP-320) and nothing else;
//   - otherwise the fetch offset must lie in [log start, log end]
//     (OFFSET_OUT_OF_RANGE, with the bounds); it is the follower's log end,
//     which may move the high watermark and the ISR; the answer holds whole
//     batches from it, waiting up to max_wait_ms for some at the log end.
func (m *Manager) ReplicaFetch(ctx context.Context, req *keelpb.FetchRequest) (*keelpb.FetchResponse, error) {
	id, err := fsm.ParseTopicID(req.GetTopicId())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "topic_id: %v", err)
	}
	pf := partitionFetch{tp: broker.TopicPartition{TopicID: id, Partition: req.GetPartition()}, epoch: req.GetLeaderEpoch(),
		offset: req.GetFetchOffset(), logStart: req.GetLogStartOffset(), lastFetched: -1}
	if req.LastFetchedEpoch != nil {
		pf.lastFetched = req.GetLastFetchedEpoch()
	}
	from := req.GetReplicaId()
	img := m.img.Load()

	r, err := m.fetched(pf.tp)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	div, leo, err := m.checkFetch(img, r, from, req.GetBrokerEpoch(), &pf)
	if err != nil {
		r.mu.Unlock()
		return nil, err
	}
	l := r.log
	resp := &keelpb.FetchResponse{}
	if div != nil {
		resp.DivergingEpoch = div
		resp.HighWatermark, resp.LogEndOffset, resp.LogStartOffset = r.hw, l.LogEndOffset(), l.LogStartOffset()
		r.mu.Unlock()
		return resp, nil
	}
	m.updateFollower(r, from, pf.offset, pf.logStart, req.GetBrokerEpoch(), leo, img)
	changed, gen := r.changed, r.gen
	r.mu.Unlock()

	maxBytes := int(req.GetMaxBytes())
	if maxBytes == 0 {
		maxBytes = int(m.cfg.FetchMaxBytes)
	}
	var res partlog.ReadResult
	throttled := m.leaderThrottled(pf.tp, from)
	if throttled > 0 {
		// Kafka's leader leaves a throttled replica's partition out of
		// its answer while the quota is exceeded (throttle.go).
		m.throttleWait(ctx, true, throttled, min(time.Duration(req.GetMaxWaitMs())*time.Millisecond, maxFetchWait))
		res.LogStartOffset, res.LogEndOffset = l.LogStartOffset(), l.LogEndOffset()
	} else {
		res, err = l.Read(pf.offset, maxBytes)
	}
	if err == nil && len(res.Records) == 0 && req.GetMaxWaitMs() > 0 && throttled == 0 {
		waitForChange(ctx, changed, min(time.Duration(req.GetMaxWaitMs())*time.Millisecond, maxFetchWait))
		r.mu.Lock()
		still := r.gen == gen
		r.mu.Unlock()
		if still {
			res, err = l.Read(pf.offset, maxBytes)
		}
	}
	if err != nil {
		return nil, fetchError(r, err)
	}
	r.mu.Lock()
	resp.HighWatermark = r.hw
	r.mu.Unlock()
	resp.Records, resp.LogStartOffset, resp.LogEndOffset = res.Records, res.LogStartOffset, res.LogEndOffset
	m.recordLeaderBytes(pf.tp, from, len(res.Records))
	return resp, nil
}

// partitionFetch is a follower's fetch of one partition: the unary
// Fetch's, or one partition of a fetch session.
type partitionFetch struct {
	tp     broker.TopicPartition
	epoch  int32
	offset int64
	// lastFetched is the epoch of the follower's last batch, -1 if none.
	lastFetched int32
	logStart    int64
	maxBytes    int32
}

// fetched finds the replica a follower fetches.
func (m *Manager) fetched(tp broker.TopicPartition) (*replica, error) {
	m.mu.RLock()
	r := m.replicas[tp]
	m.mu.RUnlock()
	if r == nil {
		return nil, notHeld(m.self, tp)
	}
	return r, nil
}

// notHeld refuses a fetch of a partition this broker holds no replica of.
func notHeld(self int32, tp broker.TopicPartition) error {
	return withReason(codes.NotFound, rpc.ReasonUnknownTopicOrPartition,
		fmt.Sprintf("broker %d holds no replica of %s/%d", self, tp.TopicID, tp.Partition), nil)
}

// checkFetch applies ReplicaFetch's checks to one partition fetch of r
// from broker from: either where the follower's log diverges (then
// nothing is read) or the leader's log end the fetch offset lies within.
// The caller holds r.mu, and notes the fetch (updateFollower) when it
// reads.
func (m *Manager) checkFetch(img *fsm.Image, r *replica, from int32, brokerEpoch int64, pf *partitionFetch) (*keelpb.EpochEndOffset, int64, error) {
	tp := pf.tp
	if err := m.checkLeader(r, pf.epoch); err != nil {
		return nil, 0, err
	}
	p, ok := img.Partition(tp.TopicID, tp.Partition)
	if !ok || from == m.self || !slices.Contains(p.Replicas, from) {
		return nil, 0, withReason(codes.FailedPrecondition, ReasonNotLeaderOrFollower,
			fmt.Sprintf("broker %d is not a follower of %s/%d", from, r.topic, tp.Partition), nil)
	}
	if brokerEpoch > 0 {
		if b, ok := img.Broker(from); !ok || b.Epoch != brokerEpoch {
			return nil, 0, withReason(codes.FailedPrecondition, ReasonNotLeaderOrFollower,
				fmt.Sprintf("broker %d fetches at broker epoch %d, which this leader's metadata does not show", from, brokerEpoch), nil)
		}
	}
	l := r.log
	if pf.lastFetched >= 0 {
		epoch, end := l.EndOffsetFor(pf.lastFetched)
		if epoch < pf.lastFetched || end < pf.offset {
			return &keelpb.EpochEndOffset{Epoch: epoch, EndOffset: end}, 0, nil
		}
	}
	start, leo := l.LogStartOffset(), l.LogEndOffset()
	if off := pf.offset; off < start || off > leo {
		return nil, 0, withReason(codes.OutOfRange, ReasonOffsetOutOfRange,
			fmt.Sprintf("%s/%d: fetch offset %d is outside the leader's log [%d, %d]", r.topic, tp.Partition, off, start, leo),
			map[string]string{metaLogStart: strconv.FormatInt(start, 10), metaLogEnd: strconv.FormatInt(leo, 10)})
	}
	return nil, leo, nil
}

// checkLeader refuses a request unless this broker leads r at epoch. The
// caller holds r.mu.
func (m *Manager) checkLeader(r *replica, epoch int32) error {
	switch {
	case r.role != broker.RoleLeader:
		return withReason(codes.FailedPrecondition, ReasonNotLeaderOrFollower,
			fmt.Sprintf("broker %d does not lead %s/%d (leader %d)", m.self, r.topic, r.tp.Partition, r.leader), nil)
	case epoch < r.leaderEpoch:
		return withReason(codes.FailedPrecondition, rpc.ReasonFencedLeaderEpoch,
			fmt.Sprintf("%s/%d: fetch at leader epoch %d, the leader is at %d", r.topic, r.tp.Partition, epoch, r.leaderEpoch), nil)
	case epoch > r.leaderEpoch:
		return withReason(codes.FailedPrecondition, ReasonUnknownLeaderEpoch,
			fmt.Sprintf("%s/%d: fetch at leader epoch %d, the leader is still at %d", r.topic, r.tp.Partition, epoch, r.leaderEpoch), nil)
	}
	return nil
}

func fetchError(r *replica, err error) error {
	switch {
	case errors.Is(err, partlog.ErrOffsetOutOfRange):
		return withReason(codes.OutOfRange, ReasonOffsetOutOfRange, err.Error(), nil)
	case errors.Is(err, partlog.ErrClosed):
		return withReason(codes.FailedPrecondition, ReasonNotLeaderOrFollower,
			fmt.Sprintf("%s/%d: the replica stopped", r.topic, r.tp.Partition), nil)
	}
	return withReason(codes.Internal, ReasonStorageError, err.Error(), nil)
}

// updateFollower notes a follower's fetch at offset (its log end), by
// Kafka's rules: it has caught up if it fetched at the leader's log end, or
// at least at the leader's log end of its previous fetch (then as of that
// fetch). Then the high watermark and the ISR may move, and with the
// follower's log start a DeleteRecords waiting for it may finish. The
// caller holds r.mu.
func (m *Manager) updateFollower(r *replica, id int32, offset, logStart, brokerEpoch, leo int64, img *fsm.Image) {
	now := m.clock.Now()
	f := r.followers[id]
	if f == nil {
		f = &follower{leo: -1, logStart: -1, lastFetchLeaderLEO: -1}
		r.followers[id] = f
	}
	switch {
	case offset >= leo:
		f.lastCaughtUp = now
	case f.lastFetchLeaderLEO >= 0 && offset >= f.lastFetchLeaderLEO && f.lastFetch.After(f.lastCaughtUp):
		f.lastCaughtUp = f.lastFetch
	}
	f.fetched, f.leo, f.lastFetchLeaderLEO, f.lastFetch = true, offset, leo, now
	if logStart != f.logStart {
		f.logStart = logStart
		r.notify()
	}
	if brokerEpoch > 0 {
		f.brokerEpoch = brokerEpoch
	}
	m.maybeIncrementHW(r, img)
	m.maybeAlter(r, now)
}

// maximalISR is the committed ISR with the members an ISR change in flight
// adds (KIP-497's maximal ISR): the high watermark waits for them too.
func maximalISR(p *fsm.Partition, r *replica) []int32 {
	isr := p.ISR
	for _, id := range r.inflight {
		if !slices.Contains(isr, id) {
			isr = append(slices.Clone(isr), id)
		}
	}
	return isr
}

// effectiveMinISR is min.insync.replicas, at most the replication factor
// (KRaft's effective min ISR).
func effectiveMinISR(img *fsm.Image, p *fsm.Partition) int {
	t, _ := img.TopicByID(p.TopicID)
	return min(int(img.MinISR(t)), len(p.Replicas))
}

// maybeIncrementHW moves a leader's high watermark up to the smallest log
// end of itself and the maximal ISR, each follower's as fetched at this
// epoch (one not heard from holds it back). It never moves back, and not at
// all while the committed ISR is below min.insync.replicas (KAFKA-15583):
// a replica that leaves the ISR then holds every committed record, which is
// what makes it an eligible leader replica. The caller holds r.mu.
func (m *Manager) maybeIncrementHW(r *replica, img *fsm.Image) {
	if r.role != broker.RoleLeader {
		return
	}
	p, ok := img.Partition(r.tp.TopicID, r.tp.Partition)
	if !ok || p.Leader != m.self || p.LeaderEpoch != r.leaderEpoch {
		return
	}
	if len(p.ISR) < effectiveMinISR(img, p) {
		return
	}
	hw := r.log.LogEndOffset()
	for _, id := range maximalISR(p, r) {
		if id == m.self {
			continue
		}
		f := r.followers[id]
		if f == nil || !f.fetched {
			return
		}
		hw = min(hw, f.leo)
	}
	if hw > r.hw {
		r.hw = hw
		r.notify()
	}
}

// appended tells the leader its log end moved: fetches waiting at the old
// end wake, and a leader alone in its ISR commits.
func (m *Manager) appended(r *replica) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notify()
	m.maybeIncrementHW(r, m.img.Load())
}

// withReason builds a status error carrying an ErrorInfo reason and
// metadata.
func withReason(code codes.Code, reason, msg string, meta map[string]string) error {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: rpc.ErrorDomain, Metadata: meta}); err == nil {
		return d.Err()
	}
	return st.Err()
}

// errorMetadata returns the metadata of err's ErrorInfo.
func errorMetadata(err error) map[string]string {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetMetadata()
		}
	}
	return nil
}
