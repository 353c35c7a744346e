package controller

import (
	"context"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/listenprobe"
	"github.com/keel-dev/keel/proto/keelpb"
)

// TestCrash_Rules: when the active controller decides that a broker whose
// metadata stream ended has died (crash.go), and when it does not.
// Broker 1 leads partition t-0 (replicas 1, 2, 3); its stream opened when
// the sessions started. Unless a case says otherwise, its registered
// address refuses the crash fencer's dial, as a dead process's does.
func TestCrash_Rules(t *testing.T) {
	const grace = 500 * time.Millisecond
	start := time.Unix(1_700_000_000, 0)
	endAt := start.Add(time.Second)
	closed := func() bool { return true }
	open := func() bool { return false }
	type step func(s *sessionTracker, epoch int64)
	end := func(at time.Time, conn func() bool) step {
		return func(s *sessionTracker, epoch int64) { s.streamEnded(1, epoch, at, conn) }
	}
	reopen := func(s *sessionTracker, epoch int64) { s.streamOpened(1, epoch) }
	heartbeat := func(at time.Time) step {
		return func(s *sessionTracker, epoch int64) { s.touch(1, epoch, at, 0, false) }
	}
	register := func(at time.Time) step {
		return func(s *sessionTracker, epoch int64) { s.registered(1, epoch, at) }
	}
	// successor: a new incarnation of broker 1 is refused registration.
	successor := func(s *sessionTracker, epoch int64) { s.successorAsked(1, epoch) }
	// looked: the crash fencer's dial, at the end of the grace, found
	// broker 1's port listening.
	looked := func(s *sessionTracker, epoch int64) {
		if due, _ := s.crashesDue(endAt.Add(grace), grace); len(due) == 1 {
			s.leftToSession(1, epoch)
		}
	}
	for _, tc := range []struct {
		name  string
		steps []step
		at    time.Time   // when the crash fencer looks
		probe probeResult // what the dial of broker 1's address says
		// reregister: broker 1 registers again (a new incarnation, a new
		// epoch) after its stream ended; fenced: it was fenced (its
		// controlled shutdown ended) before.
		reregister, fenced bool
		want               bool // fenced for a crash
	}{
		{name: "connection closed, grace elapsed, its port refuses", steps: []step{end(endAt, closed)}, at: endAt.Add(grace), want: true},
		{name: "connection closed, grace elapsed, its port accepts (a link blip)", steps: []step{end(endAt, closed)}, at: endAt.Add(grace),
			probe: probeListening},
		{name: "connection closed, grace elapsed, its port does not answer", steps: []step{end(endAt, closed)}, at: endAt.Add(grace),
			probe: probeNoAnswer},
		{name: "its port accepts, but a new incarnation asked to register since", steps: []step{end(endAt, closed), successor},
			at: endAt.Add(grace), probe: probeListening, want: true},
		{name: "its port listened when looked at", steps: []step{end(endAt, closed), looked}, at: endAt.Add(time.Minute)},
		{name: "its port listened when looked at, then a new incarnation asked to register",
			steps: []step{end(endAt, closed), looked, successor}, at: endAt.Add(grace + time.Millisecond), probe: probeListening, want: true},
		{name: "its port listened when looked at, then it heartbeated, then a new incarnation asked",
			steps: []step{end(endAt, closed), looked, heartbeat(endAt.Add(grace + time.Millisecond)), successor}, at: endAt.Add(time.Minute)},
		{name: "a new incarnation asked to register, grace not yet elapsed", steps: []step{end(endAt, closed), successor},
			at: endAt.Add(grace - time.Millisecond)},
		{name: "a new incarnation asked before the end", steps: []step{successor, end(endAt, closed)}, at: endAt.Add(grace),
			probe: probeListening},
		{name: "a new incarnation asked, then the broker heartbeated", at: endAt.Add(grace), probe: probeListening,
			steps: []step{end(endAt, closed), successor, heartbeat(endAt.Add(100 * time.Millisecond))}},
		{name: "a new incarnation asked, then the broker reconnected", at: endAt.Add(grace),
			steps: []step{end(endAt, closed), successor, reopen}},
		{name: "connection closed, grace not yet elapsed", steps: []step{end(endAt, closed)}, at: endAt.Add(grace - time.Millisecond)},
		{name: "stream cancelled on a live connection", steps: []step{end(endAt, open)}, at: endAt.Add(time.Minute)},
		{name: "no connection to ask", steps: []step{end(endAt, nil)}, at: endAt.Add(time.Minute)},
		{name: "reconnected within the grace", steps: []step{end(endAt, closed), reopen}, at: endAt.Add(grace)},
		{name: "reconnected, then that stream cancelled on a live connection",
			steps: []step{end(endAt, closed), reopen, end(endAt.Add(100*time.Millisecond), open)}, at: endAt.Add(time.Minute)},
		{name: "reconnected, then that connection closed too",
			steps: []step{end(endAt, closed), reopen, end(endAt.Add(100*time.Millisecond), closed)}, at: endAt.Add(100*time.Millisecond + grace), want: true},
		{name: "a second stream still open (the reconnect came before the end)",
			steps: []step{reopen, end(endAt, closed)}, at: endAt.Add(time.Minute)},
		{name: "heartbeat after the end", steps: []step{end(endAt, closed), heartbeat(endAt.Add(100 * time.Millisecond))}, at: endAt.Add(grace)},
		{name: "heartbeat before the end", steps: []step{heartbeat(endAt.Add(-100 * time.Millisecond)), end(endAt, closed)}, at: endAt.Add(grace), want: true},
		{name: "registration retried after the end", steps: []step{end(endAt, closed), register(endAt.Add(100 * time.Millisecond))}, at: endAt.Add(grace)},
		{name: "registered again: a new epoch", steps: []step{end(endAt, closed)}, at: endAt.Add(grace), reregister: true},
		{name: "already fenced", steps: []step{end(endAt, closed)}, at: endAt.Add(grace), fenced: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newReplicationCtx(t)
			c.registerBrokers(1, 2, 3)
			c.unfenceBrokers(1, 2, 3)
			c.createTopic("t", false, []int32{1, 2, 3})
			epoch := c.broker(1).Epoch
			s := newSessionTracker(time.Hour)
			s.reset(c.img.Brokers(), start)
			s.streamOpened(1, epoch)
			for _, st := range tc.steps {
				st(s, epoch)
			}
			if tc.reregister {
				c.replay([]*keelpb.Record{regRecord(1, incB)})
			}
			if tc.fenced {
				c.fenceBrokers(1)
			}
			due, _ := s.crashesDue(tc.at, grace)
			dead := len(due) == 1 && due[0].id == 1 && due[0].epoch == epoch && crashConfirmed(due[0].successor, tc.probe)
			if dead != tc.want && !tc.reregister && !tc.fenced {
				t.Fatalf("due = %v, probe %v: confirmed dead %v, want %v", due, tc.probe, dead, tc.want)
			}
			recs := crashRecords(c.img, s, 1, epoch, tc.at, grace)
			if got := dead && len(recs) > 0; got != tc.want {
				t.Fatalf("crash fencing decided: %v, want %v (%v)", got, tc.want, recs)
			}
			if !tc.want {
				return
			}
			// The session expiry's records: leadership moves, then the fence.
			c.replay(recs)
			if b := c.broker(1); !b.Fenced {
				t.Fatal("broker 1 not fenced by the records")
			}
			if p := c.partition("t", 0); p.Leader == 1 {
				t.Fatalf("t-0 still led by the fenced broker: %+v", p)
			}
			// Once fenced for a crash, the registration no longer holds the
			// broker id against a new incarnation.
			s.crashHandled(1, epoch, true)
			if left := s.holding(c.broker(1), tc.at); left != 0 {
				t.Fatalf("a crashed broker's registration holds its id for %v more", left)
			}
			if due, _ := s.crashesDue(tc.at.Add(time.Minute), grace); len(due) != 0 {
				t.Fatalf("a handled crash is due again: %v", due)
			}
		})
	}
}

