package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/acl"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

func newACLCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "acl", Short: "Add, list and remove the ACLs that authorize Kafka clients"}
	cmd.AddCommand(newACLAddCmd(), newACLListCmd(), newACLRemoveCmd())
	return cmd
}

// aclJSON is the JSON contract of `keel acl` (DESIGN.md): one binding,
// its enums in Kafka's names.
type aclJSON struct {
	ResourceType string `json:"resource_type"`
	ResourceName string `json:"resource_name"`
	PatternType  string `json:"pattern_type"`
	Principal    string `json:"principal"`
	Host         string `json:"host"`
	Operation    string `json:"operation"`
	Permission   string `json:"permission"`
}

func aclOf(b acl.Binding) aclJSON {
	return aclJSON{ResourceType: b.ResourceType.String(), ResourceName: b.ResourceName, PatternType: b.PatternType.String(),
		Principal: b.Principal, Host: b.Host, Operation: b.Operation.String(), Permission: b.Permission.String()}
}

func writeACLs(w io.Writer, acls []aclJSON) error {
	if len(acls) == 0 {
		fmt.Fprintln(w, "no ACLs")
		return nil
	}
	rows := [][]string{{"RESOURCE", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"}}
	for _, a := range acls {
		rows = append(rows, []string{a.ResourceType + ":" + a.ResourceName, a.PatternType, a.Principal, a.Host, a.Operation, a.Permission})
	}
	return printTable(w, rows)
}

// aclFlags are kafka-acls.sh's: who, what, on which resource.
type aclFlags struct {
	principal, host, pattern          string
	operations                        []string
	allow, deny, cluster              bool
	topic, group, transactionalID     string
	principalSet, hostSet, patternSet bool
}

func (f *aclFlags) add(cmd *cobra.Command, patternDefault, what string) {
	fl := cmd.Flags()
	fl.StringVar(&f.principal, "principal", "", "the principal, User:NAME (User:* is every principal)"+what)
	fl.StringVar(&f.host, "host", acl.Wildcard, "the client address the ACL is for (* is every host)"+what)
	fl.StringSliceVar(&f.operations, "operation", nil, "operations: ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE"+what)
	fl.BoolVar(&f.allow, "allow", false, "an ALLOW ACL")
	fl.BoolVar(&f.deny, "deny", false, "a DENY ACL")
	fl.StringVar(&f.topic, "topic", "", "the topic (or topic name prefix, or *)")
	fl.StringVar(&f.group, "group", "", "the consumer group (or prefix, or *)")
	fl.StringVar(&f.transactionalID, "transactional-id", "", "the transactional id (or prefix, or *)")
	fl.BoolVar(&f.cluster, "cluster", false, "the cluster ("+acl.ClusterName+")")
	fl.StringVar(&f.pattern, "resource-pattern-type", patternDefault, "how the resource name matches: literal or prefixed"+
		map[bool]string{true: " (also any, or match: every ACL that applies to the name)"}[patternDefault != "literal"])
	cmd.PreRun = func(cmd *cobra.Command, _ []string) {
		f.principalSet, f.hostSet, f.patternSet = cmd.Flags().Changed("principal"), cmd.Flags().Changed("host"), cmd.Flags().Changed("resource-pattern-type")
	}
}

// resource reads the one resource flag given; none is every resource
// (ANY) when any is allowed.
func (f *aclFlags) resource(any bool) (kmsg.ACLResourceType, *string, error) {
	var typ kmsg.ACLResourceType
	var name string
	n := 0
	for _, r := range []struct {
		set  bool
		typ  kmsg.ACLResourceType
		name string
	}{
		{f.topic != "", kmsg.ACLResourceTypeTopic, f.topic},
		{f.group != "", kmsg.ACLResourceTypeGroup, f.group},
		{f.transactionalID != "", kmsg.ACLResourceTypeTransactionalId, f.transactionalID},
		{f.cluster, kmsg.ACLResourceTypeCluster, acl.ClusterName},
	} {
		if r.set {
			typ, name = r.typ, r.name
			n++
		}
	}
	switch {
	case n > 1:
		return 0, nil, errors.New("give one of --topic, --group, --transactional-id, --cluster")
	case n == 0 && !any:
		return 0, nil, errors.New("give the resource: --topic, --group, --transactional-id or --cluster")
	case n == 0:
		return kmsg.ACLResourceTypeAny, nil, nil
	}
	return typ, &name, nil
}

func (f *aclFlags) patternType() (kmsg.ACLResourcePatternType, error) {
	p, err := kmsg.ParseACLResourcePatternType(f.pattern)
	if err != nil {
		return 0, fmt.Errorf("--resource-pattern-type %q: want literal or prefixed (any or match to list or remove)", f.pattern)
	}
	return p, nil
}

func (f *aclFlags) ops() ([]kmsg.ACLOperation, error) {
	var out []kmsg.ACLOperation
	for _, o := range f.operations {
		op, err := kmsg.ParseACLOperation(strings.TrimSpace(o))
		if err != nil || op == kmsg.ACLOperationUnknown {
			return nil, fmt.Errorf("--operation %q: want ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS or IDEMPOTENT_WRITE", o)
		}
		out = append(out, op)
	}
	return out, nil
}

func (f *aclFlags) permission(required bool) (kmsg.ACLPermissionType, error) {
	switch {
	case f.allow && f.deny:
		return 0, errors.New("give --allow or --deny, not both")
	case f.allow:
		return kmsg.ACLPermissionTypeAllow, nil
	case f.deny:
		return kmsg.ACLPermissionTypeDeny, nil
	case required:
		return 0, errors.New("give --allow or --deny")
	}
	return kmsg.ACLPermissionTypeAny, nil
}

// filters are the filters the flags describe: one per operation (ANY for
// none).
func (f *aclFlags) filters() ([]acl.Filter, error) {
	typ, name, err := f.resource(true)
	if err != nil {
		return nil, err
	}
	if !f.patternSet && name == nil {
		f.pattern = "any"
	}
	pattern, err := f.patternType()
	if err != nil {
		return nil, err
	}
	perm, err := f.permission(false)
	if err != nil {
		return nil, err
	}
	ops, err := f.ops()
	if err != nil {
		return nil, err
	}
	if len(ops) == 0 {
		ops = []kmsg.ACLOperation{kmsg.ACLOperationAny}
	}
	var out []acl.Filter
	for _, op := range ops {
		flt := acl.Filter{ResourceType: typ, ResourceName: name, PatternType: pattern, Operation: op, Permission: perm}
		if f.principalSet {
			flt.Principal = &f.principal
		}
		if f.hostSet {
			flt.Host = &f.host
		}
		if err := flt.Validate(); err != nil {
			return nil, err
		}
		out = append(out, flt)
	}
	return out, nil
}

func newACLAddCmd() *cobra.Command {
	a := &adminFlags{}
	f := &aclFlags{}
	cmd := &cobra.Command{
		Use:   "add",
		Short: "Add ACLs: --principal may (--allow) or may not (--deny) do each --operation on a resource",
		Long: `Add one ACL per --operation, through the active controller, as
kafka-acls.sh --add does: --principal User:NAME (an application's certificate
is User:<its common name>) may (--allow) or may not (--deny) do the operation
on the resource (--topic, --group, --transactional-id or --cluster), matched
literally or as a prefix (--resource-pattern-type), from --host. An ACL that
exists already is not added twice. Kafka clients without a super user's
certificate get only what ACLs allow (docs/security.md#acls).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bindings, err := f.bindings()
			if err != nil {
				return err
			}
			return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) ([]aclJSON, error) {
				req := &keelpb.CreateAclsRequest{}
				for _, b := range bindings {
					req.Creations = append(req.Creations, rpc.BindingProto(b))
				}
				resp, err := c.CreateACLs(ctx, req)
				if err != nil {
					return nil, err
				}
				var out []aclJSON
				var errs []string
				for i, e := range resp.GetErrors() {
					if e != "" {
						errs = append(errs, fmt.Sprintf("%s: %s", bindings[i], e))
						continue
					}
					out = append(out, aclOf(bindings[i]))
				}
				if len(errs) > 0 {
					return nil, errors.New(strings.Join(errs, "; "))
				}
				return out, nil
			}, writeACLs)
		},
	}
	f.add(cmd, "literal", " (required)")
	a.add(cmd)
	return cmd
}

// bindings are the ACLs add makes, checked.
func (f *aclFlags) bindings() ([]acl.Binding, error) {
	typ, name, err := f.resource(false)
	if err != nil {
		return nil, err
	}
	pattern, err := f.patternType()
	if err != nil {
		return nil, err
	}
	perm, err := f.permission(true)
	if err != nil {
		return nil, err
	}
	ops, err := f.ops()
	if err != nil {
		return nil, err
	}
	if len(ops) == 0 {
		return nil, errors.New("give --operation")
	}
	if f.principal == "" {
		return nil, errors.New("give --principal User:NAME")
	}
	var out []acl.Binding
	for _, op := range ops {
		b := acl.Binding{ResourceType: typ, ResourceName: *name, PatternType: pattern, Principal: f.principal, Host: f.host, Operation: op, Permission: perm}
		if err := b.Validate(); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

func newACLListCmd() *cobra.Command {
	a := &adminFlags{}
	f := &aclFlags{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the ACLs, all or those the flags select",
		Long: `List the ACLs from the active controller: all, or those the flags select
(Kafka's AclBindingFilter: a flag not given matches everything;
--resource-pattern-type match lists every ACL that applies to the named
resource, prefixes and the wildcard included).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filters, err := f.filters()
			if err != nil {
				return err
			}
			return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) ([]aclJSON, error) {
				out := []aclJSON{}
				for _, flt := range filters {
					resp, err := c.DescribeACLs(ctx, rpc.FilterProto(flt))
					if err != nil {
						return nil, err
					}
					for _, b := range resp.GetAcls() {
						out = append(out, aclOf(rpc.BindingFromProto(b)))
					}
				}
				return out, nil
			}, writeACLs)
		},
	}
	f.add(cmd, "literal", "")
	a.add(cmd)
	return cmd
}

func newACLRemoveCmd() *cobra.Command {
	a := &adminFlags{}
	f := &aclFlags{}
	cmd := &cobra.Command{
		Use:   "remove",
		Short: "Remove the ACLs the flags select",
		Long: `Remove, through the active controller, every ACL the flags select, as
keel acl list selects them, and list what was removed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filters, err := f.filters()
			if err != nil {
				return err
			}
			return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) ([]aclJSON, error) {
				req := &keelpb.DeleteAclsRequest{}
				for _, flt := range filters {
					req.Filters = append(req.Filters, rpc.FilterProto(flt))
				}
				resp, err := c.DeleteACLs(ctx, req)
				if err != nil {
					return nil, err
				}
				out := []aclJSON{}
				for _, r := range resp.GetResults() {
					if r.GetError() != "" {
						return nil, errors.New(r.GetError())
					}
					for _, b := range r.GetDeleted() {
						out = append(out, aclOf(rpc.BindingFromProto(b)))
					}
				}
				return out, nil
			}, writeACLs)
		},
	}
	f.add(cmd, "literal", "")
	a.add(cmd)
	return cmd
}
