package partlog

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/internal/bufpool"
)

// TestLog_AppendAsLeader: the leader gives each batch the next offsets and
// its epoch, outside the CRC, and stores the rest as received (LogTest's
// testAppendAsLeaderWithRaftLeader, testAppendInfoFirstOffset).
func TestLog_AppendAsLeader(t *testing.T) {
	l := openLog(t, t.TempDir(), Config{})
	var sent [][]byte
	for i, n := range []int{1, 3, 2} {
		b := makeBatch(t, spec{records: n, ts: 1000})
		orig := bytes.Clone(b)
		info, err := l.Append(b, 7)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, orig) {
			t.Fatalf("batch %d: Append changed the caller's bytes", i)
		}
		want := l.LogEndOffset() - int64(n)
		if info.FirstOffset != want || info.LastOffset != want+int64(n)-1 || info.Duplicate {
			t.Fatalf("batch %d: %+v, want offsets %d..%d", i, info, want, want+int64(n)-1)
		}
		sent = append(sent, orig)
	}
	if l.LogEndOffset() != 6 {
		t.Fatalf("LEO %d, want 6", l.LogEndOffset())
	}
	res, err := l.Read(0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	rest := res.Records
	for i, want := range []int64{0, 1, 4} {
		var rb kmsg.RecordBatch
		n := logOverhead + int(int32(be32(rest[8:])))
		if err := rb.ReadFrom(rest[:n]); err != nil {
			t.Fatalf("batch %d: kmsg cannot read it: %v", i, err)
		}
		if rb.FirstOffset != want || rb.PartitionLeaderEpoch != 7 {
			t.Fatalf("batch %d: offset %d epoch %d, want %d and 7", i, rb.FirstOffset, rb.PartitionLeaderEpoch, want)
		}
		if !bytes.Equal(rest[offMagic:n], sent[i][offMagic:]) {
			t.Fatalf("batch %d: bytes from the magic on differ from those sent", i)
		}
		if _, err := checkBatch(rest[:n]); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		rest = rest[n:]
	}
	if got := l.EpochEntries(); len(got) != 1 || got[0] != (EpochEntry{7, 0}) {
		t.Fatalf("epochs %v, want [{7 0}]", got)
	}
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// TestLog_AppendRefusesBadBatches: LogValidator's checks; a refused batch
// appends nothing (LogTest's testAppendWithInvalidCrc...,
// testMessageSizeCheck, testCorruptLog).
func TestLog_AppendRefusesBadBatches(t *testing.T) {
	good := func() []byte { return makeBatch(t, spec{records: 2}) }
	reCRC := func(b []byte) []byte {
		var rb kmsg.RecordBatch
		_ = rb.ReadFrom(b)
		return makeBatchFrom(rb)
	}
	for _, tc := range []struct {
		name   string
		batch  func() []byte
		target error
		says   string
	}{
		{"bad CRC", func() []byte { b := good(); b[len(b)-1] ^= 1; return b }, ErrCorruptBatch, "CRC-32C"},
		{"empty", func() []byte { return nil }, ErrInvalidBatch, "shorter than a batch header"},
		{"truncated", func() []byte { b := good(); return b[:len(b)-3] }, ErrInvalidBatch, "batchLength"},
		{"two batches", func() []byte { return append(good(), good()...) }, ErrInvalidBatch, "batchLength"},
		{"magic 1", func() []byte { b := good(); b[offMagic] = 1; return b }, ErrInvalidBatch, "magic 1"},
		{"records count", func() []byte {
			b := good()
			var rb kmsg.RecordBatch
			_ = rb.ReadFrom(b)
			rb.NumRecords = 3
			return makeBatchFrom(rb)
		}, ErrInvalidBatch, "3 records but lastOffsetDelta 1"},
		{"transactional", func() []byte {
			var rb kmsg.RecordBatch
			_ = rb.ReadFrom(good())
			rb.Attributes |= attrTransactional
			return makeBatchFrom(rb)
		}, ErrInvalidBatch, "transactional"},
		{"codec 6", func() []byte {
			var rb kmsg.RecordBatch
			_ = rb.ReadFrom(good())
			rb.Attributes |= 6
			return makeBatchFrom(rb)
		}, ErrInvalidBatch, "codec 6"},
		{"idempotent with sequence -1", func() []byte {
			var rb kmsg.RecordBatch
			_ = rb.ReadFrom(makeBatch(t, spec{pid: 5}))
			rb.FirstSequence = -1
			return reCRC(makeBatchFrom(rb))
		}, ErrInvalidBatch, "base sequence -1"},
		{"too large", func() []byte { return makeBatch(t, spec{value: 2000}) }, ErrBatchTooLarge, "limit is 1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, Config{MaxBatchBytes: 1024})
			mustAppend(t, l, spec{}, 0)
			_, err := l.Append(tc.batch(), 0)
			wantErr(t, err, tc.target, tc.says)
			if l.LogEndOffset() != 1 {
				t.Fatalf("LEO %d after a refused batch, want 1", l.LogEndOffset())
			}
			if fi, _ := os.Stat(segPath(dir, 0)); fi.Size() != l.Size() || l.Size() != int64(len(makeBatch(t, spec{}))) {
				t.Fatalf("file holds %d bytes, the log %d: the refused batch was written", fi.Size(), l.Size())
			}
		})
	}
}

