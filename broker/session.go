package broker

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// errReregister ends a session: the controller no longer knows this broker
// epoch, so the broker registers again and starts a new session.
var errReregister = errors.New("broker epoch no longer current")

const (
	// registerTimeout bounds one registration attempt (which itself retries
	// across controllers while none is active).
	registerTimeout = 10 * time.Second
	// minHeartbeatTimeout lets one heartbeat outlast the client's 3s
	// attempt on one controller: a heartbeat stuck on an unreachable former
	// leader then still moves on to the next controller, instead of every
	// heartbeat starting, and timing out, there again.
	minHeartbeatTimeout = 4 * time.Second
	// shutdownPoll is the heartbeat interval while a controlled shutdown
	// waits for the controller's permission.
	shutdownPoll = 50 * time.Millisecond
)

// A Follower consumes a Session's metadata stream: the Agent replays it into
// its image; the bench's thin brokers only scan it. A Session calls it from
// one goroutine at a time, except Offset and OthersShuttingDown, which the
// heartbeats read from another.
type Follower interface {
	// Offset is the offset of the last metadata the broker has taken in:
	// what its heartbeats report.
	Offset() uint64
	// FromOffset is where the next stream resumes: Offset, or 0 to be sent
	// a snapshot first.
	FromOffset() uint64
	// Handle takes one push. An error ends the stream, and the session
	// opens it again from FromOffset; an error wrapping a *fatalError ends
	// the session for good.
	Handle(push *keelpb.MetadataPush) error
	// Reset drops what a stream that ended left half taken in (a
	// snapshot's first chunks).
	Reset()
	// OthersShuttingDown reports whether a broker other than this one is in
	// controlled shutdown, as far as the metadata taken in shows.
	OthersShuttingDown() bool
}

// SessionConfig is what a Session needs of the broker that drives it.
type SessionConfig struct {
	BrokerID int32
	// Controllers are the controllers' addresses, which the stream rotates
	// through while it has no leader to follow; Client calls them.
	Controllers []string
	Client      *rpc.Client
	// HeartbeatInterval is the time between heartbeats.
	HeartbeatInterval time.Duration
	// SpreadHeartbeats sends the first periodic heartbeat after a random
	// part of the interval, not a whole one: the bench starts thousands of
	// brokers at once, whose heartbeats would otherwise come in step; a
	// real broker starts alone.
	SpreadHeartbeats bool
	// DataDir is named in a cluster mismatch's error; "" for none.
	DataDir string
	Logger  *slog.Logger
	// Follower takes the metadata stream in.
	Follower Follower
	// ClusterID is the cluster the broker knows it belongs to, "" before it
	// first reaches one; it is sent with each stream request.
	ClusterID func() string
	// Registration builds the request of each registration attempt.
	Registration func() *keelpb.RegisterBrokerRequest
	// Registered is told of each accepted registration, before its
	// session starts. An error ends Run with it.
	Registered func(*keelpb.RegisterBrokerResponse) error
	// Refused is told of each registration attempt that failed. An error
	// ends Run with it; else the attempt is made again after a back-off,
	// no later than retryBy if it is set.
	Refused func(err error) (retryBy time.Time, stop error)
	// Forgotten, if set, is called when the controller no longer knows the
	// broker epoch and the session registers again.
	Forgotten func()
	// Answered, if set, is told of each heartbeat answer and how long it
	// took.
	Answered func(resp *keelpb.BrokerHeartbeatResponse, took time.Duration)
	// HeartbeatFailed, if set, is told of each heartbeat that got no
	// answer, and how long it took.
	HeartbeatFailed func(err error, took time.Duration)
	// Reconnected, if set, is called each time a stream that had carried
	// metadata ended and is opened again.
	Reconnected func()
}

// Session is what a broker keeps up with the controllers: it registers,
// heartbeats every interval with the metadata offset its Follower has
// reached, holds the metadata stream to the active controller beside the
// heartbeats (following leadership changes, resuming from the Follower's
// offset), registers again when the controller forgets the broker epoch,
// and on request asks for a controlled shutdown until the controller
// releases the broker. The Agent drives one; so does each of the bench's
// thin brokers, by the thousand in one process.
type Session struct {
	cfg SessionConfig
	log *slog.Logger

	// fenced is what the controller last said, true from each registration
	// until a heartbeat answer says otherwise.
	fenced atomic.Bool
	// applied is poked after each push the Follower took.
	applied chan struct{}

	mu           sync.Mutex // guards the fields below
	streamCancel context.CancelFunc
	// streamAttempt numbers the stream attempts, from 1: a kick names the
	// attempt it judged stuck (kickStream).
	streamAttempt uint64
	// askedAt and releasedAt time a controlled shutdown: the first
	// heartbeat that asked, and the answer that allowed it.
	askedAt, releasedAt time.Time

	// Controlled shutdown: wantShutdown makes every heartbeat ask for it
	// (shutdownPoke sends one at once); released is closed when the
	// controller answers should_shut_down, or forgets the broker.
	wantShutdown atomic.Bool
	shutdownPoke chan struct{}
	released     chan struct{}
	releaseOnce  sync.Once
}

