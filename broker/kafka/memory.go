package kafka

import (
	"cmp"
	"context"
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/keel-dev/keel/broker"
)

type tp struct {
	topic     string
	partition int32
}

// memLog is one partition's log in memory: v2 batches with their base
// offsets from its log start, the idempotent producers' batches seen, by
// (id, base sequence), and each producer's last, and its leader epochs
// with their start offsets (epoch 0 from offset 0 until a test says
// otherwise).
type memLog struct {
	batches   [][]byte
	bases     []int64
	start     int64
	leo       int64
	seen      map[[2]int64]int64
	producers map[int64]broker.ProducerState
	epochs    []memEpoch
}

// memEpoch is one entry of a memLog's leader epoch cache.
type memEpoch struct {
	epoch int32
	start int64
}

// leaderEpoch is the log's current leader epoch.
func (l *memLog) leaderEpoch() int32 { return l.epochs[len(l.epochs)-1].epoch }

var _ broker.Backend = (*MemoryBackend)(nil)

// MemoryBackend is a broker.Backend that keeps each partition's batches
// in this process's memory: no replication, no durability, no retention, every
// append at once below the high watermark: for tests, and for trying the
// listener without a data plane (keel broker uses broker/replication's).
// It checks a batch's framing but not its CRC; an idempotent batch seen
// before (same producer id and base sequence) answers its first offset.
type MemoryBackend struct {
	mu      sync.Mutex
	logs    map[tp]*memLog
	grew    chan struct{} // closed and replaced on every append
	refuse  map[tp]error  // tests: a partition's answer
	appends atomic.Int64
	// watches: each partition's Watch callbacks.
	watches map[tp]map[*func()]struct{}
}

// NewMemoryBackend returns an empty MemoryBackend.
func NewMemoryBackend() *MemoryBackend {
	return &MemoryBackend{logs: map[tp]*memLog{}, grew: make(chan struct{}), refuse: map[tp]error{}, watches: map[tp]map[*func()]struct{}{}}
}

// Watch calls wake on every append to the partition, new leader epoch or
// refusal set, until stop.
func (b *MemoryBackend) Watch(topic string, partition int32, wake func()) (stop func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := tp{topic, partition}
	if b.watches[k] == nil {
		b.watches[k] = map[*func()]struct{}{}
	}
	w := &wake
	b.watches[k][w] = struct{}{}
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.watches[k], w)
		if len(b.watches[k]) == 0 {
			delete(b.watches, k)
		}
	}
}

// changed wakes the partition's watchers. The caller holds mu.
func (b *MemoryBackend) changed(topic string, p int32) {
	for w := range b.watches[tp{topic, p}] {
		(*w)()
	}
}

// watching is how many watches the backend holds (tests).
func (b *MemoryBackend) watching() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, ws := range b.watches {
		n += len(ws)
	}
	return n
}

// newLeaderEpoch starts leader epoch epoch at the partition's log end, as
// a new leader does; with truncateTo >= 0 the log is first cut to that
// offset, as if the new leader had lacked the records after it (an unclean
// election: the clients' records there are lost). Tests.
func (b *MemoryBackend) newLeaderEpoch(topic string, p int32, epoch int32, truncateTo int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.logLocked(topic, p)
	if truncateTo >= 0 && truncateTo < l.leo {
		i := 0
		for i < len(l.bases) && l.bases[i] < truncateTo {
			i++
		}
		// Whole batches only: truncateTo must be a batch's base offset.
		l.batches, l.bases, l.leo = l.batches[:i], l.bases[:i], truncateTo
		for len(l.epochs) > 1 && l.epochs[len(l.epochs)-1].start >= truncateTo {
			l.epochs = l.epochs[:len(l.epochs)-1]
		}
	}
	l.epochs = append(l.epochs, memEpoch{epoch, l.leo})
	b.changed(topic, p)
}

// setRefusal makes a partition answer err (tests).
func (b *MemoryBackend) setRefusal(topic string, p int32, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refuse[tp{topic, p}] = err
	b.changed(topic, p)
}

func (b *MemoryBackend) logLocked(topic string, p int32) *memLog {
	l := b.logs[tp{topic, p}]
	if l == nil {
		l = &memLog{seen: map[[2]int64]int64{}, producers: map[int64]broker.ProducerState{}, epochs: []memEpoch{{0, 0}}}
		b.logs[tp{topic, p}] = l
	}
	return l
}

// batchHeaderSize is a v2 batch's fixed header (DefaultRecordBatch).
const batchHeaderSize = 61

