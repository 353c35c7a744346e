package rpc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/proto/keelpb"
)

// toStatus maps a controller error to a gRPC status. It is the only place
// that does: a follower's refusal becomes FailedPrecondition with the leader
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
	switch {
	case errors.As(err, &nl):
		code := codes.FailedPrecondition
		if nl.LeaderID < 0 {
			code = codes.Unavailable
		}
		st := status.New(code, nl.Error())
		if nl.HandedOff {
			if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonLeadershipTransferred, Domain: ErrorDomain}); err == nil {
				st = d
			}
		}
		return withHint(st, nl.LeaderID, nl.LeaderAddress)
	case errors.Is(err, controller.ErrNotReady):
		return withReason(codes.Unavailable, ReasonNotReady, err.Error())
	case errors.Is(err, controller.ErrOutcomeUnknown),
		errors.Is(err, controller.ErrLeadershipUnconfirmed),
		errors.Is(err, controller.ErrStopped):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, controller.ErrInconsistentClusterID):
		return withReason(codes.FailedPrecondition, ReasonInconsistentClusterID, err.Error())
	case errors.Is(err, controller.ErrUnsupportedMetadataVersion):
		return withReason(codes.FailedPrecondition, ReasonUnsupportedMetadataVersion, err.Error())
	case errors.Is(err, controller.ErrDuplicateRegistration):
		var meta map[string]string
		if d := new(controller.DuplicateRegistrationError); errors.As(err, &d) {
			meta = map[string]string{
				sessionRemainingKey: strconv.FormatInt(d.Remaining.Milliseconds(), 10),
				controllerEpochKey:  strconv.FormatInt(d.ControllerEpoch, 10),
			}
		}
		return withReasonMeta(codes.AlreadyExists, ReasonDuplicateRegistration, err.Error(), meta)
	case errors.Is(err, controller.ErrStaleBrokerEpoch):
		return withReason(codes.FailedPrecondition, ReasonStaleBrokerEpoch, err.Error())
	case errors.Is(err, controller.ErrBrokerNotRegistered):
		return withReason(codes.FailedPrecondition, ReasonBrokerNotRegistered, err.Error())
	case errors.Is(err, controller.ErrTopicExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, controller.ErrUnknownTopic):
		return withReason(codes.NotFound, ReasonUnknownTopicOrPartition, err.Error())
	case errors.Is(err, controller.ErrNotPartitionLeader):
		return withReason(codes.FailedPrecondition, ReasonNotLeader, err.Error())
	case errors.Is(err, controller.ErrFencedLeaderEpoch):
		return withReason(codes.FailedPrecondition, ReasonFencedLeaderEpoch, err.Error())
	case errors.Is(err, controller.ErrInvalidUpdateVersion):
		return withReason(codes.FailedPrecondition, ReasonInvalidUpdateVersion, err.Error())
	case errors.Is(err, controller.ErrIneligibleReplica):
		return withReason(codes.FailedPrecondition, ReasonIneligibleReplica, err.Error())
	case errors.Is(err, controller.ErrReassignmentInProgress), errors.Is(err, controller.ErrNoReassignment):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, controller.ErrVoterExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, controller.ErrUnknownVoter):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, controller.ErrLastVoter), errors.Is(err, controller.ErrNotVoter):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, controller.ErrConfigurationChanged):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, controller.ErrTransferFailed):
		return status.Error(codes.Unavailable, err.Error())
	case errors.As(err, new(*controller.FieldError)):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, controller.ErrQueueFull):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.Unavailable, fmt.Sprintf("write not committed in time (no quorum?); it may or may not commit later: %v", err))
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func withHint(st *status.Status, id int32, addr string) error {
	if d, err := st.WithDetails(&keelpb.LeaderHint{LeaderId: id, LeaderAddress: addr}); err == nil {
		return d.Err()
	}
	return st.Err()
}

