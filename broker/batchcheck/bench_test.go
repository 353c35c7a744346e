package batchcheck

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// BenchmarkCheck: what validating costs per produced batch, by codec: a
// batch of 1,000 records of 1 KiB (text-like values, which compress about
// 4:1), about 1 MiB before compression. The CRC alone is the cost of the
// check the log had before (crc).
func BenchmarkCheck(b *testing.B) {
	var raw []byte
	for i := range 1000 {
		r := kmsg.Record{OffsetDelta: int32(i), Value: bytes.Repeat(fmt.Appendf(nil, "%08d: the quick brown fox; ", i*7919), 64)[:1024]}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		raw = r.AppendTo(raw)
	}
	for _, codec := range []int16{codecNone, codecGzip, codecSnappy, codecLz4, codecZstd} {
		bt := batch(codec, 1000, compress(b, codec, raw), nil)
		b.Run(codecName(codec), func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if err := Check(bt, Rules{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("crc", func(b *testing.B) {
		bt := batch(codecNone, 1000, raw, nil)
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			_ = crc32.Checksum(bt[attrsAt:], castagnoli)
		}
	})
}
