package raftlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	waltypes "github.com/hashicorp/raft-wal/types"
)

func storeRange(t *testing.T, s raft.LogStore, from, to uint64, prefix string) {
	t.Helper()
	var logs []*raft.Log
	for i := from; i <= to; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: fmt.Appendf(nil, "%s%d", prefix, i)})
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatalf("StoreLogs(%d..%d): %v", from, to, err)
	}
}

func readAll(t *testing.T, s interface {
	FirstIndex() (uint64, error)
	LastIndex() (uint64, error)
	GetLog(uint64, *raft.Log) error
}) []string {
	t.Helper()
	first, err := s.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := first; i <= last && first > 0; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			t.Fatalf("GetLog(%d) of %d..%d: %v", i, first, last, err)
		}
		out = append(out, string(l.Data))
	}
	return out
}

// TestWAL_TailTruncationSurvivesRestart: raft truncates a follower's log tail
// when it conflicts with the leader's (a leader killed with entries it never
// committed does this when it rejoins). raft-wal v0.4.0 then marks the old
// tail segment sealed without writing its index block, and after a restart
// could not read it (hashicorp/raft-wal#31, fixed in v0.4.1): raft panics at
// start. The log must read back whole after the restart, and offline too.
func TestWAL_TailTruncationSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s, err := openWAL(dir, 1, 0, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	storeRange(t, s, 1, 10, "a")
	if err := s.DeleteRange(8, 10); err != nil {
		t.Fatal(err)
	}
	storeRange(t, s, 8, 12, "b")
	want := []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "b8", "b9", "b10", "b11", "b12"}
	if got := readAll(t, s); !slices.Equal(got, want) {
		t.Fatalf("before restart: %q, want %q", got, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	r, err := OpenReadOnly(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, r.store); !slices.Equal(got, want) {
		t.Errorf("read offline: %q, want %q", got, want)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = openWAL(dir, 1, 0, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := readAll(t, s); !slices.Equal(got, want) {
		t.Errorf("after restart: %q, want %q", got, want)
	}
	// And it goes on: another truncation, and appends after it.
	if err := s.DeleteRange(11, 12); err != nil {
		t.Fatal(err)
	}
	storeRange(t, s, 11, 13, "c")
	want = append(want[:10], "c11", "c12", "c13")
	if got := readAll(t, s); !slices.Equal(got, want) {
		t.Errorf("after a second truncation: %q, want %q", got, want)
	}
}

// failingVFS is raft-wal's file system with writes that fail while fail is set.
type failingVFS struct {
	*walfs.FS
	fail *atomic.Bool
}

func (v failingVFS) Create(dir, name string, size uint64) (waltypes.WritableFile, error) {
	f, err := v.FS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return failingFile{f, v.fail}, nil
}

func (v failingVFS) OpenWriter(dir, name string) (waltypes.WritableFile, error) {
	f, err := v.FS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return failingFile{f, v.fail}, nil
}

type failingFile struct {
	waltypes.WritableFile
	fail *atomic.Bool
}

func (f failingFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fail.Load() {
		return 0, errors.New("injected write error")
	}
	return f.WritableFile.WriteAt(p, off)
}

// TestWAL_WriteErrorStopsWrites: after a failed append the wal store takes
// no more writes (raft-wal v0.4.0's writer state is wrong after one); a
// restart recovers the log as it was before the failed append.
func TestWAL_WriteErrorStopsWrites(t *testing.T) {
	dataDir := t.TempDir()
	dir := filepath.Join(dataDir, walDirName)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var fail atomic.Bool
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(dir, wal.WithMetaStore(meta), wal.WithLogger(hclog.NewNullLogger()),
		wal.WithSegmentFiler(truncatedTailFiler{segment.NewFiler(dir, failingVFS{walfs.New(), &fail})}))
	if err != nil {
		t.Fatal(err)
	}
	s := &walStore{WAL: w, meta: meta, unlock: func() {}}
	storeRange(t, s, 1, 3, "a")
	fail.Store(true)
	if err := s.StoreLogs([]*raft.Log{{Index: 4, Term: 1, Data: []byte("a4")}}); err == nil {
		t.Fatal("StoreLogs with a failing write succeeded")
	}
	fail.Store(false)
	for name, err := range map[string]error{
		"StoreLogs":   s.StoreLogs([]*raft.Log{{Index: 4, Term: 1, Data: []byte("a4")}}),
		"StoreLog":    s.StoreLog(&raft.Log{Index: 4, Term: 1, Data: []byte("a4")}),
		"DeleteRange": s.DeleteRange(1, 1),
	} {
		if err == nil || !strings.Contains(err.Error(), "no more writes until the node restarts: injected write error") {
			t.Errorf("%s after a write error = %v, want the store broken", name, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2, err := openWAL(dataDir, 1, 0, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got := readAll(t, s2); !slices.Equal(got, []string{"a1", "a2", "a3"}) {
		t.Errorf("after restart: %q, want [a1 a2 a3]", got)
	}
	storeRange(t, s2, 4, 5, "b")
	if got := readAll(t, s2); !slices.Equal(got, []string{"a1", "a2", "a3", "b4", "b5"}) {
		t.Errorf("appending after restart: %q", got)
	}
}
