package replication

import (
	"errors"
	"io"
	"math"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/bufpool"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// DefaultFetchResponseMaxBytes is Kafka's replica.fetch.response.max.bytes:
// the most bytes of records one fetch session answer carries (but at least
// one batch).
const DefaultFetchResponseMaxBytes = 10 << 20

var _ broker.SessionDataPlane = (*Manager)(nil)

// leaderSession is one follower's fetch session on this leader (Kafka's
// FetchSession, KIP-227): the partitions it fetches, each with the fetch
// state it last sent and what this leader last answered for it.
type leaderSession struct {
	m           *Manager
	from        int32
	brokerEpoch int64
	parts       []*sessionPart
	byTP        map[broker.TopicPartition]int // index in parts
	// next is where the next answer starts reading, so that the budget
	// goes round the partitions.
	next int
	// wake is poked when any of the session's replicas changes.
	wake  chan struct{}
	poke  func()
	w     answerWriter
	reads []sessionRead
	// found are the replicas of the round's partitions, looked up
	// together.
	found []*replica
	// throttled is the shortest time a replica skipped this round
	// waits for the leader quota (0: none skipped).
	throttled time.Duration
}

type sessionPart struct {
	partitionFetch
	// watched is the replica whose changes wake the session.
	watched *replica
	// answered: what this session last answered, which an answer repeats
	// only when it changed.
	answered     bool
	hw, logStart int64
	errReason    string
}

// sessionRead is a partition to read in this round, with what the checks
// found under the replica's mu.
type sessionRead struct {
	sp  *sessionPart
	r   *replica
	hw  int64
	leo int64
}

// ReplicaFetchSession serves one follower's fetch session
// (broker.SessionDataPlane) until the stream ends: see the FetchSession
// RPC. The checks of ReplicaFetch apply to each partition, whose refusal
// is its error in the answer.
func (m *Manager) ReplicaFetchSession(stream broker.FetchSessionStream) error {
	ctx := stream.Context()
	s := &leaderSession{m: m, byTP: map[broker.TopicPartition]int{}, wake: make(chan struct{}, 1)}
	s.poke = func() {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	m.sessionMetrics.open.Inc()
	defer m.sessionMetrics.open.Dec()
	defer s.close()
	// Requests are received beside the answering, so that one arriving
	// ends the long-poll in progress: a partition the follower adds (a
	// leader change) is fetched at once, not after the wait. Each request
	// still gets one answer, in order.
	reqs := make(chan received, 1)
	go func() {
		for {
			req, err := stream.Recv()
			select {
			case reqs <- received{req, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var next *received
	for first := true; ; first = false {
		in := next
		if in == nil {
			select {
			case r := <-reqs:
				in = &r
			case <-ctx.Done():
				return nil
			}
		}
		req, err := in.req, in.err
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return err
		}
		if first {
			if _, ok := m.img.Load().Broker(req.GetReplicaId()); !ok || req.GetReplicaId() == m.self {
				return status.Errorf(codes.FailedPrecondition, "broker %d is not a registered broker this leader can serve", req.GetReplicaId())
			}
			s.from = req.GetReplicaId()
		} else if req.GetReplicaId() != s.from {
			return status.Errorf(codes.InvalidArgument, "replica_id %d; this session is broker %d's", req.GetReplicaId(), s.from)
		}
		s.brokerEpoch = req.GetBrokerEpoch()
		s.apply(req)
		wait := min(time.Duration(req.GetMaxWaitMs())*time.Millisecond, maxFetchWait)
		budget := int(req.GetMaxBytes())
		if budget == 0 {
			budget = m.cfg.FetchResponseMaxBytes
		}
		if next, err = s.answer(stream, wait, budget, reqs); err != nil {
			return err
		}
	}
}

// received is one of a session's requests, or how its stream ended.
type received struct {
	req *keelpb.FetchSessionRequest
	err error
}

// apply takes a request's changes into the session.
func (s *leaderSession) apply(req *keelpb.FetchSessionRequest) {
	for _, k := range req.GetForgotten() {
		s.forget(broker.TopicPartition{TopicID: fsm.TopicID(k.GetTopicId()), Partition: k.GetPartition()})
	}
	for _, p := range req.GetPartitions() {
		pf := partitionFetch{tp: broker.TopicPartition{TopicID: fsm.TopicID(p.GetTopicId()), Partition: p.GetPartition()},
			epoch: p.GetLeaderEpoch(), offset: p.GetFetchOffset(), logStart: p.GetLogStartOffset(), maxBytes: p.GetMaxBytes(), lastFetched: -1}
		if p.LastFetchedEpoch != nil {
			pf.lastFetched = p.GetLastFetchedEpoch()
		}
		if i, ok := s.byTP[pf.tp]; ok {
			s.parts[i].partitionFetch = pf
			continue
		}
		s.byTP[pf.tp] = len(s.parts)
		s.parts = append(s.parts, &sessionPart{partitionFetch: pf})
	}
}

// forget removes a partition from the session.
func (s *leaderSession) forget(tp broker.TopicPartition) {
	i, ok := s.byTP[tp]
	if !ok {
		return
	}
	s.unwatch(s.parts[i])
	last := len(s.parts) - 1
	s.parts[i] = s.parts[last]
	s.byTP[s.parts[i].tp] = i
	s.parts[last] = nil
	s.parts = s.parts[:last]
	delete(s.byTP, tp)
}

func (s *leaderSession) close() {
	for _, sp := range s.parts {
		s.unwatch(sp)
	}
}

func (s *leaderSession) unwatch(sp *sessionPart) {
	if r := sp.watched; r != nil {
		r.mu.Lock()
		delete(r.watches, &s.poke)
		r.mu.Unlock()
		sp.watched = nil
	}
}

// answer sends the session's news, waiting up to wait for some, or until
// the follower's next request arrives on reqs: that request is returned,
// to be served next.
func (s *leaderSession) answer(stream broker.FetchSessionStream, wait time.Duration, budget int, reqs <-chan received) (*received, error) {
	ctx := stream.Context()
	var next *received
	var deadline <-chan time.Time
	for note := true; ; note = false {
		s.build(note, budget)
		if s.w.parts > 0 || wait <= 0 {
			break
		}
		if deadline == nil {
			if s.throttled > 0 {
				wait = min(wait, s.throttled)
			}
			t := time.NewTimer(wait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-s.wake:
			continue
		case r := <-reqs:
			next = &r
		case <-deadline:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		s.build(false, budget)
		break
	}
	metrics := s.m.sessionMetrics
	metrics.answers.Inc()
	metrics.partitions.Observe(float64(s.w.parts))
	metrics.bytes.Add(float64(s.w.bytes))
	return next, stream.SendMsg(answerWire{s.w.finish()})
}

// build makes the answer of one round (in s.w): each partition is checked
// as ReplicaFetch checks it and, with note, counted as fetched at its
// session offset (Kafka's updateFollowerFetchState for every partition of
// the session), which moves high watermarks and ISRs; then the partitions
// behind the log end are read, from s.next round, within budget; the
// answer holds those with records or with a high watermark, log start or
// error other than last answered.
func (s *leaderSession) build(note bool, budget int) {
	m := s.m
	s.w.free()
	s.w.reset()
	// Drained before the checks: a change after them wakes the wait.
	select {
	case <-s.wake:
	default:
	}
	img := m.img.Load()
	s.reads, s.throttled = s.reads[:0], 0
	n := len(s.parts)
	// One look at the replicas for the round; then each replica's own
	// lock, one at a time, for its checks.
	s.found = s.found[:0]
	m.mu.RLock()
	for i := range n {
		s.found = append(s.found, m.replicas[s.parts[(s.next+i)%n].tp])
	}
	m.mu.RUnlock()
	for i, r := range s.found {
		sp := s.parts[(s.next+i)%n]
		if r != sp.watched {
			s.unwatch(sp)
		}
		if r == nil {
			s.addError(sp, notHeld(m.self, sp.tp))
			continue
		}
		r.mu.Lock()
		if sp.watched == nil {
			// Watched before the checks: a change after them wakes the
			// wait.
			if r.watches == nil {
				r.watches = map[*func()]struct{}{}
			}
			r.watches[&s.poke] = struct{}{}
			sp.watched = r
		}
		div, leo, err := m.checkFetch(img, r, s.from, s.brokerEpoch, &sp.partitionFetch)
		switch {
		case err != nil:
			s.addError(sp, err)
		case div != nil:
			// Always answered: the follower truncates and comes back with
			// another fetch state.
			d := partitionData{tp: sp.tp, hw: r.hw, logStart: r.log.LogStartOffset(), logEnd: r.log.LogEndOffset(), diverging: div}
			s.w.add(&d, nil)
			sp.answered, sp.hw, sp.logStart, sp.errReason = true, d.hw, d.logStart, ""
		default:
			if note {
				m.updateFollower(r, s.from, sp.offset, sp.logStart, s.brokerEpoch, leo, img)
			}
			s.reads = append(s.reads, sessionRead{sp: sp, r: r, hw: r.hw, leo: leo})
		}
		r.mu.Unlock()
	}
	clear(s.found)
	if n > 0 {
		s.next = (s.next + 1) % n
	}
	left := budget
	for _, rd := range s.reads {
		sp := rd.sp
		d := partitionData{tp: sp.tp, hw: rd.hw, logStart: rd.r.log.LogStartOffset(), logEnd: rd.leo}
		var buf mem.Buffer
		if sp.offset < rd.leo && left > 0 {
			// A throttled replica over the leader quota gets no records
			// this round (throttle.go); the wait for news ends when the
			// quota allows again.
			if hold := m.leaderThrottled(sp.tp, s.from); hold > 0 {
				if s.throttled == 0 || hold < s.throttled {
					s.throttled = hold
				}
			} else {
				var err error
				buf, err = s.read(&d, sp, rd.r, min(s.maxBytes(sp), left), left == budget)
				if err != nil {
					s.addError(sp, fetchError(rd.r, err))
					continue
				}
				left -= len(d.records)
				m.recordLeaderBytes(sp.tp, s.from, len(d.records))
			}
		}
		if len(d.records) == 0 && sp.answered && sp.errReason == "" && d.hw == sp.hw && d.logStart == sp.logStart {
			continue // no news
		}
		s.w.add(&d, buf)
		sp.answered, sp.hw, sp.logStart, sp.errReason = true, d.hw, d.logStart, ""
	}
}

// maxBytes is a partition's read limit: its fetch's, or the broker's.
func (s *leaderSession) maxBytes(sp *sessionPart) int {
	if sp.maxBytes > 0 {
		return int(sp.maxBytes)
	}
	return int(s.m.cfg.FetchMaxBytes)
}

// read reads sp's batches into d.records, in a pooled buffer sized to the
// read (partlog's ReadPooled: a trickle does not pin a max-bytes buffer),
// which it returns for gRPC to give back once written. Past the answer's
// first records (first false), a read over limit is dropped: the partition
// is read in a later round, when it may come first.
func (s *leaderSession) read(d *partitionData, sp *sessionPart, r *replica, limit int, first bool) (mem.Buffer, error) {
	res, p, err := r.log.ReadPooled(sp.offset, limit, math.MaxInt64)
	if err != nil {
		return nil, err
	}
	d.logStart, d.logEnd = res.LogStartOffset, res.LogEndOffset
	if len(res.Records) == 0 || !first && len(res.Records) > limit {
		bufpool.Put(p)
		return nil, nil
	}
	d.records = res.Records
	*p = res.Records // the pooled buffer's start, its capacity kept
	return mem.NewBuffer(p, bufpool.Pool{}), nil
}

// addError answers a partition's refusal, unless it was the last answer.
func (s *leaderSession) addError(sp *sessionPart, err error) {
	reason := rpc.ReasonOf(err)
	if reason == "" {
		reason = ReasonStorageError
	}
	if sp.answered && sp.errReason == reason {
		return
	}
	st := status.Convert(err)
	e := &keelpb.FetchPartitionError{Code: int32(st.Code()), Reason: reason, Message: st.Message()}
	if reason == ReasonOffsetOutOfRange {
		meta := errorMetadata(err)
		e.LogStartOffset, _ = strconv.ParseInt(meta[metaLogStart], 10, 64)
		e.LogEndOffset, _ = strconv.ParseInt(meta[metaLogEnd], 10, 64)
	}
	s.w.add(&partitionData{tp: sp.tp, err: e}, nil)
	sp.answered, sp.errReason = true, reason
}
