package partlog

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recValue is the record size of writeLog's batches: big enough that half
// a batch holds a whole header.
const recValue = 200

// writeLog appends n one-record batches of epoch 1 in segments of three,
// and crashes (no flush, no checkpoint at close): what kill -9 leaves.
func writeLog(t *testing.T, dir string, n int, flush bool) Config {
	t.Helper()
	batch := int64(len(makeBatch(t, spec{value: recValue})))
	cfg := Config{SegmentBytes: 3 * batch, IndexIntervalBytes: 1}
	l, err := Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		mustAppend(t, l, spec{pid: 7, seq: int32(i), value: recValue}, 1)
	}
	if flush {
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	crash(l)
	return cfg
}

// TestRecovery_TornTail: what a crash can leave at the end of the active
// segment past the last fsync (a partial batch, a last batch with a bad
// CRC, zeros of blocks never written) is cut off on open and logged, and
// the log goes on from there (LogTest's testRecoveryOfCorruptedLog...,
// testCorruptLog, LogSegmentTest's testRecoveryWithCorruptMessage at the
// tail, LogLoaderTest's testLogRecoversForLeaderEpoch).
func TestRecovery_TornTail(t *testing.T) {
	batch := int64(len(makeBatch(t, spec{value: recValue})))
	active := segPath("", 6) // 7 batches: segments 0, 3, 6
	for _, tc := range []struct {
		name    string
		damage  func(t *testing.T, path string)
		wantLEO int64
		says    string
	}{
		{"a partial batch", func(t *testing.T, p string) { truncateFile(t, p, batch+batch/2) }, 7, "runs past the end"},
		{"a partial first batch", func(t *testing.T, p string) { truncateFile(t, p, batch/2) }, 6, "runs past the end"},
		{"half a header", func(t *testing.T, p string) { truncateFile(t, p, batch+5) }, 7, "less than a batch header"},
		{"a bad CRC in the last batch", func(t *testing.T, p string) { corrupt(t, p, 2*batch-1) }, 7, "CRC-32C"},
		{"a bad CRC in a batch cut short", func(t *testing.T, p string) { corrupt(t, p, batch-1); truncateFile(t, p, batch/2) }, 6, "runs past the end"},
		{"zeros after the last batch", func(t *testing.T, p string) { appendFile(t, p, make([]byte, 5000)) }, 8, "batchLength 0"},
		{"zeros over the last batch", func(t *testing.T, p string) { zeroFrom(t, p, batch) }, 7, "batchLength 0"},
		// Kafka's recovery cuts unflushed data from its first bad batch even
		// when valid batches follow: the replicas hold them again.
		{"a bad CRC in the middle of the unflushed active segment", func(t *testing.T, p string) { corrupt(t, p, batch-1) }, 6, "CRC-32C"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := writeLog(t, dir, 8, false) // the active segment 6 holds 6 and 7
			tc.damage(t, filepath.Join(dir, active))
			var logs testLogger
			cfg.Logger = logs.logger()
			l := openLog(t, dir, cfg)
			if l.LogEndOffset() != tc.wantLEO {
				t.Fatalf("LEO %d, want %d", l.LogEndOffset(), tc.wantLEO)
			}
			if tc.wantLEO < 8 && (!strings.Contains(logs.buf.String(), "cut the unflushed tail") || !strings.Contains(logs.buf.String(), tc.says)) {
				t.Fatalf("log says %q, want the cut and %q", logs.buf.String(), tc.says)
			}
			if hs := readAll(t, l); int64(len(hs)) != tc.wantLEO {
				t.Fatalf("%d batches readable, want %d", len(hs), tc.wantLEO)
			}
			if fi, _ := os.Stat(filepath.Join(dir, active)); fi.Size() != (tc.wantLEO-6)*batch {
				t.Fatalf("the active segment holds %d bytes, want %d", fi.Size(), (tc.wantLEO-6)*batch)
			}
			// The producer state is the log's: the next sequence follows the
			// last batch left, and a retry of the cut batch is new again.
			info, err := l.Append(makeBatch(t, spec{pid: 7, seq: int32(tc.wantLEO), value: recValue}), 1)
			if err != nil || info.Duplicate || info.FirstOffset != tc.wantLEO {
				t.Fatalf("append after recovery: %+v, %v", info, err)
			}
		})
	}
}