// makeBatchFrom encodes rb with its length and CRC recomputed.
func makeBatchFrom(rb kmsg.RecordBatch) []byte {
	rb.Length = int32(minBatchLength + len(rb.Records))
	b := rb.AppendTo(nil)
	putCRC(b)
	return b
}

// TestLog_AppendAsFollower: a follower keeps the leader's offsets and
// epochs, and takes only batches that continue its log, with epochs that
// never go down; a refused set appends nothing.
func TestLog_AppendAsFollower(t *testing.T) {
	run := func(batches ...spec) []byte {
		var out []byte
		for _, s := range batches {
			out = append(out, makeBatch(t, s)...)
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		records []byte
		target  error
		says    string
		wantLEO int64
	}{
		{"continues", run(spec{base: 3, epoch: 2, records: 2}, spec{base: 5, epoch: 4}), nil, "", 6},
		{"empty", nil, nil, "", 3},
		{"gap", run(spec{base: 4, epoch: 2}), ErrOffsetMismatch, "starts at offset 4, the log ends at 3", 3},
		{"overlap", run(spec{base: 2, epoch: 2}), ErrOffsetMismatch, "starts at offset 2", 3},
		{"gap in the middle", run(spec{base: 3, epoch: 2}, spec{base: 5, epoch: 2}), ErrOffsetMismatch, "batch 1 starts at offset 5", 3},
		{"epoch goes down", run(spec{base: 3, epoch: 2}, spec{base: 4, epoch: 1}), ErrStaleLeaderEpoch, "leader epoch 1, the log has 2", 3},
		{"bad CRC in the second", func() []byte {
			b := run(spec{base: 3, epoch: 2}, spec{base: 4, epoch: 2})
			b[len(b)-1] ^= 1
			return b
		}(), ErrCorruptBatch, "batch 1 (offset 4)", 3},
		{"trailing bytes", append(run(spec{base: 3, epoch: 2}), 1, 2, 3), ErrInvalidBatch, "trailing bytes", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := openLog(t, t.TempDir(), Config{})
			if _, err := l.AppendAsFollower(run(spec{base: 0, epoch: 1, records: 3})); err != nil {
				t.Fatal(err)
			}
			info, err := l.AppendAsFollower(tc.records)
			if tc.target != nil {
				wantErr(t, err, tc.target, tc.says)
			} else if err != nil {
				t.Fatal(err)
			} else if info.FirstOffset != 3 || info.LastOffset != tc.wantLEO-1 {
				t.Fatalf("info %+v, want offsets 3..%d", info, tc.wantLEO-1)
			}
			if l.LogEndOffset() != tc.wantLEO {
				t.Fatalf("LEO %d, want %d", l.LogEndOffset(), tc.wantLEO)
			}
			if got := readAll(t, l); got[len(got)-1].NextOffset() != tc.wantLEO {
				t.Fatalf("read ends at %d, want %d", got[len(got)-1].NextOffset(), tc.wantLEO)
			}
		})
	}
	t.Run("learns epochs", func(t *testing.T) {
		l := openLog(t, t.TempDir(), Config{})
		if _, err := l.AppendAsFollower(run(spec{base: 0, epoch: 1, records: 3}, spec{base: 3, epoch: 1}, spec{base: 4, epoch: 3}, spec{base: 5, epoch: 5})); err != nil {
			t.Fatal(err)
		}
		want := []EpochEntry{{1, 0}, {3, 4}, {5, 5}}
		if got := l.EpochEntries(); !equalEntries(got, want) {
			t.Fatalf("epochs %v, want %v", got, want)
		}
	})
}

