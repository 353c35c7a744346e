package server

import (
	"context"

	"github.com/keel-dev/keel/proto/keelpb"
)

// DescribeUserScramCredentials lists the credentials' users, mechanisms
// and iterations.
func (s *controllerService) DescribeUserScramCredentials(ctx context.Context, req *keelpb.DescribeUserScramCredentialsRequest) (*keelpb.DescribeUserScramCredentialsResponse, error) {
	img, src, err := s.readImage(ctx, req.GetLinearizable(), req.GetStale())
	if err != nil {
		return nil, err
	}
	resp := &keelpb.DescribeUserScramCredentialsResponse{Source: src}
	for _, c := range img.ScramCredentials() {
		resp.Credentials = append(resp.Credentials, &keelpb.ScramCredentialInfo{User: c.User, Mechanism: c.Mechanism, Iterations: c.Iterations})
	}
	return resp, nil
}

// AlterUserScramCredentials deletes and sets SCRAM credentials, with a
// result per user.
func (s *controllerService) AlterUserScramCredentials(ctx context.Context, req *keelpb.AlterUserScramCredentialsRequest) (*keelpb.AlterUserScramCredentialsResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	results, err := s.ctrl.AlterUserScramCredentials(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	return &keelpb.AlterUserScramCredentialsResponse{Results: results}, nil
}
