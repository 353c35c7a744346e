package server

import (
	"context"

	"github.com/keel-dev/keel/proto/keelpb"
)

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
