package partlog

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"math"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// timestampLog builds a log of five batches of three records whose
// timestamps go back and forth, two batches a segment:
//
//	offsets 0-2   ts 100-102  epoch 1  segment 0
//	offsets 3-5   ts 200-202  epoch 1  segment 0
//	offsets 6-8   ts 150-152  epoch 2  segment 6
//	offsets 9-11  ts 300-302  epoch 2  segment 6
//	offsets 12-14 ts 250-252  epoch 2  segment 12
func timestampLog(t *testing.T, dir string) (*Log, Config) {
	t.Helper()
	cfg := Config{SegmentBytes: 2 * int64(len(makeBatch(t, spec{records: 3})))}
	l := openLog(t, dir, cfg)
	for _, b := range []struct {
		ts    int64
		epoch int32
	}{{100, 1}, {200, 1}, {150, 2}, {300, 2}, {250, 2}} {
		mustAppend(t, l, spec{records: 3, ts: b.ts}, b.epoch)
	}
	if got := len(l.Segments()); got != 3 {
		t.Fatalf("%d segments, want 3", got)
	}
	return l, cfg
}

type tsCase struct {
	name string
	ts   int64 // -3: MaxTimestampOffset
	upTo int64
	want TimestampOffset
}

func none() TimestampOffset { return TimestampOffset{Offset: -1, Timestamp: -1, LeaderEpoch: -1} }

func checkTimestamps(t *testing.T, l *Log, cases []tsCase) {
	t.Helper()
	for _, tc := range cases {
		var got TimestampOffset
		var err error
		if tc.ts == -3 {
			got, err = l.MaxTimestampOffset(tc.upTo)
		} else {
			got, err = l.OffsetForTimestamp(tc.ts, tc.upTo)
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: timestamp %d below %d: %+v, %v; want %+v", tc.name, tc.ts, tc.upTo, got, err, tc.want)
		}
	}
}

// TestLog_FetchOffsetByTimestamp: Kafka's rule (UnifiedLog's
// fetchOffsetByTimestamp, LogSegmentTest's testFindOffsetByTimestamp,
// UnifiedLogTest's testFetchOffsetByTimestampIncludesLeaderEpoch and
// testFetchOffsetByTimestampWithMaxTimestampIncludesTimestamp): the first
// record in offset order stamped at or after the target, with its own
// timestamp and its batch's leader epoch; nothing when every record below
// the bound is older; -3 the first record with the largest timestamp.
func TestLog_FetchOffsetByTimestamp(t *testing.T) {
	l, _ := timestampLog(t, t.TempDir())
	all := int64(math.MaxInt64)
	checkTimestamps(t, l, []tsCase{
		{"before everything", 0, all, TimestampOffset{0, 100, 1}},
		{"the first batch's first record", 100, all, TimestampOffset{0, 100, 1}},
		{"inside the first batch", 101, all, TimestampOffset{1, 101, 1}},
		{"between batches", 103, all, TimestampOffset{3, 200, 1}},
		{"an earlier offset beats an earlier timestamp", 151, all, TimestampOffset{3, 200, 1}},
		{"the last record of a batch", 202, all, TimestampOffset{5, 202, 1}},
		{"in a later segment", 203, all, TimestampOffset{9, 300, 2}},
		{"skips a later, older segment", 251, all, TimestampOffset{9, 300, 2}},
		{"the largest timestamp", 302, all, TimestampOffset{11, 302, 2}},
		{"after everything", 303, all, none()},
		{"max timestamp", -3, all, TimestampOffset{11, 302, 2}},
		// A consumer's lookup stops at the high watermark.
		{"only above the bound", 203, 9, none()},
		{"the bound inside a batch", 301, 10, none()},
		{"below a bound inside a batch", 300, 10, TimestampOffset{9, 300, 2}},
		{"max timestamp below a bound", -3, 9, TimestampOffset{5, 202, 1}},
		{"max timestamp below a bound in the active segment", -3, 15, TimestampOffset{11, 302, 2}},
		{"nothing below the bound", 0, 0, none()},
		{"max timestamp of nothing", -3, 0, none()},
	})
	if _, err := l.OffsetForTimestamp(-1, all); err == nil {
		t.Errorf("OffsetForTimestamp(-1): no error")
	}
}

// TestLog_FetchOffsetByTimestamp_LogStart: records below the log start do
// not count, even in a batch that holds it.
func TestLog_FetchOffsetByTimestamp_LogStart(t *testing.T) {
	l, _ := timestampLog(t, t.TempDir())
	if err := l.DeleteTo(4); err != nil {
		t.Fatal(err)
	}
	all := int64(math.MaxInt64)
	checkTimestamps(t, l, []tsCase{
		{"before everything", 0, all, TimestampOffset{4, 201, 1}},
		{"a record below the start", 200, all, TimestampOffset{4, 201, 1}},
		{"max timestamp", -3, all, TimestampOffset{11, 302, 2}},
		{"max timestamp below a bound", -3, 6, TimestampOffset{5, 202, 1}},
	})
}

