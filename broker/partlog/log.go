package partlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/keel-dev/keel/internal/bufpool"
)

// File names in a log's directory, besides the segments.
const (
	epochCheckpointFile    = "leader-epoch-checkpoint"
	hwCheckpointFile       = "high-watermark-checkpoint"
	recoveryCheckpointFile = "recovery-point-offset-checkpoint"
	startCheckpointFile    = "log-start-offset-checkpoint"
)

// Errors of the log's operations. Each comes wrapped with the details.
var (
	// ErrOffsetOutOfRange: the offset is below the log start or above the
	// log end (Kafka's OFFSET_OUT_OF_RANGE).
	ErrOffsetOutOfRange = errors.New("offset out of range")
	// ErrOffsetMismatch: a follower's batch does not start at the log end.
	ErrOffsetMismatch = errors.New("batch does not continue the log")
	// ErrStaleLeaderEpoch: the leader epoch is below one the log already
	// holds (Kafka's FENCED_LEADER_EPOCH, seen from the log).
	ErrStaleLeaderEpoch = errors.New("stale leader epoch")
	// ErrClosed: the log has been closed.
	ErrClosed = errors.New("log closed")
	// ErrFailed: an earlier write failed, and the log takes no more writes
	// until it is reopened (and recovered).
	ErrFailed = errors.New("log failed")
	// ErrNoDescriptors: the process (EMFILE) or the system (ENFILE) had
	// no file descriptor left to open a segment's files with, rolling the
	// log. That is load, not a broken disk: the write is refused, and the
	// log stays as it was, taking writes (Kafka's KAFKA_STORAGE_ERROR for
	// the request, which the producer retries).
	ErrNoDescriptors = errors.New("no file descriptor left")
)

// Log is one partition replica's log in its own directory. One goroutine
// at a time writes (appends, truncations, retention, flushes: they take a
// lock, so more are safe but queue); any number read meanwhile, and never
// see a batch that is not whole.
type Log struct {
	dir string
	cfg Config

	// wmu is held by every writer. Under it, the writer owns the active
	// segment's tail, the epoch cache, the producer state and the
	// checkpoints.
	wmu sync.Mutex
	// rw guards segs and closed: readers hold it shared while they read
	// files; writers take it exclusively only to add, cut or close segments.
	rw     sync.RWMutex
	segs   []*segment
	closed bool

	logStart atomic.Int64
	leo      atomic.Int64
	hw       atomic.Int64

	epochs    *epochCache
	producers *producerState

	// cleaned is the offset below which the cleaner compacted the log
	// (clean.go); gen counts the truncations and deletions of segments,
	// which a clean in progress must not undo. Both are the writer's.
	cleaned int64
	gen     uint64
	// cmu lets one Clean run at a time.
	cmu sync.Mutex

	recoveryPoint int64 // offsets below it are fsynced
	unflushed     int64 // records appended since the last fsync
	lastFlush     time.Time
	wbuf          []byte
	failed        error
}

// AppendInfo is the outcome of an append.
type AppendInfo struct {
	// FirstOffset and LastOffset are the offsets of the first and last
	// records appended (for a duplicate: of the original batch).
	FirstOffset, LastOffset int64
	// MaxTimestamp is the largest batch maxTimestamp appended.
	MaxTimestamp int64
	// Duplicate: an idempotent producer's retry of a batch the log already
	// holds; nothing was appended and the offsets are the original ones.
	Duplicate bool
}

// ReadResult is what a read returns.
type ReadResult struct {
	// Records holds whole v2 batches as stored, from the one holding the
	// offset read; empty at the end of the log.
	Records []byte
	// LogStartOffset and LogEndOffset are the log's bounds when it was read.
	LogStartOffset, LogEndOffset int64
}

// SegmentInfo describes one segment, for inspection and tests.
type SegmentInfo struct {
	BaseOffset, NextOffset int64
	Size                   int64
	IndexEntries           int64
}

// Open opens the log in dir, creating dir and an empty log at offset 0 if
// there is none, and recovers it: batches after the recovery point (the
// last fsync) are checked one by one, a torn tail that a crash can leave in
// the last segment is cut off and logged, indexes that are missing or
// damaged are rebuilt, and the producer state and leader epochs are
// rebuilt from the batch headers. Damage anywhere else (a sealed segment,
// a checkpoint) is refused with an error naming the file.
func Open(dir string, cfg Config) (*Log, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("partlog: %w", err)
	}
	l := &Log{dir: dir, cfg: cfg, producers: newProducerState(), lastFlush: cfg.Now()}
	if err := l.load(); err != nil {
		for _, s := range l.segs {
			_ = s.close()
		}
		return nil, err
	}
	return l, nil
}

func (l *Log) path(name string) string { return filepath.Join(l.dir, name) }

