package batchcheck

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"runtime"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// records encodes n records, the ith with offset delta deltas(i), a key
// and a header on every other one.
func records(n int, delta func(int) int32) []byte {
	var out []byte
	for i := range n {
		r := kmsg.Record{OffsetDelta: delta(i), TimestampDelta64: int64(i), Value: []byte("value")}
		if i%2 == 1 {
			r.Key = []byte("key")
			r.Headers = []kmsg.Header{{Key: "h", Value: []byte("v")}}
		}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		out = r.AppendTo(out)
	}
	return out
}

func inOrder(i int) int32 { return int32(i) }

// compress compresses raw with codec, as a producer would.
func compress(t testing.TB, codec int16, raw []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch codec {
	case codecNone:
		return raw
	case codecGzip:
		w = gzip.NewWriter(&buf)
	case codecLz4:
		w = lz4.NewWriter(&buf)
	case codecZstd:
		z, err := zstd.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w = z
	case codecSnappy:
		return s2.EncodeSnappy(nil, raw)
	default:
		t.Fatalf("codec %d", codec)
	}
	if _, err := w.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// zstdWindow is raw in one zstd frame, as one raw block, whose header
// asks for a window of 1<<log bytes (as a streaming encoder at a level
// with that window writes it).
func zstdWindow(log uint, raw []byte) []byte {
	// Magic; a descriptor with no content size, not single segment; the
	// window's exponent (log - 10) and no mantissa.
	out := []byte{0x28, 0xb5, 0x2f, 0xfd, 0, byte(log-10) << 3}
	hdr := uint32(len(raw))<<3 | 1 // the last block, raw
	out = append(out, byte(hdr), byte(hdr>>8), byte(hdr>>16))
	return append(out, raw...)
}

// xerial frames raw in blocks of 32 KiB, as the Java client's snappy does.
func xerial(raw []byte) []byte {
	out := append(append([]byte{}, xerialMagic...), 0, 0, 0, 1, 0, 0, 0, 1)
	for len(raw) > 0 {
		n := min(len(raw), 32<<10)
		block := s2.EncodeSnappy(nil, raw[:n])
		out = binary.BigEndian.AppendUint32(out, uint32(len(block)))
		out = append(out, block...)
		raw = raw[n:]
	}
	return out
}

// batch is a v2 batch of count records whose (maybe compressed) bytes
// are body, with a good CRC after edit changes the header.
func batch(codec int16, count int32, body []byte, edit func(*kmsg.RecordBatch)) []byte {
	b := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2, Attributes: codec, LastOffsetDelta: count - 1,
		FirstTimestamp: 1700000000000, MaxTimestamp: 1700000000000 + int64(count) - 1,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: count, Records: body,
	}
	if edit != nil {
		edit(&b)
	}
	b.Length = int32(len(b.AppendTo(nil)) - logOverhead)
	raw := b.AppendTo(nil)
	b.CRC = int32(crc32.Checksum(raw[attrsAt:], castagnoli))
	return b.AppendTo(nil)
}

// withCRC recomputes the CRC of b after its bytes were changed.
func withCRC(b []byte) []byte {
	binary.BigEndian.PutUint32(b[crcAt:], crc32.Checksum(b[attrsAt:], castagnoli))
	return b
}

