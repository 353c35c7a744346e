package metrics

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
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

	resp, err = http.Get("http://" + s.Addr() + "/debug/pprof/heap?gc=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /debug/pprof/heap: %s", resp.Status)
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
