package raftlog

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// TestLogReader_SnapshotAndTail writes entries, snapshots, writes more, stops
// the node and reads it all back offline: the snapshot, then the log after it.
// Reading must not change a file, with either log store.
func TestLogReader_SnapshotAndTail(t *testing.T) {
	forEachStore(t, testLogReaderSnapshotAndTail)
}

func testLogReaderSnapshotAndTail(t *testing.T, store string) {
	nodes := startClusterWith(t, 1, storeConfig(t, store))
	n := nodes[0]
	waitForLeader(t, nodes)
	apply(t, nodes, "a")
	apply(t, nodes, "b")
	if err := n.node.Raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	snapIndex := n.node.Raft.LastIndex()
	apply(t, nodes, "c")
	last := apply(t, nodes, "d").Index()

	// While the node runs, the store is locked.
	if _, err := OpenReadOnly(n.dir); err == nil || !strings.Contains(err.Error(), "in use by a running controller; stop it first") {
		t.Fatalf("OpenReadOnly on a running node: err = %v, want in use", err)
	}
	n.close(t)

	before := listTree(t, n.dir)
	r, err := OpenReadOnly(n.dir)
	if err != nil {
		t.Fatalf("OpenReadOnly: %v", err)
	}
	meta, rc, err := r.LatestSnapshot()
	if err != nil || meta == nil {
		t.Fatalf("LatestSnapshot = %v, %v; want a snapshot", meta, err)
	}
	if meta.Index != snapIndex {
		t.Errorf("snapshot index = %d, want %d", meta.Index, snapIndex)
	}
	sm := &listSM{}
	if err := sm.Restore(rc); err != nil {
		t.Fatalf("restore snapshot: %v", err)
	}
	_ = rc.Close()
	if got := sm.list(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("snapshot holds %q, want [a b]", got)
	}

	if li, err := r.LastIndex(); err != nil || li != last {
		t.Errorf("LastIndex = %d, %v; want %d", li, err, last)
	}
	var cmds []string
	var prev uint64
	err = r.Entries(meta.Index+1, func(index, term uint64, typ raft.LogType, data []byte) error {
		if index <= prev || index <= meta.Index || term == 0 {
			t.Errorf("entry index %d term %d after %d", index, term, prev)
		}
		prev = index
		if typ == raft.LogCommand {
			cmds = append(cmds, string(data))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Entries: %v", err)
	}
	if !slices.Equal(cmds, []string{"c", "d"}) {
		t.Errorf("commands after the snapshot = %q, want [c d]", cmds)
	}
	if prev != last {
		t.Errorf("last entry read = %d, want %d", prev, last)
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if after := listTree(t, n.dir); !slices.Equal(before, after) {
		t.Errorf("reading changed the data dir:\nbefore %q\nafter  %q", before, after)
	}
}

func TestLogReader_SnapshotCRCMismatch(t *testing.T) {
	nodes := startCluster(t, 1)
	n := nodes[0]
	waitForLeader(t, nodes)
	apply(t, nodes, "a")
	if err := n.node.Raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	n.close(t)

	states, _ := filepath.Glob(filepath.Join(n.dir, "snapshots", "*", "state.bin"))
	if len(states) != 1 {
		t.Fatalf("snapshot files = %q, want one", states)
	}
	b, err := os.ReadFile(states[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff
	if err := os.WriteFile(states[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := OpenReadOnly(n.dir)
	if err != nil {
		t.Fatalf("OpenReadOnly: %v", err)
	}
	defer r.Close()
	_, rc, err := r.LatestSnapshot()
	if err != nil {
		t.Fatalf("LatestSnapshot: %v", err)
	}
	defer rc.Close()
	if _, err := io.ReadAll(rc); err == nil || !strings.Contains(err.Error(), "CRC mismatch") {
		t.Errorf("reading a flipped snapshot: err = %v, want CRC mismatch", err)
	}
}

func TestOpenReadOnly_NotADataDir(t *testing.T) {
	dir := t.TempDir()
	_, err := OpenReadOnly(dir)
	if err == nil || !strings.Contains(err.Error(), "has no raft.db or wal/") {
		t.Errorf("OpenReadOnly(empty dir) err = %v, want no raft.db or wal/", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("OpenReadOnly created files in an empty dir: %v", entries)
	}
}

// TestOpenReadOnly_WhichStore: the store meta.json names is the one read;
// without a meta file, the one present.
func TestOpenReadOnly_WhichStore(t *testing.T) {
	mkdir := func(t *testing.T, p string) {
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name    string
		setup   func(t *testing.T, dir string)
		wantErr string // %s is replaced by the data dir
	}{
		{
			name: "meta names wal, only raft.db present",
			setup: func(t *testing.T, dir string) {
				writeFile(t, filepath.Join(dir, "meta.json"), `{"format":2,"node_id":1,"log_store":"wal"}`)
				writeFile(t, filepath.Join(dir, "raft.db"), "")
			},
			wantErr: "data dir %s has no wal/, the raft log its meta.json names",
		},
		{
			name: "meta names boltdb, only wal present",
			setup: func(t *testing.T, dir string) {
				writeFile(t, filepath.Join(dir, "meta.json"), `{"format":1,"node_id":1}`)
				mkdir(t, filepath.Join(dir, "wal"))
			},
			wantErr: "data dir %s has no raft.db, the raft log its meta.json names",
		},
		{
			name: "no meta, both present",
			setup: func(t *testing.T, dir string) {
				writeFile(t, filepath.Join(dir, "raft.db"), "")
				mkdir(t, filepath.Join(dir, "wal"))
			},
			wantErr: "data dir %s has both raft.db and wal/ and no meta.json",
		},
		{
			name: "no meta, a wal without its meta db",
			setup: func(t *testing.T, dir string) {
				mkdir(t, filepath.Join(dir, "wal"))
			},
			wantErr: "cannot open raft log meta %s/wal/wal-meta.db: no such file or directory",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			before := listTree(t, dir)
			r, err := OpenReadOnly(dir)
			if err == nil {
				r.Close()
			}
			if want := strings.ReplaceAll(tt.wantErr, "%s", dir); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("OpenReadOnly err = %v, want %q", err, want)
			}
			if after := listTree(t, dir); !slices.Equal(before, after) {
				t.Errorf("OpenReadOnly changed the data dir:\nbefore %q\nafter  %q", before, after)
			}
		})
	}
}

// listTree lists every path under dir with its size, to show nothing changed.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %d %s", p, fi.Size(), fi.ModTime()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
