package partlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
)

// The v2 record batch (Kafka's DefaultRecordBatch) as this package reads it.
// Only the header matters here: the records after it, maybe compressed, are
// stored and served exactly as received.
const (
	// batchHeaderSize is the fixed header: baseOffset .. recordsCount.
	batchHeaderSize = 61
	// logOverhead is baseOffset and batchLength, the part batchLength does
	// not count.
	logOverhead = 12
	// minBatchLength is the smallest batchLength: the header after it.
	minBatchLength = batchHeaderSize - logOverhead

	offEpoch = 12 // partitionLeaderEpoch, outside the CRC
	offMagic = 16
	offCRC   = 17
	offAttrs = 21 // the CRC covers from here to the end

	attrCodecMask     = 0x07
	attrTransactional = 0x10
	attrControl       = 0x20

	// NoProducerID is the producer id of a batch from a producer that is not
	// idempotent: no sequence checks.
	NoProducerID = -1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors a batch is refused with. Each comes wrapped with what was wrong.
var (
	// ErrCorruptBatch: the batch's CRC-32C does not match its bytes (Kafka's
	// CORRUPT_MESSAGE).
	ErrCorruptBatch = errors.New("corrupt record batch")
	// ErrInvalidBatch: the bytes are not one well-formed v2 record batch
	// (Kafka's INVALID_RECORD).
	ErrInvalidBatch = errors.New("invalid record batch")
	// ErrBatchTooLarge: the batch is over Config.MaxBatchBytes (Kafka's
	// MESSAGE_TOO_LARGE).
	ErrBatchTooLarge = errors.New("record batch too large")
)

// BatchHeader is the header of one v2 record batch.
type BatchHeader struct {
	BaseOffset           int64
	Length               int32 // batchLength: the batch's bytes after this field
	PartitionLeaderEpoch int32
	Attributes           int16
	LastOffsetDelta      int32
	BaseTimestamp        int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	RecordsCount         int32
}

// Size is the batch's size on disk and on the wire.
func (h BatchHeader) Size() int64 { return logOverhead + int64(h.Length) }

// LastOffset is the offset of the batch's last record.
func (h BatchHeader) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// NextOffset is the offset after the batch.
func (h BatchHeader) NextOffset() int64 { return h.LastOffset() + 1 }

// LastSequence is the sequence of the batch's last record. Sequences wrap
// from math.MaxInt32 to 0, as Kafka's do.
func (h BatchHeader) LastSequence() int32 { return addSequence(h.BaseSequence, h.LastOffsetDelta) }

// Idempotent reports whether the batch comes from an idempotent producer.
func (h BatchHeader) Idempotent() bool { return h.ProducerID != NoProducerID }

func addSequence(seq, delta int32) int32 {
	if seq > math.MaxInt32-delta {
		return delta - (math.MaxInt32 - seq) - 1
	}
	return seq + delta
}

// parseHeader reads the fixed header from b, which holds at least
// batchHeaderSize bytes. It is read by hand rather than with
// kmsg.RecordBatch.ReadFrom, which wants the whole batch: recovery and reads
// look at headers without loading the records.
func parseHeader(b []byte) BatchHeader {
	be := binary.BigEndian
	return BatchHeader{
		BaseOffset:           int64(be.Uint64(b[0:])),
		Length:               int32(be.Uint32(b[8:])),
		PartitionLeaderEpoch: int32(be.Uint32(b[12:])),
		Attributes:           int16(be.Uint16(b[21:])),
		LastOffsetDelta:      int32(be.Uint32(b[23:])),
		BaseTimestamp:        int64(be.Uint64(b[27:])),
		MaxTimestamp:         int64(be.Uint64(b[35:])),
		ProducerID:           int64(be.Uint64(b[43:])),
		ProducerEpoch:        int16(be.Uint16(b[51:])),
		BaseSequence:         int32(be.Uint32(b[53:])),
		RecordsCount:         int32(be.Uint32(b[57:])),
	}
}

// checkBatch checks that b is exactly one whole, well-formed v2 batch with
// a good CRC (Kafka's LogValidator and DefaultRecordBatch.ensureValid) and
// returns its header.
func checkBatch(b []byte) (BatchHeader, error) {
	if len(b) < batchHeaderSize {
		return BatchHeader{}, fmt.Errorf("%w: %d bytes, shorter than a batch header (%d)", ErrInvalidBatch, len(b), batchHeaderSize)
	}
	h := parseHeader(b)
	if h.Length < minBatchLength {
		return h, fmt.Errorf("%w: batchLength %d is under %d", ErrInvalidBatch, h.Length, minBatchLength)
	}
	if h.Size() != int64(len(b)) {
		return h, fmt.Errorf("%w: batchLength %d says %d bytes, got %d", ErrInvalidBatch, h.Length, h.Size(), len(b))
	}
	if err := checkFields(b, h); err != nil {
		return h, err
	}
	return h, nil
}

// checkFields checks a batch whose length already fits: magic, CRC and the
// header fields that must agree.
func checkFields(b []byte, h BatchHeader) error {
	if err := checkMagic(b); err != nil {
		return err
	}
	if err := checkCRC(b, crc32.Checksum(b[offAttrs:], castagnoli)); err != nil {
		return err
	}
	return checkHeader(h)
}

// checkMagic checks the magic byte of a batch whose header is in b.
func checkMagic(b []byte) error {
	if m := int8(b[offMagic]); m != 2 {
		return fmt.Errorf("%w: magic %d, want 2", ErrInvalidBatch, m)
	}
	return nil
}

// checkCRC compares got, the CRC-32C of the batch's bytes from its
// attributes on, with the one in its header b.
func checkCRC(b []byte, got uint32) error {
	if want := binary.BigEndian.Uint32(b[offCRC:]); got != want {
		return fmt.Errorf("%w: CRC-32C %08x, header says %08x", ErrCorruptBatch, got, want)
	}
	return nil
}

// checkHeader checks the header fields that must agree. A batch the
// cleaner compacted holds fewer records than offsets, maybe none (Kafka's
// empty batch): a follower copies it, and recovery reads it, as it is.
func checkHeader(h BatchHeader) error {
	if h.LastOffsetDelta < 0 || h.RecordsCount < 0 || h.RecordsCount > h.LastOffsetDelta+1 {
		return fmt.Errorf("%w: %d records but lastOffsetDelta %d", ErrInvalidBatch, h.RecordsCount, h.LastOffsetDelta)
	}
	if c := h.Attributes & attrCodecMask; c > 4 {
		return fmt.Errorf("%w: unknown compression codec %d", ErrInvalidBatch, c)
	}
	if h.Attributes&(attrTransactional|attrControl) != 0 {
		return fmt.Errorf("%w: transactional and control batches are not supported", ErrInvalidBatch)
	}
	if h.BaseOffset < 0 {
		return fmt.Errorf("%w: base offset %d", ErrInvalidBatch, h.BaseOffset)
	}
	if h.Idempotent() && (h.ProducerID < 0 || h.ProducerEpoch < 0 || h.BaseSequence < 0) {
		return fmt.Errorf("%w: producer id %d, epoch %d, base sequence %d", ErrInvalidBatch, h.ProducerID, h.ProducerEpoch, h.BaseSequence)
	}
	return nil
}

// ValidPrefix returns the length of the run of whole, checked batches
// (CRC-32C, framing, header fields) at the start of records, a fetch
// answer's, and the error of the first batch past it, nil if every batch
// is good: a follower appends what its leader sent up to a damaged batch,
// and refuses the rest.
func ValidPrefix(records []byte) (int, error) {
	n := 0
	for n < len(records) {
		size, h, err := cutBatch(records[n:])
		if err != nil {
			return n, fmt.Errorf("batch at offset %d: %w", h.BaseOffset, err)
		}
		n += size
	}
	return n, nil
}

// splitBatches cuts records, a run of whole batches (a fetch response's
// records), into checked batches.
func splitBatches(records []byte) ([][]byte, []BatchHeader, error) {
	var bs [][]byte
	var hs []BatchHeader
	for len(records) > 0 {
		n, h, err := cutBatch(records)
		if err != nil {
			return nil, nil, fmt.Errorf("batch %d (offset %d): %w", len(bs), h.BaseOffset, err)
		}
		bs = append(bs, records[:n])
		hs = append(hs, h)
		records = records[n:]
	}
	return bs, hs, nil
}

// cutBatch checks the batch at the start of records, a run of batches, and
// returns its size and header.
func cutBatch(records []byte) (int, BatchHeader, error) {
	if len(records) < logOverhead {
		return 0, BatchHeader{}, fmt.Errorf("%w: %d trailing bytes", ErrInvalidBatch, len(records))
	}
	n := logOverhead + int64(int32(binary.BigEndian.Uint32(records[8:])))
	if n < batchHeaderSize || n > int64(len(records)) {
		return 0, BatchHeader{}, fmt.Errorf("%w: a batch claims %d bytes, %d left", ErrInvalidBatch, n, len(records))
	}
	h, err := checkBatch(records[:n])
	return int(n), h, err
}
