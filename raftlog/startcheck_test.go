package raftlog

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/keel-dev/keel/internal/poll"
)

// verifyList is listSM's snapshot check for Config.VerifySnapshot: every
// length-prefixed entry whole.
func verifyList(r io.Reader) error {
	for {
		var n uint32
		err := binary.Read(r, binary.BigEndian, &n)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
			return fmt.Errorf("entry of %d bytes: %w", n, err)
		}
	}
}

// fixtureSpec is a data dir written by a real node: two snapshots, the log
// truncated behind the newest one (trailing entries kept), and entries
// after it.
type fixtureSpec struct {
	store    string
	trailing uint64 // 4: the older snapshot no longer covers the log; 40: it does
}

// fixtures makes each data dir a test asks for once, in parent's temp dir,
// and hands out copies.
type fixtures struct {
	parent *testing.T
	made   map[fixtureSpec]string
}

// get returns a copy of the data dir spec describes, written by a
// one-voter node: 20 entries, a snapshot, 20 more, a snapshot, 30 more.
func (f *fixtures) get(t *testing.T, spec fixtureSpec) string {
	t.Helper()
	src, ok := f.made[spec]
	if !ok {
		src = filepath.Join(f.parent.TempDir(), "fixture")
		writeFixture(f.parent, src, spec)
		f.made[spec] = src
	}
	dst := filepath.Join(t.TempDir(), "data")
	copyDir(t, src, dst)
	return dst
}

func writeFixture(t *testing.T, dir string, spec fixtureSpec) {
	t.Helper()
	n, m, err := startSingle(t, dir, func(c *Config) {
		c.LogStore, c.TrailingLogs, c.SnapshotThreshold = spec.store, spec.trailing, 1<<30
		c.walSegmentSize = 16 << 10
	})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitTimeout, "the node to lead", func() bool { return n.Raft.State() == raft.Leader })
	apply := func(prefix string, count int) {
		for i := range count {
			// 1 KiB each: the wal's 16 KiB segments rotate.
			e := fmt.Sprintf("%s%03d%s", prefix, i, strings.Repeat("x", 1000))
			if err := n.Raft.Apply([]byte(e), waitTimeout).Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, prefix := range []string{"a", "b"} {
		apply(prefix, 20)
		if err := n.Raft.Snapshot().Error(); err != nil {
			t.Fatal(err)
		}
	}
	apply("c", 30)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// snapshotPaths returns the data dir's snapshot directories, newest first.
func snapshotPaths(t *testing.T, dir string) []string {
	t.Helper()
	snaps, _, err := listSnapshotDirs(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range snaps {
		out = append(out, s.path)
	}
	if len(out) != 2 {
		t.Fatalf("fixture has snapshots %q, want two", out)
	}
	return out
}

// overwrite writes random bytes over path from offset to its end (or all of
// it, for a negative offset counted from the end).
func overwrite(t *testing.T, path string, offset int64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if offset < 0 {
		offset += fi.Size()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, fi.Size()-offset)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, offset); err != nil {
		t.Fatal(err)
	}
}

func truncate(t *testing.T, path string, keep func(size int64) int64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, keep(fi.Size())); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
}

// rewriteSnapshot replaces a snapshot's state with data and fixes its
// meta.json's size and CRC to match: damage only the state machine's own
// check can see.
func rewriteSnapshot(t *testing.T, snap string, data []byte) {
	t.Helper()
	writeFile(t, filepath.Join(snap, snapshotStateFileName), string(data))
	metaPath := filepath.Join(snap, snapshotMetaFileName)
	m, err := readSnapshotMeta(metaPath)
	if err != nil {
		t.Fatal(err)
	}
	h := crc64.New(crc64.MakeTable(crc64.ECMA))
	h.Write(data)
	m.Size, m.CRC = int64(len(data)), h.Sum(nil)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, metaPath, string(b))
}

