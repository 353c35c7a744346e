package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/broker/batchcheck"
	"github.com/keel-dev/keel/broker/group"
)

// offsetsCommitTimeout bounds an Append's wait for its batch to commit
// when its context has no deadline: Kafka's offsets.commit.timeout.ms.
const offsetsCommitTimeout = 5 * time.Second

// loadFetchBytes is how much one read of a Load asks the data plane for.
const loadFetchBytes = 1 << 20

// groupLog is group.Log over the broker's data plane: the group
// coordinator's records go to the __consumer_offsets partitions this
// broker leads as the producers' do, acks=all.
type groupLog struct {
	backend broker.Backend
	now     func() time.Time
}

var _ group.Log = (*groupLog)(nil)

func newGroupLog(b broker.Backend) *groupLog { return &groupLog{backend: b, now: time.Now} }

// NewGroupLog is group.Log over b, the broker's data plane: what Serve
// hands Config.Groups, for a caller that makes its coordinator first
// (broker/node).
func NewGroupLog(b broker.Backend) group.Log { return newGroupLog(b) }

// Append appends records as one uncompressed batch and waits for its
// commit.
func (l *groupLog) Append(ctx context.Context, partition int32, records []group.Record) error {
	if len(records) == 0 {
		return nil
	}
	batch := recordBatch(records, l.now().UnixMilli())
	_, commit, err := l.backend.ProduceAppend(group.OffsetsTopic, partition, batch, -1)
	if err != nil || commit == nil {
		return err
	}
	timeout := offsetsCommitTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	return commit(ctx, timeout)
}

// Load reads partition from its log start up to its log end as of the
// call, once the high watermark has reached it.
func (l *groupLog) Load(ctx context.Context, partition int32, fn func(offset int64, r group.Record) error) error {
	end, err := l.backend.LogEnd(group.OffsetsTopic, partition)
	if err != nil {
		return err
	}
	if err := l.awaitHighWatermark(ctx, partition, end); err != nil {
		return err
	}
	first, err := l.backend.ListOffsets(ctx, group.OffsetsTopic, partition, -1, -2)
	if err != nil {
		return err
	}
	for offset := first.Offset; offset < end; {
		res, err := l.backend.Fetch(ctx, group.OffsetsTopic, partition, -1, offset, loadFetchBytes, 0)
		if err != nil {
			return err
		}
		next, err := eachRecord(res.Records, offset, end, fn)
		if err != nil {
			return err
		}
		if next == offset {
			// The high watermark was past end: only a lost leadership
			// (the log cut) reads nothing here.
			return fmt.Errorf("%w: %s/%d: nothing to read at %d below the log end %d", kerr.NotLeaderForPartition, group.OffsetsTopic, partition, offset, end)
		}
		offset = next
	}
	return nil
}

// awaitHighWatermark waits until partition's high watermark reaches end,
// woken by the data plane's Watch.
func (l *groupLog) awaitHighWatermark(ctx context.Context, partition int32, end int64) error {
	woken := make(chan struct{}, 1)
	stop := l.backend.Watch(group.OffsetsTopic, partition, func() {
		select {
		case woken <- struct{}{}:
		default:
		}
	})
	defer stop()
	// A slow poll besides: Watch wakes on the high watermark's moves, but
	// a leader that has not yet learned its followers' progress moves it
	// only when they fetch.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		res, err := l.backend.ListOffsets(ctx, group.OffsetsTopic, partition, -1, -1)
		switch {
		case err == nil && res.Offset >= end:
			return nil
		case err != nil && !errors.Is(err, kerr.OffsetNotAvailable):
			return err
		}
		select {
		case <-woken:
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// eachRecord calls fn for the records of batches (whole v2 batches, as
// Fetch reads them) at offsets in [from, end), and returns the offset after
// the last batch read. Control batches (transaction markers) hold no group
// state; a compressed batch is refused, as the coordinator writes none.
func eachRecord(batches []byte, from, end int64, fn func(int64, group.Record) error) (int64, error) {
	next := from
	for len(batches) >= 12 {
		size := 12 + int(int32(binary.BigEndian.Uint32(batches[8:])))
		if size > len(batches) || size < batchHeaderSize {
			break // a partial batch at the end of a read
		}
		var b kmsg.RecordBatch
		if err := b.ReadFrom(batches[:size]); err != nil {
			return next, fmt.Errorf("%w: %s: a batch at %d does not parse: %v", kerr.CorruptMessage, group.OffsetsTopic, b.FirstOffset, err)
		}
		batches = batches[size:]
		after := b.FirstOffset + int64(b.LastOffsetDelta) + 1
		next = max(next, after)
		if b.Attributes&0x20 != 0 {
			continue
		}
		if codec := b.Attributes & 0x07; codec != 0 {
			return next, fmt.Errorf("%w: %s: the batch at %d is compressed (codec %d); the group coordinator writes none", kerr.CorruptMessage, group.OffsetsTopic, b.FirstOffset, codec)
		}
		rd := b.Records
		for i := int32(0); i < b.NumRecords; i++ {
			var r kmsg.Record
			n, err := readRecord(rd, &r)
			if err != nil {
				return next, fmt.Errorf("%w: %s: record %d of the batch at %d: %v", kerr.CorruptMessage, group.OffsetsTopic, i, b.FirstOffset, err)
			}
			rd = rd[n:]
			offset := b.FirstOffset + int64(r.OffsetDelta)
			if offset < from || offset >= end {
				continue
			}
			if err := fn(offset, group.Record{Key: r.Key, Value: r.Value}); err != nil {
				return next, err
			}
		}
	}
	return next, nil
}

// readRecord reads one record of a v2 batch's records section: its
// varint length, then the record.
func readRecord(src []byte, r *kmsg.Record) (int, error) {
	length, n := binary.Varint(src)
	if n <= 0 || length < 0 || int64(len(src)-n) < length {
		return 0, errors.New("truncated record")
	}
	if err := r.ReadFrom(src[:n+int(length)]); err != nil {
		return 0, err
	}
	return n + int(length), nil
}

// recordBatch is records as one v2 batch, stamped at nowMs
// (batchcheck.Build).
func recordBatch(records []group.Record, nowMs int64) []byte {
	recs := make([]kmsg.Record, len(records))
	for i, r := range records {
		recs[i] = kmsg.Record{Key: r.Key, Value: r.Value}
	}
	return batchcheck.Build(nowMs, recs)
}
