package partlog

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// kv is a test record: a nil key has none; a nil value is a tombstone.
type kv struct{ key, value []byte }

func rec(key, value string) kv { return kv{[]byte(key), []byte(value)} }

func tombstone(key string) kv { return kv{key: []byte(key)} }

// keyedBatch builds a v2 batch of recs compressed with codec, as a client
// would, from producer pid (0: not idempotent) at sequence seq.
func keyedBatch(t testing.TB, codec int16, ts int64, pid int64, seq int32, recs ...kv) []byte {
	t.Helper()
	var raw []byte
	for i, r := range recs {
		kr := kmsg.Record{TimestampDelta64: int64(i), OffsetDelta: int32(i), Key: r.key, Value: r.value}
		kr.Length = int32(len(kr.AppendTo(nil)) - 1)
		raw = kr.AppendTo(raw)
	}
	payload := raw
	if codec != 0 {
		var buf bytes.Buffer
		out, _ := compressors[codec].Compress(&buf, raw)
		payload = bytes.Clone(out)
	}
	rb := kmsg.RecordBatch{Magic: 2, Attributes: codec, LastOffsetDelta: int32(len(recs) - 1), FirstTimestamp: ts,
		MaxTimestamp: ts + int64(len(recs)-1), ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: int32(len(recs)), Records: payload}
	if pid != 0 {
		rb.ProducerID, rb.ProducerEpoch, rb.FirstSequence = pid, 0, seq
	}
	return makeBatchFrom(rb)
}

func appendKeyed(t testing.TB, l *Log, codec int16, ts int64, recs ...kv) AppendInfo {
	t.Helper()
	info, err := l.Append(keyedBatch(t, codec, ts, 0, 0, recs...), 0)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return info
}

// readRecords reads every batch from the log start to the log end, checks
// them (whole, CRC, offsets going on batch to batch), and returns their
// records and headers.
func readRecords(t testing.TB, l *Log) ([]record, []BatchHeader) {
	t.Helper()
	return readRecordsFrom(t, l, l.LogStartOffset())
}

func readRecordsFrom(t testing.TB, l *Log, from int64) ([]record, []BatchHeader) {
	t.Helper()
	var recs []record
	var hs []BatchHeader
	for off := from; off < l.LogEndOffset(); {
		res, err := l.Read(off, 64<<10)
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		bs, bhs, err := splitBatches(res.Records)
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		if len(bhs) == 0 {
			t.Fatalf("Read(%d) returned nothing below the log end %d", off, l.LogEndOffset())
		}
		for i, h := range bhs {
			if n := len(hs); n > 0 && hs[n-1].NextOffset() != h.BaseOffset {
				t.Fatalf("batch at %d follows one ending at %d", h.BaseOffset, hs[n-1].NextOffset())
			}
			rs, err := batchRecords(bs[i], h)
			if err != nil {
				t.Fatalf("batch at %d: %v", h.BaseOffset, err)
			}
			for _, r := range rs {
				if r.offset < h.BaseOffset || r.offset > h.LastOffset() {
					t.Fatalf("record at %d outside its batch [%d, %d]", r.offset, h.BaseOffset, h.LastOffset())
				}
				r.key, r.raw = bytes.Clone(r.key), bytes.Clone(r.raw)
				if r.offset >= from {
					recs = append(recs, r)
				}
			}
			hs = append(hs, h)
		}
		off = bhs[len(bhs)-1].NextOffset()
	}
	return recs, hs
}

// valueOf returns the value of a record read back.
func valueOf(t testing.TB, r record) []byte {
	t.Helper()
	var kr kmsg.Record
	if err := kr.ReadFrom(r.raw); err != nil {
		t.Fatalf("record at %d: %v", r.offset, err)
	}
	return kr.Value
}

func mustClean(t testing.TB, l *Log, now time.Time, c Compaction, upTo int64) Cleaned {
	t.Helper()
	res, err := l.Clean(now, c, upTo)
	if err != nil {
		t.Fatalf("Clean: %v", err)
	}
	return res
}

