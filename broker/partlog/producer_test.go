package partlog

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"
)

// TestProducerState: the leader's idempotence checks, through Append
// (ProducerStateManagerTest's testBasicIdempotence, testProducerSequence*,
// testProducerFencing, testDuplicate..., testSequenceWrap...; the table in
// DATAPLANE.md §3).
func TestProducerState(t *testing.T) {
	type step struct {
		s         spec
		target    error // the refusal, if any
		wantFirst int64 // the offset answered
		dup       bool
	}
	p := func(epoch int16, seq int32, n int) spec { return spec{pid: 42, pepoch: epoch, seq: seq, records: n} }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"in order", []step{{s: p(0, 0, 2)}, {s: p(0, 2, 3), wantFirst: 2}, {s: p(0, 5, 1), wantFirst: 5}}},
		{"unknown producer: any sequence", []step{{s: p(3, 17, 1)}, {s: p(3, 18, 1), wantFirst: 1}}},
		{"duplicate of the last batch", []step{{s: p(0, 0, 2)}, {s: p(0, 2, 2), wantFirst: 2}, {s: p(0, 2, 2), wantFirst: 2, dup: true}}},
		{"duplicate of the fifth last", []step{
			{s: p(0, 0, 1)}, {s: p(0, 1, 1), wantFirst: 1}, {s: p(0, 2, 1), wantFirst: 2}, {s: p(0, 3, 1), wantFirst: 3}, {s: p(0, 4, 1), wantFirst: 4},
			{s: p(0, 0, 1), wantFirst: 0, dup: true},
		}},
		{"the sixth last is no longer known", []step{
			{s: p(0, 0, 1)}, {s: p(0, 1, 1), wantFirst: 1}, {s: p(0, 2, 1), wantFirst: 2}, {s: p(0, 3, 1), wantFirst: 3}, {s: p(0, 4, 1), wantFirst: 4}, {s: p(0, 5, 1), wantFirst: 5},
			{s: p(0, 0, 1), target: ErrOutOfOrderSequence},
		}},
		{"a gap", []step{{s: p(0, 0, 2)}, {s: p(0, 3, 1), target: ErrOutOfOrderSequence}}},
		{"a batch overlapping the last", []step{{s: p(0, 0, 2)}, {s: p(0, 1, 2), target: ErrOutOfOrderSequence}}},
		{"a lower epoch is fenced", []step{{s: p(2, 0, 1)}, {s: p(1, 1, 1), target: ErrInvalidProducerEpoch}}},
		{"a higher epoch starts at 0", []step{{s: p(1, 0, 1)}, {s: p(1, 1, 1), wantFirst: 1}, {s: p(2, 0, 1), wantFirst: 2}, {s: p(1, 2, 1), target: ErrInvalidProducerEpoch}}},
		{"a higher epoch not at 0", []step{{s: p(1, 0, 1)}, {s: p(2, 5, 1), target: ErrOutOfOrderSequence}}},
		{"the sequence wraps", []step{{s: p(0, math.MaxInt32-1, 2)}, {s: p(0, 0, 1), wantFirst: 2}, {s: p(0, math.MaxInt32-1, 2), wantFirst: 0, dup: true}, {s: p(0, 5, 1), target: ErrOutOfOrderSequence}}},
		{"a batch wrapping inside", []step{{s: p(0, math.MaxInt32, 3)}, {s: p(0, 2, 1), wantFirst: 3}}},
		{"not idempotent: no checks", []step{{s: spec{}}, {s: spec{}, wantFirst: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := openLog(t, t.TempDir(), Config{})
			for i, st := range tc.steps {
				b := makeBatch(t, st.s)
				leo := l.LogEndOffset()
				checked, cerr := l.CheckProducer(b)
				info, err := l.Append(b, 0)
				if !errors.Is(cerr, st.target) || checked.Duplicate != st.dup {
					t.Fatalf("step %d: CheckProducer = %+v, %v; want %v, duplicate %v", i, checked, cerr, st.target, st.dup)
				}
				if st.target != nil {
					if !errors.Is(err, st.target) || l.LogEndOffset() != leo {
						t.Fatalf("step %d: %v (LEO %d -> %d), want %v and nothing appended", i, err, leo, l.LogEndOffset(), st.target)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if info.FirstOffset != st.wantFirst || info.Duplicate != st.dup {
					t.Fatalf("step %d: %+v, want first offset %d duplicate %v", i, info, st.wantFirst, st.dup)
				}
				if st.dup && l.LogEndOffset() != leo {
					t.Fatalf("step %d: a duplicate was appended", i)
				}
			}
		})
	}
}

// TestProducerState_FollowsTheLog: followers build the same state from
// replicated headers; truncation and the log start moving take it back.
func TestProducerState_FollowsTheLog(t *testing.T) {
	leader := openLog(t, t.TempDir(), Config{})
	for i := 0; i < 4; i++ {
		mustAppend(t, leader, spec{pid: 8, seq: int32(i)}, 1)
	}
	dir := t.TempDir()
	f := openLog(t, dir, Config{})
	res, _ := leader.Read(0, 1<<20)
	if _, err := f.AppendAsFollower(res.Records); err != nil {
		t.Fatal(err)
	}
	// The follower becomes leader: a retry of batch 3 is a duplicate.
	if info, err := f.Append(makeBatch(t, spec{pid: 8, seq: 3}), 2); err != nil || !info.Duplicate || info.FirstOffset != 3 {
		t.Fatalf("retry on the new leader: %+v, %v", info, err)
	}
	// Truncated to 2, the next sequence expected is 2 again.
	if err := f.TruncateTo(2); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Append(makeBatch(t, spec{pid: 8, seq: 3}), 2); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("seq 3 after truncation to 2: %v", err)
	}
	mustAppend(t, f, spec{pid: 8, seq: 2}, 2)
	// With its batches below the log start the producer is forgotten.
	if err := f.DeleteTo(3); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Append(makeBatch(t, spec{pid: 8, seq: 99}), 2); err != nil {
		t.Fatalf("a forgotten producer's batch: %v", err)
	}
}

