package replication

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/broker/partlog"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// fetchTimeout bounds one fetch beyond the wait it asks the leader for.
const fetchTimeout = 5 * time.Second

// maxFetchResponseBytes bounds one fetch answer a follower takes: the
// fetch's max bytes and one batch past it (KIP-74).
const maxFetchResponseBytes = 256 << 20

// fetchClient is a follower's connection to its leader.
type fetchClient = broker.FetchClient

// runFollower fetches r from leader at epoch until ctx ends (Kafka's
// AbstractFetcherThread for one partition): each fetch carries the log end
// and the last epoch in the log; the answer's batches are appended, or the
// log truncated where it diverges from the leader's, and the high watermark
// follows the leader's.
func (m *Manager) runFollower(ctx context.Context, r *replica, gen uint64, leader, epoch int32) {
	defer m.wg.Done()
	failures := 0
	for ctx.Err() == nil {
		err := m.fetchOnce(ctx, r, gen, leader, epoch)
		if ctx.Err() != nil {
			return
		}
		m.noteFetch(r, gen, leader, epoch, err)
		if err == nil {
			failures = 0
			continue
		}
		failures++
		select {
		case <-ctx.Done():
			return
		case <-m.clock.After(retryBackoff(err, failures, m.cfg.FetchBackoff)):
		}
	}
}

// leaderLagBackoff is the first pause of a follower whose leader has not
// applied the leadership yet.
const leaderLagBackoff = 25 * time.Millisecond

// retryBackoff is how long a follower pauses after its failures-th failed
// fetch in a row: FetchBackoff (Kafka's replica.fetch.backoff.ms, which
// Kafka's fetcher waits after any error), except when the leader refused
// because it does not lead the partition yet, holds no replica of it yet,
// or is at an older leader epoch. Then the follower is most likely ahead of
// its leader in the metadata both are applying (the leader change that
// made it a follower is on its way to the leader too), and the wait is a
// matter of milliseconds: a full second there would hold every acks=all
// write at the new leader, whose high watermark needs this follower's next
// fetch. So it retries after 25 ms, doubling up to FetchBackoff, which
// bounds a follower that is the one behind.
func retryBackoff(err error, failures int, backoff time.Duration) time.Duration {
	switch rpc.ReasonOf(err) {
	case ReasonNotLeaderOrFollower, ReasonUnknownLeaderEpoch, rpc.ReasonUnknownTopicOrPartition:
		return min(leaderLagBackoff<<min(max(failures-1, 0), 10), backoff)
	}
	return backoff
}

// fetchOnce sends one fetch and applies its answer.
func (m *Manager) fetchOnce(ctx context.Context, r *replica, gen uint64, leader, epoch int32) error {
	if d := m.followerThrottled(r.tp); d > 0 {
		// Kafka's follower does not ask for a throttled replica while
		// the quota is exceeded (throttle.go).
		m.throttleWait(ctx, false, d, m.cfg.FetchMaxWait)
		return nil
	}
	conn, err := m.conn(leader)
	if err != nil {
		return err
	}
	req := &keelpb.FetchRequest{ReplicaId: m.self, BrokerEpoch: m.link.BrokerEpoch(), TopicId: r.tp.TopicID.String(),
		Partition: r.tp.Partition, LeaderEpoch: epoch, FetchOffset: r.log.LogEndOffset(), LogStartOffset: r.log.LogStartOffset(),
		MaxBytes: m.cfg.FetchMaxBytes, MaxWaitMs: int32(m.cfg.FetchMaxWait / time.Millisecond)}
	if last, ok := r.log.LatestEpoch(); ok {
		req.LastFetchedEpoch = &last
	}
	fctx, cancel := context.WithTimeout(ctx, m.cfg.FetchMaxWait+fetchTimeout)
	resp, err := conn.Fetch(fctx, req)
	cancel()
	if err != nil {
		if rpc.ReasonOf(err) == ReasonOffsetOutOfRange {
			return m.outOfRange(r, gen, req.GetFetchOffset(), err)
		}
		return err
	}
	m.recordFollowerBytes(r.tp, len(resp.GetRecords()))
	return m.applyFetch(r, gen, req.GetFetchOffset(), fetchAnswer{hw: resp.GetHighWatermark(), logStart: resp.GetLogStartOffset(),
		records: resp.GetRecords(), diverging: resp.GetDivergingEpoch()})
}