// ProduceAppend appends batch at the partition's end; with nothing to
// replicate, every batch is committed at once (commit is nil).
func (b *MemoryBackend) ProduceAppend(topic string, partition int32, batch []byte, _ int16) (broker.ProduceResult, func(context.Context, time.Duration) error, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.refuse[tp{topic, partition}]; err != nil {
		return broker.ProduceResult{}, nil, err
	}
	if len(batch) < batchHeaderSize {
		return broker.ProduceResult{}, nil, kerr.CorruptMessage
	}
	l := b.logLocked(topic, partition)
	count := int64(int32(binary.BigEndian.Uint32(batch[23:]))) + 1
	pid, seq := int64(binary.BigEndian.Uint64(batch[43:])), int64(int32(binary.BigEndian.Uint32(batch[53:])))
	if pid >= 0 {
		if off, ok := l.seen[[2]int64{pid, seq}]; ok {
			return broker.ProduceResult{BaseOffset: off, LogAppendTime: -1}, nil, nil
		}
		l.seen[[2]int64{pid, seq}] = l.leo
		l.producers[pid] = broker.ProducerState{ProducerID: pid, ProducerEpoch: int16(binary.BigEndian.Uint16(batch[51:])),
			LastSequence: int32(seq + count - 1), LastTimestamp: max(l.producers[pid].LastTimestamp, batchMaxTimestamp(batch))}
	}
	stored := append([]byte(nil), batch...)
	binary.BigEndian.PutUint64(stored, uint64(l.leo))
	// partitionLeaderEpoch is outside the CRC, as the base offset is.
	binary.BigEndian.PutUint32(stored[12:], uint32(l.leaderEpoch()))
	l.batches, l.bases = append(l.batches, stored), append(l.bases, l.leo)
	base := l.leo
	l.leo += count
	b.appends.Add(1)
	close(b.grew)
	b.grew = make(chan struct{})
	b.changed(topic, partition)
	return broker.ProduceResult{BaseOffset: base, LogAppendTime: -1}, nil, nil
}

// Fetch reads whole batches from the one holding offset. A
// currentLeaderEpoch below the log's (a test started a new one) is fenced,
// even after a wait, as a leader that lost its leadership while a fetch
// waited answers it.
func (b *MemoryBackend) Fetch(ctx context.Context, topic string, partition int32, currentLeaderEpoch int32, offset int64, maxBytes int32, maxWait time.Duration) (broker.FetchResult, error) {
	deadline := time.NewTimer(maxWait)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		if err := b.refuse[tp{topic, partition}]; err != nil {
			b.mu.Unlock()
			return broker.FetchResult{}, err
		}
		l := b.logLocked(topic, partition)
		if currentLeaderEpoch >= 0 && currentLeaderEpoch < l.leaderEpoch() {
			b.mu.Unlock()
			return broker.FetchResult{}, kerr.FencedLeaderEpoch
		}
		if offset < l.start || offset > l.leo {
			b.mu.Unlock()
			return broker.FetchResult{}, kerr.OffsetOutOfRange
		}
		if offset < l.leo || maxWait <= 0 {
			res := broker.FetchResult{HighWatermark: l.leo}
			for i := range l.bases {
				next := l.leo
				if i+1 < len(l.bases) {
					next = l.bases[i+1]
				}
				if next <= offset {
					continue
				}
				if len(res.Records) > 0 && len(res.Records)+len(l.batches[i]) > int(maxBytes) {
					break
				}
				res.Records = append(res.Records, l.batches[i]...)
			}
			b.mu.Unlock()
			return res, nil
		}
		grew := b.grew
		b.mu.Unlock()
		select {
		case <-grew:
		case <-deadline.C:
			maxWait = 0
		case <-ctx.Done():
			return broker.FetchResult{}, ctx.Err()
		}
	}
}

// LogEnd is the partition's log end (its high watermark: every append is
// committed at once).
func (b *MemoryBackend) LogEnd(topic string, partition int32) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.refuse[tp{topic, partition}]; err != nil {
		return 0, err
	}
	return b.logLocked(topic, partition).leo, nil
}

// ListOffsets answers the earliest (0) and latest offsets, and by
// timestamp a batch at a time: the base offset and maxTimestamp of the
// first batch whose maxTimestamp is at or after the timestamp (-3: the
// first batch with the largest), or -1 if none. (broker/partlog finds the
// record itself.)
func (b *MemoryBackend) ListOffsets(_ context.Context, topic string, partition int32, _ int32, timestamp int64) (broker.ListOffsetsResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	none := broker.ListOffsetsResult{Offset: -1, Timestamp: -1, LeaderEpoch: -1}
	if err := b.refuse[tp{topic, partition}]; err != nil {
		return none, err
	}
	l := b.logLocked(topic, partition)
	switch {
	case timestamp == -2:
		return broker.ListOffsetsResult{Offset: l.start, Timestamp: -1, LeaderEpoch: l.leaderEpoch()}, nil
	case timestamp == -1:
		return broker.ListOffsetsResult{Offset: l.leo, Timestamp: -1, LeaderEpoch: l.leaderEpoch()}, nil
	case timestamp == -3:
		timestamp = -1
		for _, batch := range l.batches {
			timestamp = max(timestamp, batchMaxTimestamp(batch))
		}
		if timestamp < 0 {
			return none, nil
		}
	case timestamp < 0:
		return none, kerr.InvalidRequest
	}
	for i, batch := range l.batches {
		if ts := batchMaxTimestamp(batch); ts >= timestamp {
			return broker.ListOffsetsResult{Offset: l.bases[i], Timestamp: ts, LeaderEpoch: l.epochAt(l.bases[i])}, nil
		}
	}
	return none, nil
}

