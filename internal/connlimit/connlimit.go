// Package connlimit bounds the connections a listener holds for peers that
// have not yet shown who they are.
//
// Before a peer has finished its TLS handshake (or, in plaintext, shown it
// speaks the protocol), holding its connection costs a goroutine, a file
// descriptor and buffers, and proves nothing: 3,000 connections that each
// sent half a TLS ClientHello once stayed open for two minutes, and 9,990
// of them made a leader step down. Deadlines bound how long each such
// connection is held; a Limiter bounds how many are held at once. Beyond
// its bound a new connection is closed as soon as it is accepted, counted,
// and reported in the log at most once per logInterval. Connections already
// authenticated are not counted, so a flood of strangers never closes
// them.
//
// A connection leaves the count when whoever authenticates its peer says
// so (Authenticated), when it is closed, or at the latest after the
// Limiter's hold time: every handshake has a deadline shorter than that, so
// a path that forgets to call Authenticated costs a slot for a while, never
// for good.
package connlimit

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// logInterval is how often a Limiter logs its refusals at most.
const logInterval = 10 * time.Second

// Metric names (README: Metrics and health).
const (
	MetricPending = "keel_unauthenticated_connections"
	MetricRefused = "keel_unauthenticated_connections_refused_total"
)

// Limiter counts one listener's connections whose peer is not yet
// authenticated, and refuses new ones beyond its bound.
type Limiter struct {
	max  int64
	hold time.Duration
	name string // the listener, for the log

	log atomic.Pointer[slog.Logger]

	pending atomic.Int64
	refused atomic.Uint64
	// Refusals are logged at most once per logInterval, with the number
	// not logged since.
	logMu     sync.Mutex
	lastLog   time.Time
	unlogged  uint64
	nowForLog func() time.Time
}

// New returns a Limiter that holds at most max unauthenticated connections
// at once, each counted for at most hold. name says which listener it
// guards in its log lines ("the controller port 127.0.0.1:9091").
func New(max int, hold time.Duration, name string) *Limiter {
	l := &Limiter{max: int64(max), hold: hold, name: name, nowForLog: time.Now}
	l.log.Store(slog.Default())
	return l
}

// SetLogger makes l log to log from now on.
func (l *Limiter) SetLogger(log *slog.Logger) {
	if log != nil {
		l.log.Store(log)
	}
}

// Admit counts c, just accepted, as unauthenticated and returns it wrapped
// (Authenticated and Close uncount it), or, when max are already counted,
// closes c, counts the refusal and returns false.
func (l *Limiter) Admit(c net.Conn) (net.Conn, bool) {
	if l.pending.Add(1) > l.max {
		l.pending.Add(-1)
		_ = c.Close()
		l.refused.Add(1)
		l.logRefusal()
		return nil, false
	}
	lc := &conn{Conn: c, l: l}
	// The timer only ends the count; it never reads lc.timer, which is
	// set before lc is handed to anyone.
	lc.timer = time.AfterFunc(l.hold, lc.uncount)
	return lc, true
}

// Pending is the number of connections counted now.
func (l *Limiter) Pending() int { return int(l.pending.Load()) }

// Refused is the number of connections refused so far.
func (l *Limiter) Refused() uint64 { return l.refused.Load() }

func (l *Limiter) logRefusal() {
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
	l.log.Load().Warn("refused a connection: too many connections whose peer has not yet authenticated",
		"listener", l.name, "max", l.max, "refused_total", l.refused.Load(), "similar_refusals_not_logged", unlogged)
}

// Collectors are l's metrics: the connections counted now and those
// refused so far.
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

// conn is an admitted connection, counted until uncount.
type conn struct {
	net.Conn
	l     *Limiter
	once  sync.Once
	timer *time.Timer
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
	return c.Conn.Close()
}

// NetConn is the connection c wraps.
func (c *conn) NetConn() net.Conn { return c.Conn }

// Authenticated tells the Limiter that admitted c, or the connection c
// wraps (through NetConn, as *tls.Conn has), that its peer is
// authenticated: it no longer counts. It does nothing for a connection no
// Limiter admitted, and nothing the second time.
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
