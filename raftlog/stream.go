package raftlog

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/internal/connlimit"
	"github.com/keel-dev/keel/tlsauth"
)

// tlsHandshakeTimeout bounds a raft connection's TLS handshake, either way,
// so that a silent or slow peer costs one goroutine for a while and nothing
// more.
const tlsHandshakeTimeout = 5 * time.Second

// firstRequestTimeout bounds how long an inbound raft connection may stay
// silent once it is accepted (after the raft marker and, with TLS, the
// handshake). Every raft connection is dialled to send a request at once:
// one that sends nothing (a stranger who sent only the marker) is closed
// rather than held forever.
const firstRequestTimeout = 10 * time.Second

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
	// guard checks every inbound connection against the quorum's
	// membership once, as it is accepted, and every dial (peerGuard).
	guard *peerGuard

	mu     sync.Mutex
	closed bool
	conns  map[*layerConn]struct{}
	// handlers counts the inbound connections whose raft handler has not
	// let go of them yet (see waitHandlers).
	handlers sync.WaitGroup

	closeOnce sync.Once
	watchOnce sync.Once // starts dropRemoved

	// With TLS (nil: plaintext): inbound connections are handshaken each in
	// its own goroutine, never in Accept, so that a peer that never finishes
	// its handshake cannot hold up raft's accept loop; ready delivers those
	// that did, to Accept.
	tls         *layerTLS
	ready       chan admitted
	hsCtx       context.Context
	hsCancel    context.CancelFunc
	handshakers sync.WaitGroup
	log         *slog.Logger
	refusals    *logLimiter // one refusal warning per peer host per 10s
}

// layerTLS is a stream layer's TLS: both ends of a raft connection must hold
// a controller certificate from the CA.
type layerTLS struct {
	server *tls.Config
	client *tls.Config
}

var _ raft.StreamLayer = (*streamLayer)(nil)

func newStreamLayer(mux *Mux, advertise string, guard *peerGuard) *streamLayer {
	return &streamLayer{
		mux:       mux,
		advertise: advertiseAddr(advertise),
		done:      make(chan struct{}),
		guard:     guard,
		conns:     make(map[*layerConn]struct{}),
	}
}

// streamLayerFor is the stream layer cfg asks for, guarded by guard: with
// cfg.TLS, mutual TLS between controllers; without, plaintext.
func streamLayerFor(mux *Mux, cfg Config, guard *peerGuard) *streamLayer {
	if cfg.TLS == nil {
		return newStreamLayer(mux, cfg.Advertise, guard)
	}
	return newTLSStreamLayer(mux, cfg.Advertise, cfg.TLS, cfg.Logger, guard)
}

// newTLSStreamLayer is newStreamLayer with every connection, inbound and
// outbound, run through a TLS handshake right after the RaftMarker byte
// (which stays plaintext, so the mux can still route by the first byte).
// Each end requires the other's certificate to be a controller's. Host
// names are not checked: a peer may be dialled through an address that is
// not its own (--raft-dial), and the controller role is what authenticates.
func newTLSStreamLayer(mux *Mux, advertise string, cfg *tlsauth.Config, log *slog.Logger, guard *peerGuard) *streamLayer {
	s := newStreamLayer(mux, advertise, guard)
	s.tls = &layerTLS{
		server: cfg.Server(tlsauth.RoleController),
		client: cfg.PeerClient(tlsauth.RoleController),
	}
	s.ready = make(chan admitted)
	s.hsCtx, s.hsCancel = context.WithCancel(context.Background())
	if log == nil {
		log = slog.Default()
	}
	s.log = log
	s.refusals = newLogLimiter(10 * time.Second)
	s.handshakers.Add(1)
	go s.acceptTLS()
	return s
}

// checkTLS refuses a certificate that is not this node's: peers accept any
// controller certificate, so only the node itself can tell it has another's.
func checkTLS(cfg Config) error {
	if cfg.TLS == nil {
		return nil
	}
	id := cfg.TLS.Identity
	if id.Role != tlsauth.RoleController || id.ID != cfg.NodeID {
		return fmt.Errorf("%s is for %s, not controller-%d (this node's --node-id)", cfg.TLS.CertName(), id, cfg.NodeID)
	}
	return nil
}

// acceptTLS takes every connection the mux routes to raft and handshakes
// it in a goroutine of its own.
func (s *streamLayer) acceptTLS() {
	defer s.handshakers.Done()
	for {
		select {
		case conn := <-s.mux.raftCh:
			s.handshakers.Add(1)
			go s.handshake(conn)
		case <-s.done:
			return
		case <-s.mux.done:
			return
		}
	}
}

