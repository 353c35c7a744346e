package raftlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	waltypes "github.com/hashicorp/raft-wal/types"
	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/keel-dev/keel/internal/atomicfile"
)

// The log stores a data dir can hold its raft log and stable state (current
// term and vote) in, chosen by Config.LogStore (keel controller --log-store).
// The snapshots (DATA/snapshots/) and DATA/meta.json are the same for both.
//
//   - LogStoreBoltDB, the default: raft-boltdb in DATA/raft.db, the layout
//     every data dir had before there was a choice. It fsyncs twice per append.
//   - LogStoreWAL: hashicorp/raft-wal, the segmented write-ahead log Consul
//     adopted as its newer raft log store, in DATA/wal/ (64 MiB segment files,
//     preallocated, and wal-meta.db, a small bolt file for the segment list
//     and the stable state). It fsyncs once per append.
//
// A data dir keeps the store it was created with: meta.json records it, and
// Open refuses a data dir that holds the other store, with one line saying
// how to switch. There is no in-place conversion. To move a quorum to another
// store, migrate one voter at a time, as Consul documents for raft-wal:
//
//  1. Check the quorum is healthy: keel quorum status shows a leader and
//     every voter caught up.
//  2. Stop the node (SIGTERM) and wait for keel quorum status to show a
//     leader among the others. The node loses its recorded vote with its
//     data dir; once the others have settled on a leader, the term it voted
//     in is over and it cannot vote twice in it.
//  3. Move its data dir aside; keep it until the node has caught up.
//  4. Start the node with the same --node-id, --listen and --voters, and
//     --log-store wal (or boltdb), on an empty data dir. It bootstraps from
//     --voters, the same configuration entry the quorum's log starts with
//     (Keel's voter set is fixed at bootstrap), and rejoins as a follower:
//     the leader sends it its latest snapshot and the log after that, or
//     the whole log if it still holds it.
//  5. Wait until keel quorum status shows it caught up, then move on to the
//     next voter.
//
// While one voter is being migrated the quorum runs on the others, so a
// three-voter quorum tolerates no other failure during steps 2 to 5. The
// stores may be mixed within a quorum for as long as a migration takes.
const (
	LogStoreBoltDB = "boltdb"
	LogStoreWAL    = "wal"
)

const (
	walDirName = "wal"
	// dirLockTimeout matches boltLockTimeout: how long Open waits for the
	// wal dir's lock before it reports the data dir in use.
	dirLockTimeout = time.Second
)

// errReadOnly is what a read-only wal returns to a write.
var errReadOnly = errors.New("raft log opened read-only")

// CheckLogStore checks a --log-store value; "" means LogStoreBoltDB.
func CheckLogStore(s string) error {
	switch s {
	case "", LogStoreBoltDB, LogStoreWAL:
		return nil
	}
	return fmt.Errorf("--log-store %q: want %s or %s", s, LogStoreBoltDB, LogStoreWAL)
}

// logStoreOrDefault maps "" to the default store.
func logStoreOrDefault(s string) string {
	if s == "" {
		return LogStoreBoltDB
	}
	return s
}

// logStore is a raft log and stable store that Node.Close releases.
type logStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

// openLogStore opens (creating if need be) the store kind in dataDir for a
// running node. Every error is one line.
// A damaged store is refused (checkBoltFile; openWAL), never a panic.
func openLogStore(kind, dataDir string, nodeID int32, walSegmentSize int, logger hclog.Logger) (logStore, error) {
	if kind == LogStoreWAL {
		return openWAL(dataDir, nodeID, walSegmentSize, logger)
	}
	if err := checkBoltFile(dataDir, nodeID); err != nil {
		return nil, err
	}
	dbPath := filepath.Join(dataDir, raftDBFileName)
	var store *raftboltdb.BoltStore
	err := guarded(func() error {
		var err error
		store, err = raftboltdb.New(raftboltdb.Options{
			Path:        dbPath,
			BoltOptions: &bbolt.Options{Timeout: boltLockTimeout},
		})
		return err
	})
	var pe *panicError
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("data dir %s is in use by another process", dataDir)
	case errors.As(err, &pe):
		return nil, fmt.Errorf("raft log %s is damaged (%v); %s", dbPath, err, rejoinHint(nodeID))
	case err != nil:
		return nil, fmt.Errorf("cannot open raft store %s: %v", dbPath, atomicfile.PathCause(err))
	}
	return store, nil
}

// walStore is a raft-wal WAL with the resources it does not release itself,
// made fail-stop on a write error.
type walStore struct {
	*wal.WAL
	meta   waltypes.MetaStore // wal.WAL.Close leaves it open (raft-wal v0.4.0)
	unlock func()

	mu     sync.Mutex
	broken error // the first write error; every later write fails with it
}

