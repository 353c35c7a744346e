package raftlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc64"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/keel-dev/keel/internal/atomicfile"
)

// The layout of raft.FileSnapshotStore, which this file reads without
// raft.NewFileSnapshotStore: that constructor creates snapshots/ and writes a
// permission-test file, and an offline reader must leave the data dir as it
// found it.
const (
	snapshotDirName       = "snapshots"
	snapshotMetaFileName  = "meta.json"
	snapshotStateFileName = "state.bin"
	snapshotTmpSuffix     = ".tmp"
)

// LogReader reads a stopped node's raft log and snapshots without changing
// anything in its data dir. It knows nothing of what the entries hold.
type LogReader struct {
	dir   string
	store logReadStore
}

// logReadStore is what LogReader needs of a log store.
type logReadStore interface {
	FirstIndex() (uint64, error)
	LastIndex() (uint64, error)
	GetLog(index uint64, log *raft.Log) error
	Close() error
}

// OpenReadOnly opens the raft log and snapshot store in dataDir for reading,
// with either log store (LogStoreBoltDB, LogStoreWAL): the one meta.json
// names or, without a meta file, the one present. It fails if dataDir has
// neither raft.db nor wal/, and with "in use by a running controller" if
// another process (a running controller) holds the store: bolt's file lock,
// and for a wal the lock on wal/ as well, keep readers out while a writer
// has it open.
func OpenReadOnly(dataDir string) (*LogReader, error) {
	fi, err := os.Stat(dataDir)
	switch {
	case err != nil:
		return nil, fmt.Errorf("cannot read data dir %s: %v", dataDir, atomicfile.PathCause(err))
	case !fi.IsDir():
		return nil, fmt.Errorf("data dir %s is not a directory", dataDir)
	}
	kind, err := detectLogStore(dataDir)
	if err != nil {
		return nil, err
	}
	if kind == LogStoreWAL {
		store, err := openWALReadOnly(dataDir)
		if err != nil {
			return nil, err
		}
		return &LogReader{dir: dataDir, store: store}, nil
	}
	dbPath := filepath.Join(dataDir, raftDBFileName)
	store, err := raftboltdb.New(raftboltdb.Options{
		Path:        dbPath,
		BoltOptions: &bbolt.Options{ReadOnly: true, Timeout: boltLockTimeout},
	})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("data dir %s is in use by a running controller; stop it first", dataDir)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot open raft store %s: %v", dbPath, atomicfile.PathCause(err))
	}
	return &LogReader{dir: dataDir, store: store}, nil
}

// detectLogStore says which store a data dir holds: the one its meta file
// names, else the one whose files are there.
func detectLogStore(dataDir string) (string, error) {
	m, found, err := readMeta(dataDir)
	if err != nil {
		return "", err
	}
	files := map[string]string{LogStoreBoltDB: raftDBFileName, LogStoreWAL: walDirName + "/"}
	var kinds []string
	for _, kind := range []string{LogStoreBoltDB, LogStoreWAL} {
		path := filepath.Join(dataDir, files[kind])
		if _, err := os.Stat(path); err == nil {
			kinds = append(kinds, kind)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("cannot read %s: %v", path, atomicfile.PathCause(err))
		}
	}
	switch {
	case found && slices.Contains(kinds, m.logStore()):
		return m.logStore(), nil
	case found:
		return "", fmt.Errorf("data dir %s has no %s, the raft log its %s names", dataDir, files[m.logStore()], metaFileName)
	case len(kinds) == 1:
		return kinds[0], nil
	case len(kinds) == 0:
		return "", fmt.Errorf("data dir %s has no %s or %s/; is it a controller's data dir?", dataDir, raftDBFileName, walDirName)
	}
	return "", fmt.Errorf("data dir %s has both %s and %s/ and no %s to say which is its raft log", dataDir, raftDBFileName, walDirName, metaFileName)
}

// Close releases the raft store.
func (r *LogReader) Close() error { return r.store.Close() }

// FirstIndex returns the first index in the log, 0 if the log is empty.
func (r *LogReader) FirstIndex() (uint64, error) { return r.store.FirstIndex() }

