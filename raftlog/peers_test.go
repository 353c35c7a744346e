package raftlog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"
)

// staticGuard is a peer guard over a fixed configuration: members by node
// id, at their addresses.
func staticGuard(self int32, members map[int32]string, log *slog.Logger) *peerGuard {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := newPeerGuard(self, nil, log)
	setMembers(g, members)
	return g
}

// setMembers gives g its configuration: members by node id, at their
// addresses.
func setMembers(g *peerGuard, members map[int32]string) {
	var conf raft.Configuration
	for id, addr := range members {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: ServerID(id), Address: raft.ServerAddress(addr)})
	}
	g.setConfiguration(func() raft.Configuration { return conf })
}

// passes writes a few bytes on client and checks that server, an accepted
// raft connection, reads exactly them: raft sees what its peer sent.
func passes(t testing.TB, client, server net.Conn) {
	t.Helper()
	want := []byte{0, 1, 2, 3, 0x81}
	if _, err := client.Write(want); err != nil {
		t.Fatalf("write on the raft connection: %v", err)
	}
	_ = server.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(server, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("raft read %v, %v; want %v", got, err, want)
	}
	_ = server.SetReadDeadline(time.Time{})
}

// TestPeerGuard_Admit: a connection's certificate must name a member; a
// node with no configuration yet (waiting to be added with --join), or
// not in the one it holds (a joiner catching up), takes any controller.
func TestPeerGuard_Admit(t *testing.T) {
	g := staticGuard(1, map[int32]string{1: "a:1", 2: "b:1"}, nil)
	if err := g.admit(t.Context(), 2); err != nil {
		t.Errorf("admit(2) = %v, want nil", err)
	}
	if err := g.admit(t.Context(), 9); err == nil || !strings.Contains(err.Error(), "controller-9 is not in the quorum's configuration (members: 1, 2)") {
		t.Errorf("admit(9) = %v", err)
	}
	empty := staticGuard(1, nil, nil)
	if err := empty.admit(t.Context(), 9); err != nil {
		t.Errorf("admit(9) with no configuration = %v, want nil", err)
	}
	// A joiner replaying the log from its start holds the first
	// configuration, which may not name a leader added since.
	joiner := staticGuard(5, map[int32]string{1: "a:1", 2: "b:1", 3: "c:1"}, nil)
	if err := joiner.admit(t.Context(), 4); err != nil {
		t.Errorf("admit(4) on node 5, not in the configuration it holds = %v, want nil", err)
	}
}

// TestPeerGuard_DialTarget: raft may dial members only, at their
// configured address or their --raft-dial one.
func TestPeerGuard_DialTarget(t *testing.T) {
	g := staticGuard(1, map[int32]string{1: "a:1", 2: "b:1", 3: "c:1"}, nil)
	g.dialAddrs = map[int32]string{3: "proxy:3"}
	for _, tt := range []struct {
		addr string
		want int32
	}{{"b:1", 2}, {"proxy:3", 3}, {"c:1", 0}, {"x:1", 0}} {
		id, err := g.dialTarget(t.Context(), raft.ServerAddress(tt.addr))
		if id != tt.want || (tt.want == 0) != (err != nil) {
			t.Errorf("dialTarget(%s) = %d, %v; want %d", tt.addr, id, err, tt.want)
		}
	}
}

