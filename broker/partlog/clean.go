package partlog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"
)

// Log compaction (cleanup.policy=compact): Kafka's log cleaner, for one
// log at a time.
//
// Clean rewrites the sealed segments below an upper bound (the high
// watermark, the active segment, and min.compaction.lag.ms), keeping of
// every key only its newest record there. The records of the segments not
// cleaned yet (dirty: from the cleaned offset on) give the newest offset of
// each key; every segment up to the bound is then rewritten without the
// records a newer one of the same key supersedes. A record is only ever
// removed for a newer one below the high watermark, so a reader from any
// offset still finds every key's newest value, or a newer one. Records
// without a key are kept.
//
// Every batch stays where it was, with its base offset, last offset delta,
// epoch and producer fields: offsets go on batch to batch for followers
// (AppendAsFollower), the index and the producer state (whose last
// sequences the headers carry); only its records, record count, length
// and CRC change, and a batch with no record left is kept empty, as
// Kafka's cleaner keeps one for its producer. Compressed records are
// recompressed with their codec.
//
// Tombstones (a null value) survive the clean that first sees them, so
// that consumers learn of the delete, and go in a later clean once
// DeleteRetention has passed since it: the first clean of a segment sets
// its file's modification time, which later cleans keep (Kafka's
// lastModified-based delete horizon).
//
// A cleaned segment is written beside the original (NNN.log.cleaned,
// fsynced) and renamed over it: a crash leaves the old segment or the new
// one, and Open deletes a leftover .cleaned file; the segment's index is
// removed first and written again after, and Open rebuilds one that is
// missing. The cleaned offset is checkpointed (cleaner-offset-checkpoint,
// Kafka's text format, one offset, replaced whole) after the segments.

const (
	cleanerCheckpointFile = "cleaner-offset-checkpoint"
	cleanedSuffix         = ".cleaned"
)

// Compaction is what Clean keeps by: a compacted topic's configs.
type Compaction struct {
	// DeleteRetention is how long a tombstone stays after the clean that
	// first saw it (delete.retention.ms).
	DeleteRetention time.Duration
	// MinCleanableRatio is the share of the cleanable bytes not cleaned
	// yet at which Clean cleans (min.cleanable.dirty.ratio).
	MinCleanableRatio float64
	// MinLag keeps segments whose newest record is younger than this
	// uncleaned (min.compaction.lag.ms).
	MinLag time.Duration
}

// Cleaned says what a Clean did.
type Cleaned struct {
	// DirtyRatio is the log's dirty ratio before the clean: the bytes of
	// the cleanable segments not cleaned yet over all the cleanable bytes.
	DirtyRatio float64
	// Segments were rewritten; BytesRead of them became BytesWritten.
	Segments                int
	BytesRead, BytesWritten int64
	// RecordsRemoved counts superseded records and expired tombstones.
	RecordsRemoved int64
	// CleanedOffset is the offset below which the log is clean.
	CleanedOffset int64
	// Ran: the dirty ratio reached the minimum, and the log was cleaned
	// (unless Aborted).
	Ran bool
	// Aborted: a truncation, retention or close changed the segments
	// meanwhile; nothing was swapped in from then on, and a later Clean
	// starts again.
	Aborted bool
}

// cleanPlan is what a clean covers.
type cleanPlan struct {
	segs []*segment // sealed, oldest first, each wholly below end
	// dirty[i]: segs[i] ends past firstDirty (read under wmu: a
	// segment's end is the writer's).
	dirty []bool
	// firstDirty: segments ending at or below it were cleaned before.
	firstDirty             int64
	end                    int64 // the cleaned offset once segs are
	cleanBytes, dirtyBytes int64
	gen                    uint64
	// The config a rewritten segment's index is built by.
	indexInterval, maxIndexEntries int64
}

func (p cleanPlan) ratio() float64 {
	if p.dirtyBytes == 0 {
		return 0
	}
	return float64(p.dirtyBytes) / float64(p.cleanBytes+p.dirtyBytes)
}

