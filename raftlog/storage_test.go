package raftlog

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/keel-dev/keel/internal/poll"
)

func TestCommitWatch(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type step struct {
		announce  uint64 // announced at ms, if non-zero
		ms        int
		applied   uint64 // else: asked at ms with applied
		wantIndex uint64
		wantAgo   time.Duration
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name:  "nothing announced",
			steps: []step{{ms: 10, applied: 0}},
		},
		{
			name: "applied as it is announced",
			steps: []step{
				{announce: 5, ms: 0}, {ms: 1, applied: 5},
				{announce: 9, ms: 100}, {ms: 101, applied: 9},
			},
		},
		{
			name: "behind since the oldest index not applied",
			steps: []step{
				{announce: 5, ms: 0},
				{announce: 9, ms: 100},
				{announce: 12, ms: 200},
				{ms: 300, applied: 4, wantIndex: 5, wantAgo: 300 * time.Millisecond},
				{ms: 400, applied: 5, wantIndex: 9, wantAgo: 300 * time.Millisecond},
				{ms: 500, applied: 11, wantIndex: 12, wantAgo: 300 * time.Millisecond},
				{ms: 600, applied: 12},
			},
		},
		{
			// Within commitSampleEvery of the last sample an index joins
			// it, dated early rather than late.
			name: "announcements close together share a sample",
			steps: []step{
				{announce: 5, ms: 0},
				{announce: 6, ms: 10},
				{announce: 7, ms: 20},
				{ms: 1000, applied: 5, wantIndex: 7, wantAgo: time.Second},
			},
		},
		{
			name: "a stale announcement is ignored",
			steps: []step{
				{announce: 9, ms: 0},
				{announce: 4, ms: 100},
				{ms: 200, applied: 4, wantIndex: 9, wantAgo: 200 * time.Millisecond},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w commitWatch
			for i, s := range tt.steps {
				if s.announce > 0 {
					w.announced(s.announce, at(s.ms))
					continue
				}
				idx, ago := w.oldestAbove(s.applied, at(s.ms))
				if idx != s.wantIndex || ago != s.wantAgo {
					t.Errorf("step %d: oldestAbove(%d) = %d, %v; want %d, %v", i, s.applied, idx, ago, s.wantIndex, s.wantAgo)
				}
			}
		})
	}

	// A full ring drops its oldest sample; what is left is still older
	// than any bound a caller uses.
	var w commitWatch
	for i := range 2 * commitSamples {
		w.announced(uint64(i+1), at(i*int(commitSampleEvery/time.Millisecond)))
	}
	now := at(2 * commitSamples * int(commitSampleEvery/time.Millisecond))
	idx, ago := w.oldestAbove(0, now)
	if idx != commitSamples+1 || ago < 3*time.Second {
		t.Errorf("after %d announcements: oldest above 0 = %d, %v ago; want %d, over 3s ago", 2*commitSamples, idx, ago, commitSamples+1)
	}
}

var errNoSpace = fmt.Errorf("write raft.db: %w", syscall.ENOSPC)

// failingStore is a store whose writes fail while fail is set: log writes
// always, stable writes when stable is set too (raft panics when it cannot
// store a new term, so the cluster tests leave those alone).
type failingStore struct {
	logStore
	fail, stable *atomic.Bool
}

func (f failingStore) failing() bool { return f.fail.Load() }

func (f failingStore) StoreLog(l *raft.Log) error {
	if f.failing() {
		return errNoSpace
	}
	return f.logStore.StoreLog(l)
}

func (f failingStore) StoreLogs(logs []*raft.Log) error {
	if f.failing() {
		return errNoSpace
	}
	return f.logStore.StoreLogs(logs)
}

func (f failingStore) SetUint64(key []byte, val uint64) error {
	if f.failing() && f.stable.Load() {
		return errNoSpace
	}
	return f.logStore.SetUint64(key, val)
}

// memStore is raft's in-memory store as a logStore, answering a missing
// key as raft-boltdb does.
type memStore struct{ *raft.InmemStore }

func (memStore) Close() error { return nil }