// TestClean_KeepsNewestPerKey: after a clean, every key's newest record
// is where it was, superseded ones below the bound are gone, the rest
// stays (LogCleanerTest's testCleanSegments).
func TestClean_KeepsNewestPerKey(t *testing.T) {
	l := openLog(t, t.TempDir(), Config{SegmentBytes: 400})
	for i := range 60 {
		appendKeyed(t, l, 0, int64(i), rec(fmt.Sprintf("k%d", i%4), fmt.Sprintf("v%d", i)))
	}
	upTo := l.LogEndOffset() - 5
	res := mustClean(t, l, time.Now(), Compaction{}, upTo)
	if res.Segments == 0 || res.RecordsRemoved == 0 || res.CleanedOffset == 0 || res.CleanedOffset > upTo {
		t.Fatalf("clean: %+v", res)
	}
	recs, _ := readRecords(t, l)
	seen := map[string]int{}
	for _, r := range recs {
		i := int(r.offset)
		if want := fmt.Sprintf("v%d", i); string(valueOf(t, r)) != want || string(r.key) != fmt.Sprintf("k%d", i%4) {
			t.Fatalf("offset %d holds %s=%s", i, r.key, valueOf(t, r))
		}
		if r.offset < res.CleanedOffset && r.offset+4 < res.CleanedOffset {
			// A newer record of the key is below the cleaned offset too.
			t.Fatalf("offset %d (key %s) was superseded below the cleaned offset %d and kept", r.offset, r.key, res.CleanedOffset)
		}
		seen[string(r.key)]++
	}
	if len(seen) != 4 || len(recs) >= 60 {
		t.Fatalf("%d records of %d keys read", len(recs), len(seen))
	}
	if got := l.CleanedOffset(); got != res.CleanedOffset {
		t.Fatalf("CleanedOffset %d, clean said %d", got, res.CleanedOffset)
	}
	// Nothing dirty below the bound: a second clean does nothing.
	if again := mustClean(t, l, time.Now(), Compaction{}, upTo); again.Segments != 0 {
		t.Fatalf("second clean: %+v", again)
	}
}

// TestClean_Bounds: nothing at or above the bound (the high watermark),
// the active segment, or segments younger than MinLag is cleaned; a dirty
// ratio under MinCleanableRatio cleans nothing.
func TestClean_Bounds(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	for _, tc := range []struct {
		name      string
		c         Compaction
		upTo      func(l *Log) int64
		wantClean bool
		// wantKept: the offsets whose records must all be kept.
		wantKeptFrom func(l *Log) int64
	}{
		{"everything below the log end", Compaction{}, func(l *Log) int64 { return l.LogEndOffset() }, true,
			func(l *Log) int64 { return l.Segments()[len(l.Segments())-1].BaseOffset }},
		{"nothing at the high watermark 0", Compaction{}, func(*Log) int64 { return 0 }, false, func(*Log) int64 { return 0 }},
		{"ratio under the minimum", Compaction{MinCleanableRatio: 1.01}, func(l *Log) int64 { return l.LogEndOffset() }, false,
			func(*Log) int64 { return 0 }},
		// Records are stamped with their offset, in ms: the last 20 are
		// younger than the lag.
		{"min compaction lag", Compaction{MinLag: 20 * time.Millisecond}, func(l *Log) int64 { return l.LogEndOffset() }, true,
			func(*Log) int64 { return 40 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := openLog(t, t.TempDir(), Config{SegmentBytes: 300})
			for i := range 60 {
				appendKeyed(t, l, 0, now.UnixMilli()-60+int64(i), rec("k", fmt.Sprintf("v%d", i)))
			}
			res := mustClean(t, l, now, tc.c, tc.upTo(l))
			if (res.Segments > 0) != tc.wantClean {
				t.Fatalf("clean: %+v, want a clean: %v", res, tc.wantClean)
			}
			recs, _ := readRecords(t, l)
			from := tc.wantKeptFrom(l)
			n := 0
			for _, r := range recs {
				if r.offset >= from {
					n++
				}
			}
			if want := int(l.LogEndOffset() - from); n < want {
				t.Fatalf("%d records kept from %d, want all %d", n, from, want)
			}
		})
	}
}

// TestClean_Tombstones: a tombstone outlives the clean that first sees it
// by DeleteRetention, then goes (LogCleanerTest's
// testDeleteRetentionMs-like cases, by an injected clock).
func TestClean_Tombstones(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Config{SegmentBytes: 200})
	t0 := time.UnixMilli(10_000_000)
	c := Compaction{DeleteRetention: time.Hour}
	appendKeyed(t, l, 0, 1, rec("a", "1"), rec("b", "1"))
	appendKeyed(t, l, 0, 2, tombstone("a"), rec("b", "2"))
	filler := func() {
		for range 3 {
			appendKeyed(t, l, 0, 3, rec("c", strings.Repeat("x", 60)))
		}
	}
	filler()
	tombstoneAt := func() bool {
		recs, _ := readRecords(t, l)
		for _, r := range recs {
			if string(r.key) == "a" {
				if !r.tombstone {
					t.Fatalf("a's value at %d survived its tombstone", r.offset)
				}
				return true
			}
		}
		return false
	}
	mustClean(t, l, t0, c, l.LogEndOffset())
	if !tombstoneAt() {
		t.Fatal("the first clean removed the tombstone")
	}
	filler()
	mustClean(t, l, t0.Add(time.Hour-time.Millisecond), c, l.LogEndOffset())
	if !tombstoneAt() {
		t.Fatal("the tombstone went before delete.retention.ms")
	}
	// The horizon survives a restart: it is the segment's own.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, Config{SegmentBytes: 200})
	filler()
	res := mustClean(t, l, t0.Add(time.Hour), c, l.LogEndOffset())
	if tombstoneAt() {
		t.Fatalf("the tombstone outlived delete.retention.ms: %+v", res)
	}
	recs, _ := readRecords(t, l)
	var b []string
	for _, r := range recs {
		if string(r.key) == "b" {
			b = append(b, string(valueOf(t, r)))
		}
	}
	if len(b) != 1 || b[0] != "2" {
		t.Fatalf("b's values %v, want [2]", b)
	}
}