func (l *Log) load() error {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("partlog: %w", err)
	}
	var bases []int64
	indexes := map[int64]string{}
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.Contains(name, ".tmp-"), // a checkpoint write that did not finish
			strings.HasSuffix(name, cleanedSuffix): // a clean that did not finish
			if err := os.Remove(l.path(name)); err != nil {
				return fmt.Errorf("partlog: %w", err)
			}
		case strings.HasSuffix(name, logSuffix):
			base, ok := parseSegmentName(name, logSuffix)
			if !ok {
				return fmt.Errorf("partlog: %s: not a segment file name (20 digits and .log)", l.path(name))
			}
			bases = append(bases, base)
		case strings.HasSuffix(name, indexSuffix):
			if base, ok := parseSegmentName(name, indexSuffix); ok {
				indexes[base] = name
			}
		}
	}
	slices.Sort(bases)
	for base, name := range indexes {
		if _, ok := slices.BinarySearch(bases, base); !ok { // an index without its log
			if err := os.Remove(l.path(name)); err != nil {
				return fmt.Errorf("partlog: %w", err)
			}
		}
	}

	if l.epochs, err = loadEpochCache(l.path(epochCheckpointFile)); err != nil {
		return err
	}
	start, _, err := readOffsetCheckpoint(l.path(startCheckpointFile))
	if err != nil {
		return err
	}
	rp, _, err := readOffsetCheckpoint(l.path(recoveryCheckpointFile))
	if err != nil {
		return err
	}
	hw, _, err := readOffsetCheckpoint(l.path(hwCheckpointFile))
	if err != nil {
		return err
	}
	cleaned, _, err := readOffsetCheckpoint(l.path(cleanerCheckpointFile))
	if err != nil {
		return err
	}

	if len(bases) == 0 {
		s, err := createSegment(l.dir, start, &l.cfg)
		if err != nil {
			return fmt.Errorf("partlog: %w", err)
		}
		l.segs = []*segment{s}
		rp = start
	}
	for _, base := range bases {
		s, err := openSegment(l.dir, base, &l.cfg)
		if err != nil {
			return fmt.Errorf("partlog: %w", err)
		}
		l.segs = append(l.segs, s)
	}
	// The first segment to check batch by batch: the one holding the
	// recovery point. Those before it were fsynced whole.
	first := max(sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > rp })-1, 0)
	for i, s := range l.segs {
		if err := l.loadSegment(i, s, i >= first, rp); err != nil {
			return err
		}
		if i > 0 && s.base != l.segs[i-1].next {
			return fmt.Errorf("partlog: %s: starts at offset %d, but the segment before ends at %d", s.logPath, s.base, l.segs[i-1].next)
		}
	}

	active := l.segs[len(l.segs)-1]
	leo := active.next
	start = min(max(start, l.segs[0].base), leo)
	l.leo.Store(leo)
	l.logStart.Store(start)
	l.recoveryPoint = min(rp, leo)
	l.hw.Store(min(max(hw, start), leo))
	l.cleaned = min(cleaned, leo)
	changed := l.epochs.truncateFromEnd(leo)
	changed = l.epochs.truncateFromStart(start) || changed
	if changed || len(l.epochs.entries) > 0 {
		// Also saves what the headers taught (a missing checkpoint).
		if err := l.epochs.save(); err != nil {
			return err
		}
	}
	l.producers.removeBefore(start)
	active.sinceIndex = active.size.Load()
	if n := active.idx.n.Load(); n > 0 {
		e, err := active.idx.entry(n - 1)
		if err != nil {
			return err
		}
		active.sinceIndex -= e.pos
	}
	return nil
}

// loadSegment scans segment i: every batch checked (recover) if it may
// hold offsets at or after the recovery point rp, headers only if not.
func (l *Log) loadSegment(i int, s *segment, recover bool, rp int64) error {
	last := i == len(l.segs)-1
	if !recover {
		// An entry comes after IndexIntervalBytes and at most one batch.
		ok, why, err := s.idx.load(s.size.Load(), l.cfg.IndexIntervalBytes+l.cfg.MaxBatchBytes)
		if err != nil {
			return err
		}
		if !ok {
			l.cfg.Logger.Warn("partlog: rebuilding a damaged index", "file", s.idx.path, "why", why)
			recover = true
		}
	}
	res, err := s.scan(recover, l.cfg.MaxBatchBytes, l.cfg.IndexIntervalBytes)
	if err != nil {
		return err
	}
	if res.badPos >= 0 {
		next := s.base
		if n := len(res.batches); n > 0 {
			next = res.batches[n-1].NextOffset()
		}
		// A crash can only damage what was not fsynced: the last segment,
		// past the recovery point. There, as Kafka's log recovery does,
		// everything from the first bad batch on is cut, even when valid
		// batches follow (a power loss can leave zeroed or stale blocks in
		// the middle of unflushed data, and the replicas hold it again).
		// Damage in fsynced data is refused: it is not a crash's doing.
		if !last || next < rp {
			return fmt.Errorf("partlog: %s: damaged at position %d (after offset %d), not a torn tail: %s", s.logPath, res.badPos, next-1, res.why)
		}
		dropped := s.size.Load() - res.badPos
		if err := s.f.Truncate(res.badPos); err != nil {
			return fmt.Errorf("partlog: %s: cutting a torn tail: %w", s.logPath, err)
		}
		s.size.Store(res.badPos)
		l.cfg.Logger.Warn("partlog: cut the unflushed tail from its first bad batch", "file", s.logPath, "position", res.badPos, "offset", next, "bytes", dropped, "torn_write", res.tornTail, "why", res.why)
	}
	if recover {
		if err := s.idx.reset(res.index); err != nil {
			return err
		}
	}
	s.adopt(res)
	for _, h := range res.batches {
		if e, ok := l.epochs.latest(); h.PartitionLeaderEpoch >= 0 && (!ok || h.PartitionLeaderEpoch > e.Epoch) {
			if _, err := l.epochs.assign(h.PartitionLeaderEpoch, h.BaseOffset, false); err != nil {
				return err
			}
		}
		l.producers.update(h)
	}
	return nil
}

