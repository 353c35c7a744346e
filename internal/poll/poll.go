// Package poll is the one way Keel's tests and benchmarks wait for a
// condition: ask it again every few milliseconds until it holds or a
// deadline passes, and say what was awaited (and, where known, what was
// last seen) when it does not. Tests never sleep to synchronise; they poll.
package poll

import (
	"context"
	"fmt"
	"time"
)

// TB is the part of testing.TB the helpers use. It is declared here, not
// imported, so that code that links this package for Wait (keel bench, in
// the production binary) does not link the testing package.
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// Interval is how often the test helpers ask again: often enough that a
// wait ends within milliseconds of its condition, rarely enough that the
// asking does not load a two-core machine.
const Interval = 5 * time.Millisecond

// Until polls cond until it holds, failing t at timeout with what was
// awaited.
func Until(t TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	UntilState(t, timeout, what, func() (bool, string) { return cond(), "" })
}

// UntilState polls check until it reports done, failing t at timeout with
// what was awaited and the state check last described.
func UntilState(t TB, timeout time.Duration, what string, check func() (done bool, state string)) {
	t.Helper()
	var last string
	err := Wait(context.Background(), timeout, Interval, what, func() (bool, error) {
		done, state := check()
		last = state
		return done, nil
	})
	if err == nil {
		return
	}
	if last != "" {
		t.Fatalf("%v; last seen:\n%s", err, last)
	}
	t.Fatal(err)
}

// Wait polls cond every interval until it holds, returns an error (which
// Wait returns), ctx ends, or timeout passes; the timeout's error names
// what. It is the poller of code that has no *testing.T (keel bench).
func Wait(ctx context.Context, timeout, interval time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
