package partlog

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

const (
	logSuffix   = ".log"
	indexSuffix = ".index"
)

// segmentName is Kafka's file name for a segment: the base offset in 20
// digits, so that names sort as offsets do.
func segmentName(base int64, suffix string) string {
	return fmt.Sprintf("%020d%s", base, suffix)
}

// parseSegmentName returns the base offset of a segment file name.
func parseSegmentName(name, suffix string) (int64, bool) {
	s, ok := strings.CutSuffix(name, suffix)
	if !ok || len(s) != 20 {
		return 0, false
	}
	base, err := strconv.ParseInt(s, 10, 64)
	return base, err == nil && base >= 0
}

// segment is one .log file and its .index. Batches are only ever appended
// to the last segment of a log (the active one); the others are sealed.
type segment struct {
	base    int64
	logPath string
	f       *os.File
	idx     *offsetIndex

	// size is the readable length of the .log: readers never look past it,
	// so they never see a batch that is still being written.
	size atomic.Int64

	// Owned by the log's writer.
	next       int64 // the offset after the last batch (base if empty)
	sinceIndex int64 // bytes appended since the last index entry
	// firstWrite is when the segment took its first batch in this
	// process, or was opened holding some: the start of its age for
	// SegmentTime. Zero while it is empty.
	firstWrite time.Time

	// maxTimestamp is the largest batch maxTimestamp (-1 if none): set by
	// the writer, read by retention and by lookups by timestamp.
	maxTimestamp atomic.Int64
}

