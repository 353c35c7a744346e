package raftlog

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/keel-dev/keel/internal/connlimit"
)

// RaftMarker is the first byte raft connections send; gRPC connections start
// with the HTTP/2 preface ('P') or a TLS record (0x16), so one byte tells
// them apart without a handshake of our own.
const RaftMarker byte = 0x01

const (
	// firstByteTimeout bounds how long a connection may stay silent before
	// the mux gives up on routing it. Every client of the port speaks
	// first, at once (a TLS ClientHello, the HTTP/2 preface, the raft
	// marker): a silent connection is a stranger's.
	firstByteTimeout = 5 * time.Second
	// handoffTimeout bounds how long a routed connection waits for someone to
	// accept it (a gRPC server not yet serving, a raft node not yet open)
	// before it is dropped; the peer will redial.
	handoffTimeout = 10 * time.Second

	// maxUnauthenticated bounds the connections the port holds whose peer
	// has not yet authenticated: accepted and not yet routed, or routed and
	// not through their TLS handshake (raft's tlsHandshakeTimeout, the
	// connection timeout of rpc.ServerOptions) or, in plaintext raft, their
	// first request (firstRequestTimeout). Beyond it new connections are closed at once:
	// a flood of strangers costs at most this many goroutines, descriptors
	// and buffers, and never the connections of peers already in. Peers
	// that dial during a flood are refused and redial.
	maxUnauthenticated = 1024
	// unauthenticatedHold is the longest one connection counts against
	// maxUnauthenticated: longer than the longest way through the port
	// (first byte, handoff, then the slower of a handshake and a first
	// request), so it only matters if a path forgot to say its peer
	// authenticated.
	unauthenticatedHold = firstByteTimeout + handoffTimeout + firstRequestTimeout + 5*time.Second
)

// Mux splits one TCP listener into raft and gRPC connections by their first
// byte, so that a controller needs one address for both.
type Mux struct {
	ln     net.Listener
	raftCh chan net.Conn // unbuffered: a send is a completed handoff
	grpc   *muxListener
	done   chan struct{} // closed by Close
	// limit counts every accepted connection until its peer authenticates
	// (connlimit.Authenticated: the stream layer for raft, rpc's server
	// credentials for gRPC) or it closes.
	limit *connlimit.Limiter

	mu      sync.Mutex
	closed  bool
	pending map[net.Conn]struct{} // accepted, first byte not yet read

	wg        sync.WaitGroup // the accept loop and every routing goroutine
	closeOnce sync.Once
	closeErr  error
}

// Listen binds addr and starts accepting. A port already in use fails with
// "listen ADDR: address already in use", which errors.Is matches against
// syscall.EADDRINUSE.
func Listen(addr string) (*Mux, error) {
	return ListenLimits(addr, connlimit.Limits{})
}

// ListenLimits is Listen with bounds on the port's connections (from
// accept, before TLS): lim's MaxUnauthenticated, if 0, is
// maxUnauthenticated; its other bounds, if 0, bound nothing.
func ListenLimits(addr string, lim connlimit.Limits) (*Mux, error) {
	if lim.MaxUnauthenticated == 0 {
		lim.MaxUnauthenticated = maxUnauthenticated
	}
	return listenLimited(addr, lim)
}

// listenLimited is Listen with bounds of its own (tests make them small).
func listenLimited(addr string, lim connlimit.Limits) (*Mux, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, listenCause(err))
	}
	m := &Mux{
		ln:      ln,
		raftCh:  make(chan net.Conn),
		done:    make(chan struct{}),
		limit:   connlimit.NewLimits(lim, unauthenticatedHold, ln.Addr().String()),
		pending: make(map[net.Conn]struct{}),
	}
	m.grpc = &muxListener{mux: m, ch: make(chan net.Conn), done: make(chan struct{})}
	m.wg.Add(1)
	go m.acceptLoop()
	return m, nil
}

// listenCause strips net's "listen tcp ADDR: bind:" wrapping, which would
// repeat the address the caller is about to name.
func listenCause(err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return syscall.EADDRINUSE
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		var ae *net.AddrError
		if errors.As(oe.Err, &ae) {
			return errors.New(ae.Err)
		}
		return oe.Err
	}
	return err
}

// Addr returns the bound address (with the real port when addr had port 0).
func (m *Mux) Addr() net.Addr { return m.ln.Addr() }

