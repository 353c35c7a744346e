package connlimit

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/keel-dev/keel/internal/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pipeConn is one end of a net.Pipe, the other end closed at cleanup.
func pipeConn(t *testing.T) net.Conn {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return a
}

// closed reports whether c has been closed (on our side).
func closed(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now())
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.ErrClosedPipe)
}

func TestLimiter_BoundsUnauthenticatedConnections(t *testing.T) {
	tests := []struct {
		name string
		// free is what frees a slot taken by an admitted connection.
		free func(c net.Conn)
	}{
		{name: "Authenticated", free: Authenticated},
		{name: "Close", free: func(c net.Conn) { c.Close() }},
		{name: "Authenticated through a TLS conn", free: func(c net.Conn) { Authenticated(tls.Server(c, &tls.Config{})) }},
		{name: "Authenticated then Close", free: func(c net.Conn) { Authenticated(c); c.Close() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New(2, time.Hour, "test")
			l.SetLogger(slog.New(slog.DiscardHandler))
			a, ok := l.Admit(pipeConn(t))
			if !ok {
				t.Fatal("the first connection was refused")
			}
			defer a.Close()
			b, ok := l.Admit(pipeConn(t))
			if !ok {
				t.Fatal("the second connection was refused")
			}
			over := pipeConn(t)
			if _, ok := l.Admit(over); ok {
				t.Fatal("a third connection was admitted beyond a bound of 2")
			}
			if !closed(over) {
				t.Error("the refused connection is still open")
			}
			if l.Pending() != 2 || l.Refused() != 1 {
				t.Fatalf("pending %d, refused %d; want 2, 1", l.Pending(), l.Refused())
			}
			tt.free(b)
			tt.free(b) // a second time changes nothing
			if l.Pending() != 1 {
				t.Fatalf("pending %d after freeing one; want 1", l.Pending())
			}
			c, ok := l.Admit(pipeConn(t))
			if !ok {
				t.Fatal("a connection was refused with a slot free")
			}
			c.Close()
			if l.Pending() != 1 || l.Refused() != 1 {
				t.Fatalf("pending %d, refused %d; want 1, 1", l.Pending(), l.Refused())
			}
		})
	}
}

// TestLimiter_HoldEnds: a connection nobody authenticates or closes stops
// counting after the hold time, and its connection stays open (its owner's
// deadline closes it).
func TestLimiter_HoldEnds(t *testing.T) {
	l := New(1, 20*time.Millisecond, "test")
	c, ok := l.Admit(pipeConn(t))
	if !ok {
		t.Fatal("refused")
	}
	defer c.Close()
	poll.Until(t, 5*time.Second, "the slot to be freed after the hold time", func() bool { return l.Pending() == 0 })
	if closed(c) {
		t.Error("the hold time closed the connection")
	}
	c.Close()
	if l.Pending() != 0 {
		t.Fatalf("pending %d after Close of an expired connection; want 0", l.Pending())
	}
}

// TestAuthenticated_OtherConnections: a connection no Limiter admitted is
// left alone.
func TestAuthenticated_OtherConnections(t *testing.T) {
	c := pipeConn(t)
	Authenticated(c)
	Authenticated(tls.Client(c, &tls.Config{}))
	Authenticated(nil)
	if closed(c) {
		t.Fatal("Authenticated closed a connection")
	}
}

// TestLimiter_LogsRefusalsRateLimited: one line per logInterval, saying
// how many were not logged.
func TestLimiter_LogsRefusalsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	l := New(1, time.Hour, "the test port")
	l.SetLogger(slog.New(slog.NewTextHandler(&buf, nil)))
	now := time.Unix(1000, 0)
	l.nowForLog = func() time.Time { return now }
	if _, ok := l.Admit(pipeConn(t)); !ok {
		t.Fatal("the first connection was refused")
	}
	for range 5 {
		l.Admit(pipeConn(t))
	}
	now = now.Add(logInterval)
	l.Admit(pipeConn(t))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines logged for 6 refusals over one interval, want 2:\n%s", len(lines), buf.String())
	}
	for _, want := range []string{"too many connections whose peer has not yet authenticated", `listener="the test port"`, "max=1", "similar_refusals_not_logged=4", "refused_total=6"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("%q does not contain %q", lines[1], want)
		}
	}
	if l.Refused() != 6 {
		t.Errorf("refused %d, want 6", l.Refused())
	}
}

// TestListener_SkipsRefusedConnections: Accept returns only admitted
// connections; refused ones are closed at once.
func TestListener_SkipsRefusedConnections(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(1, time.Hour, "test")
	l.SetLogger(slog.New(slog.DiscardHandler))
	ln := l.Listener(inner)
	defer ln.Close()

	var accepted []net.Conn
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted = append(accepted, c)
			mu.Unlock()
		}
	}()
	first, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	poll.Until(t, 5*time.Second, "the first connection to be accepted", func() bool { return l.Pending() == 1 })
	second, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	_ = second.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := second.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read on the refused connection: %v, want EOF", err)
	}
	ln.Close()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(accepted) != 1 || l.Refused() != 1 {
		t.Fatalf("accepted %d, refused %d; want 1, 1", len(accepted), l.Refused())
	}
	accepted[0].Close()
}