// GetUint64 takes 0 for "not set", which is all the test stores there.
func (m memStore) GetUint64(key []byte) (uint64, error) {
	v, err := m.InmemStore.GetUint64(key)
	if err == nil && v == 0 {
		return 0, errors.New("not found")
	}
	return v, err
}

func TestWatchedStore_CountsFailures(t *testing.T) {
	var fail, stable atomic.Bool
	stable.Store(true)
	var marks int
	s := &watchedStore{logStore: failingStore{memStore{raft.NewInmemStore()}, &fail, &stable}}
	s.markState = func() { marks++; s.marked.Store(true) }
	healthy := func(when string) {
		t.Helper()
		if at, err := s.Failure(); !at.IsZero() || err != nil {
			t.Errorf("%s: Failure() = %v, %v; want none", when, at, err)
		}
	}

	// Reads of what is not there are answers, not failures.
	var l raft.Log
	if err := s.GetLog(1, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog of an empty log: %v", err)
	}
	if _, err := s.GetUint64(keyCurrentTerm); err == nil || !isNotFound(err) {
		t.Fatalf("GetUint64 of no term: %v", err)
	}
	// Raft writes term 0 as it starts: not yet raft state.
	if err := s.SetUint64(keyCurrentTerm, 0); err != nil {
		t.Fatal(err)
	}
	if s.errors.Load() != 0 || marks != 0 {
		t.Fatalf("after reads of nothing and term 0: %d errors, %d marks; want none", s.errors.Load(), marks)
	}
	healthy("at first")

	fail.Store(true)
	before := time.Now()
	if err := s.StoreLogs([]*raft.Log{{Index: 1}}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("StoreLogs on a full disk: %v", err)
	}
	if err := s.SetUint64(keyCurrentTerm, 2); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("SetUint64 on a full disk: %v", err)
	}
	at, err := s.Failure()
	if at.Before(before) || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("Failure() = %v, %v; want ENOSPC, at or after %v", at, err, before)
	}
	if n := s.errors.Load(); n != 2 || marks != 0 {
		t.Errorf("%d errors, %d marks; want 2 and none", n, marks)
	}

	fail.Store(false)
	if err := s.StoreLogs([]*raft.Log{{Index: 1, Term: 1}}); err != nil {
		t.Fatal(err)
	}
	healthy("after a write succeeded")
	if marks != 1 {
		t.Errorf("the first entry stored marked the data dir %d times, want once", marks)
	}
	if err := s.SetUint64(keyCurrentTerm, 3); err != nil {
		t.Fatal(err)
	}
	if marks != 1 || s.errors.Load() != 2 {
		t.Errorf("%d marks, %d errors; want 1 and 2", marks, s.errors.Load())
	}
	if s.IsMonotonic() {
		t.Errorf("IsMonotonic over raft's in-memory store: true, want false")
	}

	// Once armed, a term that cannot be stored goes to FailStop (raft
	// would panic); other stable values do not.
	var stopped []error
	stop := func(err error) { stopped = append(stopped, err) }
	s.failStop.Store(&stop)
	fail.Store(true)
	_ = s.SetUint64([]byte("LastVoteTerm"), 4)
	_ = s.SetUint64(keyCurrentTerm, 4)
	if len(stopped) != 1 || !errors.Is(stopped[0], syscall.ENOSPC) ||
		stopped[0].Error() != "raft cannot store its current term 4, and a node that cannot must stop: write raft.db: no space left on device" {
		t.Errorf("FailStop called with %v; want once, for the term", stopped)
	}
}

