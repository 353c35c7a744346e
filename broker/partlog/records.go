package partlog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kgo"
)

// record is what the cleaner reads of one record of a batch.
type record struct {
	offset    int64
	timestamp int64 // CreateTime: the batch's base timestamp and the record's delta
	// key is nil for a record without one (a null key).
	key []byte
	// tombstone: the value is null (a delete marker).
	tombstone bool
	// value is nil for a tombstone; headers are the bytes after it (the
	// header count and headers), for the dump.
	value, headers []byte
	// raw is the whole record as stored, its length varint included.
	raw []byte
}

// batchRecords decodes the records of batch b (header h), decompressing
// them if need be: offsets, keys, whether each is a tombstone, and their
// bytes. Records of a compacted batch may be fewer than its offsets.
func batchRecords(b []byte, h BatchHeader) ([]record, error) {
	recs := b[batchHeaderSize:]
	if codec := h.Attributes & attrCodecMask; codec != 0 && h.RecordsCount > 0 {
		var err error
		recs, err = decompressor.Decompress(recs, kgo.CompressionCodecType(codec))
		if err != nil {
			return nil, fmt.Errorf("%w: decompressing the records: %v", ErrCorruptBatch, err)
		}
	}
	out := make([]record, 0, h.RecordsCount)
	for i := int32(0); i < h.RecordsCount; i++ {
		length, n := binary.Varint(recs)
		if n <= 0 || length < 1 || int64(len(recs)-n) < length {
			return nil, fmt.Errorf("%w: record %d does not fit in the batch", ErrInvalidBatch, i)
		}
		raw := recs[:int64(n)+length]
		body := recs[n:len(raw)]
		recs = recs[len(raw):]
		fields := body[1:] // after the attributes byte
		var vals [3]int64  // timestamp delta, offset delta, key length
		for j := range vals {
			v, m := binary.Varint(fields)
			if m <= 0 {
				return nil, fmt.Errorf("%w: record %d: a bad varint", ErrInvalidBatch, i)
			}
			vals[j], fields = v, fields[m:]
		}
		r := record{offset: h.BaseOffset + vals[1], timestamp: h.BaseTimestamp + vals[0], raw: raw}
		if k := vals[2]; k >= 0 {
			if k > int64(len(fields)) {
				return nil, fmt.Errorf("%w: record %d: its key runs past it", ErrInvalidBatch, i)
			}
			r.key, fields = fields[:k:k], fields[k:]
		}
		vlen, m := binary.Varint(fields)
		if m <= 0 {
			return nil, fmt.Errorf("%w: record %d: a bad value length", ErrInvalidBatch, i)
		}
		r.tombstone = vlen < 0
		if fields = fields[m:]; !r.tombstone {
			if vlen > int64(len(fields)) {
				return nil, fmt.Errorf("%w: record %d: its value runs past it", ErrInvalidBatch, i)
			}
			r.value, fields = fields[:vlen:vlen], fields[vlen:]
		}
		r.headers = fields
		out = append(out, r)
	}
	return out, nil
}

// compressors recompress a cleaned batch's records with the codec they
// came in: one for each of Kafka's codecs, at kgo's default levels.
var compressors = func() map[int16]kgo.Compressor {
	m := map[int16]kgo.Compressor{}
	for codec, c := range map[int16]kgo.CompressionCodec{1: kgo.GzipCompression(), 2: kgo.SnappyCompression(), 3: kgo.Lz4Compression(), 4: kgo.ZstdCompression()} {
		comp, err := kgo.DefaultCompressor(c)
		if err != nil {
			panic(err) // kgo's own codecs always build
		}
		m[codec] = comp
	}
	return m
}()

// rebuildBatch writes a batch with the header of b (h) and only the records
// kept, in place of the original's: its base offset and last offset delta,
// its epoch, producer fields and base timestamp stay (followers, the index
// and the producer state depend on them); the record count, length and CRC
// are new, and so is the max timestamp of a CreateTime batch: the kept
// records' largest, as Kafka's cleaner writes it (a ListOffsets for the
// largest timestamp finds its record). Kept records are recompressed with
// the batch's codec; a batch with none left is an empty batch,
// uncompressed, as Kafka writes one.
func rebuildBatch(dst, b []byte, h BatchHeader, kept []record) ([]byte, error) {
	var raw []byte
	for _, r := range kept {
		raw = append(raw, r.raw...)
	}
	attrs := h.Attributes
	codec := attrs & attrCodecMask
	payload := raw
	switch {
	case len(kept) == 0:
		attrs &^= attrCodecMask
	case codec != 0:
		var buf bytes.Buffer
		out, used := compressors[codec].Compress(&buf, raw)
		if int16(used) != codec {
			return nil, fmt.Errorf("partlog: recompressing a cleaned batch (codec %d) failed", codec)
		}
		payload = out
	}
	start := len(dst)
	dst = append(dst, b[:batchHeaderSize]...)
	dst = append(dst, payload...)
	nb := dst[start:]
	be := binary.BigEndian
	be.PutUint32(nb[8:], uint32(len(nb)-logOverhead))
	be.PutUint16(nb[offAttrs:], uint16(attrs))
	be.PutUint32(nb[57:], uint32(len(kept)))
	if attrs&attrLogAppendTime == 0 && len(kept) > 0 {
		m := kept[0].timestamp
		for _, r := range kept[1:] {
			m = max(m, r.timestamp)
		}
		be.PutUint64(nb[35:], uint64(m))
	}
	stampCRC(nb)
	return dst, nil
}

// stampCRC writes the CRC-32C of batch b into its header.
func stampCRC(b []byte) {
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttrs:], castagnoli))
}
