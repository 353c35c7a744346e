package integration

// A controller's data dir damaged while it was stopped: `keel controller`
// refuses it, exits with status 1 and says in one line on stderr which file
// is at fault and how to recover; it never panics and never starts from
// what is left (a node that lost raft.db once started at term 1 from its
// snapshot, voted again, and an acknowledged topic was lost). And a disk
// that fails under a running node (disks_test.go).

import (
	"encoding/json"
	"fmt"
	"hash/crc64"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest/keelproc"
)

func TestDataDir_DamageRefusedAtStart(t *testing.T) {
	c := startCluster(t, 3, snapshotFlags)
	leader, _ := c.WaitForActive(t, activeTimeout)
	f := otherThan(c.IDs(), leader)[0]
	// Two snapshots, the log truncated behind the newer (every 16 entries,
	// keeping 8).
	for range 2 {
		var last uint64
		for range 40 {
			last = c.appendNoOp(t, 10*time.Second).Index
		}
		c.WaitForApplied(t, []int32{f}, last)
		waitForSnapshot(t, c.DataDir(f), last-16)
	}
	c.Stop(f)
	intact := c.DataDir(f)
	snaps := snapshotDirs(t, intact)
	if len(snaps) < 2 {
		t.Fatalf("node %d's snapshots: %q; want two", f, snaps)
	}
	newest := filepath.Base(snaps[0])
	const rejoin = "to recover, run keel quorum remove-voter"

	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   []string // %s is the data dir, %n the newest snapshot's dir
	}{
		{
			name:   "raft.db deleted",
			damage: func(t *testing.T, dir string) { mustRemove(t, filepath.Join(dir, "raft.db")) },
			want:   []string{"data dir %s has held raft state (meta.json records it) but its raft log %s/raft.db is missing", rejoin},
		},
		{
			name:   "random bytes in raft.db",
			damage: func(t *testing.T, dir string) { scribble(t, filepath.Join(dir, "raft.db"), 2*4096) },
			want:   []string{"raft log %s/raft.db is damaged (", rejoin},
		},
		{
			name: "newest snapshot truncated",
			damage: func(t *testing.T, dir string) {
				if err := os.Truncate(filepath.Join(dir, "snapshots", newest, "state.bin"), 100); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"snapshot %n/state.bin is damaged (100 bytes; its meta.json says "},
		},
		{
			// raft's CRC agrees, Keel's own SHA-256 trailer does not.
			name: "newest snapshot altered, raft's CRC updated",
			damage: func(t *testing.T, dir string) {
				snap := filepath.Join(dir, "snapshots", newest)
				b, err := os.ReadFile(filepath.Join(snap, "state.bin"))
				if err != nil {
					t.Fatal(err)
				}
				b[len(b)/2] ^= 0xff
				rewriteRaftSnapshot(t, snap, b)
			},
			want: []string{"snapshot %n/state.bin is damaged (", rejoin},
		},
		{
			name:   "snapshots dir deleted",
			damage: func(t *testing.T, dir string) { mustRemove(t, filepath.Join(dir, "snapshots")) },
			want:   []string{"raft log %s/raft.db starts at index ", "and no snapshot covers the entries before it (%s/snapshots is missing)", rejoin},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			copyTree(t, intact, dir)
			tc.damage(t, dir)
			want := make([]string, len(tc.want))
			for i, w := range tc.want {
				want[i] = strings.NewReplacer("%s", dir, "%n", filepath.Join(dir, "snapshots", newest)).Replace(w)
			}
			addr := c.Addr(f)
			stderr := expectRefused(t, addr, controllerArgs(f, addr, dir, c.VotersFlag()), want...)
			t.Logf("refused: %s", strings.TrimSpace(stderr))
			if strings.Contains(stderr, "panic") {
				t.Errorf("stderr mentions a panic: %s", stderr)
			}
		})
	}

	// The node's own data dir, undamaged, still starts and catches up.
	c.Restart(f)
	c.WaitForConverged(t, c.IDs(), c.appendNoOp(t, 10*time.Second).Index)
}

// snapshotDirs returns dataDir's raft snapshot directories, newest first
// (raft names them term-index-msec).
func snapshotDirs(t *testing.T, dataDir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dataDir, "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasSuffix(e.Name(), ".tmp") {
			dirs = append(dirs, filepath.Join(dataDir, "snapshots", e.Name()))
		}
	}
	// Newest first, as raft orders them: by term, then index.
	key := func(dir string) [2]uint64 {
		var k [2]uint64
		parts := strings.Split(filepath.Base(dir), "-")
		for i := range k {
			if i < len(parts) {
				k[i], _ = strconv.ParseUint(parts[i], 10, 64)
			}
		}
		return k
	}
	sort.Slice(dirs, func(i, j int) bool {
		a, b := key(dirs[i]), key(dirs[j])
		return a[0] > b[0] || a[0] == b[0] && a[1] > b[1]
	})
	return dirs
}

// rewriteRaftSnapshot replaces a raft snapshot's state.bin with data and
// makes its meta.json's size and CRC match.
func rewriteRaftSnapshot(t *testing.T, snap string, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(snap, "state.bin"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	metaPath := filepath.Join(snap, "meta.json")
	b, err := os.ReadFile(metaPath)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	h := crc64.New(crc64.MakeTable(crc64.ECMA))
	h.Write(data)
	m["Size"], m["CRC"] = len(data), h.Sum(nil)
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(metaPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// scribble writes bytes that are not what was there over path from offset
// to its end.
func scribble(t *testing.T, path string, offset int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := offset; i < int64(len(b)); i++ {
		b[i] = byte(i*7919>>3) ^ 0x5a
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func mustRemove(t *testing.T, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
}

// copyTree copies the directory tree src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
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

// TestDisk_ReadOnlyLeaderStops: the leader's file system turns read-only
// under load. It cannot store entries, steps down, and when the next
// election asks it to store a new term it cannot, so it stops: exit status
// 1 and one line saying why, not raft's panic. Checked and mounted again,
// the disk takes the node back, which catches up.
func TestDisk_ReadOnlyLeaderStops(t *testing.T) {
	if why, whyRO := disksAvailable(); why != "" || whyRO != "" {
		t.Skipf("no disks to fault: %s%s", why, whyRO)
	}
	ds := newDisks(t, "controller", 1, 2, 3)
	c := startCluster(t, 3, withControllerDataDirs(ds.dataDir))
	leader, _ := c.WaitForActive(t, activeTimeout)
	w := c.startNoOpWriters(t, 2)
	w.waitForMore(t, 0, 20)
	if err := ds[leader].turnReadOnly(); err != nil {
		t.Fatal(err)
	}
	nd := c.node(leader)
	poll.Until(t, 30*time.Second, fmt.Sprintf("node %d to stop", leader), func() bool { return !nd.Running() })
	out := strings.TrimSpace(nd.Output())
	last := keelproc.LastLines(out, 1)
	const want = "keel: raft cannot store its current term "
	if nd.ExitCode() != 1 || !strings.HasPrefix(last, want) || !strings.Contains(last, "read-only file system") {
		t.Errorf("node %d exited with status %d, last line %q; want 1 and %q...", leader, nd.ExitCode(), last, want)
	}
	if strings.Contains(out, "panic:") {
		t.Errorf("node %d panicked:\n%s", leader, out)
	}
	w.halt()
	if err := ds[leader].repair(); err != nil {
		t.Fatal(err)
	}
	c.Restart(leader)
	c.WaitForConverged(t, c.IDs(), c.appendNoOp(t, 10*time.Second).Index)
}