// NewSession returns a session for cfg; Run runs it.
func NewSession(cfg SessionConfig) *Session {
	return &Session{
		cfg:          cfg,
		log:          cfg.Logger,
		applied:      make(chan struct{}, 1),
		shutdownPoke: make(chan struct{}, 1),
		released:     make(chan struct{}),
	}
}

// Run registers, then heartbeats and streams until the controller forgets
// the registration, then registers again, until ctx ends (it returns
// ctx.Err()) or the controller forgets the broker in a controlled shutdown
// (nil: there is nothing left to hand over). It gives up with an error that
// no retry can change: one of Registered or Refused, a cluster mismatch or
// the Follower's fatal error.
func (s *Session) Run(ctx context.Context) error {
	for {
		epoch, err := s.register(ctx)
		if err == nil {
			err = s.session(ctx, epoch)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !errors.Is(err, errReregister) {
			return err
		}
		if s.wantShutdown.Load() {
			// Gone from the cluster in the middle of a controlled
			// shutdown: there is nothing left to hand over.
			s.log.Info("the controller no longer knows this broker; ending the controlled shutdown")
			s.release()
			return nil
		}
		if s.cfg.Forgotten != nil {
			s.cfg.Forgotten()
		}
	}
}

// RequestShutdown makes every heartbeat from now on ask for a controlled
// shutdown, the first at once; Released is closed when the controller
// allows it.
func (s *Session) RequestShutdown() {
	s.wantShutdown.Store(true)
	select {
	case s.shutdownPoke <- struct{}{}:
	default:
	}
}

// Released is closed when the controller has released the broker from a
// controlled shutdown, or no longer knows it.
func (s *Session) Released() <-chan struct{} { return s.released }

// ShutdownTimes are when the first heartbeat asking for a controlled
// shutdown was sent and when the answer that released the broker came;
// zero before each.
func (s *Session) ShutdownTimes() (asked, released time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.askedAt, s.releasedAt
}

func (s *Session) release() {
	s.releaseOnce.Do(func() {
		s.mu.Lock()
		s.releasedAt = time.Now()
		s.mu.Unlock()
		close(s.released)
	})
}

// register registers, retrying with back-off until the active controller
// accepts the registration or Refused gives up.
func (s *Session) register(ctx context.Context) (int64, error) {
	bo := backoff{min: 100 * time.Millisecond, max: 5 * time.Second}
	for {
		rctx, cancel := context.WithTimeout(ctx, registerTimeout)
		resp, err := s.cfg.Client.RegisterBroker(rctx, s.cfg.Registration())
		cancel()
		if err == nil {
			if err := s.cfg.Registered(resp); err != nil {
				return 0, err
			}
			// A new registration starts fenced, until the controller sees
			// that the broker has caught up.
			s.fenced.Store(true)
			return resp.GetBrokerEpoch(), nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		retryBy, stop := s.cfg.Refused(err)
		if stop != nil {
			return 0, stop
		}
		pause := bo.next()
		if !retryBy.IsZero() {
			pause = min(pause, time.Until(retryBy))
		}
		if err := sleep(ctx, pause); err != nil {
			return 0, err
		}
	}
}

// session runs the heartbeat loop here and the stream loop beside it for one
// broker epoch, and returns when either ends the session.
func (s *Session) session(ctx context.Context, epoch int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	streamDone := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		streamDone <- s.streamLoop(ctx, epoch)
	}()
	err := s.heartbeatLoop(ctx, epoch, streamDone)
	cancel()
	wg.Wait()
	return err
}

// pokeApplied tells the heartbeat loop that the Follower took a push in.
func (s *Session) pokeApplied() {
	select {
	case s.applied <- struct{}{}:
	default:
	}
}

// heartbeatLoop heartbeats every interval, and at once when the broker has
// just caught up with its own registration (so that it is unfenced without
// waiting a whole interval). In a controlled shutdown every heartbeat asks
// to shut down, the first at once, and one follows every batch applied, so
// that the controller learns without delay that this broker has applied
// the leadership moves; so does every batch applied while another broker is
// in controlled shutdown, since its release waits for every active broker.
func (s *Session) heartbeatLoop(ctx context.Context, epoch int64, streamDone <-chan error) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	var sentOffset uint64
	first := true
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-streamDone:
			return err
		case <-s.shutdownPoke:
		case <-s.applied:
			switch offset := s.cfg.Follower.Offset(); {
			case s.wantShutdown.Load() || s.cfg.Follower.OthersShuttingDown():
				// A broker in controlled shutdown (this one or another) is
				// released only once every active broker has applied the
				// moves: report the new offset now, not an interval later.
				if offset <= sentOffset {
					continue
				}
			case !s.fenced.Load() || offset < uint64(epoch) || sentOffset >= uint64(epoch):
				continue
			}
		case <-timer.C:
		}
		offset := s.cfg.Follower.Offset()
		wantShutdown := s.wantShutdown.Load()
		sent := time.Now()
		if wantShutdown {
			s.mu.Lock()
			if s.askedAt.IsZero() {
				s.askedAt = sent
			}
			s.mu.Unlock()
		}
		hctx, cancel := context.WithTimeout(ctx, heartbeatTimeout(s.cfg.HeartbeatInterval))
		resp, err := s.cfg.Client.BrokerHeartbeat(hctx, &keelpb.BrokerHeartbeatRequest{
			BrokerId:       s.cfg.BrokerID,
			BrokerEpoch:    epoch,
			MetadataOffset: offset,
			WantShutdown:   wantShutdown,
		})
		cancel()
		took := time.Since(sent)
		next := s.cfg.HeartbeatInterval
		if first && s.cfg.SpreadHeartbeats {
			next = rand.N(s.cfg.HeartbeatInterval) + time.Millisecond
		}
		first = false
		if wantShutdown {
			// The release depends on other brokers' reports too, which
			// this broker does not see: ask again soon (KRaft's broker
			// also heartbeats at once while its shutdown is pending).
			next = min(next, shutdownPoll)
		}
		timer.Reset(next)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			if s.cfg.HeartbeatFailed != nil {
				s.cfg.HeartbeatFailed(err, took)
			}
			switch rpc.ReasonOf(err) {
			case rpc.ReasonStaleBrokerEpoch, rpc.ReasonBrokerNotRegistered:
				s.log.Info("the controller no longer knows this broker epoch; registering again",
					"broker_epoch", epoch, "err", status.Convert(err).Message())
				return errReregister
			}
			s.log.Warn("heartbeat failed", "broker_epoch", epoch, "err", status.Convert(err).Message())
			continue
		}
		sentOffset = offset
		s.fenced.Store(resp.GetIsFenced())
		if s.cfg.Answered != nil {
			s.cfg.Answered(resp, took)
		}
		if wantShutdown && resp.GetShouldShutDown() {
			s.release()
		}
	}
}

