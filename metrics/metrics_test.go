package metrics

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-dev/keel/tlsauth"
)

func TestServeExposesHeapAndProcessMetrics(t *testing.T) {
	s, err := Serve("127.0.0.1:0", NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			s.Close()
		}
	})
	resp, err := http.Get("http://" + s.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	text := string(body)
	for _, want := range []string{"\n" + HeapLiveMetric + " ", "\ngo_goroutines ", "\nprocess_resident_memory_bytes "} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", strings.TrimSpace(want))
		}
	}

	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	closed = true
	if _, err := http.Get("http://" + s.Addr() + "/metrics"); err == nil {
		t.Fatal("the server still answers after Close")
	}
}

func TestServeRefusesATakenAddress(t *testing.T) {
	s, err := Serve("127.0.0.1:0", NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	_, err = Serve(s.Addr(), NewRegistry())
	if err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
		t.Fatalf("second Serve on %s: %v, want an error naming --metrics-addr", s.Addr(), err)
	}
}

func TestServe_HealthzAndMountedReadyz(t *testing.T) {
	var ready atomic.Bool
	check := func() error {
		if ready.Load() {
			return nil
		}
		return errors.New("no leader known")
	}
	s, err := Serve("127.0.0.1:0", NewRegistry(), WithHandler("/readyz", ReadyHandler(check)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + s.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(body)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d, want 200", code)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no leader known") {
		t.Errorf("/readyz while not ready: %d %q, want 503 saying why", code, body)
	}
	ready.Store(true)
	if code, body := get("/readyz"); code != http.StatusOK || strings.TrimSpace(body) != "ready" {
		t.Errorf("/readyz when ready: %d %q, want 200 ready", code, body)
	}
}

// status GETs url with client and returns the status code.
func status(t *testing.T, client *http.Client, url string) int {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestServe_PprofOnlyWhenAsked: /debug/pprof/ is 404 unless WithPprof.
func TestServe_PprofOnlyWhenAsked(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []Option
		want int
	}{
		{"by default", nil, http.StatusNotFound},
		{"WithPprof", []Option{WithPprof(nil)}, http.StatusOK},
		{"WithPprof, refused", []Option{WithPprof(func(*http.Request) error { return errors.New("not you") })}, http.StatusForbidden},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Serve("127.0.0.1:0", NewRegistry(), tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap?gc=1", "/debug/pprof/symbol"} {
				if got := status(t, http.DefaultClient, s.URL()+path); got != tt.want {
					t.Errorf("GET %s: %d, want %d", path, got, tt.want)
				}
			}
			if got := status(t, http.DefaultClient, s.URL()+"/metrics"); got != http.StatusOK {
				t.Errorf("GET /metrics: %d", got)
			}
		})
	}
}

func TestListenAddr(t *testing.T) {
	for addr, want := range map[string]string{
		":9100":          "127.0.0.1:9100",
		":0":             "127.0.0.1:0",
		"0.0.0.0:9100":   "0.0.0.0:9100",
		"[::]:9100":      "[::]:9100",
		"10.0.0.1:9100":  "10.0.0.1:9100",
		"localhost:9100": "localhost:9100",
		"":               "",
		"nonsense":       "nonsense", // net.Listen names what is wrong
	} {
		if got := ListenAddr(addr); got != want {
			t.Errorf("ListenAddr(%q) = %q, want %q", addr, got, want)
		}
	}
}

// TestServe_EmptyHostIsLoopback: ":0" binds 127.0.0.1, not every interface.
func TestServe_EmptyHostIsLoopback(t *testing.T) {
	s, err := Serve(":0", NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	host, _, err := net.SplitHostPort(s.Addr())
	if err != nil || host != "127.0.0.1" {
		t.Fatalf("Serve(\":0\") listens on %s, want 127.0.0.1", s.Addr())
	}
}

// TestServe_TLSRequiresAClientCertificate: WithTLS serves HTTPS, and only
// to a client whose certificate the config accepts (here: any keel role
// from the CA, as keel's processes configure it).
func TestServe_TLSRequiresAClientCertificate(t *testing.T) {
	ca, err := tlsauth.NewCA("metrics test CA")
	if err != nil {
		t.Fatal(err)
	}
	cfg := func(cn string) *tlsauth.Config {
		t.Helper()
		c, err := ca.Config(cn)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	node := cfg("controller-1")
	s, err := Serve("127.0.0.1:0", NewRegistry(), WithTLS(node.Server(tlsauth.KeelRoles()...)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if !strings.HasPrefix(s.URL(), "https://") {
		t.Fatalf("URL %s, want https", s.URL())
	}
	client := func(tc *tls.Config) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	}
	for _, cn := range []string{"probe", "probe-prometheus", "admin", "broker-2", "controller-3"} {
		if got := status(t, client(cfg(cn).Client()), s.URL()+"/metrics"); got != http.StatusOK {
			t.Errorf("%s: GET /metrics over TLS: %d, want 200", cn, got)
		}
	}
	nobodyCert, nobodyKey, err := ca.Issue("nobody")
	if err != nil {
		t.Fatal(err)
	}
	nobody, err := tls.X509KeyPair(nobodyCert, nobodyKey)
	if err != nil {
		t.Fatal(err)
	}
	other, err := tlsauth.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := other.Config("probe")
	if err != nil {
		t.Fatal(err)
	}
	roots := cfg("probe").Client().RootCAs
	for name, tc := range map[string]*tls.Config{
		"no client certificate":        {MinVersion: tls.VersionTLS13, RootCAs: roots},
		"a certificate naming no role": {MinVersion: tls.VersionTLS13, RootCAs: roots, Certificates: []tls.Certificate{nobody}},
		"another CA's certificate":     {MinVersion: tls.VersionTLS13, RootCAs: roots, Certificates: stranger.Client().Certificates},
	} {
		resp, err := client(tc).Get(s.URL() + "/healthz")
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: GET /healthz: %s, want the handshake refused", name, resp.Status)
		}
	}
	// Plain HTTP gets no metrics.
	if got := status(t, http.DefaultClient, "http://"+s.Addr()+"/metrics"); got == http.StatusOK {
		t.Errorf("plain HTTP to the TLS listener: %d", got)
	}
}
