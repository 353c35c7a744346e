package partlog

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Offsets by timestamp (ListOffsets, KIP-79 and KIP-734). Kafka keeps a
// .timeindex per segment for them; this log keeps only each segment's
// largest batch timestamp, and scans the batch headers of the segment that
// holds the answer (one pread of 61 bytes per batch), reading records only
// in the batch it finds. A lookup of the newest record (-3) under a
// consumer's high watermark also reads the headers of the segment the high
// watermark cuts. Nothing new is written to disk, so recovery, truncation
// and retention need no more than they already do: a segment's largest
// timestamp comes from its headers at open, and again after a truncation.

// attrLogAppendTime is the batch attribute bit of a LogAppendTime topic:
// every record's timestamp is then the batch's maxTimestamp.
const attrLogAppendTime = 0x08

// TimestampOffset is a record found by its timestamp.
type TimestampOffset struct {
	// Offset is the record's offset, -1 if none was found.
	Offset int64
	// Timestamp is the record's timestamp, -1 if none was found.
	Timestamp int64
	// LeaderEpoch is the partition leader epoch of the record's batch, -1
	// if none was found.
	LeaderEpoch int32
}

var noTimestampOffset = TimestampOffset{Offset: -1, Timestamp: -1, LeaderEpoch: -1}

// OffsetForTimestamp returns the first record, in offset order, whose
// timestamp is at or after ts (Kafka's fetchOffsetByTimestamp for a
// timestamp >= 0): the earliest offset a consumer resetting to ts starts
// at. Segments and batches are skipped by their largest timestamp; within
// the batch found, records are read (decompressed if need be) for their
// own timestamps, all of which are the batch's maxTimestamp in a
// LogAppendTime topic. Only records at or after the log start and below
// upTo count (a consumer's lookup passes the high watermark). None found
// is Offset -1, Timestamp -1 and no error: every record below upTo is
// older than ts. ts < 0 is an error (the special values -1, -2 and -3 are
// the caller's).
func (l *Log) OffsetForTimestamp(ts, upTo int64) (TimestampOffset, error) {
	if ts < 0 {
		return noTimestampOffset, fmt.Errorf("partlog: %s: timestamp %d: the special timestamps are not looked up here", l.dir, ts)
	}
	l.rw.RLock()
	defer l.rw.RUnlock()
	segs, start, upTo, err := l.segmentsIn(upTo)
	if err != nil || len(segs) == 0 {
		return noTimestampOffset, err
	}
	// A segment's largest timestamp may be a batch's outside [start,
	// upTo): it lets a segment through that holds no answer, and the scan
	// of that segment finds none.
	return findIn(segs, func(s *segment) int64 { return s.maxTimestamp.Load() }, ts, start, upTo)
}

// MaxTimestampOffset returns the record with the largest timestamp below
// upTo, the first one if several share it (KIP-734, ListOffsets timestamp
// -3). An empty range is Offset -1, Timestamp -1 and no error.
func (l *Log) MaxTimestampOffset(upTo int64) (TimestampOffset, error) {
	l.rw.RLock()
	defer l.rw.RUnlock()
	segs, start, upTo, err := l.segmentsIn(upTo)
	if err != nil || len(segs) == 0 {
		return noTimestampOffset, err
	}
	// Each segment's largest timestamp in [start, upTo): its own for the
	// segments wholly inside, from its headers for one that start or upTo
	// cuts (the active one, under a consumer's high watermark).
	maxes := map[*segment]int64{}
	best := int64(-1)
	for i, s := range segs {
		m := s.maxTimestamp.Load()
		if (i == len(segs)-1 && upTo < l.leo.Load()) || (i == 0 && start > s.base) {
			if m, err = s.maxTimestampIn(start, upTo); err != nil {
				return noTimestampOffset, err
			}
		}
		maxes[s] = m
		best = max(best, m)
	}
	if best < 0 {
		return noTimestampOffset, nil
	}
	return findIn(segs, func(s *segment) int64 { return maxes[s] }, best, start, upTo)
}

// segmentsIn returns the segments that hold offsets in [logStart, upTo),
// the log start, and upTo bounded by the log end. The caller holds l.rw.
func (l *Log) segmentsIn(upTo int64) ([]*segment, int64, int64, error) {
	if l.closed {
		return nil, 0, 0, fmt.Errorf("partlog: %s: %w", l.dir, ErrClosed)
	}
	start := l.logStart.Load()
	upTo = min(upTo, l.leo.Load())
	if start >= upTo {
		return nil, start, upTo, nil
	}
	first := max(sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > start })-1, 0)
	segs := l.segs[first:]
	for len(segs) > 0 && segs[len(segs)-1].base >= upTo {
		segs = segs[:len(segs)-1]
	}
	return segs, start, upTo, nil
}

