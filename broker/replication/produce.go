package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/broker/partlog"
	"github.com/keel-dev/keel/internal/bufpool"
)

// The acks a produce may ask for.
const (
	AcksNone   = 0
	AcksLeader = 1
	AcksAll    = -1
)

// leaderOf finds the replica of topic/partition and checks that this
// broker leads it (at currentLeaderEpoch, when >= 0: KIP-320). It returns
// the replica locked (r.mu): the caller reads the role state it needs under
// the leadership checked, then unlocks it.
func (m *Manager) leaderOf(topic string, partition int32, currentLeaderEpoch int32) (*replica, error) {
	r, err := m.replicaOf(topic, partition)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if err := m.leading(r, topic, partition, currentLeaderEpoch); err != nil {
		r.mu.Unlock()
		return nil, err
	}
	return r, nil
}

// leading checks that this broker leads r (at currentLeaderEpoch, when
// >= 0). The caller holds r.mu.
func (m *Manager) leading(r *replica, topic string, partition int32, currentLeaderEpoch int32) error {
	switch {
	case r.role != broker.RoleLeader:
		return fmt.Errorf("%w: broker %d does not lead %s/%d (leader %d)", kerr.NotLeaderForPartition, m.self, topic, partition, r.leader)
	case currentLeaderEpoch >= 0 && currentLeaderEpoch < r.leaderEpoch:
		return fmt.Errorf("%w: %s/%d: leader epoch %d, the leader is at %d", kerr.FencedLeaderEpoch, topic, partition, currentLeaderEpoch, r.leaderEpoch)
	case currentLeaderEpoch > r.leaderEpoch:
		return fmt.Errorf("%w: %s/%d: leader epoch %d, the leader is at %d", kerr.UnknownLeaderEpoch, topic, partition, currentLeaderEpoch, r.leaderEpoch)
	}
	return nil
}

// replicaOf finds this broker's replica of topic/partition, in any role:
// kerr.NotLeaderForPartition if the partition exists but has no replica
// here, kerr.UnknownTopicOrPartition if it does not exist.
func (m *Manager) replicaOf(topic string, partition int32) (*replica, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	id, ok := m.byName[topic]
	if !ok {
		if _, known := m.img.Load().Topic(topic); known {
			return nil, fmt.Errorf("%w: broker %d holds no replica of %s/%d", kerr.NotLeaderForPartition, m.self, topic, partition)
		}
		return nil, fmt.Errorf("%w: %s/%d", kerr.UnknownTopicOrPartition, topic, partition)
	}
	r, ok := m.replicas[broker.TopicPartition{TopicID: id, Partition: partition}]
	switch {
	case !ok:
		if t, known := m.img.Load().Topic(topic); known && partition >= 0 && partition < t.Partitions {
			return nil, fmt.Errorf("%w: broker %d holds no replica of %s/%d", kerr.NotLeaderForPartition, m.self, topic, partition)
		}
		return nil, fmt.Errorf("%w: %s/%d", kerr.UnknownTopicOrPartition, topic, partition)
	}
	return r, nil
}

// Produce appends one v2 record batch (as the client sent it) to a
// partition this broker leads (Kafka's appendRecords). acks is 0, 1 or -1
// (all). With -1 and an ISR smaller than min.insync.replicas (at most the
// replication factor) it refuses before appending (kerr.NotEnoughReplicas);
// otherwise it appends, and returns once the high watermark passes the
// batch, or kerr.RequestTimedOut when timeout (or ctx) ends first (the batch
// may still commit), or kerr.NotEnoughReplicasAfterAppend if by then the
// ISR is below the minimum, or kerr.NotLeaderForPartition if the leadership
// moved (the batch may or may not survive). An idempotent producer's retry
// of a batch the log holds returns the original base offset, with no
// append. A batch refused by the log: kerr.CorruptMessage,
// kerr.InvalidRecord, kerr.MessageTooLarge, kerr.OutOfOrderSequenceNumber,
// kerr.InvalidProducerEpoch; a log that failed: kerr.KafkaStorageError.
func (m *Manager) Produce(ctx context.Context, topic string, partition int32, batch []byte, acks int16, timeout time.Duration) (broker.ProduceResult, error) {
	res, commit, err := m.ProduceAppend(topic, partition, batch, acks)
	if err != nil || commit == nil {
		return res, err
	}
	return res, commit(ctx, timeout)
}

