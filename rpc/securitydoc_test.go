package rpc

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/keel-dev/keel/tlsauth"
)

// securityDoc is the page whose table says which role may call what.
var securityDoc = filepath.Join("..", "docs", "security.md")

// notGRPC are how the first cells of the table's rows that are no gRPC
// call begin: the rule tables do not cover them.
var notGRPC = []string{"raft (not gRPC)", "the metrics listener"}

// TestSecurityDoc_RoleTableMatchesRules reads the table of who may call
// what in docs/security.md and checks every cell against authorize: each
// method of methodRules and grpcServiceRules is in exactly one row, and
// each role column says what authorize decides for that role ("yes",
// "no", or "only for its own ..." when a broker may act only as itself).
// Change a rule and this fails until the page says the same.
func TestSecurityDoc_RoleTableMatchesRules(t *testing.T) {
	text, err := os.ReadFile(securityDoc)
	if err != nil {
		t.Fatal(err)
	}
	header, rows := roleTable(t, string(text))
	// The identity each role column stands for, and its id.
	callers := map[int]tlsauth.Identity{}
	for i, h := range header {
		cn := map[string]string{"`controller-N`": "controller-1", "`broker-N`": "broker-1", "`admin`": "admin", "`probe`": "probe"}[h]
		if cn == "" {
			continue
		}
		id, err := tlsauth.ParseIdentity(cn)
		if err != nil {
			t.Fatal(err)
		}
		callers[i] = id
	}
	if len(callers) != 4 {
		t.Fatalf("the table's header %q lacks a column per role (controller-N, broker-N, admin, probe)", header)
	}

	all := maps.Clone(methodRules)
	maps.Copy(all, grpcServiceRules)
	documented := map[string]int{}
	backticked := regexp.MustCompile("`([^`]+)`")
	for _, row := range rows {
		if slices.ContainsFunc(notGRPC, func(p string) bool { return strings.HasPrefix(row[0], p) }) {
			continue
		}
		var methods []string
		for _, tok := range backticked.FindAllStringSubmatch(row[0], -1) {
			found := methodsNamed(all, tok[1])
			if len(found) == 0 {
				t.Errorf("row %q: %q is no method or service with a rule", row[0], tok[1])
			}
			for _, m := range found {
				if !slices.Contains(methods, m) {
					methods = append(methods, m)
				}
			}
		}
		if len(methods) == 0 {
			t.Errorf("row %q names no method", row[0])
			continue
		}
		for _, m := range methods {
			documented[m]++
			for col, id := range callers {
				want := cellVerdict(row[col])
				if got := verdict(t, id, m, all[m]); got != want {
					t.Errorf("%s for %s: the table says %q (%s), authorize says %s", m, header[col], row[col], want, got)
				}
			}
		}
	}
	for _, m := range slices.Sorted(maps.Keys(all)) {
		if documented[m] != 1 {
			t.Errorf("%s is in %d rows of the table in %s, want 1", m, documented[m], securityDoc)
		}
	}
}

// roleTable finds the Markdown table whose header starts "| RPC |" and
// returns its header cells and its rows' cells.
func roleTable(t *testing.T, text string) (header []string, rows [][]string) {
	t.Helper()
	cells := func(line string) []string {
		parts := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for i := range parts {
			parts[i] = strings.TrimSpace(parts[i])
		}
		return parts
	}
	in := false
	for line := range strings.Lines(text) {
		switch {
		case !in && strings.HasPrefix(line, "| RPC |"):
			in, header = true, cells(line)
		case in && strings.HasPrefix(line, "| ---"):
		case in && strings.HasPrefix(line, "|"):
			row := cells(line)
			if len(row) != len(header) {
				t.Fatalf("row %q has %d cells, the header %d", line, len(row), len(header))
			}
			rows = append(rows, row)
		case in:
			return header, rows
		}
	}
	if !in {
		t.Fatalf("%s has no table whose header starts \"| RPC |\"", securityDoc)
	}
	return header, rows
}

// methodsNamed are the methods name stands for: a service's full name
// (grpc.health.v1.Health) all of its methods, a method's short name every
// method so named (ServerReflectionInfo: v1 and v1alpha).
func methodsNamed(all map[string]rule, name string) []string {
	var out []string
	for m := range all {
		service, short, _ := strings.Cut(strings.TrimPrefix(m, "/"), "/")
		if service == name || short == name {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}

type access3 string

const (
	allowed access3 = "yes"
	denied  access3 = "no"
	ownOnly access3 = "only as itself"
	// forwardOnly: a broker forwarding an admin client's principal.
	forwardOnly access3 = "only forwarding an admin's request"
)

// cellVerdict reads a role cell: "yes, any id" is yes, "only for its own
// broker_id" only as itself.
func cellVerdict(cell string) access3 {
	switch {
	case strings.HasPrefix(cell, "yes"):
		return allowed
	case strings.HasPrefix(cell, "no"):
		return denied
	case strings.HasPrefix(cell, "only for its own"):
		return ownOnly
	case strings.HasPrefix(cell, "only forwarding an admin"):
		return forwardOnly
	}
	return access3("unreadable: " + cell)
}

// verdict asks authorize whether id may call method, for itself (a
// request naming id's own broker id) and for another.
func verdict(t *testing.T, id tlsauth.Identity, method string, r rule) access3 {
	t.Helper()
	var own, other proto.Message
	switch r.access {
	case accessBrokerSelf, accessReplica:
		own, other = requestNaming(t, method, r.field, protoreflect.ValueOfInt32(id.ID)), requestNaming(t, method, r.field, protoreflect.ValueOfInt32(id.ID+1))
	case accessForwarded:
		forwarded, alone := requestNaming(t, method, r.field, protoreflect.ValueOfString("admin")), requestNaming(t, method, r.field, protoreflect.ValueOfString(""))
		switch f, a := authorize(id, method, forwarded) == nil, authorize(id, method, alone) == nil; {
		case f && a:
			return allowed
		case f:
			return forwardOnly
		case !a:
			return denied
		}
		return access3(fmt.Sprintf("alone only (%v)", authorize(id, method, forwarded)))
	}
	self, anyone := authorize(id, method, own) == nil, authorize(id, method, other) == nil
	switch {
	case self && anyone:
		return allowed
	case self:
		return ownOnly
	case !anyone:
		return denied
	}
	return access3(fmt.Sprintf("others only (%v)", authorize(id, method, own)))
}

// requestNaming is method's request with its field set to v: a broker id
// or a forwarded principal.
func requestNaming(t *testing.T, method string, field protoreflect.Name, v protoreflect.Value) proto.Message {
	t.Helper()
	service, short, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	md := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(short))
	msg := dynamicpb.NewMessage(md.Input())
	msg.Set(md.Input().Fields().ByName(field), v)
	return msg
}
