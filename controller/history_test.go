package controller

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

func entryData(t *testing.T, recs ...*keelpb.Record) []byte {
	t.Helper()
	data, err := fsm.EncodeBatch(recs...)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func noOp() *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_NoOp{NoOp: &keelpb.NoOpRecord{}}}
}

func offsets(entries []Entry) []uint64 {
	var out []uint64
	for _, e := range entries {
		out = append(out, e.Offset)
	}
	return out
}

func TestAppliedLog_Since(t *testing.T) {
	a := NewAppliedLog(fsm.New(), 3, 0)
	a.ApplyEntry(1, 1, entryData(t, clusterStart()...))
	a.ApplyEntry(2, 1, entryData(t, noOp()))
	// A rejected batch changes nothing and is not kept: brokers never see it.
	if a.ApplyEntry(3, 1, entryData(t, clusterStart()[2])) == nil {
		t.Fatal("a stale epoch record was accepted")
	}
	a.ApplyEntry(5, 2, entryData(t, noOp())) // index 4 was, say, a raft configuration entry

	got, ok, _ := a.Since(0, 1<<20)
	if !ok || len(got) != 3 || got[0].Prev != 0 || got[2].Prev != 2 || got[2].Offset != 5 {
		t.Fatalf("Since(0) = %+v, %v", got, ok)
	}
	if got, ok, _ := a.Since(2, 1<<20); !ok || len(got) != 1 || got[0].Offset != 5 {
		t.Fatalf("Since(2) = %v, %v", offsets(got), ok)
	}
	if got, ok, _ := a.Since(5, 1<<20); !ok || len(got) != 0 {
		t.Fatalf("Since(last) = %v, %v, want nothing yet", offsets(got), ok)
	}
	for _, off := range []uint64{3, 4, 6} { // never applied, or ahead
		if _, ok, _ := a.Since(off, 1<<20); ok {
			t.Fatalf("Since(%d) is ok, want a snapshot", off)
		}
	}
	// A byte budget still returns at least one entry.
	if got, ok, _ := a.Since(0, 1); !ok || len(got) != 1 {
		t.Fatalf("Since(0, 1 byte) = %v", offsets(got))
	}

	// Beyond 3 entries the oldest go; a broker at offset 0 now needs a snapshot.
	_, _, more := a.Since(5, 1<<20)
	a.ApplyEntry(6, 2, entryData(t, noOp()))
	select {
	case <-more:
	default:
		t.Fatal("the wait channel was not closed by a new entry")
	}
	if _, ok, _ := a.Since(0, 1<<20); ok {
		t.Fatal("Since(0) is ok after eviction")
	}
	if got, ok, _ := a.Since(1, 1<<20); !ok || len(offsets(got)) != 3 {
		t.Fatalf("Since(base) = %v, %v", offsets(got), ok)
	}
}

func TestAppliedLog_RestoreStartsANewHistory(t *testing.T) {
	src := fsm.New()
	src.ApplyEntry(1, 1, entryData(t, clusterStart()...))
	src.ApplyEntry(7, 1, entryData(t, noOp()))
	write, _ := src.Snapshot()
	var snap bytes.Buffer
	if err := write(&snap); err != nil {
		t.Fatal(err)
	}

	a := NewAppliedLog(fsm.New(), 0, 0)
	a.ApplyEntry(1, 1, entryData(t, clusterStart()...))
	// A snapshot that does not verify changes nothing.
	bad := bytes.Clone(snap.Bytes())
	bad[len(bad)/2] ^= 0xff
	if err := a.Restore(bytes.NewReader(bad)); err == nil {
		t.Fatal("a corrupt snapshot was restored")
	}
	if got, ok, _ := a.Since(0, 1<<20); !ok || a.Current().Offset != 1 || !slices.Equal(offsets(got), []uint64{1}) {
		t.Fatalf("after a failed restore: offset %d, history %v, %v", a.Current().Offset, offsets(got), ok)
	}
	if err := a.Restore(&snap); err != nil {
		t.Fatal(err)
	}
	if a.Current().Offset != 7 {
		t.Fatalf("restored offset = %d", a.Current().Offset)
	}
	if _, ok, _ := a.Since(1, 1<<20); ok {
		t.Fatal("an offset from before the restore is still served")
	}
	if _, ok, _ := a.Since(7, 1<<20); !ok {
		t.Fatal("the restored offset is not served")
	}
}

// gatedReader holds its first Read until release is closed, and closes
// reading as that Read begins: a snapshot whose reading the test controls.
type gatedReader struct {
	r                io.Reader
	reading, release chan struct{}
	once             sync.Once
}

func (g *gatedReader) Read(p []byte) (int, error) {
	g.once.Do(func() {
		close(g.reading)
		<-g.release
	})
	return g.r.Read(p)
}

