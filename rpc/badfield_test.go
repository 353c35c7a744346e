package rpc

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestBadFieldOf: the field and why come from a BadRequest detail, and an
// error without one names no field, whatever its message looks like.
func TestBadFieldOf(t *testing.T) {
	for _, tt := range []struct {
		name    string
		err     error
		field   string
		why     string
		ok      bool
		wantMsg string
	}{
		{name: "invalid argument", err: InvalidArgument("replication_factor", "%d exceeds the %d registered brokers", 9, 3),
			field: "replication_factor", why: "9 exceeds the 3 registered brokers", ok: true, wantMsg: "replication_factor: 9 exceeds the 3 registered brokers"},
		{name: "why holds a colon", err: InvalidArgument("configs[0].value", "retention.ms: not a number"),
			field: "configs[0].value", why: "retention.ms: not a number", ok: true, wantMsg: "configs[0].value: retention.ms: not a number"},
		{name: "message of its own", err: BadField(codes.FailedPrecondition, "topic orders: partitions: 0 is not positive", "partitions", "0 is not positive"),
			field: "partitions", why: "0 is not positive", ok: true, wantMsg: "topic orders: partitions: 0 is not positive"},
		{name: "text that looks like a field", err: status.Error(codes.InvalidArgument, "name: too long"), wantMsg: "name: too long"},
		{name: "a reason, no field", err: WithReason(codes.FailedPrecondition, ReasonInvalidRequest, "name: x"), wantMsg: "name: x"},
		{name: "not a status", err: errors.New("name: x"), wantMsg: "name: x"},
		{name: "nil", err: nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			field, why, ok := BadFieldOf(tt.err)
			if field != tt.field || why != tt.why || ok != tt.ok {
				t.Fatalf("BadFieldOf = %q, %q, %v; want %q, %q, %v", field, why, ok, tt.field, tt.why, tt.ok)
			}
			if tt.err != nil && status.Convert(tt.err).Message() != tt.wantMsg {
				t.Fatalf("message = %q, want %q", status.Convert(tt.err).Message(), tt.wantMsg)
			}
		})
	}
}
