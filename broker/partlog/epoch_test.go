package partlog

import (
	"errors"
	"math"
	"path/filepath"
	"testing"
)

// TestLeaderEpochFileCache: the epoch cache's rules, case by case after
// Kafka's LeaderEpochFileCacheTest, each replayed on a fresh cache and
// checked again after a reload from its checkpoint.
func TestLeaderEpochFileCache(t *testing.T) {
	type op struct {
		assign          *EpochEntry
		truncateFromEnd int64
		truncateStart   int64
	}
	as := func(e int32, o int64) op {
		return op{assign: &EpochEntry{e, o}, truncateFromEnd: -1, truncateStart: -1}
	}
	end := func(o int64) op { return op{truncateFromEnd: o, truncateStart: -1} }
	start := func(o int64) op { return op{truncateFromEnd: -1, truncateStart: o} }
	type query struct {
		epoch     int32
		wantEpoch int32
		wantEnd   int64
	}
	const leo = 100
	for _, tc := range []struct {
		name    string
		ops     []op
		want    []EpochEntry
		queries []query
	}{
		{"shouldAddEpochAndMessageOffsetToCache", []op{as(2, 10)}, []EpochEntry{{2, 10}},
			[]query{{2, 2, leo}}},
		{"shouldReturnLogEndOffsetIfLatestEpochRequested", []op{as(2, 5), as(3, 6), as(4, 7)}, []EpochEntry{{2, 5}, {3, 6}, {4, 7}},
			[]query{{4, 4, leo}}},
		{"shouldReturnUndefinedOffsetIfUndefinedEpochRequested", []op{as(2, 5)}, []EpochEntry{{2, 5}},
			[]query{{UndefinedEpoch, UndefinedEpoch, UndefinedOffset}}},
		{"shouldNotOverwriteLogEndOffsetForALeaderEpochOnceItHasBeenAssigned", []op{as(2, 6), as(2, 9)}, []EpochEntry{{2, 6}},
			[]query{{2, 2, leo}}},
		{"shouldReturnFirstEpochStartIfRequestedEpochLessThanFirstEpoch", []op{as(5, 11)}, []EpochEntry{{5, 11}},
			[]query{{4, 4, 11}}},
		{"shouldGetFirstOffsetOfSubsequentEpochWhenOffsetRequestedForPreviousEpoch", []op{as(1, 5), as(1, 6), as(2, 7)}, []EpochEntry{{1, 5}, {2, 7}},
			[]query{{1, 1, 7}}},
		{"shouldReturnNextAvailableEpochIfThereIsNoExactEpochForTheOneRequested", []op{as(0, 10), as(2, 13), as(4, 17)}, []EpochEntry{{0, 10}, {2, 13}, {4, 17}},
			[]query{{1, 0, 13}, {3, 2, 17}, {0, 0, 13}}},
		{"shouldReturnUndefinedForAnEpochAboveTheLatest", []op{as(2, 6)}, []EpochEntry{{2, 6}},
			[]query{{3, UndefinedEpoch, UndefinedOffset}, {math.MaxInt32, UndefinedEpoch, UndefinedOffset}}},
		{"shouldReturnUndefinedWhenEmpty", nil, nil,
			[]query{{0, UndefinedEpoch, UndefinedOffset}}},
		{"shouldUpdateSavedOffsetIfItIsLowerForTheSameEpoch", []op{as(2, 6), as(2, 5)}, []EpochEntry{{2, 5}}, nil},
		{"shouldDropEntriesThatALowerEpochContradicts", []op{as(1, 5), as(2, 6), as(3, 8), as(2, 7)}, []EpochEntry{{1, 5}, {2, 7}}, nil},
		{"shouldDropEntriesWithStartOffsetsAtOrAboveANewEntry", []op{as(1, 5), as(2, 8), as(3, 6)}, []EpochEntry{{1, 5}, {3, 6}}, nil},
		{"shouldDropEntriesOnEpochBoundaryWhenRemovingLatestEntries", []op{as(2, 6), as(3, 8), as(4, 11), end(8)}, []EpochEntry{{2, 6}}, nil},
		{"shouldDropEntriesBetweenEpochBoundaryWhenRemovingNewest", []op{as(2, 6), as(3, 8), as(4, 11), end(9)}, []EpochEntry{{2, 6}, {3, 8}}, nil},
		{"shouldNotClearAnythingIfOffsetToClearIsAfterTheLatest", []op{as(2, 6), as(3, 8), end(9)}, []EpochEntry{{2, 6}, {3, 8}}, nil},
		{"shouldClearAllEntries when truncating to the first start", []op{as(2, 6), as(3, 8), end(6)}, nil, nil},
		{"shouldUpdateSavedOffsetWhenOffsetToClearToIsBetweenEpochs", []op{as(2, 6), as(3, 8), as(4, 11), start(9)}, []EpochEntry{{3, 9}, {4, 11}}, nil},
		{"shouldNotClearAnythingIfOffsetToFirstOffsetBeforeFirstEntry", []op{as(2, 6), as(3, 8), start(5)}, []EpochEntry{{2, 6}, {3, 8}}, nil},
		{"shouldRetainLatestEpochOnClearAllEarliestAndUpdateItsOffset", []op{as(2, 6), as(3, 8), start(11)}, []EpochEntry{{3, 11}}, nil},
		{"shouldClearEarliestOnEpochBoundary", []op{as(2, 6), as(3, 8), as(4, 11), start(8)}, []EpochEntry{{3, 8}, {4, 11}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), epochCheckpointFile)
			c, err := loadEpochCache(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range tc.ops {
				switch {
				case o.assign != nil:
					if _, err := c.assign(o.assign.Epoch, o.assign.StartOffset, true); err != nil {
						t.Fatal(err)
					}
				case o.truncateFromEnd >= 0:
					c.truncateFromEnd(o.truncateFromEnd)
				default:
					c.truncateFromStart(o.truncateStart)
				}
				if err := c.save(); err != nil {
					t.Fatal(err)
				}
			}
			reloaded, err := loadEpochCache(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, cc := range []*epochCache{c, reloaded} {
				if got := *cc.view.Load(); !equalEntries(got, tc.want) {
					t.Fatalf("entries %v, want %v", got, tc.want)
				}
				for _, q := range tc.queries {
					if e, o := endOffsetFor(*cc.view.Load(), q.epoch, leo); e != q.wantEpoch || o != q.wantEnd {
						t.Fatalf("endOffsetFor(%d) = (%d, %d), want (%d, %d)", q.epoch, e, o, q.wantEpoch, q.wantEnd)
					}
				}
			}
		})
	}
}

