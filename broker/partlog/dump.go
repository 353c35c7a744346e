package partlog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Reading a segment's files offline, for `keel partition dump` (Kafka's
// DumpLogSegments): the batches of a .log with the checks Open makes, and
// the entries of an .index, each file read from start to end, with no Log
// open.

// SegmentBase returns the base offset a segment file's name gives
// (00000000000000000042.log or .index) and its suffix.
func SegmentBase(name string) (base int64, suffix string, ok bool) {
	for _, suffix := range []string{logSuffix, indexSuffix} {
		if base, ok := parseSegmentName(name, suffix); ok {
			return base, suffix, true
		}
	}
	return 0, "", false
}

// SegmentBatch is one batch of a segment file as ReadSegment found it.
type SegmentBatch struct {
	// Position is where the batch starts in the file.
	Position int64
	Header   BatchHeader
	// Magic and CRC are what the header holds (a valid batch: magic 2, and
	// the CRC-32C of its bytes).
	Magic int8
	CRC   uint32
	// Err is why the batch is not valid (its CRC, magic or header fields,
	// as Open and the scrub check them); nil: valid.
	Err error
	// raw is the batch's bytes, in ReadSegment's buffer: valid only until
	// the call to each returns.
	raw []byte
}

// Codec is the batch's compression: none, gzip, snappy, lz4 or zstd.
func (b SegmentBatch) Codec() string {
	if c := b.Header.Attributes & attrCodecMask; int(c) < len(codecNames) {
		return codecNames[c]
	}
	return fmt.Sprintf("codec %d", b.Header.Attributes&attrCodecMask)
}

var codecNames = []string{"none", "gzip", "snappy", "lz4", "zstd"}

// Transactional and Control are the batch's attribute bits (which the log
// refuses on append, so a valid batch has neither).
func (b SegmentBatch) Transactional() bool { return b.Header.Attributes&attrTransactional != 0 }
func (b SegmentBatch) Control() bool       { return b.Header.Attributes&attrControl != 0 }

// LogAppendTime reports whether the batch's timestamps are the broker's
// (a LogAppendTime topic's) rather than the producer's.
func (b SegmentBatch) LogAppendTime() bool { return b.Header.Attributes&attrLogAppendTime != 0 }

// Record is one record of a batch.
type Record struct {
	Offset    int64
	Timestamp int64
	// Key and Value are nil when null (a value: a tombstone).
	Key, Value []byte
	HeaderKeys []string
}

// Records decodes the batch's records, decompressed, within the call to
// ReadSegment's each (they point into its buffer). A batch that is not
// valid is refused: its bytes are not to be trusted.
func (b SegmentBatch) Records() ([]Record, error) {
	if b.Err != nil {
		return nil, b.Err
	}
	recs, err := batchRecords(b.raw, b.Header)
	if err != nil {
		return nil, err
	}
	out := make([]Record, len(recs))
	for i, r := range recs {
		out[i] = Record{Offset: r.offset, Timestamp: r.timestamp, Key: r.key, Value: r.value}
		if b.LogAppendTime() {
			out[i].Timestamp = b.Header.MaxTimestamp
		}
		if out[i].HeaderKeys, err = headerKeys(r.headers); err != nil {
			return nil, fmt.Errorf("%w: record at offset %d: %v", ErrInvalidBatch, r.offset, err)
		}
	}
	return out, nil
}

// headerKeys reads the keys of a record's headers: a count, then each
// header's key and value, lengths as varints.
func headerKeys(b []byte) ([]string, error) {
	n, m := binary.Varint(b)
	if m <= 0 || n < 0 {
		return nil, errors.New("a bad header count")
	}
	b = b[m:]
	keys := make([]string, 0, min(n, int64(len(b))))
	for i := int64(0); i < n; i++ {
		var kv [2][]byte
		for j := range kv {
			l, m := binary.Varint(b)
			if m <= 0 || int64(len(b)-m) < max(l, 0) {
				return nil, fmt.Errorf("header %d runs past the record", i)
			}
			if l >= 0 {
				kv[j] = b[m : m+int(l)]
				b = b[m+int(l):]
			} else {
				b = b[m:]
			}
		}
		keys = append(keys, string(kv[0]))
	}
	return keys, nil
}

