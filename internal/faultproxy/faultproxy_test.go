package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// echoServer answers every line with itself until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line on conn and reads the echo within d; the error
// says what happened instead.
func roundTrip(conn net.Conn, d time.Duration) error {
	_ = conn.SetDeadline(time.Now().Add(d))
	defer conn.SetDeadline(time.Time{})
	if _, err := conn.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return errors.New("echo garbled: " + line)
	}
	return nil
}

func TestFaultProxy(t *testing.T) {
	const quick = 300 * time.Millisecond
	tests := []struct {
		mode Mode
		// what a connection open before the change sees, and a new one
		oldConn, newConn func(error) bool
		want             string
	}{
		{Up, isNil, isNil, "both forward"},
		{Drop, isClosed, isClosed, "both closed"},
		{Blackhole, isTimeout, isTimeout, "both silent"},
		{Reset, isReset, isReset, "both reset"},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			p, err := New("test", echoServer(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			old, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer old.Close()
			if err := roundTrip(old, 5*time.Second); err != nil {
				t.Fatalf("before the change: %v", err)
			}
			p.Set(tt.mode)
			if err := roundTrip(old, quick); !tt.oldConn(err) {
				t.Errorf("open connection after Set(%s): %v; want %s", tt.mode, err, tt.want)
			}
			// The proxy itself accepts, but a reset may come back before
			// the dial returns.
			fresh, err := net.Dial("tcp", p.Addr())
			if err == nil {
				defer fresh.Close()
				err = roundTrip(fresh, quick)
			}
			if !tt.newConn(err) {
				t.Errorf("new connection after Set(%s): %v; want %s", tt.mode, err, tt.want)
			}

			// Healing: held connections are closed, new ones forward.
			p.Set(Up)
			if tt.mode == Blackhole {
				if err := roundTrip(old, 5*time.Second); !isClosed(err) {
					t.Errorf("held connection after healing: %v; want it closed", err)
				}
			}
			healed, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer healed.Close()
			if err := roundTrip(healed, 5*time.Second); err != nil {
				t.Errorf("new connection after healing: %v", err)
			}
		})
	}
}

func isNil(err error) bool { return err == nil }

// isReset: the proxy reset the connection (an RST), which a write or the
// read after it reports; a FIN would read as EOF.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// isClosed: the proxy closed the connection (EOF or reset), rather than
// leaving it silent.
func isClosed(err error) bool { return err != nil && !isTimeout(err) }

// TestFaultProxy_SetTarget: a proxy made before its target has an address
// forwards there once it is set; until then a connection is closed, as a
// link to a node that is down would be.
func TestFaultProxy_SetTarget(t *testing.T) {
	p, err := New("test", "127.0.0.1:1") // nothing listens on port 1
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	before, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	if err := roundTrip(before, 5*time.Second); !isClosed(err) {
		t.Errorf("before SetTarget: %v; want the connection closed", err)
	}
	p.SetTarget(echoServer(t))
	after, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if err := roundTrip(after, 5*time.Second); err != nil {
		t.Errorf("after SetTarget: %v", err)
	}
}
