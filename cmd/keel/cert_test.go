package main

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-dev/keel/tlsauth"
)

// fileMode is path's permission bits.
func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s holds no PEM", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCert_CreateCAThenCreate: keel cert create-ca, then keel cert create
// for each kind of identity; every result loads as a process loads its
// --tls-* flags, naming its identity, with its key private.
func TestCert_CreateCAThenCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	out, err := runKeel(t, "cert", "create-ca", "--certs-dir", dir)
	if err != nil {
		t.Fatalf("create-ca: %v\n%s", err, out)
	}
	caPath, caKey := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	if !strings.Contains(out, caPath) || !strings.Contains(out, caKey) {
		t.Errorf("create-ca output does not name its files:\n%s", out)
	}
	if m := fileMode(t, caKey); m != 0o600 {
		t.Errorf("CA key mode %v, want 0600", m)
	}
	if ca := readCert(t, caPath); !ca.IsCA {
		t.Errorf("ca.pem is not a CA certificate")
	}

	for _, tt := range []struct {
		name  string
		hosts []string
		want  tlsauth.Identity
	}{
		{"controller-1", []string{"10.0.0.1", "keel-1.example"}, tlsauth.Identity{Role: tlsauth.RoleController, ID: 1, Name: "controller-1"}},
		{"broker-2", []string{"10.0.1.2"}, tlsauth.Identity{Role: tlsauth.RoleBroker, ID: 2, Name: "broker-2"}},
		{"broker-0", nil, tlsauth.Identity{Role: tlsauth.RoleBroker, ID: 0, Name: "broker-0"}},
		{"admin", nil, tlsauth.Identity{Role: tlsauth.RoleAdmin, Name: "admin"}},
		{"admin-alice", nil, tlsauth.Identity{Role: tlsauth.RoleAdmin, Name: "admin-alice"}},
		{"probe", nil, tlsauth.Identity{Role: tlsauth.RoleProbe, Name: "probe"}},
		{"probe-lb", []string{"lb.example"}, tlsauth.Identity{Role: tlsauth.RoleProbe, Name: "probe-lb"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"cert", "create", tt.name, "--certs-dir", dir}
			if len(tt.hosts) > 0 {
				args = append(args, "--host", strings.Join(tt.hosts, ","))
			}
			out, err := runKeel(t, args...)
			if err != nil {
				t.Fatalf("create %s: %v\n%s", tt.name, err, out)
			}
			f := tlsauth.Files{CA: caPath, Cert: filepath.Join(dir, tt.name+".pem"), Key: filepath.Join(dir, tt.name+"-key.pem")}
			if !strings.Contains(out, strings.Join(f.Flags(), " ")) {
				t.Errorf("output does not give the flags %q:\n%s", f.Flags(), out)
			}
			c, err := tlsauth.Load(f.Cert, f.Key, f.CA)
			if err != nil {
				t.Fatalf("tlsauth.Load: %v", err)
			}
			if c.Identity != tt.want {
				t.Errorf("identity = %+v, want %+v", c.Identity, tt.want)
			}
			if m := fileMode(t, f.Key); m != 0o600 {
				t.Errorf("key mode %v, want 0600", m)
			}
			leaf := readCert(t, f.Cert)
			for _, h := range append([]string{"127.0.0.1", "::1", "localhost"}, tt.hosts...) {
				if err := leaf.VerifyHostname(h); err != nil {
					t.Errorf("not valid for %s: %v", h, err)
				}
			}
			if err := leaf.VerifyHostname("10.9.9.9"); err == nil {
				t.Error("valid for a host it was not made for")
			}
		})
	}
}