// ProduceAppend is Produce in two steps: it appends (or refuses) now, and
// with acks=all returns commit, which waits, as Produce does, for the high
// watermark to pass the batch (nil for acks 0 and 1). The Kafka listener
// appends a connection's requests in order and lets their commits overlap.
func (m *Manager) ProduceAppend(topic string, partition int32, batch []byte, acks int16) (broker.ProduceResult, func(ctx context.Context, timeout time.Duration) error, error) {
	if acks != AcksNone && acks != AcksLeader && acks != AcksAll {
		return broker.ProduceResult{}, nil, fmt.Errorf("%w: acks %d (want 0, 1 or -1)", kerr.InvalidRequiredAcks, acks)
	}
	r, err := m.replicaOf(topic, partition)
	if err != nil {
		return broker.ProduceResult{}, nil, err
	}
	// The leadership is checked, and the batch appended, with no role
	// change between (roleMu).
	r.roleMu.RLock()
	r.mu.Lock()
	if err := m.leading(r, topic, partition, -1); err != nil {
		r.mu.Unlock()
		r.roleMu.RUnlock()
		return broker.ProduceResult{}, nil, err
	}
	epoch, gen := r.leaderEpoch, r.gen
	r.mu.Unlock()
	img := m.img.Load()
	p, ok := img.Partition(r.tp.TopicID, r.tp.Partition)
	if !ok {
		r.roleMu.RUnlock()
		return broker.ProduceResult{}, nil, fmt.Errorf("%w: %s/%d", kerr.UnknownTopicOrPartition, topic, partition)
	}
	minISR := effectiveMinISR(img, p)
	if acks == AcksAll && len(p.ISR) < minISR {
		r.roleMu.RUnlock()
		return broker.ProduceResult{}, nil, fmt.Errorf("%w: %s/%d: ISR %v is below min.insync.replicas %d", kerr.NotEnoughReplicas, topic, partition, p.ISR, minISR)
	}
	info, err := r.log.Append(batch, epoch)
	r.roleMu.RUnlock()
	if err != nil {
		return broker.ProduceResult{}, nil, produceError(topic, partition, err)
	}
	if !info.Duplicate {
		m.appended(r)
	}
	res := broker.ProduceResult{BaseOffset: info.FirstOffset, LogStartOffset: r.log.LogStartOffset(), LogAppendTime: -1}
	if acks != AcksAll {
		return res, nil, nil
	}
	return res, func(ctx context.Context, timeout time.Duration) error {
		return m.awaitCommit(ctx, r, gen, info.LastOffset, timeout, topic, partition)
	}, nil
}

// awaitCommit waits for r's high watermark to pass last (Kafka's
// DelayedProduce).
func (m *Manager) awaitCommit(ctx context.Context, r *replica, gen uint64, last int64, timeout time.Duration, topic string, partition int32) error {
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	for {
		r.mu.Lock()
		if r.gen != gen {
			r.mu.Unlock()
			return fmt.Errorf("%w: %s/%d: the leadership moved before offset %d committed", kerr.NotLeaderForPartition, topic, partition, last)
		}
		if r.hw > last {
			r.mu.Unlock()
			img := m.img.Load()
			p, ok := img.Partition(r.tp.TopicID, r.tp.Partition)
			if ok && len(p.ISR) < effectiveMinISR(img, p) {
				return fmt.Errorf("%w: %s/%d: ISR %v is below min.insync.replicas %d", kerr.NotEnoughReplicasAfterAppend, topic, partition, p.ISR, effectiveMinISR(img, p))
			}
			return nil
		}
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-changed:
		case <-expired:
			return fmt.Errorf("%w: %s/%d: offset %d not committed in %v", kerr.RequestTimedOut, topic, partition, last, timeout)
		case <-ctx.Done():
			return fmt.Errorf("%w: %s/%d: offset %d not committed: %v", kerr.RequestTimedOut, topic, partition, last, ctx.Err())
		}
	}
}

// produceError maps the log's refusals to Kafka's codes.
func produceError(topic string, partition int32, err error) error {
	var code *kerr.Error
	switch {
	case errors.Is(err, partlog.ErrCorruptBatch):
		code = kerr.CorruptMessage
	case errors.Is(err, partlog.ErrInvalidBatch):
		code = kerr.InvalidRecord
	case errors.Is(err, partlog.ErrBatchTooLarge):
		code = kerr.MessageTooLarge
	case errors.Is(err, partlog.ErrOutOfOrderSequence):
		code = kerr.OutOfOrderSequenceNumber
	case errors.Is(err, partlog.ErrInvalidProducerEpoch):
		code = kerr.InvalidProducerEpoch
	case errors.Is(err, partlog.ErrStaleLeaderEpoch), errors.Is(err, partlog.ErrClosed):
		code = kerr.NotLeaderForPartition
	default:
		code = kerr.KafkaStorageError
	}
	return fmt.Errorf("%w: %s/%d: %v", code, topic, partition, err)
}

