package acl

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	topic   = kmsg.ACLResourceTypeTopic
	group   = kmsg.ACLResourceTypeGroup
	cluster = kmsg.ACLResourceTypeCluster
	literal = kmsg.ACLResourcePatternTypeLiteral
	prefix  = kmsg.ACLResourcePatternTypePrefixed
	allow   = kmsg.ACLPermissionTypeAllow
	deny    = kmsg.ACLPermissionTypeDeny
	read    = kmsg.ACLOperationRead
	write   = kmsg.ACLOperationWrite
	all     = kmsg.ACLOperationAll
	desc    = kmsg.ACLOperationDescribe
)

func bind(typ kmsg.ACLResourceType, name string, pt kmsg.ACLResourcePatternType, principal string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) Binding {
	return Binding{ResourceType: typ, ResourceName: name, PatternType: pt, Principal: principal, Host: Wildcard, Operation: op, Permission: perm}
}

type check struct {
	principal, host string
	op              kmsg.ACLOperation
	typ             kmsg.ACLResourceType
	name            string
	want            bool
}

// TestSet_Authorize ports the cases of Kafka's StandardAuthorizerTest
// that decide on ACLs (super users are the caller's, IsSuper).
func TestSet_Authorize(t *testing.T) {
	for _, tc := range []struct {
		name     string
		bindings []Binding
		checks   []check
	}{
		{"testAuthorizationWithNoAcls", nil, []check{
			{"User:alice", "1.2.3.4", read, topic, "foo", false},
			{"User:alice", "1.2.3.4", desc, cluster, ClusterName, false},
		}},
		{"testSimpleAuthorizations", []Binding{
			bind(topic, "foo", prefix, "User:alice", read, allow),
			bind(cluster, ClusterName, literal, "User:alice", kmsg.ACLOperationAlterConfigs, allow),
		}, []check{
			{"User:alice", "1.2.3.4", read, topic, "foobar", true},
			{"User:alice", "1.2.3.4", read, topic, "foo", true},
			{"User:alice", "1.2.3.4", write, topic, "foo", false},
			{"User:alice", "1.2.3.4", read, topic, "fo", false},
			{"User:bob", "1.2.3.4", read, topic, "foobar", false},
			{"User:alice", "1.2.3.4", kmsg.ACLOperationDescribeConfigs, cluster, ClusterName, true},
			{"User:alice", "1.2.3.4", kmsg.ACLOperationAlterConfigs, cluster, ClusterName, true},
		}},
		{"testDenyPrecedenceWithOperationAll", []Binding{
			bind(topic, "foo", literal, "User:alice", all, deny),
			bind(topic, "foo", literal, "User:alice", read, allow),
			bind(topic, "foo", prefix, "User:*", all, allow),
		}, []check{
			{"User:alice", "1.2.3.4", read, topic, "foo", false},
			{"User:alice", "1.2.3.4", desc, topic, "foo", false},
			{"User:bob", "1.2.3.4", write, topic, "foo", true},
			{"User:alice", "1.2.3.4", write, topic, "foobar", true},
		}},
		{"testTopicAclWithOperationAll", []Binding{
			bind(topic, "*", literal, "User:*", all, allow),
			bind(topic, "bar", prefix, "User:alice", all, deny),
		}, []check{
			{"User:alice", "1.2.3.4", write, topic, "foo", true},
			{"User:bob", "1.2.3.4", desc, topic, "bar", true},
			{"User:alice", "1.2.3.4", write, topic, "bar", false},
			{"User:alice", "1.2.3.4", desc, topic, "barfly", false},
		}},
		{"testDenyAuditLogging: a deny for one operation leaves the others", []Binding{
			bind(topic, "foo", literal, "User:alice", all, allow),
			bind(topic, "foo", literal, "User:alice", write, deny),
		}, []check{
			{"User:alice", "1.2.3.4", write, topic, "foo", false},
			{"User:alice", "1.2.3.4", read, topic, "foo", true},
			{"User:alice", "1.2.3.4", desc, topic, "foo", true},
		}},
		{"implied DESCRIBE: by READ, WRITE, DELETE, ALTER; not the other way", []Binding{
			bind(topic, "r", literal, "User:a", read, allow),
			bind(topic, "w", literal, "User:a", write, allow),
			bind(topic, "d", literal, "User:a", kmsg.ACLOperationDelete, allow),
			bind(topic, "al", literal, "User:a", kmsg.ACLOperationAlter, allow),
			bind(topic, "desc", literal, "User:a", desc, allow),
			bind(topic, "c", literal, "User:a", kmsg.ACLOperationCreate, allow),
		}, []check{
			{"User:a", "h", desc, topic, "r", true},
			{"User:a", "h", desc, topic, "w", true},
			{"User:a", "h", desc, topic, "d", true},
			{"User:a", "h", desc, topic, "al", true},
			{"User:a", "h", read, topic, "desc", false},
			{"User:a", "h", desc, topic, "c", false},
		}},
		{"a deny of READ does not deny DESCRIBE", []Binding{
			bind(topic, "foo", literal, "User:a", desc, allow),
			bind(topic, "foo", literal, "User:a", read, deny),
		}, []check{
			{"User:a", "h", desc, topic, "foo", true},
			{"User:a", "h", read, topic, "foo", false},
		}},
		{"hosts", []Binding{
			{ResourceType: topic, ResourceName: "foo", PatternType: literal, Principal: "User:a", Host: "10.0.0.1", Operation: read, Permission: allow},
			{ResourceType: topic, ResourceName: "*", PatternType: literal, Principal: "User:b", Host: "10.0.0.9", Operation: read, Permission: deny},
			bind(topic, "*", literal, "User:b", read, allow),
		}, []check{
			{"User:a", "10.0.0.1", read, topic, "foo", true},
			{"User:a", "10.0.0.2", read, topic, "foo", false},
			{"User:b", "10.0.0.9", read, topic, "foo", false},
			{"User:b", "10.0.0.8", read, topic, "foo", true},
		}},
		{"resource types do not mix", []Binding{
			bind(group, "foo", literal, "User:a", read, allow),
		}, []check{
			{"User:a", "h", read, group, "foo", true},
			{"User:a", "h", read, topic, "foo", false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, b := range tc.bindings {
				if err := b.Validate(); err != nil {
					t.Fatalf("%v: %v", b, err)
				}
			}
			s := NewSet(tc.bindings)
			for _, c := range tc.checks {
				if got := s.Authorize(c.principal, c.host, c.op, c.typ, c.name); got != c.want {
					t.Errorf("%s@%s %s %s:%s = %v, want %v", c.principal, c.host, c.op, c.typ, c.name, got, c.want)
				}
			}
		})
	}
}

func TestSet_AuthorizeAny(t *testing.T) {
	for _, tc := range []struct {
		name     string
		bindings []Binding
		want     bool
	}{
		{"no acls", nil, false},
		{"a literal allow", []Binding{bind(topic, "t", literal, "User:a", write, allow)}, true},
		{"ALL grants", []Binding{bind(topic, "t", prefix, "User:*", all, allow)}, true},
		{"another operation", []Binding{bind(topic, "t", literal, "User:a", read, allow)}, false},
		{"another principal", []Binding{bind(topic, "t", literal, "User:b", write, allow)}, false},
		{"denied on the wildcard", []Binding{bind(topic, "t", literal, "User:a", write, allow), bind(topic, "*", literal, "User:a", write, deny)}, false},
		{"denied by a covering prefix", []Binding{bind(topic, "tx", prefix, "User:a", write, allow), bind(topic, "t", prefix, "User:a", all, deny)}, false},
		{"a narrower deny leaves the rest", []Binding{bind(topic, "t", prefix, "User:a", write, allow), bind(topic, "tx", prefix, "User:a", write, deny)}, true},
		{"denied literal", []Binding{bind(topic, "t", literal, "User:a", write, allow), bind(topic, "t", literal, "User:a", write, deny)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NewSet(tc.bindings).AuthorizeAny("User:a", "h", write, topic); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBinding_Validate(t *testing.T) {
	ok := bind(topic, "foo", literal, "User:alice", read, allow)
	for _, tc := range []struct {
		name    string
		edit    func(*Binding)
		wantErr string
	}{
		{"valid", func(*Binding) {}, ""},
		{"unknown resource type", func(b *Binding) { b.ResourceType = 42 }, "resource type UNKNOWN(42)"},
		{"ANY resource type", func(b *Binding) { b.ResourceType = kmsg.ACLResourceTypeAny }, "resource type ANY"},
		{"user resource type", func(b *Binding) { b.ResourceType = kmsg.ACLResourceTypeUser }, "resource type USER"},
		{"pattern ANY", func(b *Binding) { b.PatternType = kmsg.ACLResourcePatternTypeAny }, "pattern type ANY"},
		{"pattern MATCH", func(b *Binding) { b.PatternType = kmsg.ACLResourcePatternTypeMatch }, "pattern type MATCH"},
		{"empty name", func(b *Binding) { b.ResourceName = "" }, "resource name is empty"},
		{"long name", func(b *Binding) { b.ResourceName = strings.Repeat("x", 2000) }, "at most 1024"},
		{"cluster by another name", func(b *Binding) { b.ResourceType = cluster }, `the only CLUSTER resource is the literal "kafka-cluster"`},
		{"operation ANY", func(b *Binding) { b.Operation = kmsg.ACLOperationAny }, "operation ANY"},
		{"operation unknown", func(b *Binding) { b.Operation = 99 }, "operation UNKNOWN(99)"},
		{"permission ANY", func(b *Binding) { b.Permission = kmsg.ACLPermissionTypeAny }, "permission ANY"},
		{"principal without User:", func(b *Binding) { b.Principal = "alice" }, `principal "alice" is not of the form User:NAME`},
		{"principal User:", func(b *Binding) { b.Principal = "User:" }, "not of the form"},
		{"empty host", func(b *Binding) { b.Host = "" }, "host is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := ok
			tc.edit(&b)
			err := b.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestFilter_Matches(t *testing.T) {
	str := func(s string) *string { return &s }
	lit := bind(topic, "foo", literal, "User:a", read, allow)
	pre := bind(topic, "fo", prefix, "User:a", read, allow)
	wild := bind(topic, "*", literal, "User:b", write, deny)
	other := bind(group, "foo", literal, "User:a", read, allow)
	anyF := Filter{ResourceType: kmsg.ACLResourceTypeAny, PatternType: kmsg.ACLResourcePatternTypeAny, Operation: kmsg.ACLOperationAny, Permission: kmsg.ACLPermissionTypeAny}
	for _, tc := range []struct {
		name string
		edit func(*Filter)
		want []bool // lit, pre, wild, other
	}{
		{"ANY matches all", func(*Filter) {}, []bool{true, true, true, true}},
		{"topic", func(f *Filter) { f.ResourceType = topic }, []bool{true, true, true, false}},
		{"literal name foo", func(f *Filter) { f.ResourceName = str("foo") }, []bool{true, false, false, true}},
		{"pattern LITERAL", func(f *Filter) { f.PatternType = literal }, []bool{true, false, true, true}},
		{"MATCH foo", func(f *Filter) { f.ResourceName, f.PatternType = str("foo"), kmsg.ACLResourcePatternTypeMatch }, []bool{true, true, true, true}},
		{"MATCH bar", func(f *Filter) { f.ResourceName, f.PatternType = str("bar"), kmsg.ACLResourcePatternTypeMatch }, []bool{false, false, true, false}},
		{"principal", func(f *Filter) { f.Principal = str("User:b") }, []bool{false, false, true, false}},
		{"DENY", func(f *Filter) { f.Permission = deny }, []bool{false, false, true, false}},
		{"WRITE", func(f *Filter) { f.Operation = write }, []bool{false, false, true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := anyF
			tc.edit(&f)
			if err := f.Validate(); err != nil {
				t.Fatal(err)
			}
			for i, b := range []Binding{lit, pre, wild, other} {
				if got := f.Matches(b); got != tc.want[i] {
					t.Errorf("%v: %v, want %v", b, got, tc.want[i])
				}
			}
		})
	}
	if err := (Filter{}).Validate(); err == nil {
		t.Error("a filter of UNKNOWN enums validated")
	}
}
