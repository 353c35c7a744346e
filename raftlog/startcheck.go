package raftlog

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/raft-wal/metadb"
	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/keel-dev/keel/internal/atomicfile"
)

// What Open checks before raft.NewRaft sees a data dir. Raft trusts its
// stores: without raft.db it starts at term 0 from whatever snapshot it
// finds and votes again; a damaged bolt page is an assertion panic; a log
// that starts after the snapshot it restores is "panic: log not found". Each
// is refused here instead, in one line that names the file and says how to
// recover, before anything in the data dir is changed.

// rejoinHint is how to bring back a node whose raft state is gone or
// damaged beyond repair: its log and vote are lost, so it may only come back
// as a new member that receives everything from the leader.
func rejoinHint(id int32) string {
	return fmt.Sprintf("to recover, run keel quorum remove-voter %d, move the data dir aside, start the node on an empty data dir with --join, then run keel quorum add-voter %d with its address", id, id)
}

// storeFile is the file without which the store kind has lost its raft
// state: the bolt file, or the wal's meta store, which holds the term, the
// vote and the list of segments.
func storeFile(kind, dataDir string) string {
	if kind == LogStoreWAL {
		return filepath.Join(dataDir, walDirName, metadb.FileName)
	}
	return filepath.Join(dataDir, raftDBFileName)
}

// heldState says why the data dir is known to have held raft state, or ""
// when nothing says so. The meta file alone does not: it is written before
// the store, so a crash in between leaves a meta file and nothing else.
func heldState(dataDir string, m meta) (string, error) {
	switch {
	case m.RaftState:
		return metaFileName + " records it", nil
	case m.ClusterID != "":
		// Recorded only once the committed log named it.
		return fmt.Sprintf("%s names cluster %s", metaFileName, m.ClusterID), nil
	}
	snaps, _, err := listSnapshotDirs(dataDir)
	if err != nil {
		return "", err
	}
	if len(snaps) > 0 {
		// Raft writes a snapshot only with a term in its store.
		return fmt.Sprintf("it holds snapshot %s", snaps[0].id), nil
	}
	return "", nil
}

// checkStoreExists refuses a data dir that has held raft state but whose
// store is gone: opening the store would create an empty one, and the node
// would start at term 0, vote again and forget what it acknowledged.
func checkStoreExists(dataDir string, m meta, nodeID int32) error {
	path := storeFile(m.logStore(), dataDir)
	_, err := os.Stat(path)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("cannot read raft log %s: %v", path, atomicfile.PathCause(err))
	}
	why, err := heldState(dataDir, m)
	if err != nil || why == "" {
		return err
	}
	return fmt.Errorf("data dir %s has held raft state (%s) but its raft log %s is missing; it must not start without it, or it could vote twice and lose acknowledged writes; %s",
		dataDir, why, path, rejoinHint(nodeID))
}

// guarded runs f, turning a panic, or a fault reading memory-mapped data
// past a truncated file, into an error. bbolt trusts its file: a damaged
// page is an assertion panic, and a page number past the end of the mapping
// is a fault, which SetPanicOnFault makes a panic on this goroutine. Only
// what runs on this goroutine is guarded, so the checks that call it read
// the stores themselves rather than through bbolt's own Check (which walks
// the file on a goroutine of its own).
func guarded(f func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = &panicError{fmt.Sprint(p)}
		}
	}()
	return f()
}

// panicError is a panic that guarded recovered: the store met data it did
// not expect.
type panicError struct{ msg string }

func (e *panicError) Error() string { return e.msg }