// TestStreamLayer_SilentConnectionClosed: an inbound raft connection that
// sends nothing after the raft marker is closed after firstRequestTimeout;
// one that spoke at once is not, however long it then stays quiet.
func TestStreamLayer_SilentConnectionClosed(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	logs := &logBuffer{}
	g := staticGuard(1, nil, slog.New(slog.NewTextHandler(logs, nil)))
	g.firstRequest = 100 * time.Millisecond
	sl, addr := guardedLayer(t, g)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := c.Write([]byte{RaftMarker}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	accept := func() net.Conn {
		c, err := sl.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}

	silent := dial()
	server := accept()
	start := time.Now()
	if _, err := server.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("raft's read of a silent connection = %v, want io.EOF", err)
	}
	if d := time.Since(start); d < g.firstRequest/2 {
		t.Fatalf("the silent connection was closed after %v, before its %v", d, g.firstRequest)
	}
	_ = silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("the silent connection was not closed: %v", err)
	}
	if !logs.contains("no request within 100ms") {
		t.Error("the silent connection's close was not logged")
	}

	talker := dial()
	server = accept()
	passes(t, talker, server)
	// Quiet for several times the first request's bound (a pooled
	// connection between calls), then a call: still open.
	time.Sleep(4 * g.firstRequest)
	passes(t, talker, server)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// guardedLayer is a plaintext stream layer on its own port, with guard g.
func guardedLayer(t *testing.T, g *peerGuard) (*streamLayer, string) {
	t.Helper()
	m := listen(t, "127.0.0.1:0")
	sl := newStreamLayer(m, m.Addr().String(), g)
	t.Cleanup(func() { _ = sl.Close() })
	return sl, m.Addr().String()
}