// TestLog_EndOffsetFor: a leader answers a follower's lastFetchedEpoch
// from its log, and a new leader's epoch starts at its log end before it
// writes anything (KIP-101, KIP-279).
func TestLog_EndOffsetFor(t *testing.T) {
	l := openLog(t, t.TempDir(), Config{})
	for _, e := range []int32{1, 1, 1, 3, 3} {
		mustAppend(t, l, spec{}, e)
	}
	if err := l.AssignEpoch(5); err != nil {
		t.Fatal(err)
	}
	if err := l.AssignEpoch(4); !errors.Is(err, ErrStaleLeaderEpoch) {
		t.Fatalf("AssignEpoch(4) after 5: %v", err)
	}
	if _, err := l.Append(makeBatch(t, spec{}), 3); !errors.Is(err, ErrStaleLeaderEpoch) {
		t.Fatalf("Append at epoch 3 after 5: %v", err)
	}
	for _, q := range []struct {
		epoch     int32
		wantEpoch int32
		wantEnd   int64
	}{
		{0, 0, 0}, {1, 1, 3}, {2, 1, 3}, {3, 3, 5}, {4, 3, 5}, {5, 5, 5}, {6, UndefinedEpoch, UndefinedOffset},
	} {
		if e, o := l.EndOffsetFor(q.epoch); e != q.wantEpoch || o != q.wantEnd {
			t.Errorf("EndOffsetFor(%d) = (%d, %d), want (%d, %d)", q.epoch, e, o, q.wantEpoch, q.wantEnd)
		}
	}
	mustAppend(t, l, spec{}, 5)
	if e, o := l.EndOffsetFor(5); e != 5 || o != 6 {
		t.Errorf("EndOffsetFor(5) = (%d, %d) after an append, want (5, 6)", e, o)
	}
	if e, ok := l.LatestEpoch(); !ok || e != 5 {
		t.Errorf("LatestEpoch = %d, %v", e, ok)
	}
}