// Dir is the log's directory.
func (l *Log) Dir() string { return l.dir }

// LogStartOffset is the first offset the log serves.
func (l *Log) LogStartOffset() int64 { return l.logStart.Load() }

// LogEndOffset is the offset the next record will take (LEO).
func (l *Log) LogEndOffset() int64 { return l.leo.Load() }

// HighWatermark is the last high watermark checkpointed (or read at Open,
// kept within the log's bounds); 0 if none.
func (l *Log) HighWatermark() int64 { return l.hw.Load() }

// Segments describes the log's segments, oldest first.
func (l *Log) Segments() []SegmentInfo {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	out := make([]SegmentInfo, len(l.segs))
	for i, s := range l.segs {
		out[i] = SegmentInfo{BaseOffset: s.base, NextOffset: s.next, Size: s.size.Load(), IndexEntries: s.idx.n.Load()}
	}
	return out
}

// Size is the bytes of all segments.
func (l *Log) Size() int64 {
	l.rw.RLock()
	defer l.rw.RUnlock()
	var n int64
	for _, s := range l.segs {
		n += s.size.Load()
	}
	return n
}

func (l *Log) writable() error {
	if l.closed {
		return fmt.Errorf("partlog: %s: %w", l.dir, ErrClosed)
	}
	if l.failed != nil {
		return fmt.Errorf("partlog: %s: %w: %w", l.dir, ErrFailed, l.failed)
	}
	return nil
}

func (l *Log) active() *segment { return l.segs[len(l.segs)-1] }