func equalEntries(a, b []EpochEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestLog_Read: whole batches from the one holding the offset, at least
// one however small maxBytes is (KIP-74), none past upTo (LogTest's
// testReadWithMinMessage, testReadWithTooSmallMaxLength,
// testReadOutOfRange; LogSegmentTest's testReadBeforeFirstOffset).
func TestLog_Read(t *testing.T) {
	l := openLog(t, t.TempDir(), Config{IndexIntervalBytes: 1, SegmentBytes: 4 << 10})
	size := int64(len(makeBatch(t, spec{records: 3, value: 100})))
	for i := 0; i < 40; i++ { // batches at 0, 3, 6, ... over several segments
		mustAppend(t, l, spec{records: 3, value: 100}, 0)
	}
	if n := len(l.Segments()); n < 3 {
		t.Fatalf("%d segments, want several", n)
	}
	for _, tc := range []struct {
		name      string
		offset    int64
		maxBytes  int
		upTo      int64
		wantFirst int64 // base offset of the first batch; -1 for none
		wantN     int   // batches
		target    error
	}{
		{"first batch", 0, int(size), -1, 0, 1, nil},
		{"inside a batch", 4, int(size), -1, 3, 1, nil},
		{"last record of a batch", 5, int(size), -1, 3, 1, nil},
		{"maxBytes under one batch still returns it", 7, 10, -1, 6, 1, nil},
		{"maxBytes of two and a half", 9, int(size * 5 / 2), -1, 9, 2, nil},
		{"stops at the segment's end", 0, 1 << 20, -1, 0, int((4 << 10) / size), nil},
		{"a later segment", 100, int(size), -1, 99, 1, nil},
		{"the last batch", 119, 1 << 20, -1, 117, 1, nil},
		{"at the log end: empty", 120, 1 << 20, -1, -1, 0, nil},
		{"past the log end", 121, 1 << 20, -1, -1, 0, ErrOffsetOutOfRange},
		{"negative", -1, 1 << 20, -1, -1, 0, ErrOffsetOutOfRange},
		{"up to a high watermark", 0, int(size * 4), 6, 0, 2, nil},
		{"at the high watermark: empty", 6, 1 << 20, 6, -1, 0, nil},
		{"high watermark inside a batch", 0, int(size * 4), 7, 0, 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var res ReadResult
			var err error
			if tc.upTo >= 0 {
				res, err = l.ReadUpTo(tc.offset, tc.maxBytes, tc.upTo)
			} else {
				res, err = l.Read(tc.offset, tc.maxBytes)
			}
			if tc.target != nil {
				wantErr(t, err, tc.target, "outside [0, 120]")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, hs, err := splitBatches(res.Records)
			if err != nil {
				t.Fatal(err)
			}
			if len(hs) != tc.wantN || (tc.wantN > 0 && hs[0].BaseOffset != tc.wantFirst) {
				t.Fatalf("%d batches from %v, want %d from %d", len(hs), hs, tc.wantN, tc.wantFirst)
			}
			if res.LogStartOffset != 0 || res.LogEndOffset != 120 {
				t.Fatalf("bounds [%d, %d], want [0, 120]", res.LogStartOffset, res.LogEndOffset)
			}
			// ReadPooled reads the same, into the buffer it returns,
			// sized to the read rather than to maxBytes.
			upTo := tc.upTo
			if upTo < 0 {
				upTo = math.MaxInt64
			}
			pres, buf, err := l.ReadPooled(tc.offset, tc.maxBytes, upTo)
			switch {
			case err != nil:
				t.Fatalf("ReadPooled: %v", err)
			case !bytes.Equal(pres.Records, res.Records):
				t.Fatalf("ReadPooled read %d bytes, ReadUpTo %d", len(pres.Records), len(res.Records))
			case len(res.Records) > 0 && (buf == nil || &(*buf)[0] != &pres.Records[0]):
				t.Fatal("ReadPooled's records are not in the buffer it returned")
			case buf != nil && cap(*buf) > max(4<<10, 2*len(res.Records)+2*int(size)):
				t.Fatalf("ReadPooled read %d bytes into a buffer of %d", len(res.Records), cap(*buf))
			}
			bufpool.Put(buf)
		})
	}
}

// TestLog_Roll: a segment rolls when a batch would take it past
// segment.bytes or its index is full; the sealed segment is fsynced and
// becomes the recovery point (LogTest's testSizeBasedLogRoll,
// testIndexRebuild..., testLogRollAfterLogHandlerClosed).
func TestLog_Roll(t *testing.T) {
	batch := int64(len(makeBatch(t, spec{value: 200})))
	for _, tc := range []struct {
		name     string
		cfg      Config
		appends  int
		wantSegs []int64 // base offsets
	}{
		{"by segment.bytes", Config{SegmentBytes: 3 * batch}, 7, []int64{0, 3, 6}},
		{"a batch larger than a segment gets one of its own", Config{SegmentBytes: batch / 2}, 3, []int64{0, 1, 2}},
		{"by index size", Config{IndexIntervalBytes: 1, SegmentIndexBytes: 2 * indexEntrySize}, 7, []int64{0, 3, 6}},
		{"never", Config{}, 7, []int64{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, tc.cfg)
			for i := 0; i < tc.appends; i++ {
				mustAppend(t, l, spec{value: 200}, 0)
			}
			var bases []int64
			for _, s := range l.Segments() {
				bases = append(bases, s.BaseOffset)
			}
			if !equalInts(bases, tc.wantSegs) {
				t.Fatalf("segments at %v, want %v", bases, tc.wantSegs)
			}
			if got := len(readAll(t, l)); got != tc.appends {
				t.Fatalf("read %d batches, want %d", got, tc.appends)
			}
			rp, _, err := readOffsetCheckpoint(filepath.Join(dir, recoveryCheckpointFile))
			if last := tc.wantSegs[len(tc.wantSegs)-1]; err != nil || (last > 0 && rp != last) {
				t.Fatalf("recovery point %d, %v; want %d", rp, err, last)
			}
		})
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestLog_TruncateTo: a follower cuts its log where it diverges; whole
// batches go, later segments are deleted, epochs at or after the new end
// go, and the log reopens the same (LogTest's testTruncateTo,
// testTruncateToEmptySegment, testTruncateFullyAndStartAt,
// testTruncateToEndOffsetClearsEpochCache).
func TestLog_TruncateTo(t *testing.T) {
	batch := int64(len(makeBatch(t, spec{records: 2})))
	// 10 batches of 2 records, epochs 1 (0..9), 2 (10..15), 4 (16..19), 4 per segment.
	build := func(t *testing.T, dir string) *Log {
		l := openLog(t, dir, Config{SegmentBytes: 4 * batch, IndexIntervalBytes: 1})
		for i := 0; i < 10; i++ {
			epoch := int32(1)
			if i >= 5 {
				epoch = 2
			}
			if i >= 8 {
				epoch = 4
			}
			mustAppend(t, l, spec{records: 2}, epoch)
		}
		return l
	}
	for _, tc := range []struct {
		name       string
		to         int64
		wantLEO    int64
		wantSegs   []int64
		wantEpochs []EpochEntry
	}{
		{"past the end: nothing", 25, 20, []int64{0, 8, 16}, []EpochEntry{{1, 0}, {2, 10}, {4, 16}}},
		{"at the end: nothing", 20, 20, []int64{0, 8, 16}, []EpochEntry{{1, 0}, {2, 10}, {4, 16}}},
		{"the last batch", 18, 18, []int64{0, 8, 16}, []EpochEntry{{1, 0}, {2, 10}, {4, 16}}},
		{"to a segment's base", 16, 16, []int64{0, 8, 16}, []EpochEntry{{1, 0}, {2, 10}}},
		{"inside a batch: the batch goes", 13, 12, []int64{0, 8}, []EpochEntry{{1, 0}, {2, 10}}},
		{"to an epoch's start", 10, 10, []int64{0, 8}, []EpochEntry{{1, 0}}},
		{"the middle of the first segment", 4, 4, []int64{0}, []EpochEntry{{1, 0}}},
		{"to zero", 0, 0, []int64{0}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := build(t, dir)
			if err := l.TruncateTo(tc.to); err != nil {
				t.Fatal(err)
			}
			check := func(l *Log) {
				t.Helper()
				if l.LogEndOffset() != tc.wantLEO {
					t.Fatalf("LEO %d, want %d", l.LogEndOffset(), tc.wantLEO)
				}
				var bases []int64
				for _, s := range l.Segments() {
					bases = append(bases, s.BaseOffset)
				}
				if !equalInts(bases, tc.wantSegs) {
					t.Fatalf("segments %v, want %v", bases, tc.wantSegs)
				}
				if got := l.EpochEntries(); !equalEntries(got, tc.wantEpochs) {
					t.Fatalf("epochs %v, want %v", got, tc.wantEpochs)
				}
				if hs := readAll(t, l); len(hs) > 0 && hs[len(hs)-1].NextOffset() != tc.wantLEO {
					t.Fatalf("reads end at %d", hs[len(hs)-1].NextOffset())
				}
			}
			check(l)
			// An append continues from the new end, in a new epoch.
			info := mustAppend(t, l, spec{}, 5)
			if info.FirstOffset != tc.wantLEO {
				t.Fatalf("append after truncation at %d, want %d", info.FirstOffset, tc.wantLEO)
			}
			if err := l.TruncateTo(tc.wantLEO); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			check(openLog(t, dir, Config{SegmentBytes: 4 * batch, IndexIntervalBytes: 1}))
		})
	}
	t.Run("below the log start empties the log", func(t *testing.T) {
		l := build(t, t.TempDir())
		if err := l.DeleteTo(12); err != nil {
			t.Fatal(err)
		}
		if err := l.TruncateTo(11); err != nil {
			t.Fatal(err)
		}
		if l.LogStartOffset() != 11 || l.LogEndOffset() != 11 || len(l.EpochEntries()) != 0 {
			t.Fatalf("start %d end %d epochs %v, want an empty log at 11", l.LogStartOffset(), l.LogEndOffset(), l.EpochEntries())
		}
	})
}

// TestLog_TruncateFullyAndStartAt: a follower behind its leader's log start
// empties its log and starts where the leader's does.
func TestLog_TruncateFullyAndStartAt(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Config{})
	for i := 0; i < 3; i++ {
		mustAppend(t, l, spec{pid: 9, seq: int32(i)}, 1)
	}
	if err := l.TruncateFullyAndStartAt(100); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AppendAsFollower(makeBatch(t, spec{base: 100, epoch: 3})); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, Config{})
	if l.LogStartOffset() != 100 || l.LogEndOffset() != 101 {
		t.Fatalf("log [%d, %d), want [100, 101)", l.LogStartOffset(), l.LogEndOffset())
	}
	if _, err := os.Stat(segPath(dir, 0)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the old segment is still there: %v", err)
	}
	if got := l.EpochEntries(); !equalEntries(got, []EpochEntry{{3, 100}}) {
		t.Fatalf("epochs %v", got)
	}
	// The producer's history went with the data: any sequence is accepted.
	if _, err := l.Append(makeBatch(t, spec{pid: 9, seq: 42}), 3); err != nil {
		t.Fatal(err)
	}
}

