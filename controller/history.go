package controller

import (
	"io"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/fsm"
)

// Entry is one committed raft entry as the FSM applied it: what the push
// layer sends to brokers.
type Entry struct {
	Prev   uint64 // offset of the batch applied before this one
	Offset uint64 // raft index
	Term   uint64
	Data   []byte // the raft entry: format byte, then the record batch
}

// Default bounds of the retained history. A broker further behind gets an
// image snapshot instead.
const (
	DefaultHistoryEntries = 100_000
	DefaultHistoryBytes   = 256 << 20
)

// AppliedLog is the state machine a controller node runs: the FSM, plus a
// bounded in-memory history of the entries it applied, in order, so that the
// push layer can send every broker the batches after its own offset. Only
// entries the FSM accepted are kept: a rejected batch changed nothing, so
// brokers need not see it.
type AppliedLog struct {
	fsm        *fsm.FSM
	maxEntries int
	maxBytes   int

	// conf is the last committed raft configuration raft handed over
	// (raftlog.ConfigurationObserver); nil until one is.
	conf atomic.Pointer[committedConfiguration]

	mu      sync.Mutex
	base    uint64  // offset the first retained entry follows
	entries []Entry // a contiguous chain: entries[0].Prev == base
	bytes   int
	grown   chan struct{} // closed when entries are appended or reset
}

// NewAppliedLog wraps f. Zero bounds mean the defaults.
func NewAppliedLog(f *fsm.FSM, maxEntries, maxBytes int) *AppliedLog {
	if maxEntries <= 0 {
		maxEntries = DefaultHistoryEntries
	}
	if maxBytes <= 0 {
		maxBytes = DefaultHistoryBytes
	}
	return &AppliedLog{fsm: f, maxEntries: maxEntries, maxBytes: maxBytes, base: f.Image().Offset, grown: make(chan struct{})}
}

// FSM returns the wrapped state machine.
func (a *AppliedLog) FSM() *fsm.FSM { return a.fsm }

// ApplyEntry applies the entry to the FSM and, if it was accepted, appends
// it to the history. Holding mu across both keeps Current consistent.
func (a *AppliedLog) ApplyEntry(index, term uint64, data []byte) any {
	a.mu.Lock()
	defer a.mu.Unlock()
	prev := a.fsm.Image().Offset
	resp := a.fsm.ApplyEntry(index, term, data)
	if resp != nil {
		return resp
	}
	a.entries = append(a.entries, Entry{Prev: prev, Offset: index, Term: term, Data: data})
	a.bytes += len(data)
	a.evict()
	close(a.grown)
	a.grown = make(chan struct{})
	return nil
}

func (a *AppliedLog) evict() {
	n := 0
	for len(a.entries)-n > a.maxEntries || (a.bytes > a.maxBytes && len(a.entries)-n > 1) {
		a.bytes -= len(a.entries[n].Data)
		a.base = a.entries[n].Offset
		n++
	}
	if n > 0 {
		// Copy down rather than reslice so the evicted entries' data can be
		// collected; amortised by evicting only when over the bound.
		a.entries = append(a.entries[:0], a.entries[n:]...)
	}
}

// Snapshot captures the FSM's image.
func (a *AppliedLog) Snapshot() (func(w io.Writer) error, error) { return a.fsm.Snapshot() }

// Restore replaces the image and starts a new history after it: brokers
// behind the restored image get a snapshot of it.
func (a *AppliedLog) Restore(r io.Reader) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.fsm.Restore(r); err != nil {
		return err
	}
	a.base, a.entries, a.bytes = a.fsm.Image().Offset, nil, 0
	close(a.grown)
	a.grown = make(chan struct{})
	return nil
}

// committedConfiguration is a raft configuration and its log index.
type committedConfiguration struct {
	index uint64
	conf  raft.Configuration
}

// ConfigurationCommitted records the committed raft configuration at index
// (raftlog.ConfigurationObserver); index 0 after a snapshot restore means
// unknown.
func (a *AppliedLog) ConfigurationCommitted(index uint64, c raft.Configuration) {
	a.conf.Store(&committedConfiguration{index: index, conf: c.Clone()})
}

// committedConfiguration returns the last committed configuration raft handed
// over and its index; index 0 when unknown.
func (a *AppliedLog) committedConfiguration() (uint64, raft.Configuration) {
	if c := a.conf.Load(); c != nil {
		return c.index, c.conf
	}
	return 0, raft.Configuration{}
}

// Current returns the image and the history position it corresponds to.
func (a *AppliedLog) Current() *fsm.Image {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fsm.Image()
}

// Since returns retained entries after offset (up to maxBytes of data, at
// least one entry if any), and a channel closed when more arrive. ok is
// false when offset is not on the retained chain — older than the history,
// or not an offset this log ever applied — and the caller must send a
// snapshot instead.
func (a *AppliedLog) Since(offset uint64, maxBytes int) (entries []Entry, ok bool, more <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	start := 0
	if offset != a.base {
		i := sort.Search(len(a.entries), func(i int) bool { return a.entries[i].Offset >= offset })
		if i == len(a.entries) || a.entries[i].Offset != offset {
			return nil, false, a.grown
		}
		start = i + 1
	}
	size := 0
	end := start
	for end < len(a.entries) && (end == start || size+len(a.entries[end].Data) <= maxBytes) {
		size += len(a.entries[end].Data)
		end++
	}
	return append([]Entry(nil), a.entries[start:end]...), true, a.grown
}