// Append appends one batch from a producer as the partition's leader at
// leaderEpoch (Kafka's appendAsLeader). The batch must be one whole v2
// batch with a good CRC; the log gives it the next offsets and stamps the
// leader epoch, both outside the CRC, and stores the rest as received
// (batch itself is not modified). A first batch of a new epoch records
// where the epoch starts. An idempotent producer's batch is checked
// against its state (see CheckProducer): a duplicate returns the original
// offsets with Duplicate set, and appends nothing. Refusals (ErrInvalidBatch,
// ErrCorruptBatch, ErrBatchTooLarge, ErrStaleLeaderEpoch,
// ErrOutOfOrderSequence, ErrInvalidProducerEpoch) append nothing.
func (l *Log) Append(batch []byte, leaderEpoch int32) (AppendInfo, error) {
	h, err := checkBatch(batch)
	if err != nil {
		return AppendInfo{}, fmt.Errorf("partlog: %s: %w", l.dir, err)
	}
	if h.Size() > l.cfg.MaxBatchBytes {
		return AppendInfo{}, fmt.Errorf("partlog: %s: %w: %d bytes, the limit is %d", l.dir, ErrBatchTooLarge, h.Size(), l.cfg.MaxBatchBytes)
	}
	if h.RecordsCount != h.LastOffsetDelta+1 { // only the cleaner leaves gaps
		return AppendInfo{}, fmt.Errorf("partlog: %s: %w: %d records but lastOffsetDelta %d", l.dir, ErrInvalidBatch, h.RecordsCount, h.LastOffsetDelta)
	}
	if leaderEpoch < 0 {
		return AppendInfo{}, fmt.Errorf("partlog: %s: leader epoch %d", l.dir, leaderEpoch)
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.writable(); err != nil {
		return AppendInfo{}, err
	}
	if e, ok := l.epochs.latest(); ok && leaderEpoch < e.Epoch {
		return AppendInfo{}, fmt.Errorf("partlog: %s: %w: %d, the log has epoch %d", l.dir, ErrStaleLeaderEpoch, leaderEpoch, e.Epoch)
	}
	dup, err := l.producers.check(h)
	if err != nil {
		return AppendInfo{}, fmt.Errorf("partlog: %s: %w", l.dir, err)
	}
	if dup != nil {
		return AppendInfo{FirstOffset: dup.firstOffset, LastOffset: dup.lastOffset, MaxTimestamp: h.MaxTimestamp, Duplicate: true}, nil
	}
	h.BaseOffset, h.PartitionLeaderEpoch = l.leo.Load(), leaderEpoch
	l.wbuf = append(l.wbuf[:0], batch...)
	binary.BigEndian.PutUint64(l.wbuf[0:], uint64(h.BaseOffset))
	binary.BigEndian.PutUint32(l.wbuf[offEpoch:], uint32(leaderEpoch))
	if err := l.write(l.wbuf, h); err != nil {
		return AppendInfo{}, err
	}
	return AppendInfo{FirstOffset: h.BaseOffset, LastOffset: h.LastOffset(), MaxTimestamp: h.MaxTimestamp}, nil
}

// CheckProducer is the idempotence check the leader runs before it
// appends (Append runs it again, under the same lock as the write):
// a producer unknown here may send any sequence; a lower epoch than the
// log's is ErrInvalidProducerEpoch; a higher one must start at sequence 0;
// in the same epoch, a batch equal to one of the last five is a duplicate
// (AppendInfo with Duplicate and the original offsets), and any other must
// follow the last sequence, else ErrOutOfOrderSequence. A batch that may
// be appended returns the zero AppendInfo.
func (l *Log) CheckProducer(batch []byte) (AppendInfo, error) {
	h, err := checkBatch(batch)
	if err != nil {
		return AppendInfo{}, fmt.Errorf("partlog: %s: %w", l.dir, err)
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	dup, err := l.producers.check(h)
	if err != nil {
		return AppendInfo{}, fmt.Errorf("partlog: %s: %w", l.dir, err)
	}
	if dup != nil {
		return AppendInfo{FirstOffset: dup.firstOffset, LastOffset: dup.lastOffset, MaxTimestamp: h.MaxTimestamp, Duplicate: true}, nil
	}
	return AppendInfo{}, nil
}

// AppendAsFollower appends batches fetched from the leader, keeping the
// leader's offsets and epochs (Kafka's appendAsFollower): records is a run
// of whole batches, each with a good CRC, the first starting at the log
// end and each following the one before (else ErrOffsetMismatch), with
// leader epochs that never go down (else ErrStaleLeaderEpoch). Every batch
// is checked before any is written, so a refusal appends nothing. Epochs
// are learnt from the batch headers; producer state follows the batches.
func (l *Log) AppendAsFollower(records []byte) (AppendInfo, error) {
	bs, hs, err := splitBatches(records)
	if err != nil {
		return AppendInfo{}, fmt.Errorf("partlog: %s: %w", l.dir, err)
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.writable(); err != nil {
		return AppendInfo{}, err
	}
	next := l.leo.Load()
	info := AppendInfo{FirstOffset: next, LastOffset: next - 1, MaxTimestamp: -1}
	epoch := int32(-1)
	if e, ok := l.epochs.latest(); ok {
		epoch = e.Epoch
	}
	for i, h := range hs {
		if h.BaseOffset != next {
			return AppendInfo{}, fmt.Errorf("partlog: %s: %w: batch %d starts at offset %d, the log ends at %d", l.dir, ErrOffsetMismatch, i, h.BaseOffset, next)
		}
		if h.PartitionLeaderEpoch < max(epoch, 0) {
			return AppendInfo{}, fmt.Errorf("partlog: %s: %w: batch %d (offset %d) has leader epoch %d, the log has %d", l.dir, ErrStaleLeaderEpoch, i, h.BaseOffset, h.PartitionLeaderEpoch, epoch)
		}
		next, epoch = h.NextOffset(), h.PartitionLeaderEpoch
	}
	for i, h := range hs {
		if err := l.write(bs[i], h); err != nil {
			return info, err
		}
		info.LastOffset = h.LastOffset()
		info.MaxTimestamp = max(info.MaxTimestamp, h.MaxTimestamp)
	}
	return info, nil
}

// fail turns the log to refusing writes after err, telling OnFail the
// first time. The caller holds wmu.
func (l *Log) fail(err error) {
	if l.failed != nil {
		return
	}
	l.failed = err
	if l.cfg.OnFail != nil {
		l.cfg.OnFail(err)
	}
}

// write appends one checked batch, stamped with its offsets, at the log
// end: it rolls first if the batch does not fit, records a new epoch
// (fsynced before the batch is written), and publishes the batch to
// readers once it is whole. Any failed write makes the log refuse further
// writes (ErrFailed): the file may hold more than the log says.
func (l *Log) write(b []byte, h BatchHeader) error {
	if err := l.maybeRoll(h); err != nil {
		if !errors.Is(err, ErrNoDescriptors) {
			l.fail(err)
		}
		return err
	}
	if e, ok := l.epochs.latest(); !ok || h.PartitionLeaderEpoch > e.Epoch {
		if _, err := l.epochs.assign(h.PartitionLeaderEpoch, h.BaseOffset, true); err != nil {
			l.fail(err)
			return err
		}
	}
	s := l.active()
	if err := s.append(b, h, l.cfg.IndexIntervalBytes); err != nil {
		l.fail(err)
		return err
	}
	if s.firstWrite.IsZero() {
		s.firstWrite = l.cfg.Now()
	}
	l.producers.update(h)
	l.leo.Store(h.NextOffset())
	l.unflushed += int64(h.RecordsCount)
	if (l.cfg.FlushMessages > 0 && l.unflushed >= l.cfg.FlushMessages) ||
		(l.cfg.FlushInterval > 0 && l.cfg.Now().Sub(l.lastFlush) >= l.cfg.FlushInterval) {
		return l.flush()
	}
	return nil
}

// maybeRoll starts a new segment at h's offset if h does not fit in the
// active one: by size (SegmentBytes), by index size (SegmentIndexBytes), or
// because its offsets are too far from the segment's base for the index.
func (l *Log) maybeRoll(h BatchHeader) error {
	s := l.active()
	size := s.size.Load()
	if size == 0 || (size+h.Size() <= l.cfg.SegmentBytes && !s.idx.full() && h.LastOffset()-s.base <= math.MaxInt32 && !l.aged(s)) {
		return nil
	}
	// The sealed segment is fsynced now, so that recovery need only check
	// the active one (Kafka flushes at roll too).
	if err := s.sync(); err != nil {
		return err
	}
	ns, err := createSegment(l.dir, h.BaseOffset, &l.cfg)
	if err != nil {
		if outOfDescriptors(err) {
			// createSegment left nothing behind: the next write rolls again.
			return fmt.Errorf("partlog: %s: rolling: %w: %w", l.dir, ErrNoDescriptors, err)
		}
		return fmt.Errorf("partlog: rolling: %w", err)
	}
	l.rw.Lock()
	l.segs = append(l.segs[:len(l.segs):len(l.segs)], ns)
	l.rw.Unlock()
	l.recoveryPoint = h.BaseOffset
	err = writeOffsetCheckpoint(l.path(recoveryCheckpointFile), l.recoveryPoint)
	if outOfDescriptors(err) {
		// The checkpoint on disk is older, which only makes recovery
		// check more; the new segment is empty, so the next write
		// appends to it without rolling.
		return fmt.Errorf("partlog: %s: recovery checkpoint: %w: %w", l.dir, ErrNoDescriptors, err)
	}
	return err
}

// aged reports whether the active segment s is older than SegmentTime: the
// next batch starts a new one (Kafka's roll by time). The caller holds wmu.
func (l *Log) aged(s *segment) bool {
	return !s.firstWrite.IsZero() && l.cfg.Now().Sub(s.firstWrite) > l.cfg.SegmentTime
}

// Reconfigure applies a topic's changed configs to the open log, as Kafka's
// LogManager.updateTopicConfig does: SegmentBytes and SegmentTime from the
// next append, SegmentIndexBytes from the next segment, IndexIntervalBytes
// from the next index entry. The other fields of c are ignored; a value out
// of range is an error and changes nothing.
func (l *Log) Reconfigure(c Config) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	next := l.cfg
	next.SegmentBytes, next.SegmentTime, next.SegmentIndexBytes, next.IndexIntervalBytes = c.SegmentBytes, c.SegmentTime, c.SegmentIndexBytes, c.IndexIntervalBytes
	next, err := next.withDefaults()
	if err != nil {
		return fmt.Errorf("partlog: %s: %w", l.dir, err)
	}
	l.cfg = next
	return nil
}

// outOfDescriptors: err is EMFILE or ENFILE.
func outOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// Read returns whole batches from the one holding offset up to maxBytes,
// at least one batch even if it is larger (KIP-74), from one segment, up
// to the log end: what a follower's fetch gets. Reading at the log end
// returns no records; below the log start or past the end is
// ErrOffsetOutOfRange. Reads run beside appends.
func (l *Log) Read(offset int64, maxBytes int) (ReadResult, error) {
	return l.ReadUpTo(offset, maxBytes, math.MaxInt64)
}

// ReadUpTo is Read with no batch ending past upTo: a consumer's fetch
// reads up to the high watermark.
func (l *Log) ReadUpTo(offset int64, maxBytes int, upTo int64) (ReadResult, error) {
	return l.read(nil, grow, offset, maxBytes, upTo)
}

// read is ReadUpTo into buf's space, asking grow for a buffer when buf is
// too small.
func (l *Log) read(buf []byte, grow func([]byte, int) []byte, offset int64, maxBytes int, upTo int64) (ReadResult, error) {
	l.rw.RLock()
	defer l.rw.RUnlock()
	if l.closed {
		return ReadResult{}, fmt.Errorf("partlog: %s: %w", l.dir, ErrClosed)
	}
	// The log end is read before the segments' sizes: a batch counted in
	// the end is always whole in its segment.
	res := ReadResult{LogEndOffset: l.leo.Load(), LogStartOffset: l.logStart.Load()}
	if offset < res.LogStartOffset || offset > res.LogEndOffset {
		return res, fmt.Errorf("partlog: %s: %w: %d is outside [%d, %d]", l.dir, ErrOffsetOutOfRange, offset, res.LogStartOffset, res.LogEndOffset)
	}
	upTo = min(upTo, res.LogEndOffset)
	if offset >= upTo {
		return res, nil
	}
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > offset }) - 1
	if i < 0 {
		return res, fmt.Errorf("partlog: %s: no segment holds offset %d", l.dir, offset)
	}
	b, err := l.segs[i].read(buf, grow, offset, maxBytes, upTo)
	res.Records = b
	return res, err
}

