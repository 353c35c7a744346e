package broker

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// The controller admin requests a broker's Kafka listener forwards, as a
// KRaft broker forwards ElectLeaders, the partition reassignment requests,
// DescribeQuorum and UpdateFeatures to the active controller. The writes
// carry the client's principal, which the controller authorizes.

// ElectLeaders forwards a preferred or unclean election to the active
// controller.
func (a *Agent) ElectLeaders(ctx context.Context, req *keelpb.ElectLeadersRequest) (*keelpb.ElectLeadersResponse, error) {
	return a.client.ElectLeaders(ctx, req)
}

// AlterPartitionReassignments forwards the start or cancellation of
// partition reassignments to the active controller.
func (a *Agent) AlterPartitionReassignments(ctx context.Context, req *keelpb.AlterPartitionReassignmentsRequest) (*keelpb.AlterPartitionReassignmentsResponse, error) {
	return a.client.AlterPartitionReassignments(ctx, req)
}

// ListPartitionReassignments reads the ongoing reassignments from the
// active controller's committed image, once it has confirmed it still
// leads (a linearizable read): a client that started or cancelled one sees
// it, whichever broker it asks next, and is never told by a deposed
// controller that a reassignment is done.
func (a *Agent) ListPartitionReassignments(ctx context.Context) (*keelpb.ListPartitionReassignmentsResponse, error) {
	return a.client.ListPartitionReassignments(ctx, rpc.Linearizable())
}

// UpdateFeatures forwards a change of the finalized metadata.version (or,
// validate-only, its check) to the active controller.
func (a *Agent) UpdateFeatures(ctx context.Context, req *keelpb.UpdateFeaturesRequest) (*keelpb.UpdateFeaturesResponse, error) {
	var resp *keelpb.UpdateFeaturesResponse
	err := a.client.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.UpdateFeatures(ctx, req)
		return err
	})
	return resp, err
}

// DescribeQuorum answers the active controller's own description of the
// quorum, with its view of each voter's replication: only the active
// controller has that view, so an answer from any other node is passed
// over (Unavailable) and the client looks for the active one again.
func (a *Agent) DescribeQuorum(ctx context.Context) (*keelpb.DescribeQuorumResponse, error) {
	var resp *keelpb.DescribeQuorumResponse
	err := a.client.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		r, err := cl.DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{})
		if err != nil {
			return err
		}
		if !r.GetActive() {
			return status.Errorf(codes.Unavailable, "controller %d is not the active controller", r.GetNodeId())
		}
		resp = r
		return nil
	})
	return resp, err
}
