package raftlog

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/keel-dev/keel/internal/connlimit"
	"github.com/keel-dev/keel/internal/poll"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// listen starts a mux on a free loopback port and closes it at cleanup.
func listen(t testing.TB, addr string) *Mux {
	t.Helper()
	m, err := Listen(addr)
	if err != nil {
		t.Fatalf("Listen(%s): %v", addr, err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// serveHealth serves the gRPC health service on l until cleanup.
func serveHealth(t *testing.T, l net.Listener) {
	t.Helper()
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
}

// checkHealth makes one gRPC call to addr and expects SERVING.
func checkHealth(t *testing.T, addr string) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("health check through the mux: %v", err)
	}
	if resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health status = %v, want SERVING", resp.Status)
	}
}

// TestMux_SharesPortBetweenRaftAndGRPC checks both protocols on one port,
// with a silent client connected the whole time: it must not hold up routing.
func TestMux_SharesPortBetweenRaftAndGRPC(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	m := listen(t, "127.0.0.1:0")
	addr := m.Addr().String()

	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = silent.Close() })

	serveHealth(t, m.GRPC())
	checkHealth(t, addr)

	sl := newStreamLayer(m, "keel-1.example:9091", staticGuard(1, map[int32]string{1: "keel-1.example:9091", 2: addr}, nil))
	t.Cleanup(func() { _ = sl.Close() })
	if got := sl.Addr().String(); got != "keel-1.example:9091" {
		t.Errorf("stream layer Addr() = %q, want the advertised address", got)
	}

	accepted := make(chan net.Conn, 1)
	acceptErr := make(chan error, 1)
	go func() {
		c, err := sl.Accept()
		if err != nil {
			acceptErr <- err
			return
		}
		accepted <- c
	}()
	client, err := sl.Dial(raft.ServerAddress(addr), 5*time.Second)
	if err != nil {
		t.Fatalf("raft Dial: %v", err)
	}
	defer client.Close()
	var server net.Conn
	select {
	case server = <-accepted:
	case err := <-acceptErr:
		t.Fatalf("raft Accept: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("raft connection was not routed to the stream layer")
	}
	defer server.Close()

	// The marker must have been consumed: raft sees exactly what was sent.
	passes(t, client, server)
	buf := make([]byte, 4)

	// gRPC still works after the raft connection.
	checkHealth(t, addr)

	// Closing the stream layer closes the connections it handed out: the
	// peer sees the close and raft's reader sees a clean EOF.
	_ = sl.Close()
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := client.Read(buf); err == nil {
		t.Error("client conn still open after stream layer Close")
	}
	if _, err := server.Read(buf); !errors.Is(err, io.EOF) {
		t.Errorf("read on a conn closed by the layer = %v, want io.EOF", err)
	}
	if _, err := sl.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after stream layer Close = %v, want net.ErrClosed", err)
	}
	if _, err := sl.Dial(raft.ServerAddress(addr), time.Second); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Dial after stream layer Close = %v, want net.ErrClosed", err)
	}
}

// TestMux_CloseUnblocksAccept checks that Close wakes both child listeners
// and closes connections still waiting to be routed.
func TestMux_CloseUnblocksAccept(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	m := listen(t, "127.0.0.1:0")
	sl := newStreamLayer(m, m.Addr().String(), staticGuard(1, map[int32]string{1: m.Addr().String()}, nil))

	errs := make(chan error, 2)
	go func() { _, err := m.GRPC().Accept(); errs <- err }()
	go func() { _, err := sl.Accept(); errs <- err }()

	silent, err := net.Dial("tcp", m.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("Accept after Close = %v, want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Accept still blocked after Close")
		}
	}
	// The silent client was accepted but never routed; Close must have
	// closed it rather than leave its routing goroutine waiting 10s.
	_ = silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err == nil {
		t.Error("unrouted connection still open after Close")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Error("unrouted connection not closed by Close")
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	if _, err := m.GRPC().Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close = %v, want net.ErrClosed", err)
	}
}