// TestStreamLayer_PassesEveryRequestType: raft's own transport, through
// the stream layer, delivers each kind of request whole (an install with
// its snapshot data) and gets raft's answer back; and the watched
// transport marks what only a leader sends (heartbeats, appends,
// installs) as heard from the node it names, and nothing else.
func TestStreamLayer_PassesEveryRequestType(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	// The guards learn the configuration once the addresses are known.
	serverGuard := newPeerGuard(1, nil, slog.New(slog.DiscardHandler))
	clientGuard := newPeerGuard(2, nil, slog.New(slog.DiscardHandler))
	serverLayer, serverAddr := guardedLayer(t, serverGuard)
	clientLayer, clientAddr := guardedLayer(t, clientGuard)
	members := map[int32]string{1: serverAddr, 2: clientAddr}
	setMembers(serverGuard, members)
	setMembers(clientGuard, members)
	heard := newHeardFrom()
	serverTrans := newWatchedTransport(raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: serverLayer, MaxPool: 2, Timeout: 5 * time.Second}),
		&commitWatch{}, heard)
	defer serverTrans.Close()
	defer serverTrans.stop()
	serverTrans.SetHeartbeatHandler(func(rpc raft.RPC) { rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil) })
	clientTrans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: clientLayer, MaxPool: 2, Timeout: 5 * time.Second})
	defer clientTrans.Close()

	var got sync.Map // request type name → the request raft received
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			var rpc raft.RPC
			select {
			case rpc = <-serverTrans.Consumer():
			case <-done:
				return
			}
			var resp any
			switch req := rpc.Command.(type) {
			case *raft.AppendEntriesRequest:
				got.Store("append", req)
				resp = &raft.AppendEntriesResponse{Success: true}
			case *raft.RequestVoteRequest:
				got.Store("vote", req)
				resp = &raft.RequestVoteResponse{Granted: true}
			case *raft.RequestPreVoteRequest:
				got.Store("prevote", req)
				resp = &raft.RequestPreVoteResponse{Granted: true}
			case *raft.TimeoutNowRequest:
				got.Store("timeoutnow", req)
				resp = &raft.TimeoutNowResponse{}
			case *raft.InstallSnapshotRequest:
				data, _ := io.ReadAll(rpc.Reader)
				got.Store("install", string(data))
				resp = &raft.InstallSnapshotResponse{Success: true}
			}
			rpc.Respond(resp, nil)
		}
	}()

	hdr := func(id int32) raft.RPCHeader {
		return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(ServerID(id)), Addr: []byte(clientAddr)}
	}
	target, addr := ServerID(1), raft.ServerAddress(serverAddr)
	var ae raft.AppendEntriesResponse
	if err := clientTrans.AppendEntries(target, addr, &raft.AppendEntriesRequest{RPCHeader: hdr(4), Term: 3}, &ae); err != nil || !ae.Success {
		t.Fatalf("a heartbeat = %+v, %v", ae, err)
	}
	if heard.last(4).IsZero() {
		t.Error("a heartbeat from node 4 was not marked as heard")
	}
	if err := clientTrans.AppendEntries(target, addr, &raft.AppendEntriesRequest{RPCHeader: hdr(2), Term: 3,
		Entries: []*raft.Log{{Index: 1, Term: 3, Type: raft.LogCommand, Data: []byte("entry")}}}, &ae); err != nil || !ae.Success {
		t.Fatalf("AppendEntries = %+v, %v", ae, err)
	}
	if heard.last(2).IsZero() {
		t.Error("an AppendEntries from node 2 was not marked as heard")
	}
	var rv raft.RequestVoteResponse
	if err := clientTrans.RequestVote(target, addr, &raft.RequestVoteRequest{RPCHeader: hdr(3), Term: 4}, &rv); err != nil || !rv.Granted {
		t.Fatalf("RequestVote = %+v, %v", rv, err)
	}
	var pv raft.RequestPreVoteResponse
	if err := clientTrans.RequestPreVote(target, addr, &raft.RequestPreVoteRequest{RPCHeader: hdr(2), Term: 5}, &pv); err != nil || !pv.Granted {
		t.Fatalf("RequestPreVote = %+v, %v", pv, err)
	}
	var tn raft.TimeoutNowResponse
	if err := clientTrans.TimeoutNow(target, addr, &raft.TimeoutNowRequest{RPCHeader: hdr(2)}, &tn); err != nil {
		t.Fatalf("TimeoutNow: %v", err)
	}
	snapshot := strings.Repeat("snapshot data ", 10_000)
	var is raft.InstallSnapshotResponse
	if err := clientTrans.InstallSnapshot(target, addr, &raft.InstallSnapshotRequest{RPCHeader: hdr(5), Term: 6, Size: int64(len(snapshot))},
		&is, strings.NewReader(snapshot)); err != nil || !is.Success {
		t.Fatalf("InstallSnapshot = %+v, %v", is, err)
	}
	for _, k := range []string{"append", "vote", "prevote", "timeoutnow", "install"} {
		if _, ok := got.Load(k); !ok {
			t.Errorf("raft received no %s request", k)
		}
	}
	if v, _ := got.Load("append"); v == nil || string(v.(*raft.AppendEntriesRequest).Entries[0].Data) != "entry" {
		t.Errorf("the append arrived as %+v", v)
	}
	if v, _ := got.Load("install"); v != snapshot {
		t.Errorf("the snapshot data arrived changed (%d bytes)", len(v.(string)))
	}
	if !heard.last(3).IsZero() {
		t.Error("a vote request from node 3 was marked as heard from a leader")
	}
	if heard.last(5).IsZero() {
		t.Error("a snapshot install from node 5 was not marked as heard")
	}
}

