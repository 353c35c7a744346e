package partlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
)

// scrubChunk is how much a scrub reads at a time: its memory, and the unit
// its pace is told of.
const scrubChunk = 1 << 20

// Damage is what a scrub found wrong in a log: damage that still parses,
// which Open does not look for in sealed segments (it reads their headers
// only) and a crash cannot explain: a flipped bit, a wrong checkpoint.
type Damage struct {
	// File is the damaged file, Position the byte in it where the damage
	// starts (0 for a checkpoint).
	File     string
	Position int64
	// Offset is where the good log ends: every batch below it was
	// verified. Cutting the log there (TruncateTo) drops the damage; an
	// Offset below the log start empties the log.
	Offset int64
	Why    string
	// Index: only an index is wrong; the batches are good up to Offset
	// and maybe beyond, but a read through the index may not find them.
	Index bool
}

func (d *Damage) String() string {
	return fmt.Sprintf("%s: position %d (the log is good below offset %d): %s", d.File, d.Position, d.Offset, d.Why)
}

// ScrubResult is what Scrub read and found.
type ScrubResult struct {
	Segments int
	Bytes    int64
	// Damage is the first damage found, nil if none.
	Damage *Damage
}

// Scrub verifies the sealed segments, oldest first, reading every byte
// (Kafka has no such check; it is what the background scrub runs): each
// batch's framing (batchLength, magic 2), its CRC-32C, its header fields,
// offsets that start at the segment's base and run on with no gap from
// batch to batch and segment to segment, each index entry at a batch that
// starts at its offset, and the log start at the base of a segment (this
// log moves it only to one: retention, a follower starting afresh). It
// stops at the first damage. The active segment is left to the readers:
// it is being written.
//
// pace, if not nil, is told of every chunk read before the next (at most
// 1 MiB): it bounds the scrub's rate, and its error stops the scrub. A
// scrub runs beside appends and reads; a segment that retention or a
// truncation removes meanwhile is skipped. Errors are I/O errors and the
// log's closing, not damage.
func (l *Log) Scrub(ctx context.Context, pace func(ctx context.Context, n int64) error) (ScrubResult, error) {
	l.rw.RLock()
	if l.closed {
		l.rw.RUnlock()
		return ScrubResult{}, fmt.Errorf("partlog: %s: %w", l.dir, ErrClosed)
	}
	segs := slices.Clone(l.segs)
	start := l.logStart.Load()
	l.rw.RUnlock()

	var res ScrubResult
	if !slices.ContainsFunc(segs, func(s *segment) bool { return s.base == start }) {
		res.Damage = &Damage{File: l.path(startCheckpointFile), Offset: segs[0].base,
			Why: fmt.Sprintf("the log start %d is not where a segment starts (the first starts at %d)", start, segs[0].base)}
		return res, nil
	}
	sc := scrubber{l: l, ctx: ctx, pace: pace, buf: make([]byte, scrubChunk)}
	for i, s := range segs[:len(segs)-1] {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		d, n, gone, err := sc.segment(s, segs[i+1].base)
		res.Bytes += n
		if err != nil {
			return res, err
		}
		if !gone {
			res.Segments++
		}
		if d != nil {
			res.Damage = d
			return res, nil
		}
	}
	return res, nil
}

// scrubber reads one log's sealed segments for Scrub.
type scrubber struct {
	l    *Log
	ctx  context.Context
	pace func(context.Context, int64) error
	buf  []byte
}

// sealed reports whether s is still a sealed segment followed by one at
// nextBase. The caller holds l.rw.
func (sc *scrubber) sealed(s *segment, nextBase int64) bool {
	i := slices.Index(sc.l.segs, s)
	return i >= 0 && i < len(sc.l.segs)-1 && sc.l.segs[i+1].base == nextBase
}

// read fills b from s at pos, under the readers' lock so that the file is
// not cut or closed meanwhile; gone when s is no longer the sealed segment
// it was when the scrub started (retention deleted it, a truncation cut
// it and made it the active one), or is no longer that long.
func (sc *scrubber) read(s *segment, nextBase int64, b []byte, pos int64) (gone bool, err error) {
	sc.l.rw.RLock()
	defer sc.l.rw.RUnlock()
	if sc.l.closed {
		return false, fmt.Errorf("partlog: %s: %w", sc.l.dir, ErrClosed)
	}
	if !sc.sealed(s, nextBase) || pos+int64(len(b)) > s.size.Load() {
		return true, nil
	}
	if _, err := s.f.ReadAt(b, pos); err != nil {
		return false, fmt.Errorf("partlog: %s: position %d: %w", s.logPath, pos, err)
	}
	return false, nil
}

