package server

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/rpc"
)

func TestToStatus(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		code     codes.Code
		hintID   int32
		hintAddr string
		noHint   bool
		reason   string
	}{
		{name: "follower knows the leader", err: &controller.NotLeaderError{LeaderID: 2, LeaderAddress: "127.0.0.1:9092"}, code: codes.FailedPrecondition, hintID: 2, hintAddr: "127.0.0.1:9092"},
		{name: "no leader known", err: &controller.NotLeaderError{LeaderID: -1}, code: codes.Unavailable, hintID: -1},
		{name: "wrapped not-leader", err: fmt.Errorf("x: %w", &controller.NotLeaderError{LeaderID: 3, LeaderAddress: "h:3"}), code: codes.FailedPrecondition, hintID: 3, hintAddr: "h:3"},
		{name: "takeover in progress", err: controller.ErrNotReady, code: codes.Unavailable, noHint: true},
		{name: "leadership lost mid-write", err: fmt.Errorf("%w: boom", controller.ErrOutcomeUnknown), code: codes.Unavailable, noHint: true},
		{name: "queue full", err: controller.ErrQueueFull, code: codes.ResourceExhausted, noHint: true},
		{name: "deadline", err: context.DeadlineExceeded, code: codes.Unavailable, noHint: true},
		{name: "cancelled", err: context.Canceled, code: codes.Canceled, noHint: true},
		{name: "refused by the state machine", err: fmt.Errorf("%w; nothing was written: %w", controller.ErrRefused, errors.New("isr is empty")), code: codes.FailedPrecondition, noHint: true},
		{name: "invalid replica assignment", err: fmt.Errorf("%w: revert needs an unclean election", controller.ErrInvalidReplicaAssignment), code: codes.FailedPrecondition, noHint: true},
		{name: "no reassignment in a plan", err: fmt.Errorf("partitions[2] (t/0): %w", controller.ErrNoReassignment), code: codes.FailedPrecondition, reason: rpc.ReasonNoReassignmentInProgress, noHint: true},
		{name: "anything else", err: errors.New("disk on fire"), code: codes.Internal, noHint: true},
		{name: "already a status", err: status.Error(codes.NotFound, "gone"), code: codes.NotFound, noHint: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := toStatus(tt.err)
			if status.Code(got) != tt.code {
				t.Fatalf("code = %v, want %v (%v)", status.Code(got), tt.code, got)
			}
			if tt.reason != "" && rpc.ReasonOf(got) != tt.reason {
				t.Fatalf("reason = %q, want %q (%v)", rpc.ReasonOf(got), tt.reason, got)
			}
			hint, ok := rpc.LeaderHintOf(got)
			if tt.noHint {
				if ok {
					t.Fatalf("unexpected hint %v", hint)
				}
				return
			}
			if !ok || hint.LeaderId != tt.hintID || hint.LeaderAddress != tt.hintAddr {
				t.Fatalf("hint = %v, want %d@%s", hint, tt.hintID, tt.hintAddr)
			}
		})
	}
	if toStatus(nil) != nil {
		t.Fatal("toStatus(nil) != nil")
	}
}

func TestToStatus_DuplicateRegistrationCarriesTheSessionLeft(t *testing.T) {
	err := toStatus(&controller.DuplicateRegistrationError{BrokerID: 1, IncarnationID: "x", Epoch: 5, Remaining: 1500 * time.Millisecond, ControllerEpoch: 7})
	if status.Code(err) != codes.AlreadyExists || rpc.ReasonOf(err) != rpc.ReasonDuplicateRegistration {
		t.Fatalf("err = %v (reason %q)", err, rpc.ReasonOf(err))
	}
	if d, ok := rpc.DuplicateSessionOf(err); !ok || d != (rpc.DuplicateSession{Remaining: 1500 * time.Millisecond, ControllerEpoch: 7}) {
		t.Fatalf("rpc.DuplicateSessionOf = %+v, %v", d, ok)
	}
	if _, ok := rpc.DuplicateSessionOf(status.Error(codes.Unavailable, "x")); ok {
		t.Fatal("rpc.DuplicateSessionOf found a value in a plain error")
	}
}

