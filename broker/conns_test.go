package broker

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/connlimit"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/rpc"
)

// TestAgent_PortBoundsItsConnections: the broker's gRPC port closes a
// connection over its bound per source address, or over its bound in
// all, as soon as it is accepted, and counts it; once the strangers are
// gone a peer's call is served.
func TestAgent_PortBoundsItsConnections(t *testing.T) {
	c := newFakeCluster(t, 1)
	a := startAgent(t, c, func(cfg *Config) { cfg.Conns = connlimit.Limits{MaxConns: 3, MaxPerSource: 2} })
	dial := func(src string) net.Conn {
		t.Helper()
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		conn, err := d.Dial("tcp", a.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	refusedAtOnce := func(conn net.Conn) bool {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := conn.Read(make([]byte, 1))
		return errors.Is(err, io.EOF)
	}
	var held []net.Conn
	for _, step := range []struct {
		src     string
		refused bool
		reason  string
	}{
		{src: "127.0.0.1"}, {src: "127.0.0.1"},
		{src: "127.0.0.1", refused: true, reason: connlimit.ReasonSource},
		{src: "127.0.0.2"},
		{src: "127.0.0.3", refused: true, reason: connlimit.ReasonListener},
	} {
		conn := dial(step.src)
		if step.refused {
			if !refusedAtOnce(conn) {
				t.Fatalf("a connection from %s over the bound (%s) was not closed at once", step.src, step.reason)
			}
			continue
		}
		held = append(held, conn)
		poll.Until(t, waitTimeout, "the connection to be counted", func() bool { return a.unauth.Open() == len(held) })
	}
	if a.unauth.RefusedBy(connlimit.ReasonSource) != 1 || a.unauth.RefusedBy(connlimit.ReasonListener) != 1 {
		t.Errorf("refused %d per source, %d for the listener; want 1 and 1",
			a.unauth.RefusedBy(connlimit.ReasonSource), a.unauth.RefusedBy(connlimit.ReasonListener))
	}
	for _, conn := range held {
		conn.Close()
	}
	poll.Until(t, waitTimeout, "the strangers' connections to be closed", func() bool { return a.unauth.Open() == 0 })
	bc, err := rpc.DialBroker(a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := bc.Inspect(ctx); err != nil {
		t.Fatalf("Inspect once the strangers are gone: %v", err)
	}
}
