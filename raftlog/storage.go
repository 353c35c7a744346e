package raftlog

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// watchedStore is the log and stable store raft gets: the node's store,
// with every failure counted and the latest failed write remembered, so
// that a node whose disk fills up or turns read-only says so (Node.Storage)
// instead of looking healthy while it takes no more entries. Raft itself
// only logs such errors: a follower answers the leader "not stored" and is
// sent the same entries again, and again.
//
// It also marks the data dir as having held raft state (meta's RaftState)
// on its first successful write, before that write returns to raft: a
// node that joined (--join) holds state from the first term it stores.
type watchedStore struct {
	logStore

	errors atomic.Uint64

	mu       sync.Mutex
	failedAt time.Time // zero: no write has failed since the last that succeeded
	failErr  error

	marked    atomic.Bool
	markState func() // records RaftState; called until it has once succeeded

	// failStop, once Open has started raft, is Config.FailStop.
	failStop atomic.Pointer[func(error)]

	// cutFrom is the first index of a log suffix raft deleted and has not
	// yet stored entries in place of (0: none); see StoreLogs.
	cutFrom atomic.Uint64
}

// Failure reports when storage last failed and how, or a zero time when
// it is healthy: no failure, or a write that succeeded since. A failed
// read counts as a failure too, until a write succeeds.
func (s *watchedStore) Failure() (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failedAt, s.failErr
}

// read records err from a read: "not found" is an answer, not a failure.
func (s *watchedStore) read(err error) error {
	if err != nil && !isNotFound(err) {
		s.failed(err)
	}
	return err
}

// write records the outcome of a write; state says whether it wrote raft
// state (an entry, a term, a vote): raft also writes term 0 as it starts.
func (s *watchedStore) write(err error, state bool) error {
	if err != nil {
		s.failed(err)
		return err
	}
	s.mu.Lock()
	s.failedAt, s.failErr = time.Time{}, nil
	s.mu.Unlock()
	if state && !s.marked.Load() && s.markState != nil {
		s.markState()
	}
	return nil
}

func (s *watchedStore) failed(err error) {
	s.errors.Add(1)
	s.mu.Lock()
	s.failedAt, s.failErr = time.Now(), err
	s.mu.Unlock()
}

func (s *watchedStore) FirstIndex() (uint64, error) {
	i, err := s.logStore.FirstIndex()
	return i, s.read(err)
}

func (s *watchedStore) LastIndex() (uint64, error) {
	i, err := s.logStore.LastIndex()
	return i, s.read(err)
}

func (s *watchedStore) GetLog(index uint64, l *raft.Log) error {
	return s.read(s.logStore.GetLog(index, l))
}

func (s *watchedStore) StoreLog(l *raft.Log) error { return s.write(s.logStore.StoreLog(l), true) }

// StoreLogs stores entries. A follower that takes a new leader's entries
// first deletes the suffix of its log that conflicts with them, then
// stores them; if that store fails (a full disk), hashicorp/raft keeps its
// own idea of its last entry from before the delete (raft.go's
// appendEntries: "TODO: leaving r.getLastLog() in the wrong state if there
// was a truncation above"), and from then on refuses every AppendEntries
// because it cannot read an entry it believes it has: the node is stuck
// until it restarts, and raft reads its last entry from the store again.
// So that failure goes to failStop, which ends the process with one line,
// when one is set.
func (s *watchedStore) StoreLogs(logs []*raft.Log) error {
	err := s.write(s.logStore.StoreLogs(logs), len(logs) > 0)
	cut := s.cutFrom.Load()
	switch {
	case err == nil:
		s.cutFrom.Store(0)
	case cut != 0:
		if stop := s.failStop.Load(); stop != nil {
			(*stop)(fmt.Errorf("raft cut its log back to index %d to take the leader's entries and could not store them, "+
				"which leaves its view of its own log wrong until it restarts: %w", cut, err))
		}
	}
	return err
}

// DeleteRange deletes entries: a prefix (compaction after a snapshot) or a
// suffix (a follower's entries that conflict with the leader's, which
// StoreLogs must then replace).
func (s *watchedStore) DeleteRange(min, max uint64) error {
	if err := s.write(s.logStore.DeleteRange(min, max), false); err != nil {
		return err
	}
	if last, err := s.logStore.LastIndex(); err == nil && last < min {
		s.cutFrom.Store(min)
	}
	return nil
}

func (s *watchedStore) Set(key, val []byte) error {
	return s.write(s.logStore.Set(key, val), len(val) > 0)
}

func (s *watchedStore) Get(key []byte) ([]byte, error) {
	v, err := s.logStore.Get(key)
	return v, s.read(err)
}

// SetUint64 writes a stable value. Raft panics when it cannot store a new
// current term (it must not take part in an election it cannot remember),
// so that failure goes to failStop instead, which ends the process with one
// line, when one is set.
func (s *watchedStore) SetUint64(key []byte, val uint64) error {
	err := s.write(s.logStore.SetUint64(key, val), val > 0)
	if err != nil && bytes.Equal(key, keyCurrentTerm) {
		if stop := s.failStop.Load(); stop != nil {
			(*stop)(fmt.Errorf("raft cannot store its current term %d, and a node that cannot must stop: %w", val, err))
		}
	}
	return err
}

func (s *watchedStore) GetUint64(key []byte) (uint64, error) {
	v, err := s.logStore.GetUint64(key)
	return v, s.read(err)
}

// IsMonotonic passes on raft-wal's: a store that allows no gaps has its
// whole log deleted when a snapshot is installed. Without it raft would
// leave a gap the wal refuses.
func (s *watchedStore) IsMonotonic() bool {
	m, ok := s.logStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

var _ raft.MonotonicLogStore = (*watchedStore)(nil)