// SetLogger makes the mux log its refusals to log (slog.Default until then).
func (m *Mux) SetLogger(log *slog.Logger) { m.limit.SetLogger(log) }

// Unauthenticated is the limiter of the port's connections whose peer has
// not yet authenticated: its metrics are the node's.
func (m *Mux) Unauthenticated() *connlimit.Limiter { return m.limit }

// GRPC returns the listener that receives every non-raft connection, with its
// first byte replayed. Closing it makes the mux drop later gRPC connections;
// it does not close the mux.
func (m *Mux) GRPC() net.Listener { return m.grpc }

// Close stops accepting, closes connections that have not been routed yet,
// and closes both child listeners: their Accept returns net.ErrClosed. It
// returns once every goroutine the mux started has exited. Connections
// already handed to raft or gRPC belong to them and stay open. Close is
// idempotent.
func (m *Mux) Close() error {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.closed = true
		for c := range m.pending {
			_ = c.Close()
		}
		clear(m.pending)
		m.mu.Unlock()
		close(m.done)
		m.closeErr = m.ln.Close()
		m.wg.Wait()
	})
	return m.closeErr
}

func (m *Mux) isClosed() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

func (m *Mux) acceptLoop() {
	defer m.wg.Done()
	var backoff time.Duration
	for {
		conn, err := m.ln.Accept()
		if err != nil {
			if m.isClosed() || errors.Is(err, net.ErrClosed) {
				return
			}
			// Anything else (EMFILE, ECONNABORTED) is usually transient: back
			// off as net/http does rather than let one error kill the port.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-m.done:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		backoff = 0
		conn, ok := m.limit.Admit(conn)
		if !ok {
			continue // closed, counted and logged by the limiter
		}
		// Reading the first byte in the accept loop would let one silent
		// client stall every other connection, so each gets its own goroutine.
		m.wg.Add(1)
		go m.route(conn)
	}
}

// route reads conn's first byte and hands conn to raft or gRPC.
func (m *Mux) route(conn net.Conn) {
	defer m.wg.Done()
	if !m.track(conn) {
		_ = conn.Close()
		return
	}
	_ = conn.SetReadDeadline(time.Now().Add(firstByteTimeout))
	var first [1]byte
	_, err := io.ReadFull(conn, first[:])
	if !m.untrack(conn) {
		return // Close has closed it
	}
	if err != nil {
		_ = conn.Close()
		return
	}
	_ = conn.SetReadDeadline(time.Time{})

	if first[0] == RaftMarker {
		// The marker is ours, not raft's: raft reads from the next byte.
		m.handoff(conn, m.raftCh, nil)
		return
	}
	m.handoff(&replayConn{Conn: conn, first: first[:]}, m.grpc.ch, m.grpc.done)
}

func (m *Mux) track(conn net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.pending[conn] = struct{}{}
	return true
}

// untrack reports whether conn is still open, i.e. Close has not taken it.
func (m *Mux) untrack(conn net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	delete(m.pending, conn)
	return true
}

// handoff gives conn to whoever receives on ch, or closes it if the mux or
// the receiving listener (childDone, may be nil) closes, or nobody takes it
// within handoffTimeout.
func (m *Mux) handoff(conn net.Conn, ch chan<- net.Conn, childDone <-chan struct{}) {
	t := time.NewTimer(handoffTimeout)
	defer t.Stop()
	select {
	case ch <- conn:
	case <-childDone:
		_ = conn.Close()
	case <-m.done:
		_ = conn.Close()
	case <-t.C:
		_ = conn.Close()
	}
}

// muxListener is the gRPC side of the mux.
type muxListener struct {
	mux       *Mux
	ch        chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func (l *muxListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-l.mux.done:
		return nil, net.ErrClosed
	}
}

// Close is called by grpc.Server.Stop; the mux itself stays up.
func (l *muxListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

func (l *muxListener) Addr() net.Addr { return l.mux.Addr() }

// replayConn gives back the byte the mux read to route the connection.
type replayConn struct {
	net.Conn
	first []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.first) > 0 && len(p) > 0 {
		n := copy(p, c.first)
		c.first = c.first[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// NetConn is the connection c replays for, so that connlimit.Authenticated
// finds the mux's count through it.
func (c *replayConn) NetConn() net.Conn { return c.Conn }