// TestCert_Refusals: what keel cert refuses, in one line, writing nothing.
func TestCert_Refusals(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	safe := filepath.Join(t.TempDir(), "safe", "ca-key.pem")
	if out, err := runKeel(t, "cert", "create-ca", "--certs-dir", dir, "--ca-key", safe, "--lifetime", "48h"); err != nil {
		t.Fatalf("create-ca: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "ca-key.pem")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("--ca-key elsewhere, yet a key in --certs-dir: %v", err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	otherDir := filepath.Join(t.TempDir(), "other")
	if out, err := runKeel(t, "cert", "create-ca", "--certs-dir", otherDir); err != nil {
		t.Fatalf("create-ca: %v\n%s", err, out)
	}
	if out, err := runKeel(t, "cert", "create", "admin", "--certs-dir", dir, "--ca-key", safe, "--lifetime", "1h"); err != nil {
		t.Fatalf("create admin: %v\n%s", err, out)
	}
	adminPEM, err := os.ReadFile(filepath.Join(dir, "admin.pem"))
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no --certs-dir", []string{"create-ca"}, "--certs-dir is required"},
		{"a second CA", []string{"create-ca", "--certs-dir", dir}, filepath.Join(dir, "ca.pem") + " exists; keel cert create-ca never replaces a CA"},
		{"a second CA key", []string{"create-ca", "--certs-dir", t.TempDir(), "--ca-key", safe}, safe + " exists; keel cert create-ca never replaces a CA"},
		{"neither a keel role nor a user name", []string{"create", "no/body", "--certs-dir", dir, "--ca-key", safe}, `certificate common name "no/body" names no keel role (want controller-<id>, broker-<id>, admin, admin-<name>, probe or probe-<name>) and is no user name`},
		{"node id 0", []string{"create", "controller-0", "--certs-dir", dir, "--ca-key", safe}, `"controller-0" names no keel role`},
		{"a broker id with a leading zero", []string{"create", "broker-07", "--certs-dir", dir, "--ca-key", safe}, `"broker-07" names no keel role`},
		{"admin-lb is fine, admin- is not", []string{"create", "admin-", "--certs-dir", dir, "--ca-key", safe}, `"admin-" names no keel role`},
		{"existing certificate", []string{"create", "admin", "--certs-dir", dir, "--ca-key", safe, "--lifetime", "1h"}, filepath.Join(dir, "admin.pem") + " exists; give --overwrite to replace it"},
		{"the CA key left elsewhere", []string{"create", "broker-1", "--certs-dir", dir}, "CA key " + filepath.Join(dir, "ca-key.pem") + ": no such file or directory"},
		{"another CA's key", []string{"create", "broker-1", "--certs-dir", dir, "--ca-key", filepath.Join(otherDir, "ca-key.pem")}, "is not the key of the CA certificate " + filepath.Join(dir, "ca.pem")},
		{"outliving the CA", []string{"create", "broker-1", "--certs-dir", dir, "--ca-key", safe}, "a certificate valid for 8760h0m0s would outlive its CA, which expires "},
		{"a host with a port", []string{"create", "broker-1", "--certs-dir", dir, "--ca-key", safe, "--lifetime", "1h", "--host", "10.0.0.1:9201"}, `--host "10.0.0.1:9201": want an IP address or a DNS name, without a port`},
		{"no name", []string{"create", "--certs-dir", dir}, "accepts 1 arg(s), received 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runKeel(t, append([]string{"cert"}, tt.args...)...)
			if err == nil {
				t.Fatalf("keel cert %s succeeded", strings.Join(tt.args, " "))
			}
			if line := errorLine(err); !strings.Contains(line, tt.want) || strings.Contains(line, "\n") {
				t.Fatalf("keel cert %s: %q, want one line containing %q", strings.Join(tt.args, " "), line, tt.want)
			}
		})
	}
	// Nothing was replaced, and nothing written for a refused identity.
	if got, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); string(got) != string(caPEM) {
		t.Error("a refused create-ca changed ca.pem")
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "admin.pem")); string(got) != string(adminPEM) {
		t.Error("a refused create changed admin.pem")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "admin-key.pem admin.pem ca.pem" {
		t.Errorf("--certs-dir holds %v, want only the CA and admin's files", names)
	}

	// --overwrite renews.
	old := readCert(t, filepath.Join(dir, "admin.pem"))
	if out, err := runKeel(t, "cert", "create", "admin", "--certs-dir", dir, "--ca-key", safe, "--lifetime", "1h", "--overwrite"); err != nil {
		t.Fatalf("create --overwrite: %v\n%s", err, out)
	}
	renewed := readCert(t, filepath.Join(dir, "admin.pem"))
	if renewed.SerialNumber.Cmp(old.SerialNumber) == 0 {
		t.Error("--overwrite left the old certificate")
	}
	if _, err := tlsauth.Load(filepath.Join(dir, "admin.pem"), filepath.Join(dir, "admin-key.pem"), filepath.Join(dir, "ca.pem")); err != nil {
		t.Errorf("the renewed certificate does not load: %v", err)
	}
}

// TestCert_CreateApplication: keel cert create makes an application's
// certificate, principal User:<name>, for the Kafka listener only.
func TestCert_CreateApplication(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if out, err := runKeel(t, "cert", "create-ca", "--certs-dir", dir); err != nil {
		t.Fatalf("create-ca: %v\n%s", err, out)
	}
	out, err := runKeel(t, "cert", "create", "app-orders", "--certs-dir", dir)
	if err != nil || !strings.Contains(out, "Identity:    app-orders (role user)") {
		t.Fatalf("create app-orders: %v\n%s", err, out)
	}
	if leaf := readCert(t, filepath.Join(dir, "app-orders.pem")); leaf.Subject.CommonName != "app-orders" {
		t.Fatalf("common name %q", leaf.Subject.CommonName)
	}
}
