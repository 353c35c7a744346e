package rpc

import (
	"strings"

	"github.com/keel-dev/keel/acl"
	"github.com/keel-dev/keel/tlsauth"
)

// PlaintextPrincipal is the principal a broker forwards for a client of a
// Kafka listener without TLS that did not authenticate: nobody in
// particular (Kafka's User:ANONYMOUS). A controller with TLS authorizes it
// by its ACLs; one without authorizes nothing.
const PlaintextPrincipal = acl.Anonymous

// legacyPlaintextPrincipal is what brokers before principals took Kafka's
// form forwarded for a plaintext client; with a bare common name for a
// certificate, it is still accepted during a rolling upgrade.
const legacyPlaintextPrincipal = "plaintext"

// maxPrincipalLen bounds a forwarded principal.
const maxPrincipalLen = 256

// validPrincipal checks the principal a broker forwards: none, or
// User:NAME (as acl.ValidPrincipal), or a legacy form.
func validPrincipal(p string) error {
	if p == "" || p == legacyPlaintextPrincipal {
		return nil
	}
	if err := validMaxLen("principal", p, maxPrincipalLen); err != nil {
		return err
	}
	if _, err := tlsauth.ParseIdentity(p); err == nil {
		return nil
	}
	if err := acl.ValidPrincipal(p); err != nil {
		return invalidArgument("principal", "%v", err)
	}
	return nil
}

// PrincipalIdentity is the keel identity a principal names: User:admin is
// the admin role's. A principal naming no keel role (an application's)
// has RoleNone or RoleUser.
func PrincipalIdentity(p string) tlsauth.Identity {
	id, _ := tlsauth.ParseIdentity(strings.TrimPrefix(p, "User:"))
	return id
}
