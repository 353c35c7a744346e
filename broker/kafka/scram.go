package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// The SCRAM credential APIs (KIP-554): DescribeUserScramCredentials is
// answered from this broker's replayed image, as a KRaft broker answers it
// from its metadata cache; AlterUserScramCredentials is forwarded to the
// active controller. Neither ever shows a salt or a key.

func (s *Server) describeUserScramCredentials(c *conn, r *kmsg.DescribeUserSCRAMCredentialsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
	if !s.allowed(c, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeCluster, "kafka-cluster") {
		msg := "describing SCRAM credentials needs DESCRIBE on the cluster"
		resp.ErrorCode, resp.ErrorMessage = kerr.ClusterAuthorizationFailed.Code, &msg
		return resp
	}
	creds := s.cfg.Image.Image().ScramCredentials()
	byUser := map[string][]*fsm.ScramCredential{}
	var users []string
	for _, cr := range creds {
		if byUser[cr.User] == nil {
			users = append(users, cr.User)
		}
		byUser[cr.User] = append(byUser[cr.User], cr)
	}
	result := func(user string) kmsg.DescribeUserSCRAMCredentialsResponseResult {
		out := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		out.User = user
		for _, cr := range byUser[user] {
			info := kmsg.NewDescribeUserSCRAMCredentialsResponseResultCredentialInfo()
			info.Mechanism, info.Iterations = int8(cr.Mechanism), cr.Iterations
			out.CredentialInfos = append(out.CredentialInfos, info)
		}
		return out
	}
	// No users named (null or empty): every user with a credential.
	if len(r.Users) == 0 {
		for _, u := range users {
			resp.Results = append(resp.Results, result(u))
		}
		return resp
	}
	count := map[string]int{}
	for _, u := range r.Users {
		count[u.Name]++
	}
	seen := map[string]bool{}
	for _, u := range r.Users {
		if seen[u.Name] {
			continue
		}
		seen[u.Name] = true
		out := result(u.Name)
		switch {
		case count[u.Name] > 1:
			msg := "Cannot describe SCRAM credentials for the same user twice in a single request"
			out.ErrorCode, out.ErrorMessage, out.CredentialInfos = kerr.DuplicateResource.Code, &msg, nil
		case len(out.CredentialInfos) == 0:
			msg := "Attempt to describe a user credential that does not exist"
			out.ErrorCode, out.ErrorMessage = kerr.ResourceNotFound.Code, &msg
		}
		resp.Results = append(resp.Results, out)
	}
	return resp
}

// scramErrors are the Kafka errors of the controller's per-user outcomes.
var scramErrors = map[keelpb.ScramCredentialError]*kerr.Error{
	keelpb.ScramCredentialError_SCRAM_CREDENTIAL_ERROR_DUPLICATE_RESOURCE:         kerr.DuplicateResource,
	keelpb.ScramCredentialError_SCRAM_CREDENTIAL_ERROR_RESOURCE_NOT_FOUND:         kerr.ResourceNotFound,
	keelpb.ScramCredentialError_SCRAM_CREDENTIAL_ERROR_UNSUPPORTED_SASL_MECHANISM: kerr.UnsupportedSaslMechanism,
	keelpb.ScramCredentialError_SCRAM_CREDENTIAL_ERROR_UNACCEPTABLE_CREDENTIAL:    kerr.UnacceptableCredential,
	keelpb.ScramCredentialError_SCRAM_CREDENTIAL_ERROR_UNSUPPORTED_VERSION:        kerr.UnsupportedVersion,
}

func (s *Server) alterUserScramCredentials(ctx context.Context, c *conn, r *kmsg.AlterUserSCRAMCredentialsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	// Every user named, once, in the order named.
	var users []string
	for _, d := range r.Deletions {
		users = append(users, d.Name)
	}
	for _, u := range r.Upsertions {
		users = append(users, u.Name)
	}
	users = uniqueInOrder(users)
	failAll := func(ke *kerr.Error, msg string) kmsg.Response {
		for _, u := range users {
			out := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
			out.User, out.ErrorCode, out.ErrorMessage = u, ke.Code, &msg
			resp.Results = append(resp.Results, out)
		}
		return resp
	}
	if !s.allowed(c, kmsg.ACLOperationAlter, kmsg.ACLResourceTypeCluster, "kafka-cluster") {
		return failAll(kerr.ClusterAuthorizationFailed, "altering SCRAM credentials needs ALTER on the cluster")
	}
	req := &keelpb.AlterUserScramCredentialsRequest{Principal: c.principal}
	for _, d := range r.Deletions {
		req.Deletions = append(req.Deletions, &keelpb.ScramCredentialDeletion{Name: d.Name, Mechanism: keelpb.ScramMechanism(d.Mechanism)})
	}
	for _, u := range r.Upsertions {
		req.Upsertions = append(req.Upsertions, &keelpb.ScramCredentialUpsertion{Name: u.Name, Mechanism: keelpb.ScramMechanism(u.Mechanism),
			Iterations: u.Iterations, Salt: u.Salt, SaltedPassword: u.SaltedPassword})
	}
	if err := rpc.Validate(req); err != nil {
		ke, msg := adminError(err)
		return failAll(ke, msg)
	}
	ctx, cancel := context.WithTimeout(ctx, defaultAdminTimeout)
	defer cancel()
	out, err := s.cfg.Controller.AlterUserScramCredentials(ctx, req)
	if err != nil {
		ke, msg := adminError(err)
		return failAll(ke, msg)
	}
	for _, res := range out.GetResults() {
		r := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		r.User = res.GetUser()
		if ke, ok := scramErrors[res.GetError()]; ok {
			msg := res.GetMessage()
			r.ErrorCode, r.ErrorMessage = ke.Code, &msg
		} else if res.GetError() != keelpb.ScramCredentialError_SCRAM_CREDENTIAL_ERROR_NONE {
			r.ErrorCode = kerr.UnknownServerError.Code
		}
		resp.Results = append(resp.Results, r)
	}
	return resp
}

// uniqueInOrder drops the repeats of ss, keeping each first.
func uniqueInOrder(ss []string) []string {
	seen := map[string]bool{}
	out := ss[:0:0]
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