// TestProducerState_Expiration: Retain forgets an idempotent producer whose
// newest batch is older than ProducerIDExpiration, and only that one
// (ProducerStateManagerTest's testProducerExpirationTimeout and
// testRemoveExpiredPidsOnReload): its next batch is then taken at any
// sequence, as an unknown producer's; a recent producer keeps its checks.
// Zero keeps every producer.
func TestProducerState_Expiration(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	const expiration = time.Minute
	old := now.Add(-2 * expiration).UnixMilli()
	recent := now.Add(-expiration / 2).UnixMilli()
	for _, tc := range []struct {
		name        string
		expiration  time.Duration
		wantExpired int
		oldKnown    bool // producer 1's sequence is still checked
	}{
		{"past the expiration", expiration, 1, false},
		{"zero keeps every producer", 0, 0, true},
		{"longer than both ages", 3 * expiration, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := openLog(t, t.TempDir(), Config{})
			mustAppend(t, l, spec{pid: 1, seq: 0, ts: old}, 0)
			mustAppend(t, l, spec{pid: 2, seq: 0, ts: recent}, 0)
			out, err := l.Retain(now, Retention{ProducerIDExpiration: tc.expiration})
			if err != nil || out.ProducersExpired != tc.wantExpired {
				t.Fatalf("Retain: %+v, %v; want %d producers expired", out, err, tc.wantExpired)
			}
			// A gap in producer 1's sequence is refused only while it is known.
			_, err = l.Append(makeBatch(t, spec{pid: 1, seq: 7, ts: now.UnixMilli()}), 0)
			if tc.oldKnown != errors.Is(err, ErrOutOfOrderSequence) {
				t.Fatalf("producer 1 at sequence 7 after Retain: %v; known %v", err, tc.oldKnown)
			}
			// Producer 2, recent, is always still checked.
			if _, err := l.Append(makeBatch(t, spec{pid: 2, seq: 7, ts: now.UnixMilli()}), 0); !errors.Is(err, ErrOutOfOrderSequence) {
				t.Fatalf("producer 2 at sequence 7: %v; want %v", err, ErrOutOfOrderSequence)
			}
		})
	}
}

// TestLog_Producers: the idempotent producers DescribeProducers lists, with
// each one's epoch, last sequence and largest timestamp, from the leader's
// appends and a follower's alike, across a restart, and without those
// whose batches are all below the log start (UnifiedLog.activeProducers).
func TestLog_Producers(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Config{})
	mustAppend(t, l, spec{pid: 5, seq: 0, records: 3, ts: 100}, 0) // offsets 0-2
	mustAppend(t, l, spec{pid: 5, seq: 3, records: 2, ts: 50}, 0)  // 3-4
	mustAppend(t, l, spec{ts: 900}, 0)                             // 5: not idempotent
	mustAppend(t, l, spec{pid: 9, pepoch: 2, seq: 0, ts: 700}, 0)  // 6
	want := []ProducerInfo{
		{ProducerID: 5, ProducerEpoch: 0, LastSequence: 4, LastTimestamp: 102},
		{ProducerID: 9, ProducerEpoch: 2, LastSequence: 0, LastTimestamp: 700},
	}
	if got := l.Producers(); !slices.Equal(got, want) {
		t.Fatalf("Producers() = %+v, want %+v", got, want)
	}
	res, err := l.Read(0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	f := openLog(t, t.TempDir(), Config{})
	if _, err := f.AppendAsFollower(res.Records); err != nil {
		t.Fatal(err)
	}
	if got := f.Producers(); !slices.Equal(got, want) {
		t.Fatalf("a follower's Producers() = %+v, want %+v", got, want)
	}
	crash(l)
	l = openLog(t, dir, Config{})
	if got := l.Producers(); !slices.Equal(got, want) {
		t.Fatalf("after a restart Producers() = %+v, want %+v", got, want)
	}
	if err := l.DeleteTo(5); err != nil {
		t.Fatal(err)
	}
	if got := l.Producers(); !slices.Equal(got, want[1:]) {
		t.Fatalf("after DeleteTo(5) Producers() = %+v, want %+v", got, want[1:])
	}
}
