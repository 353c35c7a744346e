package main

import (
	"log/slog"

	"github.com/keel-dev/keel/metrics"
)

// startMetrics serves the process's metrics at addr (--metrics-addr) and
// returns the function that stops the server. An empty addr serves nothing.
func startMetrics(addr string, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	srv, err := metrics.Serve(addr, metrics.NewRegistry())
	if err != nil {
		return nil, err
	}
	log.Info("serving metrics", "address", "http://"+srv.Addr()+"/metrics")
	return func() {
		if err := srv.Close(); err != nil {
			log.Warn("metrics server did not stop cleanly", "err", err)
		}
	}, nil
}
