package partlog

import (
	"errors"
	"os"
	"testing"
)

// TestLog_FailedWriteTellsOnFailOnce: a write that fails (here the
// segment's file refuses writes, as a full disk would) is refused, turns
// the log to refusing every later write with ErrFailed, and is reported to
// OnFail once (Kafka's LogDirFailureChannel); Close says it did not flush
// it; what was written before is
// intact when the log is opened again, and the reopened log takes writes.
func TestLog_FailedWriteTellsOnFailOnce(t *testing.T) {
	dir := t.TempDir()
	var failures []error
	cfg := Config{OnFail: func(err error) { failures = append(failures, err) }}
	l, err := Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, spec{records: 3}, 0)

	// The active segment's file turns read-only under the log.
	s := l.active()
	ro, err := os.Open(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	l.wmu.Lock()
	rw := s.f
	s.f = ro
	l.wmu.Unlock()
	rw.Close()

	if _, err := l.Append(makeBatch(t, spec{records: 2}), 0); err == nil {
		t.Fatal("Append on a file that refuses writes: no error")
	}
	if _, err := l.Append(makeBatch(t, spec{records: 2}), 0); !errors.Is(err, ErrFailed) {
		t.Fatalf("Append after a failed write: %v; want ErrFailed", err)
	}
	if len(failures) != 1 {
		t.Fatalf("OnFail called %d times (%v); want once", len(failures), failures)
	}
	if got := l.LogEndOffset(); got != 3 {
		t.Errorf("log end after the failed writes: %d; want 3", got)
	}
	if err := l.Close(); !errors.Is(err, ErrFailed) {
		t.Errorf("Close of a failed log: %v; want ErrFailed (it is not flushed)", err)
	}

	l = openLog(t, dir, Config{})
	if hs := readAll(t, l); len(hs) != 1 || hs[0].LastOffset() != 2 {
		t.Fatalf("reopened: batches %+v; want the one written before the failure", hs)
	}
	if info := mustAppend(t, l, spec{records: 2}, 0); info.FirstOffset != 3 {
		t.Errorf("append after reopening: first offset %d; want 3", info.FirstOffset)
	}
}
