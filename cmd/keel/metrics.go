package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/console"
	"github.com/keel-dev/keel/internal/connlimit"
	"github.com/keel-dev/keel/metrics"
	"github.com/keel-dev/keel/tlsauth"
)

// metricsServer is a node's --metrics-addr: /metrics, /healthz, /readyz,
// pprof with --pprof, and a controller's console (/console/, and / sent
// there) unless --console=false; HTTPS with the node's certificate when
// TLS is on.
// The server starts before the node (so a taken address fails first), so
// /readyz answers "starting" until setReady.
type metricsServer struct {
	reg   *prometheus.Registry // nil when --metrics-addr is empty
	srv   *metrics.Server
	ready atomic.Pointer[func() error]
	// console is nil with --console=false; on a broker's listener it is
	// never attached, and serves nothing.
	console *console.Console
	log     *slog.Logger
}

var errStarting = errors.New("starting")

// metricsOptions are a node's --metrics-addr, --pprof and TLS.
type metricsOptions struct {
	addr  string
	pprof bool
	tls   *tlsauth.Config // nil: plain HTTP
	// conns bounds the listener's connections; the zero value none.
	conns connlimit.Limits
	// console is whether the listener may serve a console (once a
	// controller attaches one) and what it answers before.
	console console.Mode
}

// errPprofWithoutMetrics: --pprof serves on the metrics listener.
var errPprofWithoutMetrics = errors.New("--pprof serves the profiler on the metrics listener: give --metrics-addr too")

// check refuses --pprof without --metrics-addr.
func (o metricsOptions) check() error {
	if o.pprof && o.addr == "" {
		return errPprofWithoutMetrics
	}
	return nil
}

// startMetrics serves the process's metrics at o.addr (--metrics-addr),
// over HTTPS requiring a client certificate of any keel role from the CA
// when o.tls is set. An empty addr serves nothing, and the result's
// methods do nothing.
func startMetrics(o metricsOptions, log *slog.Logger) (*metricsServer, error) {
	m := &metricsServer{log: log}
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.addr == "" {
		return m, nil
	}
	m.reg = metrics.NewRegistry()
	opts := []metrics.Option{metrics.WithHandler("/readyz", metrics.ReadyHandler(m.checkReady))}
	if o.pprof {
		var allow func(*http.Request) error
		if o.tls != nil {
			allow = pprofNeedsAdmin
		}
		opts = append(opts, metrics.WithPprof(allow))
	}
	if o.tls != nil {
		// Any keel role, a probe's included: scraping and health checks
		// need no more than that.
		opts = append(opts, metrics.WithTLS(o.tls.Server(tlsauth.KeelRoles()...)))
	}
	if o.conns != (connlimit.Limits{}) {
		opts = append(opts, metrics.WithConns(o.conns, log))
	}
	if o.console != console.Off {
		// Served once a controller attaches it (attachConsole); it
		// authorizes every request itself, a probe's refused.
		m.console = console.New(o.console, log)
		opts = append(opts, metrics.WithHandler(console.Path, m.console), metrics.WithHandler(console.RootPattern, m.console.Redirect()))
	}
	srv, err := metrics.Serve(o.addr, m.reg, opts...)
	if err != nil {
		return nil, err
	}
	m.srv = srv
	log.Info("serving metrics", "address", srv.URL()+"/metrics", "pprof", o.pprof, "client_certificate_required", o.tls != nil)
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

// attachConsole makes the console, if served, show src, the started
// controller's reads.
func (m *metricsServer) attachConsole(src console.Source) {
	if m.console == nil || m.srv == nil {
		return
	}
	m.console.Attach(src)
	m.log.Info("serving the console", "address", m.srv.URL()+console.Path)
}

// describe is "  metrics http://ADDR/metrics" (https with TLS) for a
// listing, then "  console http://ADDR/console/" once one is attached, or
// "" when off.
func (m *metricsServer) describe() string {
	if m.srv == nil {
		return ""
	}
	s := "  metrics " + m.srv.URL() + "/metrics"
	if m.console != nil && m.console.Attached() {
		s += "  console " + m.srv.URL() + console.Path
	}
	return s
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

// addMetricsFlags gives a command that runs a node --metrics-addr and
// --pprof.
func addMetricsFlags(cmd *cobra.Command, addr *string, pprof *bool) {
	cmd.Flags().StringVar(addr, "metrics-addr", "",
		"serve /metrics, /healthz and /readyz at ADDR (HTTPS under TLS); an empty host is 127.0.0.1; empty: off")
	cmd.Flags().BoolVar(pprof, "pprof", false,
		"also serve Go's profiler at /debug/pprof/ on --metrics-addr (it shows memory and command line)")
}

// addConsoleFlag gives keel controller --console.
func addConsoleFlag(cmd *cobra.Command, on *bool) {
	cmd.Flags().BoolVar(on, "console", true,
		"serve the read-only web console at /console/ on --metrics-addr (with TLS, to controller, broker and admin certificates)")
}

// pprofNeedsAdmin lets only an admin certificate profile a TLS node: a
// profile is an operator's tool, and a probe's or a broker's certificate
// may scrape but has no business reading the process's memory.
func pprofNeedsAdmin(r *http.Request) error {
	if r.TLS == nil {
		return errors.New("pprof needs an admin certificate")
	}
	id, err := tlsauth.PeerIdentity(r.TLS.PeerCertificates)
	if err != nil {
		return err
	}
	if id.Role != tlsauth.RoleAdmin {
		return fmt.Errorf("pprof needs an admin certificate; the caller's is %s", id)
	}
	return nil
}

// consoleMode is keel controller's console for --console.
func consoleMode(on bool) console.Mode {
	if on {
		return console.Starting
	}
	return console.Off
}
