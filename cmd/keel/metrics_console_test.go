package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/keel-dev/keel/console"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// refusingSource is a controller whose every read fails with err.
type refusingSource struct{ err error }

func (s refusingSource) DescribeQuorum(context.Context) (*keelpb.DescribeQuorumResponse, error) {
	return nil, s.err
}

func (s refusingSource) StaleImage(context.Context) (*fsm.Image, *keelpb.ReadSource, error) {
	return nil, nil, s.err
}

func (s refusingSource) DescribeFeatures(context.Context) (*keelpb.DescribeFeaturesResponse, error) {
	return nil, s.err
}

// TestMetricsServer_Console: a controller's metrics listener serves the
// console, "starting" until the node attaches, then the node's answers,
// and the listing names it; --console=false and a broker's listener serve
// none, and their / is no redirect.
func TestMetricsServer_Console(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	fetch := func(t *testing.T, url string) (int, string) {
		t.Helper()
		resp, err := noRedirect.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(body))
	}
	for _, tt := range []struct {
		name        string
		mode        console.Mode
		attach      bool
		wantAPI     int
		wantAPIBody string
		wantRoot    int
		wantListed  bool
	}{
		{name: "a controller starting", mode: console.Starting, wantAPI: http.StatusServiceUnavailable, wantAPIBody: "starting", wantRoot: http.StatusFound},
		{name: "a controller started", mode: console.Starting, attach: true, wantAPI: http.StatusServiceUnavailable, wantAPIBody: "the node's own refusal", wantRoot: http.StatusFound, wantListed: true},
		{name: "keel dev's controller", mode: console.IfAttached, attach: true, wantAPI: http.StatusServiceUnavailable, wantAPIBody: "the node's own refusal", wantRoot: http.StatusFound, wantListed: true},
		{name: "a broker", mode: console.IfAttached, wantAPI: http.StatusNotFound, wantRoot: http.StatusNotFound},
		{name: "--console=false", mode: console.Off, attach: true, wantAPI: http.StatusNotFound, wantRoot: http.StatusNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := startMetrics(metricsOptions{addr: "127.0.0.1:0", console: tt.mode}, log)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(m.stop)
			if tt.attach {
				m.attachConsole(refusingSource{err: errors.New("the node's own refusal")})
			}
			base := m.srv.URL()
			if code, body := fetch(t, base+"/console/api/overview"); code != tt.wantAPI || !strings.Contains(body, tt.wantAPIBody) {
				t.Errorf("GET /console/api/overview: %d %q, want %d with %q", code, body, tt.wantAPI, tt.wantAPIBody)
			}
			if code, _ := fetch(t, base+"/"); code != tt.wantRoot {
				t.Errorf("GET /: %d, want %d", code, tt.wantRoot)
			}
			if code, _ := fetch(t, base+"/metrics"); code != http.StatusOK {
				t.Errorf("GET /metrics: %d", code)
			}
			if listed := strings.Contains(m.describe(), "console "+base+"/console/"); listed != tt.wantListed {
				t.Errorf("describe() = %q; console listed %v, want %v", m.describe(), listed, tt.wantListed)
			}
		})
	}
	if consoleMode(true) != console.Starting || consoleMode(false) != console.Off {
		t.Error("--console maps to the wrong modes")
	}
}