// Fetch reads whole batches for a consumer from a partition this broker
// leads (Kafka's fetchMessages for a consumer): from the batch holding
// offset, up to maxBytes (at least one batch, KIP-74), none ending past
// the high watermark. currentLeaderEpoch, when >= 0, must be the leader's
// (kerr.FencedLeaderEpoch below, kerr.UnknownLeaderEpoch above). An offset
// outside [log start, log end] is kerr.OffsetOutOfRange. At or past the
// high watermark (but not the log end) it waits up to maxWait for the high
// watermark to move, then answers what there is, maybe nothing: as Kafka
// does, because a new leader's high watermark may lag the old leader's for
// a moment, and a consumer that read up to the old one must wait there,
// not be told that its position is gone (franz-go then resets, by time).
// Batches are checked before they are served (checkRead): a damaged one
// is kerr.KafkaStorageError, never served. They are read into a pooled
// buffer of the read's size (FetchResult.Release).
func (m *Manager) Fetch(ctx context.Context, topic string, partition int32, currentLeaderEpoch int32, offset int64, maxBytes int32, maxWait time.Duration) (broker.FetchResult, error) {
	r, err := m.leaderOf(topic, partition, currentLeaderEpoch)
	if err != nil {
		return broker.FetchResult{}, err
	}
	hw, start, leo, changed, gen := r.hw, r.log.LogStartOffset(), r.log.LogEndOffset(), r.changed, r.gen
	r.mu.Unlock()
	if offset < start || offset > max(hw, leo) {
		return broker.FetchResult{}, fmt.Errorf("%w: %s/%d: offset %d is outside [%d, %d]", kerr.OffsetOutOfRange, topic, partition, offset, start, max(hw, leo))
	}
	if offset >= hw && maxWait > 0 {
		waitForChange(ctx, changed, maxWait)
		r.mu.Lock()
		if r.gen != gen {
			r.mu.Unlock()
			return broker.FetchResult{}, fmt.Errorf("%w: broker %d no longer leads %s/%d", kerr.NotLeaderForPartition, m.self, topic, partition)
		}
		hw = r.hw
		r.mu.Unlock()
	}
	if offset >= hw {
		return broker.FetchResult{HighWatermark: hw, LogStartOffset: start}, nil
	}
	res, buf, err := r.log.ReadPooled(offset, max(int(maxBytes), 1), hw)
	switch {
	case errors.Is(err, partlog.ErrOffsetOutOfRange):
		return broker.FetchResult{}, fmt.Errorf("%w: %s/%d: %v", kerr.OffsetOutOfRange, topic, partition, err)
	case errors.Is(err, partlog.ErrClosed):
		return broker.FetchResult{}, fmt.Errorf("%w: %s/%d: the replica stopped", kerr.NotLeaderForPartition, topic, partition)
	case err != nil:
		return broker.FetchResult{}, fmt.Errorf("%w: %s/%d: %v", kerr.KafkaStorageError, topic, partition, err)
	}
	records, err := m.checkRead(r, res.Records)
	if err != nil {
		bufpool.Put(buf)
		return broker.FetchResult{}, fmt.Errorf("%w: %s/%d: %v", kerr.KafkaStorageError, topic, partition, err)
	}
	return broker.FetchResult{Records: records, HighWatermark: hw, LogStartOffset: res.LogStartOffset, Pooled: buf}, nil
}

// Watch calls wake at each change of the replica of topic's partition
// that a Fetch waits for (its log end, high watermark, log start or role,
// and its removal), until stop is called: the Kafka listener's waiting
// fetches watch every partition they read with one goroutine. wake runs
// under the replica's lock and must not block. A partition with no replica
// here is never woken, and its stop does nothing.
func (m *Manager) Watch(topic string, partition int32, wake func()) (stop func()) {
	m.mu.RLock()
	id, named := m.byName[topic]
	r := m.replicas[broker.TopicPartition{TopicID: id, Partition: partition}]
	m.mu.RUnlock()
	if !named || r == nil {
		return func() {}
	}
	w := &wake
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watches == nil {
		r.watches = map[*func()]struct{}{}
	}
	r.watches[w] = struct{}{}
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.watches, w)
	}
}

// The special timestamps of ListOffsets.
const (
	LatestTimestamp   = -1 // the high watermark
	EarliestTimestamp = -2 // the log start
	MaxTimestamp      = -3 // the record with the largest timestamp (KIP-734)
)