func TestCheck(t *testing.T) {
	good := records(5, inOrder)
	garbage := bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 16)
	idempotent := func(b *kmsg.RecordBatch) { b.ProducerID, b.ProducerEpoch, b.FirstSequence = 7, 0, 0 }
	tests := []struct {
		name   string
		batch  []byte
		rules  Rules
		code   *kerr.Error // nil: taken
		reason Reason
		record int // the record at fault, when code is set
	}{
		{name: "none", batch: batch(codecNone, 5, good, nil)},
		{name: "gzip", batch: batch(codecGzip, 5, compress(t, codecGzip, good), nil)},
		{name: "snappy, a raw block (librdkafka)", batch: batch(codecSnappy, 5, compress(t, codecSnappy, good), nil)},
		{name: "snappy, xerial framing (the Java client)", batch: batch(codecSnappy, 5, xerial(good), nil)},
		{name: "lz4", batch: batch(codecLz4, 5, compress(t, codecLz4, good), nil)},
		{name: "zstd", batch: batch(codecZstd, 5, compress(t, codecZstd, good), nil)},
		{name: "idempotent", batch: batch(codecNone, 5, good, idempotent)},
		{name: "a null key and value", batch: batch(codecNone, 1, nullRecord(), nil)},
		// LogValidatorTest.testCompactedTopicWithNullKey: a compacted
		// topic takes keyed records only, tombstones among them.
		{name: "a null key, compacted", batch: batch(codecNone, 1, nullRecord(), nil), rules: Rules{RequireKeys: true},
			code: kerr.InvalidRecord, reason: ReasonRecords, record: 0},
		{name: "a null key, compacted, gzip", batch: batch(codecGzip, 1, compress(t, codecGzip, nullRecord()), nil), rules: Rules{RequireKeys: true},
			code: kerr.InvalidRecord, reason: ReasonRecords, record: 0},
		{name: "a key and a tombstone, compacted", batch: batch(codecNone, 1, keyedTombstone(), nil), rules: Rules{RequireKeys: true}},

		// The frame and the header (UnifiedLog.analyzeAndValidateRecords,
		// ProduceRequest.validateRecords).
		{name: "shorter than a header", batch: []byte{0, 1, 2}, code: kerr.CorruptMessage, reason: ReasonFraming, record: -1},
		{name: "checkOnlyOneBatch", batch: append(batch(codecNone, 5, good, nil), batch(codecNone, 5, good, nil)...),
			code: kerr.InvalidRecord, reason: ReasonFraming, record: -1},
		{name: "magic 1", batch: withCRC(func() []byte { b := batch(codecNone, 5, good, nil); b[16] = 1; return b }()),
			code: kerr.InvalidRecord, reason: ReasonMagic, record: -1},
		{name: "a bad CRC", batch: func() []byte { b := batch(codecNone, 5, good, nil); b[len(b)-1] ^= 1; return b }(),
			code: kerr.CorruptMessage, reason: ReasonCRC, record: -1},
		{name: "a base offset other than 0", batch: batch(codecNone, 5, good, func(b *kmsg.RecordBatch) { b.FirstOffset = 3 }),
			code: kerr.InvalidRecord, reason: ReasonHeader, record: -1},
		{name: "testBatchWithoutRecordsNotAllowed", batch: batch(codecNone, 0, nil, nil),
			code: kerr.InvalidRecord, reason: ReasonHeader, record: -1},
		{name: "a last offset delta that disagrees with the count", batch: batch(codecNone, 5, good, func(b *kmsg.RecordBatch) { b.LastOffsetDelta = 3 }),
			code: kerr.InvalidRecord, reason: ReasonHeader, record: -1},
		{name: "testControlRecordsNotAllowedFromClients", batch: batch(codecNone, 5, good, func(b *kmsg.RecordBatch) { b.Attributes |= control }),
			code: kerr.InvalidRecord, reason: ReasonControl, record: -1},
		{name: "transactional", batch: batch(codecNone, 5, good, func(b *kmsg.RecordBatch) { idempotent(b); b.Attributes |= transactional }),
			code: kerr.InvalidRecord, reason: ReasonControl, record: -1},
		{name: "an invalid sequence with a producer id", batch: batch(codecNone, 5, good, func(b *kmsg.RecordBatch) { idempotent(b); b.FirstSequence = -1 }),
			code: kerr.InvalidRecord, reason: ReasonHeader, record: -1},
		{name: "a LogAppendTime batch from a producer", batch: batch(codecNone, 5, good, func(b *kmsg.RecordBatch) { b.Attributes |= logAppendTime }),
			code: kerr.InvalidTimestamp, reason: ReasonTimestamp, record: -1},
		{name: "codec 5", batch: batch(5, 5, good, nil), code: kerr.UnsupportedCompressionType, reason: ReasonCodec, record: -1},
		{name: "zstd with a 16 MiB window", batch: batch(codecZstd, 5, zstdWindow(24, good), nil),
			code: kerr.UnsupportedCompressionType, reason: ReasonCodec, record: -1},
		{name: "zstd with an 8 MiB window", batch: batch(codecZstd, 5, zstdWindow(23, good), nil)},
		{name: "testZStdCompressedWithUnavailableIBPVersion", batch: batch(codecZstd, 5, compress(t, codecZstd, good), nil),
			rules: Rules{NoZstd: true}, code: kerr.UnsupportedCompressionType, reason: ReasonCodec, record: -1},

		// The records (DefaultRecord.readFrom, LogValidator).
		{name: "a gzip flag over raw records", batch: batch(codecGzip, 5, good, nil),
			code: kerr.CorruptMessage, reason: ReasonCompression, record: -1},
		{name: "an lz4 flag over gzip records", batch: batch(codecLz4, 5, compress(t, codecGzip, good), nil),
			code: kerr.CorruptMessage, reason: ReasonCompression, record: -1},
		{name: "a zstd flag over raw records", batch: batch(codecZstd, 5, good, nil),
			code: kerr.CorruptMessage, reason: ReasonCompression, record: -1},
		{name: "a snappy flag over raw records", batch: batch(codecSnappy, 5, good, nil),
			code: kerr.CorruptMessage, reason: ReasonCompression, record: -1},
		{name: "gzip cut short", batch: batch(codecGzip, 5, compress(t, codecGzip, good)[:30], nil),
			code: kerr.CorruptMessage, reason: ReasonCompression, record: -1},
		{name: "garbage records with a good CRC", batch: batch(codecNone, 5, garbage, nil),
			code: kerr.InvalidRecord, reason: ReasonRecords, record: 0},
		{name: "gzipped garbage records", batch: batch(codecGzip, 5, compress(t, codecGzip, garbage), nil),
			code: kerr.InvalidRecord, reason: ReasonRecords, record: 0},
		{name: "a count that says more records than there are", batch: batch(codecNone, 6, good, nil),
			code: kerr.InvalidRecord, reason: ReasonRecords, record: 5},
		{name: "a count that says fewer records than there are", batch: batch(codecNone, 4, good, nil),
			code: kerr.InvalidRecord, reason: ReasonRecords, record: -1},
		{name: "a compressed count that says fewer records", batch: batch(codecZstd, 4, compress(t, codecZstd, good), nil),
			code: kerr.InvalidRecord, reason: ReasonRecords, record: -1},
		{name: "testValidationOfBatchesWithNonSequentialInnerOffsets", batch: batch(codecGzip, 5, compress(t, codecGzip, records(5, func(i int) int32 { return int32(2 * i) })), nil),
			code: kerr.InvalidRecord, reason: ReasonRecords, record: 1},
		{name: "testInvalidRecordExceptionHasBatchIndex", batch: batch(codecNone, 3, append(append(records(1, inOrder), 2, 0), records(1, inOrder)...), nil),
			code: kerr.InvalidRecord, reason: ReasonRecords, record: 1},
		{name: "a record longer than its fields", batch: batch(codecNone, 1, recordEdit(func(b []byte) []byte { b[0] += 2; return append(b, 0) }), nil),
			code: kerr.InvalidRecord, reason: ReasonRecords, record: 0},
		{name: "a value past the record's length", batch: batch(codecNone, 1, recordEdit(func(b []byte) []byte { b[len(b)-7] = 40; return b }), nil),
			code: kerr.InvalidRecord, reason: ReasonRecords, record: 0},
		{name: "a key length of -2", batch: batch(codecNone, 1, recordEdit(func(b []byte) []byte { b[4] = 3; return b }), nil),
			code: kerr.InvalidRecord, reason: ReasonRecords, record: 0},
		{name: "a null header key", batch: batch(codecNone, 1, recordEdit(func(b []byte) []byte { b[0] += 6; b[len(b)-1] = 2; return append(b, 1, 2, 'v') }), nil),
			code: kerr.InvalidRecord, reason: ReasonRecords, record: 0},
		{name: "a null header value", batch: batch(codecNone, 1, recordEdit(func(b []byte) []byte { b[0] += 6; b[len(b)-1] = 2; return append(b, 2, 'k', 1) }), nil)},
		{name: "a negative header count", batch: batch(codecNone, 1, recordEdit(func(b []byte) []byte { b[len(b)-1] = 1; return b }), nil),
			code: kerr.InvalidRecord, reason: ReasonRecords, record: 0},
		{name: "records past the bound", batch: batch(codecGzip, 1, compress(t, codecGzip, bigRecord(1<<20)), nil),
			rules: Rules{MaxUncompressedBytes: 64 << 10}, code: kerr.MessageTooLarge, reason: ReasonTooLarge, record: -1},
		{name: "xerial snappy past the bound", batch: batch(codecSnappy, 1, xerial(bigRecord(1<<20)), nil),
			rules: Rules{MaxUncompressedBytes: 64 << 10}, code: kerr.MessageTooLarge, reason: ReasonTooLarge, record: -1},
		{name: "a snappy block that says it holds more than snappy can", batch: batch(codecSnappy, 1, append(binary.AppendUvarint(nil, 64<<20), 0), nil),
			code: kerr.CorruptMessage, reason: ReasonCompression, record: -1},
		{name: "a raw snappy block past the bound", batch: batch(codecSnappy, 1, compress(t, codecSnappy, bigRecord(1<<20)), nil),
			rules: Rules{MaxUncompressedBytes: 64 << 10}, code: kerr.MessageTooLarge, reason: ReasonTooLarge, record: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(tt.batch, tt.rules)
			if tt.code == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want a refusal with %v", err, tt.code)
			}
			if !errors.Is(err, tt.code) || e.Reason != tt.reason || e.Record != tt.record {
				t.Fatalf("got %v (reason %s, record %d), want %v (reason %s, record %d)", err, e.Reason, e.Record, tt.code, tt.reason, tt.record)
			}
			t.Log(err)
		})
	}
}

