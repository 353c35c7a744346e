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
	// certName is how errors name the certificate (File.describe).
	certName string
}

// File is one of a process's TLS files as it was given: its path, and
// where the path came from when not the command line ("env
// KEEL_BROKER_TLS_KEY", "--config /etc/keel/broker.yaml"), so that an
// error about it names a place the user can find and fix.
type File struct {
	Path string
	From string // "": the flag, on the command line
}

// describe is how an error names f, given as flag: "--tls-key PATH", then
// "(from env KEEL_BROKER_TLS_KEY)" when it did not come from the command
// line.
func (f File) describe(flag string) string {
	if f.From == "" {
		return flag + " " + f.Path
	}
	return fmt.Sprintf("%s %s (from %s)", flag, f.Path, f.From)
}

// Load reads --tls-cert, --tls-key and --tls-ca as given on the command
// line: LoadFiles with no other source.
func Load(certFile, keyFile, caFile string) (*Config, error) {
	return LoadFiles(File{Path: certFile}, File{Path: keyFile}, File{Path: caFile})
}

// LoadFiles reads --tls-cert, --tls-key and --tls-ca. All three empty means
// plaintext: it returns nil and no error. The three go together; a partial
// set fails naming the missing flags, and where the given ones came from. A
// file that cannot be read or parsed, a key that does not match the
// certificate, a certificate the CA did not sign or whose common name is no
// keel identity: each fails with one line naming the flag, the path and
// where the path came from.
func LoadFiles(cert, key, ca File) (*Config, error) {
	files := []struct {
		flag string
		file File
	}{{FlagCert, cert}, {FlagKey, key}, {FlagCA, ca}}
	var missing, from []string
	for _, f := range files {
		switch {
		case f.file.Path == "":
			missing = append(missing, f.flag)
		case f.file.From != "":
			from = append(from, f.flag+" from "+f.file.From)
		}
	}
	given := ""
	if len(from) > 0 {
		given = " (" + strings.Join(from, ", ") + ")"
	}
	switch len(missing) {
	case 3:
		return nil, nil
	case 2:
		return nil, fmt.Errorf("%s, %s and %s go together: %s and %s are missing%s", FlagCert, FlagKey, FlagCA, missing[0], missing[1], given)
	case 1:
		return nil, fmt.Errorf("%s, %s and %s go together: %s is missing%s", FlagCert, FlagKey, FlagCA, missing[0], given)
	}
	certName, keyName, caName := cert.describe(FlagCert), key.describe(FlagKey), ca.describe(FlagCA)
	certPEM, err := readFlagFile(certName, cert.Path)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readFlagFile(keyName, key.Path)
	if err != nil {
		return nil, err
	}
	caPEM, err := readFlagFile(caName, ca.Path)
	if err != nil {
		return nil, err
	}
	roots, err := parseCA(caPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", caName, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s, %s: %v", certName, keyName, oneLine(err))
	}
	c, err := newConfig(pair, roots, caName)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", certName, err)
	}
	c.certName = certName
	return c, nil
}

// CertName is how errors name this process's certificate: "--tls-cert
// PATH", with where the path came from when not the command line; "the
// certificate" for one made from PEM bytes.
func (c *Config) CertName() string {
	if c.certName == "" {
		return "the certificate"
	}
	return c.certName
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
	return newConfig(cert, roots, "the CA")
}

// readFlagFile reads path, failing with name (the flag, path and source:
// File.describe) and the cause.
func readFlagFile(name, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("%s: %v", name, err)
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

// newConfig checks that cert is signed by roots, which errors call caName,
// and names a keel identity.
func newConfig(cert tls.Certificate, roots *x509.CertPool, caName string) (*Config, error) {
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
		return nil, fmt.Errorf("certificate %q does not verify against %s: %v", leaf.Subject.CommonName, caName, oneLine(err))
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