// ListOffsets answers a client's ListOffsets for a partition this broker
// leads (Kafka's Partition.fetchOffsetForTimestamp): the earliest offset
// (timestamp -2: the log start) and the latest (-1: the high watermark)
// with the leader epoch; for a timestamp >= 0 the first record stamped at
// or after it (KIP-79), for -3 the first record with the largest
// timestamp (KIP-734), each with its own timestamp and its batch's epoch,
// and only below the high watermark, where a consumer may read. A
// timestamp no record below the high watermark reaches answers offset -1
// (franz-go then starts at the end). A new leader whose high watermark has
// not reached the start of its epoch answers kerr.OffsetNotAvailable for
// the latest, and for a timestamp it finds nothing for (KIP-207: its high
// watermark may still move back for a client). Other negative timestamps:
// kerr.InvalidRequest.
func (m *Manager) ListOffsets(_ context.Context, topic string, partition int32, currentLeaderEpoch int32, timestamp int64) (broker.ListOffsetsResult, error) {
	none := broker.ListOffsetsResult{Offset: -1, Timestamp: -1, LeaderEpoch: -1}
	r, err := m.leaderOf(topic, partition, currentLeaderEpoch)
	if err != nil {
		return none, err
	}
	hw, epochStart, leaderEpoch, l := r.hw, r.epochStart, r.leaderEpoch, r.log
	r.mu.Unlock()
	behind := func() error {
		return fmt.Errorf("%w: %s/%d: the high watermark %d has not reached the leader epoch's start %d",
			kerr.OffsetNotAvailable, topic, partition, hw, epochStart)
	}
	var found partlog.TimestampOffset
	switch {
	case timestamp == EarliestTimestamp:
		return broker.ListOffsetsResult{Offset: l.LogStartOffset(), Timestamp: -1, LeaderEpoch: leaderEpoch}, nil
	case timestamp == LatestTimestamp:
		if hw < epochStart {
			return none, behind()
		}
		return broker.ListOffsetsResult{Offset: hw, Timestamp: -1, LeaderEpoch: leaderEpoch}, nil
	case timestamp == MaxTimestamp:
		found, err = l.MaxTimestampOffset(hw)
	case timestamp >= 0:
		found, err = l.OffsetForTimestamp(timestamp, hw)
	default:
		return none, fmt.Errorf("%w: %s/%d: timestamp %d is neither >= 0 nor one of -1, -2, -3", kerr.InvalidRequest, topic, partition, timestamp)
	}
	switch {
	case errors.Is(err, partlog.ErrClosed):
		return none, fmt.Errorf("%w: %s/%d: the replica stopped", kerr.NotLeaderForPartition, topic, partition)
	case err != nil:
		return none, fmt.Errorf("%w: %s/%d: %v", kerr.KafkaStorageError, topic, partition, err)
	case found.Offset < 0 && hw < epochStart:
		return none, behind()
	}
	return broker.ListOffsetsResult(found), nil
}

// OffsetForLeaderEpoch answers a client's OffsetsForLeaderEpoch for a
// partition this broker leads (Kafka's Partition.lastOffsetForLeaderEpoch,
// KIP-101 and KIP-320): from the leader's epoch cache (partlog's
// EndOffsetFor), the largest epoch at or below leaderEpoch and the offset
// where it ended: the next epoch's start, or the log end for the current
// epoch. An epoch below the log's first answers leaderEpoch and the first
// epoch's start. An epoch above every one in the log, or -1, answers
// (-1, -1) and no error (UNDEFINED_EPOCH_OFFSET). currentLeaderEpoch, when
// >= 0, must be the leader's (kerr.FencedLeaderEpoch below,
// kerr.UnknownLeaderEpoch above); a broker that does not lead the
// partition answers kerr.NotLeaderForPartition, an unknown partition
// kerr.UnknownTopicOrPartition. The role cannot change while it reads.
func (m *Manager) OffsetForLeaderEpoch(_ context.Context, topic string, partition int32, currentLeaderEpoch, leaderEpoch int32) (int64, int32, error) {
	r, err := m.replicaOf(topic, partition)
	if err != nil {
		return -1, -1, err
	}
	// As Kafka holds leaderIsrUpdateLock: no role change, so no
	// truncation, between the leadership check and the read.
	r.roleMu.RLock()
	defer r.roleMu.RUnlock()
	r.mu.Lock()
	err = m.leading(r, topic, partition, currentLeaderEpoch)
	r.mu.Unlock()
	if err != nil {
		return -1, -1, err
	}
	epoch, end := r.log.EndOffsetFor(leaderEpoch)
	if end == partlog.UndefinedOffset {
		return partlog.UndefinedOffset, partlog.UndefinedEpoch, nil
	}
	return end, epoch, nil
}

// waitForChange waits until changed closes (the replica's state moved: its
// high watermark, its log end, its role), d passes, or ctx ends: a fetch
// with nothing to return yet long-polls this way.
func waitForChange(ctx context.Context, changed <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-changed:
	case <-t.C:
	case <-ctx.Done():
	}
}

// LogEnd is the log end offset of a partition this broker leads.
func (m *Manager) LogEnd(topic string, partition int32) (int64, error) {
	r, err := m.leaderOf(topic, partition, -1)
	if err != nil {
		return 0, err
	}
	defer r.mu.Unlock()
	return r.log.LogEndOffset(), nil
}
