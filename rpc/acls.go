package rpc

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/acl"
	"github.com/keel-dev/keel/proto/keelpb"
)

// maxACLsPerRequest bounds the creations or filters of one ACL request;
// each is answered on its own, and a request is at most 64 KiB anyway.
const maxACLsPerRequest = 1000

// BindingFromProto reads an AclBinding, unchecked (acl.Binding.Validate
// checks it). Enum codes beyond int8 become UNKNOWN, which Validate refuses.
func BindingFromProto(p *keelpb.AclBinding) acl.Binding {
	return acl.Binding{
		ResourceType: kmsg.ACLResourceType(enum8(p.GetResourceType())),
		ResourceName: p.GetResourceName(),
		PatternType:  kmsg.ACLResourcePatternType(enum8(p.GetPatternType())),
		Principal:    p.GetPrincipal(),
		Host:         p.GetHost(),
		Operation:    kmsg.ACLOperation(enum8(p.GetOperation())),
		Permission:   kmsg.ACLPermissionType(enum8(p.GetPermissionType())),
	}
}

// BindingProto states b as an AclBinding.
func BindingProto(b acl.Binding) *keelpb.AclBinding {
	return &keelpb.AclBinding{
		ResourceType: int32(b.ResourceType), ResourceName: b.ResourceName, PatternType: int32(b.PatternType),
		Principal: b.Principal, Host: b.Host, Operation: int32(b.Operation), PermissionType: int32(b.Permission),
	}
}

// FilterFromProto reads an AclFilter, unchecked (acl.Filter.Validate).
func FilterFromProto(p *keelpb.AclFilter) acl.Filter {
	return acl.Filter{
		ResourceType: kmsg.ACLResourceType(enum8(p.GetResourceType())),
		ResourceName: p.ResourceName,
		PatternType:  kmsg.ACLResourcePatternType(enum8(p.GetPatternType())),
		Principal:    p.Principal,
		Host:         p.Host,
		Operation:    kmsg.ACLOperation(enum8(p.GetOperation())),
		Permission:   kmsg.ACLPermissionType(enum8(p.GetPermissionType())),
	}
}

// FilterProto states f as an AclFilter.
func FilterProto(f acl.Filter) *keelpb.AclFilter {
	return &keelpb.AclFilter{
		ResourceType: int32(f.ResourceType), ResourceName: f.ResourceName, PatternType: int32(f.PatternType),
		Principal: f.Principal, Host: f.Host, Operation: int32(f.Operation), PermissionType: int32(f.Permission),
	}
}

// enum8 keeps a Kafka enum code that fits its int8; any other is 0, UNKNOWN.
func enum8(v int32) int8 {
	if v < -128 || v > 127 {
		return 0
	}
	return int8(v)
}

// validACLCount bounds the creations or filters of one request.
func validACLCount(field string, n int) error {
	switch {
	case n == 0:
		return invalidArgument(field, "is empty")
	case n > maxACLsPerRequest:
		return invalidArgument(field, "%d entries; at most %d", n, maxACLsPerRequest)
	}
	return nil
}

// CreateACLs adds bindings through the active controller and returns, per
// binding, why it was refused ("" when created or already there).
func (c *Client) CreateACLs(ctx context.Context, req *keelpb.CreateAclsRequest) (*keelpb.CreateAclsResponse, error) {
	var resp *keelpb.CreateAclsResponse
	err := c.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.CreateAcls(ctx, req)
		return err
	})
	if err == nil && len(resp.GetErrors()) != len(req.GetCreations()) {
		return nil, fmt.Errorf("the controller answered %d results for %d creations", len(resp.GetErrors()), len(req.GetCreations()))
	}
	return resp, err
}

// DeleteACLs removes every ACL each filter matches, through the active
// controller, and answers them per filter.
func (c *Client) DeleteACLs(ctx context.Context, req *keelpb.DeleteAclsRequest) (*keelpb.DeleteAclsResponse, error) {
	var resp *keelpb.DeleteAclsResponse
	err := c.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.DeleteAcls(ctx, req)
		return err
	})
	if err == nil && len(resp.GetResults()) != len(req.GetFilters()) {
		return nil, fmt.Errorf("the controller answered %d results for %d filters", len(resp.GetResults()), len(req.GetFilters()))
	}
	return resp, err
}

// DescribeACLs answers the ACLs filter matches, from the active
// controller's confirmed image.
func (c *Client) DescribeACLs(ctx context.Context, filter *keelpb.AclFilter) (*keelpb.DescribeAclsResponse, error) {
	var resp *keelpb.DescribeAclsResponse
	err := c.read(ctx, readOpts(nil), func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.DescribeAcls(ctx, &keelpb.DescribeAclsRequest{Filter: filter})
		return err
	})
	return resp, err
}