// ReadPooled is ReadUpTo into a buffer from internal/bufpool sized to what
// it reads (a consumer at the log's end reads a few bytes, not maxBytes):
// Records lies in *buf, which the caller gives back with bufpool.Put once
// no slice of it is used, or drops. buf may be nil (nothing read).
func (l *Log) ReadPooled(offset int64, maxBytes int, upTo int64) (res ReadResult, buf *[]byte, err error) {
	res, err = l.read(nil, func(_ []byte, n int) []byte {
		bufpool.Put(buf)
		buf = bufpool.Get(n)
		return *buf
	}, offset, maxBytes, upTo)
	if err != nil {
		bufpool.Put(buf)
		return res, nil, err
	}
	return res, buf, nil
}

// grow is a buffer of n bytes in place of buf, which it outgrew.
func grow(buf []byte, n int) []byte { return slices.Grow(buf[:0], n) }

// TruncateTo removes every batch at or after offset (Kafka's truncateTo):
// a follower cutting the log where it diverges from its leader's (KIP-279).
// Whole batches go: if offset falls inside a batch, that batch goes too and
// the log ends below offset. Leader epochs starting at or after the new end
// go with them, and the producer state is rebuilt. An offset at or past the
// end cuts no batch, but drops the epochs that start at the end (an epoch
// this replica led without appending to it); one below the log start
// empties the log and starts it at offset.
func (l *Log) TruncateTo(offset int64) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if leo := l.leo.Load(); offset >= leo {
		// Nothing to cut, but an epoch may start at the end with no
		// record in it: this replica led it (AssignEpoch) and lost the
		// leadership before it appended anything. Its new leader does
		// not know it, so it must go, or the follower's next fetch
		// carries it as its last epoch and diverges again, for ever
		// (Kafka's truncateTo does the same).
		if l.epochs.truncateFromEnd(leo) {
			return l.epochs.save()
		}
		return nil
	}
	if offset < l.logStart.Load() {
		return l.truncateFully(offset)
	}
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > offset }) - 1
	oldEnd := l.leo.Load()
	l.gen++
	l.rw.Lock()
	gone := slices.Clone(l.segs[i+1:])
	l.segs = l.segs[: i+1 : i+1]
	err := l.segs[i].truncateTo(offset)
	if err == nil {
		l.leo.Store(l.segs[i].next)
	}
	l.rw.Unlock()
	for _, s := range gone {
		err = errors.Join(err, s.remove())
	}
	if err != nil {
		l.fail(err)
		return err
	}
	leo := l.leo.Load()
	l.cfg.Logger.Info("partlog: truncated", "dir", l.dir, "to", offset, "end", leo, "was", oldEnd)
	if l.epochs.truncateFromEnd(leo) {
		if err := l.epochs.save(); err != nil {
			return err
		}
	}
	if err := l.rebuildProducers(); err != nil {
		return err
	}
	if l.cleaned > leo {
		if err := l.setCleaned(leo); err != nil {
			return err
		}
	}
	if l.recoveryPoint > leo {
		l.recoveryPoint = leo
		return writeOffsetCheckpoint(l.path(recoveryCheckpointFile), leo)
	}
	return nil
}

