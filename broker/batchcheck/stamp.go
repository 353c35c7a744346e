package batchcheck

import (
	"encoding/binary"
	"hash/crc32"
)

// maxTimestampAt is where a v2 batch header holds its max timestamp.
const maxTimestampAt = 35

// StampLogAppendTime makes b, one whole v2 batch that Check accepted, a
// LogAppendTime batch stamped now (Unix milliseconds), in place, as Kafka's
// LogValidator does for a LogAppendTime topic: the timestamp-type bit of
// the attributes set, the max timestamp now, the CRC computed again. A
// consumer reads now as the timestamp of every record in the batch.
func StampLogAppendTime(b []byte, now int64) {
	attrs := binary.BigEndian.Uint16(b[attrsAt:])
	binary.BigEndian.PutUint16(b[attrsAt:], attrs|logAppendTime)
	binary.BigEndian.PutUint64(b[maxTimestampAt:], uint64(now))
	binary.BigEndian.PutUint32(b[crcAt:], crc32.Checksum(b[attrsAt:], castagnoli))
}
