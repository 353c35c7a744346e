package tlsauth

import (
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Role is what a certificate lets its holder be.
type Role int

const (
	// RoleNone is a certificate that names no Keel role.
	RoleNone Role = iota
	// RoleController is a controller node: common name controller-<node id>.
	RoleController
	// RoleBroker is a broker: common name broker-<broker id>.
	RoleBroker
	// RoleAdmin is an operator: common name admin or admin-<name>.
	RoleAdmin
	// RoleProbe is a health checker (a load balancer, a monitoring probe):
	// common name probe or probe-<name>. It may check health and nothing
	// else: no reads of metadata, no writes.
	RoleProbe
	// RoleUser is an application on the Kafka listener (ParseUser): its
	// principal is User:<common name>, authorized by ACLs. No keel server
	// but the Kafka listener accepts it.
	RoleUser
)

// KeelRoles are every role a keel certificate may name: a server that
// lets in any keel identity, and nothing else, requires one of them
// (Config.Server).
func KeelRoles() []Role { return []Role{RoleController, RoleBroker, RoleAdmin, RoleProbe} }

func (r Role) String() string {
	switch r {
	case RoleController:
		return "controller"
	case RoleBroker:
		return "broker"
	case RoleAdmin:
		return "admin"
	case RoleProbe:
		return "probe"
	case RoleUser:
		return "user"
	}
	return "none"
}

// Identity is who a certificate says its holder is.
type Identity struct {
	Role Role
	// ID is the controller's node id or the broker's id; 0 for an admin or
	// a probe.
	ID int32
	// Name is the certificate's common name, as written.
	Name string
}

// String is the common name, which is how errors name a caller.
func (id Identity) String() string { return id.Name }

// maxAdminName bounds the <name> of admin-<name> and probe-<name>.
const maxAdminName = 64

// IdentityForms lists the common names ParseIdentity accepts, as errors
// name them.
const IdentityForms = "controller-<id>, broker-<id>, admin, admin-<name>, probe or probe-<name>"

// ParseIdentity reads the identity a certificate's Subject Common Name
// names: controller-<id> (id a positive node id), broker-<id> (id a broker
// id, 0 or more), admin or admin-<name>, probe or probe-<name> (<name>:
// letters, digits, '.', '_', '-'). Ids are plain decimal without a sign or
// leading zeros, so that one broker has exactly one name. Anything else
// fails, naming the common name.
func ParseIdentity(cn string) (Identity, error) {
	for _, named := range []struct {
		prefix string
		role   Role
	}{{"admin", RoleAdmin}, {"probe", RoleProbe}} {
		if cn == named.prefix {
			return Identity{Role: named.role, Name: cn}, nil
		}
		if name, ok := strings.CutPrefix(cn, named.prefix+"-"); ok && validAdminName(name) {
			return Identity{Role: named.role, Name: cn}, nil
		}
	}
	if s, ok := strings.CutPrefix(cn, "controller-"); ok {
		if id, ok := parseID(s); ok && id > 0 {
			return Identity{Role: RoleController, ID: id, Name: cn}, nil
		}
	}
	if s, ok := strings.CutPrefix(cn, "broker-"); ok {
		if id, ok := parseID(s); ok {
			return Identity{Role: RoleBroker, ID: id, Name: cn}, nil
		}
	}
	return Identity{Name: cn}, fmt.Errorf("certificate common name %q names no keel role (want %s)", cn, IdentityForms)
}

// UserForms describes the common names ParseUser accepts, as errors name
// them.
const UserForms = "an application name: letters, digits, '.', '_', '-', at most 64, not starting with controller, broker, admin or probe"

// ParseUser reads an application's identity (RoleUser) from a certificate's
// common name: letters, digits, '.', '_', '-', at most 64 of them, and
// nothing a keel role begins with, so that no user name can be mistaken
// for a role's, now or when a role gains a form.
func ParseUser(cn string) (Identity, error) {
	if !validAdminName(cn) {
		return Identity{Name: cn}, fmt.Errorf("%q is not a user name (want %s)", cn, UserForms)
	}
	for _, p := range []string{"controller", "broker", "admin", "probe"} {
		if strings.HasPrefix(cn, p) {
			return Identity{Name: cn}, fmt.Errorf("%q begins as a keel role's name (%s) but is none: want %s, or %s", cn, p, IdentityForms, UserForms)
		}
	}
	return Identity{Role: RoleUser, Name: cn}, nil
}

// ParseAnyIdentity is ParseIdentity, or else ParseUser: the identities the
// Kafka listener takes.
func ParseAnyIdentity(cn string) (Identity, error) {
	id, err := ParseIdentity(cn)
	if err == nil {
		return id, nil
	}
	if u, uerr := ParseUser(cn); uerr == nil {
		return u, nil
	}
	return id, fmt.Errorf("certificate common name %q names no keel role (want %s) and is no user name (want %s)", cn, IdentityForms, UserForms)
}

// parseID accepts the canonical decimal form of a non-negative int32.
func parseID(s string) (int32, bool) {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 0 || n > math.MaxInt32 {
		return 0, false
	}
	return int32(n), true
}

func validAdminName(s string) bool {
	if s == "" || len(s) > maxAdminName {
		return false
	}
	for _, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}

// errNoPeerCertificate: the peer sent no certificate. A server that requires
// one never gets here; a client whose server sent none does.
var errNoPeerCertificate = errors.New("the peer presented no certificate")

// PeerIdentity returns the identity of a TLS peer from the certificates it
// presented (its leaf first), which the caller must have verified.
func PeerIdentity(certs []*x509.Certificate) (Identity, error) {
	if len(certs) == 0 {
		return Identity{}, errNoPeerCertificate
	}
	return ParseIdentity(certs[0].Subject.CommonName)
}
