package main

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/cmd/keel/internal/config"
	"github.com/keel-dev/keel/internal/atomicfile"
	"github.com/keel-dev/keel/tlsauth"
)

// The files of `keel cert` in --certs-dir: the CA's certificate, its key
// (unless --ca-key puts it elsewhere), and NAME.pem and NAME-key.pem per
// identity, as `keel dev --tls` names them too.
const (
	caCertFile = "ca.pem"
	caKeyFile  = "ca-key.pem"
)

// The default lifetimes: a CA for ten years, a certificate for one (renew
// with keel cert create --overwrite, then restart the process).
const (
	defaultCALifetime   = 10 * 365 * 24 * time.Hour
	defaultCertLifetime = 365 * 24 * time.Hour
)

func newCertCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Make a certificate authority and the certificates of keel's identities",
		Long: `Make the files mutual TLS needs (docs/security.md): a certificate authority
(create-ca), then one certificate per identity, signed by it (create):

  controller-<id>   the controller with --node-id <id>
  broker-<id>       the broker with --broker-id <id>
  admin, admin-<n>  an operator: the admin commands
  probe, probe-<n>  a health checker: gRPC health and the metrics listener only

Every process then runs with --tls-ca DIR/ca.pem --tls-cert DIR/NAME.pem
--tls-key DIR/NAME-key.pem. Keys are written readable by their owner only, and
no file is ever overwritten unless --overwrite says so (create only: a new CA
would orphan every certificate the old one signed).`,
		Example: `  keel cert create-ca --certs-dir certs --ca-key safe/ca-key.pem
  keel cert create controller-1 --certs-dir certs --ca-key safe/ca-key.pem --host 10.0.0.1,keel-1.example
  keel cert create broker-1 --certs-dir certs --ca-key safe/ca-key.pem --host 10.0.1.1
  keel cert create admin --certs-dir certs --ca-key safe/ca-key.pem
  keel cert create probe-lb --certs-dir certs --ca-key safe/ca-key.pem`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newCertCreateCACmd(), newCertCreateCmd())
	return cmd
}

// certDirFlags are --certs-dir and --ca-key, which both subcommands take.
type certDirFlags struct {
	dir, caKey string
}

func (f *certDirFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.dir, "certs-dir", "", "the directory of ca.pem and of the certificates and keys (required)")
	cmd.Flags().StringVar(&f.caKey, "ca-key", "", "the CA's private key (default: ca-key.pem in --certs-dir); keep it off the nodes")
}

func (f *certDirFlags) check() error {
	if f.dir == "" {
		return errors.New("--certs-dir is required")
	}
	if f.caKey == "" {
		f.caKey = filepath.Join(f.dir, caKeyFile)
	}
	return nil
}

// from adds to err, which names a file in --certs-dir or --ca-key, where
// those came from when not the command line (a KEEL_CERTS_DIR left in the
// shell), so that a path the user never typed can be traced.
func (f *certDirFlags) from(cmd *cobra.Command, err error) error {
	var from []string
	for _, name := range []string{"certs-dir", "ca-key"} {
		if fl := cmd.Flags().Lookup(name); fl != nil {
			if v := valueFrom(config.SourceOf(fl)); v != "" {
				from = append(from, "--"+name+" from "+v)
			}
		}
	}
	if len(from) == 0 {
		return err
	}
	return fmt.Errorf("%w (%s)", err, strings.Join(from, ", "))
}

