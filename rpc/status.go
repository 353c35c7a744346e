package rpc

import (
	"fmt"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/proto/keelpb"
)

// NotLeader is a refusal by a node that is not the active controller, in
// the form clients follow: code (FailedPrecondition when a leader is known,
// Unavailable when not) with the leader in a LeaderHint detail, and reason,
// when not empty, in an ErrorInfo (ReasonLeadershipTransferred).
func NotLeader(code codes.Code, msg string, leaderID int32, leaderAddr, reason string) error {
	st := status.New(code, msg)
	if reason != "" {
		if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}); err == nil {
			st = d
		}
	}
	return withHint(st, leaderID, leaderAddr)
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

// InvalidArgument reports a bad request field by name: its message is
// "field: why", and it carries the field as BadField does.
func InvalidArgument(field, format string, args ...any) error {
	return invalidArgument(field, format, args...)
}

func invalidArgument(field, format string, args ...any) error {
	why := fmt.Sprintf(format, args...)
	return BadField(codes.InvalidArgument, field+": "+why, field, why)
}

// BadField is a refusal of one named request field, with message msg (what
// users read) and the field and why it is wrong in a google.rpc.BadRequest
// detail, which code reads with BadFieldOf: a message's text is never
// parsed for its field, since anything in it may hold a colon.
func BadField(code codes.Code, msg, field, why string) error {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: why}}}); err == nil {
		return d.Err()
	}
	return st.Err()
}

// BadFieldOf returns the field err refuses and why, from its BadRequest
// detail; ok is false for an error that names no field.
func BadFieldOf(err error) (field, why string, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus {
		return "", "", false
	}
	for _, d := range st.Details() {
		if br, isBR := d.(*errdetails.BadRequest); isBR && len(br.GetFieldViolations()) > 0 {
			v := br.GetFieldViolations()[0]
			return v.GetField(), v.GetDescription(), true
		}
	}
	return "", "", false
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
	// ReasonNotReady: this node is the raft leader and is committing its
	// controller epoch; it will be active in a few milliseconds.
	ReasonNotReady             = "NOT_READY"
	ReasonFencedLeaderEpoch    = "FENCED_LEADER_EPOCH"
	ReasonInvalidUpdateVersion = "INVALID_UPDATE_VERSION"
	ReasonIneligibleReplica    = "INELIGIBLE_REPLICA"
	// ReasonInvalidRequest: an AlterPartition that cannot be right whatever
	// the metadata's timing (Kafka's INVALID_REQUEST): its sender is not the
	// leader at its own leader epoch, or its ISR is not a set of the
	// partition's replicas holding the leader.
	ReasonInvalidRequest = "INVALID_REQUEST"
	// ReasonNotController: an AlterPartition names a leader or partition
	// epoch above the controller's own (Kafka's NOT_CONTROLLER): the sender
	// has seen metadata this controller has not, so it is behind (a restored
	// snapshot, say). The sender decides again on newer metadata.
	ReasonNotController = "NOT_CONTROLLER"
	// ReasonBrokerNotFenced: UnregisterBroker of a broker that is running
	// (active or shutting down); stop it first.
	ReasonBrokerNotFenced = "BROKER_NOT_FENCED"
	// ReasonInvalidReplicaAssignment: a reassignment the partition's state
	// does not allow, such as a cancel that would need an unclean election.
	ReasonInvalidReplicaAssignment = "INVALID_REPLICA_ASSIGNMENT"
	// ReasonNoReassignmentInProgress: a cancel of a partition that is not
	// being reassigned (its move may have just completed).
	ReasonNoReassignmentInProgress = "NO_REASSIGNMENT_IN_PROGRESS"
	// ReasonLeadershipTransferred: the active controller, asked to remove
	// itself from the quorum, has handed leadership to the node in the
	// LeaderHint, which makes the change when asked again.
	ReasonLeadershipTransferred = "LEADERSHIP_TRANSFERRED"
	// ReasonUnsafeDowngrade: a metadata.version downgrade refused because
	// the metadata holds what the lower level cannot express.
	ReasonUnsafeDowngrade = "UNSAFE_DOWNGRADE"

	// ReasonNotLeader was AlterPartition's answer to a sender that is not
	// the partition's leader.
	//
	// Deprecated: controllers answer such a sender ReasonInvalidRequest, as
	// Kafka does, and never send this reason; a data plane may still
	// compare against it, so the name stays.
	ReasonNotLeader = "NOT_LEADER"
)

// WithReason builds a status error carrying an ErrorInfo reason, which
// clients read with ReasonOf.
func WithReason(code codes.Code, reason, msg string) error {
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

// DuplicateRegistration is the refusal of a broker registration while
// another incarnation's session lives, carrying that session (read by
// DuplicateSessionOf).
func DuplicateRegistration(msg string, session DuplicateSession) error {
	return withReasonMeta(codes.AlreadyExists, ReasonDuplicateRegistration, msg, map[string]string{
		sessionRemainingKey: strconv.FormatInt(session.Remaining.Milliseconds(), 10),
		controllerEpochKey:  strconv.FormatInt(session.ControllerEpoch, 10),
	})
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