// TestCrash_ProbeResult: what the crash fencer makes of its dial of a
// broker's registered address. Only a refusal says the process is gone; a
// dial that failed any other way is a doubt, never a death.
func TestCrash_ProbeResult(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	unreachable := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}
	for _, tc := range []struct {
		name string
		err  error
		want probeResult
	}{
		{"accepted and held", nil, probeListening},
		{"connection refused", refused, probeRefused},
		{"accepted and closed at once", listenprobe.ErrClosedAtOnce, probeRefused},
		{"timed out", context.DeadlineExceeded, probeNoAnswer},
		{"host unreachable", unreachable, probeNoAnswer},
		{"no such host", &net.DNSError{Err: "no such host", Name: "gone.invalid", IsNotFound: true}, probeNoAnswer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := probeResultOf(tc.err); got != tc.want {
				t.Errorf("probeResultOf(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// TestCrash_StaleEpochStreamEnd: the end of a stream of an older epoch says
// nothing about the current one.
func TestCrash_StaleEpochStreamEnd(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := newSessionTracker(time.Hour)
	s.streamOpened(1, 2)
	s.streamOpened(1, 7) // registered again; its stream opened before the old one ended
	s.streamEnded(1, 2, now, func() bool { return true })
	if due, next := s.crashesDue(now.Add(time.Hour), time.Millisecond); len(due) != 0 || !next.IsZero() {
		t.Fatalf("due = %v, next %v: the old epoch's end counted", due, next)
	}
}
