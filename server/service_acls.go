package server

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/acl"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// forwardedACLs decides a broker's forwarded request for a principal by
// this controller's image, whose ACLs the active controller, the only one
// that writes, has applied up to its last decision. The client's host is
// the broker's to check: here only ACLs for every host (*) apply.
func (s *Node) forwardedACLs(principal string, op kmsg.ACLOperation, typ kmsg.ACLResourceType, name string) bool {
	return s.ctrl.Image().ACLSet().Authorize(principal, "", op, typ, name)
}

// CreateAcls adds ACL bindings; each creation is answered on its own.
func (s *controllerService) CreateAcls(ctx context.Context, req *keelpb.CreateAclsRequest) (*keelpb.CreateAclsResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	creations := make([]acl.Binding, len(req.GetCreations()))
	for i, c := range req.GetCreations() {
		creations[i] = rpc.BindingFromProto(c)
	}
	errs, err := s.ctrl.CreateACLs(ctx, creations)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &keelpb.CreateAclsResponse{Errors: make([]string, len(errs))}
	for i, e := range errs {
		if e != nil {
			resp.Errors[i] = e.Error()
		}
	}
	return resp, nil
}

// DeleteAcls removes the ACLs each filter matches.
func (s *controllerService) DeleteAcls(ctx context.Context, req *keelpb.DeleteAclsRequest) (*keelpb.DeleteAclsResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	filters := make([]acl.Filter, len(req.GetFilters()))
	for i, f := range req.GetFilters() {
		filters[i] = rpc.FilterFromProto(f)
	}
	out, err := s.ctrl.DeleteACLs(ctx, filters)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &keelpb.DeleteAclsResponse{}
	for _, d := range out {
		r := &keelpb.DeleteAclsResult{}
		if d.Err != nil {
			r.Error = d.Err.Error()
		}
		for _, b := range d.Deleted {
			r.Deleted = append(r.Deleted, rpc.BindingProto(b))
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

// DescribeAcls answers the ACLs a filter matches, from the confirmed image.
func (s *controllerService) DescribeAcls(ctx context.Context, req *keelpb.DescribeAclsRequest) (*keelpb.DescribeAclsResponse, error) {
	bindings, err := s.ctrl.DescribeACLs(ctx, rpc.FilterFromProto(req.GetFilter()))
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &keelpb.DescribeAclsResponse{}
	for _, b := range bindings {
		resp.Acls = append(resp.Acls, rpc.BindingProto(b))
	}
	return resp, nil
}
