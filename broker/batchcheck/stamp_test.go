package batchcheck

import (
	"errors"
	"hash/crc32"
	"math"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCheck_Timestamps: LogValidatorTest's testInvalidCreateTimeNonCompressedV2,
// testInvalidCreateTimeCompressedV2 and testInvalidTimestampExceptionHasBatchIndex
// in Keel's terms: a CreateTime record more than before.max.ms before the
// leader's clock, or after.max.ms after it, is INVALID_TIMESTAMP naming its
// index, compressed or not; -1 (no timestamp) and the bounds themselves pass.
func TestCheck_Timestamps(t *testing.T) {
	const now = 1_700_000_000_000
	rules := Rules{Timestamps: true, Now: now, BeforeMax: 1000, AfterMax: 500}
	// Three records at first, first+1, first+2 (records' deltas are i).
	tests := []struct {
		name      string
		first     int64
		codec     int16
		rules     Rules
		wantIndex int // -1: accepted
	}{
		{"within the bounds", now - 1000, codecNone, rules, -1},
		{"up to after.max.ms", now + 498, codecNone, rules, -1},
		{"the last record past after.max.ms", now + 499, codecNone, rules, 2},
		{"the first before before.max.ms", now - 1001, codecNone, rules, 0},
		{"compressed", now - 1001, codecZstd, rules, 0},
		{"no timestamp", -1, codecNone, rules, -1},
		{"bounds off", 0, codecNone, Rules{}, -1},
		{"Kafka's default before.max.ms takes any past", math.MinInt64 / 2, codecNone, Rules{Timestamps: true, Now: now, BeforeMax: math.MaxInt64, AfterMax: 3600000}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := records(3, inOrder)
			if tt.first == -1 {
				body = nil
				for i := range 3 {
					r := kmsg.Record{OffsetDelta: int32(i), TimestampDelta64: 0, Value: []byte("v")}
					r.Length = int32(len(r.AppendTo(nil)) - 1)
					body = r.AppendTo(body)
				}
			}
			b := batch(tt.codec, 3, compress(t, tt.codec, body), func(h *kmsg.RecordBatch) { h.FirstTimestamp = tt.first })
			err := Check(b, tt.rules)
			if tt.wantIndex < 0 {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Code != kerr.InvalidTimestamp || e.Reason != ReasonTimestamp || e.Record != tt.wantIndex {
				t.Fatalf("Check = %#v, want INVALID_TIMESTAMP at record %d", err, tt.wantIndex)
			}
		})
	}
}

// TestStampLogAppendTime: LogValidatorTest's testLogAppendTimeNonCompressedV2:
// the stamped batch has the LogAppendTime bit, the broker's time as its max
// timestamp, a good CRC, and its records unchanged.
func TestStampLogAppendTime(t *testing.T) {
	for _, codec := range []int16{codecNone, codecZstd} {
		b := batch(codec, 3, compress(t, codec, records(3, inOrder)), nil)
		if err := Check(b, Rules{}); err != nil {
			t.Fatal(err)
		}
		before := append([]byte(nil), b...)
		StampLogAppendTime(b, 1_700_000_000_123)
		var h kmsg.RecordBatch
		if err := h.ReadFrom(b); err != nil {
			t.Fatal(err)
		}
		if h.Attributes&logAppendTime == 0 || h.Attributes&codecMask != codec || h.MaxTimestamp != 1_700_000_000_123 {
			t.Fatalf("codec %d: attributes %#x, max timestamp %d", codec, h.Attributes, h.MaxTimestamp)
		}
		if got := crc32.Checksum(b[attrsAt:], castagnoli); got != uint32(h.CRC) {
			t.Fatalf("codec %d: CRC %08x, the header says %08x", codec, got, uint32(h.CRC))
		}
		if string(b[maxTimestampAt+8:]) != string(before[maxTimestampAt+8:]) {
			t.Fatalf("codec %d: the records changed", codec)
		}
	}
}