// plan picks the segments a clean at now may cover: sealed, wholly
// below upTo and below the first segment younger than c.MinLag, not
// wholly below the log start (retention's). The caller holds wmu.
func (l *Log) plan(now time.Time, c Compaction, upTo int64) cleanPlan {
	start := l.logStart.Load()
	p := cleanPlan{firstDirty: max(l.cleaned, start), end: l.cleaned, gen: l.gen,
		indexInterval: l.cfg.IndexIntervalBytes, maxIndexEntries: l.cfg.maxIndexEntries()}
	cutoff := now.Add(-c.MinLag).UnixMilli()
	for _, s := range l.segs[:len(l.segs)-1] {
		if s.next > upTo || (c.MinLag > 0 && s.maxTimestamp.Load() > cutoff) {
			break
		}
		if s.next <= start {
			continue
		}
		p.segs = append(p.segs, s)
		p.dirty = append(p.dirty, s.next > p.firstDirty)
		if s.next > p.firstDirty {
			p.dirtyBytes += s.size.Load()
		} else {
			p.cleanBytes += s.size.Load()
		}
		p.end = s.next
	}
	return p
}

// DirtyRatio is the log's dirty ratio for a clean at now below upTo (see
// Cleaned.DirtyRatio), and the dirty bytes it counts: a cleaner picks the
// dirtiest log first.
func (l *Log) DirtyRatio(now time.Time, c Compaction, upTo int64) (float64, int64) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed || len(l.segs) == 0 {
		return 0, 0
	}
	p := l.plan(now, c, upTo)
	return p.ratio(), p.dirtyBytes
}

// CleanedOffset is the offset below which the log was cleaned.
func (l *Log) CleanedOffset() int64 {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.cleaned
}

// Clean compacts the log (see the top of this file) if its dirty ratio
// reaches c.MinCleanableRatio, never past upTo, the offset below which
// every replica that may lead holds the records (the high watermark). It
// runs beside appends and reads, one Clean at a time per log: readers see
// each segment whole, old or cleaned. An error leaves the segments not
// swapped yet as they were.
func (l *Log) Clean(now time.Time, c Compaction, upTo int64) (Cleaned, error) {
	l.cmu.Lock()
	defer l.cmu.Unlock()
	l.wmu.Lock()
	if err := l.writable(); err != nil {
		l.wmu.Unlock()
		return Cleaned{}, err
	}
	p := l.plan(now, c, upTo)
	l.wmu.Unlock()
	out := Cleaned{DirtyRatio: p.ratio(), CleanedOffset: p.firstDirty}
	if p.dirtyBytes == 0 || out.DirtyRatio < c.MinCleanableRatio {
		return out, nil
	}
	out.Ran = true

	// The newest offset of every key in the dirty segments.
	newest := map[string]int64{}
	for i, s := range p.segs {
		if !p.dirty[i] {
			continue
		}
		err := s.eachBatch(func(b []byte, h BatchHeader) error {
			recs, err := batchRecords(b, h)
			for _, r := range recs {
				if r.key != nil {
					newest[string(r.key)] = r.offset
				}
			}
			return err
		})
		if err != nil {
			return l.cleanFailed(p, out, err)
		}
	}

	for i, s := range p.segs {
		res, err := l.cleanSegment(s, p.dirty[i], p, newest, now, c)
		if err != nil {
			return l.cleanFailed(p, out, err)
		}
		if res.aborted {
			out.Aborted, out.Ran = true, false
			return out, nil
		}
		if res.swapped {
			out.Segments++
			out.BytesRead += res.read
			out.BytesWritten += res.written
			out.RecordsRemoved += res.removed
		}
	}

	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed || l.gen != p.gen {
		out.Aborted, out.Ran = true, false
		return out, nil
	}
	if p.end > l.cleaned {
		if err := l.setCleaned(p.end); err != nil {
			return out, err
		}
	}
	out.CleanedOffset = l.cleaned
	return out, nil
}

