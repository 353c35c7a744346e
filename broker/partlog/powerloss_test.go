package partlog

import (
	"os"
	"testing"
)

// TestDropUnsynced: a power loss emulated on a log that died without
// closing leaves what the last recorded fsync holds, and the log opens
// from there with its batches whole.
func TestDropUnsynced(t *testing.T) {
	tests := []struct {
		name string
		// write builds the log in dir (writeLog: one-record batches in
		// segments of three) and leaves it as a crash does.
		write               func(t *testing.T, dir string) Config
		wantBefore, wantEnd int64
		wantSegments        int
	}{
		{
			name:  "never flushed: back to the last roll",
			write: func(t *testing.T, dir string) Config { return writeLog(t, dir, 7, false) },
			// Segments 0, 3 and 6; the roll to 6 fsynced 3-5.
			wantBefore: 7, wantEnd: 6, wantSegments: 3,
		},
		{
			name: "flushed, then appended: back to the flush",
			write: func(t *testing.T, dir string) Config {
				cfg := writeLog(t, dir, 8, true)
				l := openLog(t, dir, cfg)
				mustAppend(t, l, spec{pid: 7, seq: 8, value: recValue}, 1)
				crash(l)
				return cfg
			},
			wantBefore: 9, wantEnd: 8, wantSegments: 3,
		},
		{
			name: "one segment never fsynced: nothing left",
			write: func(t *testing.T, dir string) Config {
				l := openLog(t, dir, Config{})
				for i := range 3 {
					mustAppend(t, l, spec{pid: 7, seq: int32(i)}, 1)
				}
				crash(l)
				return Config{}
			},
			wantBefore: 3, wantEnd: 0, wantSegments: 1,
		},
		{
			name: "closed cleanly: nothing to drop",
			write: func(t *testing.T, dir string) Config {
				cfg := writeLog(t, dir, 8, false)
				l := openLog(t, dir, cfg)
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				return cfg
			},
			wantBefore: 8, wantEnd: 8, wantSegments: 3,
		},
		{
			name: "a roll whose checkpoint was not written: the new segment goes too",
			write: func(t *testing.T, dir string) Config {
				cfg := writeLog(t, dir, 7, false)
				if err := writeOffsetCheckpoint(dir+"/"+recoveryCheckpointFile, 3); err != nil {
					t.Fatal(err)
				}
				return cfg
			},
			wantBefore: 7, wantEnd: 3, wantSegments: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := tt.write(t, dir)
			before, after, err := DropUnsynced(dir)
			if err != nil || before != tt.wantBefore || after != tt.wantEnd {
				t.Fatalf("DropUnsynced = %d, %d, %v; want %d, %d", before, after, err, tt.wantBefore, tt.wantEnd)
			}
			l := openLog(t, dir, cfg)
			if got := l.LogEndOffset(); got != tt.wantEnd {
				t.Fatalf("reopened: log end %d, want %d", got, tt.wantEnd)
			}
			if got := len(l.Segments()); got != tt.wantSegments {
				t.Fatalf("reopened: %d segments, want %d", got, tt.wantSegments)
			}
			hs := readAll(t, l)
			for i, h := range hs {
				if h.BaseOffset != int64(i) {
					t.Fatalf("batch %d at offset %d", i, h.BaseOffset)
				}
			}
			if int64(len(hs)) != tt.wantEnd {
				t.Fatalf("%d batches read, want %d", len(hs), tt.wantEnd)
			}
		})
	}

	if _, _, err := DropUnsynced(t.TempDir()); err == nil {
		t.Fatal("a directory without segments: no error")
	}
	dir := t.TempDir()
	writeLog(t, dir, 2, false)
	if err := os.WriteFile(dir+"/"+recoveryCheckpointFile, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := DropUnsynced(dir); err == nil {
		t.Fatal("a damaged recovery point checkpoint: no error")
	}
}
