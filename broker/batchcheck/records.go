package batchcheck

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// errTooLarge ends a read past Rules.MaxUncompressedBytes.
var errTooLarge = errors.New("past the bound on uncompressed records")

// timestampError is a record's timestamp outside the bounds.
type timestampError struct{ msg string }

func (e timestampError) Error() string { return e.msg }

// codecError is a failure of the decompressor, not of the records.
type codecError struct{ err error }

func (e codecError) Error() string { return e.err.Error() }

func (e codecError) Unwrap() error { return e.err }

// codecReader marks its decompressor's failures, a stream cut short among
// them, so that they are told from records that end early.
type codecReader struct{ r io.Reader }

func (c codecReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil && err != io.EOF {
		err = codecError{err}
	}
	return n, err
}

// bounded reads at most max bytes of r, then fails with errTooLarge.
type bounded struct {
	r    io.Reader
	left int64 // max + 1 - read: 0 once a byte past max was read
}

func (b *bounded) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	if b.left <= 0 && err == nil {
		err = errTooLarge
	}
	return n, err
}

var bufs = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 16<<10) }}

// checkRecords reads every record of h, decompressing them as a stream,
// and checks each as Kafka's DefaultRecord.readFrom and LogValidator do:
// its length covers exactly its fields, the lengths inside it are -1 or
// more and fit, its offset delta is its index; and there are exactly
// NumRecords of them, with nothing after the last.
func checkRecords(h *kmsg.RecordBatch, rules Rules) error {
	max := rules.MaxUncompressedBytes
	if max <= 0 {
		max = DefaultMaxUncompressedBytes
	}
	var src io.Reader = bytes.NewReader(h.Records)
	codec := h.Attributes & codecMask
	if codec != codecNone {
		d, err := openCodec(codec, h.Records, max)
		if err != nil {
			return refusal(-1, codec, codecError{err})
		}
		defer d.Close()
		src = &bounded{r: codecReader{d}, left: max + 1}
	}
	br := bufs.Get().(*bufio.Reader)
	br.Reset(src)
	defer func() {
		br.Reset(nil)
		bufs.Put(br)
	}()
	r := recordReader{br: br, base: h.FirstTimestamp, rules: &rules}
	for i := range int(h.NumRecords) {
		if err := r.record(i); err != nil {
			return refusal(i, codec, err)
		}
	}
	if _, err := br.ReadByte(); err != io.EOF {
		if err == nil {
			err = errors.New("bytes remain after the last record")
		}
		return refusal(-1, codec, fmt.Errorf("%d records read: %w", h.NumRecords, err))
	}
	return nil
}

