// Package connlimit bounds the connections a listener holds: all of them,
// those from one source address, and those whose peer has not yet shown
// who it is.
//
// Every connection costs a file descriptor from accept to close, and the
// descriptors are shared with the logs: 20,000 idle connections to a Kafka
// port once left a broker none to roll a segment with, and it stopped. A
// Limiter counts each connection from accept (before TLS) until it is
// closed, against a bound for the listener (Kafka's max.connections) and
// one per source address (max.connections.per.ip); Plan derives them from
// the process's open-files limit, keeping a reserve for the logs.
//
// Before a peer has finished its TLS handshake (or, in plaintext, shown it
// speaks the protocol), holding its connection costs a goroutine, a file
// descriptor and buffers, and proves nothing: 3,000 connections that each
// sent half a TLS ClientHello once stayed open for two minutes, and 9,990
// of them made a leader step down. Deadlines bound how long each such
// connection is held; a Limiter bounds how many are held at once, below
// its bound on all connections, so that strangers never take the room of
// peers that authenticate. Beyond a bound a new connection is closed as
// soon as it is accepted, counted, and reported in the log at most once
// per logInterval. Connections already authenticated are not counted as
// unauthenticated, so a flood of strangers never closes them.
//
// A connection leaves the unauthenticated count when whoever authenticates
// its peer says so (Authenticated), when it is closed, or at the latest
// after the Limiter's hold time: every handshake has a deadline shorter
// than that, so a path that forgets to call Authenticated costs a slot for
// a while, never for good. It leaves the other counts when it is closed.
package connlimit

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// logInterval is how often a Limiter logs its refusals at most.
const logInterval = 10 * time.Second

// Metric names (README: Metrics and health). The first two are the gRPC
// port's (Collectors); the labelled ones are every listener's
// (ListenerCollectors).
const (
	MetricPending = "keel_unauthenticated_connections"
	MetricRefused = "keel_unauthenticated_connections_refused_total"

	MetricOpen          = "keel_listener_connections"
	MetricRefusedByCaps = "keel_listener_connections_refused_total"
)

// Reasons a connection is refused: the label of MetricRefusedByCaps.
const (
	ReasonListener        = "listener"        // the listener's bound on all its connections
	ReasonSource          = "source"          // the bound on one source address's
	ReasonUnauthenticated = "unauthenticated" // the bound on those not yet authenticated
)

// Limits are a listener's bounds; 0 is no bound.
type Limits struct {
	// MaxConns bounds the connections open at once, from accept to
	// close (Kafka's max.connections).
	MaxConns int
	// MaxPerSource bounds those from one source IP address
	// (max.connections.per.ip).
	MaxPerSource int
	// MaxUnauthenticated bounds those whose peer has not yet
	// authenticated.
	MaxUnauthenticated int
}

// Limiter counts one listener's connections, and refuses new ones beyond
// its Limits.
type Limiter struct {
	lim  Limits
	hold time.Duration
	name string // the listener, for the log

	log atomic.Pointer[slog.Logger]

	pending atomic.Int64
	// mu guards open and bySource: an admission checks and counts both
	// at once.
	mu       sync.Mutex
	open     int
	bySource map[netip.Addr]int

	refused         atomic.Uint64 // over MaxUnauthenticated
	refusedListener atomic.Uint64 // over MaxConns
	refusedSource   atomic.Uint64 // over MaxPerSource
	// Refusals are logged at most once per logInterval, with the number
	// not logged since.
	logMu     sync.Mutex
	lastLog   time.Time
	unlogged  uint64
	nowForLog func() time.Time
}

// New returns a Limiter that holds at most max unauthenticated connections
// at once (max > 0), each counted for at most hold, and no other bound. name says
// which listener it guards in its log lines ("the controller port
// 127.0.0.1:9091").
func New(max int, hold time.Duration, name string) *Limiter {
	return NewLimits(Limits{MaxUnauthenticated: max}, hold, name)
}

// NewLimits returns a Limiter with the bounds lim; a connection counts as
// unauthenticated for at most hold.
func NewLimits(lim Limits, hold time.Duration, name string) *Limiter {
	l := &Limiter{lim: lim, hold: hold, name: name, nowForLog: time.Now, bySource: map[netip.Addr]int{}}
	l.log.Store(slog.Default())
	return l
}

// SetLogger makes l log to log from now on.
func (l *Limiter) SetLogger(log *slog.Logger) {
	if log != nil {
		l.log.Store(log)
	}
}

// sourceOf is c's peer address, unmapped (an IPv4 peer on a dual-stack
// socket counts as itself); the zero Addr for a peer with none (a pipe).
func sourceOf(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

// Admit counts c, just accepted, and returns it wrapped (Authenticated
// uncounts it as unauthenticated, Close from every count), or, when a
// bound is reached, closes c, counts the refusal and returns false.
func (l *Limiter) Admit(c net.Conn) (net.Conn, bool) {
	src := sourceOf(c)
	if reason := l.take(src); reason != "" {
		_ = c.Close()
		l.logRefusal(reason, src)
		return nil, false
	}
	lc := &conn{Conn: c, l: l, src: src}
	// The timer only ends the count; it never reads lc.timer, which is
	// set before lc is handed to anyone.
	lc.timer = time.AfterFunc(l.hold, lc.uncount)
	return lc, true
}

// take counts one connection from src against every bound, or none of
// them and says which bound refused it.
func (l *Limiter) take(src netip.Addr) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.lim.MaxConns > 0 && l.open >= l.lim.MaxConns:
		l.refusedListener.Add(1)
		return ReasonListener
	case l.lim.MaxPerSource > 0 && l.bySource[src] >= l.lim.MaxPerSource:
		l.refusedSource.Add(1)
		return ReasonSource
	}
	if l.pending.Add(1) > int64(l.lim.MaxUnauthenticated) && l.lim.MaxUnauthenticated > 0 {
		l.pending.Add(-1)
		l.refused.Add(1)
		return ReasonUnauthenticated
	}
	l.open++
	l.bySource[src]++
	return ""
}