// batchMaxTimestamp is a v2 batch's maxTimestamp.
func batchMaxTimestamp(batch []byte) int64 { return int64(binary.BigEndian.Uint64(batch[35:])) }

// epochAt is the leader epoch holding offset.
func (l *memLog) epochAt(offset int64) int32 {
	e := l.epochs[0].epoch
	for _, x := range l.epochs {
		if x.start <= offset {
			e = x.epoch
		}
	}
	return e
}

// OffsetForLeaderEpoch answers from the partition's epochs (Kafka's
// LeaderEpochFileCache.endOffsetFor), fencing a currentLeaderEpoch that is
// not the log's.
func (b *MemoryBackend) OffsetForLeaderEpoch(_ context.Context, topic string, partition int32, currentLeaderEpoch, leaderEpoch int32) (int64, int32, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.refuse[tp{topic, partition}]; err != nil {
		return -1, -1, err
	}
	l := b.logLocked(topic, partition)
	switch cur := l.leaderEpoch(); {
	case currentLeaderEpoch >= 0 && currentLeaderEpoch < cur:
		return -1, -1, kerr.FencedLeaderEpoch
	case currentLeaderEpoch > cur:
		return -1, -1, kerr.UnknownLeaderEpoch
	}
	switch {
	case leaderEpoch < 0:
		return -1, -1, nil
	case leaderEpoch == l.leaderEpoch():
		return l.leo, leaderEpoch, nil
	}
	for i, e := range l.epochs {
		if e.epoch <= leaderEpoch {
			continue
		}
		// e is the first epoch above the one asked for.
		if i == 0 {
			return e.start, leaderEpoch, nil
		}
		return e.start, l.epochs[i-1].epoch, nil
	}
	return -1, -1, nil
}

// LogDirs lists one dir, "memory", of unknown size, with every partition
// written to, none lagging.
func (b *MemoryBackend) LogDirs() []broker.LogDir {
	b.mu.Lock()
	defer b.mu.Unlock()
	dir := broker.LogDir{Path: "memory", TotalBytes: -1, UsableBytes: -1}
	for k, l := range b.logs {
		var size int64
		for _, batch := range l.batches {
			size += int64(len(batch))
		}
		dir.Replicas = append(dir.Replicas, broker.LogDirReplica{Topic: k.topic, Partition: k.partition, Size: size})
	}
	slices.SortFunc(dir.Replicas, func(a, b broker.LogDirReplica) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return []broker.LogDir{dir}
}

// DeleteRecords moves the partition's log start to offset (-1: its end),
// dropping the batches wholly below it; with no other replica, await
// answers at once.
func (b *MemoryBackend) DeleteRecords(topic string, partition int32, offset int64) (func(context.Context) (int64, error), error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.refuse[tp{topic, partition}]; err != nil {
		return nil, err
	}
	l := b.logLocked(topic, partition)
	if offset == -1 {
		offset = l.leo
	}
	if offset < 0 || offset > l.leo {
		return nil, kerr.OffsetOutOfRange
	}
	if offset > l.start {
		l.start = offset
		i := 0
		for i < len(l.bases) && (i+1 == len(l.bases) && l.leo <= offset || i+1 < len(l.bases) && l.bases[i+1] <= offset) {
			i++ // batch i ends at or below the new start
		}
		l.batches, l.bases = l.batches[i:], l.bases[i:]
		b.changed(topic, partition)
	}
	start := l.start
	return func(context.Context) (int64, error) { return start, nil }, nil
}

// Producers lists the idempotent producers that wrote to the partition.
func (b *MemoryBackend) Producers(topic string, partition int32) ([]broker.ProducerState, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.refuse[tp{topic, partition}]; err != nil {
		return nil, err
	}
	l := b.logLocked(topic, partition)
	out := make([]broker.ProducerState, 0, len(l.producers))
	for _, p := range l.producers {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b broker.ProducerState) int { return cmp.Compare(a.ProducerID, b.ProducerID) })
	return out, nil
}