// TestLog_DeleteTo: the log start moves, whole segments below it go (never
// the active one), reads below it are out of range, and the start survives
// a restart (LogTest's testLogStartOffset..., DeleteRecords).
func TestLog_DeleteTo(t *testing.T) {
	batch := int64(len(makeBatch(t, spec{})))
	dir := t.TempDir()
	cfg := Config{SegmentBytes: 3 * batch}
	l := openLog(t, dir, cfg)
	for i := 0; i < 8; i++ { // segments 0, 3, 6
		mustAppend(t, l, spec{}, int32(i/2))
	}
	for _, tc := range []struct {
		to        int64
		wantStart int64
		wantSegs  int
		target    error
	}{
		{2, 2, 3, nil},
		{1, 2, 3, nil}, // backwards: nothing
		{4, 4, 2, nil},
		{9, 4, 2, ErrOffsetOutOfRange},
		{8, 8, 1, nil}, // at the log end: the active segment stays
	} {
		err := l.DeleteTo(tc.to)
		if tc.target != nil {
			wantErr(t, err, tc.target, "past the log end 8")
		} else if err != nil {
			t.Fatal(err)
		}
		if l.LogStartOffset() != tc.wantStart || len(l.Segments()) != tc.wantSegs {
			t.Fatalf("DeleteTo(%d): start %d, %d segments; want %d, %d", tc.to, l.LogStartOffset(), len(l.Segments()), tc.wantStart, tc.wantSegs)
		}
		if _, err := l.Read(tc.wantStart-1, 100); !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("Read below the start %d: %v", tc.wantStart, err)
		}
	}
	if got := l.EpochEntries(); !equalEntries(got, []EpochEntry{{3, 8}}) {
		t.Fatalf("epochs %v, want [{3 8}]", got)
	}
	crash(l)
	l = openLog(t, dir, cfg)
	if l.LogStartOffset() != 8 || l.LogEndOffset() != 8 {
		t.Fatalf("after a restart [%d, %d), want [8, 8)", l.LogStartOffset(), l.LogEndOffset())
	}
}