// TruncateFullyAndStartAt empties the log and starts it at offset: a
// follower whose log end is below its leader's log start.
func (l *Log) TruncateFullyAndStartAt(offset int64) error {
	if offset < 0 {
		return fmt.Errorf("partlog: %s: offset %d", l.dir, offset)
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	return l.truncateFully(offset)
}

func (l *Log) truncateFully(offset int64) error {
	// The new start first: a crash after it leaves an empty log there.
	if err := writeOffsetCheckpoint(l.path(startCheckpointFile), offset); err != nil {
		return err
	}
	l.gen++
	l.rw.Lock()
	gone := l.segs
	var err error
	for _, s := range gone {
		err = errors.Join(err, s.remove())
	}
	var ns *segment
	if err == nil {
		ns, err = createSegment(l.dir, offset, &l.cfg)
	}
	if err != nil {
		l.segs = nil
		l.fail(err)
		l.closed = true // no segments left to read
		l.rw.Unlock()
		return err
	}
	l.segs = []*segment{ns}
	l.leo.Store(offset)
	l.logStart.Store(offset)
	l.rw.Unlock()
	l.cfg.Logger.Info("partlog: emptied the log", "dir", l.dir, "start", offset)
	l.epochs.entries = nil
	l.producers = newProducerState()
	l.recoveryPoint = offset
	return errors.Join(l.epochs.save(), writeOffsetCheckpoint(l.path(recoveryCheckpointFile), offset), l.setCleaned(offset))
}

// rebuildProducers replays every batch header into a fresh producer state.
func (l *Log) rebuildProducers() error {
	p := newProducerState()
	for _, s := range l.segs {
		res, err := s.scan(false, math.MaxInt64, math.MaxInt64)
		if err != nil {
			return err
		}
		if res.badPos >= 0 {
			return fmt.Errorf("partlog: %s: damaged at position %d: %s", s.logPath, res.badPos, res.why)
		}
		for _, h := range res.batches {
			p.update(h)
		}
	}
	p.removeBefore(l.logStart.Load())
	l.producers = p
	return nil
}

// DeleteTo moves the log start up to offset (Kafka's DeleteRecords and
// maybeIncrementLogStartOffset): reads below it are out of range, and
// segments wholly below it are deleted, never the active one. The new
// start is checkpointed first. Offsets past the log end are
// ErrOffsetOutOfRange; offsets at or below the start change nothing.
func (l *Log) DeleteTo(offset int64) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if leo := l.leo.Load(); offset > leo {
		return fmt.Errorf("partlog: %s: %w: %d is past the log end %d", l.dir, ErrOffsetOutOfRange, offset, leo)
	}
	if offset <= l.logStart.Load() {
		return nil
	}
	if err := l.moveStart(offset); err != nil {
		return err
	}
	n := 0
	for n < len(l.segs)-1 && l.segs[n+1].base <= offset {
		n++
	}
	_, err := l.deleteOldest(n)
	return err
}