// TestStreamLayer_RemovedMemberCut: with TLS a certificate is checked once,
// at the handshake; a connection a voter opened while it was a member is
// closed once the configuration no longer holds it, and another member's
// stays open.
func TestStreamLayer_RemovedMemberCut(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	certs := testCerts(t, "controller-1", "controller-2", "controller-3")
	m := listen(t, "127.0.0.1:0")
	addr := m.Addr().String()
	var mu sync.Mutex
	members := map[int32]string{1: addr, 2: "127.0.0.1:1", 3: "127.0.0.1:2"}
	g := newPeerGuard(1, nil, slog.New(slog.DiscardHandler))
	g.setConfiguration(func() raft.Configuration {
		mu.Lock()
		defer mu.Unlock()
		var conf raft.Configuration
		for id, a := range members {
			conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: ServerID(id), Address: raft.ServerAddress(a)})
		}
		return conf
	})
	sl := newTLSStreamLayer(m, addr, certs["controller-1"], slog.New(slog.DiscardHandler), g)
	defer sl.Close()
	dial := func(id int32) (client, server net.Conn) {
		t.Helper()
		peer := newTLSStreamLayer(listen(t, "127.0.0.1:0"), members[id], certs[fmt.Sprintf("controller-%d", id)], slog.New(slog.DiscardHandler),
			staticGuard(id, map[int32]string{1: addr}, nil))
		t.Cleanup(func() { _ = peer.Close() })
		client, err := peer.Dial(raft.ServerAddress(addr), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		server, err = sl.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = server.Close() })
		passes(t, client, server)
		return client, server
	}
	removed, _ := dial(2)
	stays, staysServer := dial(3)

	mu.Lock()
	delete(members, 2)
	mu.Unlock()
	_ = removed.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := removed.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("controller-2's connection is still open after its removal: %v", err)
	}
	passes(t, stays, staysServer)
}

// TestStreamLayer_ConnEnded: the guard is told of an inbound connection
// that carried requests and that its peer ended, with the controller its
// certificate names (0 in plaintext); not of one that carried nothing, nor
// of one this node closed.
func TestStreamLayer_ConnEnded(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	certs := testCerts(t, "controller-1", "controller-2")
	for _, tls := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", tls), func(t *testing.T) {
			var (
				mu    sync.Mutex
				ended []int32
			)
			g := newPeerGuard(1, nil, slog.New(slog.DiscardHandler))
			g.connEnded = func(peer int32) {
				mu.Lock()
				defer mu.Unlock()
				ended = append(ended, peer)
			}
			m := listen(t, "127.0.0.1:0")
			addr := m.Addr().String()
			members := map[int32]string{1: addr, 2: "127.0.0.1:1"}
			setMembers(g, members)
			peerGuard := staticGuard(2, members, nil)
			var sl, peer *streamLayer
			if tls {
				sl = newTLSStreamLayer(m, addr, certs["controller-1"], slog.New(slog.DiscardHandler), g)
				peer = newTLSStreamLayer(listen(t, "127.0.0.1:0"), "127.0.0.1:1", certs["controller-2"], slog.New(slog.DiscardHandler), peerGuard)
			} else {
				sl = newStreamLayer(m, addr, g)
				peer = newStreamLayer(listen(t, "127.0.0.1:0"), "127.0.0.1:1", peerGuard)
			}
			defer sl.Close()
			defer peer.Close()
			dial := func() (net.Conn, net.Conn) {
				client, err := peer.Dial(raft.ServerAddress(addr), 2*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				server, err := sl.Accept()
				if err != nil {
					t.Fatal(err)
				}
				return client, server
			}
			// drain is raft's handler: it reads until the connection fails.
			drain := func(server net.Conn) chan struct{} {
				done := make(chan struct{})
				go func() {
					defer close(done)
					_, _ = io.Copy(io.Discard, server)
					_ = server.Close()
				}()
				return done
			}
			want := int32(0)
			if tls {
				want = 2
			}

			// The peer ends a connection that carried requests.
			client, server := dial()
			done := drain(server)
			if _, err := client.Write([]byte{0, 1, 2}); err != nil {
				t.Fatal(err)
			}
			_ = client.Close() // after the requests, in TCP's order
			<-done
			// The peer ends a connection that carried nothing.
			client, server = dial()
			done = drain(server)
			_ = client.Close()
			<-done
			// This node closes a connection that carried requests.
			client, server = dial()
			passes(t, client, server)
			done = drain(server)
			_ = sl.Close()
			<-done
			_ = client.Close()

			mu.Lock()
			defer mu.Unlock()
			if len(ended) != 1 || ended[0] != want {
				t.Errorf("connEnded was told of %v, want [%d]", ended, want)
			}
		})
	}
}
