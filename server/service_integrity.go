package server

import (
	"context"
	"fmt"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
	"github.com/keel-dev/keel/tlsauth"
)

// CompareImage answers the active controller's comparison of image
// digests (controller.AnswerCompareImage).
func (s *controllerService) CompareImage(ctx context.Context, req *keelpb.CompareImageRequest) (*keelpb.CompareImageResponse, error) {
	return s.ctrl.AnswerCompareImage(ctx, req), nil
}

// compareImage asks voter id at addr for its image digest (CompareImage),
// with this node's certificate when TLS is on.
func compareImage(tls *tlsauth.Config) func(ctx context.Context, id int32, addr string, req *keelpb.CompareImageRequest) (*keelpb.CompareImageResponse, error) {
	return func(ctx context.Context, id int32, addr string, req *keelpb.CompareImageRequest) (*keelpb.CompareImageResponse, error) {
		cl, err := rpc.NewClient([]string{addr}, rpc.WithTLS(tls))
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		cc, err := cl.Controller(addr)
		if err != nil {
			return nil, err
		}
		resp, err := cc.CompareImage(ctx, req)
		if err != nil {
			return nil, err
		}
		if resp.GetNodeId() != id {
			return nil, fmt.Errorf("the node at %s is node %d", addr, resp.GetNodeId())
		}
		return resp, nil
	}
}