// findIn scans segs, in order, skipping those whose largest timestamp
// (maxOf) is below ts, for the first record at or after ts with an offset
// in [start, upTo).
func findIn(segs []*segment, maxOf func(*segment) int64, ts, start, upTo int64) (TimestampOffset, error) {
	for _, s := range segs {
		if maxOf(s) < ts {
			continue
		}
		found, ok, err := s.findTimestamp(ts, start, upTo)
		if err != nil || ok {
			return found, err
		}
	}
	return noTimestampOffset, nil
}

// maxTimestampIn is the largest maxTimestamp of the segment's batches
// that hold offsets in [start, upTo) (-1 if none).
func (s *segment) maxTimestampIn(start, upTo int64) (int64, error) {
	size := s.size.Load()
	pos, err := s.find(start, size)
	if err != nil {
		return -1, err
	}
	m := int64(-1)
	for pos < size {
		h, err := s.headerAt(pos, size)
		if err != nil {
			return -1, err
		}
		if h.BaseOffset >= upTo {
			break
		}
		m = max(m, h.MaxTimestamp)
		pos += h.Size()
	}
	return m, nil
}

// findTimestamp scans the segment's batches from the one holding start for
// the first record at or after ts with an offset in [start, upTo).
func (s *segment) findTimestamp(ts, start, upTo int64) (TimestampOffset, bool, error) {
	size := s.size.Load()
	pos, err := s.find(start, size)
	if err != nil {
		return noTimestampOffset, false, err
	}
	for pos < size {
		h, err := s.headerAt(pos, size)
		if err != nil {
			return noTimestampOffset, false, err
		}
		if h.BaseOffset >= upTo {
			break
		}
		if h.MaxTimestamp >= ts {
			b := make([]byte, h.Size())
			if _, err := s.f.ReadAt(b, pos); err != nil {
				return noTimestampOffset, false, fmt.Errorf("partlog: %s: position %d: %w", s.logPath, pos, err)
			}
			off, recTS, ok, err := firstRecordAtOrAfter(b, h, ts, start)
			if err != nil {
				return noTimestampOffset, false, fmt.Errorf("partlog: %s: position %d: %w", s.logPath, pos, err)
			}
			if ok {
				if off >= upTo {
					// Later records have later offsets: none below upTo.
					return noTimestampOffset, true, nil
				}
				epoch := h.PartitionLeaderEpoch
				if epoch < 0 {
					epoch = -1
				}
				return TimestampOffset{Offset: off, Timestamp: recTS, LeaderEpoch: epoch}, true, nil
			}
		}
		pos += h.Size()
	}
	return noTimestampOffset, false, nil
}

// decompressor reads compressed batches' records (gzip, snappy, lz4, zstd).
var decompressor = kgo.DefaultDecompressor()

// firstRecordAtOrAfter returns the offset and timestamp of the first record
// of batch b (header h) whose timestamp is at or after ts and whose offset
// is at or after start.
func firstRecordAtOrAfter(b []byte, h BatchHeader, ts, start int64) (offset, timestamp int64, ok bool, err error) {
	if h.Attributes&attrLogAppendTime != 0 {
		// Every record carries the batch's append time.
		if h.MaxTimestamp < ts {
			return 0, 0, false, nil
		}
		return max(h.BaseOffset, start), h.MaxTimestamp, true, nil
	}
	recs := b[batchHeaderSize:]
	if codec := h.Attributes & attrCodecMask; codec != 0 {
		recs, err = decompressor.Decompress(recs, kgo.CompressionCodecType(codec))
		if err != nil {
			return 0, 0, false, fmt.Errorf("%w: decompressing the records: %v", ErrCorruptBatch, err)
		}
	}
	for i := int32(0); i < h.RecordsCount; i++ {
		length, n := binary.Varint(recs)
		if n <= 0 || length < 0 || int64(len(recs)-n) < length {
			return 0, 0, false, fmt.Errorf("%w: record %d does not fit in the batch", ErrInvalidBatch, i)
		}
		rec := recs[n : int64(n)+length]
		recs = recs[int64(n)+length:]
		if len(rec) < 1 {
			return 0, 0, false, fmt.Errorf("%w: record %d is empty", ErrInvalidBatch, i)
		}
		tsDelta, n1 := binary.Varint(rec[1:]) // after the attributes byte
		if n1 <= 0 {
			return 0, 0, false, fmt.Errorf("%w: record %d: bad timestamp delta", ErrInvalidBatch, i)
		}
		offDelta, n2 := binary.Varint(rec[1+n1:])
		if n2 <= 0 {
			return 0, 0, false, fmt.Errorf("%w: record %d: bad offset delta", ErrInvalidBatch, i)
		}
		recTS, recOff := h.BaseTimestamp+tsDelta, h.BaseOffset+offDelta
		if recTS >= ts && recOff >= start {
			return recOff, recTS, true, nil
		}
	}
	return 0, 0, false, nil
}