// paced reads as read does, then tells the pace, outside the lock: a
// pace that waits holds no writer up.
func (sc *scrubber) paced(s *segment, nextBase int64, b []byte, pos int64) (gone bool, err error) {
	if gone, err := sc.read(s, nextBase, b, pos); gone || err != nil {
		return gone, err
	}
	if sc.pace != nil {
		return false, sc.pace(sc.ctx, int64(len(b)))
	}
	return false, nil
}

// segment verifies s, a sealed segment that the next one follows at
// nextBase, and returns the first damage, the bytes read, and whether s
// left the log (or was cut) meanwhile: then what was read of it is not
// judged.
func (sc *scrubber) segment(s *segment, nextBase int64) (*Damage, int64, bool, error) {
	d, n, gone, err := sc.verify(s, nextBase)
	if gone || ((d != nil || err != nil) && !errors.Is(err, ErrClosed)) {
		sc.l.rw.RLock()
		still := !sc.l.closed && sc.sealed(s, nextBase)
		sc.l.rw.RUnlock()
		if !still {
			return nil, n, true, nil
		}
	}
	return d, n, gone, err
}

// verify is segment's work.
func (sc *scrubber) verify(s *segment, nextBase int64) (*Damage, int64, bool, error) {
	size := s.size.Load()
	entries := s.idx.n.Load()
	var ie int64 // the next index entry to match
	entry := func() (indexEntry, bool, error) {
		if ie >= entries {
			return indexEntry{}, false, nil
		}
		e, err := s.idx.entry(ie)
		return e, err == nil, err
	}
	next := s.base
	var read int64
	damage := func(pos int64, format string, a ...any) *Damage {
		return &Damage{File: s.logPath, Position: pos, Offset: next, Why: fmt.Sprintf(format, a...)}
	}
	for pos := int64(0); pos < size; {
		if size-pos < batchHeaderSize {
			return damage(pos, "%d bytes left, less than a batch header", size-pos), read, false, nil
		}
		hb := sc.buf[:batchHeaderSize]
		if gone, err := sc.paced(s, nextBase, hb, pos); gone || err != nil {
			return nil, read, gone, err
		}
		h := parseHeader(hb)
		if h.Length < minBatchLength || pos+h.Size() > size {
			return damage(pos, "a batch of %d bytes does not fit in the %d left", h.Size(), size-pos), read, false, nil
		}
		if err := checkMagic(hb); err != nil {
			return damage(pos, "%v", err), read, false, nil
		}
		crcHeader := binary.BigEndian.Uint32(hb[offCRC:])
		crc := crc32.Checksum(hb[offAttrs:], castagnoli)
		read += batchHeaderSize
		for p := pos + batchHeaderSize; p < pos+h.Size(); {
			b := sc.buf[:min(int64(len(sc.buf)), pos+h.Size()-p)]
			if gone, err := sc.paced(s, nextBase, b, p); gone || err != nil {
				return nil, read, gone, err
			}
			crc = crc32.Update(crc, castagnoli, b)
			read += int64(len(b))
			p += int64(len(b))
		}
		var crcb [offAttrs]byte
		binary.BigEndian.PutUint32(crcb[offCRC:], crcHeader)
		if err := checkCRC(crcb[:], crc); err != nil {
			return damage(pos, "%v", err), read, false, nil
		}
		if err := checkHeader(h); err != nil {
			return damage(pos, "%v", err), read, false, nil
		}
		if h.BaseOffset != next {
			return damage(pos, "base offset %d, the batch before ends at %d", h.BaseOffset, next), read, false, nil
		}
		if h.LastOffset()-s.base > math.MaxInt32 {
			return damage(pos, "offset %d is too far from the segment's base", h.LastOffset()), read, false, nil
		}
		// Entries point at batches, in order: one that points before
		// this batch pointed between batches, or at a wrong offset.
		for {
			e, ok, err := entry()
			if err != nil {
				return nil, read, false, err
			}
			if !ok || e.pos > pos {
				break
			}
			if e.pos < pos || e.offset != h.BaseOffset {
				d := damage(pos, "index entry %d (offset %d, position %d) is not at a batch (offset %d at position %d)", ie, e.offset, e.pos, h.BaseOffset, pos)
				d.File, d.Index = s.idx.path, true
				return d, read, false, nil
			}
			ie++
		}
		next = h.NextOffset()
		pos += h.Size()
		if err := sc.ctx.Err(); err != nil {
			return nil, read, false, err
		}
	}
	if e, ok, err := entry(); err != nil || ok {
		if err != nil {
			return nil, read, false, err
		}
		d := damage(size, "index entry %d (offset %d, position %d) is past the segment's last batch", ie, e.offset, e.pos)
		d.File, d.Index = s.idx.path, true
		return d, read, false, nil
	}
	if next != nextBase {
		return damage(size, "the segment ends at offset %d, but the next starts at %d", next, nextBase), read, false, nil
	}
	return nil, read, false, nil
}
