package tlsauth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/keel-dev/keel/internal/atomicfile"
)

// CA is a certificate authority that issues Keel's certificates: ECDSA
// P-256 keys, each leaf for both server and client use. NewCA makes a
// throwaway one, its key only in memory (`keel dev --tls`, tests);
// NewCAValidFor and LoadCA serve `keel cert`, whose CA lives in files.
type CA struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
}

// certValidity is how long the throwaway certificates are valid.
const certValidity = 365 * 24 * time.Hour

// NewCA makes a new CA named name, valid for a year.
func NewCA(name string) (*CA, error) { return NewCAValidFor(name, certValidity) }

// NewCAValidFor makes a new CA named name, valid for lifetime.
func NewCAValidFor(name string, lifetime time.Duration) (*CA, error) {
	if lifetime <= 0 {
		return nil, fmt.Errorf("a CA valid for %v: want a positive lifetime", lifetime)
	}
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
		NotAfter:              now.Add(lifetime),
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

// LoadCA reads a CA from its certificate and private key files (PEM; the
// key PKCS #8, SEC 1 or PKCS #1), as `keel cert create-ca` writes them,
// to issue more certificates. It fails, with one line naming the file,
// when a file cannot be read or parsed, the certificate is no CA's, or the
// key is not the certificate's.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("CA certificate %s: %v", certFile, atomicfile.PathCause(err))
	}
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("CA certificate %s: no PEM certificate in it", certFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA certificate %s: %v", certFile, oneLine(err))
	}
	if !cert.IsCA || !cert.BasicConstraintsValid || (cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0) {
		return nil, fmt.Errorf("CA certificate %s: %q is not a CA certificate", certFile, cert.Subject.CommonName)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("CA key %s: %v", keyFile, atomicfile.PathCause(err))
	}
	key, err := parsePrivateKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key %s: %v", keyFile, err)
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("CA key %s is not the key of the CA certificate %s", keyFile, certFile)
	}
	return &CA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})}, nil
}

// parsePrivateKey reads the first PEM private key in data.
func parsePrivateKey(data []byte) (crypto.Signer, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, errors.New("no PEM private key in it")
		}
		var key any
		var err error
		switch block.Type {
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, errors.New(oneLine(err))
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("a %T cannot sign", key)
		}
		return signer, nil
	}
}

// CertPEM is the CA's certificate, PEM-encoded: what every process's
// --tls-ca holds.
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// KeyPEM is the CA's private key, PEM-encoded (PKCS #8).
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// NotAfter is when the CA's certificate, and so every certificate it
// signed, expires.
func (ca *CA) NotAfter() time.Time { return ca.cert.NotAfter }

// Issue makes a leaf certificate with common name cn (an identity such as
// controller-1, broker-2 or admin) for both server and client use, valid
// for 127.0.0.1, ::1, localhost and hosts (IP addresses or DNS names), for
// a year or until the CA expires, whichever comes first.
func (ca *CA) Issue(cn string, hosts ...string) (certPEM, keyPEM []byte, err error) {
	notAfter := time.Now().Add(certValidity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	return ca.issue(cn, notAfter, hosts)
}

// IssueValidFor is Issue for lifetime. It fails if the certificate would
// outlive the CA: it would stop verifying when the CA expires anyway.
func (ca *CA) IssueValidFor(cn string, lifetime time.Duration, hosts ...string) (certPEM, keyPEM []byte, err error) {
	if lifetime <= 0 {
		return nil, nil, fmt.Errorf("a certificate valid for %v: want a positive lifetime", lifetime)
	}
	notAfter := time.Now().Add(lifetime)
	if notAfter.After(ca.cert.NotAfter) {
		return nil, nil, fmt.Errorf("a certificate valid for %v would outlive its CA, which expires %s", lifetime, ca.cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return ca.issue(cn, notAfter, hosts)
}

func (ca *CA) issue(cn string, notAfter time.Time, hosts []string) (certPEM, keyPEM []byte, err error) {
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
		NotAfter:     notAfter,
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
