package integration

// The metrics listener of a TLS cluster: HTTPS with the node's certificate,
// for clients holding a certificate from the cluster's CA only; pprof only
// with --pprof, and then for admins only.

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

// TestMetrics_TLS runs a TLS controller (with --pprof) and broker (without),
// each with --metrics-addr, and checks who gets what: a probe certificate
// scrapes /metrics and reads /healthz and /readyz, and checks gRPC health,
// but may call nothing else and may not profile; an admin may profile
// where --pprof is on; plain HTTP, no client certificate and another CA's
// certificate get nothing.
func TestMetrics_TLS(t *testing.T) {
	pki := newTestPKI(t)
	c := startCluster(t, 1, withTLS(pki), withMetrics(), withControllerFlags("--pprof"))
	c.WaitForActive(t, activeTimeout)
	c.StartBroker(1, withBrokerMetrics())
	c.WaitForBrokers(t, allActive(1))

	https := func(cfg *tls.Config) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	probe, admin := https(pki.config("probe-prometheus").Client()), https(pki.config("admin").Client())
	noCert := https(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pki.config("admin").Client().RootCAs})
	stranger := newTestPKI(t)
	otherCA := https(stranger.config("probe").Client())
	otherCA.Transport.(*http.Transport).TLSClientConfig.RootCAs = pki.config("admin").Client().RootCAs

	get := getBody

	for _, tt := range []struct {
		name, addr, metric string
		pprof              bool
	}{
		{"controller 1", c.node(1).MetricsAddr(), "keel_controller_active_controller_count", true},
		{"broker 1", c.broker(1).MetricsAddr(), "keel_broker_epoch", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			base := "https://" + tt.addr
			code, body, err := get(probe, base+"/metrics")
			if err != nil || code != http.StatusOK || !strings.Contains(body, tt.metric) {
				t.Fatalf("a probe's GET /metrics: %d, %v; want 200 with %s", code, err, tt.metric)
			}
			if code, _, err := get(probe, base+"/healthz"); err != nil || code != http.StatusOK {
				t.Errorf("a probe's GET /healthz: %d, %v", code, err)
			}
			poll.UntilState(t, brokersTimeout, tt.name+"'s /readyz to answer a probe 200", func() (bool, string) {
				code, body, err := get(probe, base+"/readyz")
				return err == nil && code == http.StatusOK, fmt.Sprintf("%d %q %v", code, strings.TrimSpace(body), err)
			})

			// Profiling: 404 without --pprof; with it, 403 but for an admin.
			wantProbe, wantAdmin := http.StatusNotFound, http.StatusNotFound
			if tt.pprof {
				wantProbe, wantAdmin = http.StatusForbidden, http.StatusOK
			}
			for who, want := range map[string]int{"probe": wantProbe, "admin": wantAdmin} {
				cl := map[string]*http.Client{"probe": probe, "admin": admin}[who]
				if code, body, err := get(cl, base+"/debug/pprof/cmdline"); err != nil || code != want {
					t.Errorf("%s's GET /debug/pprof/cmdline: %d %q, %v; want %d", who, code, strings.TrimSpace(body), err, want)
				}
			}

			// Nothing for anyone without a certificate from the CA.
			if code, _, err := get(http.DefaultClient, "http://"+tt.addr+"/metrics"); err == nil && code == http.StatusOK {
				t.Errorf("plain HTTP GET /metrics: %d, want no metrics", code)
			}
			for who, cl := range map[string]*http.Client{"no client certificate": noCert, "another CA's certificate": otherCA} {
				if code, _, err := get(cl, base+"/metrics"); err == nil {
					t.Errorf("%s: GET /metrics: %d, want the handshake refused", who, code)
				}
			}
		})
	}

	// The same probe certificate checks gRPC health, and may do nothing else.
	cc, err := grpc.NewClient(c.Addr(1), grpc.WithTransportCredentials(credentials.NewTLS(pki.config("probe-prometheus").Client())))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: keelpb.ControllerService_ServiceDesc.ServiceName}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("a probe's health check: %v, %v; want SERVING", resp, err)
	}
	for name, call := range map[string]func() error{
		"DescribeQuorum": func() error {
			_, err := keelpb.NewControllerServiceClient(cc).DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{})
			return err
		},
		"AddVoter": func() error {
			_, err := keelpb.NewControllerServiceClient(cc).AddVoter(ctx, &keelpb.AddVoterRequest{Id: 9, Address: "127.0.0.1:1"})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "a probe certificate (probe-prometheus) may only check health") {
			t.Errorf("a probe's %s: %v, want PermissionDenied", name, err)
		}
	}
}