// TestRecovery_DamageNotAtTheTailIsRefused: damage that a crash cannot
// explain, in a sealed segment, in a part of the active one that was
// fsynced, or with good batches after it, is refused in one line naming
// the file, never cut away and never a panic.
func TestRecovery_DamageNotAtTheTailIsRefused(t *testing.T) {
	batch := int64(len(makeBatch(t, spec{value: recValue})))
	for _, tc := range []struct {
		name   string
		flush  bool
		damage func(t *testing.T, dir string)
		file   string
		says   string
	}{
		{"a bad length in a sealed segment", false, func(t *testing.T, dir string) {
			corrupt(t, segPath(dir, 3), batch+9)
		}, segmentName(3, logSuffix), "damaged at position"},
		{"a sealed segment cut short", false, func(t *testing.T, dir string) {
			truncateFile(t, segPath(dir, 0), 2*batch+7)
		}, segmentName(0, logSuffix), "damaged at position"},
		{"a missing sealed segment", false, func(t *testing.T, dir string) {
			if err := os.Remove(segPath(dir, 3)); err != nil {
				t.Fatal(err)
			}
		}, segmentName(6, logSuffix), "the segment before ends at 3"},
		{"a bad CRC in a sealed segment checked from scratch", false, func(t *testing.T, dir string) {
			corrupt(t, segPath(dir, 0), batch-1)
			if err := os.Remove(filepath.Join(dir, recoveryCheckpointFile)); err != nil {
				t.Fatal(err)
			}
		}, segmentName(0, logSuffix), "CRC-32C"},
		{"a bad CRC in the fsynced last batch", true, func(t *testing.T, dir string) {
			corrupt(t, segPath(dir, 6), 2*batch-1)
		}, segmentName(6, logSuffix), "CRC-32C"},
		{"a fsynced batch cut short", true, func(t *testing.T, dir string) {
			truncateFile(t, segPath(dir, 6), batch+batch/2)
		}, segmentName(6, logSuffix), "runs past the end"},
		{"a damaged epoch checkpoint", false, func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, epochCheckpointFile), "0\n2\n1 0\n")
		}, epochCheckpointFile, "count \"2\", but 1 entries follow"},
		{"epochs that go down", false, func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, epochCheckpointFile), "0\n2\n3 0\n1 5\n")
		}, epochCheckpointFile, "does not rise"},
		{"a damaged recovery point", false, func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, recoveryCheckpointFile), "0\n1\nx\n")
		}, recoveryCheckpointFile, "damaged checkpoint"},
		{"a stray .log name", false, func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "12.log"), "")
		}, "12.log", "not a segment file name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := writeLog(t, dir, 8, tc.flush)
			tc.damage(t, dir)
			_, err := Open(dir, cfg)
			wantErr(t, err, nil, filepath.Join(dir, tc.file))
			if !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("error %q does not say %q", err, tc.says)
			}
		})
	}
}

// TestRecovery_RebuildsIndex: a missing or damaged .index of a sealed
// segment is rebuilt from its .log, the same as it was (LogTest's
// testRebuildIndexIfMissing..., testCorruptIndexRebuild, LogSegmentTest's
// testRecoveryFixesCorruptIndex).
func TestRecovery_RebuildsIndex(t *testing.T) {
	idx := segmentName(3, indexSuffix)
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"missing", func(t *testing.T, p string) { _ = os.Remove(p) }},
		{"a torn entry", func(t *testing.T, p string) { appendFile(t, p, []byte{1, 2, 3}) }},
		{"an entry out of order", func(t *testing.T, p string) {
			writeFile(t, p, "\x00\x00\x00\x02\x00\x00\x00\x50\x00\x00\x00\x01\x00\x00\x00\x60")
		}},
		{"a position past the log", func(t *testing.T, p string) { writeFile(t, p, "\x00\x00\x00\x01\x00\x10\x00\x00") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := writeLog(t, dir, 8, false)
			want, err := os.ReadFile(filepath.Join(dir, idx))
			if err != nil || len(want) == 0 {
				t.Fatalf("index %q, %v", want, err)
			}
			tc.damage(t, filepath.Join(dir, idx))
			var logs testLogger
			cfg.Logger = logs.logger()
			l := openLog(t, dir, cfg)
			if got, _ := os.ReadFile(filepath.Join(dir, idx)); !bytes.Equal(got, want) {
				t.Fatalf("rebuilt index %x, want %x", got, want)
			}
			if !strings.Contains(logs.buf.String(), "rebuilding a damaged index") {
				t.Fatalf("log says %q", logs.buf.String())
			}
			if n := len(readAll(t, l)); n != 8 {
				t.Fatalf("%d batches readable, want 8", n)
			}
		})
	}
}

// TestRecovery_RebuildsEpochsFromHeaders: without its checkpoint the epoch
// cache is learnt again from the batches' partitionLeaderEpoch; entries at
// or after the log end are cut (LogLoader's truncateFromEnd).
func TestRecovery_RebuildsEpochsFromHeaders(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Config{})
	for i, e := range []int32{1, 1, 3, 3, 4} {
		mustAppend(t, l, spec{seq: int32(i)}, e)
	}
	if err := l.AssignEpoch(6); err != nil { // a new leader with nothing written yet
		t.Fatal(err)
	}
	crash(l)
	l = openLog(t, dir, Config{})
	want := []EpochEntry{{1, 0}, {3, 2}, {4, 4}}
	if got := l.EpochEntries(); !equalEntries(got, want) {
		t.Fatalf("epochs after a crash %v, want %v (epoch 6 starts at the log end)", got, want)
	}
	crash(l)
	if err := os.Remove(filepath.Join(dir, epochCheckpointFile)); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, Config{})
	if got := l.EpochEntries(); !equalEntries(got, want) {
		t.Fatalf("epochs rebuilt %v, want %v", got, want)
	}
	if _, ok, err := readCheckpoint(filepath.Join(dir, epochCheckpointFile), 2); !ok || err != nil {
		t.Fatalf("the rebuilt checkpoint was not saved: %v", err)
	}
}

// TestRecovery_LeavesOrphansOut: an index without its log, and a
// checkpoint's temp file, are removed.
func TestRecovery_LeavesOrphansOut(t *testing.T) {
	dir := t.TempDir()
	cfg := writeLog(t, dir, 4, false)
	writeFile(t, filepath.Join(dir, segmentName(99, indexSuffix)), "x")
	writeFile(t, filepath.Join(dir, hwCheckpointFile+".tmp-123"), "0\n")
	l := openLog(t, dir, cfg)
	for _, name := range []string{segmentName(99, indexSuffix), hwCheckpointFile + ".tmp-123"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Fatalf("%s is still there", name)
		}
	}
	if l.LogEndOffset() != 4 {
		t.Fatalf("LEO %d", l.LogEndOffset())
	}
}

func truncateFile(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

func zeroFrom(t *testing.T, path string, pos int64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	truncateFile(t, path, pos)
	appendFile(t, path, make([]byte, fi.Size()-pos))
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
