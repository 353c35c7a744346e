package controller

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrNotLeader: this node is not the raft leader. The error is a
	// *NotLeaderError carrying the leader, if one is known.
	ErrNotLeader = errors.New("not the active controller")
	// ErrNotReady: this node is the raft leader but has not yet committed its
	// controller epoch; writes are refused until it has.
	ErrNotReady = errors.New("the active controller is still taking over")
	// ErrOutcomeUnknown: leadership was lost while a write was in flight. It may
	// or may not have committed; the client should check or retry idempotently.
	ErrOutcomeUnknown = errors.New("leadership lost while the write was in flight; it may or may not have committed")
	// ErrLeadershipUnconfirmed: a linearizable read could not confirm, in
	// time, that this node still leads. Retrying (here or elsewhere) may cure it.
	ErrLeadershipUnconfirmed = errors.New("could not confirm leadership with a quorum in time")
	// ErrQueueFull: the event queue is at capacity.
	ErrQueueFull = errors.New("controller event queue is full")
	// ErrStopped: the controller is shutting down.
	ErrStopped = errors.New("controller is shutting down")
	// ErrRefused: a decision's records do not apply to the metadata they
	// were decided on (the state machine refuses them). The event loop
	// checks every decision before it goes to raft, so such a decision is
	// written nowhere. It wraps the state machine's reason.
	ErrRefused = errors.New("the decision does not apply to the current metadata")
)

// NotLeaderError says who the leader is, when known (LeaderID -1 when not).
type NotLeaderError struct {
	LeaderID      int32
	LeaderAddress string
	// HandedOff: this node was the active controller and has just handed
	// leadership on so that the request (removing this node) can be made by
	// the new leader; asking the leader again completes it.
	HandedOff bool
}

func (e *NotLeaderError) Error() string {
	switch {
	case e.HandedOff && e.LeaderID < 0:
		return "this node was asked to remove itself and handed leadership on first; ask the new leader once it is elected"
	case e.HandedOff:
		return fmt.Sprintf("this node was asked to remove itself and handed leadership on first; the new leader, node %d at %s, removes it", e.LeaderID, e.LeaderAddress)
	case e.LeaderID < 0:
		return "not the active controller, and no leader is known (election in progress or no quorum)"
	}
	return fmt.Sprintf("not the active controller; the leader is node %d at %s", e.LeaderID, e.LeaderAddress)
}

func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }

// Errors of the broker lifecycle. Each is wrapped with a message that names
// the broker; rpc maps them to status codes with a reason clients act on.
var (
	ErrInconsistentClusterID      = errors.New("inconsistent cluster id")
	ErrUnsupportedMetadataVersion = errors.New("unsupported metadata version")
	ErrDuplicateRegistration      = errors.New("duplicate broker registration")
	ErrStaleBrokerEpoch           = errors.New("stale broker epoch")
	ErrBrokerNotRegistered        = errors.New("broker not registered")
	// ErrBrokerNotFenced refuses to unregister a broker that is running.
	ErrBrokerNotFenced = errors.New("broker not fenced")
)

// Errors of topic and partition requests; rpc maps each to a status code.
var (
	ErrTopicExists          = errors.New("topic already exists")
	ErrUnknownTopic         = errors.New("unknown topic or partition")
	ErrFencedLeaderEpoch    = errors.New("stale leader epoch")
	ErrInvalidUpdateVersion = errors.New("stale partition epoch")
	ErrIneligibleReplica    = errors.New("ineligible replica")
	// ErrInvalidRequest: an AlterPartition that is wrong whatever the
	// timing (Kafka's INVALID_REQUEST); the message names the field.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrNotController: an AlterPartition names epochs above the
	// controller's (Kafka's NOT_CONTROLLER): the controller is behind.
	ErrNotController  = errors.New("the request is ahead of this controller's metadata")
	ErrNoReassignment = errors.New("no reassignment in progress")
	// ErrInvalidReplicaAssignment: a reassignment the partition's state does
	// not allow (Kafka's INVALID_REPLICA_ASSIGNMENT), such as cancelling
	// one whose revert would need an unclean election.
	ErrInvalidReplicaAssignment = errors.New("invalid replica assignment")
)

// FieldError is a request that is invalid in one named field.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func fieldError(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// DuplicateRegistrationError refuses a second live process for one broker
// id. Remaining is how long the registered incarnation's session has left: a
// process restarted right after a crash may try again once it has passed.
type DuplicateRegistrationError struct {
	BrokerID      int32
	IncarnationID string
	Epoch         int64
	Remaining     time.Duration
	// ControllerEpoch is the epoch of the controller that refused. A new
	// active controller times every session afresh from its takeover, so
	// Remaining is only comparable between refusals of one epoch.
	ControllerEpoch int64
}

func (e *DuplicateRegistrationError) Error() string {
	return fmt.Sprintf("%v: broker %d is registered by another live process (incarnation %s, epoch %d; its session ends in %v unless it heartbeats)",
		ErrDuplicateRegistration, e.BrokerID, e.IncarnationID, e.Epoch, e.Remaining.Round(time.Millisecond))
}

func (e *DuplicateRegistrationError) Is(target error) bool { return target == ErrDuplicateRegistration }

// UnknownTopic is the error for a topic name the image does not hold, as
// the controller's decisions return it (ErrUnknownTopic).
func UnknownTopic(name string) error { return fmt.Errorf("%w: topic %q", ErrUnknownTopic, name) }
