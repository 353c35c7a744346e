package raftlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
)

// listSM is the test StateMachine: it appends each entry to a list, ignoring
// one it already holds so that tests may retry a write whose outcome is
// unknown. Its snapshot is the list as length-prefixed entries.
type listSM struct {
	mu       sync.Mutex
	entries  []string
	restores int
}

func (s *listSM) ApplyEntry(index, term uint64, data []byte) any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(s.entries, string(data)); i >= 0 {
		return i + 1
	}
	s.entries = append(s.entries, string(data))
	return len(s.entries)
}

func (s *listSM) Snapshot() (func(w io.Writer) error, error) {
	s.mu.Lock()
	// Entries are only ever appended, so this prefix never changes under the
	// writer, even while ApplyEntry runs.
	captured := s.entries[:len(s.entries):len(s.entries)]
	s.mu.Unlock()
	return func(w io.Writer) error {
		for _, e := range captured {
			if err := binary.Write(w, binary.BigEndian, uint32(len(e))); err != nil {
				return err
			}
			if _, err := io.WriteString(w, e); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

func (s *listSM) Restore(r io.Reader) error {
	var entries []string
	for {
		var n uint32
		err := binary.Read(r, binary.BigEndian, &n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return err
		}
		entries = append(entries, string(b))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries = entries
	s.restores++
	return nil
}

func (s *listSM) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.entries)
}

func TestFSMAdapter_ApplyBatch(t *testing.T) {
	tests := []struct {
		name        string
		logs        []*raft.Log
		wantResp    []any
		wantEntries []string
		wantDone    uint64 // StateMachineIndex afterwards: the batch's last index
	}{
		{name: "empty batch", logs: nil, wantResp: []any{}},
		{
			name: "commands only",
			logs: []*raft.Log{
				{Index: 3, Term: 1, Type: raft.LogCommand, Data: []byte("a")},
				{Index: 4, Term: 1, Type: raft.LogCommand, Data: []byte("b")},
			},
			wantResp:    []any{1, 2},
			wantEntries: []string{"a", "b"},
			wantDone:    4,
		},
		{
			name: "other log types get nil and skip the state machine",
			logs: []*raft.Log{
				{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte("conf")},
				{Index: 2, Term: 2, Type: raft.LogNoop},
				{Index: 3, Term: 2, Type: raft.LogCommand, Data: []byte("a")},
				{Index: 4, Term: 2, Type: raft.LogBarrier},
			},
			wantResp:    []any{nil, nil, 1, nil},
			wantEntries: []string{"a"},
			wantDone:    4,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sm := &listSM{}
			a := &fsmAdapter{sm: sm}
			resp := a.ApplyBatch(tt.logs)
			if !slices.Equal(resp, tt.wantResp) {
				t.Errorf("ApplyBatch responses = %v, want %v", resp, tt.wantResp)
			}
			if got := sm.list(); !slices.Equal(got, tt.wantEntries) {
				t.Errorf("state machine saw %q, want %q", got, tt.wantEntries)
			}
			if got := a.done.Load(); got != tt.wantDone {
				t.Errorf("finished index = %d, want %d", got, tt.wantDone)
			}
		})
	}
}

func TestFSMAdapter_Apply(t *testing.T) {
	sm := &listSM{}
	a := &fsmAdapter{sm: sm}
	if got := a.Apply(&raft.Log{Index: 1, Type: raft.LogConfiguration}); got != nil {
		t.Errorf("Apply(configuration) = %v, want nil", got)
	}
	if got := a.done.Load(); got != 1 {
		t.Errorf("finished index after a configuration = %d, want 1", got)
	}
	if got := a.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: []byte("x")}); got != 1 {
		t.Errorf("Apply(command) = %v, want 1", got)
	}
	if got := a.done.Load(); got != 2 {
		t.Errorf("finished index after a command = %d, want 2", got)
	}
}

