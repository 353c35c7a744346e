package raftlog

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
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

// encodeRequest is one raft request as NetworkTransport sends it: its type
// byte, then the request in msgpack.
func encodeRequest(typ uint8, req any) []byte {
	var buf bytes.Buffer
	buf.WriteByte(typ)
	if err := codec.NewEncoder(&buf, &codec.MsgpackHandle{}).Encode(req); err != nil {
		panic(err) // raft's own request types always encode
	}
	return buf.Bytes()
}

// writeRequest sends one raft request (encodeRequest) on w.
func writeRequest(t testing.TB, w io.Writer, typ uint8, req any) {
	t.Helper()
	if _, err := w.Write(encodeRequest(typ, req)); err != nil {
		t.Fatalf("write a raft request: %v", err)
	}
}

// readVote reads one RequestVote as raft's handler would.
func readVote(r io.Reader) (*raft.RequestVoteRequest, error) {
	br := bufio.NewReader(r)
	typ, err := br.ReadByte()
	if err != nil {
		return nil, err
	}
	if typ != rpcRequestVote {
		return nil, io.ErrUnexpectedEOF
	}
	var req raft.RequestVoteRequest
	return &req, codec.NewDecoder(br, &codec.MsgpackHandle{}).Decode(&req)
}

func vote(from int32, term uint64) *raft.RequestVoteRequest {
	return &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(ServerID(from))}, Term: term}
}

// guardedPipe is an inbound connection through g with certificate certID,
// and the peer's end of it.
func guardedPipe(g *peerGuard, certID int32) (server net.Conn, peer net.Conn) {
	a, b := net.Pipe()
	return g.guard(a, certID), b
}

// TestPeerGuard_Requests: a request reaches raft only if its header names
// a member and, on a connection with a certificate, that certificate's
// node; the first refusal closes the connection.
func TestPeerGuard_Requests(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	members := map[int32]string{1: "a:1", 2: "b:1", 3: "c:1"}
	tests := []struct {
		name   string
		certID int32 // 0: plaintext
		from   int32
		pass   bool
	}{
		{name: "a member as itself", certID: 2, from: 2, pass: true},
		{name: "a member naming another member", certID: 2, from: 1},
		{name: "a member naming a stranger", certID: 2, from: 9},
		{name: "plaintext naming a member", from: 3, pass: true},
		{name: "plaintext naming a stranger", from: 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &logBuffer{}
			g := staticGuard(1, members, slog.New(slog.NewTextHandler(logs, nil)))
			server, peer := guardedPipe(g, tt.certID)
			defer server.Close()
			defer peer.Close()
			go func() { _, _ = peer.Write(encodeRequest(rpcRequestVote, vote(tt.from, 7))) }()
			got, err := readVote(server)
			if !tt.pass {
				if err == nil {
					t.Fatalf("raft read a request naming node %d from %d", tt.from, tt.certID)
				}
				if !logs.contains("refused raft traffic") {
					t.Fatal("the refusal was not logged")
				}
				// The connection is closed: the peer's next write fails.
				_ = peer.SetWriteDeadline(time.Now().Add(5 * time.Second))
				if _, err := peer.Write([]byte{0}); err == nil {
					t.Fatal("the refused connection is still open")
				}
				return
			}
			if err != nil || string(got.RPCHeader.ID) != string(ServerID(tt.from)) || got.Term != 7 {
				t.Fatalf("raft read %+v, %v; want the vote of node %d", got, err, tt.from)
			}
		})
	}
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

// TestPeerGuard_SilentConnectionClosed: a raft connection that never
// delivers a whole request is closed after firstRequestTimeout.
func TestPeerGuard_SilentConnectionClosed(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	peer, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	conn, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	g := staticGuard(1, map[int32]string{1: "a:1"}, nil)
	g.firstRequest = 50 * time.Millisecond
	server := g.guard(conn, 0)
	defer server.Close()
	_, _ = peer.Write([]byte{rpcRequestVote, 0x81}) // half a request
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := peer.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("the silent connection was not closed: %v", err)
	}
	if _, err := server.Read(make([]byte, 1)); err == nil {
		t.Fatal("raft read from a connection that never sent a request")
	}
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

// TestGuardedConn_PassesEveryRequestType: raft's own transport, through
// the guard, delivers each kind of request whole (an install with its
// snapshot data) and gets raft's answer back; a request that names a node
// outside the configuration never reaches raft.
func TestGuardedConn_PassesEveryRequestType(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	// The guards learn the configuration once the addresses are known.
	serverGuard := newPeerGuard(1, nil, slog.New(slog.DiscardHandler))
	clientGuard := newPeerGuard(2, nil, slog.New(slog.DiscardHandler))
	serverLayer, serverAddr := guardedLayer(t, serverGuard)
	clientLayer, clientAddr := guardedLayer(t, clientGuard)
	members := map[int32]string{1: serverAddr, 2: clientAddr}
	setMembers(serverGuard, members)
	setMembers(clientGuard, members)
	serverTrans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: serverLayer, MaxPool: 2, Timeout: 5 * time.Second})
	defer serverTrans.Close()
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
	if err := clientTrans.AppendEntries(target, addr, &raft.AppendEntriesRequest{RPCHeader: hdr(2), Term: 3,
		Entries: []*raft.Log{{Index: 1, Term: 3, Type: raft.LogCommand, Data: []byte("entry")}}}, &ae); err != nil || !ae.Success {
		t.Fatalf("AppendEntries = %+v, %v", ae, err)
	}
	var rv raft.RequestVoteResponse
	if err := clientTrans.RequestVote(target, addr, &raft.RequestVoteRequest{RPCHeader: hdr(2), Term: 4}, &rv); err != nil || !rv.Granted {
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
	if err := clientTrans.InstallSnapshot(target, addr, &raft.InstallSnapshotRequest{RPCHeader: hdr(2), Term: 6, Size: int64(len(snapshot))},
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

	// A request naming a node outside the configuration is refused; what
	// raft received stays as it was.
	got.Delete("vote")
	err := clientTrans.RequestVote(target, addr, &raft.RequestVoteRequest{RPCHeader: hdr(9), Term: 40}, &rv)
	if err == nil {
		t.Fatal("a vote named for node 9 was answered")
	}
	if _, ok := got.Load("vote"); ok {
		t.Fatal("raft received a vote named for node 9")
	}
}
