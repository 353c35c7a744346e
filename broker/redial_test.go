package broker

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/rpc"
)

// TestRedial_Pacing: how soon the stream loop tries again. After a stream
// that a controller had taken ends, at once; while that loss is recent
// (the fast window), every fastRedialPace at most as long as the attempts
// reach no controller, and at the back-off when a controller answers;
// beyond the window, the back-off, from its base. Losses in a row inside
// one window are paced, not retried at once.
func TestRedial_Pacing(t *testing.T) {
	const base, ceiling = 25 * time.Millisecond, 250 * time.Millisecond
	t0 := time.Unix(1_700_000_000, 0)
	type attempt struct {
		after    time.Duration // since t0, when the attempt ended
		accepted int           // pushes it accepted
		answered bool          // a controller answered it (else: unreached)
		atOnce   bool          // the next attempt goes without a pause
		min, max time.Duration // else the pause before it lies in [min, max]
	}
	fast := attempt{min: fastRedialPace / 2, max: fastRedialPace}
	at := func(a attempt, after time.Duration) attempt { a.after = after; return a }
	for _, tc := range []struct {
		name     string
		attempts []attempt
	}{
		{name: "never streamed: the back-off, doubling to its ceiling", attempts: []attempt{
			{min: base / 2, max: base}, {min: base, max: 2 * base}, {min: 2 * base, max: 4 * base},
			{min: 4 * base, max: 8 * base}, {min: ceiling / 2, max: ceiling}, {min: ceiling / 2, max: ceiling},
		}},
		{name: "a stream lost: at once, then at the fast pace", attempts: []attempt{
			{accepted: 3, atOnce: true},
			at(fast, time.Millisecond), at(fast, 50*time.Millisecond), at(fast, fastRedialWindow-time.Millisecond),
		}},
		{name: "a stream lost, then a controller answers: the back-off", attempts: []attempt{
			{accepted: 3, atOnce: true},
			at(fast, time.Millisecond),
			{after: 10 * time.Millisecond, answered: true, min: base / 2, max: base},
			{after: 20 * time.Millisecond, answered: true, min: base, max: 2 * base},
			at(fast, 30*time.Millisecond),
		}},
		{name: "the fast window over: the back-off from its base", attempts: []attempt{
			{min: base / 2, max: base}, {min: base, max: 2 * base}, {min: 2 * base, max: 4 * base}, // grown before the loss
			{after: time.Second, accepted: 1, atOnce: true},
			{after: time.Second + fastRedialWindow, min: base / 2, max: base},
			{after: time.Second + fastRedialWindow, min: base, max: 2 * base},
		}},
		{name: "a stream that keeps ending after its first pushes: paced", attempts: []attempt{
			{accepted: 2, atOnce: true},
			at(attempt{accepted: 2, min: fast.min, max: fast.max}, 5*time.Millisecond),
			at(attempt{accepted: 2, min: fast.min, max: fast.max}, 10*time.Millisecond),
		}},
		{name: "a loss after the window: at once again", attempts: []attempt{
			{accepted: 1, atOnce: true},
			at(fast, 10*time.Millisecond),
			{after: fastRedialWindow, accepted: 1, atOnce: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := redial{bo: backoff{min: base, max: ceiling}}
			for i, a := range tc.attempts {
				now := t0.Add(a.after)
				if got := r.ended(now, a.accepted); got != a.atOnce {
					t.Fatalf("attempt %d (%+v): at once %v, want %v", i, a, got, a.atOnce)
				}
				if a.atOnce {
					continue
				}
				if d := r.next(now, !a.answered); d < a.min || d > a.max {
					t.Fatalf("attempt %d (%+v): pause %v, want within [%v, %v]", i, a, d, a.min, a.max)
				}
			}
		})
	}
}

// TestRedial_Unreached: which failures reached no controller. gRPC's own
// Unavailable (a refused or broken connection) did; a controller's
// answers, which carry a reason or a leader hint, and errors that are not
// gRPC's did not.
func TestRedial_Unreached(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", status.Error(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused\""), true},
		{"connection closed", status.Error(codes.Unavailable, "error reading from server: EOF"), true},
		{"no leader yet", rpc.NotLeader(codes.Unavailable, "no leader", -1, "", ""), false},
		{"a leader hint", rpc.NotLeader(codes.FailedPrecondition, "not the leader", 2, "127.0.0.1:9092", ""), false},
		{"taking over", rpc.WithReason(codes.Unavailable, rpc.ReasonNotReady, "not ready"), false},
		{"stale broker epoch", rpc.WithReason(codes.FailedPrecondition, rpc.ReasonStaleBrokerEpoch, "stale"), false},
		{"cancelled", status.Error(codes.Canceled, "context canceled"), false},
		{"the controller ended the stream", errStreamEnded, false},
		{"a bad push", errors.Join(errBadPush, errors.New("no body")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := unreached(tc.err); got != tc.want {
				t.Errorf("unreached(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