// TestLog_Retain: retention.ms and retention.bytes delete whole sealed
// segments, oldest first, never the active one, and move the log start
// (LogTest's testTimeBasedLogRetention..., testSizeBasedLogRetention...,
// shouldNotDeleteSegmentsWhenPolicyDoesNotIncludeDelete...).
func TestLog_Retain(t *testing.T) {
	batch := int64(len(makeBatch(t, spec{})))
	now := time.UnixMilli(1_800_000_000_000)
	for _, tc := range []struct {
		name      string
		r         Retention
		wantStart int64
		wantSegs  int
	}{
		{"nothing asked", Retention{}, 0, 4},
		{"by time: segments older than an hour", Retention{Time: time.Hour}, 4, 2},
		{"by time: everything old, but never the active segment", Retention{Time: time.Millisecond}, 6, 1},
		{"by time: nothing old enough", Retention{Time: 1000 * time.Hour}, 0, 4},
		{"by size: keep at least 3 batches", Retention{Bytes: 3 * batch}, 4, 2},
		{"by size: keep at least 4 batches", Retention{Bytes: 4 * batch}, 2, 3},
		{"by size: more than there is", Retention{Bytes: 100 * batch}, 0, 4},
		{"by size: tiny", Retention{Bytes: 1}, 6, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, Config{SegmentBytes: 2 * batch})
			// Segments 0, 2, 4 (two batches each) and the active 6 (one):
			// the first two written two hours ago, the rest a minute ago.
			for i := 0; i < 7; i++ {
				ts := now.Add(-2 * time.Hour).UnixMilli()
				if i >= 4 {
					ts = now.Add(-time.Minute).UnixMilli()
				}
				mustAppend(t, l, spec{ts: ts}, 0)
			}
			out, err := l.Retain(now, tc.r)
			if err != nil {
				t.Fatal(err)
			}
			if l.LogStartOffset() != tc.wantStart || len(l.Segments()) != tc.wantSegs || out.LogStartOffset != tc.wantStart || out.Segments != 4-tc.wantSegs {
				t.Fatalf("start %d, %d segments (%+v); want %d, %d", l.LogStartOffset(), len(l.Segments()), out, tc.wantStart, tc.wantSegs)
			}
			if got := len(readAll(t, l)); got != 7-int(tc.wantStart) {
				t.Fatalf("%d batches readable, want %d", got, 7-tc.wantStart)
			}
			entries, _ := os.ReadDir(dir)
			logs := 0
			for _, e := range entries {
				if filepath.Ext(e.Name()) == logSuffix {
					logs++
				}
			}
			if logs != tc.wantSegs {
				t.Fatalf("%d .log files left, want %d", logs, tc.wantSegs)
			}
		})
	}
}

