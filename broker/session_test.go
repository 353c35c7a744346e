package broker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// replayFollower is the least Follower: a replayer, with no handlers.
type replayFollower struct {
	r   *replayer
	img atomic.Pointer[fsm.Image]
}

func newReplayFollower(t *testing.T) *replayFollower {
	f := &replayFollower{}
	f.r = newReplayer(testLogger(t), func(_, after *fsm.Image) error { f.img.Store(after); return nil })
	f.img.Store(f.r.img)
	return f
}

func (f *replayFollower) Offset() uint64                         { return f.img.Load().Offset }
func (f *replayFollower) FromOffset() uint64                     { return f.r.fromOffset() }
func (f *replayFollower) Handle(push *keelpb.MetadataPush) error { return f.r.handle(push) }
func (f *replayFollower) Reset()                                 { f.r.reset() }
func (f *replayFollower) OthersShuttingDown() bool {
	return otherShuttingDown(f.img.Load(), 1)
}

// sessionRun is a Session of broker 1 running against a fake cluster, and
// what its hooks were told.
type sessionRun struct {
	s    *Session
	f    *replayFollower
	done chan error // Run's error

	mu         sync.Mutex
	epochs     []int64 // of each registration accepted
	forgotten  int
	answers    []*keelpb.BrokerHeartbeatResponse
	hbFailures int
}

func (r *sessionRun) lastEpoch() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.epochs) == 0 {
		return 0
	}
	return r.epochs[len(r.epochs)-1]
}

func (r *sessionRun) lastAnswer() *keelpb.BrokerHeartbeatResponse {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.answers) == 0 {
		return nil
	}
	return r.answers[len(r.answers)-1]
}

// startSession runs a session against c until the test ends. refused is
// its Refused hook; nil retries every refusal.
func startSession(t *testing.T, c *fakeCluster, refused func(error) (time.Time, error)) *sessionRun {
	t.Helper()
	client, err := rpc.NewClient(c.addrs())
	if err != nil {
		t.Fatal(err)
	}
	if refused == nil {
		refused = func(error) (time.Time, error) { return time.Time{}, nil }
	}
	r := &sessionRun{f: newReplayFollower(t), done: make(chan error, 1)}
	r.s = NewSession(SessionConfig{
		BrokerID:          1,
		Controllers:       c.addrs(),
		Client:            client,
		HeartbeatInterval: 50 * time.Millisecond,
		Logger:            testLogger(t),
		Follower:          r.f,
		ClusterID:         func() string { return "" },
		Registration: func() *keelpb.RegisterBrokerRequest {
			return &keelpb.RegisterBrokerRequest{BrokerId: 1, IncarnationId: "i1", Address: "127.0.0.1:1",
				MinMetadataVersion: fsm.MinMetadataVersion, MaxMetadataVersion: fsm.MaxMetadataVersion}
		},
		Registered: func(resp *keelpb.RegisterBrokerResponse) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.epochs = append(r.epochs, resp.GetBrokerEpoch())
			return nil
		},
		Refused: refused,
		Forgotten: func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.forgotten++
		},
		Answered: func(resp *keelpb.BrokerHeartbeatResponse, _ time.Duration) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.answers = append(r.answers, resp)
		},
		HeartbeatFailed: func(error, time.Duration) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.hbFailures++
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { r.done <- r.s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
		client.Close()
	})
	return r
}