// handshake runs the server side of conn's TLS handshake and hands conn to
// Accept, or closes it.
func (s *streamLayer) handshake(conn net.Conn) {
	defer s.handshakers.Done()
	ctx, cancel := context.WithTimeout(s.hsCtx, tlsHandshakeTimeout)
	defer cancel()
	tc := tls.Server(conn, s.tls.server)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = conn.Close()
		if s.hsCtx.Err() == nil {
			// A plaintext controller, a broker's or a stranger's
			// certificate, or a peer too slow: say so, it is a
			// misconfiguration the operator must see.
			host, _, _ := net.SplitHostPort(conn.RemoteAddr().String())
			if ok, held := s.refusals.allow(host, time.Now()); ok {
				s.log.Warn("refused a raft connection: TLS handshake failed", "remote", conn.RemoteAddr().String(), "err", err,
					"similar_refusals_not_logged", held)
			}
		}
		return
	}
	// The handshake proved a controller certificate from the CA; only a
	// member of the quorum may talk raft.
	id, err := peerController(tc)
	if err == nil {
		err = s.guard.admit(ctx, id)
	}
	if err != nil {
		_ = conn.Close()
		s.guard.refused(conn.RemoteAddr().String(), "a connection", err)
		return
	}
	// A member: it no longer counts against the port's bound on strangers.
	connlimit.Authenticated(conn)
	select {
	case s.ready <- admitted{conn: tc, peer: id}:
	case <-s.done:
		_ = conn.Close()
	case <-s.mux.done:
		_ = conn.Close()
	}
}

// admitted is an inbound TLS connection through its handshake, from
// controller peer, a member.
type admitted struct {
	conn net.Conn
	peer int32
}

// peerController is the node id of the controller certificate a finished
// handshake verified.
func peerController(tc *tls.Conn) (int32, error) {
	id, err := tlsauth.PeerIdentity(tc.ConnectionState().PeerCertificates)
	if err != nil {
		return 0, err
	}
	if id.Role != tlsauth.RoleController {
		return 0, fmt.Errorf("certificate %s is not a controller's", id)
	}
	return id.ID, nil
}

// Dial connects to a peer's mux and sends RaftMarker so the peer routes the
// connection to raft; with TLS, the handshake follows at once.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	select {
	case <-s.done:
		return nil, net.ErrClosed
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	target, err := s.guard.dialTarget(ctx, address)
	if err != nil {
		return nil, fmt.Errorf("not dialing %s: %w", address, err)
	}
	// A dial toward a node removed meanwhile is abandoned at once rather
	// than left to time out: raft would go on calling a node that left.
	go s.guard.abandonIfRemoved(ctx, cancel, target)
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", string(address))
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
	if s.tls != nil {
		hsTimeout := tlsHandshakeTimeout
		if timeout > 0 {
			hsTimeout = min(timeout, hsTimeout)
		}
		_ = conn.SetDeadline(time.Now().Add(hsTimeout))
		tc := tls.Client(conn, s.tls.client)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("dial %s: TLS handshake: %w", address, err)
		}
		// Any controller of the CA would pass the handshake; the one at
		// this address must be the member raft means to reach.
		if id, err := peerController(tc); err != nil || id != target {
			_ = conn.Close()
			if err == nil {
				err = fmt.Errorf("its certificate is controller-%d, not controller-%d", id, target)
			}
			return nil, fmt.Errorf("dial %s: %w", address, err)
		}
		_ = conn.SetDeadline(time.Time{})
		conn = tc
	}
	return s.adopt(&layerConn{Conn: conn, target: target})
}

// Accept returns the next connection the mux routed to raft. It returns
// net.ErrClosed once the stream layer or the mux is closed.
func (s *streamLayer) Accept() (net.Conn, error) {
	// With TLS, the mux's connections go to handshake and arrive on ready.
	raw := s.mux.raftCh
	if s.tls != nil {
		raw = nil
	}
	var in admitted
	select {
	case conn := <-raw:
		// Plaintext proves no identity: peer 0, anyone.
		in.conn = conn
	case in = <-s.ready:
	case <-s.done:
		return nil, net.ErrClosed
	case <-s.mux.done:
		return nil, net.ErrClosed
	}
	// Raft reads the connection as accepted: the checks were made once,
	// here and in handshake, and dropRemoved closes it if its peer leaves.
	_ = in.conn.SetReadDeadline(time.Now().Add(s.guard.firstRequest))
	return s.adopt(&layerConn{Conn: in.conn, handled: true, peer: in.peer, silent: true})
}

// adopt tracks lc so Close can close it, and so that it is closed once the
// member it reaches (lc.target, outbound) or comes from (lc.peer, inbound
// with TLS) leaves the quorum. An inbound lc is one raft's handler
// goroutine will hold until it calls Close, which waitHandlers waits for. A
// conn that arrives after Close is closed at once.
func (s *streamLayer) adopt(lc *layerConn) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = lc.Conn.Close()
		return nil, net.ErrClosed
	}
	lc.layer = s
	if lc.handled {
		s.handlers.Add(1)
	}
	s.conns[lc] = struct{}{}
	s.watchOnce.Do(func() { go s.dropRemoved() })
	return lc, nil
}