// release uncounts a closed connection from src.
func (l *Limiter) release(src netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.bySource[src]--; l.bySource[src] <= 0 {
		delete(l.bySource, src)
	}
}

// Pending is the number of unauthenticated connections counted now.
func (l *Limiter) Pending() int { return int(l.pending.Load()) }

// Open is the number of connections open now.
func (l *Limiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Refused is the number of connections refused so far because too many
// were unauthenticated.
func (l *Limiter) Refused() uint64 { return l.refused.Load() }

// RefusedBy is the number of connections refused so far for reason
// (ReasonListener, ReasonSource, ReasonUnauthenticated).
func (l *Limiter) RefusedBy(reason string) uint64 {
	switch reason {
	case ReasonListener:
		return l.refusedListener.Load()
	case ReasonSource:
		return l.refusedSource.Load()
	case ReasonUnauthenticated:
		return l.refused.Load()
	}
	return 0
}

// refusedTotal is every refusal so far.
func (l *Limiter) refusedTotal() uint64 {
	return l.refused.Load() + l.refusedListener.Load() + l.refusedSource.Load()
}

func (l *Limiter) logRefusal(reason string, src netip.Addr) {
	l.logMu.Lock()
	now := l.nowForLog()
	if !l.lastLog.IsZero() && now.Sub(l.lastLog) < logInterval {
		l.unlogged++
		l.logMu.Unlock()
		return
	}
	unlogged := l.unlogged
	l.lastLog, l.unlogged = now, 0
	l.logMu.Unlock()
	var msg string
	var max int
	switch reason {
	case ReasonListener:
		msg, max = "refused a connection: the listener holds the most connections allowed", l.lim.MaxConns
	case ReasonSource:
		msg, max = "refused a connection: its source address holds the most connections allowed", l.lim.MaxPerSource
	default:
		msg, max = "refused a connection: too many connections whose peer has not yet authenticated", l.lim.MaxUnauthenticated
	}
	l.log.Load().Warn(msg, "listener", l.name, "source", src.String(), "max", max,
		"refused_total", l.refusedTotal(), "similar_refusals_not_logged", unlogged)
}

// Collectors are l's metrics as the gRPC ports have always exposed them,
// with no label: the unauthenticated connections counted now and those
// refused so far for being over that bound.
func (l *Limiter) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: MetricPending,
			Help: "Connections accepted whose peer has not yet authenticated (finished its TLS handshake, or sent its first request in plaintext).",
		}, func() float64 { return float64(l.Pending()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: MetricRefused,
			Help: "Connections closed as soon as they were accepted, because the most allowed were already waiting to authenticate.",
		}, func() float64 { return float64(l.Refused()) }),
	}
}

// ListenerCollectors are l's metrics labelled with listener (its kind:
// "kafka", "grpc", "metrics"), so that every listener of a process shares
// one name: the connections open now, and those refused so far by reason.
func (l *Limiter) ListenerCollectors(listener string) []prometheus.Collector {
	cols := []prometheus.Collector{prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        MetricOpen,
		Help:        "Connections a listener holds open, counted from accept (before TLS) to close.",
		ConstLabels: prometheus.Labels{"listener": listener},
	}, func() float64 { return float64(l.Open()) })}
	for _, reason := range []string{ReasonListener, ReasonSource, ReasonUnauthenticated} {
		cols = append(cols, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        MetricRefusedByCaps,
			Help:        "Connections closed as soon as they were accepted, by the bound they were over: the listener's, their source address's, or that on connections not yet authenticated.",
			ConstLabels: prometheus.Labels{"listener": listener, "reason": reason},
		}, func() float64 { return float64(l.RefusedBy(reason)) }))
	}
	return cols
}

// Listener wraps ln so that every connection it accepts is admitted by l;
// those l refuses are closed and never returned.
func (l *Limiter) Listener(ln net.Listener) net.Listener {
	return &listener{Listener: ln, l: l}
}

type listener struct {
	net.Listener
	l *Limiter
}

func (ln *listener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc, ok := ln.l.Admit(c); ok {
			return lc, nil
		}
	}
}

// conn is an admitted connection, counted as unauthenticated until
// uncount, and as open until Close.
type conn struct {
	net.Conn
	l         *Limiter
	src       netip.Addr
	once      sync.Once
	closeOnce sync.Once
	timer     *time.Timer
}

func (c *conn) uncount() {
	c.once.Do(func() { c.l.pending.Add(-1) })
}

// authenticated uncounts c and stops its timer.
func (c *conn) authenticated() {
	c.uncount()
	c.timer.Stop()
}

func (c *conn) Close() error {
	c.authenticated()
	c.closeOnce.Do(func() { c.l.release(c.src) })
	return c.Conn.Close()
}

// NetConn is the connection c wraps.
func (c *conn) NetConn() net.Conn { return c.Conn }

// Authenticated tells the Limiter that admitted c, or the connection c
// wraps (through NetConn, as *tls.Conn has), that its peer is
// authenticated: it no longer counts as unauthenticated. It does nothing
// for a connection no Limiter admitted, and nothing the second time.
func Authenticated(c net.Conn) {
	for c != nil {
		switch v := c.(type) {
		case *conn:
			v.authenticated()
			return
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return
		}
	}
}
