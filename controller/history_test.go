package controller

import (
	"bytes"
	"testing"

	"github.com/keel-dev/keel/fsm"
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
