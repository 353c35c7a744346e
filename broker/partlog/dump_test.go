package partlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// zstdBatch is s's batch with its records compressed with zstd, as a
// producer with compression.type=zstd sends it.
func zstdBatch(t *testing.T, s spec) []byte {
	t.Helper()
	b := makeBatch(t, s)
	recs, err := batchRecords(b, parseHeader(b))
	if err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint16(b[offAttrs:], uint16(parseHeader(b).Attributes|4))
	out, err := rebuildBatch(nil, b, parseHeader(b), recs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReadSegment reads a segment of three batches (the second
// compressed) whole, and damaged as kafka-dump-log meets segments: cut in
// a header or in a batch, a length no batch has (framing: the batches
// before are read, then ErrSegmentDamaged names the position), and a
// flipped byte (the batch is passed invalid, and reading goes on).
func TestReadSegment(t *testing.T) {
	b1 := makeBatch(t, spec{records: 3, base: 0, ts: 1000})
	b2 := zstdBatch(t, spec{records: 2, base: 3, ts: 2000, pid: 7, pepoch: 1, seq: 10})
	b3 := makeBatch(t, spec{records: 1, base: 5, ts: 3000})
	seg := append(append(bytes.Clone(b1), b2...), b3...)
	p2, p3 := int64(len(b1)), int64(len(b1)+len(b2))

	type seen struct {
		pos     int64
		valid   bool
		codec   string
		records []string // offset:key:value
	}
	for _, tt := range []struct {
		name    string
		data    []byte
		want    []seen
		wantErr string // "": none; else ErrSegmentDamaged and this text
	}{
		{"Whole", seg, []seen{
			{0, true, "none", []string{"0:k:aaaaaaaaaaaaaaaa", "1:k:bbbbbbbbbbbbbbbb", "2:k:cccccccccccccccc"}},
			{p2, true, "zstd", []string{"3:k:aaaaaaaaaaaaaaaa", "4:k:bbbbbbbbbbbbbbbb"}},
			{p3, true, "none", []string{"5:k:aaaaaaaaaaaaaaaa"}},
		}, ""},
		{"CutInAHeader", seg[:p3+20], []seen{{0, true, "none", nil}, {p2, true, "zstd", nil}},
			fmt.Sprintf("position %d: 20 bytes left, less than a batch header", p3)},
		{"CutInABatch", seg[:p3+int64(len(b3))-1], []seen{{0, true, "none", nil}, {p2, true, "zstd", nil}},
			fmt.Sprintf("position %d: a batch of %d bytes, %d left in the file", p3, len(b3), len(b3)-1)},
		{"ZeroLength", func() []byte {
			d := bytes.Clone(seg)
			binary.BigEndian.PutUint32(d[p2+8:], 0)
			return d
		}(), []seen{{0, true, "none", nil}}, fmt.Sprintf("position %d: batchLength 0, under a batch's 49", p2)},
		{"Magic1", func() []byte {
			d := bytes.Clone(seg)
			d[offMagic] = 1
			return d
		}(), []seen{{0, false, "none", nil}, {p2, true, "zstd", nil}, {p3, true, "none", nil}}, ""},
		{"FlippedByte", func() []byte {
			d := bytes.Clone(seg)
			d[p3-1] ^= 0xff
			return d
		}(), []seen{{0, true, "none", nil}, {p2, false, "zstd", nil}, {p3, true, "none", nil}}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []seen
			err := ReadSegment(bytes.NewReader(tt.data), int64(len(tt.data)), func(b SegmentBatch) error {
				s := seen{pos: b.Position, valid: b.Err == nil, codec: b.Codec()}
				if b.Err == nil && tt.name == "Whole" {
					recs, err := b.Records()
					if err != nil {
						return err
					}
					for _, r := range recs {
						s.records = append(s.records, fmt.Sprintf("%d:%s:%s", r.Offset, r.Key, r.Value))
					}
				}
				if b.Err != nil && !errors.Is(b.Err, ErrCorruptBatch) && !(errors.Is(b.Err, ErrInvalidBatch) && b.Magic == 1) {
					t.Errorf("batch at %d (magic %d): %v, want ErrCorruptBatch, or ErrInvalidBatch for magic 1", b.Position, b.Magic, b.Err)
				}
				got = append(got, s)
				return nil
			})
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("batches %v, want %v", got, tt.want)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("ReadSegment: %v", err)
			case tt.wantErr != "" && (!errors.Is(err, ErrSegmentDamaged) || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("ReadSegment: %v, want ErrSegmentDamaged with %q", err, tt.wantErr)
			}
		})
	}
}

// TestSegmentBatch_Fields: the header fields kafka-dump-log prints, read
// from an idempotent producer's batch.
func TestSegmentBatch_Fields(t *testing.T) {
	b := makeBatch(t, spec{records: 4, base: 10, ts: 5000, pid: 42, pepoch: 3, seq: 7, epoch: 2})
	var got SegmentBatch
	if err := ReadSegment(bytes.NewReader(b), int64(len(b)), func(sb SegmentBatch) error { got = sb; return nil }); err != nil {
		t.Fatal(err)
	}
	h := got.Header
	if h.BaseOffset != 10 || h.LastOffset() != 13 || h.RecordsCount != 4 || h.ProducerID != 42 || h.ProducerEpoch != 3 ||
		h.BaseSequence != 7 || h.LastSequence() != 10 || h.PartitionLeaderEpoch != 2 || h.MaxTimestamp != 5003 ||
		got.Transactional() || got.Control() || got.LogAppendTime() || got.Codec() != "none" || got.Err != nil || got.Magic != 2 ||
		got.CRC != binary.BigEndian.Uint32(b[offCRC:]) {
		t.Errorf("batch %+v (crc %d), want base 10, last 13, 4 records, producer 42/3, sequences 7-10, epoch 2, max timestamp 5003, valid", h, got.CRC)
	}
}

func TestReadIndex(t *testing.T) {
	entry := func(rel, pos uint32) []byte {
		var b [indexEntrySize]byte
		binary.BigEndian.PutUint32(b[0:], rel)
		binary.BigEndian.PutUint32(b[4:], pos)
		return b[:]
	}
	join := func(es ...[]byte) []byte { return bytes.Join(es, nil) }
	for _, tt := range []struct {
		name    string
		data    []byte
		want    string
		wantErr string
	}{
		{"Empty", nil, "[]", ""},
		{"Entries", join(entry(5, 4100), entry(9, 8300)), "[{105 4100} {109 8300}]", ""},
		{"TornEntry", join(entry(5, 4100), entry(9, 8300)[:5]), "[]", "13 bytes, not a whole number of 8-byte entries"},
		{"OutOfOrder", join(entry(9, 4100), entry(5, 8300)), "[{109 4100}]", "entry 1 (offset 105, position 8300) does not follow entry 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadIndex(bytes.NewReader(tt.data), 100)
			if fmt.Sprint(got) != tt.want && !(len(got) == 0 && tt.want == "[]") {
				t.Errorf("entries %v, want %s", got, tt.want)
			}
			if (tt.wantErr == "") != (err == nil) || err != nil && (!errors.Is(err, ErrSegmentDamaged) || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("ReadIndex: %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestSegmentBase(t *testing.T) {
	for _, tt := range []struct {
		name   string
		base   int64
		suffix string
		ok     bool
	}{
		{"00000000000000000042.log", 42, ".log", true},
		{"00000000000000001000.index", 1000, ".index", true},
		{"00000000000000000042.log.cleaned", 0, "", false},
		{"42.log", 0, "", false},
		{"leader-epoch-checkpoint", 0, "", false},
	} {
		base, suffix, ok := SegmentBase(tt.name)
		if base != tt.base || suffix != tt.suffix || ok != tt.ok {
			t.Errorf("SegmentBase(%q) = %d, %q, %t; want %d, %q, %t", tt.name, base, suffix, ok, tt.base, tt.suffix, tt.ok)
		}
	}
}
