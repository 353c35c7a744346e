package kafka

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

type tp struct {
	topic     string
	partition int32
}

// memLog is one partition's log in memory: v2 batches with their base
// offsets, and the idempotent producers' batches seen, by (id, base
// sequence).
type memLog struct {
	batches [][]byte
	bases   []int64
	leo     int64
	seen    map[[2]int64]int64
}

// MemoryBackend is a Backend that keeps each partition's batches in this
// process's memory: no replication, no durability, no retention, every
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
}

// NewMemoryBackend returns an empty MemoryBackend.
func NewMemoryBackend() *MemoryBackend {
	return &MemoryBackend{logs: map[tp]*memLog{}, grew: make(chan struct{}), refuse: map[tp]error{}}
}

// setRefusal makes a partition answer err (tests).
func (b *MemoryBackend) setRefusal(topic string, p int32, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refuse[tp{topic, p}] = err
}

func (b *MemoryBackend) logLocked(topic string, p int32) *memLog {
	l := b.logs[tp{topic, p}]
	if l == nil {
		l = &memLog{seen: map[[2]int64]int64{}}
		b.logs[tp{topic, p}] = l
	}
	return l
}

// Produce appends batch at the partition's end.
func (b *MemoryBackend) Produce(_ context.Context, topic string, partition int32, batch []byte, _ int16, _ time.Duration) (ProduceResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.refuse[tp{topic, partition}]; err != nil {
		return ProduceResult{}, err
	}
	if len(batch) < batchHeaderSize {
		return ProduceResult{}, kerr.CorruptMessage
	}
	l := b.logLocked(topic, partition)
	count := int64(int32(binary.BigEndian.Uint32(batch[23:]))) + 1
	pid, seq := int64(binary.BigEndian.Uint64(batch[43:])), int64(int32(binary.BigEndian.Uint32(batch[53:])))
	if pid >= 0 {
		if off, ok := l.seen[[2]int64{pid, seq}]; ok {
			return ProduceResult{BaseOffset: off, LogAppendTime: -1}, nil
		}
		l.seen[[2]int64{pid, seq}] = l.leo
	}
	stored := append([]byte(nil), batch...)
	binary.BigEndian.PutUint64(stored, uint64(l.leo))
	l.batches, l.bases = append(l.batches, stored), append(l.bases, l.leo)
	base := l.leo
	l.leo += count
	b.appends.Add(1)
	close(b.grew)
	b.grew = make(chan struct{})
	return ProduceResult{BaseOffset: base, LogAppendTime: -1}, nil
}

// Fetch reads whole batches from the one holding offset.
func (b *MemoryBackend) Fetch(ctx context.Context, topic string, partition int32, _ int32, offset int64, maxBytes int32, maxWait time.Duration) (FetchResult, error) {
	deadline := time.NewTimer(maxWait)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		if err := b.refuse[tp{topic, partition}]; err != nil {
			b.mu.Unlock()
			return FetchResult{}, err
		}
		l := b.logLocked(topic, partition)
		if offset < 0 || offset > l.leo {
			b.mu.Unlock()
			return FetchResult{}, kerr.OffsetOutOfRange
		}
		if offset < l.leo || maxWait <= 0 {
			res := FetchResult{HighWatermark: l.leo}
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
			return FetchResult{}, ctx.Err()
		}
	}
}

// ListOffsets answers the earliest (0) and latest offsets.
func (b *MemoryBackend) ListOffsets(_ context.Context, topic string, partition int32, _ int32, timestamp int64) (int64, int32, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.refuse[tp{topic, partition}]; err != nil {
		return 0, 0, err
	}
	switch timestamp {
	case -2:
		return 0, 0, nil
	case -1:
		return b.logLocked(topic, partition).leo, 0, nil
	}
	return 0, 0, kerr.UnsupportedVersion
}