// ErrSegmentDamaged is the error ReadSegment stops with where the file no
// longer holds whole batches: a batch that does not fit, or a length no
// batch can have. Nothing after it can be read as batches.
var ErrSegmentDamaged = errors.New("the segment is damaged")

// ReadSegment reads the batches of a segment file of size bytes from r, in
// order, and calls each with every one, valid or not. A batch whose
// framing holds but whose CRC or fields do not is passed with its Err, and
// reading goes on (as kafka-dump-log prints isvalid: false); where the
// framing breaks (a batch that does not fit in the file, a length no batch
// can have) it stops with ErrSegmentDamaged, wrapped with the position and
// what was wrong.
func ReadSegment(r io.Reader, size int64, each func(SegmentBatch) error) error {
	br := bufio.NewReaderSize(r, 1<<20)
	var buf []byte
	for pos := int64(0); pos < size; {
		if size-pos < batchHeaderSize {
			return fmt.Errorf("%w: position %d: %d bytes left, less than a batch header (%d)", ErrSegmentDamaged, pos, size-pos, batchHeaderSize)
		}
		hb, err := br.Peek(batchHeaderSize)
		if err != nil {
			return fmt.Errorf("position %d: %w", pos, err)
		}
		h := parseHeader(hb)
		switch {
		case h.Length < minBatchLength:
			return fmt.Errorf("%w: position %d: batchLength %d, under a batch's %d", ErrSegmentDamaged, pos, h.Length, minBatchLength)
		case h.Size() > size-pos:
			return fmt.Errorf("%w: position %d: a batch of %d bytes, %d left in the file", ErrSegmentDamaged, pos, h.Size(), size-pos)
		}
		if int64(cap(buf)) < h.Size() {
			buf = make([]byte, h.Size())
		}
		b := buf[:h.Size()]
		if _, err := io.ReadFull(br, b); err != nil {
			return fmt.Errorf("position %d: %w", pos, err)
		}
		sb := SegmentBatch{Position: pos, Header: h, Magic: int8(b[offMagic]), CRC: binary.BigEndian.Uint32(b[offCRC:]), raw: b}
		sb.Err = checkFields(b, h)
		if err := each(sb); err != nil {
			return err
		}
		pos += h.Size()
	}
	return nil
}

// IndexEntry is one entry of an .index: a batch's base offset and its
// position in the .log.
type IndexEntry struct {
	Offset, Position int64
}

// ReadIndex reads the entries of the .index of the segment based at base.
// A file whose size is not a whole number of entries is refused, naming
// the size; so is an entry that does not rise from the one before.
func ReadIndex(r io.Reader, base int64) ([]IndexEntry, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if len(b)%indexEntrySize != 0 {
		return nil, fmt.Errorf("%w: %d bytes, not a whole number of %d-byte entries", ErrSegmentDamaged, len(b), indexEntrySize)
	}
	out := make([]IndexEntry, 0, len(b)/indexEntrySize)
	for i := 0; i < len(b); i += indexEntrySize {
		e := IndexEntry{
			Offset:   base + int64(int32(binary.BigEndian.Uint32(b[i:]))),
			Position: int64(int32(binary.BigEndian.Uint32(b[i+4:]))),
		}
		if n := len(out); n > 0 && (e.Offset <= out[n-1].Offset || e.Position <= out[n-1].Position) {
			return out, fmt.Errorf("%w: entry %d (offset %d, position %d) does not follow entry %d (offset %d, position %d)",
				ErrSegmentDamaged, n, e.Offset, e.Position, n-1, out[n-1].Offset, out[n-1].Position)
		}
		out = append(out, e)
	}
	return out, nil
}