// dirState is what a refused Open must leave as it was: every path in the
// data dir and its size (raft.db's meta page may be rewritten by the
// store's open; nothing is added, removed or resized).
func dirState(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	st := map[string]int64{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			st[rel+"/"] = 0
		} else {
			st[rel] = fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestOpen_RefusesDamagedDataDir damages a data dir a real node wrote, one
// way per case, and opens it again: each damage is refused, before raft
// starts, in one line that names the damaged file and says how to recover,
// and the data dir is left as it was. (A panic anywhere fails the test
// binary.) Undamaged variants start.
func TestOpen_RefusesDamagedDataDir(t *testing.T) {
	const rejoin = "to recover, run keel quorum remove-voter 1, move the data dir aside, start the node on an empty data dir with --join, then run keel quorum add-voter 1 with its address"
	bolt4 := fixtureSpec{LogStoreBoltDB, 4}
	bolt40 := fixtureSpec{LogStoreBoltDB, 40}
	wal4 := fixtureSpec{LogStoreWAL, 4}
	wal40 := fixtureSpec{LogStoreWAL, 40} // more than one segment
	tests := []struct {
		name    string
		spec    fixtureSpec
		damage  func(t *testing.T, dir string)
		wantErr []string // each in the error; %s is the data dir, %n the newest snapshot, %O the older, %o its id; nil: it starts
	}{
		{name: "undamaged", spec: bolt4, damage: func(*testing.T, string) {}},
		{name: "undamaged wal", spec: wal4, damage: func(*testing.T, string) {}},
		{
			name:    "raft.db deleted",
			spec:    bolt4,
			damage:  func(t *testing.T, dir string) { remove(t, filepath.Join(dir, "raft.db")) },
			wantErr: []string{"data dir %s has held raft state (meta.json records it) but its raft log %s/raft.db is missing; it must not start without it, or it could vote twice and lose acknowledged writes; " + rejoin},
		},
		{
			// A data dir from before meta.json recorded raft_state.
			name: "raft.db deleted, meta.json from an older keel",
			spec: bolt4,
			damage: func(t *testing.T, dir string) {
				remove(t, filepath.Join(dir, "raft.db"))
				writeFile(t, filepath.Join(dir, "meta.json"), `{"format":1,"node_id":1,"cluster_id":""}`)
			},
			wantErr: []string{"data dir %s has held raft state (it holds snapshot ", ") but its raft log %s/raft.db is missing"},
		},
		{
			name: "raft.db replaced by an empty store",
			spec: bolt4,
			damage: func(t *testing.T, dir string) {
				remove(t, filepath.Join(dir, "raft.db"))
				writeFile(t, filepath.Join(dir, "meta.json"), `{"format":1,"node_id":1,"cluster_id":"c1"}`)
				remove(t, filepath.Join(dir, "snapshots"))
				s, err := openLogStore(LogStoreBoltDB, dir, 1, 0, nil)
				if err != nil {
					t.Fatal(err)
				}
				_ = s.Close()
			},
			wantErr: []string{"data dir %s has held raft state (meta.json names cluster c1) but its raft log %s/raft.db holds none (no term, no entries)"},
		},
		{
			name:    "random bytes in raft.db's pages",
			spec:    bolt4,
			damage:  func(t *testing.T, dir string) { overwrite(t, filepath.Join(dir, "raft.db"), 2*4096) },
			wantErr: []string{"raft log %s/raft.db is damaged (", rejoin},
		},
		{
			name:    "random bytes all over raft.db",
			spec:    bolt4,
			damage:  func(t *testing.T, dir string) { overwrite(t, filepath.Join(dir, "raft.db"), 0) },
			wantErr: []string{"raft log %s/raft.db is damaged (invalid database)", rejoin},
		},
		{
			name: "raft.db truncated",
			spec: bolt4,
			damage: func(t *testing.T, dir string) {
				truncate(t, filepath.Join(dir, "raft.db"), func(n int64) int64 { return n / 3 })
			},
			wantErr: []string{"raft log %s/raft.db is damaged (truncated: ", rejoin},
		},
		{
			name: "newest snapshot truncated, the older one does not cover the log",
			spec: bolt4,
			damage: func(t *testing.T, dir string) {
				truncate(t, filepath.Join(snapshotPaths(t, dir)[0], "state.bin"), func(n int64) int64 { return n / 2 })
			},
			wantErr: []string{"snapshot %n/state.bin is damaged (", " bytes; its meta.json says ", rejoin},
		},
		{
			name: "newest snapshot truncated, the older one covers the log",
			spec: bolt40,
			damage: func(t *testing.T, dir string) {
				truncate(t, filepath.Join(snapshotPaths(t, dir)[0], "state.bin"), func(n int64) int64 { return n - 1 })
			},
			wantErr: []string{"snapshot %n/state.bin is damaged (", "; to recover, move %n out of %s/snapshots so that the node starts from the older snapshot %o"},
		},
		{
			name:    "random bytes in the newest snapshot",
			spec:    bolt4,
			damage:  func(t *testing.T, dir string) { overwrite(t, filepath.Join(snapshotPaths(t, dir)[0], "state.bin"), 0) },
			wantErr: []string{"snapshot %n/state.bin is damaged (CRC mismatch); " + rejoin},
		},
		{
			name: "newest snapshot fails the state machine's check",
			spec: bolt4,
			damage: func(t *testing.T, dir string) {
				rewriteSnapshot(t, snapshotPaths(t, dir)[0], []byte("\x00\x00\x00\x09abc"))
			},
			wantErr: []string{"snapshot %n/state.bin is damaged (entry of 9 bytes: EOF); " + rejoin},
		},
		{
			name: "newest snapshot's meta.json damaged",
			spec: bolt4,
			damage: func(t *testing.T, dir string) {
				writeFile(t, filepath.Join(snapshotPaths(t, dir)[0], "meta.json"), "{")
			},
			wantErr: []string{"snapshot %n/meta.json is damaged (unexpected end of JSON input)"},
		},
		{
			name:    "newest snapshot's meta.json deleted",
			spec:    bolt4,
			damage:  func(t *testing.T, dir string) { remove(t, filepath.Join(snapshotPaths(t, dir)[0], "meta.json")) },
			wantErr: []string{"snapshot %n has no meta.json; " + rejoin},
		},
		{
			// Raft only ever reads the newest.
			name:   "older snapshot damaged",
			spec:   bolt4,
			damage: func(t *testing.T, dir string) { overwrite(t, filepath.Join(snapshotPaths(t, dir)[1], "state.bin"), 0) },
		},
		{
			// What raft's reaping leaves if it stops half way.
			name:   "older snapshot half deleted",
			spec:   bolt4,
			damage: func(t *testing.T, dir string) { remove(t, filepath.Join(snapshotPaths(t, dir)[1], "meta.json")) },
		},
		{
			name:    "snapshots dir deleted",
			spec:    bolt4,
			damage:  func(t *testing.T, dir string) { remove(t, filepath.Join(dir, "snapshots")) },
			wantErr: []string{"raft log %s/raft.db starts at index ", ", and no snapshot covers the entries before it (%s/snapshots is missing); " + rejoin},
		},
		{
			name: "snapshots deleted, dir kept",
			spec: bolt4,
			damage: func(t *testing.T, dir string) {
				for _, p := range snapshotPaths(t, dir) {
					remove(t, p)
				}
			},
			wantErr: []string{"raft log %s/raft.db starts at index ", ", and no snapshot covers the entries before it (%s/snapshots holds none)"},
		},
		{
			name:    "newest snapshot deleted, the older one does not cover the log",
			spec:    bolt4,
			damage:  func(t *testing.T, dir string) { remove(t, snapshotPaths(t, dir)[0]) },
			wantErr: []string{"raft log %s/raft.db starts at index ", ", and the newest snapshot, %O, ends at index "},
		},
		{
			name:    "wal dir deleted",
			spec:    wal4,
			damage:  func(t *testing.T, dir string) { remove(t, filepath.Join(dir, "wal")) },
			wantErr: []string{"data dir %s has held raft state (meta.json records it) but its raft log %s/wal/wal-meta.db is missing; it must not start without it", rejoin},
		},
		{
			name:    "wal-meta.db deleted",
			spec:    wal4,
			damage:  func(t *testing.T, dir string) { remove(t, filepath.Join(dir, "wal", "wal-meta.db")) },
			wantErr: []string{"data dir %s has held raft state (meta.json records it) but its raft log %s/wal/wal-meta.db is missing"},
		},
		{
			// A sealed segment that holds entries raft reads at start.
			name:    "random bytes in a wal segment",
			spec:    wal40,
			damage:  func(t *testing.T, dir string) { overwrite(t, walSegmentAfterSnapshot(t, dir), 64) },
			wantErr: []string{"raft log %s/wal is damaged (cannot read entry ", rejoin},
		},
		{
			// raft-wal cannot tell damage in the open (last) segment from a
			// write torn by a crash, and drops the log from there, as it
			// must for a torn write. A torn write was never acknowledged,
			// let alone applied; here the log now ends below the index the
			// node applied (its high-water mark, highwater.go): entries it
			// acknowledged are gone, which a torn write cannot explain, and
			// the start is refused as a log rolled back. (It used to start
			// with the shorter log: a quorum that needed its
			// acknowledgements could lose them.)
			name:    "random bytes in the wal's last segment",
			spec:    wal40,
			damage:  func(t *testing.T, dir string) { overwrite(t, lastOf(walSegments(t, dir)), 64) },
			wantErr: []string{"data dir %s was rolled back: its raft log %s/wal ends at index ", "%s/highwater.json records that this node applied index ", rejoin},
		},
		{
			name:    "wal segment deleted",
			spec:    wal40,
			damage:  func(t *testing.T, dir string) { remove(t, walSegments(t, dir)[0]) },
			wantErr: []string{"raft log %s/wal is damaged (open %s/wal/00000000000000000001-", ".wal: no such file or directory); " + rejoin},
		},
		{
			name:    "wal snapshots dir deleted",
			spec:    wal4,
			damage:  func(t *testing.T, dir string) { remove(t, filepath.Join(dir, "snapshots")) },
			wantErr: []string{"raft log %s/wal starts at index ", "(%s/snapshots is missing); " + rejoin},
		},
	}
	fix := &fixtures{parent: t, made: map[fixtureSpec]string{}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := fix.get(t, tt.spec)
			snaps := snapshotPaths(t, dir)
			tt.damage(t, dir)
			before := dirState(t, dir)
			n, _, err := startSingle(t, dir, func(c *Config) {
				c.LogStore, c.TrailingLogs = tt.spec.store, tt.spec.trailing
				c.VerifySnapshot = verifyList
			})
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				poll.Until(t, waitTimeout, "the node to lead", func() bool { return n.Raft.State() == raft.Leader })
				return
			}
			if err == nil {
				t.Fatalf("Open started on the damaged data dir; want an error containing %q", tt.wantErr)
			}
			t.Logf("refused: %v", err)
			for _, want := range tt.wantErr {
				want = strings.NewReplacer("%s", dir, "%n", snaps[0], "%O", snaps[1], "%o", filepath.Base(snaps[1])).Replace(want)
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Open error:\n  %v\nwant it to contain\n  %s", err, want)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
			if after := dirState(t, dir); !maps.Equal(before, after) {
				t.Errorf("a refused Open changed the data dir:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

func walSegments(t *testing.T, dir string) []string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "wal", "*.wal"))
	if err != nil || len(segs) < 2 {
		t.Fatalf("wal segments %q, %v; want at least two", segs, err)
	}
	slices.Sort(segs)
	return segs
}

func lastOf(s []string) string { return s[len(s)-1] }

// walSegmentAfterSnapshot returns the sealed segment holding the entry
// after the newest snapshot: the first entry raft reads at start.
func walSegmentAfterSnapshot(t *testing.T, dir string) string {
	t.Helper()
	snaps, _, err := listSnapshotDirs(dir)
	if err != nil || len(snaps) == 0 {
		t.Fatalf("snapshots: %v, %v", snaps, err)
	}
	segs := walSegments(t, dir)
	var found string
	for _, seg := range segs[:len(segs)-1] { // named baseIndex-id.wal
		var base, id uint64
		if _, err := fmt.Sscanf(filepath.Base(seg), "%d-%d.wal", &base, &id); err != nil {
			t.Fatal(err)
		}
		if base <= snaps[0].index+1 {
			found = seg
		}
	}
	if found == "" || found == lastOf(segs) {
		t.Fatalf("no sealed segment holds index %d: %q", snaps[0].index+1, segs)
	}
	return found
}

// TestOpen_NewAndJoiningDataDirs: what the refusals must not catch. A data
// dir with only a meta file (a crash before the store was created)
// bootstraps; a --join data dir that was never added waits again.
func TestOpen_NewAndJoiningDataDirs(t *testing.T) {
	t.Run("meta.json only", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "meta.json"), `{"format":1,"node_id":1,"cluster_id":""}`)
		n, _, err := startSingle(t, dir, nil)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		poll.Until(t, waitTimeout, "the node to lead", func() bool { return n.Raft.State() == raft.Leader })
		if !readMetaFile(t, dir)["raft_state"].(bool) {
			t.Errorf("meta.json after bootstrap = %v, want raft_state", readMetaFile(t, dir))
		}
	})
	forEachStore(t, func(t *testing.T, store string) {
		dir := t.TempDir()
		join := func(c *Config) { c.Join, c.Voters, c.LogStore = true, nil, store }
		for i := range 2 {
			n, m, err := startSingle(t, dir, join)
			if err != nil {
				t.Fatalf("Open #%d with --join: %v", i+1, err)
			}
			if got := n.Raft.LastIndex(); got != 0 {
				t.Errorf("Open #%d with --join: last index %d, want 0 (nothing bootstrapped)", i+1, got)
			}
			if _, ok := readMetaFile(t, dir)["raft_state"]; ok {
				t.Errorf("meta.json of a node never added = %v, want no raft_state", readMetaFile(t, dir))
			}
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
			_ = m.Close()
		}
	})
}

// TestOpen_SnapshotTheStateMachineRefuses: a newest snapshot whose raft
// CRC holds but which the state machine cannot restore (here with no
// Config.VerifySnapshot to catch it first) fails Open, naming the file;
// raft does not fall back to the older snapshot, which no longer covers
// the log and would make it panic.
func TestOpen_SnapshotTheStateMachineRefuses(t *testing.T) {
	fix := &fixtures{parent: t, made: map[fixtureSpec]string{}}
	dir := fix.get(t, fixtureSpec{LogStoreBoltDB, 4})
	newest := snapshotPaths(t, dir)[0]
	rewriteSnapshot(t, newest, []byte("\x00\x00\x00\x09abc"))
	_, _, err := startSingle(t, dir, nil)
	want := fmt.Sprintf("cannot restore snapshot %s/state.bin (unexpected EOF); to recover, run keel quorum remove-voter 1", newest)
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Open error = %v, want one line containing %q", err, want)
	}
}