// TestLog_DivergingFollowerTruncates: KIP-279's two quick failovers. The
// follower has epoch 2 that the leader never had; it asks the leader's end
// offset for its latest epoch, truncates, and takes the leader's log.
func TestLog_DivergingFollowerTruncates(t *testing.T) {
	leader := openLog(t, t.TempDir(), Config{})
	follower := openLog(t, t.TempDir(), Config{})
	// Both have epoch 1 at 0..1.
	for i := 0; i < 2; i++ {
		mustAppend(t, leader, spec{}, 1)
	}
	res, _ := leader.Read(0, 1<<20)
	if _, err := follower.AppendAsFollower(res.Records); err != nil {
		t.Fatal(err)
	}
	// The follower led epoch 2 briefly and wrote 2..3, never replicated.
	mustAppend(t, follower, spec{}, 2)
	mustAppend(t, follower, spec{}, 2)
	// The leader leads epoch 3 from offset 2 and writes 2..4.
	if err := leader.AssignEpoch(3); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		mustAppend(t, leader, spec{}, 3)
	}
	// The follower fetches with lastFetchedEpoch 2: the leader answers
	// diverging (1, 2), and the follower truncates to min(2, its own end
	// of epoch 1).
	last, _ := follower.LatestEpoch()
	e, end := leader.EndOffsetFor(last)
	if e != 1 || end != 2 {
		t.Fatalf("leader's EndOffsetFor(%d) = (%d, %d), want (1, 2)", last, e, end)
	}
	fe, fend := follower.EndOffsetFor(e)
	to := min(end, fend)
	if fe != e {
		to = min(fend, follower.LogEndOffset())
	}
	if err := follower.TruncateTo(to); err != nil {
		t.Fatal(err)
	}
	res, err := leader.Read(follower.LogEndOffset(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := follower.AppendAsFollower(res.Records); err != nil {
		t.Fatal(err)
	}
	a, _ := leader.Read(0, 1<<20)
	b, _ := follower.Read(0, 1<<20)
	if string(a.Records) != string(b.Records) || !equalEntries(leader.EpochEntries(), follower.EpochEntries()) {
		t.Fatalf("logs differ after the follower caught up: epochs %v vs %v", leader.EpochEntries(), follower.EpochEntries())
	}
}

// TestLog_TruncateToEndOffsetClearsEpochCache (Kafka's UnifiedLogTest case
// of the same name): a replica that became leader (AssignEpoch at its log
// end) and lost the leadership before appending holds an epoch with no
// record in it, which its new leader does not know. Truncating to the log
// end cuts no batch but drops that epoch, durably; otherwise the follower's
// fetches carry it as their last epoch and diverge again for ever.
func TestLog_TruncateToEndOffsetClearsEpochCache(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Config{})
	mustAppend(t, l, spec{records: 3}, 0)
	if err := l.AssignEpoch(1); err != nil {
		t.Fatal(err)
	}
	if e, ok := l.LatestEpoch(); !ok || e != 1 {
		t.Fatalf("after AssignEpoch(1): latest epoch %d, %v; want 1", e, ok)
	}
	if err := l.TruncateTo(l.LogEndOffset()); err != nil {
		t.Fatal(err)
	}
	if e, ok := l.LatestEpoch(); !ok || e != 0 {
		t.Errorf("after TruncateTo(log end): latest epoch %d, %v; want 0 (the empty epoch 1 dropped)", e, ok)
	}
	if got := l.LogEndOffset(); got != 3 {
		t.Errorf("log end %d; want 3: no batch cut", got)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, Config{})
	if e, ok := l.LatestEpoch(); !ok || e != 0 {
		t.Errorf("reopened: latest epoch %d, %v; want 0 (the drop is durable)", e, ok)
	}
}