// StoreLogs appends logs. After a failed write or fsync, raft-wal v0.4.0
// leaves the failed batch in its segment writer's in-memory state
// (hashicorp/raft-wal#32, fixed in v0.4.1): what it then holds in memory is
// not what is durably on disk. So the first write error breaks the store:
// every later write returns it, and the node takes no more entries until it
// restarts and recovers the log from disk, which keeps only complete,
// committed batches.
func (s *walStore) StoreLogs(logs []*raft.Log) error {
	return s.write(func() error { return s.WAL.StoreLogs(logs) })
}

// StoreLog appends one log; see StoreLogs.
func (s *walStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// DeleteRange deletes logs min to max inclusive; see StoreLogs.
func (s *walStore) DeleteRange(min, max uint64) error {
	return s.write(func() error { return s.WAL.DeleteRange(min, max) })
}

func (s *walStore) write(f func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return s.broken
	}
	if err := f(); err != nil {
		s.broken = fmt.Errorf("raft log write failed, no more writes until the node restarts: %w", err)
		return err
	}
	return nil
}

// Close closes the WAL, then its meta store, then releases the dir lock.
func (s *walStore) Close() error {
	err := s.WAL.Close()
	if merr := s.meta.Close(); err == nil {
		err = merr
	}
	s.unlock()
	return err
}

// openWAL opens DATA/wal for writing. It takes an exclusive lock on the
// directory first: raft-wal opens its bolt meta file without a lock timeout,
// so a second process would otherwise wait forever instead of failing.
//
// raft-wal checks what it reads (each segment's frames, its meta store) and
// reports damage as an error wrapping types.ErrCorrupt; it runs guarded all
// the same, so that damage it does not foresee is an error too.
func openWAL(dataDir string, nodeID int32, segmentSize int, logger hclog.Logger) (*walStore, error) {
	dir := filepath.Join(dataDir, walDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot create raft log dir %s: %v", dir, atomicfile.PathCause(err))
	}
	unlock, err := lockDir(dir, false, dirLockTimeout)
	if errors.Is(err, errDirLocked) {
		return nil, fmt.Errorf("data dir %s is in use by another process", dataDir)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot lock raft log dir %s: %v", dir, atomicfile.PathCause(err))
	}
	meta := &metadb.BoltMetaDB{}
	var w *wal.WAL
	err = guarded(func() error {
		var err error
		w, err = wal.Open(dir,
			wal.WithMetaStore(meta),
			wal.WithSegmentFiler(truncatedTailFiler{segment.NewFiler(dir, walfs.New())}),
			wal.WithLogger(logger),
			wal.WithSegmentSize(segmentSize), // 0 is raft-wal's default, 64 MiB
		)
		return err
	})
	if err != nil {
		_ = meta.Close()
		unlock()
		// A segment the meta store lists but the dir lacks is damage too.
		var pe *panicError
		if errors.Is(err, waltypes.ErrCorrupt) || errors.Is(err, fs.ErrNotExist) || errors.As(err, &pe) {
			return nil, fmt.Errorf("raft log %s is damaged (%v); %s", dir, err, rejoinHint(nodeID))
		}
		return nil, fmt.Errorf("cannot open raft log %s: %v", dir, err)
	}
	return &walStore{WAL: w, meta: meta, unlock: unlock}, nil
}

// openWALReadOnly opens DATA/wal for LogReader without changing anything in
// it. raft-wal has no read-only mode, but it takes its meta store and its
// file system as options: this passes a meta store that reads wal-meta.db
// with a read-only bolt handle and a file system that opens every file
// read-only, creates nothing and deletes nothing, so raft-wal's own recovery
// decides what the log holds, exactly as the node will when it next starts.
// Whatever recovery would write (a fresh tail segment, the deletion of a
// crashed run's leftover segment) stays in memory. A running controller holds
// the dir's lock and wal-meta.db's bolt lock; either makes this fail with
// "in use by a running controller".
func openWALReadOnly(dataDir string) (*walStore, error) {
	dir := filepath.Join(dataDir, walDirName)
	unlock, err := lockDir(dir, true, dirLockTimeout)
	if errors.Is(err, errDirLocked) {
		return nil, fmt.Errorf("data dir %s is in use by a running controller; stop it first", dataDir)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot lock raft log dir %s: %v", dir, atomicfile.PathCause(err))
	}
	metaPath := filepath.Join(dir, metadb.FileName)
	db, err := bbolt.Open(metaPath, 0o600, &bbolt.Options{ReadOnly: true, Timeout: boltLockTimeout})
	if errors.Is(err, berrors.ErrTimeout) {
		unlock()
		return nil, fmt.Errorf("data dir %s is in use by a running controller; stop it first", dataDir)
	}
	if err != nil {
		unlock()
		return nil, fmt.Errorf("cannot open raft log meta %s: %v", metaPath, atomicfile.PathCause(err))
	}
	meta := &readOnlyMeta{db: db}
	w, err := wal.Open(dir,
		wal.WithMetaStore(meta),
		wal.WithSegmentFiler(truncatedTailFiler{segment.NewFiler(dir, readOnlyVFS{walfs.New()})}),
		wal.WithLogger(hclog.NewNullLogger()),
	)
	if err != nil {
		_ = meta.Close()
		unlock()
		return nil, fmt.Errorf("cannot open raft log %s: %v", dir, err)
	}
	return &walStore{WAL: w, meta: meta, unlock: unlock}, nil
}

