package raftlog

import (
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testLogger sends slog output to t.Log until the test's cleanups have run.
// raft's connection handlers can log a moment after Node.Close returns, and
// t.Log after a test has finished panics, so late lines are dropped.
func testLogger(t testing.TB) *slog.Logger {
	t.Helper()
	w := &testLogWriter{t: t}
	t.Cleanup(w.stop) // registered first, so it runs after every later cleanup
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testLogWriter struct {
	mu      sync.Mutex
	t       testing.TB
	stopped bool
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testLogWriter) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
}

var _ io.Writer = (*testLogWriter)(nil)