func TestToStatus_Membership(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		code     codes.Code
		reason   string
		hintID   int32
		hintAddr string
	}{
		{name: "voter elsewhere", err: fmt.Errorf("%w: node 2 at b", controller.ErrVoterExists), code: codes.AlreadyExists},
		{name: "unknown voter", err: fmt.Errorf("%w: node 9", controller.ErrUnknownVoter), code: codes.NotFound},
		{name: "last voter", err: fmt.Errorf("%w: node 1", controller.ErrLastVoter), code: codes.FailedPrecondition},
		{name: "nonvoter target", err: fmt.Errorf("%w: node 4", controller.ErrNotVoter), code: codes.FailedPrecondition},
		{name: "configuration changed", err: fmt.Errorf("%w: since 7", controller.ErrConfigurationChanged), code: codes.Aborted},
		{name: "transfer failed", err: fmt.Errorf("%w: timeout", controller.ErrTransferFailed), code: codes.Unavailable},
		{name: "handed off to a known leader", err: &controller.NotLeaderError{LeaderID: 2, LeaderAddress: "h:2", HandedOff: true},
			code: codes.FailedPrecondition, reason: rpc.ReasonLeadershipTransferred, hintID: 2, hintAddr: "h:2"},
		{name: "handed off, new leader not known yet", err: &controller.NotLeaderError{LeaderID: -1, HandedOff: true},
			code: codes.Unavailable, reason: rpc.ReasonLeadershipTransferred, hintID: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := toStatus(tt.err)
			if status.Code(got) != tt.code || rpc.ReasonOf(got) != tt.reason {
				t.Fatalf("toStatus = %v (reason %q); want %v (reason %q)", got, rpc.ReasonOf(got), tt.code, tt.reason)
			}
			if tt.reason == "" {
				return
			}
			if hint, ok := rpc.LeaderHintOf(got); !ok || hint.LeaderId != tt.hintID || hint.LeaderAddress != tt.hintAddr {
				t.Fatalf("hint = %v, want %d@%s", hint, tt.hintID, tt.hintAddr)
			}
		})
	}
}

// The broker and AlterPartition refusals carry Kafka's error codes as
// reasons, with the gRPC code a client acts on.
func TestToStatus_BrokerAndAlterPartitionReasons(t *testing.T) {
	tests := []struct {
		err    error
		code   codes.Code
		reason string
	}{
		{fmt.Errorf("%w: broker 1", controller.ErrStaleBrokerEpoch), codes.FailedPrecondition, rpc.ReasonStaleBrokerEpoch},
		{fmt.Errorf("%w: broker 1", controller.ErrBrokerNotRegistered), codes.FailedPrecondition, rpc.ReasonBrokerNotRegistered},
		{fmt.Errorf("%w: broker 1 is active", controller.ErrBrokerNotFenced), codes.FailedPrecondition, rpc.ReasonBrokerNotFenced},
		{fmt.Errorf("%w: t/0", controller.ErrUnknownTopic), codes.NotFound, rpc.ReasonUnknownTopicOrPartition},
		{fmt.Errorf("%w: leader epoch 9", controller.ErrNotController), codes.FailedPrecondition, rpc.ReasonNotController},
		{fmt.Errorf("%w: leader epoch 1", controller.ErrFencedLeaderEpoch), codes.FailedPrecondition, rpc.ReasonFencedLeaderEpoch},
		{fmt.Errorf("%w: broker_id: not the leader", controller.ErrInvalidRequest), codes.InvalidArgument, rpc.ReasonInvalidRequest},
		{fmt.Errorf("%w: partition epoch 1", controller.ErrInvalidUpdateVersion), codes.FailedPrecondition, rpc.ReasonInvalidUpdateVersion},
		{fmt.Errorf("%w: broker 3 is fenced", controller.ErrIneligibleReplica), codes.FailedPrecondition, rpc.ReasonIneligibleReplica},
	}
	for _, tt := range tests {
		got := toStatus(tt.err)
		if status.Code(got) != tt.code || rpc.ReasonOf(got) != tt.reason || status.Convert(got).Message() != tt.err.Error() {
			t.Errorf("toStatus(%v) = %v (reason %q); want %v, %s, the message kept", tt.err, got, rpc.ReasonOf(got), tt.code, tt.reason)
		}
	}
}

// TestToStatus_FieldErrorCarriesItsField: a field error's message stays
// what users read, and its field and why travel as a BadRequest detail,
// whatever the message's text holds (a wrapper's colon, say).
func TestToStatus_FieldErrorCarriesItsField(t *testing.T) {
	for _, tt := range []struct {
		name    string
		err     error
		field   string
		why     string
		wantMsg string
	}{
		{name: "field error", err: &controller.FieldError{Field: "replication_factor", Msg: "3 exceeds the 1 registered brokers"},
			field: "replication_factor", why: "3 exceeds the 1 registered brokers", wantMsg: "replication_factor: 3 exceeds the 1 registered brokers"},
		{name: "why holds a colon", err: &controller.FieldError{Field: "configs[0]", Msg: "retention.ms: not a number"},
			field: "configs[0]", why: "retention.ms: not a number", wantMsg: "configs[0]: retention.ms: not a number"},
		{name: "wrapped", err: fmt.Errorf("topic orders: %w", &controller.FieldError{Field: "partitions", Msg: "0 is not positive"}),
			field: "partitions", why: "0 is not positive", wantMsg: "topic orders: partitions: 0 is not positive"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := toStatus(tt.err)
			st := status.Convert(got)
			if st.Code() != codes.InvalidArgument || st.Message() != tt.wantMsg {
				t.Fatalf("toStatus = %v %q, want InvalidArgument %q", st.Code(), st.Message(), tt.wantMsg)
			}
			field, why, ok := rpc.BadFieldOf(got)
			if !ok || field != tt.field || why != tt.why {
				t.Fatalf("rpc.BadFieldOf = %q, %q, %v; want %q, %q", field, why, ok, tt.field, tt.why)
			}
		})
	}
}
