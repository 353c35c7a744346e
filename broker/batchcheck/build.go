package batchcheck

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Build is one v2 batch of records as a producer without idempotence
// sends it (producer id -1, offsets and leader epoch zero for the log to
// assign), uncompressed, its first timestamp firstMs: the batch a broker
// writes itself (the group coordinator's records) and the benchmarks'.
// Each record's OffsetDelta is its index; its TimestampDelta64 is kept,
// and the largest makes the batch's max timestamp.
func Build(firstMs int64, records []kmsg.Record) []byte {
	var recs []byte
	var maxDelta int64
	for i := range records {
		r := records[i]
		r.OffsetDelta = int32(i)
		r.Length = 0
		r.Length = int32(len(r.AppendTo(nil)) - 1) // all after the one-byte varint of a zero Length
		recs = r.AppendTo(recs)
		maxDelta = max(maxDelta, r.TimestampDelta64)
	}
	rb := kmsg.RecordBatch{
		Length:          int32(headerSize - 12 + len(recs)), // the header less baseOffset and length
		Magic:           2,
		LastOffsetDelta: int32(len(records) - 1),
		FirstTimestamp:  firstMs,
		MaxTimestamp:    firstMs + maxDelta,
		ProducerID:      -1,
		ProducerEpoch:   -1,
		FirstSequence:   -1,
		NumRecords:      int32(len(records)),
		Records:         recs,
	}
	b := rb.AppendTo(nil)
	// The CRC-32C covers the batch from its attributes (byte 21) on.
	binary.BigEndian.PutUint32(b[crcAt:], crc32.Checksum(b[attrsAt:], castagnoli))
	return b
}