// LastIndex returns the last index in the log, 0 if the log is empty.
func (r *LogReader) LastIndex() (uint64, error) { return r.store.LastIndex() }

// Entries calls fn for every log entry from index from (or the first index,
// if later) to the last, in order. It stops at fn's first error and returns
// it; an entry that is missing or cannot be read ends it with an error
// naming the index.
func (r *LogReader) Entries(from uint64, fn func(index, term uint64, typ raft.LogType, data []byte) error) error {
	first, err := r.store.FirstIndex()
	if err != nil {
		return fmt.Errorf("read first log index: %v", err)
	}
	last, err := r.store.LastIndex()
	if err != nil {
		return fmt.Errorf("read last log index: %v", err)
	}
	if first == 0 {
		return nil // empty log
	}
	from = max(from, first)
	for i := from; i <= last; i++ {
		var l raft.Log
		if err := r.store.GetLog(i, &l); err != nil {
			return fmt.Errorf("log entry %d: %v", i, err)
		}
		if err := fn(l.Index, l.Term, l.Type, l.Data); err != nil {
			return err
		}
	}
	return nil
}

// fileSnapshotMeta is raft.FileSnapshotStore's meta.json.
type fileSnapshotMeta struct {
	raft.SnapshotMeta
	CRC []byte
}

// LatestSnapshot opens the newest complete snapshot, choosing as raft does
// (highest term, then index, then id) among those whose meta.json reads.
// It returns a nil meta and reader when there is none. The reader checks the
// snapshot file's CRC as it reaches the end: a mismatch is returned by Read
// instead of io.EOF. The caller closes the reader.
func (r *LogReader) LatestSnapshot() (*raft.SnapshotMeta, io.ReadCloser, error) {
	base := filepath.Join(r.dir, snapshotDirName)
	dirs, err := os.ReadDir(base)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("cannot list snapshots in %s: %v", base, atomicfile.PathCause(err))
	}
	var metas []*fileSnapshotMeta
	for _, d := range dirs {
		if !d.IsDir() || strings.HasSuffix(d.Name(), snapshotTmpSuffix) {
			continue
		}
		m, err := readSnapshotMeta(filepath.Join(base, d.Name(), snapshotMetaFileName))
		if err != nil {
			continue // raft skips these too: a snapshot it never finished
		}
		if m.Version < raft.SnapshotVersionMin || m.Version > raft.SnapshotVersionMax {
			continue
		}
		metas = append(metas, m)
	}
	if len(metas) == 0 {
		return nil, nil, nil
	}
	sort.Slice(metas, func(i, j int) bool {
		a, b := metas[i], metas[j]
		if a.Term != b.Term {
			return a.Term > b.Term
		}
		if a.Index != b.Index {
			return a.Index > b.Index
		}
		return a.ID > b.ID
	})
	m := metas[0]
	statePath := filepath.Join(base, m.ID, snapshotStateFileName)
	fh, err := os.Open(statePath)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot open snapshot %s: %v", statePath, atomicfile.PathCause(err))
	}
	meta := m.SnapshotMeta
	return &meta, &crcReader{
		r:    bufio.NewReaderSize(fh, 64<<10),
		f:    fh,
		h:    crc64.New(crc64.MakeTable(crc64.ECMA)),
		want: m.CRC,
		path: statePath,
	}, nil
}

func readSnapshotMeta(path string) (*fileSnapshotMeta, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := &fileSnapshotMeta{}
	if err := json.Unmarshal(b, m); err != nil {
		return nil, err
	}
	return m, nil
}

// crcReader streams a snapshot file and checks raft's CRC at its end, so a
// large snapshot is read once rather than hashed first and read again.
type crcReader struct {
	r    io.Reader
	f    *os.File
	h    hash.Hash64
	want []byte
	path string
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	if err == io.EOF && !bytes.Equal(c.h.Sum(nil), c.want) {
		return n, fmt.Errorf("snapshot %s: CRC mismatch", c.path)
	}
	return n, err
}

func (c *crcReader) Close() error { return c.f.Close() }