// refusal turns a failure to read record i (-1: after the last) into the
// batch's refusal.
func refusal(i int, codec int16, err error) *Error {
	var ce codecError
	var te timestampError
	switch {
	case errors.As(err, &te):
		e := refuse(kerr.InvalidTimestamp, ReasonTimestamp, "record %d: %s", i, te.msg)
		e.Record = i
		return e
	case errors.Is(err, errTooLarge):
		return refuse(kerr.MessageTooLarge, ReasonTooLarge, "the records decompress (%s) to more than the bound", codecName(codec))
	case errors.Is(err, zstd.ErrWindowSizeExceeded):
		// Not damage, and not worth a retry: a producer compressing at a
		// level above 19, whose frames want 16 MiB or more of window.
		return refuse(kerr.UnsupportedCompressionType, ReasonCodec, "a zstd frame wants a window over %d MiB (a level above 19)", zstdMaxWindow>>20)
	case errors.As(err, &ce):
		return refuse(kerr.CorruptMessage, ReasonCompression, "the records do not decompress (%s): %v", codecName(codec), ce.err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		err = errors.New("the records end before the header's count")
	}
	e := refuse(kerr.InvalidRecord, ReasonRecords, "record %d: %v", i, err)
	if i < 0 {
		e.Detail = err.Error()
	}
	e.Record = i
	return e
}

// recordReader reads records from a stream, field by field, keeping only
// what is left of the current record's length: a record's bytes are never
// held.
type recordReader struct {
	br    *bufio.Reader
	left  int64 // bytes of the current record not read yet
	base  int64 // the batch's first timestamp
	rules *Rules
	// nullKey: the last bytes field read was null.
	nullKey bool
}

// record reads and checks record i (Kafka's DefaultRecord layout: length,
// attributes, timestampDelta, offsetDelta, key, value, headers).
func (r *recordReader) record(i int) error {
	length, err := r.varint(math.MaxInt32)
	if err != nil {
		return err
	}
	if length <= 0 {
		return fmt.Errorf("length %d", length)
	}
	r.left = length
	if err := r.skip(1); err != nil { // attributes: none are defined for records
		return err
	}
	tsDelta, err := r.field(math.MaxInt64, "timestamp delta")
	if err != nil {
		return err
	}
	if err := r.checkTimestamp(r.base + tsDelta); err != nil {
		return err
	}
	delta, err := r.field(math.MaxInt32, "offset delta")
	if err != nil {
		return err
	}
	if delta != int64(i) {
		return fmt.Errorf("offset delta %d, want %d: inner offsets must count up from 0", delta, i)
	}
	if err := r.bytesField("key", -1); err != nil {
		return err
	}
	if r.rules.RequireKeys && r.nullKey {
		return errors.New("compacted topic cannot accept message without key")
	}
	if err := r.bytesField("value", -1); err != nil {
		return err
	}
	headers, err := r.field(math.MaxInt32, "header count")
	if err != nil {
		return err
	}
	if headers < 0 {
		return fmt.Errorf("header count %d", headers)
	}
	for j := range int(headers) {
		if err := r.bytesField("key", j); err != nil {
			return err
		}
		if err := r.bytesField("value", j); err != nil {
			return err
		}
	}
	if r.left != 0 {
		return fmt.Errorf("its length says %d bytes more than its fields hold", r.left)
	}
	return nil
}

// checkTimestamp refuses a timestamp outside the rules' bounds. The
// differences are taken unsigned: they fit, whatever the timestamp.
func (r *recordReader) checkTimestamp(ts int64) error {
	ru := r.rules
	if !ru.Timestamps || ts == -1 {
		return nil
	}
	if (ts < ru.Now && uint64(ru.Now)-uint64(ts) > uint64(ru.BeforeMax)) || (ts > ru.Now && uint64(ts)-uint64(ru.Now) > uint64(ru.AfterMax)) {
		return timestampError{fmt.Sprintf("timestamp %d is out of range: it must be within %d ms before and %d ms after the broker's clock, %d",
			ts, ru.BeforeMax, ru.AfterMax, ru.Now)}
	}
	return nil
}

// varint reads a zigzag varint of at most limit in magnitude, not counted
// in the record (its length).
func (r *recordReader) varint(limit int64) (int64, error) {
	var u uint64
	for shift := uint(0); ; shift += 7 {
		if shift >= 64 {
			return 0, errors.New("a varint is too long")
		}
		c, err := r.br.ReadByte()
		if err != nil {
			return 0, err
		}
		r.left--
		u |= uint64(c&0x7f) << shift
		if c < 0x80 {
			break
		}
	}
	v := int64(u>>1) ^ -int64(u&1)
	if v > limit || v < -limit-1 {
		return 0, fmt.Errorf("varint %d is out of range", v)
	}
	return v, nil
}

// field reads a varint inside the current record.
func (r *recordReader) field(limit int64, what string) (int64, error) {
	v, err := r.varint(limit)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	if r.left < 0 {
		return 0, fmt.Errorf("%s runs past the record's length", what)
	}
	return v, nil
}

// bytesField skips a length-prefixed field of the record, -1 being null:
// its key or value, or header's (header >= 0).
func (r *recordReader) bytesField(what string, header int) error {
	name := func() string {
		if header < 0 {
			return what
		}
		return fmt.Sprintf("header %d's %s", header, what)
	}
	n, err := r.varint(math.MaxInt32)
	r.nullKey = n == -1
	switch {
	case err != nil:
		return fmt.Errorf("%s length: %w", name(), err)
	case r.left < 0:
		return fmt.Errorf("%s length runs past the record's length", name())
	case n < -1, n == -1 && header >= 0 && what == "key":
		// Kafka refuses a null header key too.
		return fmt.Errorf("%s length %d", name(), n)
	case n > r.left:
		return fmt.Errorf("%s of %d bytes runs past the record's length (%d left)", name(), n, r.left)
	case n > 0:
		return r.skip(n)
	}
	return nil
}

// skip reads past n bytes of the record.
func (r *recordReader) skip(n int64) error {
	if n > r.left {
		return errors.New("the record's fields run past its length")
	}
	for n > 0 {
		step := int(min(n, math.MaxInt32))
		got, err := r.br.Discard(step)
		r.left -= int64(got)
		n -= int64(got)
		if err != nil {
			return err
		}
	}
	return nil
}
