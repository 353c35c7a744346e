package rpc

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/tlsauth"
)

// peerFake answers LeaderContact as node id.
type peerFake struct {
	keelpb.UnimplementedPeerServiceServer
	id int32
}

func (p peerFake) LeaderContact(_ context.Context, req *keelpb.LeaderContactRequest) (*keelpb.LeaderContactResponse, error) {
	return &keelpb.LeaderContactResponse{NodeId: p.id, Term: 7, LeaderId: req.GetLeaderId(), SinceContactMicros: 1500, State: "Follower"}, nil
}

// servePeer serves a peerFake answering as id on loopback, with Keel's
// server options (TLS with cfg unless it is nil).
func servePeer(t *testing.T, cfg *tlsauth.Config, id int32) string {
	t.Helper()
	return serveWith(t, ServerOptions(WithTLS(cfg)), func(g *grpc.Server) { keelpb.RegisterPeerServiceServer(g, peerFake{id: id}) })
}

// TestPeerClient_LeaderContact: a controller's question to another is
// answered by the controller asked, and only by it; with TLS only a
// controller certificate may ask, and the answer must come from the
// certificate of the controller meant, whatever address it was dialled at.
func TestPeerClient_LeaderContact(t *testing.T) {
	ca, err := tlsauth.NewCA("keel peer test CA")
	if err != nil {
		t.Fatal(err)
	}
	certs := map[string]*tlsauth.Config{}
	for _, cn := range []string{"controller-1", "controller-2", "admin", "broker-1"} {
		if certs[cn], err = ca.Config(cn); err != nil {
			t.Fatal(err)
		}
	}
	plain := servePeer(t, nil, 2)
	secure := servePeer(t, certs["controller-2"], 2)
	// A controller whose answer says it is 3, with controller-2's certificate.
	impostor := servePeer(t, certs["controller-2"], 3)

	tests := []struct {
		name     string
		client   *tlsauth.Config
		addr     string
		id       int32
		leader   int32
		wantCode codes.Code
		wantErr  string
	}{
		{name: "plaintext", addr: plain, id: 2, leader: 1},
		{name: "plaintext, another node answers", addr: plain, id: 4, leader: 1, wantErr: "is node 2, not 4"},
		{name: "TLS, controller to controller", client: certs["controller-1"], addr: secure, id: 2, leader: 1},
		{name: "TLS, the certificate is another controller's", client: certs["controller-1"], addr: impostor, id: 3, leader: 1,
			wantErr: "is not controller-3"},
		{name: "TLS, an admin may not ask", client: certs["admin"], addr: secure, id: 2, leader: 1,
			wantCode: codes.PermissionDenied, wantErr: "LeaderContact needs a controller certificate; the caller's is admin"},
		{name: "TLS, a broker may not ask", client: certs["broker-1"], addr: secure, id: 2, leader: 1,
			wantCode: codes.PermissionDenied, wantErr: "LeaderContact needs a controller certificate; the caller's is broker-1"},
		{name: "no leader named", addr: plain, id: 2, leader: 0, wantCode: codes.InvalidArgument, wantErr: "leader_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewPeerClient(WithTLS(tt.client))
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := c.LeaderContact(ctx, tt.id, tt.addr, tt.leader)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("LeaderContact: %v", err)
				}
				if resp.GetNodeId() != tt.id || resp.GetLeaderId() != tt.leader || resp.GetSinceContactMicros() != 1500 {
					t.Errorf("answer %v", resp)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("LeaderContact = %v, want an error containing %q", err, tt.wantErr)
			}
			if tt.wantCode != codes.OK && status.Code(err) != tt.wantCode {
				t.Errorf("code %v, want %v", status.Code(err), tt.wantCode)
			}
		})
	}
}