// fetchAnswer is a leader's answer for one partition: a unary Fetch's, or
// one partition of a fetch session's.
type fetchAnswer struct {
	hw, logStart int64
	records      []byte
	diverging    *keelpb.EpochEndOffset
}

// applyFetch applies a leader's answer under the role it was fetched for:
// a diverging epoch truncates the log (KIP-279), batches are appended with
// the leader's offsets and epochs, and the high watermark becomes the
// leader's, at most the log end.
func (m *Manager) applyFetch(r *replica, gen uint64, offset int64, resp fetchAnswer) error {
	r.roleMu.RLock()
	defer r.roleMu.RUnlock()
	if !m.current(r, gen) {
		return nil
	}
	l := r.log
	if d := resp.diverging; d != nil {
		to := truncationOffset(l, d.GetEpoch(), d.GetEndOffset())
		if to < l.LogEndOffset() {
			m.log.Info("truncating a follower's log where it diverges from the leader's", "topic", r.topic, "partition", r.tp.Partition,
				"log_end_offset", l.LogEndOffset(), "truncate_to", to, "leader_epoch", d.GetEpoch(), "leader_epoch_end", d.GetEndOffset())
		}
		// Even at the log end: it drops an epoch this replica led
		// without appending to it, which the leader does not know.
		if err := l.TruncateTo(to); err != nil {
			return fmt.Errorf("truncating to %d: %w", to, err)
		}
		m.followerHW(r, resp.hw)
		return nil
	}
	if records := resp.records; len(records) > 0 {
		if l.LogEndOffset() != offset {
			return nil // the log moved since the fetch was sent
		}
		// Every batch's CRC is checked before it is appended: what
		// comes before a damaged batch is appended, the rest refused,
		// and fetched again.
		n, damaged := partlog.ValidPrefix(records)
		if n > 0 {
			if _, err := l.AppendAsFollower(records[:n]); err != nil {
				return fmt.Errorf("appending the leader's batches at %d: %w", offset, err)
			}
		}
		if damaged != nil {
			m.refusedFromLeader(r, l.LogEndOffset(), damaged)
			return fmt.Errorf("refusing the leader's batches at %d: %w", l.LogEndOffset(), damaged)
		}
	}
	m.followerHW(r, resp.hw)
	return m.followLogStart(r, resp.logStart)
}

// followLogStart moves a follower's log start up to its leader's, at most
// to its own log end (Kafka's follower calls maybeIncrementLogStartOffset
// with the leader's): what DeleteRecords or retention deleted on the leader
// goes here too, and the follower's next fetch tells the leader so. A
// follower whose log ends below the leader's start is answered
// OFFSET_OUT_OF_RANGE by its next fetch, and starts its log there.
func (m *Manager) followLogStart(r *replica, leaderStart int64) error {
	l := r.log
	to := min(leaderStart, l.LogEndOffset())
	if to <= l.LogStartOffset() {
		return nil
	}
	if err := l.DeleteTo(to); err != nil {
		return fmt.Errorf("moving the log start to the leader's %d: %w", to, err)
	}
	m.log.Debug("moved a follower's log start to its leader's", "topic", r.topic, "partition", r.tp.Partition, "log_start_offset", to)
	r.mu.Lock()
	r.notify()
	r.mu.Unlock()
	return nil
}

// truncationOffset is where a follower whose log diverges from its leader's
// cuts it (Kafka's getOffsetTruncationState): the leader ends epoch at end.
// If the follower has that epoch, it keeps what both have: up to the
// smaller end. If it does not, it cuts to the end of its own largest epoch
// below, and the next fetch (with that epoch as its last) goes on from
// there; a follower with no epoch at all cuts to the leader's end.
func truncationOffset(l *partlog.Log, epoch int32, end int64) int64 {
	leo := l.LogEndOffset()
	if epoch < 0 || end < 0 {
		// The leader knows no epoch at or below the follower's: nothing
		// the follower has is known to be the leader's.
		return l.LogStartOffset()
	}
	fe, fend := l.EndOffsetFor(epoch)
	switch {
	case fe < 0 || fend < 0:
		return min(end, leo)
	case fe == epoch:
		return min(end, fend, leo)
	default:
		return min(fend, leo)
	}
}

