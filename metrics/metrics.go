// Package metrics serves a process's Prometheus metrics over HTTP: a
// registry of its own (not the global one) holding the Go runtime collector
// and the process collector, ready for Keel's own metrics to join.
//
// The Go collector includes the runtime/metrics value /gc/heap/live:bytes,
// exposed as go_gc_heap_live_bytes: the heap held by live objects as of the
// last garbage collection, which is what `keel bench` reports as a
// controller's heap. /healthz answers 200 while the process serves; the
// caller mounts /readyz (WithHandler, ReadyHandler), since only it knows
// what ready means.
//
// What the listener exposes is kept small by default: net/http/pprof
// (which profiles the process and shows its command line) only WithPprof;
// an address with an empty host (":9100") binds 127.0.0.1, not every
// interface; and WithTLS serves HTTPS, requiring whatever client
// certificate its config requires.
package metrics

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/keel-dev/keel/internal/connlimit"
)

// HeapLiveMetric is the name under which /gc/heap/live:bytes is exposed.
const HeapLiveMetric = "go_gc_heap_live_bytes"

// NewRegistry returns a registry with the Go collector (its default
// metrics plus /gc/heap/live:bytes) and the process collector.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
			collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)},
		)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// Server is a running metrics endpoint.
type Server struct {
	lis    net.Listener
	srv    *http.Server
	scheme string
	done   chan struct{}
}

// serveConfig is what Serve's options set.
type serveConfig struct {
	mux        *http.ServeMux
	tls        *tls.Config
	pprof      bool
	pprofAllow func(*http.Request) error
	conns      *connlimit.Limiter
}

// WithConns bounds the connections the listener holds to lim, counted
// from accept (before TLS), logging refusals to log; their count and
// refusals are metrics in reg (connlimit.ListenerCollectors, "metrics").
func WithConns(lim connlimit.Limits, log *slog.Logger) Option {
	return func(c *serveConfig) {
		// The hold outlasts ReadHeaderTimeout, which bounds the TLS
		// handshake and the first request.
		c.conns = connlimit.NewLimits(lim, 2*readHeaderTimeout, "the metrics listener")
		c.conns.SetLogger(log)
	}
}

const (
	// readHeaderTimeout bounds the TLS handshake and a request's headers.
	readHeaderTimeout = 10 * time.Second
	// idleTimeout closes a kept-alive connection with no request for this
	// long: a scraper's comes back every scrape interval.
	idleTimeout = 2 * time.Minute
)

// Option adds to what Serve serves, or changes how.
type Option func(*serveConfig)

// WithHandler mounts h at pattern (http.ServeMux syntax) beside /metrics:
// how a process adds its /readyz.
func WithHandler(pattern string, h http.Handler) Option {
	return func(c *serveConfig) { c.mux.Handle(pattern, h) }
}

// WithPprof mounts net/http/pprof under /debug/pprof/:
// /debug/pprof/heap?gc=1 runs a collection first, which makes
// go_gc_heap_live_bytes current. Without it those paths are 404: a profile
// shows what the process holds, and /debug/pprof/cmdline its command line,
// key paths included. allow, if set, decides each request first: an error
// is a 403 with its text.
func WithPprof(allow func(*http.Request) error) Option {
	return func(c *serveConfig) { c.pprof, c.pprofAllow = true, allow }
}

// WithTLS serves HTTPS with cfg (a server config: its certificate, and
// the client certificates it requires) instead of plain HTTP. Nil keeps
// plain HTTP.
func WithTLS(cfg *tls.Config) Option {
	return func(c *serveConfig) { c.tls = cfg }
}

// ListenAddr is the address Serve binds for addr: addr itself, except that
// an empty host (":9100") is 127.0.0.1, so the listener is loopback unless
// a host is given (0.0.0.0 or [::] for every interface). An empty addr
// stays empty.
func ListenAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "" {
		return addr
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// ReadyHandler answers /readyz from check: 200 "ready" when it returns nil,
// and otherwise 503 with its error as the body, saying why not.
func ReadyHandler(check func() error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := check(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		fmt.Fprintln(w, "ready")
	})
}

// Serve binds addr (ListenAddr: an empty host is loopback) and serves reg
// at /metrics, /healthz (200 as long as the process serves: liveness),
// pprof at /debug/pprof/ WithPprof, and whatever opts mount, until Close:
// over HTTPS WithTLS, else plain HTTP. A bind failure is returned at once,
// naming the address.
func Serve(addr string, reg *prometheus.Registry, opts ...Option) (*Server, error) {
	cfg := &serveConfig{mux: http.NewServeMux()}
	mux := cfg.mux
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprintln(w, "ok")
	})
	for _, opt := range opts {
		opt(cfg)
	}
	if cfg.pprof {
		guard := func(h http.HandlerFunc) http.HandlerFunc {
			if cfg.pprofAllow == nil {
				return h
			}
			return func(w http.ResponseWriter, r *http.Request) {
				if err := cfg.pprofAllow(r); err != nil {
					http.Error(w, err.Error(), http.StatusForbidden)
					return
				}
				h(w, r)
			}
		}
		mux.HandleFunc("/debug/pprof/", guard(pprof.Index))
		mux.HandleFunc("/debug/pprof/cmdline", guard(pprof.Cmdline))
		mux.HandleFunc("/debug/pprof/profile", guard(pprof.Profile))
		mux.HandleFunc("/debug/pprof/symbol", guard(pprof.Symbol))
		mux.HandleFunc("/debug/pprof/trace", guard(pprof.Trace))
	}
	lis, err := net.Listen("tcp", ListenAddr(addr))
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %v", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout, TLSConfig: cfg.tls}
	if cfg.conns != nil {
		for _, c := range cfg.conns.ListenerCollectors("metrics") {
			if err := reg.Register(c); err != nil {
				lis.Close()
				return nil, fmt.Errorf("--metrics-addr %s: %v", addr, err)
			}
		}
		lis = cfg.conns.Listener(lis)
		// A connection whose first request has arrived (through TLS,
		// if on) is a peer's, no longer a stranger's.
		srv.ConnState = func(c net.Conn, st http.ConnState) {
			if st == http.StateActive {
				connlimit.Authenticated(c)
			}
		}
	}
	s := &Server{
		lis:    lis,
		srv:    srv,
		scheme: "http",
		done:   make(chan struct{}),
	}
	if cfg.tls != nil {
		s.scheme = "https"
	}
	go func() {
		defer close(s.done)
		if cfg.tls != nil {
			_ = s.srv.ServeTLS(lis, "", "") // the certificate is in TLSConfig
			return
		}
		_ = s.srv.Serve(lis)
	}()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// URL is the server's base URL: http://ADDR, or https://ADDR WithTLS.
func (s *Server) URL() string { return s.scheme + "://" + s.Addr() }

// Close stops the server: requests in flight get a moment to finish, then
// every connection is closed. It waits for the serving goroutine.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = s.srv.Close()
	}
	<-s.done
	return err
}