// TestSession: what a Session does for the broker that drives it (the
// Agent and the bench's thin brokers), against a fake controller.
func TestSession(t *testing.T) {
	t.Run("registers, then heartbeats the offset it follows and is unfenced once caught up", func(t *testing.T) {
		c := newFakeCluster(t, 1)
		r := startSession(t, c, nil)
		poll.Until(t, waitTimeout, "an unfenced heartbeat answer", func() bool {
			a := r.lastAnswer()
			return a != nil && !a.GetIsFenced()
		})
		epoch := r.lastEpoch()
		if epoch == 0 || r.f.Offset() < uint64(epoch) {
			t.Fatalf("unfenced at offset %d with broker epoch %d", r.f.Offset(), epoch)
		}
		want := c.append(noOpRec())
		poll.Until(t, waitTimeout, "a heartbeat reporting the new offset", func() bool {
			hbs := c.heartbeatCalls()
			return len(hbs) > 0 && hbs[len(hbs)-1].GetMetadataOffset() >= want
		})
	})
	t.Run("registers again when the controller forgets the broker epoch", func(t *testing.T) {
		c := newFakeCluster(t, 1)
		c.setHoldFenced(true)
		r := startSession(t, c, nil)
		poll.Until(t, waitTimeout, "a registration", func() bool { return r.lastEpoch() != 0 })
		first := r.lastEpoch()
		c.append(unregisterRec(1, first))
		poll.Until(t, waitTimeout, "a second registration", func() bool { return r.lastEpoch() > first })
		r.mu.Lock()
		forgotten, failures := r.forgotten, r.hbFailures
		r.mu.Unlock()
		if forgotten != 1 {
			t.Errorf("Forgotten called %d times, want 1", forgotten)
		}
		// The stream may see it first (the unregistration is in it); a
		// heartbeat may too.
		if failures > 1 {
			t.Errorf("%d heartbeats failed, want at most the one refused", failures)
		}
	})
	t.Run("a controlled shutdown is released once the controller fences the broker", func(t *testing.T) {
		c := newFakeCluster(t, 1)
		c.shutdownAfter = 2
		r := startSession(t, c, nil)
		poll.Until(t, waitTimeout, "an unfenced heartbeat answer", func() bool {
			a := r.lastAnswer()
			return a != nil && !a.GetIsFenced()
		})
		r.s.RequestShutdown()
		select {
		case <-r.s.Released():
		case <-time.After(waitTimeout):
			t.Fatal("not released")
		}
		asked, released := r.s.ShutdownTimes()
		if asked.IsZero() || released.Before(asked) {
			t.Errorf("asked at %v, released at %v", asked, released)
		}
		if a := r.lastAnswer(); !a.GetShouldShutDown() || !a.GetIsFenced() {
			t.Errorf("released on %v", a)
		}
	})
	t.Run("forgotten in a controlled shutdown: released, and Run ends", func(t *testing.T) {
		c := newFakeCluster(t, 1)
		c.shutdownAfter = -1 // the controller never releases it
		r := startSession(t, c, nil)
		poll.Until(t, waitTimeout, "an unfenced heartbeat answer", func() bool {
			a := r.lastAnswer()
			return a != nil && !a.GetIsFenced()
		})
		r.s.RequestShutdown()
		poll.Until(t, waitTimeout, "a heartbeat asking to shut down", func() bool {
			hbs := c.heartbeatCalls()
			return len(hbs) > 0 && hbs[len(hbs)-1].GetWantShutdown()
		})
		epoch := r.lastEpoch()
		c.append(fenceRec(1, epoch), unregisterRec(1, epoch))
		select {
		case err := <-r.done:
			r.done <- err // for the cleanup
			if err != nil {
				t.Fatalf("Run: %v, want nil", err)
			}
		case <-time.After(waitTimeout):
			t.Fatal("Run did not end")
		}
		select {
		case <-r.s.Released():
		default:
			t.Fatal("not released")
		}
		if regs := c.registrationCalls(); len(regs) != 1 {
			t.Errorf("%d registrations, want 1", len(regs))
		}
	})
	t.Run("a refusal that Refused gives up on ends Run with its error", func(t *testing.T) {
		c := newFakeCluster(t, 1)
		c.registerErr = reasonErr(codes.FailedPrecondition, rpc.ReasonUnsupportedMetadataVersion, "no")
		stop := errors.New("given up")
		var refusals atomic.Int32
		r := startSession(t, c, func(err error) (time.Time, error) {
			if refusals.Add(1) < 3 {
				return time.Now(), nil // again at once
			}
			return time.Time{}, stop
		})
		select {
		case err := <-r.done:
			r.done <- err
			if !errors.Is(err, stop) {
				t.Fatalf("Run: %v, want %v", err, stop)
			}
		case <-time.After(waitTimeout):
			t.Fatal("Run did not end")
		}
		if n := refusals.Load(); n != 3 {
			t.Errorf("Refused told %d times, want 3", n)
		}
	})
}
