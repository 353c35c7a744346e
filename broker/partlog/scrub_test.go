package partlog

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestScrub_FindsDamageThatParses: a log that opens (its sealed segments'
// headers are whole) but holds damage Open does not read for (a flipped
// bit in a payload, a wrong index entry, a wrong log start) is found by
// Scrub, which names the file and the position and says where the good log
// ends; cutting the log there leaves a log that scrubs clean and reads
// whole. (Damage Open reads for, offsets out of line or a bad active
// segment, is refused there: recovery_test.go.)
func TestScrub_FindsDamageThatParses(t *testing.T) {
	batch := int64(len(makeBatch(t, spec{value: recValue})))
	// 8 batches in segments of three: 0-2, 3-5 sealed, 6-7 active.
	for _, tc := range []struct {
		name       string
		damage     func(t *testing.T, dir string)
		wantFile   string
		wantPos    int64
		wantOffset int64
		says       string
		index      bool
	}{
		{name: "a good log"},
		{name: "a flipped bit in a sealed segment's payload", damage: func(t *testing.T, dir string) {
			corrupt(t, segPath(dir, 3), batch+100)
		}, wantFile: segmentName(3, logSuffix), wantPos: batch, wantOffset: 4, says: "CRC-32C"},
		{name: "a flipped bit in the first batch's records", damage: func(t *testing.T, dir string) {
			corrupt(t, segPath(dir, 0), batch-1)
		}, wantFile: segmentName(0, logSuffix), wantPos: 0, wantOffset: 0, says: "CRC-32C"},
		{name: "a flipped attribute bit (inside the CRC)", damage: func(t *testing.T, dir string) {
			corrupt(t, segPath(dir, 0), 2*batch+offAttrs+1)
		}, wantFile: segmentName(0, logSuffix), wantPos: 2 * batch, wantOffset: 2, says: "CRC-32C"},
		{name: "a bad magic", damage: func(t *testing.T, dir string) {
			corrupt(t, segPath(dir, 3), offMagic)
		}, wantFile: segmentName(3, logSuffix), wantPos: 0, wantOffset: 3, says: "magic"},
		{name: "an index entry between batches", damage: func(t *testing.T, dir string) {
			putAt(t, filepath.Join(dir, segmentName(3, indexSuffix)), 4, binary.BigEndian.AppendUint32(nil, uint32(batch+1)))
		}, wantFile: segmentName(3, indexSuffix), wantPos: 2 * batch, wantOffset: 5, says: "is not at a batch", index: true},
		{name: "an index entry at the wrong offset", damage: func(t *testing.T, dir string) {
			putAt(t, filepath.Join(dir, segmentName(0, indexSuffix)), 8, binary.BigEndian.AppendUint32(nil, 3))
		}, wantFile: segmentName(0, indexSuffix), wantPos: 2 * batch, wantOffset: 2, says: "index entry 1 (offset 3", index: true},
		{name: "a log start inside a segment", damage: func(t *testing.T, dir string) {
			if err := writeOffsetCheckpoint(filepath.Join(dir, startCheckpointFile), 4); err != nil {
				t.Fatal(err)
			}
		}, wantFile: startCheckpointFile, wantPos: 0, wantOffset: 0, says: "the log start 4 is not where a segment starts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := Config{SegmentBytes: 3 * batch, IndexIntervalBytes: 1}
			l := openLog(t, dir, cfg)
			for i := 0; i < 8; i++ {
				mustAppend(t, l, spec{pid: 7, seq: int32(i), value: recValue}, 1)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if tc.damage != nil {
				tc.damage(t, dir)
			}
			l = openLog(t, dir, cfg) // the damage still parses: Open takes it
			var paced int64
			res, err := l.Scrub(context.Background(), func(_ context.Context, n int64) error { paced += n; return nil })
			if err != nil {
				t.Fatalf("Scrub: %v", err)
			}
			if tc.says == "" {
				if res.Damage != nil {
					t.Fatalf("Scrub found %v in a good log", res.Damage)
				}
				if res.Segments != 2 || res.Bytes != 6*batch {
					t.Fatalf("Scrub read %d segments, %d bytes; want 2, %d", res.Segments, res.Bytes, 6*batch)
				}
				if paced != res.Bytes {
					t.Fatalf("pace was told of %d bytes, the scrub read %d", paced, res.Bytes)
				}
				return
			}
			d := res.Damage
			if d == nil {
				t.Fatalf("Scrub found nothing; want %q", tc.says)
			}
			if filepath.Base(d.File) != tc.wantFile || d.Position != tc.wantPos || d.Offset != tc.wantOffset || d.Index != tc.index {
				t.Fatalf("Damage %v (index %v), want %s position %d offset %d (index %v)", d, d.Index, tc.wantFile, tc.wantPos, tc.wantOffset, tc.index)
			}
			if !strings.Contains(d.Why, tc.says) || strings.Contains(d.String(), "\n") {
				t.Fatalf("Damage %q does not say %q in one line", d, tc.says)
			}
			if tc.index {
				return
			}
			// The repair: cut the log where the good log ends.
			if err := l.TruncateTo(d.Offset); err != nil {
				t.Fatalf("TruncateTo(%d): %v", d.Offset, err)
			}
			if l.LogEndOffset() != d.Offset {
				t.Fatalf("log end %d after the cut, want %d", l.LogEndOffset(), d.Offset)
			}
			res, err = l.Scrub(context.Background(), nil)
			if err != nil || res.Damage != nil {
				t.Fatalf("Scrub after the cut: %v, %v", res.Damage, err)
			}
			readAll(t, l)
		})
	}
}

// TestScrub_PaceStops: the pace's error (a cancelled context, the rate
// limiter's) stops the scrub.
func TestScrub_PaceStops(t *testing.T) {
	batch := int64(len(makeBatch(t, spec{value: recValue})))
	l := openLog(t, t.TempDir(), Config{SegmentBytes: 3 * batch})
	for i := 0; i < 8; i++ {
		mustAppend(t, l, spec{value: recValue}, 1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	_, err := l.Scrub(ctx, func(ctx context.Context, _ int64) error { calls++; cancel(); return ctx.Err() })
	if err == nil || calls != 1 {
		t.Fatalf("Scrub: %v after %d paces, want the context's error after one", err, calls)
	}
}

// putAt writes b at pos of a file.
func putAt(t *testing.T, path string, pos int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, pos); err != nil {
		t.Fatal(err)
	}
}

// TestValidPrefix: a fetch answer's good batches before the first bad
// one, whatever is wrong with it.
func TestValidPrefix(t *testing.T) {
	a, b, c := makeBatch(t, spec{base: 0}), makeBatch(t, spec{base: 1}), makeBatch(t, spec{base: 2})
	flip := func(batch []byte, pos int) []byte {
		out := append([]byte(nil), batch...)
		out[pos] ^= 0x01
		return out
	}
	join := func(bs ...[]byte) []byte {
		var out []byte
		for _, x := range bs {
			out = append(out, x...)
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		records []byte
		want    int
		says    string
	}{
		{"all good", join(a, b, c), len(a) + len(b) + len(c), ""},
		{"empty", nil, 0, ""},
		{"a flipped bit in the second batch's records", join(a, flip(b, len(b)-1), c), len(a), "CRC-32C"},
		{"a flipped bit in the first", join(flip(a, offAttrs+1), b), 0, "CRC-32C"},
		{"a bad magic in the last", join(a, b, flip(c, offMagic)), len(a) + len(b), "magic"},
		{"a batch cut short", join(a, b[:len(b)-1]), len(a), "claims"},
		{"trailing bytes", join(a, []byte{1, 2, 3}), len(a), "trailing bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := ValidPrefix(tc.records)
			if n != tc.want {
				t.Fatalf("ValidPrefix = %d, want %d (err %v)", n, tc.want, err)
			}
			if tc.says == "" {
				if err != nil {
					t.Fatalf("ValidPrefix: %v, want no error", err)
				}
				return
			}
			wantErr(t, err, nil, tc.says)
		})
	}
}

// TestScrub_BesideTruncationAndRetention: a segment that a truncation cuts
// or retention deletes while the scrub reads it is skipped, not taken for
// damage, and the scrub's pace holds no writer up.
func TestScrub_BesideTruncationAndRetention(t *testing.T) {
	batch := int64(len(makeBatch(t, spec{value: recValue})))
	for _, tc := range []struct {
		name   string
		change func(l *Log) error
	}{
		{"a follower's truncation into the first segment", func(l *Log) error { return l.TruncateTo(1) }},
		{"retention of the first segment", func(l *Log) error { _, err := l.Retain(time.Now(), Retention{Bytes: 1}); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := openLog(t, t.TempDir(), Config{SegmentBytes: 3 * batch})
			for i := 0; i < 8; i++ {
				mustAppend(t, l, spec{value: recValue}, 1)
			}
			changed := false
			res, err := l.Scrub(context.Background(), func(context.Context, int64) error {
				if !changed {
					changed = true
					return tc.change(l) // a writer, from inside the pace
				}
				return nil
			})
			if err != nil || res.Damage != nil {
				t.Fatalf("Scrub beside %s: %v, %v; want no damage", tc.name, res.Damage, err)
			}
			readAll(t, l)
		})
	}
}
