package main

import (
	"errors"
	"log/slog"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-dev/keel/metrics"
)

// metricsServer is a node's --metrics-addr: /metrics, pprof, /healthz and
// /readyz. The server starts before the node (so a taken address fails
// first), so /readyz answers "starting" until setReady.
type metricsServer struct {
	reg   *prometheus.Registry // nil when --metrics-addr is empty
	srv   *metrics.Server
	ready atomic.Pointer[func() error]
	log   *slog.Logger
}

var errStarting = errors.New("starting")

// startMetrics serves the process's metrics at addr (--metrics-addr). An
// empty addr serves nothing, and the result's methods do nothing.
func startMetrics(addr string, log *slog.Logger) (*metricsServer, error) {
	m := &metricsServer{log: log}
	if addr == "" {
		return m, nil
	}
	m.reg = metrics.NewRegistry()
	srv, err := metrics.Serve(addr, m.reg, metrics.WithHandler("/readyz", metrics.ReadyHandler(m.checkReady)))
	if err != nil {
		return nil, err
	}
	m.srv = srv
	log.Info("serving metrics", "address", "http://"+srv.Addr()+"/metrics")
	return m, nil
}

// registerer is where the node registers its metrics: nil (none) when off.
func (m *metricsServer) registerer() prometheus.Registerer {
	if m.reg == nil {
		return nil // not a nil *Registry in a non-nil interface
	}
	return m.reg
}

// setReady makes /readyz answer from ready, the started node's check.
func (m *metricsServer) setReady(ready func() error) { m.ready.Store(&ready) }

func (m *metricsServer) checkReady() error {
	if f := m.ready.Load(); f != nil {
		return (*f)()
	}
	return errStarting
}

// describe is "  metrics http://ADDR/metrics" for a listing, or "" when off.
func (m *metricsServer) describe() string {
	if m.srv == nil {
		return ""
	}
	return "  metrics http://" + m.srv.Addr() + "/metrics"
}

// stop stops the server, if one runs.
func (m *metricsServer) stop() {
	if m.srv == nil {
		return
	}
	if err := m.srv.Close(); err != nil {
		m.log.Warn("metrics server did not stop cleanly", "err", err)
	}
}
