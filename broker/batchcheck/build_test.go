package batchcheck

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestBuild: a built batch passes Check as a producer's does, and holds
// its records in order with their keys, values (a nil value a tombstone)
// and timestamps.
func TestBuild(t *testing.T) {
	recs := []kmsg.Record{
		{Key: []byte("a"), Value: []byte("1")},
		{Key: []byte("b"), Value: nil, TimestampDelta64: 7},
		{Key: []byte("a"), Value: bytes.Repeat([]byte("v"), 300), TimestampDelta64: 3},
	}
	b := Build(1_000, recs)
	if err := Check(b, Rules{RequireKeys: true}); err != nil {
		t.Fatalf("Check: %v", err)
	}
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b); err != nil {
		t.Fatal(err)
	}
	if rb.NumRecords != 3 || rb.LastOffsetDelta != 2 || rb.FirstTimestamp != 1_000 || rb.MaxTimestamp != 1_007 || rb.ProducerID != -1 {
		t.Fatalf("header %+v", rb)
	}
	got, err := readRecords(rb.Records, int(rb.NumRecords))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		if r.OffsetDelta != int32(i) || !bytes.Equal(r.Key, recs[i].Key) || !bytes.Equal(r.Value, recs[i].Value) ||
			(r.Value == nil) != (recs[i].Value == nil) || r.TimestampDelta64 != recs[i].TimestampDelta64 {
			t.Fatalf("record %d: %+v, want %+v", i, r, recs[i])
		}
	}
}

// readRecords reads n records of a v2 batch's records section.
func readRecords(src []byte, n int) ([]kmsg.Record, error) {
	out := make([]kmsg.Record, n)
	for i := range out {
		if err := out[i].ReadFrom(src); err != nil {
			return nil, err
		}
		src = src[len(out[i].AppendTo(nil)):]
	}
	return out, nil
}