// keyedTombstone is one record with a key and a null value.
func keyedTombstone() []byte {
	r := kmsg.Record{Key: []byte("k")}
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	return r.AppendTo(nil)
}

// nullRecord is one record with a null key and a null value.
func nullRecord() []byte {
	// Attributes, timestamp delta, offset delta, key -1 and value -1
	// (zigzag: 1), no headers.
	body := []byte{0, 0, 0, 1, 1, 0}
	return append([]byte{byte(len(body) << 1)}, body...)
}

// recordEdit is one record "value" with a null key and no headers, as
// edit changes it: [length, attrs, ts, off, key len, value len, v, a, l, u, e, headers].
func recordEdit(edit func([]byte) []byte) []byte {
	body := append([]byte{0, 0, 0, 1, 10}, "value"...)
	body = append(body, 0)
	return edit(append([]byte{byte(len(body) << 1)}, body...))
}

// bigRecord is one record with a value of n zeros.
func bigRecord(n int) []byte {
	r := kmsg.Record{Value: make([]byte, n)}
	r.Length = int32(len(r.AppendTo(nil)) - 1) // the length's own varint, 0, is one byte
	return r.AppendTo(nil)
}

// TestCheck_ZipBombIsBounded: a batch of a few hundred KiB of zstd, gzip
// or lz4 that inflates to 256 MiB (48 MiB) of one record's zeros is
// refused once past the bound (32 MiB here), having held far less than
// the bound in memory: decompression streams. What it holds is the
// codec's own (lz4: two buffers of the frame's block size, 4 MiB here).
func TestCheck_ZipBombIsBounded(t *testing.T) {
	const bound = 32 << 20
	for _, codec := range []int16{codecZstd, codecGzip, codecLz4} {
		t.Run(codecName(codec), func(t *testing.T) {
			n := int64(256 << 20)
			if codec != codecZstd {
				n = 48 << 20 // gzip and lz4 compress zeros slowly
			}
			bomb := batch(codec, 1, bombRecords(t, codec, n), nil)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			err := Check(bomb, Rules{MaxUncompressedBytes: bound})
			runtime.ReadMemStats(&after)
			if !errors.Is(err, kerr.MessageTooLarge) {
				t.Fatalf("a %d-byte batch that inflates to %d bytes: %v, want MESSAGE_TOO_LARGE", len(bomb), n, err)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d-byte batch, %d bytes inflated: %v; %d bytes allocated checking it", len(bomb), n, err, alloc)
			if alloc > bound/2 {
				t.Fatalf("checking it allocated %d bytes, more than half the bound: decompression does not stream", alloc)
			}
		})
	}
}

// bombRecords compresses, as a stream, one record whose value is n zeros.
func bombRecords(t *testing.T, codec int16, n int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch codec {
	case codecGzip:
		w, _ = gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	case codecLz4:
		w = lz4.NewWriter(&buf)
	case codecZstd:
		z, err := zstd.NewWriter(&buf, zstd.WithWindowSize(1<<20))
		if err != nil {
			t.Fatal(err)
		}
		w = z
	}
	// length, attributes, timestamp delta, offset delta, null key, value
	// length; the value; no headers.
	fields := binary.AppendVarint([]byte{0, 0, 0, 1}, n)
	length := int64(len(fields)) + n + 1
	head := append(binary.AppendVarint(nil, length), fields...)
	zeros := make([]byte, 1<<20)
	if _, err := w.Write(head); err != nil {
		t.Fatal(err)
	}
	for left := n; left > 0; left -= int64(len(zeros)) {
		if _, err := w.Write(zeros[:min(left, int64(len(zeros)))]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