// createSegment makes an empty segment at base. A leftover empty file of
// the same name is reused; one holding data is an error.
func createSegment(dir string, base int64, cfg *Config) (*segment, error) {
	logPath := filepath.Join(dir, segmentName(base, logSuffix))
	f, err := os.OpenFile(logPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && fi.Size() != 0 {
		err = fmt.Errorf("partlog: %s: a new segment's file already holds %d bytes", logPath, fi.Size())
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	idx, err := openIndex(filepath.Join(dir, segmentName(base, indexSuffix)), base, cfg.maxIndexEntries())
	if err == nil {
		if err = idx.f.Truncate(0); err != nil {
			_ = idx.f.Close()
		}
	}
	if err != nil {
		// The log file is new and empty: removed, so that a failure to
		// open the index (out of descriptors) leaves nothing behind.
		_ = f.Close()
		_ = os.Remove(logPath)
		return nil, err
	}
	s := &segment{base: base, logPath: logPath, f: f, idx: idx, next: base}
	s.maxTimestamp.Store(-1)
	return s, nil
}

// openSegment opens an existing segment's files; the caller loads or
// recovers it.
func openSegment(dir string, base int64, cfg *Config) (*segment, error) {
	logPath := filepath.Join(dir, segmentName(base, logSuffix))
	f, err := os.OpenFile(logPath, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if fi.Size() > math.MaxInt32 {
		_ = f.Close()
		return nil, fmt.Errorf("partlog: %s: %d bytes, over a segment's 2 GiB limit", logPath, fi.Size())
	}
	idx, err := openIndex(filepath.Join(dir, segmentName(base, indexSuffix)), base, cfg.maxIndexEntries())
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	s := &segment{base: base, logPath: logPath, f: f, idx: idx, next: base}
	s.maxTimestamp.Store(-1)
	s.size.Store(fi.Size())
	return s, nil
}

func (s *segment) close() error {
	return errors.Join(s.f.Close(), s.idx.f.Close())
}

// remove closes and deletes the segment's files.
func (s *segment) remove() error {
	err := s.close()
	for _, p := range []string{s.logPath, s.idx.path} {
		if rerr := os.Remove(p); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

func (s *segment) sync() error {
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("partlog: %s: fsync: %w", s.logPath, err)
	}
	if err := s.idx.f.Sync(); err != nil {
		return fmt.Errorf("partlog: %s: fsync: %w", s.idx.path, err)
	}
	return nil
}

// append writes one checked batch whose header is h at the end of the
// segment and publishes it to readers. On a failed write the bytes past the
// published size are cut off again, so the file never keeps half a batch.
func (s *segment) append(b []byte, h BatchHeader, indexInterval int64) error {
	pos := s.size.Load()
	if _, err := s.f.WriteAt(b, pos); err != nil {
		if terr := s.f.Truncate(pos); terr != nil {
			return fmt.Errorf("partlog: %s: append: %w (and cutting it back: %v)", s.logPath, err, terr)
		}
		return fmt.Errorf("partlog: %s: append: %w", s.logPath, err)
	}
	if s.sinceIndex > indexInterval {
		if err := s.idx.append(indexEntry{offset: h.BaseOffset, pos: pos}); err != nil {
			return err
		}
		s.sinceIndex = 0
	}
	s.sinceIndex += int64(len(b))
	s.next = h.NextOffset()
	s.maxTimestamp.Store(max(s.maxTimestamp.Load(), h.MaxTimestamp))
	s.size.Store(pos + int64(len(b)))
	return nil
}

// headerAt reads the header of the batch at pos, which must lie whole
// within the first size bytes.
func (s *segment) headerAt(pos, size int64) (BatchHeader, error) {
	if size-pos < batchHeaderSize {
		return BatchHeader{}, fmt.Errorf("partlog: %s: position %d: %d bytes left, less than a batch header", s.logPath, pos, size-pos)
	}
	var b [batchHeaderSize]byte
	if _, err := s.f.ReadAt(b[:], pos); err != nil {
		return BatchHeader{}, fmt.Errorf("partlog: %s: position %d: %w", s.logPath, pos, err)
	}
	h := parseHeader(b[:])
	if h.Length < minBatchLength || pos+h.Size() > size {
		return h, fmt.Errorf("partlog: %s: position %d: batch of %d bytes does not fit in %d", s.logPath, pos, h.Size(), size-pos)
	}
	return h, nil
}

// find returns the position of the batch holding offset, or of the first
// batch after it, or size if there is none.
func (s *segment) find(offset, size int64) (int64, error) {
	e, err := s.idx.lookup(offset)
	if err != nil {
		return 0, err
	}
	pos := e.pos
	for pos < size {
		h, err := s.headerAt(pos, size)
		if err != nil {
			return 0, err
		}
		if h.NextOffset() > offset {
			return pos, nil
		}
		pos += h.Size()
	}
	return size, nil
}

// read returns the whole batches from the one holding offset, up to
// maxBytes but at least one (KIP-74), none ending past upTo, read into
// buf's space, or into grow(buf, n) when it needs n bytes more than buf
// holds.
func (s *segment) read(buf []byte, grow func([]byte, int) []byte, offset int64, maxBytes int, upTo int64) ([]byte, error) {
	size := s.size.Load()
	pos, err := s.find(offset, size)
	if err != nil || pos >= size {
		return buf[:0], err
	}
	n := min(int64(max(maxBytes, batchHeaderSize)), size-pos)
	if int64(cap(buf)) < n {
		buf = grow(buf, int(n))
	}
	buf = buf[:n]
	if _, err := s.f.ReadAt(buf, pos); err != nil {
		return nil, fmt.Errorf("partlog: %s: position %d: %w", s.logPath, pos, err)
	}
	var end int64
	for end+batchHeaderSize <= n {
		h := parseHeader(buf[end:])
		if h.Length < minBatchLength {
			return nil, fmt.Errorf("partlog: %s: position %d: batchLength %d", s.logPath, pos+end, h.Length)
		}
		if h.NextOffset() > upTo {
			break
		}
		if end+h.Size() > n {
			if end == 0 { // the first batch is larger than maxBytes: send it whole
				if pos+h.Size() > size {
					return nil, fmt.Errorf("partlog: %s: position %d: batch of %d bytes does not fit", s.logPath, pos, h.Size())
				}
				whole := buf[:0]
				if int64(cap(whole)) < h.Size() {
					whole = grow(buf, int(h.Size()))
				}
				whole = whole[:h.Size()]
				if _, err := s.f.ReadAt(whole, pos); err != nil {
					return nil, fmt.Errorf("partlog: %s: position %d: %w", s.logPath, pos, err)
				}
				return whole, nil
			}
			break
		}
		end += h.Size()
	}
	return buf[:end], nil
}

// scanResult is what a scan of a segment learned.
type scanResult struct {
	batches []BatchHeader
	index   []indexEntry
	// badPos is the position of the first bad batch, or -1; why says what
	// was wrong with it.
	badPos int64
	why    string
	// tornTail: nothing valid can follow the bad batch: it runs past the
	// end of the file, or only zeros follow.
	tornTail bool
}

// scan reads the whole segment, checking every batch as recovery does
// (Kafka's LogSegment.recover): it fits, batchLength >= 49, magic 2, a good
// CRC, offsets that rise from the segment's base. It stops at the first bad
// batch. With full false it reads headers only (a sealed segment at open).
func (s *segment) scan(full bool, maxBatch, indexInterval int64) (scanResult, error) {
	size := s.size.Load()
	res := scanResult{badPos: -1}
	next := s.base
	var since int64
	var r *bufio.Reader
	if full {
		r = bufio.NewReaderSize(io.NewSectionReader(s.f, 0, size), 1<<20)
	}
	var buf []byte
	for pos := int64(0); pos < size; {
		bad := func(why string, torn bool) {
			res.badPos, res.why, res.tornTail = pos, why, torn
		}
		var h BatchHeader
		if size-pos < batchHeaderSize {
			bad(fmt.Sprintf("%d bytes left, less than a batch header", size-pos), true)
			break
		}
		if full {
			hb, err := r.Peek(batchHeaderSize)
			if err != nil {
				return res, fmt.Errorf("partlog: %s: position %d: %w", s.logPath, pos, err)
			}
			h = parseHeader(hb)
		} else {
			var hb [batchHeaderSize]byte
			if _, err := s.f.ReadAt(hb[:], pos); err != nil {
				return res, fmt.Errorf("partlog: %s: position %d: %w", s.logPath, pos, err)
			}
			h = parseHeader(hb[:])
		}
		if h.Length < minBatchLength {
			bad(fmt.Sprintf("batchLength %d is under %d", h.Length, minBatchLength), false)
			break
		}
		if pos+h.Size() > size {
			// A torn write leaves a true header and too few bytes; a
			// length no batch can have is damage, not a torn write.
			bad(fmt.Sprintf("a batch of %d bytes runs past the end of the file (%d bytes left)", h.Size(), size-pos), h.Size() <= maxBatch)
			break
		}
		if full {
			if int64(cap(buf)) < h.Size() {
				buf = make([]byte, h.Size())
			}
			buf = buf[:h.Size()]
			if _, err := io.ReadFull(r, buf); err != nil {
				return res, fmt.Errorf("partlog: %s: position %d: %w", s.logPath, pos, err)
			}
			if err := checkFields(buf, h); err != nil {
				bad(err.Error(), pos+h.Size() == size)
				break
			}
		}
		if h.BaseOffset < next {
			bad(fmt.Sprintf("base offset %d, expected at least %d", h.BaseOffset, next), pos+h.Size() == size)
			break
		}
		if h.LastOffset()-s.base > math.MaxInt32 {
			bad(fmt.Sprintf("offset %d is too far from the segment's base", h.LastOffset()), false)
			break
		}
		if since > indexInterval {
			res.index = append(res.index, indexEntry{offset: h.BaseOffset, pos: pos})
			since = 0
		}
		since += h.Size()
		res.batches = append(res.batches, h)
		next = h.NextOffset()
		pos += h.Size()
	}
	if res.badPos >= 0 && !res.tornTail {
		zero, err := s.zerosFrom(res.badPos, size)
		if err != nil {
			return res, err
		}
		res.tornTail = zero
	}
	return res, nil
}

// zerosFrom reports whether the file holds only zero bytes from pos to
// size: blocks a crash allocated but never wrote.
func (s *segment) zerosFrom(pos, size int64) (bool, error) {
	buf := make([]byte, 64<<10)
	for pos < size {
		n := min(int64(len(buf)), size-pos)
		if _, err := s.f.ReadAt(buf[:n], pos); err != nil {
			return false, fmt.Errorf("partlog: %s: position %d: %w", s.logPath, pos, err)
		}
		for _, c := range buf[:n] {
			if c != 0 {
				return false, nil
			}
		}
		pos += n
	}
	return true, nil
}

// truncateTo cuts the segment at the batch holding offset (or the first
// after it) and returns the new next offset.
func (s *segment) truncateTo(offset int64) error {
	size := s.size.Load()
	pos, err := s.find(offset, size)
	if err != nil {
		return err
	}
	return s.truncateAt(pos)
}

// truncateAt cuts the .log at pos, a batch boundary, and fixes the writer's
// view of the segment by re-reading its headers.
func (s *segment) truncateAt(pos int64) error {
	if err := s.f.Truncate(pos); err != nil {
		return fmt.Errorf("partlog: %s: truncate: %w", s.logPath, err)
	}
	s.size.Store(pos)
	res, err := s.scan(false, math.MaxInt64, math.MaxInt64)
	if err != nil {
		return err
	}
	if res.badPos >= 0 {
		return fmt.Errorf("partlog: %s: position %d: %s", s.logPath, res.badPos, res.why)
	}
	s.adopt(res)
	next := s.next
	if err := s.idx.truncateTo(next); err != nil {
		return err
	}
	s.sinceIndex = 0
	if n := s.idx.n.Load(); n > 0 {
		last, err := s.idx.entry(n - 1)
		if err != nil {
			return err
		}
		s.sinceIndex = pos - last.pos
	} else {
		s.sinceIndex = pos
	}
	return nil
}

// adopt takes the next offset and largest timestamp from a scan.
func (s *segment) adopt(res scanResult) {
	s.next = s.base
	if n := len(res.batches); n > 0 {
		s.next = res.batches[n-1].NextOffset()
	}
	m := int64(-1)
	for _, h := range res.batches {
		m = max(m, h.MaxTimestamp)
	}
	s.maxTimestamp.Store(m)
}