// truncatedTailFiler reads a segment that raft-wal v0.4.0 sealed without an
// index block. v0.4.0 seals the tail segment in its metadata when it
// truncates the log's tail (raft does on a follower whose log conflicts with
// the leader's) but writes no index into it, and after a restart cannot read
// it: "sealed segment has no index block", and raft panics at start
// (hashicorp/raft-wal#31, fixed in v0.4.1). Such a segment is read the way
// raft-wal reads its tail, by scanning its committed frames, up to the
// MaxIndex the truncation recorded. Segments sealed with an index are read as
// usual; so, after an upgrade, are data dirs a v0.4.0 keel wrote.
type truncatedTailFiler struct{ *segment.Filer }

func (f truncatedTailFiler) Open(info waltypes.SegmentInfo) (waltypes.SegmentReader, error) {
	if info.SealTime.IsZero() || info.IndexStart != 0 {
		return f.Filer.Open(info)
	}
	r, err := f.Filer.RecoverTail(info) // reads only; nothing appends to a sealed segment
	if err != nil {
		return nil, err
	}
	return maxIndexReader{r, info.MaxIndex}, nil
}

// maxIndexReader hides a truncated segment's entries after max.
type maxIndexReader struct {
	waltypes.SegmentReader
	max uint64
}

func (r maxIndexReader) GetLog(idx uint64) (*waltypes.PooledBuffer, error) {
	if idx > r.max {
		return nil, waltypes.ErrNotFound
	}
	return r.SegmentReader.GetLog(idx)
}

// readOnlyMeta is raft-wal's meta store (metadb.BoltMetaDB's format) read
// through a read-only bolt handle.
type readOnlyMeta struct{ db *bbolt.DB }

func (m *readOnlyMeta) Load(string) (waltypes.PersistentState, error) {
	var st waltypes.PersistentState
	err := m.db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte(metadb.MetaBucket))
		if b == nil {
			return fmt.Errorf("%w: %s has no %q bucket", waltypes.ErrCorrupt, metadb.FileName, metadb.MetaBucket)
		}
		raw := b.Get([]byte(metadb.MetaKey))
		if raw == nil {
			return nil // an empty log
		}
		if err := json.Unmarshal(raw, &st); err != nil {
			return fmt.Errorf("%w: cannot parse the segment list: %v", waltypes.ErrCorrupt, err)
		}
		return nil
	})
	return st, err
}

// CommitState keeps nothing: it is called only by recovery steps a writer
// would persist (see openWALReadOnly), and the reader never writes a log.
func (m *readOnlyMeta) CommitState(waltypes.PersistentState) error { return nil }

func (m *readOnlyMeta) GetStable(key []byte) ([]byte, error) {
	var v []byte
	err := m.db.View(func(tx *bbolt.Tx) error {
		if b := tx.Bucket([]byte(metadb.StableBucket)); b != nil {
			if raw := b.Get(key); raw != nil {
				v = append([]byte(nil), raw...)
			}
		}
		return nil
	})
	return v, err
}

func (m *readOnlyMeta) SetStable(_, _ []byte) error { return errReadOnly }

func (m *readOnlyMeta) Close() error { return m.db.Close() }

// readOnlyVFS is raft-wal's file system with every write refused or kept in
// memory, for openWALReadOnly.
type readOnlyVFS struct{ fs *walfs.FS }

func (v readOnlyVFS) ListDir(dir string) ([]string, error) { return v.fs.ListDir(dir) }

func (v readOnlyVFS) OpenReader(dir, name string) (waltypes.ReadableFile, error) {
	return v.fs.OpenReader(dir, name)
}

// OpenWriter opens the tail segment read-only: recovery only reads it.
func (v readOnlyVFS) OpenWriter(dir, name string) (waltypes.WritableFile, error) {
	f, err := v.fs.OpenReader(dir, name)
	if err != nil {
		return nil, err
	}
	return readOnlyFile{f}, nil
}

// Create is called only when recovery finds no tail segment (the log is
// empty): it gets an empty file that exists only in memory.
func (readOnlyVFS) Create(string, string, uint64) (waltypes.WritableFile, error) {
	return readOnlyFile{emptyFile{}}, nil
}

// Delete leaves a crashed run's leftover segment for the node to delete.
func (readOnlyVFS) Delete(string, string) error { return nil }

type readOnlyFile struct{ waltypes.ReadableFile }

func (readOnlyFile) WriteAt([]byte, int64) (int, error) { return 0, errReadOnly }
func (readOnlyFile) Sync() error                        { return errReadOnly }

type emptyFile struct{}

func (emptyFile) ReadAt([]byte, int64) (int, error) { return 0, io.EOF }
func (emptyFile) Close() error                      { return nil }
