package tlsauth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"
)

// The flags every keel command takes; errors name them.
const (
	FlagCert = "--tls-cert"
	FlagKey  = "--tls-key"
	FlagCA   = "--tls-ca"
)

// Config is one process's TLS material: its own certificate and the CA it
// trusts for every peer. Every connection is mutual TLS 1.3.
type Config struct {
	// Identity is what this process's own certificate names.
	Identity Identity

	cert  tls.Certificate
	roots *x509.CertPool
}

// Load reads --tls-cert, --tls-key and --tls-ca. All three empty means
// plaintext: it returns nil and no error. The three go together; a partial
// set fails naming the missing flags. A file that cannot be read or parsed,
// a key that does not match the certificate, a certificate the CA did not
// sign or whose common name is no keel identity: each fails with one line
// naming the flag and the path.
func Load(certFile, keyFile, caFile string) (*Config, error) {
	given := map[string]string{FlagCert: certFile, FlagKey: keyFile, FlagCA: caFile}
	var missing []string
	for _, f := range []string{FlagCert, FlagKey, FlagCA} {
		if given[f] == "" {
			missing = append(missing, f)
		}
	}
	switch len(missing) {
	case 3:
		return nil, nil
	case 2:
		return nil, fmt.Errorf("%s, %s and %s go together: %s and %s are missing", FlagCert, FlagKey, FlagCA, missing[0], missing[1])
	case 1:
		return nil, fmt.Errorf("%s, %s and %s go together: %s is missing", FlagCert, FlagKey, FlagCA, missing[0])
	}
	certPEM, err := readFlagFile(FlagCert, certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readFlagFile(FlagKey, keyFile)
	if err != nil {
		return nil, err
	}
	caPEM, err := readFlagFile(FlagCA, caFile)
	if err != nil {
		return nil, err
	}
	roots, err := parseCA(caPEM)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v", FlagCA, caFile, err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s %s, %s %s: %v", FlagCert, certFile, FlagKey, keyFile, oneLine(err))
	}
	c, err := newConfig(cert, roots)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v", FlagCert, certFile, err)
	}
	return c, nil
}

// NotAfter is when this process's certificate expires.
func (c *Config) NotAfter() time.Time { return c.cert.Leaf.NotAfter }

// FromPEM is Load from PEM bytes instead of files (tests, keel dev).
func FromPEM(certPEM, keyPEM, caPEM []byte) (*Config, error) {
	roots, err := parseCA(caPEM)
	if err != nil {
		return nil, fmt.Errorf("CA: %v", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("certificate and key: %v", oneLine(err))
	}
	return newConfig(cert, roots)
}

func readFlagFile(flag, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("%s %s: %v", flag, path, err)
	}
	return b, nil
}

func parseCA(caPEM []byte) (*x509.CertPool, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no PEM certificate in it")
	}
	return roots, nil
}

// newConfig checks that cert is signed by roots and names a keel identity.
func newConfig(cert tls.Certificate, roots *x509.CertPool) (*Config, error) {
	leaf := cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, err
		}
		cert.Leaf = leaf
	}
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("certificate %q does not verify against %s: %v", leaf.Subject.CommonName, FlagCA, oneLine(err))
	}
	id, err := ParseIdentity(leaf.Subject.CommonName)
	if err != nil {
		return nil, err
	}
	return &Config{Identity: id, cert: cert, roots: roots}, nil
}

// oneLine keeps an error to one line (x509 errors rarely span more).
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// Server returns the config for a listener: TLS 1.3, this process's
// certificate, and a client certificate signed by the CA required of every
// caller. It lets any identity in; what each may do is the caller's to
// decide (rpc authorizes every call), unless roles are given: then the
// handshake itself fails for a client holding none of them.
func (c *Config) Server(roles ...Role) *tls.Config {
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    c.roots,
	}
	if len(roles) > 0 {
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			return requireRole(cs.PeerCertificates, "client", roles)
		}
	}
	return cfg
}

// Client returns the config for dialing a server that must hold one of
// roles (none: any keel identity): TLS 1.3, this process's certificate, the
// server's chain and host name verified against the CA.
func (c *Config) Client(roles ...Role) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.cert},
		RootCAs:      c.roots,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return requireRole(cs.PeerCertificates, "server", roles)
		},
	}
}

// PeerClient is Client for links whose dial address says nothing about the
// peer's name (raft between controllers, possibly through --raft-dial
// proxies): the chain is verified against the CA but not the host name, so
// the peer's role is what authenticates it.
func (c *Config) PeerClient(role Role) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.cert},
		RootCAs:      c.roots,
		// The chain is verified below, by hand, without a host name:
		// crypto/tls can only skip both or neither.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errNoPeerCertificate
			}
			inter := x509.NewCertPool()
			for _, ic := range cs.PeerCertificates[1:] {
				inter.AddCert(ic)
			}
			opts := x509.VerifyOptions{Roots: c.roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
			if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
				return fmt.Errorf("server certificate: %v", oneLine(err))
			}
			return requireRole(cs.PeerCertificates, "server", []Role{role})
		},
	}
}

// requireRole fails unless the peer's certificate names one of roles (any
// keel role when roles is empty).
func requireRole(certs []*x509.Certificate, side string, roles []Role) error {
	id, err := PeerIdentity(certs)
	if err != nil && slices.Contains(roles, RoleUser) {
		id, err = ParseAnyIdentity(certs[0].Subject.CommonName)
	}
	if err != nil {
		return fmt.Errorf("%s certificate: %v", side, err)
	}
	if len(roles) > 0 && !slices.Contains(roles, id.Role) {
		names := make([]string, len(roles))
		for i, r := range roles {
			names[i] = r.String()
		}
		return fmt.Errorf("%s certificate %q is not a %s certificate", side, id.Name, strings.Join(names, " or "))
	}
	return nil
}