func (s *Session) setStreamCancel(cancel context.CancelFunc) {
	s.mu.Lock()
	s.streamCancel = cancel
	if cancel != nil {
		s.streamAttempt++
	}
	s.mu.Unlock()
}

// currentStreamAttempt is the number of the stream attempt open now, or of
// the last one.
func (s *Session) currentStreamAttempt() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streamAttempt
}

// kickStream ends stream attempt n if it is still the one open; the stream
// loop reconnects. A newer attempt is left alone: it has not been judged.
func (s *Session) kickStream(n uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streamCancel != nil && s.streamAttempt == n {
		s.streamCancel()
	}
}

// heartbeatTimeout bounds one heartbeat: two intervals, and at least
// minHeartbeatTimeout.
func heartbeatTimeout(interval time.Duration) time.Duration {
	return max(2*interval, minHeartbeatTimeout)
}

// backoff grows a pause from min to max, doubling, with jitter so that many
// brokers do not retry in step after a controller failover.
type backoff struct {
	min, max, cur time.Duration
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return jitter(b.cur)
}

// jitter is a pause between d/2 and d, at random.
func jitter(d time.Duration) time.Duration {
	half := d / 2
	return half + rand.N(half+1)
}

func (b *backoff) reset() { b.cur = 0 }

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
