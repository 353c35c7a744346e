package tlsauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func newTestCA(t testing.TB) *CA {
	t.Helper()
	ca, err := NewCA("keel test CA")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	admin, err := ca.WriteFiles(dir, "admin")
	if err != nil {
		t.Fatal(err)
	}
	broker, err := ca.WriteFiles(dir, "broker-2")
	if err != nil {
		t.Fatal(err)
	}
	other := newTestCA(t)
	otherDir := t.TempDir()
	stranger, err := other.WriteFiles(otherDir, "admin")
	if err != nil {
		t.Fatal(err)
	}
	noRole, err := ca.WriteFiles(dir, "nobody")
	if err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not pem\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")

	tests := []struct {
		name         string
		cert, key    string
		ca           string
		wantNil      bool
		wantIdentity Identity
		wantErr      []string // substrings of the one-line error
	}{
		{name: "none is plaintext", wantNil: true},
		{name: "admin", cert: admin.Cert, key: admin.Key, ca: admin.CA, wantIdentity: Identity{Role: RoleAdmin, Name: "admin"}},
		{name: "broker", cert: broker.Cert, key: broker.Key, ca: broker.CA, wantIdentity: Identity{Role: RoleBroker, ID: 2, Name: "broker-2"}},
		{name: "only cert", cert: admin.Cert, wantErr: []string{"--tls-key and --tls-ca are missing"}},
		{name: "only key", key: admin.Key, wantErr: []string{"--tls-cert and --tls-ca are missing"}},
		{name: "no ca", cert: admin.Cert, key: admin.Key, wantErr: []string{"--tls-ca is missing"}},
		{name: "no key", cert: admin.Cert, ca: admin.CA, wantErr: []string{"--tls-key is missing"}},
		{name: "unreadable cert", cert: missing, key: admin.Key, ca: admin.CA, wantErr: []string{"--tls-cert " + missing, "no such file"}},
		{name: "unreadable key", cert: admin.Cert, key: missing, ca: admin.CA, wantErr: []string{"--tls-key " + missing, "no such file"}},
		{name: "unreadable ca", cert: admin.Cert, key: admin.Key, ca: missing, wantErr: []string{"--tls-ca " + missing, "no such file"}},
		{name: "ca not pem", cert: admin.Cert, key: admin.Key, ca: garbage, wantErr: []string{"--tls-ca " + garbage, "no PEM certificate"}},
		{name: "cert not pem", cert: garbage, key: admin.Key, ca: admin.CA, wantErr: []string{"--tls-cert " + garbage, "--tls-key " + admin.Key}},
		{name: "key of another cert", cert: admin.Cert, key: broker.Key, ca: admin.CA, wantErr: []string{"--tls-cert " + admin.Cert, "--tls-key " + broker.Key}},
		{name: "cert from another CA", cert: stranger.Cert, key: stranger.Key, ca: admin.CA, wantErr: []string{"--tls-cert " + stranger.Cert, "does not verify against --tls-ca"}},
		{name: "cert naming no role", cert: noRole.Cert, key: noRole.Key, ca: admin.CA, wantErr: []string{"--tls-cert " + noRole.Cert, `"nobody" names no keel role`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.cert, tt.key, tt.ca)
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("Load succeeded, want an error containing %q", tt.wantErr)
				}
				msg := err.Error()
				if strings.Contains(msg, "\n") {
					t.Errorf("error spans lines: %q", msg)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(msg, w) {
						t.Errorf("error %q does not contain %q", msg, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if tt.wantNil {
				if c != nil {
					t.Fatalf("Load() = %+v, want nil (plaintext)", c)
				}
				return
			}
			if c.Identity != tt.wantIdentity {
				t.Errorf("Identity = %+v, want %+v", c.Identity, tt.wantIdentity)
			}
			srv := c.Server()
			if srv.MinVersion != tls.VersionTLS13 || srv.ClientAuth != tls.RequireAndVerifyClientCert || srv.ClientCAs == nil {
				t.Errorf("server config: min version %x, client auth %v, client CAs %v", srv.MinVersion, srv.ClientAuth, srv.ClientCAs)
			}
			cl := c.Client()
			if cl.MinVersion != tls.VersionTLS13 || cl.RootCAs == nil || len(cl.Certificates) != 1 || cl.InsecureSkipVerify {
				t.Errorf("client config: min version %x, roots %v, %d certificates, skip verify %v", cl.MinVersion, cl.RootCAs, len(cl.Certificates), cl.InsecureSkipVerify)
			}
		})
	}
}

func TestWriteFiles_KeyIsPrivate(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	key := filepath.Join(dir, "admin-key.pem")
	if err := os.WriteFile(key, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := ca.WriteFiles(dir, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if f.Key != key || f.Cert != filepath.Join(dir, "admin.pem") || f.CA != filepath.Join(dir, "ca.pem") {
		t.Errorf("files = %+v", f)
	}
	fi, err := os.Stat(key)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key mode = %v, want 0600", fi.Mode().Perm())
	}
	if got := f.Flags(); strings.Join(got, " ") != "--tls-ca "+f.CA+" --tls-cert "+f.Cert+" --tls-key "+f.Key {
		t.Errorf("Flags() = %q", got)
	}
}

func TestIssue_Certificate(t *testing.T) {
	ca := newTestCA(t)
	certPEM, _, err := ca.Issue("controller-1", "10.0.0.1", "keel-1.example")
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("public key %T, want ECDSA P-256", cert.PublicKey)
	}
	for _, host := range []string{"127.0.0.1", "::1", "localhost", "10.0.0.1", "keel-1.example"} {
		if err := cert.VerifyHostname(host); err != nil {
			t.Errorf("certificate not valid for %s: %v", host, err)
		}
	}
	if err := cert.VerifyHostname("10.0.0.2"); err == nil {
		t.Error("certificate valid for a host it was not issued for")
	}
}

// handshake runs a TLS handshake between server and client configs over a
// loopback connection and returns the client's and the server's errors.
func handshake(t *testing.T, server, client *tls.Config) (clientErr, serverErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srvErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srvErr <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		tc := tls.Server(c, server)
		err = tc.Handshake()
		if err == nil {
			// TLS 1.3 clients finish before the server has checked their
			// certificate: read, so a refusal reaches the client.
			_, err = tc.Write([]byte("ok"))
		}
		srvErr <- err
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(conn, client)
	clientErr = tc.Handshake()
	if clientErr == nil {
		buf := make([]byte, 2)
		_, clientErr = io.ReadFull(tc, buf)
	}
	return clientErr, <-srvErr
}

func TestConfigs_Handshake(t *testing.T) {
	ca := newTestCA(t)
	cfg := func(cn string) *Config {
		c, err := ca.Config(cn)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctrl1, ctrl2, broker, admin := cfg("controller-1"), cfg("controller-2"), cfg("broker-1"), cfg("admin")
	otherCA := newTestCA(t)
	stranger, err := otherCA.Config("controller-3")
	if err != nil {
		t.Fatal(err)
	}
	withName := func(c *tls.Config, name string) *tls.Config { c.ServerName = name; return c }

	tests := []struct {
		name           string
		server, client *tls.Config
		wantOK         bool
	}{
		{name: "admin to a controller", server: ctrl1.Server(), client: withName(admin.Client(RoleController), "127.0.0.1"), wantOK: true},
		{name: "broker to a controller", server: ctrl1.Server(), client: withName(broker.Client(RoleController), "localhost"), wantOK: true},
		{name: "a broker is not a controller", server: broker.Server(), client: withName(admin.Client(RoleController), "127.0.0.1")},
		{name: "host name is checked", server: ctrl1.Server(), client: withName(admin.Client(RoleController), "10.9.9.9")},
		{name: "no client certificate", server: ctrl1.Server(), client: &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: admin.Client().RootCAs, ServerName: "127.0.0.1"}},
		{name: "client from another CA", server: ctrl1.Server(), client: withName(stranger.Client(RoleController), "127.0.0.1")},
		{name: "raft peers", server: ctrl1.Server(RoleController), client: ctrl2.PeerClient(RoleController), wantOK: true},
		{name: "raft peers need no host name", server: ctrl1.Server(RoleController), client: withName(ctrl2.PeerClient(RoleController), "10.9.9.9"), wantOK: true},
		{name: "raft refuses a broker client", server: ctrl1.Server(RoleController), client: broker.PeerClient(RoleController)},
		{name: "raft refuses a broker server", server: broker.Server(RoleController), client: ctrl2.PeerClient(RoleController)},
		{name: "raft refuses another CA's controller", server: ctrl1.Server(RoleController), client: stranger.PeerClient(RoleController)},
		{name: "raft client refuses another CA's controller", server: stranger.Server(RoleController), client: ctrl1.PeerClient(RoleController)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cErr, sErr := handshake(t, tt.server, tt.client)
			if tt.wantOK && (cErr != nil || sErr != nil) {
				t.Fatalf("handshake failed: client %v, server %v", cErr, sErr)
			}
			if !tt.wantOK && cErr == nil && sErr == nil {
				t.Fatal("handshake succeeded, want a refusal")
			}
			if !tt.wantOK && errors.Is(cErr, os.ErrDeadlineExceeded) {
				t.Fatalf("client hung until its deadline instead of being refused: %v", cErr)
			}
		})
	}
}

// TestWriteFiles_ReadersNeverSeeATornCA: issuing more certificates rewrites
// ca.pem; a process loading its files meanwhile (a node starting while the
// next node's certificate is issued) must always find a whole CA.
func TestWriteFiles_ReadersNeverSeeATornCA(t *testing.T) {
	ca, err := NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	first, err := ca.WriteFiles(dir, "controller-1")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for i := 2; i < 50; i++ {
			if _, err := ca.WriteFiles(dir, "controller-"+strconv.Itoa(i)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for {
		if _, err := Load(first.Cert, first.Key, first.CA); err != nil {
			t.Fatalf("loading while certificates are issued: %v", err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return
		default:
		}
	}
}
