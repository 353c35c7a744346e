package rpc

import "github.com/keel-dev/keel/tlsauth"

// PlaintextPrincipal is the principal a broker forwards for a client of a
// Kafka listener without TLS: nobody in particular. A controller with TLS
// authorizes it as no role; one without authorizes nothing.
const PlaintextPrincipal = "plaintext"

// maxPrincipalLen bounds a forwarded principal: the longest common name
// tlsauth.ParseIdentity accepts is admin-<64 characters>.
const maxPrincipalLen = 128

// validPrincipal checks the principal a broker forwards: none, plaintext,
// or a keel identity's common name.
func validPrincipal(p string) error {
	if p == "" || p == PlaintextPrincipal {
		return nil
	}
	if err := validMaxLen("principal", p, maxPrincipalLen); err != nil {
		return err
	}
	if _, err := tlsauth.ParseIdentity(p); err != nil {
		return invalidArgument("principal", "%q is no keel identity (want %s), nor %s", p, tlsauth.IdentityForms, PlaintextPrincipal)
	}
	return nil
}
