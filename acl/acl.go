// Package acl is Keel's authorizer, after Kafka's StandardAuthorizer: ACL
// bindings (a resource pattern and an access control entry), the filters
// DescribeAcls and DeleteAcls match them with, and the decision whether a
// principal may do an operation to a resource. It is pure: the state
// machine holds the bindings (fsm), brokers and controllers decide with
// them. It imports only the standard library and kmsg's enums, since the
// broker library links it.
package acl

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// ClusterName is the one name of the CLUSTER resource, as Kafka's.
const ClusterName = "kafka-cluster"

// Wildcard, as a literal resource name, matches every resource of its
// type; as a host, every host.
const Wildcard = "*"

// WildcardPrincipal matches every principal.
const WildcardPrincipal = "User:*"

// Anonymous is the principal of a client that did not authenticate.
const Anonymous = "User:ANONYMOUS"

// Limits on a binding's strings: a topic name is at most 249 bytes, a
// group id or transactional id has no limit in Kafka, but a binding is
// metadata every broker holds.
const (
	maxName      = 1024
	maxPrincipal = 256
	maxHost      = 256
)

// Binding is one ACL: who (principal, host) may or may not (permission) do
// what (operation) to which resources (type, name, pattern type).
type Binding struct {
	ResourceType kmsg.ACLResourceType
	ResourceName string
	PatternType  kmsg.ACLResourcePatternType
	Principal    string
	Host         string
	Operation    kmsg.ACLOperation
	Permission   kmsg.ACLPermissionType
}

func (b Binding) String() string {
	return fmt.Sprintf("(principal=%s, host=%s, operation=%s, permission=%s) on %s:%s:%s",
		b.Principal, b.Host, b.Operation, b.Permission, b.ResourceType, b.PatternType, b.ResourceName)
}

// Validate checks a binding to be created, as Kafka's AclControlManager
// and AclApis do: a concrete resource type Keel authorizes (topic, group,
// cluster, transactional id), a literal or prefixed pattern, a concrete
// operation and permission, a User principal, a host. The error names the
// field and is one line.
func (b Binding) Validate() error {
	switch b.ResourceType {
	case kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup, kmsg.ACLResourceTypeCluster, kmsg.ACLResourceTypeTransactionalId:
	default:
		return fmt.Errorf("resource type %s: an ACL is for a TOPIC, GROUP, CLUSTER or TRANSACTIONAL_ID", typeName(b.ResourceType))
	}
	switch b.PatternType {
	case kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLResourcePatternTypePrefixed:
	default:
		return fmt.Errorf("pattern type %s: an ACL's pattern is LITERAL or PREFIXED", patternName(b.PatternType))
	}
	switch {
	case b.ResourceName == "":
		return fmt.Errorf("resource name is empty")
	case len(b.ResourceName) > maxName:
		return fmt.Errorf("resource name is %d bytes; at most %d", len(b.ResourceName), maxName)
	case b.ResourceType == kmsg.ACLResourceTypeCluster && (b.ResourceName != ClusterName || b.PatternType != kmsg.ACLResourcePatternTypeLiteral):
		return fmt.Errorf("resource name %q: the only CLUSTER resource is the literal %q", b.ResourceName, ClusterName)
	}
	if !concreteOperation(b.Operation) {
		return fmt.Errorf("operation %s: an ACL names one operation, or ALL", opName(b.Operation))
	}
	if b.Permission != kmsg.ACLPermissionTypeAllow && b.Permission != kmsg.ACLPermissionTypeDeny {
		return fmt.Errorf("permission %s: an ACL ALLOWs or DENYs", permName(b.Permission))
	}
	if err := ValidPrincipal(b.Principal); err != nil {
		return err
	}
	switch {
	case b.Host == "":
		return fmt.Errorf("host is empty (%q is every host)", Wildcard)
	case len(b.Host) > maxHost:
		return fmt.Errorf("host is %d bytes; at most %d", len(b.Host), maxHost)
	}
	return nil
}

