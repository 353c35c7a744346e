package metrics

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/connlimit"
	"github.com/keel-dev/keel/internal/poll"
)

// TestServe_WithConnsBoundsTheListener: beyond its bound the metrics
// listener closes a connection as soon as it is accepted and counts it;
// a connection whose request has been served no longer counts as
// unauthenticated; once one closes, a scrape gets through and shows the
// refusal.
func TestServe_WithConnsBoundsTheListener(t *testing.T) {
	reg := NewRegistry()
	s, err := Serve("127.0.0.1:0", reg, WithConns(connlimit.Limits{MaxConns: 2, MaxUnauthenticated: 1}, slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	get := func() (string, error) {
		resp, err := client.Get(s.URL() + "/metrics")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}
	// A kept-alive scrape: served, so no longer unauthenticated.
	if _, err := get(); err != nil {
		t.Fatal(err)
	}
	// A stranger takes the last connection; the next is refused.
	stranger, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	over, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	_ = over.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := over.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read on a connection over the bound: %v; want EOF (closed at once)", err)
	}
	stranger.Close()
	want := `keel_listener_connections_refused_total{listener="metrics",reason="listener"} 1`
	poll.Until(t, 10*time.Second, "a scrape that shows the refusal", func() bool {
		body, err := get()
		return err == nil && strings.Contains(body, want)
	})
}
