package batchcheck

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Reason is why a batch was refused: the label of the listener's metric.
type Reason string

// The reasons, each with the Kafka error a refusal for it carries.
const (
	// ReasonFraming: not exactly one whole v2 batch (CORRUPT_MESSAGE when
	// shorter than a header, else INVALID_RECORD).
	ReasonFraming Reason = "framing"
	// ReasonMagic: a magic other than 2 (INVALID_RECORD, as Kafka answers
	// Produce v3 and later).
	ReasonMagic Reason = "magic"
	// ReasonCRC: the CRC-32C does not match (CORRUPT_MESSAGE).
	ReasonCRC Reason = "crc"
	// ReasonHeader: offsets, counts or producer fields that do not agree
	// (INVALID_RECORD).
	ReasonHeader Reason = "header"
	// ReasonControl: a control or transactional batch, which no client of
	// Keel may write (INVALID_RECORD).
	ReasonControl Reason = "control"
	// ReasonTimestamp: a producer that set the LogAppendTime bit, or a
	// record's CreateTime outside the topic's bounds (INVALID_TIMESTAMP).
	ReasonTimestamp Reason = "timestamp"
	// ReasonCodec: a compression codec that is not one of Kafka's, or zstd
	// in a request too old for it (UNSUPPORTED_COMPRESSION_TYPE).
	ReasonCodec Reason = "codec"
	// ReasonCompression: compressed records that do not decompress
	// (CORRUPT_MESSAGE).
	ReasonCompression Reason = "compression"
	// ReasonRecords: records that do not parse, or more or fewer than the
	// header says (INVALID_RECORD).
	ReasonRecords Reason = "records"
	// ReasonTooLarge: records that decompress past
	// Rules.MaxUncompressedBytes (MESSAGE_TOO_LARGE).
	ReasonTooLarge Reason = "too_large"
)

// Reasons lists every reason, for metrics that start at zero.
var Reasons = []Reason{ReasonFraming, ReasonMagic, ReasonCRC, ReasonHeader, ReasonControl,
	ReasonTimestamp, ReasonCodec, ReasonCompression, ReasonRecords, ReasonTooLarge}

// Error is a refusal: the Kafka error for the partition, the reason, and,
// when one record is at fault, its index in the batch (Kafka's RecordError
// batch_index).
type Error struct {
	Code   *kerr.Error
	Reason Reason
	// Record is the index of the record at fault, -1 for the batch as a
	// whole.
	Record int
	// Detail says what was wrong, in one line.
	Detail string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code.Message, e.Detail) }

// Unwrap lets errors.Is find the Kafka error.
func (e *Error) Unwrap() error { return e.Code }

func refuse(code *kerr.Error, reason Reason, format string, args ...any) *Error {
	return &Error{Code: code, Reason: reason, Record: -1, Detail: fmt.Sprintf(format, args...)}
}

// Rules are what a batch is checked against besides its own bytes.
type Rules struct {
	// MaxUncompressedBytes bounds the records of a compressed batch once
	// decompressed: reading stops past it (MESSAGE_TOO_LARGE).
	// DefaultMaxUncompressedBytes if 0.
	MaxUncompressedBytes int64
	// NoZstd refuses zstd, as Kafka does in Produce requests before v7.
	NoZstd bool
	// Timestamps, when set, refuses a record whose timestamp (but -1, no
	// timestamp) is more than BeforeMax milliseconds before Now or
	// AfterMax after it (a CreateTime topic's
	// message.timestamp.before.max.ms and .after.max.ms; Kafka's
	// LogValidator.validateTimestamp).
	Timestamps bool
	// RequireKeys refuses a record without a key (null): a compacted
	// topic's (cleanup.policy=compact), whose cleaner keeps records by
	// key (Kafka's "Compacted topic cannot accept message without key").
	RequireKeys bool
	// Now is the leader's clock, in Unix milliseconds.
	Now                 int64
	BeforeMax, AfterMax int64
}

// DefaultMaxUncompressedBytes is 64 MiB: 64 times Kafka's default
// message.max.bytes, more than a producer's batch of compressible records
// holds (a producer bounds batches by their size before compression, or
// by an estimate of it after), far less than the gigabyte a 1 MiB zip bomb
// inflates to.
const DefaultMaxUncompressedBytes = 64 << 20

