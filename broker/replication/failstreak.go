package replication

import (
	"errors"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/rpc"
)

// failWarnAfter is how long a follower's fetches may fail for a reason a
// leader change explains before it says so at WARN: longer than the
// controllers' default session timeout (9 s), within which a dead leader
// is fenced and its partitions led elsewhere.
const failWarnAfter = 15 * time.Second

// failStreak is a run of failed fetches from one leader, logged by what it
// tells an operator. A follower's first fetch often fails for a moment:
// after a topic create or a leader change the follower may apply the new
// leadership before its leader does (NOT_LEADER_OR_FOLLOWER), and a leader
// that died is unreachable until it is fenced. Such a failure is Debug;
// one that lasts failWarnAfter is one WARN, and its end then one INFO. A
// failure nothing explains is a WARN at once.
type failStreak struct {
	since  time.Time // the streak's first failure; zero: not failing
	warned bool
}

// failed records a failed fetch at now and returns the level to log it at,
// or false when it needs no line (the streak's line is out).
func (s *failStreak) failed(err error, now time.Time) (slog.Level, bool) {
	first := s.since.IsZero()
	if first {
		s.since = now
	}
	switch {
	case s.warned:
		return 0, false
	case !transientFetchError(err) || now.Sub(s.since) >= failWarnAfter:
		s.warned = true
		return slog.LevelWarn, true
	case first:
		return slog.LevelDebug, true
	}
	return 0, false
}

// ok ends the streak on a fetch that worked, and returns the level to log
// the end at and how long the streak lasted, or false if there was none.
func (s *failStreak) ok(now time.Time) (slog.Level, time.Duration, bool) {
	if s.since.IsZero() {
		return 0, 0, false
	}
	level := slog.LevelDebug
	if s.warned {
		level = slog.LevelInfo
	}
	d := now.Sub(s.since)
	*s = failStreak{}
	return level, d, true
}

// transientFetchError reports whether a leader change in progress
// explains err: the leader has not applied it yet, or the follower has
// not, or the leader is down or restarting and not fenced yet.
func transientFetchError(err error) bool {
	switch rpc.ReasonOf(err) {
	case ReasonNotLeaderOrFollower, ReasonUnknownLeaderEpoch, rpc.ReasonUnknownTopicOrPartition, rpc.ReasonFencedLeaderEpoch:
		return true
	}
	if errors.Is(err, errLeaderNotRegistered) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}
