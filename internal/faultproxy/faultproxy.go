// Package faultproxy cuts and restores TCP links between processes on
// loopback, for tests: a Proxy in front of one address that forwards,
// drops, resets, or silently swallows what it carries, and a Net of them on
// every path between raft controllers (their public addresses and each
// directed raft link, wired with --raft-dial), so that a test can isolate a
// node, cut one direction only, and heal. The integration suite, the in-process
// test cluster (keeltest) and the fault suite all partition through it.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what a Proxy does with the traffic it carries.
type Mode int32

const (
	// Up forwards traffic both ways.
	Up Mode = iota
	// Drop closes every connection and refuses new ones at once: a link
	// that is down and says so (a reset, an unreachable host).
	Drop
	// Blackhole keeps connections open but silently discards what they
	// carry, and accepts new connections only to discard theirs: a link that
	// loses packets, noticed only by timeouts and keepalives. Connections
	// held this way are closed when the link comes back, as TCP would give
	// up on them.
	Blackhole
	// Reset is Drop with every connection reset (an RST, SO_LINGER 0)
	// rather than closed: what a peer sees when a proxy or sidecar in the
	// path restarts, or a middlebox forgets the connection.
	Reset
)

func (m Mode) String() string {
	switch m {
	case Up:
		return "up"
	case Drop:
		return "drop"
	case Blackhole:
		return "blackhole"
	case Reset:
		return "reset"
	}
	return fmt.Sprintf("Mode(%d)", int32(m))
}

// Proxy is a TCP proxy on loopback in front of one node, for one kind
// of traffic (the node's public address, or one peer's raft dials to it),
// that a test can cut and restore.
type Proxy struct {
	name string
	ln   net.Listener
	mode atomic.Int32

	mu     sync.Mutex
	target string
	closed bool
	conns  map[*proxyConn]struct{}
	wg     sync.WaitGroup
}

// proxyConn is one proxied connection: the accepted side and, once dialled,
// the target side.
type proxyConn struct {
	client, server net.Conn // server is nil while blackholed from the start
	holed          atomic.Bool
	closeOnce      sync.Once
}

func (c *proxyConn) close() {
	c.closeOnce.Do(func() {
		_ = c.client.Close()
		if c.server != nil {
			_ = c.server.Close()
		}
	})
}

// reset closes both sides with an RST.
func (c *proxyConn) reset() {
	c.closeOnce.Do(func() {
		resetConn(c.client)
		if c.server != nil {
			resetConn(c.server)
		}
	})
}

// resetConn closes conn with an RST rather than a FIN.
func resetConn(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// New listens on a free loopback port and forwards to target, up, until
// Close.
func New(name, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fault proxy %s: %v", name, err)
	}
	p := &Proxy{name: name, target: target, ln: ln, conns: make(map[*proxyConn]struct{})}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the address to dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget points the proxy at target from its next connection on: a test
// that gives a process the proxy's address before the process has a port
// of its own (a broker advertising a proxy) sets it once it has, and again
// whenever the process moves. Open connections keep their old target.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

// Target is where the proxy forwards to.
func (p *Proxy) Target() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// Mode is the proxy's current mode.
func (p *Proxy) Mode() Mode { return Mode(p.mode.Load()) }

// Set changes the mode. Going down drops or holes every open connection;
// coming up closes the held ones, so both ends reconnect through a live link.
func (p *Proxy) Set(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := Mode(p.mode.Swap(int32(m)))
	if old == m {
		return
	}
	for c := range p.conns {
		switch {
		case m == Reset:
			c.reset()
			delete(p.conns, c)
		case m == Drop, m == Up && c.holed.Load():
			c.close()
			delete(p.conns, c)
		case m == Blackhole:
			c.holed.Store(true)
		}
	}
}

// Close stops accepting and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	_ = p.ln.Close()
	for c := range p.conns {
		c.close()
	}
	clear(p.conns)
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.wg.Add(1)
		go p.serve(conn)
	}
}