// moveStart checkpoints and publishes a new log start, and drops the epochs
// and producers wholly before it.
func (l *Log) moveStart(offset int64) error {
	if err := writeOffsetCheckpoint(l.path(startCheckpointFile), offset); err != nil {
		return err
	}
	l.logStart.Store(offset)
	l.producers.removeBefore(offset)
	if l.epochs.truncateFromStart(offset) {
		return l.epochs.save()
	}
	return nil
}

// deleteOldest deletes the n oldest segments (never the active one) and
// returns their bytes.
func (l *Log) deleteOldest(n int) (int64, error) {
	n = min(n, len(l.segs)-1)
	if n <= 0 {
		return 0, nil
	}
	l.gen++
	l.rw.Lock()
	gone := slices.Clone(l.segs[:n])
	l.segs = slices.Clone(l.segs[n:])
	l.rw.Unlock()
	var bytes int64
	var err error
	for _, s := range gone {
		bytes += s.size.Load()
		err = errors.Join(err, s.remove())
	}
	return bytes, err
}

// Retained says what Retain deleted.
type Retained struct {
	Segments         int
	Bytes            int64
	LogStartOffset   int64
	ProducersExpired int
}

// Retain deletes whole sealed segments, oldest first, never the active one
// (Kafka's deleteOldSegments): those wholly below the log start, then those
// whose newest timestamp is older than r.Time before now, then the oldest
// while the rest still hold r.Bytes. The log start moves to the first
// segment left. It also forgets producers past r.ProducerIDExpiration.
// The broker calls it periodically (log.retention.check.interval.ms).
func (l *Log) Retain(now time.Time, r Retention) (Retained, error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.writable(); err != nil {
		return Retained{}, err
	}
	sealed := len(l.segs) - 1
	n := 0
	for n < sealed && l.segs[n+1].base <= l.logStart.Load() {
		n++
	}
	if r.Time > 0 {
		cutoff := now.Add(-r.Time).UnixMilli()
		for n < sealed && l.segs[n].maxTimestamp.Load() < cutoff {
			n++
		}
	}
	if r.Bytes > 0 {
		var total int64
		for _, s := range l.segs[n:] {
			total += s.size.Load()
		}
		for n < sealed && total-l.segs[n].size.Load() >= r.Bytes {
			total -= l.segs[n].size.Load()
			n++
		}
	}
	var out Retained
	if n > 0 {
		if start := l.segs[n].base; start > l.logStart.Load() {
			if err := l.moveStart(start); err != nil {
				return out, err
			}
		}
		bytes, err := l.deleteOldest(n)
		out.Segments, out.Bytes = n, bytes
		if err != nil {
			return out, err
		}
	}
	out.LogStartOffset = l.logStart.Load()
	if r.ProducerIDExpiration > 0 {
		out.ProducersExpired = l.producers.expire(now.Add(-r.ProducerIDExpiration).UnixMilli())
	}
	return out, nil
}

