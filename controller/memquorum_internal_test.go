package controller

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/keel-dev/keel/consensus"
	"github.com/keel-dev/keel/consensus/memlog"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
)

// quorumWait bounds every wait on a memQuorum: generous, since nothing
// waits on a timer, only on goroutines being scheduled.
const quorumWait = 10 * time.Second

// memQuorum is controllers over one memlog cluster, assembled as
// server.Node assembles them over raft: an FSM, its applied log, the
// controller started on the node's log. It is the package's own tests'
// quorum; memquorum_test.go's quorum serves the external ones.
type memQuorum struct {
	t       *testing.T
	log     *memlog.Cluster
	ctrls   map[int32]*Controller
	applied map[int32]*AppliedLog
	logged  *logRecorder // what every controller logged
}

// newMemQuorum starts n controllers (ids 1..n) with no leader, for a
// cluster at metadata.version 1, so that no controller registration
// writes behind the tests' backs. configure, if set, adjusts each
// controller's Config (its NodeID set) before it is built.
func newMemQuorum(t *testing.T, n int, configure func(*Config), opts ...memlog.Option) *memQuorum {
	t.Helper()
	q := &memQuorum{t: t, ctrls: map[int32]*Controller{}, applied: map[int32]*AppliedLog{}, logged: &logRecorder{}}
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(i + 1)
		q.applied[ids[i]] = NewAppliedLog(fsm.New(), 0, 0)
	}
	q.log = memlog.NewCluster(ids, func(id int32) consensus.StateMachine { return q.applied[id] }, opts...)
	for _, id := range ids {
		cfg := Config{NodeID: id, ClusterID: "c1", InitialMetadataVersion: 1, LeaderImbalanceCheckInterval: -1,
			Logger: slog.New(q.logged)}
		if configure != nil {
			configure(&cfg)
		}
		c := New(cfg, q.applied[id])
		c.Start(q.log.Node(id))
		q.ctrls[id] = c
	}
	t.Cleanup(func() {
		// The log first: it fails every future still in flight, so that no
		// controller waits on one while it stops.
		q.log.Close()
		for _, c := range q.ctrls {
			c.Stop()
		}
	})
	return q
}

// elect makes id the leader and waits until it is the active controller
// with nothing of its takeover left in flight.
func (q *memQuorum) elect(id int32) *leadership {
	q.t.Helper()
	prev := q.ctrls[id].active.Load()
	if err := q.log.Elect(id); err != nil {
		q.t.Fatal(err)
	}
	return q.active(id, prev)
}

// active waits until id is the active controller in a leadership other
// than prev (a lost-then-regained flap starts a new one), and its
// takeover's one decision that writes nothing (electLeaderless) has been
// confirmed by its barrier and applied: the log then holds nothing the
// test did not write, and the next decision is the test's.
func (q *memQuorum) active(id int32, prev *leadership) *leadership {
	q.t.Helper()
	var l *leadership
	poll.Until(q.t, quorumWait, fmt.Sprintf("node %d to be the active controller", id), func() bool {
		l = q.ctrls[id].active.Load()
		return l != nil && l != prev
	})
	node := q.log.Node(id)
	poll.Until(q.t, quorumWait, fmt.Sprintf("node %d's takeover to settle", id), func() bool {
		last := node.LastIndex()
		return last > q.applied[id].FSM().Image().Offset && q.log.Applied(id) == last
	})
	return l
}

// logRecorder is a slog handler that keeps the messages logged, for a
// test to wait for one that marks a path taken.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

// count is how many times msg was logged.
func (r *logRecorder) count(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if m == msg {
			n++
		}
	}
	return n
}
