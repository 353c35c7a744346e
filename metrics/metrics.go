// Package metrics serves a process's Prometheus metrics over HTTP: a
// registry of its own (not the global one) holding the Go runtime collector
// and the process collector, ready for Keel's own metrics to join.
//
// The Go collector includes the runtime/metrics value /gc/heap/live:bytes,
// exposed as go_gc_heap_live_bytes: the heap held by live objects as of the
// last garbage collection, which is what `keel bench` reports as a
// controller's heap. The server also mounts net/http/pprof under
// /debug/pprof/, so a controller can be profiled where it runs;
// /debug/pprof/heap?gc=1 runs a collection first, which makes
// go_gc_heap_live_bytes current. /healthz answers 200 while the process
// serves; the caller mounts /readyz (WithHandler, ReadyHandler), since only
// it knows what ready means.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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
	lis  net.Listener
	srv  *http.Server
	done chan struct{}
}

// Option adds to what Serve serves.
type Option func(*http.ServeMux)

// WithHandler mounts h at pattern (http.ServeMux syntax) beside /metrics:
// how a process adds its /readyz.
func WithHandler(pattern string, h http.Handler) Option {
	return func(mux *http.ServeMux) { mux.Handle(pattern, h) }
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

// Serve binds addr and serves reg at /metrics, pprof at /debug/pprof/,
// /healthz (200 as long as the process serves: liveness) and whatever opts
// mount, until Close. A bind failure is returned at once, naming the
// address.
func Serve(addr string, reg *prometheus.Registry, opts ...Option) (*Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	for _, opt := range opts {
		opt(mux)
	}
	s := &Server{
		lis:  lis,
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(lis)
	}()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

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
