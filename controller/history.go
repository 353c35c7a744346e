package controller

import (
	"io"
	"slices"
	"sort"
	"sync"

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

	mu   sync.Mutex
	base uint64 // offset the first retained entry follows
	// ring holds the retained entries, a contiguous chain, oldest first
	// from ring[head] and wrapping at its end: the oldest's Prev is base.
	// Evicting moves head on, so that an entry applied at the bound costs
	// the same as one below it rather than a copy of the whole history, on
	// raft's FSM goroutine and under mu. It grows by doubling up to
	// maxEntries, never beyond.
	ring  []Entry
	head  int
	n     int           // entries retained
	bytes int           // their data
	grown chan struct{} // closed when entries are appended or reset
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
	a.push(Entry{Prev: prev, Offset: index, Term: term, Data: data})
	close(a.grown)
	a.grown = make(chan struct{})
	return nil
}

// push appends e to the history and evicts the oldest entries until it is
// within both bounds again; the newest entry is kept whatever its size.
func (a *AppliedLog) push(e Entry) {
	if a.n == a.maxEntries {
		a.evictOldest()
	}
	if a.n == len(a.ring) {
		a.grow()
	}
	*a.at(a.n) = e
	a.n++
	a.bytes += len(e.Data)
	for a.bytes > a.maxBytes && a.n > 1 {
		a.evictOldest()
	}
}

func (a *AppliedLog) evictOldest() {
	e := &a.ring[a.head]
	a.base = e.Offset
	a.bytes -= len(e.Data)
	// Cleared so that the evicted data can be collected before the slot is
	// reused.
	*e = Entry{}
	a.head++
	if a.head == len(a.ring) {
		a.head = 0
	}
	a.n--
}

// grow doubles the ring, up to maxEntries, when it is full. The ring starts
// small so that a short history does not hold maxEntries slots; copying it
// on growth costs O(1) per entry over the ring's life.
func (a *AppliedLog) grow() {
	ring := make([]Entry, min(max(2*len(a.ring), 64), a.maxEntries))
	first, second := a.span(0, a.n)
	copy(ring[copy(ring, first):], second)
	a.ring, a.head = ring, 0
}

// at returns the i-th retained entry, oldest first; i may be n to reach the
// free slot after the newest.
func (a *AppliedLog) at(i int) *Entry {
	i += a.head
	if i >= len(a.ring) {
		i -= len(a.ring)
	}
	return &a.ring[i]
}

// span returns retained entries [from, to) as at most two slices of the
// ring, the second non-empty only when the range wraps past its end.
func (a *AppliedLog) span(from, to int) (first, second []Entry) {
	i, j, size := a.head+from, a.head+to, len(a.ring)
	switch {
	case i >= size:
		return a.ring[i-size : j-size], nil
	case j <= size:
		return a.ring[i:j], nil
	default:
		return a.ring[i:], a.ring[:j-size]
	}
}

// Snapshot captures the FSM's image.
func (a *AppliedLog) Snapshot() (func(w io.Writer) error, error) { return a.fsm.Snapshot() }

// Restore replaces the image and starts a new history after it: brokers
// behind the restored image get a snapshot of it. A snapshot that does not
// verify leaves the image and the history as they were.
func (a *AppliedLog) Restore(r io.Reader) error {
	// Read before taking mu: a large image takes seconds to read, and every
	// broker stream waits on mu. Raft calls Restore and ApplyEntry from one
	// goroutine, so nothing is applied between the read and the install.
	img, info, err := fsm.ReadSnapshotInfo(r)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.fsm.InstallSnapshot(img, info); err != nil {
		return err
	}
	a.base, a.ring, a.head, a.n, a.bytes = img.Offset, nil, 0, 0, 0
	close(a.grown)
	a.grown = make(chan struct{})
	return nil
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
		i := sort.Search(a.n, func(i int) bool { return a.at(i).Offset >= offset })
		if i == a.n || a.at(i).Offset != offset {
			return nil, false, a.grown
		}
		start = i + 1
	}
	size := 0
	end := start
	for end < a.n && (end == start || size+len(a.at(end).Data) <= maxBytes) {
		size += len(a.at(end).Data)
		end++
	}
	// A copy: the ring's slots are reused once their entries are evicted.
	first, second := a.span(start, end)
	return slices.Concat(first, second), true, a.grown
}
