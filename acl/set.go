package acl

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Set is an immutable collection of bindings, indexed by resource for the
// decision: literal names (the wildcard among them) and prefixes, per
// resource type. A nil *Set holds none, so it denies everything.
type Set struct {
	byType map[kmsg.ACLResourceType]*typeIndex
	n      int
}

type typeIndex struct {
	literal, prefixed map[string][]Binding
}

// NewSet indexes bindings, which must be valid (Binding.Validate).
func NewSet(bindings []Binding) *Set {
	s := &Set{byType: map[kmsg.ACLResourceType]*typeIndex{}, n: len(bindings)}
	for _, b := range bindings {
		ti := s.byType[b.ResourceType]
		if ti == nil {
			ti = &typeIndex{literal: map[string][]Binding{}, prefixed: map[string][]Binding{}}
			s.byType[b.ResourceType] = ti
		}
		m := ti.literal
		if b.PatternType == kmsg.ACLResourcePatternTypePrefixed {
			m = ti.prefixed
		}
		m[b.ResourceName] = append(m[b.ResourceName], b)
	}
	return s
}

// Len is the number of bindings.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return s.n
}

// Authorize decides, as Kafka's StandardAuthorizer with
// allow.everyone.if.no.acl.found=false, whether principal connecting from
// host may do op to the resource of type typ named name: denied if any
// DENY binding that applies matches op (or is ALL), else allowed if any
// ALLOW binding that applies grants op, itself, through ALL or by
// implication (DESCRIBE by READ, WRITE, DELETE or ALTER; DESCRIBE_CONFIGS
// by ALTER_CONFIGS), else denied. A binding applies when its pattern covers
// the resource (the literal name, the literal wildcard, a prefix of the
// name), its principal is principal or User:*, and its host is host or *.
// Super users are the caller's to check first.
func (s *Set) Authorize(principal, host string, op kmsg.ACLOperation, typ kmsg.ACLResourceType, name string) bool {
	if s == nil {
		return false
	}
	ti := s.byType[typ]
	if ti == nil {
		return false
	}
	allowed := false
	check := func(bs []Binding) bool {
		for _, b := range bs {
			if !b.matchesWho(principal, host) {
				continue
			}
			if b.Permission == kmsg.ACLPermissionTypeDeny {
				if b.Operation == kmsg.ACLOperationAll || b.Operation == op {
					return false
				}
				continue
			}
			if grants(b.Operation, op) {
				allowed = true
			}
		}
		return true
	}
	if !check(ti.literal[name]) || (name != Wildcard && !check(ti.literal[Wildcard])) {
		return false
	}
	if len(ti.prefixed) > 0 {
		// Every prefix of name, the whole name included: a lookup per
		// byte, none per binding.
		for i := 1; i <= len(name); i++ {
			if !check(ti.prefixed[name[:i]]) {
				return false
			}
		}
	}
	return allowed
}

// AuthorizeAny says whether principal may do op to some resource of type
// typ, as Kafka's authorizeByResourceType: an ALLOW binding granting op (or
// ALL) that no DENY binding for op (or ALL) covers whole. Kafka 3 lets a
// producer that may write some topic write idempotently this way.
func (s *Set) AuthorizeAny(principal, host string, op kmsg.ACLOperation, typ kmsg.ACLResourceType) bool {
	if s == nil || s.byType[typ] == nil {
		return false
	}
	ti := s.byType[typ]
	denies := func(b Binding) bool {
		return b.Permission == kmsg.ACLPermissionTypeDeny && b.matchesWho(principal, host) &&
			(b.Operation == kmsg.ACLOperationAll || b.Operation == op)
	}
	deniedLiteral := func(name string) bool {
		for _, b := range ti.literal[name] {
			if denies(b) {
				return true
			}
		}
		return false
	}
	if deniedLiteral(Wildcard) {
		return false
	}
	// deniedUnder: a DENY prefix covers every name starting with name.
	deniedUnder := func(name string) bool {
		for p, bs := range ti.prefixed {
			if strings.HasPrefix(name, p) {
				for _, b := range bs {
					if denies(b) {
						return true
					}
				}
			}
		}
		return false
	}
	for _, m := range []map[string][]Binding{ti.literal, ti.prefixed} {
		for name, bs := range m {
			for _, b := range bs {
				if b.Permission != kmsg.ACLPermissionTypeAllow || !b.matchesWho(principal, host) ||
					(b.Operation != kmsg.ACLOperationAll && b.Operation != op) {
					continue
				}
				if deniedUnder(name) {
					continue
				}
				if b.PatternType == kmsg.ACLResourcePatternTypeLiteral && name != Wildcard && deniedLiteral(name) {
					continue
				}
				return true
			}
		}
	}
	return false
}

// matchesWho: b names principal (or every principal) and host (or every
// host).
func (b Binding) matchesWho(principal, host string) bool {
	return (b.Principal == principal || b.Principal == WildcardPrincipal) && (b.Host == host || b.Host == Wildcard)
}

// grants says whether an ALLOW binding for have allows want.
func grants(have, want kmsg.ACLOperation) bool {
	switch {
	case have == kmsg.ACLOperationAll || have == want:
		return true
	case want == kmsg.ACLOperationDescribe:
		return have == kmsg.ACLOperationRead || have == kmsg.ACLOperationWrite ||
			have == kmsg.ACLOperationDelete || have == kmsg.ACLOperationAlter
	case want == kmsg.ACLOperationDescribeConfigs:
		return have == kmsg.ACLOperationAlterConfigs
	}
	return false
}

// IsSuper says whether principal is one of supers, Kafka's super.users.
func IsSuper(principal string, supers []string) bool {
	for _, s := range supers {
		if s == principal {
			return true
		}
	}
	return false
}
