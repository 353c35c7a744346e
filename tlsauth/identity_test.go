package tlsauth

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"strings"
	"testing"
)

func TestParseIdentity(t *testing.T) {
	tests := []struct {
		cn      string
		want    Identity
		wantErr bool
	}{
		{cn: "controller-1", want: Identity{Role: RoleController, ID: 1, Name: "controller-1"}},
		{cn: "controller-2147483647", want: Identity{Role: RoleController, ID: 2147483647, Name: "controller-2147483647"}},
		{cn: "broker-0", want: Identity{Role: RoleBroker, ID: 0, Name: "broker-0"}},
		{cn: "broker-42", want: Identity{Role: RoleBroker, ID: 42, Name: "broker-42"}},
		{cn: "admin", want: Identity{Role: RoleAdmin, Name: "admin"}},
		{cn: "admin-alice", want: Identity{Role: RoleAdmin, Name: "admin-alice"}},
		{cn: "admin-ops.team_1-a", want: Identity{Role: RoleAdmin, Name: "admin-ops.team_1-a"}},
		{cn: "probe", want: Identity{Role: RoleProbe, Name: "probe"}},
		{cn: "probe-lb", want: Identity{Role: RoleProbe, Name: "probe-lb"}},
		{cn: "probe-k8s.eu-1_a", want: Identity{Role: RoleProbe, Name: "probe-k8s.eu-1_a"}},

		{cn: "", wantErr: true},
		{cn: "controller-0", wantErr: true}, // node ids are positive
		{cn: "controller-", wantErr: true},
		{cn: "controller-01", wantErr: true}, // one id, one name
		{cn: "controller-+1", wantErr: true},
		{cn: "controller--1", wantErr: true},
		{cn: "controller-2147483648", wantErr: true},
		{cn: "controller-1 ", wantErr: true},
		{cn: "Controller-1", wantErr: true},
		{cn: "broker-", wantErr: true},
		{cn: "broker-007", wantErr: true},
		{cn: "broker--1", wantErr: true},
		{cn: "broker-1x", wantErr: true},
		{cn: "broker-99999999999", wantErr: true},
		{cn: "broker", wantErr: true},
		{cn: "admin-", wantErr: true},
		{cn: "admin-a b", wantErr: true},
		{cn: "admin-" + strings.Repeat("a", maxAdminName+1), wantErr: true},
		{cn: "administrator", wantErr: true},
		{cn: "probe-", wantErr: true},
		{cn: "probe-a/b", wantErr: true},
		{cn: "probe-" + strings.Repeat("p", maxAdminName+1), wantErr: true},
		{cn: "probes", wantErr: true},
		{cn: "Probe", wantErr: true},
		{cn: "root", wantErr: true},
		{cn: "keel dev CA", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.cn, func(t *testing.T) {
			got, err := ParseIdentity(tt.cn)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseIdentity(%q) = %+v, want an error", tt.cn, got)
				}
				if !strings.Contains(err.Error(), "names no keel role") || !strings.Contains(err.Error(), tt.cn) {
					t.Errorf("error %q does not name the common name and what is wanted", err)
				}
				if got.Role != RoleNone {
					t.Errorf("role on error = %v, want none", got.Role)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseIdentity(%q): %v", tt.cn, err)
			}
			if got != tt.want {
				t.Errorf("ParseIdentity(%q) = %+v, want %+v", tt.cn, got, tt.want)
			}
		})
	}
}

func TestPeerIdentity(t *testing.T) {
	if _, err := PeerIdentity(nil); err == nil {
		t.Error("PeerIdentity(no certificates) succeeded")
	}
	leaf := &x509.Certificate{Subject: pkix.Name{CommonName: "broker-3"}}
	ca := &x509.Certificate{Subject: pkix.Name{CommonName: "admin"}}
	id, err := PeerIdentity([]*x509.Certificate{leaf, ca})
	if err != nil || id.Role != RoleBroker || id.ID != 3 {
		t.Errorf("PeerIdentity = %+v, %v; want broker 3 (the leaf, not the chain)", id, err)
	}
}

func TestRole_String(t *testing.T) {
	for r, want := range map[Role]string{RoleNone: "none", RoleController: "controller", RoleBroker: "broker", RoleAdmin: "admin", RoleProbe: "probe"} {
		if r.String() != want {
			t.Errorf("%d.String() = %q, want %q", r, r.String(), want)
		}
	}
}
