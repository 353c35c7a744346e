package broker

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testLogger logs through t, so a failing test shows what the agent did.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// waitTimeout bounds the tests' waits for the agent (poll.Until): far
// above what any takes, so that reaching it means the agent is stuck.
const waitTimeout = 10 * time.Second

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