// waitHandlers waits, after Close, until raft's handler of every inbound
// connection has let go of it (raft's handleConn closes its connection as it
// returns), or timeout passes; it reports whether they all did.
//
// raft's NetworkTransport neither waits for those handlers on Close nor
// stops one halfway: a heartbeat it was already handling goes on into raft,
// which may write a new term to the stable store. Closing the store under
// it makes raft panic ("failed to save current term: database not open"),
// so Node.Close waits here before it closes the store. Close has closed
// every connection, so a handler that is reading or writing fails at once,
// and one inside raft returns as soon as raft answers or sees it is shut
// down.
func (s *streamLayer) waitHandlers(timeout time.Duration) bool {
	done := make(chan struct{})
	go func() { s.handlers.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// dropRemoved closes, every abandonPoll, the connections to and from nodes
// that are no longer members. Outbound: raft stops replicating to a
// removed node, but a call already under way on a connection to it (an
// unreachable node's, say) would otherwise hold on until the transport's
// timeout, and raft would call again meanwhile. Inbound: a certificate is
// checked once, at the handshake, so a connection a voter opened before it
// was removed must not outlive its membership (admits). It runs from the
// first adopted connection until Close.
func (s *streamLayer) dropRemoved() {
	tick := time.NewTicker(abandonPoll)
	defer tick.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-tick.C:
		}
		members, ok := s.guard.current()
		if !ok {
			continue
		}
		var drop []*layerConn
		s.mu.Lock()
		for c := range s.conns {
			if _, member := members[c.target]; c.target != 0 && !member ||
				c.peer != 0 && !s.guard.admits(members, c.peer) {
				drop = append(drop, c)
			}
		}
		s.mu.Unlock()
		for _, c := range drop {
			_ = c.Close()
		}
	}
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
		if s.tls != nil {
			s.hsCancel()
			s.handshakers.Wait()
		}
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
	layer  *streamLayer
	target int32 // the member an outbound conn reaches; 0 inbound
	// peer is the controller an inbound conn's certificate names; 0
	// outbound, and inbound in plaintext, where nothing says who it is.
	peer int32
	// silent: an inbound conn from which raft has read nothing yet, under
	// firstRequestTimeout's read deadline. Only raft's handler reads.
	silent    bool
	byLayer   atomic.Bool // closed by streamLayer.Close
	closeOnce sync.Once
	closeErr  error
	// handled: an inbound connection, counted in layer.handlers until the
	// handler's own Close, whether or not the layer closed it first.
	handled     bool
	releaseOnce sync.Once
	endOnce     sync.Once // connEnded is told once
}

// Read reports io.EOF once the layer has closed the conn, so raft's handler
// goroutines end quietly on shutdown instead of logging "use of closed
// network connection" as an error. On an inbound conn it lifts the first
// request's deadline once bytes arrive, and tells the guard of a peer that
// ended a conn that carried requests (peerGuard.connEnded).
func (c *layerConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.handled {
		err = c.inbound(n, err)
	}
	if err != nil && c.byLayer.Load() && errors.Is(err, net.ErrClosed) {
		err = io.EOF
	}
	return n, err
}

// inbound is Read's part for an inbound conn: n bytes read, then err.
func (c *layerConn) inbound(n int, err error) error {
	g := c.layer.guard
	if c.silent {
		if n == 0 {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				g.refused(c.RemoteAddr().String(), "a connection", fmt.Errorf("no request within %v", g.firstRequest))
				_ = c.Close()
				return io.EOF // logged here; raft's handler ends quietly
			}
			return err
		}
		c.silent = false
		_ = c.SetReadDeadline(time.Time{})
		if c.peer == 0 {
			// In plaintext, speaking raft at all is all a peer can show:
			// it no longer counts against the port's bound on strangers.
			// (With TLS, the handshake already did.)
			connlimit.Authenticated(c.Conn)
		}
		return err
	}
	if err != nil && !c.byLayer.Load() && !errors.Is(err, net.ErrClosed) {
		// The peer ended it (or died): not this node, nor the layer.
		if ended := g.connEnded; ended != nil {
			c.endOnce.Do(func() { ended(c.peer) })
		}
	}
	return err
}

func (c *layerConn) Close() error {
	c.closeOnce.Do(func() {
		c.layer.forget(c)
		c.closeErr = c.Conn.Close()
	})
	if c.handled {
		c.releaseOnce.Do(c.layer.handlers.Done)
	}
	return c.closeErr
}

// closeByLayer closes the TCP connection under a TLS one directly, without
// a close_notify: the layer is shutting down, and a peer that has stopped
// reading must not hold it up for crypto/tls's five-second write deadline
// per connection.
func (c *layerConn) closeByLayer() {
	c.byLayer.Store(true)
	c.closeOnce.Do(func() {
		switch conn := c.Conn.(type) {
		case *tls.Conn:
			c.closeErr = conn.NetConn().Close()
		default:
			c.closeErr = conn.Close()
		}
	})
}