// fakeSink records how Persist finished the snapshot.
type fakeSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *fakeSink) ID() string    { return "test" }
func (s *fakeSink) Close() error  { s.closed = true; return nil }
func (s *fakeSink) Cancel() error { s.cancelled = true; return nil }

// errSM fails where told to, to exercise the adapter's error paths.
type errSM struct {
	listSM
	snapshotErr, writeErr, restoreErr error
	nilWriter                         bool
}

func (s *errSM) Snapshot() (func(io.Writer) error, error) {
	if s.snapshotErr != nil || s.nilWriter {
		return nil, s.snapshotErr
	}
	return func(w io.Writer) error {
		_, _ = io.WriteString(w, "partial")
		return s.writeErr
	}, nil
}

func (s *errSM) Restore(r io.Reader) error {
	_, _ = io.Copy(io.Discard, r)
	return s.restoreErr
}

func TestFSMAdapter_Snapshot(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name          string
		sm            *errSM
		wantSnapErr   bool
		wantPersist   error
		wantClosed    bool
		wantCancelled bool
	}{
		{name: "write ok closes the sink", sm: &errSM{}, wantClosed: true},
		{name: "write error cancels the sink", sm: &errSM{writeErr: boom}, wantPersist: boom, wantCancelled: true},
		{name: "snapshot error", sm: &errSM{snapshotErr: boom}, wantSnapErr: true},
		{name: "nil writer", sm: &errSM{nilWriter: true}, wantSnapErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap, err := (&fsmAdapter{sm: tt.sm}).Snapshot()
			if tt.wantSnapErr {
				if err == nil {
					t.Fatal("Snapshot() succeeded, want an error")
				}
				return
			}
			if err != nil {
				t.Fatalf("Snapshot(): %v", err)
			}
			defer snap.Release()
			sink := &fakeSink{}
			if err := snap.Persist(sink); !errors.Is(err, tt.wantPersist) {
				t.Errorf("Persist() = %v, want %v", err, tt.wantPersist)
			}
			if sink.closed != tt.wantClosed || sink.cancelled != tt.wantCancelled {
				t.Errorf("sink closed=%v cancelled=%v, want closed=%v cancelled=%v",
					sink.closed, sink.cancelled, tt.wantClosed, tt.wantCancelled)
			}
		})
	}
}

// trackedReader notes whether the adapter closed it.
type trackedReader struct {
	io.Reader
	closed   bool
	closeErr error
}

func (r *trackedReader) Close() error { r.closed = true; return r.closeErr }

func TestFSMAdapter_Restore(t *testing.T) {
	boom := errors.New("boom")
	closeBoom := errors.New("close boom")
	tests := []struct {
		name       string
		restoreErr error
		closeErr   error
		wantErr    error
	}{
		{name: "ok"},
		{name: "restore error wins", restoreErr: boom, closeErr: closeBoom, wantErr: boom},
		{name: "close error reported", closeErr: closeBoom, wantErr: closeBoom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := &trackedReader{Reader: bytes.NewReader([]byte("x")), closeErr: tt.closeErr}
			err := (&fsmAdapter{sm: &errSM{restoreErr: tt.restoreErr}}).Restore(rc)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Errorf("Restore() = %v, want %v", err, tt.wantErr)
			}
			if !rc.closed {
				t.Error("Restore did not close the reader")
			}
		})
	}
}

// TestListSM_RoundTrip keeps the test state machine honest, since the
// cluster test relies on it to prove snapshot restore.
func TestListSM_RoundTrip(t *testing.T) {
	src := &listSM{}
	for i := range 3 {
		src.ApplyEntry(uint64(i+1), 1, []byte(fmt.Sprint("e", i)))
	}
	write, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		t.Fatal(err)
	}
	dst := &listSM{entries: []string{"stale"}}
	if err := dst.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	if got, want := dst.list(), src.list(); !slices.Equal(got, want) {
		t.Errorf("restored %q, want %q", got, want)
	}
}
