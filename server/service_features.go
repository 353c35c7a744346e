package server

import (
	"context"

	"github.com/keel-dev/keel/proto/keelpb"
)

// DescribeFeatures answers the finalized metadata.version and every node's
// supported range, from the active controller, which asks each voter.
func (s *controllerService) DescribeFeatures(ctx context.Context, _ *keelpb.DescribeFeaturesRequest) (*keelpb.DescribeFeaturesResponse, error) {
	f, err := s.ctrl.DescribeFeatures(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &keelpb.DescribeFeaturesResponse{MetadataVersion: f.Level}
	for _, n := range f.Nodes {
		resp.Nodes = append(resp.Nodes, &keelpb.FeatureNode{Kind: n.Kind, Id: n.ID, Address: n.Address,
			MinMetadataVersion: n.Min, MaxMetadataVersion: n.Max, Error: n.Err})
	}
	return resp, nil
}

// UpdateFeatures raises or lowers the finalized metadata.version.
func (s *controllerService) UpdateFeatures(ctx context.Context, req *keelpb.UpdateFeaturesRequest) (*keelpb.UpdateFeaturesResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	update := s.ctrl.UpdateFeatures
	if req.GetValidateOnly() {
		update = s.ctrl.ValidateFeatures
	}
	u, err := update(ctx, req.GetMetadataVersion(), req.GetDowngrade())
	if err != nil {
		return nil, toStatus(err)
	}
	return &keelpb.UpdateFeaturesResponse{PreviousMetadataVersion: u.Previous, MetadataVersion: u.Level, Index: u.Index}, nil
}
