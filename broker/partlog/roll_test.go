package partlog

import (
	"testing"
	"time"
)

func segmentBases(l *Log) []int64 {
	var bases []int64
	for _, s := range l.Segments() {
		bases = append(bases, s.BaseOffset)
	}
	return bases
}

// TestLog_RollsBySegmentMs: LogTest's testTimeBasedLogRollDuringAppend in
// Keel's terms: a batch that comes more than segment.ms after the active
// segment's first starts a new segment; up to segment.ms it does not.
func TestLog_RollsBySegmentMs(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	l := openLog(t, t.TempDir(), Config{SegmentTime: time.Hour, Now: func() time.Time { return now }})
	mustAppend(t, l, spec{value: 10}, 0)
	now = now.Add(time.Hour)
	mustAppend(t, l, spec{value: 10}, 0)
	if got := segmentBases(l); !equalInts(got, []int64{0}) {
		t.Fatalf("after exactly segment.ms: segments at %v, want [0]", got)
	}
	now = now.Add(time.Millisecond)
	mustAppend(t, l, spec{value: 10}, 0)
	now = now.Add(time.Minute)
	mustAppend(t, l, spec{value: 10}, 0)
	if got := segmentBases(l); !equalInts(got, []int64{0, 2}) {
		t.Fatalf("past segment.ms: segments at %v, want [0 2]", got)
	}
}

// TestLog_Reconfigure: LogManagerTest's config updates in Keel's terms: a
// changed segment.bytes or segment.ms applies to the open log from its
// next append, and a bad value changes nothing.
func TestLog_Reconfigure(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	batch := int64(len(makeBatch(t, spec{value: 200})))
	l := openLog(t, t.TempDir(), Config{Now: func() time.Time { return now }})
	for range 3 {
		mustAppend(t, l, spec{value: 200}, 0)
	}
	if err := l.Reconfigure(Config{SegmentBytes: 1}); err == nil {
		t.Fatal("a segment.bytes under a batch header was taken")
	}
	if err := l.Reconfigure(Config{SegmentBytes: 4 * batch}); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, spec{value: 200}, 0)
	mustAppend(t, l, spec{value: 200}, 0)
	if got := segmentBases(l); !equalInts(got, []int64{0, 4}) {
		t.Fatalf("segment.bytes lowered to 4 batches: segments at %v, want [0 4]", got)
	}
	if err := l.Reconfigure(Config{SegmentTime: time.Second}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Second)
	mustAppend(t, l, spec{value: 200}, 0)
	if got := segmentBases(l); !equalInts(got, []int64{0, 4, 5}) {
		t.Fatalf("segment.ms lowered: segments at %v, want [0 4 5]", got)
	}
}