// TestLog_FetchOffsetByTimestamp_AfterRecovery: a log reopened after a
// clean close, or after kill -9 with its index gone, answers the same:
// each segment's largest timestamp comes back from its batch headers.
func TestLog_FetchOffsetByTimestamp_AfterRecovery(t *testing.T) {
	all := int64(math.MaxInt64)
	cases := []tsCase{
		{"inside the first batch", 101, all, TimestampOffset{1, 101, 1}},
		{"skips a later, older segment", 251, all, TimestampOffset{9, 300, 2}},
		{"after everything", 303, all, none()},
		{"max timestamp", -3, all, TimestampOffset{11, 302, 2}},
	}
	t.Run("clean close", func(t *testing.T) {
		dir := t.TempDir()
		l, cfg := timestampLog(t, dir)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		checkTimestamps(t, openLog(t, dir, cfg), cases)
	})
	t.Run("crash", func(t *testing.T) {
		dir := t.TempDir()
		l, cfg := timestampLog(t, dir)
		crash(l)
		checkTimestamps(t, openLog(t, dir, cfg), cases)
	})
}

// TestLog_FetchOffsetByTimestamp_AfterTruncation: what a follower cut
// (KIP-279) is no longer found, and what it appends next is.
func TestLog_FetchOffsetByTimestamp_AfterTruncation(t *testing.T) {
	l, _ := timestampLog(t, t.TempDir())
	if err := l.TruncateTo(9); err != nil {
		t.Fatal(err)
	}
	all := int64(math.MaxInt64)
	checkTimestamps(t, l, []tsCase{
		{"the cut records", 203, all, none()},
		{"max timestamp", -3, all, TimestampOffset{5, 202, 1}},
	})
	mustAppend(t, l, spec{records: 2, ts: 400}, 3)
	checkTimestamps(t, l, []tsCase{
		{"a record appended after the cut", 203, all, TimestampOffset{9, 400, 3}},
		{"max timestamp", -3, all, TimestampOffset{10, 401, 3}},
	})
	if err := l.TruncateFullyAndStartAt(20); err != nil {
		t.Fatal(err)
	}
	checkTimestamps(t, l, []tsCase{
		{"an emptied log", 0, all, none()},
		{"max timestamp of an emptied log", -3, all, none()},
	})
}

// TestLog_FetchOffsetByTimestamp_Compressed: the records of a compressed
// batch are read for their own timestamps; in a LogAppendTime batch every
// record has the batch's maxTimestamp.
func TestLog_FetchOffsetByTimestamp_Compressed(t *testing.T) {
	l := openLog(t, t.TempDir(), Config{})
	mustAppend(t, l, spec{records: 3, ts: 100}, 0)
	if _, err := l.Append(gzipBatch(t, 4, 200), 0); err != nil { // offsets 3-6, ts 200-203
		t.Fatal(err)
	}
	appendTime := makeBatch(t, spec{records: 3, ts: 50}) // offsets 7-9
	binary.BigEndian.PutUint16(appendTime[offAttrs:], attrLogAppendTime)
	binary.BigEndian.PutUint64(appendTime[35:], 500) // the broker's append time
	putCRC(appendTime)
	if _, err := l.Append(appendTime, 0); err != nil {
		t.Fatal(err)
	}
	all := int64(math.MaxInt64)
	checkTimestamps(t, l, []tsCase{
		{"inside a gzip batch", 202, all, TimestampOffset{5, 202, 0}},
		{"the first of a gzip batch", 150, all, TimestampOffset{3, 200, 0}},
		{"a LogAppendTime batch", 204, all, TimestampOffset{7, 500, 0}},
		{"max timestamp: a LogAppendTime batch", -3, all, TimestampOffset{7, 500, 0}},
	})
}

// gzipBatch is a batch of n records stamped ts, ts+1, ..., gzip-compressed.
func gzipBatch(t *testing.T, n int, ts int64) []byte {
	t.Helper()
	var recs []byte
	for i := range n {
		r := kmsg.Record{TimestampDelta64: int64(i), OffsetDelta: int32(i), Value: []byte("v")}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	if _, err := w.Write(recs); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rb := kmsg.RecordBatch{Length: int32(minBatchLength + z.Len()), Magic: 2, Attributes: 1,
		LastOffsetDelta: int32(n - 1), FirstTimestamp: ts, MaxTimestamp: ts + int64(n-1),
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(n), Records: z.Bytes()}
	b := rb.AppendTo(nil)
	putCRC(b)
	return b
}
