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
// go_gc_heap_live_bytes current.
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

// Serve binds addr and serves reg at /metrics (and pprof at /debug/pprof/)
// until Close. A bind failure is returned at once, naming the address.
func Serve(addr string, reg *prometheus.Registry) (*Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
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
