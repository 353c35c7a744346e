package raftlog

import (
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/consensus"
)

// fsmAdapter turns a consensus.StateMachine into the raft.FSM raft drives. It also
// implements raft.BatchingFSM, so raft hands over every committed batch in one
// call instead of one call per entry.
type fsmAdapter struct {
	sm consensus.StateMachine
	// conf is the last committed configuration entry raft handed over, with
	// its index: the index is what raft's membership changes take as
	// prevIndex, and raft's GetConfiguration does not report it (its Index
	// is always 0 in raft v1.7). Nil until one is; after a snapshot restore
	// its index is 0 (unknown), as raft does not hand the snapshot's
	// configuration to the state machine.
	conf atomic.Pointer[committedConfiguration]
	// done is the index of the last entry the state machine has finished
	// with: a command (applied or refused) or a configuration change. Raft
	// sets its own applied index when it hands entries over, before the
	// state machine has applied them; this is set after.
	done atomic.Uint64

	// restoreErr is the state machine's last refusal of a snapshot: raft
	// logs it and reports only that no snapshot could be loaded.
	restoreMu  sync.Mutex
	restoreErr error

	// load, if set, counts each restore's reads; newestSize is the size of
	// the snapshot raft restores (the newest in the store: the one it
	// starts from, or the one a leader just sent), which raft does not pass
	// to Restore. pace slows restores down (Config.TestRestorePace).
	load       *SnapshotLoad
	newestSize func() int64
	pace       time.Duration
}

// restoreFailure returns the state machine's last refusal of a snapshot.
func (a *fsmAdapter) restoreFailure() error {
	a.restoreMu.Lock()
	defer a.restoreMu.Unlock()
	return a.restoreErr
}

var (
	_ raft.FSM         = (*fsmAdapter)(nil)
	_ raft.BatchingFSM = (*fsmAdapter)(nil)
)

// Apply is only used by raft when batching is off; it is kept consistent
// with ApplyBatch.
func (a *fsmAdapter) Apply(l *raft.Log) any {
	defer a.done.Store(l.Index)
	if l.Type != raft.LogCommand {
		a.configuration(l)
		return nil
	}
	return a.sm.ApplyEntry(l.Index, l.Term, l.Data)
}

// ApplyBatch passes only command entries to the state machine: raft also
// delivers configuration changes here, which are raft's business, not the
// metadata image's. Their slots get a nil response, as raft requires one
// response per log.
func (a *fsmAdapter) ApplyBatch(logs []*raft.Log) []any {
	resp := make([]any, len(logs))
	for i, l := range logs {
		if l.Type == raft.LogCommand {
			resp[i] = a.sm.ApplyEntry(l.Index, l.Term, l.Data)
		} else {
			a.configuration(l)
		}
	}
	if len(logs) > 0 {
		a.done.Store(logs[len(logs)-1].Index)
	}
	return resp
}

func (a *fsmAdapter) Snapshot() (raft.FSMSnapshot, error) {
	write, err := a.sm.Snapshot()
	if err != nil {
		return nil, err
	}
	if write == nil {
		// Caught here rather than as a nil-func panic on the snapshot goroutine.
		return nil, errors.New("state machine returned no snapshot writer")
	}
	return &fsmSnapshot{write: write}, nil
}

func (a *fsmAdapter) Restore(rc io.ReadCloser) error {
	var r io.Reader = rc
	if a.load != nil {
		var size int64
		if a.newestSize != nil {
			size = a.newestSize()
		}
		r = a.load.begin(rc, size, a.pace)
		defer a.load.end()
	}
	err := a.sm.Restore(r)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// The snapshot holds a configuration, but raft does not pass it here.
		a.conf.Store(&committedConfiguration{})
	}
	if err != nil {
		a.restoreMu.Lock()
		a.restoreErr = err
		a.restoreMu.Unlock()
	}
	return err
}

// committedConfiguration is a configuration entry, still encoded (it is
// decoded only when asked for, off raft's FSM goroutine), and its index.
type committedConfiguration struct {
	index uint64
	data  []byte
}

// configuration records a committed configuration entry.
func (a *fsmAdapter) configuration(l *raft.Log) {
	if l.Type != raft.LogConfiguration {
		return
	}
	a.conf.Store(&committedConfiguration{index: l.Index, data: slices.Clone(l.Data)})
}

// committed returns the last committed configuration raft handed over and
// its index; index 0 and no configuration when unknown.
func (a *fsmAdapter) committed() (index uint64, conf raft.Configuration) {
	c := a.conf.Load()
	if c == nil || c.index == 0 {
		return 0, raft.Configuration{}
	}
	// raft panics on an entry it cannot decode; one raft wrote always
	// decodes, but an unknown index is the safe answer for any other.
	defer func() {
		if recover() != nil {
			index, conf = 0, raft.Configuration{}
		}
	}()
	return c.index, raft.DecodeConfiguration(c.data)
}

// fsmSnapshot runs the state machine's write function against raft's sink.
type fsmSnapshot struct {
	write func(w io.Writer) error
}

// Persist cancels the sink on a failed write so that raft discards the
// partial snapshot instead of keeping it as the newest one.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.write(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release has nothing to free: the captured state is garbage collected.
func (s *fsmSnapshot) Release() {}
