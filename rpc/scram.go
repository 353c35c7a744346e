package rpc

import (
	"context"

	"github.com/keel-dev/keel/proto/keelpb"
)

// Bounds of an AlterUserScramCredentials request: generous for real use
// (Kafka bounds none of them), and a whole request within the small
// request limit (smallRequestBytes).
const (
	maxScramAlterations = 64
	maxScramNameLen     = 255
	// maxScramBytes bounds a salt and a salted password: a SHA-512 key is
	// 64 bytes, salts are 16 to 32.
	maxScramBytes = 256
)

// checkAlterScram checks an AlterUserScramCredentials request's shape:
// what only the image decides (does a credential exist) and each user's
// own faults (iterations, mechanism) are the controller's, answered per
// user.
func checkAlterScram(r *keelpb.AlterUserScramCredentialsRequest) error {
	if n := len(r.GetDeletions()) + len(r.GetUpsertions()); n > maxScramAlterations {
		return invalidArgument("upsertions", "%d alterations; at most %d in one request", n, maxScramAlterations)
	}
	for _, d := range r.GetDeletions() {
		if err := validMaxLen("deletions", d.GetName(), maxScramNameLen); err != nil {
			return err
		}
	}
	for _, u := range r.GetUpsertions() {
		switch {
		case len(u.GetName()) > maxScramNameLen:
			return validMaxLen("upsertions", u.GetName(), maxScramNameLen)
		case len(u.GetSalt()) > maxScramBytes:
			return invalidArgument("upsertions", "%d bytes; at most %d", len(u.GetSalt()), maxScramBytes)
		case len(u.GetSaltedPassword()) > maxScramBytes:
			return invalidArgument("upsertions", "%d bytes; at most %d", len(u.GetSaltedPassword()), maxScramBytes)
		}
	}
	return validPrincipal(r.GetPrincipal())
}

// DescribeUserScramCredentials lists the SCRAM credentials' users,
// mechanisms and iterations (see ListTopics for the options).
func (c *Client) DescribeUserScramCredentials(ctx context.Context, opts ...ReadOption) (*keelpb.DescribeUserScramCredentialsResponse, error) {
	o := readOpts(opts)
	var resp *keelpb.DescribeUserScramCredentialsResponse
	err := c.read(ctx, o, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.DescribeUserScramCredentials(ctx, &keelpb.DescribeUserScramCredentialsRequest{Linearizable: o.linearizable, Stale: o.stale})
		return err
	})
	return resp, err
}

// AlterUserScramCredentials deletes and sets SCRAM credentials through the
// active controller; the answer has a result per user (KIP-554).
// InvalidArgument for a request out of bounds.
func (c *Client) AlterUserScramCredentials(ctx context.Context, req *keelpb.AlterUserScramCredentialsRequest) (*keelpb.AlterUserScramCredentialsResponse, error) {
	var resp *keelpb.AlterUserScramCredentialsResponse
	err := c.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.AlterUserScramCredentials(ctx, req)
		return err
	})
	return resp, err
}