// outOfRange handles an OFFSET_OUT_OF_RANGE answer (Kafka's
// handleOutOfRangeError): a follower past the leader's log end truncates
// to it; one below its log start starts its log afresh there.
func (m *Manager) outOfRange(r *replica, gen uint64, offset int64, err error) error {
	meta := errorMetadata(err)
	start, err1 := strconv.ParseInt(meta[metaLogStart], 10, 64)
	end, err2 := strconv.ParseInt(meta[metaLogEnd], 10, 64)
	if err1 != nil || err2 != nil {
		return err
	}
	r.roleMu.RLock()
	defer r.roleMu.RUnlock()
	if !m.current(r, gen) || r.log.LogEndOffset() != offset {
		return nil
	}
	switch {
	case offset > end:
		m.log.Warn("follower ahead of its leader's log end; truncating", "topic", r.topic, "partition", r.tp.Partition,
			"log_end_offset", offset, "leader_log_end_offset", end)
		if err := r.log.TruncateTo(end); err != nil {
			return err
		}
	case offset < start:
		m.log.Info("follower behind its leader's log start; starting the log there", "topic", r.topic, "partition", r.tp.Partition,
			"log_end_offset", offset, "leader_log_start_offset", start)
		if err := r.log.TruncateFullyAndStartAt(start); err != nil {
			return err
		}
	default:
		return err
	}
	r.mu.Lock()
	r.hw = min(r.hw, r.log.LogEndOffset())
	r.mu.Unlock()
	return nil
}

// current reports whether r still has the role of generation gen.
func (m *Manager) current(r *replica, gen uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen == gen && r.role == broker.RoleFollower
}

// followerHW sets a follower's high watermark: the leader's, at most its
// own log end (Kafka's follower rule).
func (m *Manager) followerHW(r *replica, leaderHW int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leaderHW = leaderHW
	if hw := min(leaderHW, r.log.LogEndOffset()); hw != r.hw {
		r.hw = hw
		r.notify()
	}
}

// noteFetch logs when a follower starts or stops failing, by what it
// tells an operator (failStreak).
func (m *Manager) noteFetch(r *replica, gen uint64, leader, epoch int32, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen != gen {
		return
	}
	now := m.clock.Now()
	if err == nil {
		if level, d, ok := r.fetchFailing.ok(now); ok {
			m.log.Log(context.Background(), level, "fetching from the leader again", "topic", r.topic, "partition", r.tp.Partition,
				"leader", leader, "failed_for", d.Round(time.Millisecond).String())
		}
		return
	}
	since := r.fetchFailing.since
	level, ok := r.fetchFailing.failed(err, now)
	if !ok {
		return
	}
	msg := err.Error()
	if st, ok := status.FromError(err); ok {
		msg = st.Message()
	}
	args := []any{"topic", r.topic, "partition", r.tp.Partition, "leader", leader, "leader_epoch", epoch, "reason", rpc.ReasonOf(err), "err", msg}
	if !since.IsZero() {
		args = append(args, "failing_for", now.Sub(since).Round(time.Millisecond).String())
	}
	m.log.Log(context.Background(), level, "fetch from the leader failed; retrying", args...)
}

// errLeaderNotRegistered: the metadata names a leader this broker does not
// know yet.
var errLeaderNotRegistered = errors.New("leader is not registered")

// conn returns the connection to leader's current address.
func (m *Manager) conn(leader int32) (fetchClient, error) {
	b, ok := m.img.Load().Broker(leader)
	if !ok {
		return nil, fmt.Errorf("%w: broker %d", errLeaderNotRegistered, leader)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.New("replication: closed")
	}
	if c, ok := m.conns[b.Address]; ok {
		return c, nil
	}
	c, err := m.cfg.dial(b.Address)
	if err != nil {
		return nil, err
	}
	m.conns[b.Address] = c
	return c, nil
}

// dialLeader connects lazily to a leader (broker.DialLeader), with a
// receive size for the largest fetch answer: a batch may be as large as a
// topic's max.message.bytes allows.
func dialLeader(addr string, creds credentials.TransportCredentials, dialer func(context.Context, string) (net.Conn, error)) (fetchClient, error) {
	opts := []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxFetchResponseBytes))}
	if dialer != nil {
		opts = append(opts, grpc.WithContextDialer(dialer))
	}
	return broker.DialLeader(addr, creds, opts...)
}