// cleanFailed names the log in a clean's error. A log closed meanwhile (a
// stop, a deletion), or segments that went from under the clean (a
// truncation or retention closed and removed their files), is no failure:
// the clean is aborted, and the next starts again.
func (l *Log) cleanFailed(p cleanPlan, out Cleaned, err error) (Cleaned, error) {
	l.wmu.Lock()
	closed, changed := l.closed, l.gen != p.gen
	l.wmu.Unlock()
	out.Ran = false
	if closed || changed {
		out.Aborted = true
		return out, nil
	}
	return out, fmt.Errorf("partlog: %s: cleaning: %w", l.dir, err)
}

type segmentCleaned struct {
	swapped, aborted       bool
	read, written, removed int64
	merged                 int64 // empty batches joined to the one before
}

// cleanSegment writes s without the records newest supersedes (and its
// expired tombstones) beside it, then swaps it in. A segment that loses no
// record, and has no empty batches to join, is left as it is.
func (l *Log) cleanSegment(s *segment, dirty bool, p cleanPlan, newest map[string]int64, now time.Time, c Compaction) (segmentCleaned, error) {
	var res segmentCleaned
	fi, err := os.Stat(s.logPath)
	if err != nil {
		return res, err
	}
	// A dirty segment's tombstones start their DeleteRetention now; a
	// clean one's started at its first clean, its modification time.
	cleanedAt := now
	if !dirty {
		cleanedAt = fi.ModTime()
	}
	dropTombstones := !dirty && !cleanedAt.Add(c.DeleteRetention).After(now)

	tmp := s.logPath + cleanedSuffix
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return res, err
	}
	keepFile := false
	defer func() {
		if !keepFile {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	var (
		pos, since int64
		next       = s.base
		maxTS      = int64(-1)
		index      []indexEntry
		buf        []byte
		kept       []record
		// pending is an empty batch not written yet: the empty batches
		// right after it, of no producer, in the same leader epoch, join
		// it, one header for all their offsets (Kafka's cleaner drops
		// them and leaves a gap, which a follower here refuses).
		pending []byte
	)
	emit := func(out []byte) error {
		h := parseHeader(out)
		if since > p.indexInterval {
			index = append(index, indexEntry{offset: h.BaseOffset, pos: pos})
			since = 0
		}
		if _, err := w.Write(out); err != nil {
			return err
		}
		pos += int64(len(out))
		since += int64(len(out))
		next = h.NextOffset()
		maxTS = max(maxTS, h.MaxTimestamp)
		return nil
	}
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		stampCRC(pending)
		err := emit(pending)
		pending = pending[:0]
		return err
	}
	err = s.eachBatch(func(b []byte, h BatchHeader) error {
		res.read += int64(len(b))
		recs, err := batchRecords(b, h)
		if err != nil {
			return err
		}
		kept = kept[:0]
		for _, r := range recs {
			n, ok := newest[string(r.key)]
			switch {
			case r.key != nil && ok && n > r.offset: // superseded
			case r.tombstone && dropTombstones:
			default:
				kept = append(kept, r)
				continue
			}
			res.removed++
		}
		out := b
		if len(kept) < len(recs) {
			if buf, err = rebuildBatch(buf[:0], b, h, kept); err != nil {
				return err
			}
			out = buf
		}
		if len(kept) > 0 || h.Idempotent() {
			if err := flush(); err != nil {
				return err
			}
			return emit(out)
		}
		if len(pending) > 0 {
			ph := parseHeader(pending)
			if ph.PartitionLeaderEpoch == h.PartitionLeaderEpoch && ph.Attributes == h.Attributes&^attrCodecMask &&
				h.LastOffset()-ph.BaseOffset <= math.MaxInt32 {
				binary.BigEndian.PutUint32(pending[23:], uint32(h.LastOffset()-ph.BaseOffset))
				binary.BigEndian.PutUint64(pending[35:], uint64(max(ph.MaxTimestamp, h.MaxTimestamp)))
				res.merged++
				return nil
			}
		}
		if err := flush(); err != nil {
			return err
		}
		pending = append(pending, out...)
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		return res, err
	}
	if res.removed == 0 && res.merged == 0 {
		if dirty {
			// Nothing to remove, but its tombstones' time starts now.
			return res, os.Chtimes(s.logPath, now, now)
		}
		return res, nil
	}
	res.written = pos
	if err := f.Sync(); err != nil {
		return res, fmt.Errorf("%s: fsync: %w", tmp, err)
	}
	idx, err := openIndex(l.path(segmentName(s.base, indexSuffix)+cleanedSuffix), s.base, p.maxIndexEntries)
	if err != nil {
		return res, err
	}
	if err = idx.reset(index); err == nil {
		err = idx.f.Sync()
	}
	if err != nil {
		_ = idx.f.Close()
		_ = os.Remove(idx.path)
		return res, err
	}
	ns := &segment{base: s.base, logPath: s.logPath, f: f, idx: idx, next: next}
	ns.size.Store(pos)
	ns.maxTimestamp.Store(maxTS)
	swapped, err := l.swap(s, ns, tmp, p.gen, cleanedAt)
	if swapped {
		keepFile = true
	} else {
		_ = idx.f.Close()
		_ = os.Remove(idx.path)
	}
	res.swapped, res.aborted = swapped, !swapped && err == nil
	return res, err
}

// swap puts ns, written at tmp, in place of s, unless the segments were
// cut or removed since the plan, generation gen (then it returns false and
// no error). The old index goes
// first, then the new log is renamed over the old, then its index into
// place: a crash between leaves a segment with no index, which Open
// rebuilds.
func (l *Log) swap(s, ns *segment, tmp string, gen uint64, modTime time.Time) (bool, error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	i := slices.Index(l.segs, s)
	if l.closed || l.failed != nil || l.gen != gen || i < 0 || i == len(l.segs)-1 {
		return false, nil
	}
	l.rw.Lock()
	defer l.rw.Unlock()
	idxPath := s.idx.path
	if err := os.Remove(idxPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	// The old index is gone on disk before the new log is there: never
	// the one with the other.
	if err := syncDir(l.dir); err != nil {
		return false, err
	}
	if err := os.Rename(tmp, s.logPath); err != nil {
		// The old segment stays, its index open though unlinked: Open
		// rebuilds it.
		return false, err
	}
	err := os.Rename(ns.idx.path, idxPath)
	if err == nil {
		ns.idx.path = idxPath
		err = syncDir(l.dir)
	}
	// The log file is the new one from here, whatever failed after.
	_ = os.Chtimes(s.logPath, modTime, modTime)
	segs := slices.Clone(l.segs)
	segs[i] = ns
	l.segs = segs
	return true, errors.Join(err, s.close())
}

// eachBatch calls f with every batch of the sealed segment s, in order.
// The slice is reused: f must not keep it.
func (s *segment) eachBatch(f func(b []byte, h BatchHeader) error) error {
	size := s.size.Load()
	r := bufio.NewReaderSize(io.NewSectionReader(s.f, 0, size), 1<<20)
	var buf []byte
	for pos := int64(0); pos < size; {
		hb, err := r.Peek(batchHeaderSize)
		if err != nil {
			return fmt.Errorf("%s: position %d: %w", s.logPath, pos, err)
		}
		h := parseHeader(hb)
		if h.Length < minBatchLength || pos+h.Size() > size {
			return fmt.Errorf("%s: position %d: a batch of %d bytes does not fit", s.logPath, pos, h.Size())
		}
		if int64(cap(buf)) < h.Size() {
			buf = make([]byte, h.Size())
		}
		buf = buf[:h.Size()]
		if _, err := io.ReadFull(r, buf); err != nil {
			return fmt.Errorf("%s: position %d: %w", s.logPath, pos, err)
		}
		if err := f(buf, h); err != nil {
			return fmt.Errorf("%s: batch at offset %d: %w", s.logPath, h.BaseOffset, err)
		}
		pos += h.Size()
	}
	return nil
}

// syncDir fsyncs a directory: the renames in it survive a power loss.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// setCleaned checkpoints a new cleaned offset. The caller holds wmu.
func (l *Log) setCleaned(offset int64) error {
	if err := writeOffsetCheckpoint(l.path(cleanerCheckpointFile), offset); err != nil {
		return err
	}
	l.cleaned = offset
	return nil
}
