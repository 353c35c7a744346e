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

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/tlsauth"
)

// testCerts issues one Config per common name from a fresh CA.
func testCerts(t testing.TB, names ...string) map[string]*tlsauth.Config {
	t.Helper()
	ca, err := tlsauth.NewCA("keel raftlog test CA")
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]*tlsauth.Config, len(names))
	for _, n := range names {
		if out[n], err = ca.Config(n); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// logBuffer is a slog destination a test can search.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) contains(s string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Contains(b.buf.String(), s)
}

// TestCluster_TLS runs raft over mutual TLS: a quorum of two TLS nodes
// elects and commits, and a third voter that speaks plaintext is refused by
// both (the refusal is logged) and receives nothing.
func TestCluster_TLS(t *testing.T) {
	certs := testCerts(t, "controller-1", "controller-2", "controller-3")
	logs := &logBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	nodes := make([]*testNode, 3)
	var voters []Voter
	for i := range nodes {
		n := &testNode{id: int32(i + 1), dir: t.TempDir(), mux: listen(t, "127.0.0.1:0")}
		nodes[i] = n
		voters = append(voters, Voter{ID: n.id, Address: n.addr()})
	}
	for _, n := range nodes {
		openNode(t, n, voters, func() Config {
			cfg := Config{Timing: testTiming(), Logger: logger}
			if n.id != 3 {
				cfg.TLS = certs[fmt.Sprintf("controller-%d", n.id)]
			}
			return cfg
		})
	}
	tlsNodes := nodes[:2]
	apply(t, tlsNodes, "over-tls")
	waitForEntries(t, tlsNodes, []string{"over-tls"})
	poll.Until(t, waitTimeout, "a TLS node to log the plaintext node's refusal", func() bool {
		return logs.contains("refused a raft connection")
	})
	if got := nodes[2].sm.list(); len(got) != 0 {
		t.Errorf("the plaintext node applied %q from a TLS quorum", got)
	}
	if _, id := nodes[2].node.Raft.LeaderWithID(); id != "" {
		t.Errorf("the plaintext node follows leader %q", id)
	}
	for _, n := range nodes {
		n.close(t)
	}
}

