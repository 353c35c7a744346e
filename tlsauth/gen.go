package tlsauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/keel-dev/keel/internal/atomicfile"
)

// CA is a throwaway certificate authority for `keel dev --tls` and tests:
// ECDSA P-256, valid for a year, its key only in memory. Real deployments
// bring their own CA (README: Security).
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

// certValidity is how long the throwaway certificates are valid.
const certValidity = 365 * 24 * time.Hour

// NewCA makes a new CA named name.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour), // a little clock skew
		NotAfter:              now.Add(certValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Issue makes a leaf certificate with common name cn (an identity such as
// controller-1, broker-2 or admin) for both server and client use, valid
// for 127.0.0.1, ::1, localhost and hosts (IP addresses or DNS names).
func (ca *CA) Issue(cn string, hosts ...string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		// Every keel process both serves and dials.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:    []string{"localhost"},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), nil
}

// Config issues a certificate for cn and returns it as a Config trusting
// this CA, without touching the disk.
func (ca *CA) Config(cn string, hosts ...string) (*Config, error) {
	certPEM, keyPEM, err := ca.Issue(cn, hosts...)
	if err != nil {
		return nil, err
	}
	return FromPEM(certPEM, keyPEM, ca.certPEM)
}

// Files are the paths of one identity's certificate material.
type Files struct {
	CA, Cert, Key string
}

// Flags are the command-line flags that use f.
func (f Files) Flags() []string {
	return []string{FlagCA, f.CA, FlagCert, f.Cert, FlagKey, f.Key}
}

// WriteCA writes the CA's certificate to dir/ca.pem and returns its path.
func (ca *CA) WriteCA(dir string) (string, error) {
	path := filepath.Join(dir, "ca.pem")
	if err := writeFile(path, ca.certPEM, 0o644); err != nil {
		return "", err
	}
	return path, nil
}

// WriteFiles issues a certificate for cn and writes dir/ca.pem,
// dir/<cn>.pem and dir/<cn>-key.pem (readable by the owner only).
func (ca *CA) WriteFiles(dir, cn string, hosts ...string) (Files, error) {
	certPEM, keyPEM, err := ca.Issue(cn, hosts...)
	if err != nil {
		return Files{}, err
	}
	caPath, err := ca.WriteCA(dir)
	if err != nil {
		return Files{}, err
	}
	f := Files{CA: caPath, Cert: filepath.Join(dir, cn+".pem"), Key: filepath.Join(dir, cn+"-key.pem")}
	if err := writeFile(f.Key, keyPEM, 0o600); err != nil {
		return Files{}, err
	}
	if err := writeFile(f.Cert, certPEM, 0o644); err != nil {
		return Files{}, err
	}
	return f, nil
}

// writeFile replaces path with data (atomicfile.WriteMode): a process
// reading the file meanwhile (a node starting while the next node's
// certificate is written, which rewrites ca.pem) sees the old content or the
// new, never a torn file.
func writeFile(path string, data []byte, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("cannot create %s: %v", filepath.Dir(path), atomicfile.PathCause(err))
	}
	if err := atomicfile.WriteMode(path, data, perm); err != nil {
		return fmt.Errorf("cannot write %s: %v", path, atomicfile.PathCause(err))
	}
	return nil
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}
