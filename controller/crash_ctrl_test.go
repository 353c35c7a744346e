package controller_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

const crashGrace = 500 * time.Millisecond

// crashCluster is a quorum with crash detection on and a fake clock: the
// grace passes only when the test moves the clock, and sessions (a minute)
// never run out. Leadership moves only when the test moves it (a
// leadership that moved under the test would never fence, by the rule
// under test). The brokers' registered addresses are not
// dialled: the dial before a crash fence answers what port says (refused
// until the test says otherwise).
func crashCluster(t *testing.T) (c *quorum, clock *clock, port *brokerPort) {
	t.Helper()
	clock = newClock()
	port = &brokerPort{}
	c = newCluster(t, 3, withSessionTimeout(time.Minute), withClock(clock.Now),
		withTune(func(cfg *controller.Config) {
			cfg.CrashGrace = crashGrace
			controller.SetBrokerProbe(cfg, port.dial)
		}))
	return c, clock, port
}

// brokerPort is what every broker's registered address answers the crash
// fencer's dial, and how many dials it had.
type brokerPort struct {
	listening atomic.Bool
	dials     atomic.Int32
}

func (p *brokerPort) dial(context.Context, string) error {
	p.dials.Add(1)
	if p.listening.Load() {
		return nil
	}
	return syscall.ECONNREFUSED
}

// brokerStream is broker id's metadata stream to nd, on a connection whose
// closing the test decides.
type brokerStream struct {
	closed atomic.Bool
	cancel context.CancelFunc
	done   chan error
}