// closed reports whether ch is closed, for waitFor.
func closed(ch <-chan struct{}) func() bool {
	return func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
}

func TestAppliedLog_RestoreReadsTheSnapshotOutsideTheLock(t *testing.T) {
	src := fsm.New()
	src.ApplyEntry(7, 1, entryData(t, clusterStart()...))
	write, _ := src.Snapshot()
	var snap bytes.Buffer
	if err := write(&snap); err != nil {
		t.Fatal(err)
	}
	a := NewAppliedLog(fsm.New(), 0, 0)
	a.ApplyEntry(1, 1, entryData(t, clusterStart()...))
	a.ApplyEntry(2, 1, entryData(t, noOp()))

	gate := &gatedReader{r: &snap, reading: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(gate.release) }) }
	// Should the test fail with the read held, Restore and whatever waits
	// behind it must still end (goleak).
	t.Cleanup(release)
	restored := make(chan error, 1)
	go func() { restored <- a.Restore(gate) }()
	poll.Until(t, 5*time.Second, "Restore to start reading the snapshot", closed(gate.reading))

	// Since and Current take the lock every broker stream takes.
	type view struct {
		history []uint64
		offset  uint64
	}
	viewed := make(chan view, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		got, _, _ := a.Since(0, 1<<20)
		viewed <- view{offsets(got), a.Current().Offset}
	}()
	poll.Until(t, 5*time.Second, "Since and Current to return while the snapshot is being read", closed(done))
	if v := <-viewed; v.offset != 2 || !slices.Equal(v.history, []uint64{1, 2}) {
		t.Fatalf("while the snapshot is read: offset %d, history %v; want the old image and history", v.offset, v.history)
	}
	select {
	case err := <-restored:
		t.Fatalf("Restore returned (%v) before its snapshot could be read", err)
	default:
	}

	release()
	var err error
	poll.Until(t, 5*time.Second, "Restore to return", func() bool {
		select {
		case err = <-restored:
			return true
		default:
			return false
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if a.Current().Offset != 7 {
		t.Fatalf("restored offset = %d, want 7", a.Current().Offset)
	}
	if _, ok, _ := a.Since(2, 1<<20); ok {
		t.Fatal("an offset from before the restore is still served")
	}
}

// histUnit is the size of the smallest entry these tests apply: a no-op
// with a one-byte request id.
const histUnit = 8

// sizedNoOp is a no-op batch of exactly size bytes (histUnit to 100): its
// request id pads it.
func sizedNoOp(t testing.TB, size int) []byte {
	t.Helper()
	id := strings.Repeat("x", size-histUnit+1)
	data, err := fsm.EncodeBatch(&keelpb.Record{Record: &keelpb.Record_NoOp{NoOp: &keelpb.NoOpRecord{RequestId: id}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != size {
		t.Fatalf("a no-op with a %d-byte request id is %d bytes, want %d", len(id), len(data), size)
	}
	return data
}

// checkHistory checks every way of reading a's history against the chain it
// should hold: want after base, oldest first.
func checkHistory(a *AppliedLog, base uint64, want []Entry) error {
	got, ok, _ := a.Since(base, 1<<30)
	if !ok || !slices.Equal(offsets(got), offsets(want)) {
		return fmt.Errorf("Since(base %d) = %v, %v; want %v", base, offsets(got), ok, offsets(want))
	}
	prev := base
	for i, e := range got {
		if e.Prev != prev || e.Term != want[i].Term || !bytes.Equal(e.Data, want[i].Data) {
			return fmt.Errorf("entry %d = {Prev %d Offset %d Term %d, %d bytes}, want Prev %d Term %d, %d bytes",
				i, e.Prev, e.Offset, e.Term, len(e.Data), prev, want[i].Term, len(want[i].Data))
		}
		prev = e.Offset
	}
	// From every offset on the chain, with budgets that stop inside it.
	froms := append([]uint64{base}, offsets(want)...)
	for k, from := range froms {
		rest := want[k:]
		for _, budget := range []int{1, 2*histUnit + 1, 1 << 30} {
			got, ok, _ := a.Since(from, budget)
			if !ok {
				return fmt.Errorf("Since(%d, %d) is not ok", from, budget)
			}
			if len(got) > len(rest) || !slices.Equal(offsets(got), offsets(rest[:len(got)])) {
				return fmt.Errorf("Since(%d, %d) = %v, want a prefix of %v", from, budget, offsets(got), offsets(rest))
			}
			size := 0
			for _, e := range got {
				size += len(e.Data)
			}
			switch {
			case len(rest) > 0 && len(got) == 0:
				return fmt.Errorf("Since(%d, %d) is empty, want at least %d", from, budget, rest[0].Offset)
			case len(got) > 1 && size > budget:
				return fmt.Errorf("Since(%d, %d) returned %d bytes", from, budget, size)
			case len(got) > 0 && len(got) < len(rest) && size+len(rest[len(got)].Data) <= budget:
				return fmt.Errorf("Since(%d, %d) = %v stopped short of %d", from, budget, offsets(got), rest[len(got)].Offset)
			}
		}
	}
	last := base
	if len(want) > 0 {
		last = want[len(want)-1].Offset
	}
	if _, ok, _ := a.Since(last+1, 1<<30); ok {
		return fmt.Errorf("Since(%d), past the newest, is ok", last+1)
	}
	if base > 0 {
		if _, ok, _ := a.Since(base-1, 1<<30); ok {
			return fmt.Errorf("Since(%d), before the history, is ok", base-1)
		}
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	size, held := 0, 0
	for _, e := range want {
		size += len(e.Data)
	}
	for _, e := range a.ring {
		if e.Data != nil {
			held++
		}
	}
	if a.bytes != size || held != a.n || len(a.ring) > a.maxEntries {
		return fmt.Errorf("bytes %d (want %d), %d slots hold data for %d entries, ring of %d for a bound of %d",
			a.bytes, size, held, a.n, len(a.ring), a.maxEntries)
	}
	return nil
}

func TestAppliedLog_History(t *testing.T) {
	ones := func(n int) []int {
		units := make([]int, n)
		for i := range units {
			units[i] = 1
		}
		return units
	}
	tests := []struct {
		name                 string
		maxEntries, maxUnits int // maxUnits: the byte bound in histUnits; 0 means the default
		// restoreAt, if not zero, restores a snapshot at that offset after
		// the first before entries; units are then applied after it.
		before    int
		restoreAt uint64
		units     []int // the size of each entry in histUnits, at consecutive offsets
		wantBase  uint64
		wantFirst uint64 // offset of the oldest retained entry; the rest follow
		// wrapped says the retained entries run past the ring's end, so
		// that the case reads ranges that cross it.
		wrapped bool
	}{
		{name: "below the bound", maxEntries: 4, units: ones(3), wantBase: 0, wantFirst: 1},
		{name: "evicts by count across the end", maxEntries: 4, units: ones(6), wantBase: 2, wantFirst: 3, wrapped: true},
		{name: "full ring ending at its end", maxEntries: 4, units: ones(8), wantBase: 4, wantFirst: 5},
		{name: "wraps many times", maxEntries: 5, units: ones(23), wantBase: 18, wantFirst: 19, wrapped: true},
		{name: "grows, then wraps", maxEntries: 100, units: ones(250), wantBase: 150, wantFirst: 151, wrapped: true},
		{name: "evicts by bytes", maxEntries: 100, maxUnits: 3, units: ones(7), wantBase: 4, wantFirst: 5},
		{name: "evicts by bytes across the end", maxEntries: 4, maxUnits: 3, units: ones(5), wantBase: 2, wantFirst: 3, wrapped: true},
		{name: "a big entry evicts several", maxEntries: 10, maxUnits: 4, units: []int{1, 1, 1, 1, 3}, wantBase: 3, wantFirst: 4},
		// Entry 7 evicts 3, 4 and 5, from the ring's last slot round to its first.
		{name: "a big entry's evictions cross the end", maxEntries: 4, maxUnits: 4, units: []int{1, 1, 1, 1, 1, 1, 3, 1}, wantBase: 6, wantFirst: 7},
		{name: "an entry over the byte bound is kept alone", maxEntries: 10, maxUnits: 2, units: []int{1, 1, 3}, wantBase: 2, wantFirst: 3},
		{name: "reset", maxEntries: 4, before: 6, restoreAt: 100, wantBase: 100, wantFirst: 101},
		{name: "reset, then wraps again", maxEntries: 4, before: 6, restoreAt: 100, units: ones(7), wantBase: 103, wantFirst: 104, wrapped: true},
		{name: "reset by bytes, then wraps again", maxEntries: 4, maxUnits: 3, before: 6, restoreAt: 100, units: ones(6), wantBase: 103, wantFirst: 104, wrapped: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAppliedLog(fsm.New(), tc.maxEntries, tc.maxUnits*histUnit)
			var applied []Entry
			index := uint64(0)
			apply := func(units int) {
				index++
				e := Entry{Offset: index, Term: index%3 + 1, Data: sizedNoOp(t, units*histUnit)}
				if resp := a.ApplyEntry(e.Offset, e.Term, e.Data); resp != nil {
					t.Fatalf("entry %d: %v", index, resp)
				}
				applied = append(applied, e)
			}
			for range tc.before {
				apply(1)
			}
			if tc.restoreAt > 0 {
				src := fsm.New()
				if resp := src.ApplyEntry(tc.restoreAt, 1, sizedNoOp(t, histUnit)); resp != nil {
					t.Fatal(resp)
				}
				write, _ := src.Snapshot()
				var snap bytes.Buffer
				if err := write(&snap); err != nil {
					t.Fatal(err)
				}
				_, _, more := a.Since(index, 1)
				if err := a.Restore(&snap); err != nil {
					t.Fatal(err)
				}
				select {
				case <-more:
				default:
					t.Fatal("a stream waiting for more was not woken by the restore")
				}
				index, applied = tc.restoreAt, nil
			}
			for _, units := range tc.units {
				apply(units)
			}
			var want []Entry
			for _, e := range applied {
				if e.Offset >= tc.wantFirst {
					want = append(want, e)
				}
			}
			if err := checkHistory(a, tc.wantBase, want); err != nil {
				t.Fatal(err)
			}
			a.mu.Lock()
			wrapped := a.head+a.n > len(a.ring)
			a.mu.Unlock()
			if wrapped != tc.wrapped {
				t.Fatalf("retained entries wrap past the ring's end: %v, want %v", wrapped, tc.wrapped)
			}
		})
	}
}

// TestAppliedLog_MatchesAPlainList applies entries of random sizes under
// random bounds and checks the history against a plain list that keeps
// everything: after each entry it must hold the longest suffix within both
// bounds (at least the newest entry).
func TestAppliedLog_MatchesAPlainList(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 40 {
		maxEntries, maxBytes := 1+rng.IntN(20), histUnit*(1+rng.IntN(30))
		a := NewAppliedLog(fsm.New(), maxEntries, maxBytes)
		var all []Entry
		for index := uint64(1); index <= 120; index++ {
			e := Entry{Offset: index, Term: 1, Data: sizedNoOp(t, histUnit+rng.IntN(3*histUnit))}
			if resp := a.ApplyEntry(e.Offset, e.Term, e.Data); resp != nil {
				t.Fatal(resp)
			}
			all = append(all, e)
			first, size := len(all)-1, len(e.Data)
			for first > 0 && len(all)-first < maxEntries && size+len(all[first-1].Data) <= maxBytes {
				first--
				size += len(all[first].Data)
			}
			base := uint64(0)
			if first > 0 {
				base = all[first-1].Offset
			}
			if err := checkHistory(a, base, all[first:]); err != nil {
				t.Fatalf("bounds %d entries, %d bytes; after entry %d: %v", maxEntries, maxBytes, index, err)
			}
		}
	}
}

// TestAppliedLog_ApplyAtBoundDoesNotCopyTheHistory: with the history at
// its bound, an applied entry takes the oldest entry's slot and moves the
// ring's head on; every other retained entry stays where it was, in the
// same backing array. (The history used to be a slice copied down by one
// entry per apply at the bound: 100,000 entries under the lock on raft's
// FSM goroutine. BenchmarkAppliedLog_ApplyAtBound measures the cost.)
func TestAppliedLog_ApplyAtBoundDoesNotCopyTheHistory(t *testing.T) {
	const bound = 64
	data := sizedNoOp(t, histUnit)
	a := NewAppliedLog(fsm.New(), bound, 0)
	index := uint64(0)
	apply := func() {
		t.Helper()
		index++
		if resp := a.ApplyEntry(index, 1, data); resp != nil {
			t.Fatal(resp)
		}
	}
	for index < bound {
		apply()
	}
	for range 3 * bound { // wrap several times
		backing, head := &a.ring[0], a.head
		before := slices.Clone(a.ring)
		apply()
		if &a.ring[0] != backing || len(a.ring) != bound {
			t.Fatalf("apply %d at the bound reallocated the history", index)
		}
		if a.head != (head+1)%bound || a.n != bound {
			t.Fatalf("apply %d: head %d → %d, %d entries; want head %d and %d entries", index, head, a.head, a.n, (head+1)%bound, bound)
		}
		for slot := range a.ring {
			switch {
			case slot == head && a.ring[slot].Offset != index:
				t.Fatalf("apply %d: the evicted slot %d holds offset %d, want the new entry", index, slot, a.ring[slot].Offset)
			case slot != head && a.ring[slot].Offset != before[slot].Offset:
				t.Fatalf("apply %d moved the entry in slot %d (offset %d → %d)", index, slot, before[slot].Offset, a.ring[slot].Offset)
			}
		}
	}
	if got, ok, _ := a.Since(index-bound, 1<<30); !ok || len(got) != bound || got[0].Offset != index-bound+1 || got[bound-1].Offset != index {
		t.Fatalf("Since(%d) = %d entries (ok %v); want the last %d", index-bound, len(got), ok, bound)
	}
}