// The v2 batch header (DefaultRecordBatch).
const (
	headerSize  = 61 // baseOffset .. recordsCount
	logOverhead = 12 // baseOffset and batchLength, which batchLength does not count
	crcAt       = 17
	attrsAt     = 21 // the CRC covers from here to the end

	codecMask     = 0x07
	logAppendTime = 0x08
	transactional = 0x10
	control       = 0x20

	codecNone, codecZstd = 0, 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Check validates b, the records of one partition of a Produce request, in
// Kafka's order: one whole v2 batch, its CRC, then its header's fields,
// then every record, decompressed if need be. nil means the log may append
// it; a refusal is an *Error.
func Check(b []byte, rules Rules) error {
	if len(b) < headerSize {
		return refuse(kerr.CorruptMessage, ReasonFraming, "%d bytes, shorter than a batch header (%d)", len(b), headerSize)
	}
	var h kmsg.RecordBatch
	if n := logOverhead + int64(int32(binary.BigEndian.Uint32(b[8:]))); n != int64(len(b)) {
		// Kafka takes exactly one batch per partition of a produce request.
		return refuse(kerr.InvalidRecord, ReasonFraming, "batchLength says %d bytes, the partition has %d: not exactly one batch", n, len(b))
	}
	if err := h.ReadFrom(b); err != nil {
		return refuse(kerr.InvalidRecord, ReasonFraming, "the batch header does not parse: %v", err)
	}
	if h.Magic != 2 {
		return refuse(kerr.InvalidRecord, ReasonMagic, "magic %d: only record batches with magic 2 are taken", h.Magic)
	}
	if got := crc32.Checksum(b[attrsAt:], castagnoli); got != uint32(h.CRC) {
		return refuse(kerr.CorruptMessage, ReasonCRC, "CRC-32C %08x, the header says %08x", got, uint32(h.CRC))
	}
	if err := checkHeader(&h, rules); err != nil {
		return err
	}
	return checkRecords(&h, rules)
}

// checkHeader checks the header's fields as Kafka's validateBatch and
// analyzeAndValidateRecords do for a client's batch.
func checkHeader(h *kmsg.RecordBatch, rules Rules) error {
	switch {
	case h.FirstOffset != 0:
		return refuse(kerr.InvalidRecord, ReasonHeader, "base offset %d: a producer's batch starts at 0", h.FirstOffset)
	case h.LastOffsetDelta < 0:
		return refuse(kerr.InvalidRecord, ReasonHeader, "invalid offset range: last offset delta %d", h.LastOffsetDelta)
	case h.NumRecords <= 0:
		return refuse(kerr.InvalidRecord, ReasonHeader, "invalid records count %d", h.NumRecords)
	case int64(h.NumRecords) != int64(h.LastOffsetDelta)+1:
		return refuse(kerr.InvalidRecord, ReasonHeader, "last offset delta %d does not match the records count %d", h.LastOffsetDelta, h.NumRecords)
	case h.Attributes&control != 0:
		return refuse(kerr.InvalidRecord, ReasonControl, "clients may not write control records")
	case h.Attributes&transactional != 0:
		return refuse(kerr.InvalidRecord, ReasonControl, "transactional batches are not served")
	case h.Attributes&logAppendTime != 0:
		return refuse(kerr.InvalidTimestamp, ReasonTimestamp, "a producer may not set the timestamp type to LogAppendTime")
	case h.ProducerID >= 0 && (h.ProducerEpoch < 0 || h.FirstSequence < 0):
		return refuse(kerr.InvalidRecord, ReasonHeader, "producer id %d with epoch %d and base sequence %d", h.ProducerID, h.ProducerEpoch, h.FirstSequence)
	case h.ProducerID < -1:
		return refuse(kerr.InvalidRecord, ReasonHeader, "producer id %d", h.ProducerID)
	}
	switch c := h.Attributes & codecMask; {
	case c > codecZstd:
		return refuse(kerr.UnsupportedCompressionType, ReasonCodec, "compression codec %d is none of Kafka's", c)
	case c == codecZstd && rules.NoZstd:
		return refuse(kerr.UnsupportedCompressionType, ReasonCodec, "zstd needs Produce v7 or later")
	}
	return nil
}
