package raftlog

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// streamLayer is raft's view of the mux: outbound connections announce
// themselves with RaftMarker, inbound ones are those the mux routed to raft.
//
// It tracks every connection it hands out and closes them all on Close,
// because raft's NetworkTransport.Close closes the stream layer but neither
// its pooled outbound connections nor the inbound ones its handlers are
// reading; without this they (and the peers' handler goroutines) would live
// on after the node shut down.
type streamLayer struct {
	mux       *Mux
	advertise advertiseAddr
	done      chan struct{}

	mu     sync.Mutex
	closed bool
	conns  map[*layerConn]struct{}

	closeOnce sync.Once
}

var _ raft.StreamLayer = (*streamLayer)(nil)

func newStreamLayer(mux *Mux, advertise string) *streamLayer {
	return &streamLayer{
		mux:       mux,
		advertise: advertiseAddr(advertise),
		done:      make(chan struct{}),
		conns:     make(map[*layerConn]struct{}),
	}
}

// Dial connects to a peer's mux and sends RaftMarker so the peer routes the
// connection to raft.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	select {
	case <-s.done:
		return nil, net.ErrClosed
	default:
	}
	d := net.Dialer{Timeout: timeout}
	conn, err := d.Dial("tcp", string(address))
	if err != nil {
		return nil, err
	}
	if timeout > 0 {
		_ = conn.SetWriteDeadline(time.Now().Add(timeout))
	}
	if _, err := conn.Write([]byte{RaftMarker}); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("dial %s: send raft marker: %w", address, err)
	}
	_ = conn.SetWriteDeadline(time.Time{})
	return s.adopt(conn)
}

// Accept returns the next connection the mux routed to raft. It returns
// net.ErrClosed once the stream layer or the mux is closed.
func (s *streamLayer) Accept() (net.Conn, error) {
	select {
	case conn := <-s.mux.raftCh:
		return s.adopt(conn)
	case <-s.done:
		return nil, net.ErrClosed
	case <-s.mux.done:
		return nil, net.ErrClosed
	}
}

// adopt tracks conn so Close can close it; a conn that arrives after Close is
// closed at once.
func (s *streamLayer) adopt(conn net.Conn) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = conn.Close()
		return nil, net.ErrClosed
	}
	lc := &layerConn{Conn: conn, layer: s}
	s.conns[lc] = struct{}{}
	return lc, nil
}

// Close stops Accept and closes every connection this layer handed out. The
// mux stays open: it belongs to the caller and may serve a later node.
func (s *streamLayer) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		conns := s.conns
		s.conns = nil
		s.mu.Unlock()
		close(s.done)
		for c := range conns {
			c.closeByLayer()
		}
	})
	return nil
}

// Addr is the advertised address, not the bound one: NetworkTransport
// reports it as the node's LocalAddr, which must match the address in the
// raft configuration (the voter list), or raft would not recognise itself.
func (s *streamLayer) Addr() net.Addr { return s.advertise }

func (s *streamLayer) forget(c *layerConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

// advertiseAddr keeps the address exactly as the voter list spells it
// (possibly a host name), which a resolved *net.TCPAddr would not.
type advertiseAddr string

func (a advertiseAddr) Network() string { return "tcp" }
func (a advertiseAddr) String() string  { return string(a) }

// layerConn is a connection owned by a streamLayer.
type layerConn struct {
	net.Conn
	layer     *streamLayer
	byLayer   atomic.Bool // closed by streamLayer.Close
	closeOnce sync.Once
	closeErr  error
}

// Read reports io.EOF once the layer has closed the conn, so raft's handler
// goroutines end quietly on shutdown instead of logging "use of closed
// network connection" as an error.
func (c *layerConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && c.byLayer.Load() && errors.Is(err, net.ErrClosed) {
		err = io.EOF
	}
	return n, err
}

func (c *layerConn) Close() error {
	c.closeOnce.Do(func() {
		c.layer.forget(c)
		c.closeErr = c.Conn.Close()
	})
	return c.closeErr
}

func (c *layerConn) closeByLayer() {
	c.byLayer.Store(true)
	c.closeOnce.Do(func() { c.closeErr = c.Conn.Close() })
}
