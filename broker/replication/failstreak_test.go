package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/rpc"
)

func TestFailStreak_Levels(t *testing.T) {
	notLeader := withReason(codes.FailedPrecondition, ReasonNotLeaderOrFollower, "broker 2 does not lead t/0", nil)
	unreachable := status.Error(codes.Unavailable, "connection refused")
	storage := withReason(codes.Internal, ReasonStorageError, "disk failed", nil)
	type step struct {
		at        time.Duration
		err       error // nil: a fetch that worked
		wantLine  bool
		wantLevel slog.Level
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"a follower ahead of its leader for a moment: Debug, and its end Debug", []step{
			{0, notLeader, true, slog.LevelDebug},
			{25 * time.Millisecond, notLeader, false, 0},
			{75 * time.Millisecond, nil, true, slog.LevelDebug},
			{time.Second, nil, false, 0},
		}},
		{"a leader unreachable past the fence: one WARN, then one INFO at its end", []step{
			{0, unreachable, true, slog.LevelDebug},
			{time.Second, unreachable, false, 0},
			{failWarnAfter, unreachable, true, slog.LevelWarn},
			{failWarnAfter + time.Second, unreachable, false, 0},
			{time.Minute, notLeader, false, 0},
			{time.Minute + time.Second, nil, true, slog.LevelInfo},
		}},
		{"a failure nothing explains: WARN at once, once", []step{
			{0, storage, true, slog.LevelWarn},
			{time.Second, storage, false, 0},
			{2 * time.Second, nil, true, slog.LevelInfo},
		}},
		{"a streak that ended starts over", []step{
			{0, storage, true, slog.LevelWarn},
			{time.Second, nil, true, slog.LevelInfo},
			{2 * time.Second, notLeader, true, slog.LevelDebug},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s failStreak
			start := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
			for i, st := range tc.steps {
				now := start.Add(st.at)
				var level slog.Level
				var ok bool
				if st.err == nil {
					level, _, ok = s.ok(now)
				} else {
					level, ok = s.failed(st.err, now)
				}
				if ok != st.wantLine || (ok && level != st.wantLevel) {
					t.Fatalf("step %d (%v): line %v at %v, want %v at %v", i, st.err, ok, level, st.wantLine, st.wantLevel)
				}
			}
		})
	}
}

func TestFailStreak_EndSaysHowLong(t *testing.T) {
	var s failStreak
	start := time.Now()
	s.failed(errors.New("x"), start)
	if _, d, ok := s.ok(start.Add(1500 * time.Millisecond)); !ok || d != 1500*time.Millisecond {
		t.Fatalf("ok: %v %v, want a streak of 1.5s", d, ok)
	}
}

func TestTransientFetchError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{withReason(codes.FailedPrecondition, ReasonNotLeaderOrFollower, "x", nil), true},
		{withReason(codes.FailedPrecondition, ReasonUnknownLeaderEpoch, "x", nil), true},
		{withReason(codes.NotFound, rpc.ReasonUnknownTopicOrPartition, "x", nil), true},
		{withReason(codes.FailedPrecondition, rpc.ReasonFencedLeaderEpoch, "x", nil), true},
		{status.Error(codes.Unavailable, "connection refused"), true},
		{status.Error(codes.DeadlineExceeded, "context deadline exceeded"), true},
		{fmt.Errorf("%w: broker 3", errLeaderNotRegistered), true},
		{withReason(codes.Internal, ReasonStorageError, "x", nil), false},
		{status.Error(codes.Internal, "the leader answered a fetch session request not sent"), false},
		{errors.New("append: crc mismatch"), false},
		{context.Canceled, false},
	} {
		if got := transientFetchError(tc.err); got != tc.want {
			t.Errorf("transientFetchError(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
