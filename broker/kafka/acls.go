package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/acl"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// The ACL APIs, as Kafka's AclApis serves them: DescribeAcls from the
// broker's replayed image (its metadata cache), CreateAcls and DeleteAcls
// checked here (ALTER on the cluster, then each creation or filter) and
// forwarded to the active controller with the client's principal, which
// the controller authorizes again. Bad input is refused per creation or
// filter with INVALID_REQUEST, before anything is forwarded.

// notAuthorizedACLs is the refusal of an ACL request.
const notAuthorizedACLs = "not authorized: the ACL APIs need a super user, or an ACL allowing ALTER (DESCRIBE to list) on the cluster"

func (s *Server) createACLs(ctx context.Context, c *conn, r *kmsg.CreateACLsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.CreateACLsResponse)
	resp.Results = make([]kmsg.CreateACLsResponseResult, len(r.Creations))
	set := func(i int, ke *kerr.Error, msg string) {
		resp.Results[i].ErrorCode = ke.Code
		resp.Results[i].ErrorMessage = &msg
	}
	if !s.mayAlterACLs(c, len(r.Creations), set) {
		return resp
	}
	req := &keelpb.CreateAclsRequest{Principal: c.principal}
	var forwarded []int // the index of each creation in req
	for i, cr := range r.Creations {
		b := acl.Binding{ResourceType: cr.ResourceType, ResourceName: cr.ResourceName, PatternType: cr.ResourcePatternType,
			Principal: cr.Principal, Host: cr.Host, Operation: cr.Operation, Permission: cr.PermissionType}
		if r.Version == 0 {
			b.PatternType = kmsg.ACLResourcePatternTypeLiteral
		}
		if err := b.Validate(); err != nil {
			set(i, kerr.InvalidRequest, "invalid ACL creation: "+err.Error())
			continue
		}
		req.Creations = append(req.Creations, rpc.BindingProto(b))
		forwarded = append(forwarded, i)
	}
	var out *keelpb.CreateAclsResponse
	if !forwardACLs(ctx, req, forwarded, set, func(ctx context.Context) (err error) {
		out, err = s.cfg.Controller.CreateAcls(ctx, req)
		return err
	}) {
		return resp
	}
	for j, i := range forwarded {
		if e := out.GetErrors()[j]; e != "" {
			set(i, kerr.InvalidRequest, e)
		}
	}
	return resp
}

// filterOf reads a DescribeAcls or DeleteAcls filter; v0 knows literal
// patterns only.
func filterOf(version int16, typ kmsg.ACLResourceType, name *string, pattern kmsg.ACLResourcePatternType, principal, host *string,
	op kmsg.ACLOperation, perm kmsg.ACLPermissionType) acl.Filter {
	if version == 0 {
		pattern = kmsg.ACLResourcePatternTypeLiteral
	}
	return acl.Filter{ResourceType: typ, ResourceName: name, PatternType: pattern, Principal: principal, Host: host, Operation: op, Permission: perm}
}

func (s *Server) describeACLs(c *conn, r *kmsg.DescribeACLsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeACLsResponse)
	fail := func(ke *kerr.Error, msg string) kmsg.Response {
		resp.ErrorCode, resp.ErrorMessage = ke.Code, &msg
		return resp
	}
	if !s.allowed(c, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeCluster, acl.ClusterName) {
		return fail(kerr.ClusterAuthorizationFailed, notAuthorizedACLs)
	}
	f := filterOf(r.Version, r.ResourceType, r.ResourceName, r.ResourcePatternType, r.Principal, r.Host, r.Operation, r.PermissionType)
	if err := f.Validate(); err != nil {
		return fail(kerr.InvalidRequest, "invalid ACL filter: "+err.Error())
	}
	// Grouped by resource pattern, in the order the image lists them.
	at := map[acl.Binding]int{}
	for _, b := range s.cfg.Image.Image().MatchingACLs(f) {
		key := acl.Binding{ResourceType: b.ResourceType, ResourceName: b.ResourceName, PatternType: b.PatternType}
		i, ok := at[key]
		if !ok {
			res := kmsg.NewDescribeACLsResponseResource()
			res.ResourceType, res.ResourceName, res.ResourcePatternType = b.ResourceType, b.ResourceName, b.PatternType
			i = len(resp.Resources)
			at[key] = i
			resp.Resources = append(resp.Resources, res)
		}
		a := kmsg.NewDescribeACLsResponseResourceACL()
		a.Principal, a.Host, a.Operation, a.PermissionType = b.Principal, b.Host, b.Operation, b.Permission
		resp.Resources[i].ACLs = append(resp.Resources[i].ACLs, a)
	}
	return resp
}

