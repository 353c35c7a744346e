package main

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// TestStartDevMetrics: keel dev --metrics gives every node its own server on
// a free port, answering /healthz and /readyz; without it, nothing listens
// and nodes register their metrics nowhere.
func TestStartDevMetrics(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	off, err := startDevMetrics(false, 2, log)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range off {
		if m.registerer() != nil || m.describe() != "" {
			t.Fatalf("metrics off: registerer %v, describe %q", m.registerer(), m.describe())
		}
	}

	on, err := startDevMetrics(true, 2, log)
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
