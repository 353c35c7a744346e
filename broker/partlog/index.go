package partlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"
)

// indexEntrySize is one (relative offset i32, position i32) entry of an
// .index file, big-endian, as Kafka's OffsetIndex writes them.
const indexEntrySize = 8

// indexEntry maps the base offset of a batch to its position in the .log.
type indexEntry struct {
	offset int64 // absolute
	pos    int64
}

// offsetIndex is a segment's sparse .index: an entry every
// Config.IndexIntervalBytes of batches, keyed by the batch's base offset.
// Entries are looked up in the file itself (page cache), not kept in memory,
// so a broker's memory does not grow with the data it holds. One writer
// appends; readers see only the first n entries, which never change.
type offsetIndex struct {
	path    string
	created bool // there was no file: it must be rebuilt if its log is not empty
	f       *os.File
	base    int64
	n       atomic.Int64
	max     int64 // entries the index may hold before the segment rolls
}

func openIndex(path string, base, maxEntries int64) (*offsetIndex, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	created := false
	if errors.Is(err, fs.ErrNotExist) {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		created = true
	}
	if err != nil {
		return nil, err
	}
	return &offsetIndex{path: path, created: created, f: f, base: base, max: maxEntries}, nil
}

func (x *offsetIndex) entry(i int64) (indexEntry, error) {
	var b [indexEntrySize]byte
	if _, err := x.f.ReadAt(b[:], i*indexEntrySize); err != nil {
		return indexEntry{}, fmt.Errorf("partlog: %s: entry %d: %w", x.path, i, err)
	}
	return indexEntry{
		offset: x.base + int64(int32(binary.BigEndian.Uint32(b[0:]))),
		pos:    int64(int32(binary.BigEndian.Uint32(b[4:]))),
	}, nil
}

// lookup returns the last entry at or below offset, or the segment's start.
func (x *offsetIndex) lookup(offset int64) (indexEntry, error) {
	lo, hi := int64(0), x.n.Load() // the answer is in [lo-1, hi)
	found := indexEntry{offset: x.base, pos: 0}
	for lo < hi {
		mid := lo + (hi-lo)/2
		e, err := x.entry(mid)
		if err != nil {
			return indexEntry{}, err
		}
		if e.offset <= offset {
			found, lo = e, mid+1
		} else {
			hi = mid
		}
	}
	return found, nil
}

func (x *offsetIndex) full() bool { return x.n.Load() >= x.max }

func encodeEntry(b []byte, base int64, e indexEntry) {
	binary.BigEndian.PutUint32(b[0:], uint32(int32(e.offset-base)))
	binary.BigEndian.PutUint32(b[4:], uint32(int32(e.pos)))
}

func (x *offsetIndex) append(e indexEntry) error {
	var b [indexEntrySize]byte
	encodeEntry(b[:], x.base, e)
	n := x.n.Load()
	if _, err := x.f.WriteAt(b[:], n*indexEntrySize); err != nil {
		return fmt.Errorf("partlog: %s: %w", x.path, err)
	}
	x.n.Store(n + 1)
	return nil
}

// reset replaces every entry with es (a rebuild after a scan).
func (x *offsetIndex) reset(es []indexEntry) error {
	b := make([]byte, len(es)*indexEntrySize)
	for i, e := range es {
		encodeEntry(b[i*indexEntrySize:], x.base, e)
	}
	x.n.Store(0)
	if err := x.f.Truncate(0); err != nil {
		return fmt.Errorf("partlog: %s: %w", x.path, err)
	}
	if _, err := x.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("partlog: %s: %w", x.path, err)
	}
	x.n.Store(int64(len(es)))
	return nil
}

// truncateTo drops the entries at or above offset.
func (x *offsetIndex) truncateTo(offset int64) error {
	n := x.n.Load()
	keep := n
	for keep > 0 {
		e, err := x.entry(keep - 1)
		if err != nil {
			return err
		}
		if e.offset < offset {
			break
		}
		keep--
	}
	if keep == n {
		return nil
	}
	x.n.Store(keep)
	if err := x.f.Truncate(keep * indexEntrySize); err != nil {
		return fmt.Errorf("partlog: %s: %w", x.path, err)
	}
	return nil
}

// load reads an existing index and checks it against its log (Kafka's
// sanityCheck, and more: every entry). A bad index is not an error to the
// caller, only a reason to rebuild it from the log.
//
// An index with no entries for a log longer than minIndexed must have lost
// them (it was missing, or never written before a crash).
func (x *offsetIndex) load(logSize, minIndexed int64) (ok bool, why string, err error) {
	fi, err := x.f.Stat()
	if err != nil {
		return false, "", fmt.Errorf("partlog: %s: %w", x.path, err)
	}
	if x.created && logSize > 0 {
		return false, "missing", nil
	}
	if fi.Size() == 0 && logSize > minIndexed {
		return false, fmt.Sprintf("missing or empty, for a log of %d bytes", logSize), nil
	}
	if fi.Size()%indexEntrySize != 0 {
		return false, fmt.Sprintf("size %d is not a multiple of %d", fi.Size(), indexEntrySize), nil
	}
	b, err := os.ReadFile(x.path)
	if err != nil {
		return false, "", fmt.Errorf("partlog: %s: %w", x.path, err)
	}
	prev := indexEntry{offset: x.base - 1, pos: -1}
	for i := 0; i+indexEntrySize <= len(b); i += indexEntrySize {
		e := indexEntry{
			offset: x.base + int64(int32(binary.BigEndian.Uint32(b[i:]))),
			pos:    int64(int32(binary.BigEndian.Uint32(b[i+4:]))),
		}
		if e.offset <= prev.offset || e.pos <= prev.pos || e.pos >= logSize {
			return false, fmt.Sprintf("entry %d (offset %d, position %d) is out of order or past the log's %d bytes", i/indexEntrySize, e.offset, e.pos, logSize), nil
		}
		prev = e
	}
	x.n.Store(int64(len(b) / indexEntrySize))
	return true, "", nil
}
