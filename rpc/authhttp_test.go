package rpc

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/keel-dev/keel/proto/keelpb"
)

// TestAuthorizeHTTP: an HTTP request on a node's listener is decided by the
// same rule as the gRPC method it names: any keel role but a probe reads
// metadata, only an admin profiles or snapshots; a rule that reads the
// request is refused, and plaintext is open.
func TestAuthorizeHTTP(t *testing.T) {
	describe := keelpb.ControllerService_DescribeTopic_FullMethodName
	snapshot := keelpb.ControllerService_FetchSnapshot_FullMethodName
	heartbeat := keelpb.ControllerService_BrokerHeartbeat_FullMethodName
	for _, tt := range []struct {
		name, cn, method string
		plaintext        bool
		wantErr          string // "" allowed
	}{
		{name: "plaintext", plaintext: true, method: describe},
		{name: "admin reads", cn: "admin", method: describe},
		{name: "named admin reads", cn: "admin-alice", method: describe},
		{name: "broker reads", cn: "broker-3", method: describe},
		{name: "controller reads", cn: "controller-1", method: describe},
		{name: "probe may not read", cn: "probe-prometheus", method: describe, wantErr: "a probe certificate (probe-prometheus) may only check health"},
		{name: "broker may not snapshot", cn: "broker-3", method: snapshot, wantErr: "FetchSnapshot needs an admin certificate; the caller's is broker-3"},
		{name: "admin snapshots", cn: "admin", method: snapshot},
		{name: "no keel role", cn: "orders-app", method: describe, wantErr: "names no keel role"},
		{name: "a rule that reads the request", cn: "broker-1", method: heartbeat, wantErr: "reads the request"},
		{name: "a method without a rule", cn: "admin", method: "/keel.v1.ControllerService/Nothing", wantErr: "no authorization rule"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/console/api/overview", nil)
			r.TLS = nil
			if !tt.plaintext {
				r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: tt.cn}}}}
			}
			err := AuthorizeHTTP(r, tt.method)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
			case err != nil && strings.Contains(err.Error(), "\n"):
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
}
