package rpc

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/controller"
)

func TestToStatus(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		code     codes.Code
		hintID   int32
		hintAddr string
		noHint   bool
	}{
		{name: "follower knows the leader", err: &controller.NotLeaderError{LeaderID: 2, LeaderAddress: "127.0.0.1:9092"}, code: codes.FailedPrecondition, hintID: 2, hintAddr: "127.0.0.1:9092"},
		{name: "no leader known", err: &controller.NotLeaderError{LeaderID: -1}, code: codes.Unavailable, hintID: -1},
		{name: "wrapped not-leader", err: fmt.Errorf("x: %w", &controller.NotLeaderError{LeaderID: 3, LeaderAddress: "h:3"}), code: codes.FailedPrecondition, hintID: 3, hintAddr: "h:3"},
		{name: "takeover in progress", err: controller.ErrNotReady, code: codes.Unavailable, noHint: true},
		{name: "leadership lost mid-write", err: fmt.Errorf("%w: boom", controller.ErrOutcomeUnknown), code: codes.Unavailable, noHint: true},
		{name: "queue full", err: controller.ErrQueueFull, code: codes.ResourceExhausted, noHint: true},
		{name: "deadline", err: context.DeadlineExceeded, code: codes.Unavailable, noHint: true},
		{name: "cancelled", err: context.Canceled, code: codes.Canceled, noHint: true},
		{name: "anything else", err: errors.New("disk on fire"), code: codes.Internal, noHint: true},
		{name: "already a status", err: status.Error(codes.NotFound, "gone"), code: codes.NotFound, noHint: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := toStatus(tt.err)
			if status.Code(got) != tt.code {
				t.Fatalf("code = %v, want %v (%v)", status.Code(got), tt.code, got)
			}
			hint, ok := LeaderHintOf(got)
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
	if status.Code(err) != codes.AlreadyExists || ReasonOf(err) != ReasonDuplicateRegistration {
		t.Fatalf("err = %v (reason %q)", err, ReasonOf(err))
	}
	if d, ok := DuplicateSessionOf(err); !ok || d != (DuplicateSession{Remaining: 1500 * time.Millisecond, ControllerEpoch: 7}) {
		t.Fatalf("DuplicateSessionOf = %+v, %v", d, ok)
	}
	if _, ok := DuplicateSessionOf(status.Error(codes.Unavailable, "x")); ok {
		t.Fatal("DuplicateSessionOf found a value in a plain error")
	}
}