// checkBoltFile reads every page of raft.db that raft-boltdb uses (the log
// and the stable state), through a read-only handle, before the store is
// opened for writing. bbolt checks only its meta pages' checksums when it
// opens a file; damage anywhere else would surface later as a panic, in
// whichever goroutine first read the page. A walk of the whole store costs
// one read of the file at start, which raft.db's size (the log since the
// last snapshot, and its trailing entries) keeps small.
//
// A panic inside bbolt.Open can leave the file open and mapped; the node
// is not starting then, and the process exits.
func checkBoltFile(dataDir string, nodeID int32) error {
	path := filepath.Join(dataDir, raftDBFileName)
	var db *bbolt.DB
	err := guarded(func() error {
		var err error
		// Not the freelist yet: a page past the end of a truncated file
		// would fault before the size is checked. The store's own open
		// reads it, guarded too.
		db, err = bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: boltLockTimeout})
		return err
	})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return fmt.Errorf("data dir %s is in use by another process", dataDir)
	case errors.Is(err, fs.ErrNotExist):
		return nil // a new data dir: the store creates it
	case err != nil:
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("cannot open raft log %s: %v", path, atomicfile.PathCause(err))
		}
		return fmt.Errorf("raft log %s is damaged (%v); %s", path, err, rejoinHint(nodeID))
	}
	err = guarded(func() error {
		return db.View(func(tx *bbolt.Tx) error {
			// The meta page's high-water mark: a file cut short of it
			// would fault on the first page read past its end.
			fi, err := os.Stat(path)
			if err != nil {
				return atomicfile.PathCause(err)
			}
			if fi.Size() < tx.Size() {
				return fmt.Errorf("truncated: %d bytes, its pages reach %d", fi.Size(), tx.Size())
			}
			return tx.ForEach(func(name []byte, b *bbolt.Bucket) error {
				return walkBucket(b)
			})
		})
	})
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("raft log %s is damaged (%v); %s", path, err, rejoinHint(nodeID))
	}
	return nil
}

// walkBucket reads every key and value of b and of its nested buckets, so
// that bbolt reads (and checks the header of) every page they occupy.
func walkBucket(b *bbolt.Bucket) error {
	var sum byte
	defer runtime.KeepAlive(&sum)
	return b.ForEach(func(k, v []byte) error {
		if v == nil {
			if nb := b.Bucket(k); nb != nil {
				return walkBucket(nb)
			}
			return nil
		}
		for _, c := range v { // touch the value's pages, overflow pages included
			sum ^= c
		}
		return nil
	})
}

// snapshotDir is one complete snapshot directory under DataDir/snapshots
// (raft.FileSnapshotStore's layout).
type snapshotDir struct {
	id          string // the directory's name, raft's snapshot id
	path        string
	meta        *fileSnapshotMeta // nil if meta.json does not read
	metaErr     error
	term, index uint64 // from meta.json, else from the name
}

// listSnapshotDirs lists DataDir/snapshots' complete snapshots (not raft's
// .tmp ones), newest first as raft orders them (term, index, id). A
// snapshot whose meta.json does not read is listed, ordered by its name
// (term-index-msec), with metaErr set; one whose name does not parse either
// is left out, as raft leaves it out. exists is false without a snapshots
// dir.
func listSnapshotDirs(dataDir string) (snaps []snapshotDir, exists bool, err error) {
	base := filepath.Join(dataDir, snapshotDirName)
	entries, err := os.ReadDir(base)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("cannot list snapshots in %s: %v", base, atomicfile.PathCause(err))
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), snapshotTmpSuffix) {
			continue
		}
		s := snapshotDir{id: e.Name(), path: filepath.Join(base, e.Name())}
		s.meta, s.metaErr = readSnapshotMeta(filepath.Join(s.path, snapshotMetaFileName))
		if s.metaErr == nil {
			s.term, s.index = s.meta.Term, s.meta.Index
		} else if s.term, s.index, err = parseSnapshotName(s.id); err != nil {
			continue
		}
		snaps = append(snaps, s)
	}
	sort.Slice(snaps, func(i, j int) bool {
		a, b := snaps[i], snaps[j]
		if a.term != b.term {
			return a.term > b.term
		}
		if a.index != b.index {
			return a.index > b.index
		}
		return a.id > b.id
	})
	return snaps, true, nil
}

// parseSnapshotName reads raft's snapshot directory name, term-index-msec.
func parseSnapshotName(name string) (term, index uint64, err error) {
	parts := strings.Split(name, "-")
	if len(parts) != 3 {
		return 0, 0, fmt.Errorf("not a snapshot name: %q", name)
	}
	var n [3]uint64
	for i, p := range parts {
		if n[i], err = strconv.ParseUint(p, 10, 64); err != nil {
			return 0, 0, fmt.Errorf("not a snapshot name: %q", name)
		}
	}
	return n[0], n[1], nil
}