func openStream(t *testing.T, nd *member, id int32, epoch int64) *brokerStream {
	t.Helper()
	s := &brokerStream{done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(controller.WithConnClosed(context.Background(), s.closed.Load))
	s.cancel = cancel
	t.Cleanup(cancel)
	pushed := make(chan struct{}, 1)
	go func() {
		s.done <- nd.Controller().StreamMetadata(ctx, &keelpb.StreamMetadataRequest{BrokerId: id, BrokerEpoch: epoch}, controller.PushFunc(func(*keelpb.MetadataPush) error {
			select {
			case pushed <- struct{}{}:
			default:
			}
			return nil
		}))
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

// notFencedOverLooks fails the test if broker id is fenced on nd during
// several looks of the crash fencer (a quarter grace of real time each);
// when says when, for the message.
func notFencedOverLooks(t *testing.T, nd *member, id int32, when string) {
	t.Helper()
	deadline := time.Now().Add(crashGrace)
	for time.Now().Before(deadline) {
		if brokerFenced(nd, id) {
			t.Fatalf("broker %d fenced %s", id, when)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCrash_FencedOnceGraceElapsed: a broker whose stream's connection
// closed is fenced once the crash grace has passed on the controller's
// clock, not before, and its partitions' leadership moves with it.
func TestCrash_FencedOnceGraceElapsed(t *testing.T) {
	c, clock, _ := crashCluster(t)
	leader := c.WaitForActive(5 * time.Second)
	epoch := registerActive(t, leader, 1, incA)
	registerActive(t, leader, 2, incB)
	s := openStream(t, leader, 1, epoch)
	s.die(t)
	clock.Advance(crashGrace - time.Millisecond)
	notFencedOverLooks(t, leader, 1, "before the crash grace passed")
	clock.Advance(time.Millisecond)
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
	c, clock, _ := crashCluster(t)
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
	clock.Advance(10 * crashGrace)
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

// TestCrash_NotFencedWhileItsPortListens: a broker whose stream's
// connection closed but whose port still accepts (its link was reset; the
// process lives) is not fenced for a crash once the grace has passed: the
// active controller dialled its address, and leaves it to its session.
// Then its link breaks again and this time its port refuses: it is fenced.
func TestCrash_NotFencedWhileItsPortListens(t *testing.T) {
	c, clock, port := crashCluster(t)
	leader := c.WaitForActive(5 * time.Second)
	epoch := registerActive(t, leader, 1, incA)
	port.listening.Store(true)
	openStream(t, leader, 1, epoch).die(t)
	clock.Advance(crashGrace)
	poll.Until(t, 10*time.Second, "the crash fencer to dial broker 1's address", func() bool { return port.dials.Load() > 0 })
	notFencedOverLooks(t, leader, 1, "for a crash while its port accepted")
	if n := port.dials.Load(); n != 1 {
		t.Fatalf("broker 1's address was dialled %d times for one stream end, want 1", n)
	}

	port.listening.Store(false)
	openStream(t, leader, 1, epoch).die(t)
	clock.Advance(crashGrace)
	poll.Until(t, 10*time.Second, "broker 1 to be fenced for its crash", func() bool { return brokerFenced(leader, 1) })
}

// TestCrash_RestartedWithinGraceReplacesAtOnce: a broker killed and
// started again on the same port within the grace. Its old incarnation's
// stream connection closed; its port accepts (the new process's), so the
// dial alone would keep it. But the new incarnation asked to register (and
// was refused: the old one held the id), before the crash fencer's dial or
// after it: the old process is gone. It is fenced once the grace has
// passed, and the new incarnation's next registration succeeds, without
// waiting for a session (a minute here).
func TestCrash_RestartedWithinGraceReplacesAtOnce(t *testing.T) {
	for _, afterDial := range []bool{false, true} {
		t.Run(fmt.Sprintf("registered after the dial: %v", afterDial), func(t *testing.T) {
			c, clock, port := crashCluster(t)
			leader := c.WaitForActive(5 * time.Second)
			epoch := registerActive(t, leader, 1, incA)
			openStream(t, leader, 1, epoch).die(t)
			port.listening.Store(true) // the new process has bound the port
			ctx := context.Background()
			register := func() {
				t.Helper()
				if _, err := leader.Controller().RegisterBroker(ctx, registerReq(1, incB)); !errors.Is(err, controller.ErrDuplicateRegistration) {
					t.Fatalf("a new incarnation while the old one holds the id: %v, want ErrDuplicateRegistration", err)
				}
			}
			if !afterDial {
				register()
			}
			clock.Advance(crashGrace)
			if afterDial {
				poll.Until(t, 10*time.Second, "the crash fencer to dial broker 1's address", func() bool { return port.dials.Load() > 0 })
				notFencedOverLooks(t, leader, 1, "though its port listened")
				register()
			}
			poll.Until(t, 10*time.Second, "the old incarnation of broker 1 to be fenced", func() bool { return brokerFenced(leader, 1) })
			// The fencer lets go of the old session once its fence has
			// committed, a moment after the image shows it: until then the
			// new incarnation is still refused, and asks again, as a
			// broker does. Far sooner than a session (a minute), it is in.
			var resp *keelpb.RegisterBrokerResponse
			poll.UntilState(t, 10*time.Second, "the new incarnation's registration after the old one was fenced", func() (bool, string) {
				var err error
				resp, err = leader.Controller().RegisterBroker(ctx, registerReq(1, incB))
				if err != nil && !errors.Is(err, controller.ErrDuplicateRegistration) {
					t.Fatalf("the new incarnation's registration after the old one was fenced: %v", err)
				}
				return err == nil, fmt.Sprint(err)
			})
			if resp.BrokerEpoch <= epoch {
				t.Fatalf("new epoch %d, want above %d", resp.BrokerEpoch, epoch)
			}
			if n, want := port.dials.Load(), map[bool]int32{false: 0, true: 1}[afterDial]; n != want {
				t.Fatalf("broker 1's address dialled %d times, want %d", n, want)
			}
		})
	}
}

// TestCrash_HeartbeatWhileTheStreamIsDown: a broker whose stream's
// connection closed but whose heartbeat reaches the active controller
// before the grace has passed is back, stream or not: it is not fenced,
// and its address is not even dialled (here it would refuse).
func TestCrash_HeartbeatWhileTheStreamIsDown(t *testing.T) {
	c, clock, port := crashCluster(t)
	leader := c.WaitForActive(5 * time.Second)
	epoch := registerActive(t, leader, 1, incA)
	openStream(t, leader, 1, epoch).die(t)
	clock.Advance(crashGrace / 2)
	offset := leader.FSM().Image().Offset
	if _, err := leader.Controller().BrokerHeartbeat(context.Background(), &keelpb.BrokerHeartbeatRequest{BrokerId: 1, BrokerEpoch: epoch, MetadataOffset: offset}); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	clock.Advance(crashGrace)
	notFencedOverLooks(t, leader, 1, "for a crash after it heartbeated")
	if n := port.dials.Load(); n != 0 {
		t.Fatalf("broker 1's address dialled %d times, though it heartbeated within the grace", n)
	}
}
