package integration

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// linkMode is what a faultProxy does with the traffic it carries.
type linkMode int32

const (
	// linkUp forwards traffic both ways.
	linkUp linkMode = iota
	// linkDrop closes every connection and refuses new ones at once: a link
	// that is down and says so (a reset, an unreachable host).
	linkDrop
	// linkBlackhole keeps connections open but silently discards what they
	// carry, and accepts new connections only to discard theirs: a link that
	// loses packets, noticed only by timeouts and keepalives. Connections
	// held this way are closed when the link comes back, as TCP would give
	// up on them.
	linkBlackhole
)

func (m linkMode) String() string {
	switch m {
	case linkUp:
		return "up"
	case linkDrop:
		return "drop"
	case linkBlackhole:
		return "blackhole"
	}
	return fmt.Sprintf("linkMode(%d)", int32(m))
}

// faultProxy is a TCP proxy on loopback in front of one node, for one kind
// of traffic (the node's public address, or one peer's raft dials to it),
// that a test can cut and restore.
type faultProxy struct {
	name   string
	target string
	ln     net.Listener
	mode   atomic.Int32

	mu     sync.Mutex
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

// newFaultProxy listens on a free loopback port and forwards to target. It
// is closed, with every connection it carries, when the test ends.
func newFaultProxy(t testing.TB, name, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fault proxy %s: %v", name, err)
	}
	p := &faultProxy{name: name, target: target, ln: ln, conns: make(map[*proxyConn]struct{})}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.Close)
	return p
}

// Addr is the address to dial instead of the target.
func (p *faultProxy) Addr() string { return p.ln.Addr().String() }

// Mode is the proxy's current mode.
func (p *faultProxy) Mode() linkMode { return linkMode(p.mode.Load()) }

// Set changes the mode. Going down drops or holes every open connection;
// coming up closes the held ones, so both ends reconnect through a live link.
func (p *faultProxy) Set(m linkMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := linkMode(p.mode.Swap(int32(m)))
	if old == m {
		return
	}
	for c := range p.conns {
		switch {
		case m == linkDrop, m == linkUp && c.holed.Load():
			c.close()
			delete(p.conns, c)
		case m == linkBlackhole:
			c.holed.Store(true)
		}
	}
}

// Close stops accepting and closes every connection.
func (p *faultProxy) Close() {
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

func (p *faultProxy) acceptLoop() {
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
func (p *faultProxy) track(c *proxyConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	// A connection held from the start (no server dialled) is no use once
	// the link is up again: close it, as Set(linkUp) closes the held ones.
	if p.closed || p.Mode() == linkDrop || c.server == nil && p.Mode() == linkUp {
		return false
	}
	if p.Mode() == linkBlackhole {
		c.holed.Store(true)
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *faultProxy) untrack(c *proxyConn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.close()
}

func (p *faultProxy) serve(client net.Conn) {
	defer p.wg.Done()
	c := &proxyConn{client: client}
	switch p.Mode() {
	case linkDrop:
		_ = client.Close()
		return
	case linkUp:
		server, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			_ = client.Close() // the node is down: so is the link
			return
		}
		c.server = server
	}
	if !p.track(c) {
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
func (p *faultProxy) pipe(c *proxyConn, dst, src net.Conn) {
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

// ---------------------------------------------------------------------------
// faultNet

// faultNet puts a faultProxy on every path between controllers and in front
// of every controller's public address:
//
//   - public[i] is node i's address in --voters: brokers and leader hints
//     reach node i through it;
//   - peer[i][j] is where node i dials node j's raft traffic (--raft-dial),
//     so a link between two controllers can be cut in one direction without
//     touching the others.
//
// The test's own admin client dials the nodes' listen addresses directly,
// like a client on the same side of a partition as the node it talks to.
type faultNet struct {
	public map[int32]*faultProxy
	peer   map[int32]map[int32]*faultProxy
}

// newFaultNet builds the proxies for nodes listening at listen (by id).
func newFaultNet(t testing.TB, listen map[int32]string) *faultNet {
	n := &faultNet{public: make(map[int32]*faultProxy), peer: make(map[int32]map[int32]*faultProxy)}
	for id, addr := range listen {
		n.public[id] = newFaultProxy(t, fmt.Sprintf("public-%d", id), addr)
		n.peer[id] = make(map[int32]*faultProxy)
	}
	for from := range listen {
		for to, addr := range listen {
			if from != to {
				n.peer[from][to] = newFaultProxy(t, fmt.Sprintf("raft-%d-to-%d", from, to), addr)
			}
		}
	}
	return n
}

// voterAddr is node id's address as the quorum and its clients know it.
func (n *faultNet) voterAddr(id int32) string { return n.public[id].Addr() }

// raftDial is node id's --raft-dial value.
func (n *faultNet) raftDial(id int32) string {
	var parts []string
	for to := int32(1); int(to) <= len(n.peer); to++ {
		if p, ok := n.peer[id][to]; ok {
			parts = append(parts, fmt.Sprintf("%d@%s", to, p.Addr()))
		}
	}
	return strings.Join(parts, ",")
}

// Isolate cuts node id off from the other controllers (both directions)
// and from everything that reaches it through its public address (brokers).
func (n *faultNet) Isolate(id int32, m linkMode) {
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
func (n *faultNet) CutOutbound(id int32, m linkMode) {
	for other, p := range n.peer[id] {
		if other != id {
			p.Set(m)
		}
	}
}

// Heal brings every link up.
func (n *faultNet) Heal() {
	for _, p := range n.public {
		p.Set(linkUp)
	}
	for _, m := range n.peer {
		for _, p := range m {
			p.Set(linkUp)
		}
	}
}

// withFaultNet runs the controllers behind a faultNet (Cluster.net): their
// voter addresses are proxies, and each dials its peers through its own.
func withFaultNet() clusterOption {
	return func(o *clusterOptions) { o.faultNet = true }
}

// listenAddrs names the loopback listen address of each node, by id, for
// ports in id order.
func listenAddrs(ports []int) map[int32]string {
	m := make(map[int32]string, len(ports))
	for i, p := range ports {
		m[int32(i+1)] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return m
}

// voterAddr is node id's address in --voters: its listen address, or its
// public proxy under a faultNet.
func (c *Cluster) voterAddr(id int32, listen string) string {
	if c.net == nil {
		return listen
	}
	return c.net.voterAddr(id)
}

// VoterAddrs returns every node's address in --voters, in id order: what
// brokers are given, so that under a faultNet they go through the proxies.
func (c *Cluster) VoterAddrs() []string {
	addrs := c.Addrs()
	for i := range addrs {
		addrs[i] = c.voterAddr(int32(i+1), addrs[i])
	}
	return addrs
}