// TestWatchedStore_FailedStoreAfterACutStops: a follower that deleted the
// suffix of its log that conflicts with a new leader's entries and then
// cannot store them would be stuck (raft keeps its last entry from before
// the cut), so that failure goes to FailStop; a failed store with no cut
// before it, and a prefix deleted by compaction, do not.
func TestWatchedStore_FailedStoreAfterACutStops(t *testing.T) {
	var fail, stable atomic.Bool
	s := &watchedStore{logStore: failingStore{memStore{raft.NewInmemStore()}, &fail, &stable}}
	var stopped []error
	stop := func(err error) { stopped = append(stopped, err) }
	s.failStop.Store(&stop)
	entries := func(from, to uint64) []*raft.Log {
		var l []*raft.Log
		for i := from; i <= to; i++ {
			l = append(l, &raft.Log{Index: i, Term: 1})
		}
		return l
	}
	if err := s.StoreLogs(entries(1, 10)); err != nil {
		t.Fatal(err)
	}

	// A failed store with nothing cut: raft sends the entries again.
	fail.Store(true)
	_ = s.StoreLogs(entries(11, 12))
	// A prefix deleted by compaction is no cut.
	fail.Store(false)
	if err := s.DeleteRange(1, 3); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	_ = s.StoreLogs(entries(11, 12))
	if len(stopped) != 0 {
		t.Fatalf("FailStop called with %v; want no call without a cut", stopped)
	}

	// A cut replaced by a successful store: nothing.
	fail.Store(false)
	if err := s.DeleteRange(9, 10); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs(entries(9, 11)); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	_ = s.StoreLogs(entries(12, 12))
	if len(stopped) != 0 {
		t.Fatalf("FailStop called with %v after a cut was replaced", stopped)
	}

	// A cut whose replacement cannot be stored: stop.
	fail.Store(false)
	if err := s.DeleteRange(8, 11); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	_ = s.StoreLogs(entries(8, 9))
	if len(stopped) != 1 || !errors.Is(stopped[0], syscall.ENOSPC) || !strings.Contains(stopped[0].Error(), "cut its log back to index 8") {
		t.Errorf("FailStop called with %v; want once, for the cut at 8", stopped)
	}
}

// TestCluster_FollowerWithFailingStore: a follower whose disk stops taking
// writes says so (StorageFailure, StorageErrors) and reports how long it
// has been behind the leader's commit index (LeaderCommit), although by
// raft's own numbers (CommitIndex, AppliedIndex, LastContact) it looks
// caught up. Once writes succeed again it catches up and both clear.
func TestCluster_FollowerWithFailingStore(t *testing.T) {
	logger := testLogger(t)
	var stable atomic.Bool // never: see failingStore
	fails := make([]*atomic.Bool, 3)
	opened := 0
	nodes := startClusterWith(t, 3, func() Config {
		fail := new(atomic.Bool)
		fails[opened] = fail
		opened++
		return Config{Timing: testTiming(), Logger: logger, wrapStore: func(s logStore) logStore {
			return failingStore{s, fail, &stable}
		}}
	})
	leader := waitForLeader(t, nodes)
	apply(t, nodes, "a")
	waitForEntries(t, nodes, []string{"a"})
	var f *testNode
	for _, n := range nodes {
		if n != leader {
			f = n
			break
		}
	}
	applied := func() uint64 { return f.node.StateMachineIndex() }
	if idx, _ := f.node.LeaderCommit(applied()); idx != 0 {
		t.Fatalf("a caught-up follower: LeaderCommit = %d, want 0", idx)
	}

	fails[f.id-1].Store(true)
	want := []string{"a"}
	for i := range 3 {
		e := fmt.Sprintf("b%d", i)
		apply(t, nodes, e) // the other two commit it
		want = append(want, e)
	}
	poll.Until(t, waitTimeout, "the follower to report its failed writes and how long it is behind", func() bool {
		at, err := f.node.StorageFailure()
		idx, ago := f.node.LeaderCommit(applied())
		return !at.IsZero() && errors.Is(err, syscall.ENOSPC) && f.node.StorageErrors() > 0 &&
			idx > applied() && ago > 10*testTiming().HeartbeatTimeout
	})
	// Raft's own view of the follower: nothing wrong.
	if c, a := f.node.Raft.CommitIndex(), applied(); c > a {
		t.Errorf("raft on the follower: commit %d, applied %d; the test expects raft not to know it is behind", c, a)
	}

	fails[f.id-1].Store(false)
	waitForEntries(t, []*testNode{f}, want)
	poll.Until(t, waitTimeout, "the follower to report healthy storage, caught up", func() bool {
		at, _ := f.node.StorageFailure()
		idx, _ := f.node.LeaderCommit(applied())
		return at.IsZero() && idx == 0
	})
}