// TestClean_Codecs: a compressed batch is rewritten in its codec with the
// records kept; one with none left is an empty batch that keeps its
// offsets, and a follower copies it.
func TestClean_Codecs(t *testing.T) {
	for codec := int16(0); codec <= 4; codec++ {
		t.Run(fmt.Sprint(codec), func(t *testing.T) {
			l := openLog(t, t.TempDir(), Config{SegmentBytes: 100})
			appendKeyed(t, l, codec, 1, rec("a", "1"), rec("b", "1"), rec("c", "1"))
			appendKeyed(t, l, codec, 2, rec("a", "2"), rec("b", "2"))
			appendKeyed(t, l, codec, 3, rec("a", "3"), rec("b", "3"))
			appendKeyed(t, l, codec, 4, rec("z", "1"))
			mustClean(t, l, time.Now(), Compaction{}, l.LogEndOffset())
			recs, hs := readRecords(t, l)
			var got []string
			for _, r := range recs {
				got = append(got, fmt.Sprintf("%d:%s=%s", r.offset, r.key, valueOf(t, r)))
			}
			if want := "2:c=1 5:a=3 6:b=3 7:z=1"; strings.Join(got, " ") != want {
				t.Fatalf("records %v, want %s", got, want)
			}
			if len(hs) != 4 {
				t.Fatalf("%d batches, want 4", len(hs))
			}
			if h := hs[1]; h.RecordsCount != 0 || h.BaseOffset != 3 || h.LastOffsetDelta != 1 || h.Attributes&attrCodecMask != 0 {
				t.Fatalf("emptied batch %+v, want an empty one at 3..4", h)
			}
			if h := hs[0]; h.RecordsCount != 1 || h.LastOffsetDelta != 2 || h.Attributes&attrCodecMask != codec {
				t.Fatalf("cleaned batch %+v, want 1 record of 3 offsets in codec %d", h, codec)
			}
			// A follower copies the cleaned log as it is.
			res, err := l.Read(0, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			f := openLog(t, t.TempDir(), Config{})
			if _, err := f.AppendAsFollower(res.Records); err != nil {
				t.Fatalf("a follower refused the cleaned batches: %v", err)
			}
		})
	}
}

// TestClean_KeylessRecordsKept: a record with no key is never removed.
func TestClean_KeylessRecordsKept(t *testing.T) {
	l := openLog(t, t.TempDir(), Config{SegmentBytes: 100})
	for range 5 {
		appendKeyed(t, l, 0, 1, kv{value: []byte("v")}, rec("k", "v"))
	}
	mustClean(t, l, time.Now(), Compaction{}, l.LogEndOffset())
	recs, _ := readRecords(t, l)
	n := 0
	for _, r := range recs {
		if r.key == nil {
			n++
		}
	}
	if n != 5 {
		t.Fatalf("%d keyless records kept, want 5", n)
	}
}

// TestClean_ProducerStateAfterRestart: the headers of an idempotent
// producer's batches stay, so the state rebuilt at Open still knows its
// last sequence, and its retry is a duplicate.
func TestClean_ProducerStateAfterRestart(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Config{SegmentBytes: 100})
	var batches [][]byte
	for i := range 6 {
		b := keyedBatch(t, 0, int64(i), 7, int32(2*i), rec("k", fmt.Sprint(i)), rec("k", fmt.Sprint(i)))
		batches = append(batches, b)
		if _, err := l.Append(b, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Append(keyedBatch(t, 0, 9, 0, 0, rec("other", "x")), 0); err != nil {
		t.Fatal(err)
	}
	before := l.Producers()
	if res := mustClean(t, l, time.Now(), Compaction{}, l.LogEndOffset()); res.RecordsRemoved == 0 {
		t.Fatalf("clean removed nothing: %+v", res)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, Config{SegmentBytes: 100})
	if after := l.Producers(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("producers after a clean and a restart %v, before %v", after, before)
	}
	info, err := l.Append(batches[5], 0)
	if err != nil || !info.Duplicate || info.FirstOffset != 10 {
		t.Fatalf("the retry of the last batch: %+v, %v; want a duplicate at 10", info, err)
	}
}

// TestClean_CrashMidSwap: whatever a crash leaves of a swap (a .cleaned
// file, a segment without its index), Open recovers a log that reads the
// same.
func TestClean_CrashMidSwap(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Config{SegmentBytes: 300, IndexIntervalBytes: 1})
	for i := range 40 {
		appendKeyed(t, l, 0, 1, rec(fmt.Sprint(i%3), fmt.Sprint(i)))
	}
	mustClean(t, l, time.Now(), Compaction{}, l.LogEndOffset())
	want, _ := readRecords(t, l)
	crash(l)
	// A clean that died before its rename, and one between removing an
	// index and renaming the log over.
	writeFile(t, filepath.Join(dir, segmentName(0, logSuffix)+cleanedSuffix), "half a segment")
	writeFile(t, filepath.Join(dir, segmentName(0, indexSuffix)+cleanedSuffix), "x")
	if err := os.Remove(filepath.Join(dir, segmentName(l.Segments()[1].BaseOffset, indexSuffix))); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, Config{SegmentBytes: 300, IndexIntervalBytes: 1})
	got, _ := readRecords(t, l)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the crash:\n%v\nwant\n%v", got, want)
	}
	for _, off := range []int64{0, 17, 39} {
		if _, err := l.Read(off, 1); err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*"+cleanedSuffix)); len(m) != 0 {
		t.Fatalf("leftovers: %v", m)
	}
	if got := l.CleanedOffset(); got == 0 {
		t.Fatal("the cleaned offset was not checkpointed")
	}
}

