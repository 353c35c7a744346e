package partlog

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// TestClean_Property: random appends (keys, values, tombstones, batch
// sizes, codecs) beside a cleaner, with restarts (a clean Close, a kill
// mid-clean, a power loss). After every round: every record at or above
// the cleaned offset is readable as appended, every key's newest record is
// readable at its offset, and a reader from any offset finds every key's
// newest record (the one it would have found before any clean). The seed
// is in the subtest's name and in every failure: add it to seeds to
// reproduce one.
func TestClean_Property(t *testing.T) {
	seeds := []uint64{1, 2, uint64(time.Now().UnixNano())}
	if testing.Short() {
		seeds = seeds[:2]
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { cleanProperty(t, seed) })
	}
}

// modelRecord is what the test appended at an offset.
type modelRecord struct {
	key   string
	value []byte // nil: a tombstone
}

func cleanProperty(t *testing.T, seed uint64) {
	rnd := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	dir := t.TempDir()
	cfg := Config{SegmentBytes: 1024 + int64(rnd.IntN(3072)), IndexIntervalBytes: int64(rnd.IntN(300))}
	c := Compaction{DeleteRetention: 1000 * time.Hour}
	l, err := Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	model := map[int64]modelRecord{}
	now := time.UnixMilli(1 << 40)
	var removed int64

	for round := range 6 {
		// Batches built before the round, so the appender needs no rnd.
		var batches [][]byte
		var contents [][]modelRecord
		for range 15 + rnd.IntN(30) {
			n := 1 + rnd.IntN(5)
			codec := int16(rnd.IntN(5))
			var recs []kv
			var mrs []modelRecord
			for range n {
				k := fmt.Sprintf("key-%d", rnd.IntN(12))
				var v []byte
				if rnd.IntN(7) != 0 {
					v = fmt.Appendf(nil, "r%d-%d", round, rnd.Uint32())
				}
				recs = append(recs, kv{[]byte(k), v})
				mrs = append(mrs, modelRecord{k, v})
			}
			batches = append(batches, keyedBatch(t, codec, now.UnixMilli(), 0, 0, recs...))
			contents = append(contents, mrs)
		}

		stop := make(chan struct{})
		kick := make(chan struct{}, 1)
		var wg sync.WaitGroup
		var cleanErr error
		wg.Add(1)
		go func() { // the cleaner
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-kick:
				}
				res, err := l.Clean(now, c, l.LogEndOffset())
				if err != nil && cleanErr == nil {
					cleanErr = err
				}
				removed += res.RecordsRemoved
			}
		}()
		for i, b := range batches {
			info, err := l.Append(b, 0)
			if err != nil {
				t.Fatalf("seed %d round %d: Append: %v", seed, round, err)
			}
			for j, mr := range contents[i] {
				model[info.FirstOffset+int64(j)] = mr
			}
			select {
			case kick <- struct{}{}:
			default:
			}
		}

		restart := rnd.IntN(4)
		switch restart {
		case 0: // no restart: a last clean with nothing appending
			close(stop)
			wg.Wait()
			removed += mustClean(t, l, now, c, l.LogEndOffset()).RecordsRemoved
		case 1: // a clean shutdown
			close(stop)
			wg.Wait()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = reopen(t, dir, cfg)
		case 2, 3: // kill -9 while the cleaner runs, maybe a power loss too
			crash(l)
			close(stop)
			wg.Wait()
			cleanErr = nil // a clean the kill cut short may fail
			if restart == 3 {
				_, after, err := DropUnsynced(dir)
				if err != nil {
					t.Fatal(err)
				}
				for off := range model {
					if off >= after {
						delete(model, off)
					}
				}
			}
			l = reopen(t, dir, cfg)
		}
		if cleanErr != nil {
			t.Fatalf("seed %d round %d: Clean: %v", seed, round, cleanErr)
		}
		// A kill may come between a clean's swaps and its checkpoint:
		// then records above the cleaned offset may be gone too, each
		// for a newer one of its key.
		checkCleaned(t, seed, round, l, model, restart < 2)
		now = now.Add(time.Minute)
	}
	if removed == 0 {
		t.Fatalf("seed %d: the cleaner removed nothing in any round", seed)
	}
}

func reopen(t *testing.T, dir string, cfg Config) *Log {
	t.Helper()
	l, err := Open(dir, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

// checkCleaned checks the log against everything appended: what is read
// is what was appended there; a record is gone only if a newer one of its
// key is readable; and, if exact (no clean was cut short), nothing at or
// above the cleaned offset is gone.
func checkCleaned(t *testing.T, seed uint64, round int, l *Log, model map[int64]modelRecord, exact bool) {
	t.Helper()
	fail := func(format string, a ...any) {
		t.Helper()
		t.Fatalf("seed %d round %d: %s", seed, round, fmt.Sprintf(format, a...))
	}
	if l.LogEndOffset() != int64(len(model)) {
		fail("log end %d, %d records appended", l.LogEndOffset(), len(model))
	}
	newest := map[string]int64{}
	for off, mr := range model {
		if n, ok := newest[mr.key]; !ok || off > n {
			newest[mr.key] = off
		}
	}
	cleaned := l.CleanedOffset()
	recs, _ := readRecords(t, l)
	got := map[int64]record{}
	for _, r := range recs {
		mr, ok := model[r.offset]
		switch {
		case !ok:
			fail("offset %d read, never appended", r.offset)
		case string(r.key) != mr.key || r.tombstone != (mr.value == nil) || !bytes.Equal(valueOf(t, r), mr.value):
			fail("offset %d holds %s, appended %s", r.offset, r.key, mr.key)
		}
		got[r.offset] = r
	}
	for off, mr := range model {
		_, ok := got[off]
		switch {
		case ok:
		case exact && off >= cleaned:
			fail("offset %d, at or above the cleaned offset %d, is gone", off, cleaned)
		case newest[mr.key] == off:
			fail("key %s's newest record at %d is gone", mr.key, off)
		}
	}
	// A reader from any offset: every key's newest record at or after it.
	from := int64(len(model)) / 2
	part, _ := readRecordsFrom(t, l, from)
	seen := map[int64]bool{}
	for _, r := range part {
		seen[r.offset] = true
	}
	for k, off := range newest {
		if off >= from && !seen[off] {
			fail("a reader from %d misses key %s's newest record at %d", from, k, off)
		}
	}
}