// track registers c, under the mode in force now (Set may have run since
// serve looked): false when the proxy is closed, the link is dropped, or c
// was held while the link was down and it is up again.
func (p *Proxy) track(c *proxyConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	// A connection held from the start (no server dialled) is no use once
	// the link is up again: close it, as Set(Up) closes the held ones.
	if p.closed || p.Mode() == Drop || p.Mode() == Reset || c.server == nil && p.Mode() == Up {
		return false
	}
	if p.Mode() == Blackhole {
		c.holed.Store(true)
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c *proxyConn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.close()
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	c := &proxyConn{client: client}
	switch p.Mode() {
	case Drop:
		_ = client.Close()
		return
	case Reset:
		resetConn(client)
		return
	case Up:
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		server, err := net.DialTimeout("tcp", target, time.Second)
		if err != nil {
			_ = client.Close() // the node is down: so is the link
			return
		}
		c.server = server
	}
	if !p.track(c) {
		if p.Mode() == Reset {
			c.reset()
		}
		c.close()
		return
	}
	defer p.untrack(c)
	if c.server == nil {
		// Held from the start: swallow what the client sends until the
		// link comes back (Set closes it) or the proxy closes.
		_, _ = io.Copy(io.Discard, client)
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.pipe(c, c.server, client); done <- struct{}{} }()
	go func() { p.pipe(c, client, c.server); done <- struct{}{} }()
	<-done // one side ended: end both
	c.close()
	<-done
}

// pipe copies src to dst until either fails, discarding what it reads while
// c is holed.
func (p *Proxy) pipe(c *proxyConn, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !c.holed.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Net puts a Proxy on every path between controllers and in front
// of every controller's public address:
//
//   - public[i] is node i's address in --voters: brokers and leader hints
//     reach node i through it;
//   - peer[i][j] is where node i dials node j's raft traffic (--raft-dial),
//     so a link between two controllers can be cut in one direction without
//     touching the others.
//
// A test's own admin client dials the nodes' listen addresses directly,
// like a client on the same side of a partition as the node it talks to.
type Net struct {
	public map[int32]*Proxy
	peer   map[int32]map[int32]*Proxy
}

// NewNet builds the proxies for nodes listening at listen (by id), every
// link up, until Close.
func NewNet(listen map[int32]string) (*Net, error) {
	n := &Net{public: make(map[int32]*Proxy), peer: make(map[int32]map[int32]*Proxy)}
	add := func(name, target string) (*Proxy, error) {
		p, err := New(name, target)
		if err != nil {
			n.Close()
		}
		return p, err
	}
	var err error
	for id, addr := range listen {
		if n.public[id], err = add(fmt.Sprintf("public-%d", id), addr); err != nil {
			return nil, err
		}
		n.peer[id] = make(map[int32]*Proxy)
	}
	for from := range listen {
		for to, addr := range listen {
			if from != to {
				if n.peer[from][to], err = add(fmt.Sprintf("raft-%d-to-%d", from, to), addr); err != nil {
					return nil, err
				}
			}
		}
	}
	return n, nil
}

// Close closes every proxy of the net, with the connections they carry.
func (n *Net) Close() {
	for _, p := range n.public {
		if p != nil {
			p.Close()
		}
	}
	for _, m := range n.peer {
		for _, p := range m {
			if p != nil {
				p.Close()
			}
		}
	}
}

// VoterAddr is node id's address as the quorum and its clients know it.
func (n *Net) VoterAddr(id int32) string { return n.public[id].Addr() }

// RaftDial is node id's --raft-dial value: where it dials each peer.
func (n *Net) RaftDial(id int32) string {
	var parts []string
	for to := int32(1); int(to) <= len(n.peer); to++ {
		if p, ok := n.peer[id][to]; ok {
			parts = append(parts, fmt.Sprintf("%d@%s", to, p.Addr()))
		}
	}
	return strings.Join(parts, ",")
}

// Link is the proxy on node from's raft dials to node to, for a fault that
// Isolate and CutOutbound do not cover: cutting a group of nodes off from
// the rest while the links inside each group stay up (keeltest's
// Partition). It is nil when either node is not in the net.
func (n *Net) Link(from, to int32) *Proxy { return n.peer[from][to] }

// Public is the proxy in front of node id's public address (VoterAddr):
// brokers and leader hints reach the node through it, raft does not. It is
// nil when the node is not in the net.
func (n *Net) Public(id int32) *Proxy { return n.public[id] }

// Isolate cuts node id off from the other controllers (both directions)
// and from everything that reaches it through its public address (brokers).
func (n *Net) Isolate(id int32, m Mode) {
	n.public[id].Set(m)
	for other := range n.peer {
		if other == id {
			continue
		}
		n.peer[id][other].Set(m)
		n.peer[other][id].Set(m)
	}
}

// CutOutbound cuts node id's raft dials to every other controller, and
// nothing else: a one-way fault, where the others stop hearing the node
// (its heartbeats, its replication) while it still hears them.
func (n *Net) CutOutbound(id int32, m Mode) {
	for other, p := range n.peer[id] {
		if other != id {
			p.Set(m)
		}
	}
}

// Heal brings every link up.
func (n *Net) Heal() {
	for _, p := range n.public {
		p.Set(Up)
	}
	for _, m := range n.peer {
		for _, p := range m {
			p.Set(Up)
		}
	}
}
