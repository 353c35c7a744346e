package server

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
	"github.com/keel-dev/keel/tlsauth"
)

// CompareImage answers this node's image digest at the index the active
// controller asks about, waiting (within the call's deadline) until it has
// applied it; with the majority's digest, it stops acting on its image
// when its own differs (controller.JudgeOwnImage).
func (s *controllerService) CompareImage(ctx context.Context, req *keelpb.CompareImageRequest) (*keelpb.CompareImageResponse, error) {
	resp := &keelpb.CompareImageResponse{NodeId: s.node.cfg.NodeID, Index: req.GetIndex()}
	d, err := s.ctrl.DigestAt(ctx, req.GetIndex())
	if err != nil {
		resp.NoDigest = err.Error()
	} else {
		resp.Digest, resp.ChainStart = d.Sum[:], d.Start
	}
	if m := req.GetMajorityDigest(); len(m) == sha256.Size {
		s.ctrl.JudgeOwnImage(req.GetIndex(), req.GetChainStart(), m, req.GetMajority(), req.GetFromId())
	}
	if dv := s.ctrl.Diverged(); dv != nil {
		resp.DivergedIndex, resp.DivergedReason = dv.Index, dv.Reason
	}
	return resp, nil
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
