package main

import (
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/tlsauth"
)

// TestStartDevMetrics: keel dev --metrics gives every node its own server on
// a free port, answering /healthz and /readyz; without it, nothing listens
// and nodes register their metrics nowhere.
func TestStartDevMetrics(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	off, err := startDevMetrics(make([]string, 2), false, make([]*tlsauth.Config, 2), log)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range off {
		if m.registerer() != nil || m.describe() != "" {
			t.Fatalf("metrics off: registerer %v, describe %q", m.registerer(), m.describe())
		}
	}

	on, err := startDevMetrics([]string{"127.0.0.1:0", "127.0.0.1:0"}, false, make([]*tlsauth.Config, 2), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopDevMetrics(on) })
	if on[0].describe() == on[1].describe() {
		t.Fatalf("two nodes share %q", on[0].describe())
	}
	on[1].setReady(func() error { return nil })
	for i, want := range []int{http.StatusServiceUnavailable, http.StatusOK} {
		base := strings.TrimSuffix(strings.TrimPrefix(on[i].describe(), "  metrics "), "/metrics")
		if got := get(t, base+"/healthz"); got != http.StatusOK {
			t.Errorf("node %d /healthz: %d", i, got)
		}
		if got := get(t, base+"/readyz"); got != want {
			t.Errorf("node %d /readyz: %d, want %d", i, got, want)
		}
	}
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestStartDevMetrics_TLS: keel dev --tls --metrics serves each node's
// metrics over HTTPS with the node's certificate, to clients holding a
// certificate from the dev CA only; --pprof adds the profiler, for admin
// certificates only.
func TestStartDevMetrics_TLS(t *testing.T) {
	d, err := makeDevCerts(filepath.Join(t.TempDir(), "tls"), 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := startDevMetrics([]string{"127.0.0.1:0", "127.0.0.1:0"}, true, d.nodes(1, 1), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopDevMetrics(ms) })
	admin, err := tlsauth.Load(d.admin.Cert, d.admin.Key, d.admin.CA)
	if err != nil {
		t.Fatal(err)
	}
	broker, err := tlsauth.Load(filepath.Join(d.dir, "broker-1.pem"), filepath.Join(d.dir, "broker-1-key.pem"), d.admin.CA)
	if err != nil {
		t.Fatal(err)
	}
	withCert := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: admin.Client()}}
	asBroker := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: broker.Client()}}
	without := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: admin.Client().RootCAs}}}
	for i, m := range ms {
		base := strings.TrimSuffix(strings.TrimPrefix(m.describe(), "  metrics "), "/metrics")
		if !strings.HasPrefix(base, "https://") {
			t.Fatalf("node %d: %q, want https", i, m.describe())
		}
		for _, path := range []string{"/healthz", "/debug/pprof/"} {
			resp, err := withCert.Get(base + path)
			if err != nil {
				t.Fatalf("node %d: GET %s with the admin certificate: %v", i, path, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("node %d: GET %s: %s", i, path, resp.Status)
			}
		}
		// Another role may scrape, but only an admin may profile.
		for path, want := range map[string]int{"/metrics": http.StatusOK, "/debug/pprof/": http.StatusForbidden} {
			resp, err := asBroker.Get(base + path)
			if err != nil {
				t.Fatalf("node %d: GET %s with a broker certificate: %v", i, path, err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("node %d: GET %s with a broker certificate: %s, want %d", i, path, resp.Status, want)
			}
		}
		if resp, err := without.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			t.Errorf("node %d: GET /healthz without a client certificate: %s, want refused", i, resp.Status)
		}
	}
}

// TestPprof_NeedsMetrics: --pprof alone is refused, in one line, before
// anything starts.
func TestPprof_NeedsMetrics(t *testing.T) {
	addr := freeAddr(t)
	for _, args := range [][]string{
		{"controller", "--node-id", "1", "--data-dir", t.TempDir(), "--voters", "1@" + addr, "--pprof"},
		{"broker", "--broker-id", "1", "--data-dir", t.TempDir(), "--listen", addr, "--pprof"},
	} {
		_, err := runKeel(t, args...)
		if err == nil || errorLine(err) != errPprofWithoutMetrics.Error() {
			t.Errorf("keel %s: %v, want %q", strings.Join(args, " "), err, errPprofWithoutMetrics)
		}
	}
	_, err := runKeel(t, "dev", "--pprof", "--metrics=false")
	if err == nil || !strings.Contains(err.Error(), "--metrics=false turns off") {
		t.Errorf("keel dev --pprof --metrics=false: %v, want a refusal naming --metrics", err)
	}
}