// TestStreamLayer_TLS checks who a TLS stream layer lets through: a
// controller, and nobody else, and that a peer that never finishes its
// handshake does not hold up the next one.
func TestStreamLayer_TLS(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	certs := testCerts(t, "controller-1", "controller-2", "broker-2", "admin")
	other := testCerts(t, "controller-2") // the same name from another CA
	m := listen(t, "127.0.0.1:0")
	addr := raft.ServerAddress(m.Addr().String())
	logs := &logBuffer{}
	pm := listen(t, "127.0.0.1:0") // a plaintext node, dialled below
	members := map[int32]string{1: string(addr), 2: "127.0.0.1:1", 3: pm.Addr().String()}
	sl := newTLSStreamLayer(m, string(addr), certs["controller-1"], slog.New(slog.NewTextHandler(logs, nil)), staticGuard(1, members, nil))

	accepted := make(chan net.Conn, 8)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := sl.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()

	// A silent peer: the marker, then nothing. It must not stop the others.
	silent, err := net.Dial("tcp", string(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if _, err := silent.Write([]byte{RaftMarker}); err != nil {
		t.Fatal(err)
	}

	// Plaintext raft: marker, then raft's own bytes.
	plain, err := net.Dial("tcp", string(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Write([]byte{RaftMarker, 0, 1, 2, 3}); err != nil {
		t.Fatal(err)
	}

	// Certificates that are not a controller's from this CA. TLS 1.3
	// clients finish their handshake before the server has checked their
	// certificate, so the refusal shows on the server: nothing accepted.
	for _, c := range []*tlsauth.Config{certs["broker-2"], certs["admin"], other["controller-2"]} {
		bad := newTLSStreamLayer(listen(t, "127.0.0.1:0"), "127.0.0.1:1", c, slog.New(slog.DiscardHandler), staticGuard(2, members, nil))
		if conn, err := bad.Dial(addr, 2*time.Second); err == nil {
			_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := conn.Read(make([]byte, 1)); err == nil {
				t.Errorf("%s: read from a raft connection the server should have refused", c.Identity)
			}
		}
		_ = bad.Close()
	}

	good := newTLSStreamLayer(listen(t, "127.0.0.1:0"), "127.0.0.1:1", certs["controller-2"], slog.New(slog.DiscardHandler), staticGuard(2, members, nil))
	defer good.Close()
	client, err := good.Dial(addr, 2*time.Second)
	if err != nil {
		t.Fatalf("controller-2 Dial: %v", err)
	}
	defer client.Close()
	var server net.Conn
	select {
	case server = <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("controller-2's connection was not accepted while a silent peer was connected")
	}
	defer server.Close()
	if server.RemoteAddr().String() != client.LocalAddr().String() {
		t.Fatalf("accepted %s, want controller-2's connection from %s", server.RemoteAddr(), client.LocalAddr())
	}
	passes(t, client, server)
	buf := make([]byte, 4)
	select {
	case c := <-accepted:
		t.Errorf("accepted another connection, from %s", c.RemoteAddr())
	default:
	}
	poll.Until(t, waitTimeout, "the refusals to be logged", func() bool { return logs.contains("refused a raft connection") })

	// A TLS node dialling a plaintext one fails its handshake in time.
	plainLayer := newStreamLayer(pm, pm.Addr().String(), staticGuard(3, members, nil))
	go func() {
		if c, err := plainLayer.Accept(); err == nil {
			_, _ = io.Copy(io.Discard, c) // raft reading garbage, until closed
		}
	}()
	start := time.Now()
	if _, err := good.Dial(raft.ServerAddress(pm.Addr().String()), 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "TLS handshake") {
		t.Errorf("Dial of a plaintext node = %v, want a TLS handshake error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Dial of a plaintext node took %v", d)
	}
	_ = plainLayer.Close()

	// Closing the layer closes what it handed out; raft's reader sees a
	// clean EOF, as without TLS.
	_ = sl.Close()
	wg.Wait()
	if _, err := server.Read(buf); !errors.Is(err, io.EOF) {
		t.Errorf("read on a TLS conn closed by the layer = %v, want io.EOF", err)
	}
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := client.Read(buf); err == nil {
		t.Error("the peer's conn is still open after the layer closed")
	}
}

func TestOpen_TLSCertificateMustBeThisNodes(t *testing.T) {
	certs := testCerts(t, "controller-2", "broker-1")
	for _, name := range []string{"controller-2", "broker-1"} {
		_, _, err := startSingle(t, t.TempDir(), func(c *Config) { c.TLS = certs[name] })
		want := fmt.Sprintf("the certificate is for %s, not controller-1 (this node's --node-id)", name)
		if err == nil || err.Error() != want {
			t.Errorf("Open with %s's certificate: %v, want %q", name, err, want)
		}
	}
}

// TestStreamLayer_TLSMemberStopsCounting: a member's connection stops
// counting against the port's bound on strangers once its handshake has
// shown who it is, before it sends anything.
func TestStreamLayer_TLSMemberStopsCounting(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	certs := testCerts(t, "controller-1", "controller-2")
	m := listen(t, "127.0.0.1:0")
	addr := m.Addr().String()
	members := map[int32]string{1: addr, 2: "127.0.0.1:1"}
	sl := newTLSStreamLayer(m, addr, certs["controller-1"], slog.New(slog.DiscardHandler), staticGuard(1, members, nil))
	defer sl.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := sl.Accept(); err == nil {
			accepted <- c
		}
	}()
	peer := newTLSStreamLayer(listen(t, "127.0.0.1:0"), "127.0.0.1:1", certs["controller-2"], slog.New(slog.DiscardHandler), staticGuard(2, members, nil))
	defer peer.Close()
	client, err := peer.Dial(raft.ServerAddress(addr), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	select {
	case server := <-accepted:
		defer server.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("controller-2's connection was not accepted")
	}
	// Well within the handshake deadline and the limiter's hold time.
	poll.Until(t, time.Second, "controller-2's connection to stop counting", func() bool { return m.Unauthenticated().Pending() == 0 })
}
