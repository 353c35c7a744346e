package raftlog

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/keel-dev/keel/internal/connlimit"
	"github.com/keel-dev/keel/internal/poll"
)

// TestListenLimits_BoundsAllConnections: the controller's port counts
// every connection from accept, routed or not, against its bound in all
// and per source, and keeps the default bound on unauthenticated ones.
func TestListenLimits_BoundsAllConnections(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	m, err := ListenLimits("127.0.0.1:0", connlimit.Limits{MaxConns: 2, MaxPerSource: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	dial := func(src string) net.Conn {
		t.Helper()
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("tcp", m.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	closedAtOnce := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := c.Read(make([]byte, 1))
		return errors.Is(err, io.EOF)
	}
	lim := m.Unauthenticated()
	a := dial("127.0.0.1")
	defer a.Close()
	poll.Until(t, 5*time.Second, "the first connection to be counted", func() bool { return lim.Open() == 1 })
	if c := dial("127.0.0.1"); !closedAtOnce(c) {
		t.Error("a second connection from one source was not closed at once")
	} else {
		c.Close()
	}
	b := dial("127.0.0.2")
	defer b.Close()
	poll.Until(t, 5*time.Second, "the second source's connection to be counted", func() bool { return lim.Open() == 2 })
	if c := dial("127.0.0.3"); !closedAtOnce(c) {
		t.Error("a third connection was not closed at once")
	} else {
		c.Close()
	}
	if lim.RefusedBy(connlimit.ReasonSource) != 1 || lim.RefusedBy(connlimit.ReasonListener) != 1 || lim.Pending() != 2 {
		t.Errorf("refused %d per source, %d for the port; %d pending; want 1, 1, 2",
			lim.RefusedBy(connlimit.ReasonSource), lim.RefusedBy(connlimit.ReasonListener), lim.Pending())
	}
	a.Close()
	b.Close()
	// The strangers send nothing: the mux closes them at its first-byte
	// deadline, or at Close.
	m.Close()
	if lim.Open() != 0 {
		t.Errorf("%d connections counted after Close", lim.Open())
	}
}
