package server

import (
	"context"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/proto/keelpb"
)

// Quorum membership: any controller takes the request; only the active
// controller makes the change, the others refuse with the leader hint.

func membershipResponse(res *controller.MembershipResult) (uint64, []*keelpb.QuorumMember, int32) {
	return res.Index, res.Members, res.LeaderID
}

// AddVoter adds a controller to the quorum through the active controller.
func (s *controllerService) AddVoter(ctx context.Context, req *keelpb.AddVoterRequest) (*keelpb.AddVoterResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	res, err := s.ctrl.AddVoter(ctx, req.GetId(), req.GetAddress(), req.GetForce())
	if err != nil {
		return nil, toStatus(err)
	}
	var resp keelpb.AddVoterResponse
	resp.ConfigurationIndex, resp.Voters, resp.LeaderId = membershipResponse(res)
	return &resp, nil
}

// RemoveVoter removes a controller from the quorum through the active
// controller. The active controller asked to remove itself hands leadership
// on first and refuses with the new leader's hint (see controller.RemoveVoter).
func (s *controllerService) RemoveVoter(ctx context.Context, req *keelpb.RemoveVoterRequest) (*keelpb.RemoveVoterResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	res, err := s.ctrl.RemoveVoter(ctx, req.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	var resp keelpb.RemoveVoterResponse
	resp.ConfigurationIndex, resp.Voters, resp.LeaderId = membershipResponse(res)
	return &resp, nil
}

// TransferLeadership hands leadership from the active controller to another
// voter.
func (s *controllerService) TransferLeadership(ctx context.Context, req *keelpb.TransferLeadershipRequest) (*keelpb.TransferLeadershipResponse, error) {
	// An unset target_id is 0: any voter.
	target := req.GetTargetId()
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	leader, err := s.ctrl.TransferLeadership(ctx, target)
	if err != nil {
		return nil, toStatus(err)
	}
	return &keelpb.TransferLeadershipResponse{PreviousLeaderId: s.ctrl.NodeID(), LeaderId: leader}, nil
}