func (s *Server) deleteACLs(ctx context.Context, c *conn, r *kmsg.DeleteACLsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteACLsResponse)
	resp.Results = make([]kmsg.DeleteACLsResponseResult, len(r.Filters))
	set := func(i int, ke *kerr.Error, msg string) {
		resp.Results[i].ErrorCode = ke.Code
		resp.Results[i].ErrorMessage = &msg
	}
	if !s.mayAlterACLs(c, len(r.Filters), set) {
		return resp
	}
	req := &keelpb.DeleteAclsRequest{Principal: c.principal}
	var forwarded []int
	for i, rf := range r.Filters {
		f := filterOf(r.Version, rf.ResourceType, rf.ResourceName, rf.ResourcePatternType, rf.Principal, rf.Host, rf.Operation, rf.PermissionType)
		if err := f.Validate(); err != nil {
			set(i, kerr.InvalidRequest, "invalid ACL filter: "+err.Error())
			continue
		}
		req.Filters = append(req.Filters, rpc.FilterProto(f))
		forwarded = append(forwarded, i)
	}
	var out *keelpb.DeleteAclsResponse
	if !forwardACLs(ctx, req, forwarded, set, func(ctx context.Context) (err error) {
		out, err = s.cfg.Controller.DeleteAcls(ctx, req)
		return err
	}) {
		return resp
	}
	for j, i := range forwarded {
		res := out.GetResults()[j]
		if res.GetError() != "" {
			set(i, kerr.InvalidRequest, res.GetError())
			continue
		}
		for _, d := range res.GetDeleted() {
			b := rpc.BindingFromProto(d)
			m := kmsg.NewDeleteACLsResponseResultMatchingACL()
			m.ResourceType, m.ResourceName, m.ResourcePatternType = b.ResourceType, b.ResourceName, b.PatternType
			m.Principal, m.Host, m.Operation, m.PermissionType = b.Principal, b.Host, b.Operation, b.Permission
			resp.Results[i].MatchingACLs = append(resp.Results[i].MatchingACLs, m)
		}
	}
	return resp
}

// mayAlterACLs says whether the client on c may change ACLs (ALTER on the
// cluster), answering each of the request's n creations or filters with
// set when it may not; an empty request needs no answer.
func (s *Server) mayAlterACLs(c *conn, n int, set func(int, *kerr.Error, string)) bool {
	if n == 0 {
		return false
	}
	if !s.allowed(c, kmsg.ACLOperationAlter, kmsg.ACLResourceTypeCluster, acl.ClusterName) {
		for i := range n {
			set(i, kerr.ClusterAuthorizationFailed, notAuthorizedACLs)
		}
		return false
	}
	return true
}

// forwardACLs checks req and sends it to the controller with call, within
// the admin timeout. When either fails, every creation or filter req
// carries (forwarded: their indexes in the Kafka request) is answered with
// set, and it reports false.
func forwardACLs(ctx context.Context, req proto.Message, forwarded []int, set func(int, *kerr.Error, string), call func(context.Context) error) bool {
	if len(forwarded) == 0 {
		return false
	}
	if err := rpc.Validate(req); err != nil {
		for _, i := range forwarded {
			set(i, kerr.InvalidRequest, err.Error())
		}
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, defaultAdminTimeout)
	defer cancel()
	if err := call(ctx); err != nil {
		ke, msg := adminError(err)
		for _, i := range forwarded {
			set(i, ke, msg)
		}
		return false
	}
	return true
}
