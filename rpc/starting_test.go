package rpc

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestLoadingSnapshot(t *testing.T) {
	tests := []struct {
		load        SnapshotLoad
		wantPercent int
		wantMsg     string
	}{
		{SnapshotLoad{Read: 0, Size: 1000}, 0, "the controller is starting: loading snapshot (0%)"},
		{SnapshotLoad{Read: 429, Size: 1000}, 42, "the controller is starting: loading snapshot (42%)"},
		{SnapshotLoad{Read: 1000, Size: 1000}, 100, "the controller is starting: loading snapshot (100%)"},
		// A newer snapshot than the one measured: never past 100%.
		{SnapshotLoad{Read: 5000, Size: 1000}, 100, "the controller is starting: loading snapshot (100%)"},
		{SnapshotLoad{Read: 7, Size: 0}, 0, "the controller is starting: loading snapshot"},
	}
	for _, tt := range tests {
		t.Run(tt.wantMsg, func(t *testing.T) {
			if got := tt.load.Percent(); got != tt.wantPercent {
				t.Errorf("Percent() = %d, want %d", got, tt.wantPercent)
			}
			err := LoadingSnapshot(tt.load)
			if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != tt.wantMsg {
				t.Errorf("LoadingSnapshot = %v %q, want Unavailable %q", st.Code(), st.Message(), tt.wantMsg)
			}
			// Through the wire's form: the status's proto.
			back := status.FromProto(status.Convert(err).Proto()).Err()
			if got, ok := SnapshotLoadOf(back); !ok || got != tt.load {
				t.Errorf("SnapshotLoadOf = %+v, %v, want %+v", got, ok, tt.load)
			}
		})
	}
	for _, err := range []error{nil, errors.New("plain"), status.Error(codes.Unavailable, "the controller is starting"), WithReason(codes.Unavailable, ReasonNotReady, "not ready")} {
		if got, ok := SnapshotLoadOf(err); ok {
			t.Errorf("SnapshotLoadOf(%v) = %+v, want none", err, got)
		}
	}
}