// Flush fsyncs the log up to its end and checkpoints that as the recovery
// point: after a power loss, everything below it is there, and Open checks
// only what came after.
func (l *Log) Flush() error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	return l.flush()
}

// MaybeFlush flushes if Config.FlushInterval has passed since the last
// fsync and anything was appended since. The broker calls it periodically
// (Kafka's log.flush.scheduler.interval.ms), so that the interval holds
// when appends stop.
func (l *Log) MaybeFlush(now time.Time) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if l.cfg.FlushInterval <= 0 || l.unflushed == 0 || now.Sub(l.lastFlush) < l.cfg.FlushInterval {
		return nil
	}
	return l.flush()
}

func (l *Log) flush() error {
	leo := l.leo.Load()
	if err := l.active().sync(); err != nil {
		l.fail(err)
		return err
	}
	l.unflushed, l.lastFlush = 0, l.cfg.Now()
	if leo == l.recoveryPoint {
		return nil
	}
	l.recoveryPoint = leo
	return writeOffsetCheckpoint(l.path(recoveryCheckpointFile), leo)
}

// AssignEpoch records that leader epoch starts at the log end: a new
// leader calls it before it appends anything (Kafka's
// maybeAssignEpochStartOffset at becomeLeader), so that EndOffsetFor
// answers its followers with the new epoch. The epoch is fsynced before it
// returns. An epoch below the latest is ErrStaleLeaderEpoch; the latest
// again changes nothing.
func (l *Log) AssignEpoch(epoch int32) error {
	if epoch < 0 {
		return fmt.Errorf("partlog: %s: leader epoch %d", l.dir, epoch)
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if e, ok := l.epochs.latest(); ok && epoch < e.Epoch {
		return fmt.Errorf("partlog: %s: %w: %d, the log has epoch %d", l.dir, ErrStaleLeaderEpoch, epoch, e.Epoch)
	}
	_, err := l.epochs.assign(epoch, l.leo.Load(), true)
	return err
}

// LatestEpoch is the latest leader epoch in the log (the follower's
// lastFetchedEpoch), and false if there is none.
func (l *Log) LatestEpoch() (int32, bool) {
	es := *l.epochs.view.Load()
	if len(es) == 0 {
		return UndefinedEpoch, false
	}
	return es[len(es)-1].Epoch, true
}

// EpochEntries is a copy of the leader epoch cache, oldest first.
func (l *Log) EpochEntries() []EpochEntry { return slices.Clone(*l.epochs.view.Load()) }

// EndOffsetFor answers OffsetsForLeaderEpoch and a follower's
// lastFetchedEpoch (Kafka's endOffsetFor): the largest epoch at or below
// epoch that this log has, and the offset where it ended: the start of the
// next epoch, or the log end for the latest. An epoch below the first one
// answers epoch and the first start offset; UndefinedEpoch, or an epoch
// with nothing known, answers (UndefinedEpoch, UndefinedOffset).
func (l *Log) EndOffsetFor(epoch int32) (int32, int64) {
	es := *l.epochs.view.Load()
	return endOffsetFor(es, epoch, l.leo.Load())
}

// CheckpointHighWatermark writes hw to the log's high-watermark checkpoint
// (Kafka's replication-offset-checkpoint, one per log here), atomically and
// fsynced. The log does not decide the high watermark; it keeps the one it
// is given, which must lie within [0, log end].
func (l *Log) CheckpointHighWatermark(hw int64) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if leo := l.leo.Load(); hw < 0 || hw > leo {
		return fmt.Errorf("partlog: %s: %w: high watermark %d is outside [0, %d]", l.dir, ErrOffsetOutOfRange, hw, leo)
	}
	if err := writeOffsetCheckpoint(l.path(hwCheckpointFile), hw); err != nil {
		return err
	}
	l.hw.Store(hw)
	return nil
}

// Close fsyncs the log (a clean shutdown: the next Open checks nothing)
// and closes its files. Reads and writes after it fail with ErrClosed. A
// log that failed (ErrFailed) is closed without an fsync, and Close says so
// with ErrFailed.
func (l *Log) Close() error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed {
		return nil
	}
	var err error
	if l.failed == nil {
		err = l.flush()
	} else {
		// Not flushed: the caller must not record a clean shutdown.
		err = fmt.Errorf("partlog: %s: not flushed: %w: %w", l.dir, ErrFailed, l.failed)
	}
	l.rw.Lock()
	defer l.rw.Unlock()
	l.closed = true
	for _, s := range l.segs {
		err = errors.Join(err, s.close())
	}
	return err
}