func newCertCreateCACmd() *cobra.Command {
	var f certDirFlags
	lifetime := defaultCALifetime
	cmd := &cobra.Command{
		Use:   "create-ca",
		Short: "Make a certificate authority: --certs-dir/ca.pem and its key (--ca-key)",
		Long: `Make a certificate authority: its certificate in --certs-dir/ca.pem, which
every process gets as --tls-ca, and its private key in --ca-key (default
--certs-dir/ca-key.pem), readable by its owner only. Either file existing
already is refused: a new CA would orphan every certificate the old one
signed. The key signs every certificate: keep it where the nodes are not.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return err
			}
			certPath := filepath.Join(f.dir, caCertFile)
			for _, p := range []string{certPath, f.caKey} {
				if err := refuseExisting(p, "keel cert create-ca never replaces a CA: every certificate it signed would stop verifying"); err != nil {
					return f.from(cmd, err)
				}
			}
			ca, err := tlsauth.NewCAValidFor("keel CA", lifetime)
			if err != nil {
				return fmt.Errorf("--lifetime: %v", err)
			}
			keyPEM, err := ca.KeyPEM()
			if err != nil {
				return err
			}
			if err := writeNew(f.caKey, keyPEM, 0o600); err != nil {
				return err
			}
			if err := writeNew(certPath, ca.CertPEM(), 0o644); err != nil {
				_ = os.Remove(f.caKey) // written a moment ago, by this command
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "CA certificate: %s (every process's --tls-ca)\n", certPath)
			fmt.Fprintf(out, "CA key:         %s (signs certificates: keep it off the nodes)\n", f.caKey)
			fmt.Fprintf(out, "Valid until:    %s\n", ca.NotAfter().UTC().Format(time.RFC3339))
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().DurationVar(&lifetime, "lifetime", lifetime, "how long the CA, and so every certificate it signs, is valid")
	return cmd
}

func newCertCreateCmd() *cobra.Command {
	var f certDirFlags
	var hosts []string
	var overwrite bool
	lifetime := defaultCertLifetime
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Make the certificate of one identity (controller-N, broker-N, admin[-name], probe[-name], or an application), signed by the CA",
		Long: `Make the certificate and key of the identity NAME, signed by the CA in
--certs-dir (ca.pem, and --ca-key): --certs-dir/NAME.pem and NAME-key.pem, the
key readable by its owner only. NAME is one of ` + tlsauth.IdentityForms + `,
or ` + tlsauth.UserForms + `: an application's certificate, for the
Kafka listener only, as principal User:NAME, authorized by ACLs (keel acl).
Anything else is refused.

The certificate is valid for 127.0.0.1, ::1 and localhost, and for every
--host: give a controller's and a broker's the addresses and names others dial
them at (their --listen, --advertise, --voters entry), or clients refuse them.
An existing NAME.pem or NAME-key.pem is refused unless --overwrite (to renew
a certificate; restart the process to use it).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			name := args[0]
			id, err := tlsauth.ParseAnyIdentity(name)
			if err != nil {
				return err // it names NAME and what is wanted
			}
			ca, err := tlsauth.LoadCA(filepath.Join(f.dir, caCertFile), f.caKey)
			if err != nil {
				return f.from(cmd, err) // it names the file
			}
			files := tlsauth.Files{CA: filepath.Join(f.dir, caCertFile), Cert: filepath.Join(f.dir, name+".pem"), Key: filepath.Join(f.dir, name+"-key.pem")}
			if !overwrite {
				for _, p := range []string{files.Cert, files.Key} {
					if err := refuseExisting(p, "give --overwrite to replace it"); err != nil {
						return err
					}
				}
			}
			for i, h := range hosts {
				hosts[i] = strings.TrimSpace(h)
				if err := checkCertHost(hosts[i]); err != nil {
					return err
				}
			}
			certPEM, keyPEM, err := ca.IssueValidFor(name, lifetime, hosts...)
			if err != nil {
				return fmt.Errorf("%v: give a shorter --lifetime", err)
			}
			write := writeNew
			if overwrite {
				write = writeReplacing
			}
			if err := write(files.Key, keyPEM, 0o600); err != nil {
				return err
			}
			if err := write(files.Cert, certPEM, 0o644); err != nil {
				if !overwrite {
					_ = os.Remove(files.Key) // written a moment ago, by this command
				}
				return err
			}
			// Read back as it was written (an application's certificate is
			// no keel process's, which tlsauth.FromPEM loads).
			block, _ := pem.Decode(certPEM)
			if block == nil {
				return fmt.Errorf("%s: no certificate", files.Cert)
			}
			leaf, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "Certificate: %s\nKey:         %s\n", files.Cert, files.Key)
			fmt.Fprintf(out, "Identity:    %s (role %s)\n", id, id.Role)
			fmt.Fprintf(out, "Hosts:       %s\n", strings.Join(append([]string{"127.0.0.1", "::1", "localhost"}, hosts...), ", "))
			fmt.Fprintf(out, "Valid until: %s\n", leaf.NotAfter.UTC().Format(time.RFC3339))
			fmt.Fprintf(out, "Flags:       %s\n", strings.Join(files.Flags(), " "))
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().StringSliceVar(&hosts, "host", nil, "IP addresses and DNS names the certificate is valid for, beside loopback")
	cmd.Flags().DurationVar(&lifetime, "lifetime", lifetime, "how long the certificate is valid (at most until the CA expires)")
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "replace an existing certificate and key of NAME (renewal)")
	return cmd
}

// checkCertHost accepts what a certificate can name: an IP address or a
// DNS name, without a port.
func checkCertHost(h string) error {
	if net.ParseIP(h) != nil {
		return nil
	}
	if h == "" || strings.ContainsAny(h, ":/@ ,") {
		return fmt.Errorf("--host %q: want an IP address or a DNS name, without a port", h)
	}
	return nil
}

// refuseExisting fails, naming path and why, if something is at path.
func refuseExisting(path, why string) error {
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return fmt.Errorf("%s exists; %s", path, why)
	case errors.Is(err, fs.ErrNotExist):
		return nil
	}
	return fmt.Errorf("%s: %v", path, atomicfile.PathCause(err))
}

// writeNew writes a file that must not exist (its directory is made, for
// its owner only, if need be).
func writeNew(path string, data []byte, perm fs.FileMode) error {
	return writeCertFile(path, data, perm, atomicfile.WriteNew)
}

// writeReplacing writes a file, replacing what is there.
func writeReplacing(path string, data []byte, perm fs.FileMode) error {
	return writeCertFile(path, data, perm, atomicfile.WriteMode)
}

func writeCertFile(path string, data []byte, perm fs.FileMode, write func(string, []byte, fs.FileMode) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("cannot create %s: %v", filepath.Dir(path), atomicfile.PathCause(err))
	}
	if err := write(path, data, perm); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s exists: it was created meanwhile; nothing was replaced", path)
		}
		return fmt.Errorf("cannot write %s: %v", path, atomicfile.PathCause(err))
	}
	return nil
}
