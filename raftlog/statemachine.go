package raftlog

import (
	"errors"
	"io"

	"github.com/hashicorp/raft"
)

// StateMachine is what raftlog replicates. The fsm package implements it;
// raftlog never looks inside an entry.
type StateMachine interface {
	// ApplyEntry applies one committed command entry; its return value
	// becomes ApplyFuture.Response() on the node that proposed it.
	ApplyEntry(index, term uint64, data []byte) any
	// Snapshot captures the current state cheaply (it is called on the FSM
	// goroutine, so ApplyEntry waits for it); the returned function writes the
	// captured state out and may run concurrently with ApplyEntry.
	Snapshot() (func(w io.Writer) error, error)
	// Restore replaces the whole state from a stream written by a function
	// that Snapshot returned.
	Restore(r io.Reader) error
}

// fsmAdapter turns a StateMachine into the raft.FSM raft drives. It also
// implements raft.BatchingFSM, so raft hands over every committed batch in one
// call instead of one call per entry.
type fsmAdapter struct {
	sm StateMachine
}

var (
	_ raft.FSM         = (*fsmAdapter)(nil)
	_ raft.BatchingFSM = (*fsmAdapter)(nil)
)

// Apply is only used by raft when batching is off; it is kept consistent
// with ApplyBatch.
func (a *fsmAdapter) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
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
		}
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
	err := a.sm.Restore(rc)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	return err
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
