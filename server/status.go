package server

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/rpc"
)

// toStatus maps a controller error to a gRPC status, in the wire contract's
// terms (package rpc: reasons, leader hints). It is the only place that does: a follower's refusal becomes FailedPrecondition with the leader
// in a LeaderHint detail; anything that a retry elsewhere or later may cure
// (no leader, a takeover in progress, a write whose outcome is unknown)
// becomes Unavailable.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var nl *controller.NotLeaderError
	var dup *controller.DuplicateRegistrationError
	var fe *controller.FieldError
	switch {
	case errors.As(err, &nl):
		code := codes.FailedPrecondition
		if nl.LeaderID < 0 {
			code = codes.Unavailable
		}
		reason := ""
		if nl.HandedOff {
			reason = rpc.ReasonLeadershipTransferred
		}
		return rpc.NotLeader(code, nl.Error(), nl.LeaderID, nl.LeaderAddress, reason)
	case errors.Is(err, controller.ErrNotReady):
		return rpc.WithReason(codes.Unavailable, rpc.ReasonNotReady, err.Error())
	case errors.Is(err, controller.ErrOutcomeUnknown),
		errors.Is(err, controller.ErrLeadershipUnconfirmed),
		errors.Is(err, controller.ErrStopped):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, controller.ErrInconsistentClusterID):
		return rpc.WithReason(codes.FailedPrecondition, rpc.ReasonInconsistentClusterID, err.Error())
	case errors.Is(err, controller.ErrUnsafeDowngrade):
		return rpc.WithReason(codes.FailedPrecondition, rpc.ReasonUnsafeDowngrade, err.Error())
	case errors.Is(err, controller.ErrUnsupportedMetadataVersion):
		return rpc.WithReason(codes.FailedPrecondition, rpc.ReasonUnsupportedMetadataVersion, err.Error())
	case errors.As(err, &dup):
		return rpc.DuplicateRegistration(err.Error(), rpc.DuplicateSession{Remaining: dup.Remaining, ControllerEpoch: dup.ControllerEpoch})
	case errors.Is(err, controller.ErrStaleBrokerEpoch):
		return rpc.WithReason(codes.FailedPrecondition, rpc.ReasonStaleBrokerEpoch, err.Error())
	case errors.Is(err, controller.ErrBrokerNotRegistered):
		return rpc.WithReason(codes.FailedPrecondition, rpc.ReasonBrokerNotRegistered, err.Error())
	case errors.Is(err, controller.ErrBrokerNotFenced):
		return rpc.WithReason(codes.FailedPrecondition, rpc.ReasonBrokerNotFenced, err.Error())
	case errors.Is(err, controller.ErrTopicExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, controller.ErrUnknownTopic):
		return rpc.WithReason(codes.NotFound, rpc.ReasonUnknownTopicOrPartition, err.Error())
	case errors.Is(err, controller.ErrFencedLeaderEpoch):
		return rpc.WithReason(codes.FailedPrecondition, rpc.ReasonFencedLeaderEpoch, err.Error())
	case errors.Is(err, controller.ErrInvalidUpdateVersion):
		return rpc.WithReason(codes.FailedPrecondition, rpc.ReasonInvalidUpdateVersion, err.Error())
	case errors.Is(err, controller.ErrIneligibleReplica):
		return rpc.WithReason(codes.FailedPrecondition, rpc.ReasonIneligibleReplica, err.Error())
	case errors.Is(err, controller.ErrInvalidRequest):
		return rpc.WithReason(codes.InvalidArgument, rpc.ReasonInvalidRequest, err.Error())
	case errors.Is(err, controller.ErrNotController):
		// Not Unavailable: this is the active controller, and asking it
		// again at once is refused again; the sender decides anew.
		return rpc.WithReason(codes.FailedPrecondition, rpc.ReasonNotController, err.Error())
	case errors.Is(err, controller.ErrNoReassignment):
		return rpc.WithReason(codes.FailedPrecondition, rpc.ReasonNoReassignmentInProgress, err.Error())
	case errors.Is(err, controller.ErrRefused):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, controller.ErrInvalidReplicaAssignment):
		return rpc.WithReason(codes.FailedPrecondition, rpc.ReasonInvalidReplicaAssignment, err.Error())
	case errors.Is(err, controller.ErrVoterExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, controller.ErrUnknownVoter):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, controller.ErrLastVoter), errors.Is(err, controller.ErrNotVoter), errors.Is(err, controller.ErrTransferRefused):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, controller.ErrConfigurationChanged):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, controller.ErrVoterUnfit):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, controller.ErrVoterCatchingUp):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, controller.ErrTransferFailed):
		return status.Error(codes.Unavailable, err.Error())
	case errors.As(err, &fe):
		return rpc.BadField(codes.InvalidArgument, err.Error(), fe.Field, fe.Msg)
	case errors.Is(err, controller.ErrQueueFull):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.Unavailable, fmt.Sprintf("write not committed in time (no quorum?); it may or may not commit later: %v", err))
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}
