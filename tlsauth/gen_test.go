package tlsauth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLoadCA: a CA written to files loads back and issues certificates that
// verify against its certificate; what is not a CA's certificate and key is
// refused in one line naming the file.
func TestLoadCA(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca, err := NewCAValidFor("keel CA", 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	caCert, caKey := write("ca.pem", ca.CertPEM()), write("ca-key.pem", keyPEM)
	other := newTestCA(t)
	otherKey, err := other.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	leafCert, leafKey, err := ca.Issue("admin")
	if err != nil {
		t.Fatal(err)
	}
	leafCertPath, leafKeyPath := write("admin.pem", leafCert), write("admin-key.pem", leafKey)
	wrongKey := write("other-key.pem", otherKey)
	garbage := write("garbage.pem", []byte("not pem\n"))
	missing := filepath.Join(dir, "missing.pem")

	loaded, err := LoadCA(caCert, caKey)
	if err != nil {
		t.Fatalf("LoadCA: %v", err)
	}
	if !loaded.NotAfter().Equal(ca.NotAfter()) {
		t.Errorf("NotAfter = %v, want %v", loaded.NotAfter(), ca.NotAfter())
	}
	certPEM, keyPEM2, err := loaded.IssueValidFor("broker-3", time.Hour, "10.0.0.3")
	if err != nil {
		t.Fatal(err)
	}
	c, err := FromPEM(certPEM, keyPEM2, ca.CertPEM())
	if err != nil || c.Identity != (Identity{Role: RoleBroker, ID: 3, Name: "broker-3"}) {
		t.Fatalf("issued by the loaded CA: %+v, %v", c, err)
	}

	for _, tt := range []struct {
		name, cert, key string
		want            []string
	}{
		{"missing certificate", missing, caKey, []string{"CA certificate " + missing, "no such file"}},
		{"missing key", caCert, missing, []string{"CA key " + missing, "no such file"}},
		{"certificate not PEM", garbage, caKey, []string{"CA certificate " + garbage, "no PEM certificate"}},
		{"key not PEM", caCert, garbage, []string{"CA key " + garbage, "no PEM private key"}},
		{"a leaf, not a CA", leafCertPath, leafKeyPath, []string{"CA certificate " + leafCertPath, `"admin" is not a CA certificate`}},
		{"another CA's key", caCert, wrongKey, []string{"CA key " + wrongKey + " is not the key of the CA certificate " + caCert}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadCA(tt.cert, tt.key)
			if err == nil {
				t.Fatal("LoadCA succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) || strings.Contains(err.Error(), "\n") {
					t.Errorf("err = %q, want one line containing %q", err, w)
				}
			}
		})
	}
}

func TestIssueValidFor_NotBeyondTheCA(t *testing.T) {
	ca, err := NewCAValidFor("short CA", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ca.IssueValidFor("admin", 48*time.Hour); err == nil || !strings.Contains(err.Error(), "would outlive its CA") {
		t.Errorf("a certificate outliving its CA: %v", err)
	}
	if _, _, err := ca.IssueValidFor("admin", 0); err == nil {
		t.Error("a zero lifetime was accepted")
	}
	// Issue, for throwaway certificates, stops at the CA's expiry instead.
	certPEM, keyPEM, err := ca.Issue("admin")
	if err != nil {
		t.Fatal(err)
	}
	c, err := FromPEM(certPEM, keyPEM, ca.CertPEM())
	if err != nil {
		t.Fatal(err)
	}
	if leaf := c.cert.Leaf; leaf.NotAfter.After(ca.NotAfter()) {
		t.Errorf("leaf expires %v, after its CA (%v)", leaf.NotAfter, ca.NotAfter())
	}
}
