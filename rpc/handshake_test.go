package rpc

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/keel-dev/keel/internal/connlimit"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/tlsauth"
)

// serveLimited serves the fake controller with ServerOptions(opts) on a
// loopback listener bounded to max unauthenticated connections.
func serveLimited(t *testing.T, max int, opts ...Option) (string, *connlimit.Limiter) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := connlimit.New(max, time.Hour, "test")
	lim.SetLogger(slog.New(slog.DiscardHandler))
	g := grpc.NewServer(ServerOptions(opts...)...)
	keelpb.RegisterControllerServiceServer(g, authFake{})
	go g.Serve(lim.Listener(lis))
	t.Cleanup(g.Stop)
	return lis.Addr().String(), lim
}

// TestServerOptions_HandshakeBoundedAndCounted: a client through its
// handshake stops counting against the listener's bound on strangers, and
// keeps working while they fill it; a connection stuck halfway through a
// TLS ClientHello, or the HTTP/2 preface in plaintext, counts until
// HandshakeTimeout closes it.
func TestServerOptions_HandshakeBoundedAndCounted(t *testing.T) {
	ca, err := tlsauth.NewCA("keel rpc test CA")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Config("controller-1")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := ca.Config("admin")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		server []Option
		client []Option
		half   []byte // the start of a handshake
	}{
		{name: "TLS", server: []Option{WithTLS(server)}, client: []Option{WithTLS(admin)},
			half: []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}}, // a ClientHello's first bytes
		{name: "plaintext", half: []byte(http2Preface[:10])},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr, lim := serveLimited(t, 2, tt.server...)
			c, err := NewClient([]string{addr}, tt.client...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cl, err := c.Controller(addr)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := cl.DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{}); err != nil {
				t.Fatal(err)
			}
			poll.Until(t, 5*time.Second, "the client's connection to stop counting", func() bool { return lim.Pending() == 0 })

			// Two strangers fill the bound; a third is closed at once.
			var halves []net.Conn
			start := time.Now()
			for range 2 {
				h, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer h.Close()
				if _, err := h.Write(tt.half); err != nil {
					t.Fatal(err)
				}
				halves = append(halves, h)
			}
			poll.Until(t, 5*time.Second, "the strangers to fill the bound", func() bool { return lim.Pending() == 2 })
			over, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer over.Close()
			_ = over.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := over.Read(make([]byte, 1)); err == nil || isTimeoutErr(err) {
				t.Fatalf("a connection beyond the bound: read %v, want it closed", err)
			}
			if _, err := cl.DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{}); err != nil {
				t.Fatalf("the client, with strangers filling the bound: %v", err)
			}

			// The handshake deadline closes the strangers.
			for _, h := range halves {
				_ = h.SetReadDeadline(time.Now().Add(HandshakeTimeout + 5*time.Second))
				if _, err := h.Read(make([]byte, 1)); err == nil || isTimeoutErr(err) {
					t.Fatalf("a half handshake: read %v after %v, want it closed", err, time.Since(start))
				}
			}
			if d := time.Since(start); d > HandshakeTimeout+3*time.Second {
				t.Errorf("the half handshakes were closed after %v; want about %v", d, HandshakeTimeout)
			}
			poll.Until(t, 5*time.Second, "the strangers' slots to be freed", func() bool { return lim.Pending() == 0 })
		})
	}
}

func isTimeoutErr(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