// TestLog_ReopenAfterCleanClose: a closed log opens with the same bounds,
// segments, epochs, producers and high watermark.
func TestLog_ReopenAfterCleanClose(t *testing.T) {
	batch := int64(len(makeBatch(t, spec{})))
	dir := t.TempDir()
	cfg := Config{SegmentBytes: 3 * batch}
	l := openLog(t, dir, cfg)
	for i := 0; i < 10; i++ {
		mustAppend(t, l, spec{pid: 3, seq: int32(i)}, int32(1+i/4))
	}
	if err := l.CheckpointHighWatermark(7); err != nil {
		t.Fatal(err)
	}
	before, epochs := readAll(t, l), l.EpochEntries()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Read(0, 100); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	if _, err := l.Append(makeBatch(t, spec{}), 3); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
	l = openLog(t, dir, cfg)
	after := readAll(t, l)
	if len(after) != len(before) || l.LogEndOffset() != 10 || l.HighWatermark() != 7 || !equalEntries(l.EpochEntries(), epochs) {
		t.Fatalf("reopened: %d batches, LEO %d, HW %d, epochs %v", len(after), l.LogEndOffset(), l.HighWatermark(), l.EpochEntries())
	}
	// The producer state came back from the headers: a retry of the last
	// batch is a duplicate.
	info, err := l.Append(makeBatch(t, spec{pid: 3, seq: 9}), 3)
	if err != nil || !info.Duplicate || info.FirstOffset != 9 {
		t.Fatalf("retry after reopen: %+v, %v", info, err)
	}
}