// TestStreamLayer_CloseWaitsForHandlers: after Close, waitHandlers (and so
// Node.Close, before it closes the raft store) waits until raft's handler of
// every inbound connection has let go of it, since a heartbeat the handler
// was already passing to raft may write a term to the store.
func TestStreamLayer_CloseWaitsForHandlers(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	m := listen(t, "127.0.0.1:0")
	sl := newStreamLayer(m, m.Addr().String(), staticGuard(1, map[int32]string{1: m.Addr().String()}, nil))
	out, err := sl.Dial(raft.ServerAddress(m.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	in, err := sl.Accept() // the handler's connection: our own dial, routed back
	if err != nil {
		t.Fatal(err)
	}
	if err := sl.Close(); err != nil {
		t.Fatal(err)
	}
	if sl.waitHandlers(50 * time.Millisecond) {
		t.Fatal("waitHandlers returned while a handler still held its connection")
	}
	_ = in.Close() // the handler returns, closing its connection
	if !sl.waitHandlers(5 * time.Second) {
		t.Fatal("waitHandlers still waiting after the handler let go")
	}
	_ = out.Close()
}

// TestMux_GRPCListenerCloseKeepsMux checks that grpc.Server.Stop closing its
// listener does not take raft's side of the port down with it.
func TestMux_GRPCListenerCloseKeepsMux(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	m := listen(t, "127.0.0.1:0")
	if err := m.GRPC().Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GRPC().Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after GRPC().Close = %v, want net.ErrClosed", err)
	}
	// A gRPC-looking connection is now dropped rather than parked.
	c, err := net.Dial("tcp", m.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("PRI * HTTP/2.0\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("gRPC connection accepted after the gRPC listener closed")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Error("gRPC connection left open after the gRPC listener closed")
	}

	sl := newStreamLayer(m, m.Addr().String(), staticGuard(1, map[int32]string{1: m.Addr().String()}, nil))
	defer sl.Close()
	go func() {
		if c, err := sl.Accept(); err == nil {
			_ = c.Close()
		}
	}()
	conn, err := sl.Dial(raft.ServerAddress(m.Addr().String()), 5*time.Second)
	if err != nil {
		t.Fatalf("raft Dial after GRPC().Close: %v", err)
	}
	_ = conn.Close()
}

func TestListen_PortInUse(t *testing.T) {
	m := listen(t, "127.0.0.1:0")
	addr := m.Addr().String()
	m2, err := Listen(addr)
	if err == nil {
		_ = m2.Close()
		t.Fatalf("second Listen(%s) succeeded", addr)
	}
	if want := "listen " + addr + ": address already in use"; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("errors.Is(%v, EADDRINUSE) = false", err)
	}
}

func TestListen_BadAddress(t *testing.T) {
	_, err := Listen("127.0.0.1")
	if err == nil || !strings.HasPrefix(err.Error(), "listen 127.0.0.1: ") || strings.Count(err.Error(), "127.0.0.1") != 1 {
		t.Errorf("Listen(no port) error = %v, want one line naming the address once", err)
	}
}

// closedWithin reports whether c's peer closed it within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !isTimeout(err)
}

// TestMux_BoundsUnauthenticatedConnections: the port holds at most its
// bound of connections whose peer has not shown who it is; beyond it new
// ones are closed at once and counted. A raft peer whose first request got
// through no longer counts, and its pooled connection keeps working while
// strangers fill the port.
func TestMux_BoundsUnauthenticatedConnections(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	const bound = 3
	serverMux, err := listenLimited("127.0.0.1:0", connlimit.Limits{MaxUnauthenticated: bound})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = serverMux.Close() })
	serverMux.SetLogger(slog.New(slog.DiscardHandler))
	limit := serverMux.Unauthenticated()
	serverGuard := newPeerGuard(1, nil, slog.New(slog.DiscardHandler))
	serverLayer := newStreamLayer(serverMux, serverMux.Addr().String(), serverGuard)
	t.Cleanup(func() { _ = serverLayer.Close() })
	clientGuard := newPeerGuard(2, nil, slog.New(slog.DiscardHandler))
	clientLayer, clientAddr := guardedLayer(t, clientGuard)
	members := map[int32]string{1: serverMux.Addr().String(), 2: clientAddr}
	setMembers(serverGuard, members)
	setMembers(clientGuard, members)
	serverTrans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: serverLayer, MaxPool: 1, Timeout: 5 * time.Second})
	defer serverTrans.Close()
	clientTrans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: clientLayer, MaxPool: 1, Timeout: 5 * time.Second})
	defer clientTrans.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case rpc := <-serverTrans.Consumer():
				rpc.Respond(&raft.RequestVoteResponse{Granted: true}, nil)
			case <-done:
				return
			}
		}
	}()
	vote := func() error {
		var resp raft.RequestVoteResponse
		hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(ServerID(2)), Addr: []byte(clientAddr)}
		return clientTrans.RequestVote(ServerID(1), raft.ServerAddress(serverMux.Addr().String()), &raft.RequestVoteRequest{RPCHeader: hdr, Term: 1}, &resp)
	}

	if err := vote(); err != nil {
		t.Fatalf("a member's vote request: %v", err)
	}
	poll.Until(t, 5*time.Second, "the member's connection to stop counting", func() bool { return limit.Pending() == 0 })

	// Strangers: silent, the raft marker alone, half a TLS ClientHello.
	var strangers []net.Conn
	for _, first := range [][]byte{nil, {RaftMarker}, {0x16, 0x03, 0x01, 0x01}} {
		c, err := net.Dial("tcp", serverMux.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(first); err != nil {
			t.Fatal(err)
		}
		strangers = append(strangers, c)
	}
	poll.Until(t, 5*time.Second, "the strangers to fill the bound", func() bool { return limit.Pending() == bound })
	over, err := net.Dial("tcp", serverMux.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	if !closedWithin(over, 5*time.Second) {
		t.Fatal("a connection beyond the bound was not closed")
	}
	if limit.Refused() != 1 {
		t.Errorf("refused %d, want 1", limit.Refused())
	}
	// The member's pooled connection is not a stranger's.
	if err := vote(); err != nil {
		t.Fatalf("a member's vote request with the port full of strangers: %v", err)
	}

	// A stranger gone frees its slot for the next.
	strangers[0].Close()
	poll.Until(t, 5*time.Second, "a stranger's slot to be freed", func() bool { return limit.Pending() == bound-1 })
	next, err := net.Dial("tcp", serverMux.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	poll.Until(t, 5*time.Second, "the next connection to be admitted", func() bool { return limit.Pending() == bound })
	if limit.Refused() != 1 {
		t.Errorf("refused %d, want still 1", limit.Refused())
	}
}