// verify checks that raft can open the snapshot and restore it: its
// meta.json reads and has a version raft reads, its state.bin has the size
// and CRC meta.json records, and (with verifyState) the state machine's
// own check passes, all in one read of the file. The error names the file
// at fault.
func (s snapshotDir) verify(verifyState func(io.Reader) error) error {
	metaPath := filepath.Join(s.path, snapshotMetaFileName)
	statePath := filepath.Join(s.path, snapshotStateFileName)
	switch {
	case errors.Is(s.metaErr, fs.ErrNotExist):
		return fmt.Errorf("snapshot %s has no %s", s.path, snapshotMetaFileName)
	case s.metaErr != nil:
		return fmt.Errorf("snapshot %s is damaged (%v)", metaPath, atomicfile.PathCause(s.metaErr))
	case s.meta.Version < raft.SnapshotVersionMin || s.meta.Version > raft.SnapshotVersionMax:
		return fmt.Errorf("snapshot %s has version %d; raft reads %d to %d", metaPath, s.meta.Version, raft.SnapshotVersionMin, raft.SnapshotVersionMax)
	}
	f, err := os.Open(statePath)
	if err != nil {
		return fmt.Errorf("cannot open snapshot %s: %v", statePath, atomicfile.PathCause(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("cannot read snapshot %s: %v", statePath, atomicfile.PathCause(err))
	}
	if fi.Size() != s.meta.Size {
		return fmt.Errorf("snapshot %s is damaged (%d bytes; its %s says %d)", statePath, fi.Size(), snapshotMetaFileName, s.meta.Size)
	}
	h := crc64.New(crc64.MakeTable(crc64.ECMA))
	r := io.TeeReader(f, h)
	var stateErr error
	if verifyState != nil {
		stateErr = verifyState(r)
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return fmt.Errorf("cannot read snapshot %s: %v", statePath, atomicfile.PathCause(err))
	}
	// A CRC mismatch says more than whatever the state machine made of
	// the changed bytes.
	if !bytes.Equal(h.Sum(nil), s.meta.CRC) {
		return fmt.Errorf("snapshot %s is damaged (CRC mismatch)", statePath)
	}
	if stateErr != nil {
		return fmt.Errorf("snapshot %s is damaged (%v)", statePath, stateErr)
	}
	return nil
}

// checkStart checks, before raft.NewRaft, everything raft reads as it
// starts: the stable state, the snapshot it restores and every log entry
// after that snapshot. Raft restores the newest snapshot (Open makes sure
// it tries no other: newestSnapshotOnly), then reads each entry after it,
// panicking on one that is missing. So the newest snapshot must verify,
// and the log must hold every entry from just after it to its end. A data
// dir that has held raft state must still hold some. Nothing is written.
//
// It returns what the data dir holds (startInfo).
func checkStart(dataDir string, m meta, nodeID int32, store logStore, verifyState func(io.Reader) error) (info startInfo, err error) {
	logPath := storeFile(m.logStore(), dataDir)
	if m.logStore() == LogStoreWAL {
		logPath = filepath.Join(dataDir, walDirName)
	}
	var term, first, last uint64
	err = guarded(func() error {
		var err error
		if term, err = store.GetUint64(keyCurrentTerm); err != nil && !isNotFound(err) {
			return err
		}
		if _, err := store.Get(keyLastVoteCand); err != nil && !isNotFound(err) {
			return err
		}
		if first, err = store.FirstIndex(); err != nil {
			return err
		}
		last, err = store.LastIndex()
		return err
	})
	if err != nil {
		return info, fmt.Errorf("raft log %s is damaged (%v); %s", logPath, err, rejoinHint(nodeID))
	}
	snaps, snapsExist, err := listSnapshotDirs(dataDir)
	if err != nil {
		return info, err
	}

	if term == 0 && last == 0 {
		// An empty store: a new node, or one whose store was replaced.
		why, err := heldState(dataDir, m)
		if err != nil {
			return info, err
		}
		if why != "" {
			return info, fmt.Errorf("data dir %s has held raft state (%s) but its raft log %s holds none (no term, no entries); it must not start without it, or it could vote twice and lose acknowledged writes; %s",
				dataDir, why, logPath, rejoinHint(nodeID))
		}
	}

	var newest *snapshotDir
	if len(snaps) > 0 {
		newest = &snaps[0]
		if err := newest.verify(verifyState); err != nil {
			return info, fmt.Errorf("%v; %s", err, damagedSnapshotHint(snaps, nodeID, store, first, last, verifyState))
		}
	}
	var snapIndex uint64
	if newest != nil {
		snapIndex = newest.index
		info.conf = newest.meta.Configuration
	}
	if err := logCovered(store, snapIndex, first, last, func(l *raft.Log) {
		if l.Type == raft.LogConfiguration {
			info.conf = raft.DecodeConfiguration(l.Data)
		}
	}); err != nil {
		var gap *logGap
		if !errors.As(err, &gap) {
			return info, fmt.Errorf("raft log %s is damaged (%v); %s", logPath, err, rejoinHint(nodeID))
		}
		var where string
		switch {
		case newest != nil:
			where = fmt.Sprintf("the newest snapshot, %s, ends at index %d", newest.path, newest.index)
		case !snapsExist:
			where = fmt.Sprintf("no snapshot covers the entries before it (%s is missing)", filepath.Join(dataDir, snapshotDirName))
		default:
			where = fmt.Sprintf("no snapshot covers the entries before it (%s holds none)", filepath.Join(dataDir, snapshotDirName))
		}
		return info, fmt.Errorf("raft log %s %v, and %s; %s", logPath, err, where, rejoinHint(nodeID))
	}
	info.held, info.last, info.logPath = term > 0 || last > 0, max(last, snapIndex), logPath
	return info, nil
}

// startInfo is what checkStart found in a data dir.
type startInfo struct {
	held    bool   // the store holds raft state (a term or a log entry)
	last    uint64 // the last index the log and the newest snapshot hold
	logPath string // the store, as refusals name it
	// conf is the latest raft configuration the data dir holds: the last
	// configuration entry after the newest snapshot, else the snapshot's.
	conf raft.Configuration
}

// logGap is a log without entries raft needs: its text reads after "raft
// log PATH".
type logGap struct{ msg string }

func (g *logGap) Error() string { return g.msg }

// logCovered checks that the log holds every entry raft reads at start
// after restoring a snapshot at snapIndex (0: none): all of snapIndex+1 to
// last, each readable. A missing entry is a *logGap. seen, if not nil, is
// called with each entry, in order.
func logCovered(store raft.LogStore, snapIndex, first, last uint64, seen func(*raft.Log)) error {
	if last <= snapIndex {
		return nil // the snapshot covers the whole log (or there is none)
	}
	if first > snapIndex+1 {
		return &logGap{fmt.Sprintf("starts at index %d", first)}
	}
	for i := snapIndex + 1; i <= last; i++ {
		var l raft.Log
		err := guarded(func() error { return store.GetLog(i, &l) })
		switch {
		case errors.Is(err, raft.ErrLogNotFound):
			return &logGap{fmt.Sprintf("lacks entry %d of %d to %d", i, snapIndex+1, last)}
		case err != nil:
			return fmt.Errorf("cannot read entry %d: %v", i, err)
		case l.Index != i:
			return fmt.Errorf("entry %d reads as entry %d", i, l.Index)
		}
		if seen != nil {
			seen(&l)
		}
	}
	return nil
}

// damagedSnapshotHint says how to recover from a damaged newest snapshot:
// moving it aside, if an older snapshot verifies and the log covers what
// came after it; else rejoining.
func damagedSnapshotHint(snaps []snapshotDir, nodeID int32, store raft.LogStore, first, last uint64, verifyState func(io.Reader) error) string {
	for _, older := range snaps[1:] {
		if older.verify(verifyState) != nil || logCovered(store, older.index, first, last, nil) != nil {
			continue
		}
		return fmt.Sprintf("to recover, move %s out of %s so that the node starts from the older snapshot %s (index %d), which the log still covers",
			snaps[0].path, filepath.Dir(snaps[0].path), older.id, older.index)
	}
	return rejoinHint(nodeID)
}

// Raft's stable store keys (raft does not export them).
var (
	keyCurrentTerm  = []byte("CurrentTerm")
	keyLastVoteCand = []byte("LastVoteCand")
)

// isNotFound reports a stable store's "no such key", which raft itself
// recognises by its text.
func isNotFound(err error) bool {
	return err != nil && (err.Error() == "not found" || errors.Is(err, raft.ErrLogNotFound))
}

// newestSnapshotOnly is the snapshot store raft gets: its List holds at
// most the newest snapshot. Raft restores the first snapshot in List that
// it can open and restore, silently passing over a damaged one; an older
// snapshot may not cover the log, and raft then panics reading an entry
// that is not there. checkStart has verified the newest one; should its
// restore still fail, NewRaft fails rather than fall back. Raft's other
// use of List, sending a follower the latest snapshot, takes only the
// first.
type newestSnapshotOnly struct{ raft.SnapshotStore }

func (s newestSnapshotOnly) List() ([]*raft.SnapshotMeta, error) {
	l, err := s.SnapshotStore.List()
	if len(l) > 1 {
		l = l[:1]
	}
	return l, err
}
