package controller_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/raftlog"
	"github.com/keel-dev/keel/server"
)

const crashGrace = 500 * time.Millisecond

// crashCluster is a quorum with crash detection on and a fake clock: the
// grace passes only when the test moves the clock, and sessions (a minute)
// never run out. It runs raft at the default timings, not keeltest's
// 50 ms: a leadership that moved under the test would never fence (by the
// rule under test), and on a loaded machine 50 ms moves it.
func crashCluster(t *testing.T) (*keeltest.Cluster, *keeltest.Clock) {
	t.Helper()
	clock := keeltest.NewClock()
	c := newCluster(t, 3, keeltest.WithTiming(raftlog.DefaultTiming()), keeltest.WithSessionTimeout(time.Minute), keeltest.WithClock(clock.Now),
		keeltest.WithTune(func(cfg *server.NodeConfig) { cfg.CrashGrace = crashGrace }))
	return c, clock
}

// brokerStream is broker id's metadata stream to nd, on a connection whose
// closing the test decides.
type brokerStream struct {
	closed atomic.Bool
	cancel context.CancelFunc
	done   chan error
}

func openStream(t *testing.T, nd *server.Node, id int32, epoch int64) *brokerStream {
	t.Helper()
	s := &brokerStream{done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(controller.WithConnClosed(context.Background(), s.closed.Load))
	s.cancel = cancel
	t.Cleanup(cancel)
	pushed := make(chan struct{}, 1)
	go func() {
		s.done <- nd.Controller().StreamMetadata(ctx, &keelpb.StreamMetadataRequest{BrokerId: id, BrokerEpoch: epoch}, func(*keelpb.MetadataPush) error {
			select {
			case pushed <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	select {
	case <-pushed:
	case err := <-s.done:
		t.Fatalf("the stream of broker %d ended before its first push: %v", id, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("no push on the stream of broker %d", id)
	}
	return s
}

// die ends the stream as a dead process's does: the connection closes.
func (s *brokerStream) die(t *testing.T) {
	t.Helper()
	s.closed.Store(true)
	s.cancel()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end")
	}
}

// TestCrash_FencedOnceGraceElapsed: a broker whose stream's connection
// closed is fenced once the crash grace has passed on the controller's
// clock, not before, and its partitions' leadership moves with it.
func TestCrash_FencedOnceGraceElapsed(t *testing.T) {
	c, clock := crashCluster(t)
	leader := c.WaitForActive(5 * time.Second)
	epoch := registerActive(t, leader, 1, incA)
	registerActive(t, leader, 2, incB)
	s := openStream(t, leader, 1, epoch)
	s.die(t)
	clock.Add(crashGrace - time.Millisecond)
	// The fencer looks every quarter grace of real time: several looks.
	deadline := time.Now().Add(crashGrace)
	for time.Now().Before(deadline) {
		if brokerFenced(leader, 1) {
			t.Fatal("broker 1 fenced before the crash grace passed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	clock.Add(time.Millisecond)
	poll.Until(t, 10*time.Second, "broker 1 to be fenced for its crash", func() bool { return brokerFenced(leader, 1) })
	if brokerFenced(leader, 2) {
		t.Fatal("broker 2, alive, fenced too")
	}
}

// TestCrash_NotFencedAfterFailover: a broker's stream ends, its connection
// closed, and the active controller loses leadership before the grace has
// passed: neither it nor the new active controller fences the broker for
// a crash (the new one never saw the stream end; the broker, if dead, is
// fenced a session after its takeover).
func TestCrash_NotFencedAfterFailover(t *testing.T) {
	c, clock := crashCluster(t)
	leader := c.WaitForActive(5 * time.Second)
	epoch := registerActive(t, leader, 1, incA)
	s := openStream(t, leader, 1, epoch)
	s.die(t)
	var target int32
	for _, nd := range c.Nodes() {
		if nd.ID() != leader.ID() {
			target = nd.ID()
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := leader.Controller().TransferLeadership(ctx, target); err != nil {
		t.Fatalf("transfer leadership to %d: %v", target, err)
	}
	c.WaitForActive(10*time.Second, target)
	clock.Add(10 * crashGrace)
	deadline := time.Now().Add(2 * crashGrace)
	for time.Now().Before(deadline) {
		for _, nd := range c.Nodes() {
			if brokerFenced(nd, 1) {
				t.Fatalf("node %d sees broker 1 fenced after a failover", nd.ID())
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}