// TestLog_HighWatermarkCheckpoint: the log keeps the HW it is given, within
// its bounds, and clamps it to the log end on open.
func TestLog_HighWatermarkCheckpoint(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Config{})
	for i := 0; i < 5; i++ {
		mustAppend(t, l, spec{}, 0)
	}
	wantErr(t, l.CheckpointHighWatermark(6), ErrOffsetOutOfRange, "outside [0, 5]")
	if err := l.CheckpointHighWatermark(5); err != nil {
		t.Fatal(err)
	}
	if err := l.TruncateTo(3); err != nil {
		t.Fatal(err)
	}
	crash(l)
	l = openLog(t, dir, Config{})
	if l.HighWatermark() != 3 {
		t.Fatalf("HW %d after the log was cut to 3, want 3", l.HighWatermark())
	}
}

// TestLog_FlushPolicy: flush.messages and flush.ms fsync and move the
// recovery point; with neither, only rolls and Close do.
func TestLog_FlushPolicy(t *testing.T) {
	now := time.UnixMilli(0)
	clock := func() time.Time { return now }
	for _, tc := range []struct {
		name string
		cfg  Config
		step func(l *Log) // after 3 appends
		want int64        // recovery point
	}{
		{"never", Config{}, func(*Log) {}, 0},
		{"flush.messages 2", Config{FlushMessages: 2}, func(*Log) {}, 2},
		{"flush.messages 1", Config{FlushMessages: 1}, func(*Log) {}, 3},
		{"flush.ms, not yet", Config{FlushInterval: time.Second, Now: clock}, func(l *Log) { _ = l.MaybeFlush(now.Add(999 * time.Millisecond)) }, 0},
		{"flush.ms, MaybeFlush after it", Config{FlushInterval: time.Second, Now: clock}, func(l *Log) { _ = l.MaybeFlush(now.Add(time.Second)) }, 3},
		{"Flush", Config{}, func(l *Log) { _ = l.Flush() }, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, tc.cfg)
			for i := 0; i < 3; i++ {
				mustAppend(t, l, spec{}, 0)
			}
			tc.step(l)
			rp, _, err := readOffsetCheckpoint(filepath.Join(dir, recoveryCheckpointFile))
			if err != nil || rp != tc.want {
				t.Fatalf("recovery point %d (%v), want %d", rp, err, tc.want)
			}
		})
	}
}
