package main

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
	"github.com/keel-dev/keel/tlsauth"
)

// testCerts writes a throwaway CA's certificates for names into a temp dir.
func testCerts(t *testing.T, names ...string) (*tlsauth.CA, map[string]tlsauth.Files) {
	t.Helper()
	ca, err := tlsauth.NewCA("keel cmd test CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]tlsauth.Files{}
	for _, n := range names {
		if files[n], err = ca.WriteFiles(dir, n); err != nil {
			t.Fatal(err)
		}
	}
	return ca, files
}

// TestTLSFlags_Refused: every command refuses a partial or unreadable set of
// --tls-* flags with one line naming the flag, before it starts anything.
func TestTLSFlags_Refused(t *testing.T) {
	_, files := testCerts(t, "admin", "broker-1")
	admin, brk := files["admin"], files["broker-1"]
	missing := filepath.Join(t.TempDir(), "missing.pem")
	addr := freeAddr(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "admin command, cert only", args: []string{"quorum", "status", "--tls-cert", admin.Cert},
			want: "--tls-cert, --tls-key and --tls-ca go together: --tls-key and --tls-ca are missing"},
		{name: "admin command, no CA", args: []string{"topic", "list", "--tls-cert", admin.Cert, "--tls-key", admin.Key},
			want: "--tls-cert, --tls-key and --tls-ca go together: --tls-ca is missing"},
		{name: "broker inspect, unreadable CA", args: []string{"broker", "inspect", "--address", addr, "--tls-ca", missing, "--tls-cert", admin.Cert, "--tls-key", admin.Key},
			want: "--tls-ca " + missing + ": no such file or directory"},
		{name: "controller, key only", args: []string{"controller", "--node-id", "1", "--data-dir", t.TempDir(), "--voters", "1@" + addr, "--tls-key", admin.Key},
			want: "--tls-cert and --tls-ca are missing"},
		{name: "controller with a broker's certificate", args: append([]string{"controller", "--node-id", "1", "--data-dir", t.TempDir(), "--voters", "1@" + addr}, brk.Flags()...),
			want: "--tls-cert " + brk.Cert + " is for broker-1, not controller-1 (this node's --node-id)"},
		{name: "broker, unreadable key", args: []string{"broker", "--broker-id", "1", "--listen", addr, "--data-dir", t.TempDir(), "--tls-ca", admin.CA, "--tls-cert", brk.Cert, "--tls-key", missing},
			want: "--tls-key " + missing + ": no such file or directory"},
		{name: "dev makes its own", args: append([]string{"dev"}, admin.Flags()...),
			want: "keel dev makes its own certificates: use --tls, not --tls-cert, --tls-key or --tls-ca"},
		{name: "bench's local quorum is plaintext", args: append([]string{"bench", "--scenarios", "create"}, admin.Flags()...),
			want: "--tls-cert, --tls-key and --tls-ca apply to a running quorum (--controllers)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runKeel(t, tt.args...)
			if err == nil || !strings.Contains(errorLine(err), tt.want) {
				t.Fatalf("keel %s: %v, want an error containing %q", strings.Join(tt.args, " "), err, tt.want)
			}
			if strings.Contains(errorLine(err), "\n") {
				t.Errorf("error spans lines: %q", errorLine(err))
			}
		})
	}
}