// TestClean_MaxTimestamp: a cleaned CreateTime batch's max timestamp is
// its kept records' largest, so ListOffsets for the largest timestamp
// (KIP-734) still finds a record when the one that had it was removed.
func TestClean_MaxTimestamp(t *testing.T) {
	l := openLog(t, t.TempDir(), Config{SegmentBytes: 100})
	appendKeyed(t, l, 0, 1000, rec("x", "1"), rec("a", "1")) // a at 1001
	appendKeyed(t, l, 0, 10, rec("a", "2"))
	appendKeyed(t, l, 0, 5, rec("z", "1"))
	mustClean(t, l, time.Now(), Compaction{}, l.LogEndOffset())
	got, err := l.MaxTimestampOffset(l.LogEndOffset())
	if err != nil || got.Offset != 0 || got.Timestamp != 1000 {
		t.Fatalf("MaxTimestampOffset = %+v, %v; want offset 0 at 1000", got, err)
	}
	if segs := l.Segments(); len(segs) != 3 {
		t.Fatalf("segments %+v", segs)
	}
}

// TestClean_EmptyBatchesJoin: emptied batches in a row, of no producer
// and one leader epoch, become one empty batch over all their offsets; an
// idempotent producer's keeps its own header (its producer state); a
// follower copies the result.
func TestClean_EmptyBatchesJoin(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Config{SegmentBytes: 1 << 20})
	for i := range 5 { // offsets 0-9
		appendKeyed(t, l, 0, int64(i), rec("a", fmt.Sprint(i)), rec("b", fmt.Sprint(i)))
	}
	if _, err := l.Append(keyedBatch(t, 0, 5, 7, 0, rec("a", "p")), 0); err != nil { // 10, idempotent
		t.Fatal(err)
	}
	appendKeyed(t, l, 0, 6, rec("a", "x"))                      // 11
	appendKeyed(t, l, 0, 7, rec("b", "x"))                      // 12
	appendKeyed(t, l, 0, 8, rec("a", "last"), rec("b", "last")) // 13-14
	if err := l.Reconfigure(Config{SegmentBytes: 61}); err != nil {
		t.Fatal(err)
	}
	appendKeyed(t, l, 0, 9, rec("z", "1")) // rolls: the segment above is sealed
	mustClean(t, l, time.Now(), Compaction{}, l.LogEndOffset())
	_, hs := readRecords(t, l)
	var got []string
	for _, h := range hs {
		got = append(got, fmt.Sprintf("%d-%d:%d", h.BaseOffset, h.LastOffset(), h.RecordsCount))
	}
	if want := "0-9:0 10-10:0 11-12:0 13-14:2 15-15:1"; strings.Join(got, " ") != want {
		t.Fatalf("batches %v, want %s", got, want)
	}
	res, err := l.Read(0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	f := openLog(t, t.TempDir(), Config{})
	if _, err := f.AppendAsFollower(res.Records); err != nil || f.LogEndOffset() != 15 {
		t.Fatalf("a follower's copy: LEO %d, %v", f.LogEndOffset(), err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, Config{})
	if p := l.Producers(); len(p) != 1 || p[0].ProducerID != 7 {
		t.Fatalf("producers after a restart: %+v", p)
	}
}
