package raftlog

import (
	"fmt"
	"time"
)

// Timing holds raft's timeouts. The defaults favour fast failover on a LAN;
// tests lower them further.
type Timing struct {
	// HeartbeatTimeout is how long a follower waits without contact from the
	// leader before it starts a (pre-)election.
	HeartbeatTimeout time.Duration
	// ElectionTimeout is how long a candidate waits for votes before retrying.
	ElectionTimeout time.Duration
	// LeaderLeaseTimeout is how long a leader stays leader without hearing
	// from a quorum; it bounds how long a partitioned leader believes it leads.
	LeaderLeaseTimeout time.Duration
	// CommitTimeout bounds how long the leader waits before sending an
	// AppendEntries that only advances followers' commit index.
	CommitTimeout time.Duration
	// CrashElection starts an election at once when the leader's process
	// has died (its connections closed and its port refuses), rather than
	// after the heartbeat timeout (leaderCrash).
	CrashElection bool
	// CrashConfirm is how long the crash election confirms that the leader
	// is gone before it elects: its port must refuse, and a quorum of
	// voters must not hear from it, for this long. A whole node's outage
	// that refuses connections for longer costs an election, as a kill
	// does; a shorter one costs nothing. 0 means DefaultCrashConfirm; it
	// is never less than two of the leader's heartbeat intervals (two
	// fifths of HeartbeatTimeout).
	CrashConfirm time.Duration
}

// crashWindow is the crash election's confirmation window: CrashConfirm
// (0: DefaultCrashConfirm), but at least two of the leader's longest
// heartbeat intervals (raft sends one every tenth to fifth of the
// heartbeat timeout), so that a voter that hears the leader is never taken
// for one that does not.
func (t Timing) crashWindow() time.Duration {
	w := t.CrashConfirm
	if w == 0 {
		w = DefaultCrashConfirm
	}
	return max(w, t.HeartbeatTimeout*2/5)
}

// DefaultTiming returns Keel's defaults: 300ms heartbeat and election
// timeouts, a 250ms leader lease, a 5ms commit timeout, and an election
// once the leader's process has been gone for 200ms. They are well below
// raft's own (1s, 1s, 500ms, 50ms), which are sized for WANs; on a LAN they
// give sub-second failover while staying far above round-trip times.
func DefaultTiming() Timing {
	return Timing{
		HeartbeatTimeout:   300 * time.Millisecond,
		ElectionTimeout:    300 * time.Millisecond,
		LeaderLeaseTimeout: 250 * time.Millisecond,
		CommitTimeout:      5 * time.Millisecond,
		CrashElection:      true,
		CrashConfirm:       DefaultCrashConfirm,
	}
}

// Validate checks the rules raft.ValidateConfig enforces, but reports them by
// flag name so that a bad command line fails with a message the operator can
// act on instead of one from inside raft.
func (t Timing) Validate() error {
	for _, f := range []struct {
		flag string
		d    time.Duration
		min  time.Duration // raft's own lower bound
	}{
		{"--raft-heartbeat-timeout", t.HeartbeatTimeout, 5 * time.Millisecond},
		{"--raft-election-timeout", t.ElectionTimeout, 5 * time.Millisecond},
		{"--raft-leader-lease-timeout", t.LeaderLeaseTimeout, 5 * time.Millisecond},
		{"--raft-commit-timeout", t.CommitTimeout, time.Millisecond},
	} {
		if f.d <= 0 {
			return fmt.Errorf("%s (%s) must be positive", f.flag, f.d)
		}
		if f.d < f.min {
			return fmt.Errorf("%s (%s) must be at least %s", f.flag, f.d, f.min)
		}
	}
	if t.LeaderLeaseTimeout > t.HeartbeatTimeout {
		return fmt.Errorf("--raft-leader-lease-timeout (%s) must not exceed --raft-heartbeat-timeout (%s)",
			t.LeaderLeaseTimeout, t.HeartbeatTimeout)
	}
	if t.CrashConfirm != 0 && t.CrashConfirm < minCrashConfirm {
		return fmt.Errorf("--raft-crash-confirm (%s) must be at least %s (a few probes of the leader's port), or 0 for the default", t.CrashConfirm, minCrashConfirm)
	}
	if t.ElectionTimeout < t.HeartbeatTimeout {
		return fmt.Errorf("--raft-election-timeout (%s) must not be less than --raft-heartbeat-timeout (%s)",
			t.ElectionTimeout, t.HeartbeatTimeout)
	}
	return nil
}