// serveTLSGRPC serves register's services with cfg's certificate and the
// authorization of every call.
func serveTLSGRPC(t *testing.T, cfg *tlsauth.Config, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(rpc.ServerOptions(rpc.WithTLS(cfg))...)
	register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// TestTLSFlags_AdminCommands: the admin commands reach a TLS server with
// the --tls-* flags, and are refused without them.
func TestTLSFlags_AdminCommands(t *testing.T) {
	ca, files := testCerts(t, "admin", "broker-1")
	ctrl, err := ca.Config("controller-1")
	if err != nil {
		t.Fatal(err)
	}
	brokerCfg, err := ca.Config("broker-7")
	if err != nil {
		t.Fatal(err)
	}
	ctrlAddr := serveTLSGRPC(t, ctrl, func(g *grpc.Server) {
		keelpb.RegisterControllerServiceServer(g, &fakeListBrokers{brokers: []*keelpb.BrokerInfo{{Id: 7, Epoch: 3, Address: "127.0.0.1:1", State: "active"}}})
	})
	brokerAddr := serveTLSGRPC(t, brokerCfg, func(g *grpc.Server) {
		keelpb.RegisterBrokerServiceServer(g, &fakeInspect{resp: &keelpb.InspectResponse{BrokerId: 7, ControllerId: -1}})
	})

	for _, cn := range []string{"admin", "broker-1"} {
		out, err := runKeel(t, append([]string{"broker", "list", "--controllers", ctrlAddr, "-o", "json"}, files[cn].Flags()...)...)
		if err != nil || !strings.Contains(out, `"id": 7`) {
			t.Errorf("broker list as %s: %v\n%s", cn, err, out)
		}
	}
	out, err := runKeel(t, append([]string{"broker", "inspect", "--address", brokerAddr, "-o", "json"}, files["admin"].Flags()...)...)
	if err != nil || !strings.Contains(out, `"broker_id": 7`) {
		t.Errorf("broker inspect as admin: %v\n%s", err, out)
	}

	// Without the flags: refused, Unavailable.
	for _, args := range [][]string{
		{"broker", "list", "--controllers", ctrlAddr, "--timeout", "2s"},
		{"broker", "inspect", "--address", brokerAddr, "--timeout", "2s"},
	} {
		_, err := runKeel(t, args...)
		if status.Code(err) != codes.Unavailable {
			t.Errorf("plaintext keel %s: %v, want Unavailable", strings.Join(args, " "), err)
		}
		// gRPC's words do not say TLS; the line the operator sees does.
		if line := errorLine(err); !strings.Contains(line, "--tls-ca, --tls-cert and --tls-key") {
			t.Errorf("plaintext keel %s: error line %q has no TLS hint", strings.Join(args, " "), line)
		}
	}
	// An admin command with a broker's certificate: PermissionDenied.
	_, err = runKeel(t, append([]string{"quorum", "verify", "--controllers", ctrlAddr, "--timeout", "2s"}, files["broker-1"].Flags()...)...)
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "AppendNoOp needs an admin certificate; the caller's is broker-1") {
		t.Errorf("quorum verify with a broker certificate: %v, want PermissionDenied", err)
	}
}

// TestMakeDevCerts: keel dev --tls's certificates load as their processes
// load them, each naming its identity.
func TestMakeDevCerts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	d, err := makeDevCerts(dir, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i := int32(1); i <= 3; i++ {
		if id := d.controller(i).Identity; id.Role != tlsauth.RoleController || id.ID != i {
			t.Errorf("controller %d identity = %+v", i, id)
		}
	}
	for i := int32(1); i <= 2; i++ {
		if id := d.broker(i).Identity; id.Role != tlsauth.RoleBroker || id.ID != i {
			t.Errorf("broker %d identity = %+v", i, id)
		}
	}
	want := fmt.Sprintf("--tls-ca %s --tls-cert %s --tls-key %s", filepath.Join(dir, "ca.pem"), filepath.Join(dir, "admin.pem"), filepath.Join(dir, "admin-key.pem"))
	if got := strings.Join(d.admin.Flags(), " "); got != want {
		t.Errorf("admin flags = %q, want %q", got, want)
	}
	admin, err := tlsauth.Load(d.admin.Cert, d.admin.Key, d.admin.CA)
	if err != nil || admin.Identity.Role != tlsauth.RoleAdmin {
		t.Errorf("admin certificate: %+v, %v", admin, err)
	}
	var nilCerts *devCerts
	if nilCerts.controller(1) != nil || nilCerts.broker(1) != nil {
		t.Error("no --tls must mean no TLS")
	}
}

// TestTLSHint: each TLS mismatch, as Go and gRPC word it, gets its hint;
// other failures none.
func TestTLSHint(t *testing.T) {
	tests := []struct {
		line, want string
	}{
		{`Unavailable: no controller answered; last error: connection error: desc = "error reading server preface: EOF"`, "if the cluster uses TLS"},
		{`Unavailable: connection error: desc = "transport: authentication handshake failed: tls: first record does not look like a TLS handshake"`, "does not use TLS"},
		{`Unavailable: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority`, "not signed by --tls-ca"},
		{`Unavailable: connection error: remote error: tls: certificate required`, "wants a client certificate"},
		{`Unavailable: remote error: tls: unknown certificate authority`, "does not trust this certificate's CA"},
		{`Unavailable: remote error: tls: bad certificate`, "refused this certificate"},
		{`NotFound: unknown topic x`, ""},
		{`Unavailable: connection refused`, ""},
	}
	for _, tt := range tests {
		got := tlsHint(tt.line)
		if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
			t.Errorf("tlsHint(%q) = %q, want it to contain %q", tt.line, got, tt.want)
		}
	}
}