// ValidPrincipal checks a principal an ACL names: User:NAME, NAME not
// empty (User:* is every principal). Keel's principals are all users.
func ValidPrincipal(p string) error {
	name, ok := strings.CutPrefix(p, "User:")
	switch {
	case len(p) > maxPrincipal:
		return fmt.Errorf("principal is %d bytes; at most %d", len(p), maxPrincipal)
	case !ok || name == "":
		return fmt.Errorf("principal %q is not of the form User:NAME", p)
	}
	return nil
}

// concreteOperation: an operation an ACL may name.
func concreteOperation(op kmsg.ACLOperation) bool {
	return op >= kmsg.ACLOperationAll && op <= kmsg.ACLOperationDescribeTokens
}

// The enums' String says UNKNOWN for every value it does not know; errors
// name the number too, so a client sees what it sent.
func typeName(t kmsg.ACLResourceType) string { return enumName(t.String(), int8(t)) }
func patternName(p kmsg.ACLResourcePatternType) string {
	return enumName(p.String(), int8(p))
}
func opName(o kmsg.ACLOperation) string        { return enumName(o.String(), int8(o)) }
func permName(p kmsg.ACLPermissionType) string { return enumName(p.String(), int8(p)) }
func enumName(name string, v int8) string {
	if name == "UNKNOWN" && v != 0 {
		return fmt.Sprintf("UNKNOWN(%d)", v)
	}
	return name
}

// Filter selects bindings, as Kafka's AclBindingFilter: a nil string and
// the ANY enums match everything; pattern type MATCH selects the bindings
// that apply to the named resource (the literal name, the literal
// wildcard, and every prefix of it).
type Filter struct {
	ResourceType kmsg.ACLResourceType
	ResourceName *string
	PatternType  kmsg.ACLResourcePatternType
	Principal    *string
	Host         *string
	Operation    kmsg.ACLOperation
	Permission   kmsg.ACLPermissionType
}

// Validate checks a filter as Kafka does: no UNKNOWN enum.
func (f Filter) Validate() error {
	switch {
	case f.ResourceType < kmsg.ACLResourceTypeAny || f.ResourceType > kmsg.ACLResourceTypeUser:
		return fmt.Errorf("resource type %s is unknown", typeName(f.ResourceType))
	case f.PatternType < kmsg.ACLResourcePatternTypeAny || f.PatternType > kmsg.ACLResourcePatternTypePrefixed:
		return fmt.Errorf("pattern type %s is unknown", patternName(f.PatternType))
	case f.Operation < kmsg.ACLOperationAny || f.Operation > kmsg.ACLOperationDescribeTokens:
		return fmt.Errorf("operation %s is unknown", opName(f.Operation))
	case f.Permission < kmsg.ACLPermissionTypeAny || f.Permission > kmsg.ACLPermissionTypeAllow:
		return fmt.Errorf("permission %s is unknown", permName(f.Permission))
	}
	return nil
}

// Matches says whether f selects b.
func (f Filter) Matches(b Binding) bool {
	if f.ResourceType != kmsg.ACLResourceTypeAny && f.ResourceType != b.ResourceType {
		return false
	}
	if !f.matchesPattern(b) {
		return false
	}
	switch {
	case f.Principal != nil && *f.Principal != b.Principal,
		f.Host != nil && *f.Host != b.Host,
		f.Operation != kmsg.ACLOperationAny && f.Operation != b.Operation,
		f.Permission != kmsg.ACLPermissionTypeAny && f.Permission != b.Permission:
		return false
	}
	return true
}

func (f Filter) matchesPattern(b Binding) bool {
	switch f.PatternType {
	case kmsg.ACLResourcePatternTypeAny:
		return f.ResourceName == nil || *f.ResourceName == b.ResourceName
	case kmsg.ACLResourcePatternTypeMatch:
		if f.ResourceName == nil {
			return true
		}
		return appliesTo(b, *f.ResourceName)
	}
	return f.PatternType == b.PatternType && (f.ResourceName == nil || *f.ResourceName == b.ResourceName)
}

// appliesTo says whether b's pattern covers the resource named name (of
// b's type).
func appliesTo(b Binding, name string) bool {
	if b.PatternType == kmsg.ACLResourcePatternTypePrefixed {
		return strings.HasPrefix(name, b.ResourceName)
	}
	return b.ResourceName == name || b.ResourceName == Wildcard
}