// LeaderHintOf returns the leader hint carried by err, if any.
func LeaderHintOf(err error) (*keelpb.LeaderHint, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return nil, false
	}
	for _, d := range st.Details() {
		if h, ok := d.(*keelpb.LeaderHint); ok {
			return h, true
		}
	}
	return nil, false
}

// invalidArgument reports a bad request field by name.
func invalidArgument(field, format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "%s: %s", field, fmt.Sprintf(format, args...))
}

// Reasons carried in a google.rpc.ErrorInfo detail, so that clients can act
// on an error without parsing its message.
const (
	ErrorDomain = "keel"

	ReasonInconsistentClusterID      = "INCONSISTENT_CLUSTER_ID"
	ReasonUnsupportedMetadataVersion = "UNSUPPORTED_METADATA_VERSION"
	ReasonDuplicateRegistration      = "DUPLICATE_BROKER_REGISTRATION"
	ReasonStaleBrokerEpoch           = "STALE_BROKER_EPOCH"
	ReasonBrokerNotRegistered        = "BROKER_NOT_REGISTERED"
	ReasonUnknownTopicOrPartition    = "UNKNOWN_TOPIC_OR_PARTITION"
	ReasonNotLeader                  = "NOT_LEADER"
	// ReasonNotReady: this node is the raft leader and is committing its
	// controller epoch; it will be active in a few milliseconds.
	ReasonNotReady             = "NOT_READY"
	ReasonFencedLeaderEpoch    = "FENCED_LEADER_EPOCH"
	ReasonInvalidUpdateVersion = "INVALID_UPDATE_VERSION"
	ReasonIneligibleReplica    = "INELIGIBLE_REPLICA"
	// ReasonLeadershipTransferred: the active controller, asked to remove
	// itself from the quorum, has handed leadership to the node in the
	// LeaderHint, which makes the change when asked again.
	ReasonLeadershipTransferred = "LEADERSHIP_TRANSFERRED"
)

// withReason builds a status error carrying an ErrorInfo reason.
func withReason(code codes.Code, reason, msg string) error {
	return withReasonMeta(code, reason, msg, nil)
}

func withReasonMeta(code codes.Code, reason, msg string, meta map[string]string) error {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: meta}); err == nil {
		return d.Err()
	}
	return st.Err()
}

// sessionRemainingKey and controllerEpochKey carry, on a duplicate
// registration, how long the registered incarnation's session has left, in
// milliseconds, and the epoch of the controller timing it.
const (
	sessionRemainingKey = "session_remaining_ms"
	controllerEpochKey  = "controller_epoch"
)

// DuplicateSession is what a duplicate-registration refusal says of the
// registered incarnation's session.
type DuplicateSession struct {
	Remaining time.Duration
	// ControllerEpoch is the refusing controller's epoch: a new active
	// controller starts every session afresh, so Remaining is comparable
	// only between refusals of one epoch.
	ControllerEpoch int64
}

// DuplicateSessionOf reads a duplicate-registration refusal's session.
func DuplicateSessionOf(err error) (DuplicateSession, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return DuplicateSession{}, false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == ErrorDomain {
			ms, err := strconv.ParseInt(info.Metadata[sessionRemainingKey], 10, 64)
			if err != nil {
				continue
			}
			epoch, _ := strconv.ParseInt(info.Metadata[controllerEpochKey], 10, 64)
			return DuplicateSession{Remaining: time.Duration(ms) * time.Millisecond, ControllerEpoch: epoch}, true
		}
	}
	return DuplicateSession{}, false
}

// NotReadyPause is how long a client waits before asking a controller that
// answered ReasonNotReady again: it is active in milliseconds, so it is
// asked again soon and at an even pace, rather than backed off from.
const NotReadyPause = 5 * time.Millisecond

// ReasonOf returns the ErrorInfo reason carried by err, or "".
func ReasonOf(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == ErrorDomain {
			return info.Reason
		}
	}
	return ""
}
