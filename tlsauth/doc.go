// Package tlsauth holds Keel's mutual TLS: the server and client tls.Configs
// built from --tls-cert, --tls-key and --tls-ca, the identity a certificate
// names (controller-<id>, broker-<id>, admin), and a throwaway certificate
// authority for `keel dev --tls` and tests.
//
// It exists so that every process (controller, broker, admin tool) turns the
// same three flags into the same TLS settings, and so that "who is calling"
// is read from a certificate in one place. It decides nothing about what an
// identity may do: the rpc package's rule table does.
package tlsauth
