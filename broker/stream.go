package broker

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// errStreamEnded: the controller closed the stream without an error.
var errStreamEnded = errors.New("the controller ended the metadata stream")

// The active controller fences a broker whose metadata stream's connection
// closed if the broker is not seen again within the controller's crash
// grace (500 ms by default) and its port does not answer. A broker whose
// link broke is therefore back as soon as the link is: for fastRedialWindow
// after a stream that a controller had taken ends, the stream loop tries
// again at once, then, while its attempts reach no controller (gRPC's own
// Unavailable: a connection refused, reset or closed), every
// fastRedialPace (jittered down to half), each time waking the connection
// out of gRPC's reconnect back-off (rpc.Client.ResetBackoff), which alone
// would dial again up to a second late. The window is four default crash
// graces. A controller's own answers (no leader yet, a leader hint) keep
// the usual pacing, so that brokers retrying during an election do not
// slow it down, and after the window the usual back-offs apply, the stream
// loop's (25 ms, doubling to 250 ms) and gRPC's per connection (50 ms, x1.6,
// up to 1 s). So a controller that stays down costs each broker at most
// about fastRedialWindow/(fastRedialPace*3/4), some 130, refused dials
// across the controllers it rotates through, then about one a second.
const (
	fastRedialWindow = 2 * time.Second
	fastRedialPace   = 20 * time.Millisecond
)

// redial paces the stream loop's attempts to open a stream.
type redial struct {
	bo backoff
	// lost is when a stream that a controller had taken last ended (zero:
	// none has): the fast window runs from it.
	lost time.Time
}

// fast reports whether now is within the fast window of the last loss.
func (r *redial) fast(now time.Time) bool {
	return !r.lost.IsZero() && now.Sub(r.lost) < fastRedialWindow
}

// ended notes that an attempt ended at now after accepting accepted
// pushes, and reports whether the next one goes at once: a stream that a
// controller had taken ended, and it is not one more in a fast window (a
// stream that keeps ending after its first pushes is paced, not retried in
// a loop).
func (r *redial) ended(now time.Time, accepted int) (atOnce bool) {
	if accepted == 0 {
		return false
	}
	atOnce = !r.fast(now)
	r.lost = now
	r.bo.reset()
	return atOnce
}

// next is the pause before the next attempt, the last one having reached
// no controller (unreached) or not: the fast pace within the window for
// the former, else the back-off (from its base delay, growing as attempts
// keep failing).
func (r *redial) next(now time.Time, unreached bool) time.Duration {
	if unreached && r.fast(now) {
		return jitter(fastRedialPace)
	}
	return r.bo.next()
}

// unreached reports whether err is gRPC's own Unavailable, without details:
// the attempt reached no controller (its connection was refused, reset or
// closed, or is not up yet). A controller's refusals carry a reason or a
// leader hint.
func unreached(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable && len(st.Details()) == 0
}

// streamLoop holds the metadata stream to the active controller for one
// broker epoch, reconnecting whenever it ends: to the leader a follower names,
// else to the next controller, always resuming from the broker's own applied
// offset. It returns only when ctx ends, when the controller no longer knows
// the broker epoch (errReregister), or on a fatal error.
func (s *Session) streamLoop(ctx context.Context, epoch int64) error {
	addrs := s.cfg.Controllers
	// The controller that accepted the registration is the active one.
	target := s.cfg.Client.Leader()
	next := 0
	if target == "" {
		target, next = addrs[0], 1
	}
	rotate := func() {
		if l := s.cfg.Client.Leader(); l != "" && l != target {
			target = l
			return
		}
		for range addrs {
			cand := addrs[next%len(addrs)]
			next++
			if cand != target || len(addrs) == 1 {
				target = cand
				return
			}
		}
	}
	// Short pauses, capped low: after a failover the brokers should be
	// streaming from the new leader within a few hundred milliseconds of
	// its election, and a reconnect attempt costs the controllers little.
	// After a lost stream, faster still (fastRedialWindow).
	rd := redial{bo: backoff{min: 25 * time.Millisecond, max: 250 * time.Millisecond}}
	followed := false
	for {
		if rd.fast(time.Now()) {
			s.cfg.Client.ResetBackoff(target)
		}
		accepted, err := s.streamOnce(ctx, target, epoch)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		atOnce := rd.ended(time.Now(), accepted)
		pause, follow := !atOnce, false
		hint, _ := rpc.LeaderHintOf(err)
		var fatal *fatalError
		switch reason := rpc.ReasonOf(err); {
		case errors.As(err, &fatal):
			return fatal.err
		case reason == rpc.ReasonStaleBrokerEpoch, reason == rpc.ReasonBrokerNotRegistered:
			s.log.Info("the controller no longer knows this broker epoch; registering again",
				"broker_epoch", epoch, "err", status.Convert(err).Message())
			return errReregister
		case reason == rpc.ReasonInconsistentClusterID:
			return clusterMismatchf("the controller at %s refused the metadata stream of broker %d (data dir %s): %s",
				target, s.cfg.BrokerID, s.cfg.DataDir, status.Convert(err).Message())
		case hint != nil && hint.GetLeaderAddress() != "" && hint.GetLeaderAddress() != target:
			s.log.Debug("following the active controller", "from", target, "to", hint.GetLeaderAddress(), "leader_id", hint.GetLeaderId())
			target, follow = hint.GetLeaderAddress(), true
			// The first hop is taken at once; hints that keep bouncing
			// (a leadership change in progress) back off.
			pause = followed && !atOnce
		case reason == rpc.ReasonNotReady:
			// The leader, about to be active: the same target, in a moment.
			pause = false
			if err := sleep(ctx, rpc.NotReadyPause); err != nil {
				return err
			}
		case errors.Is(err, errOffsetGap), errors.Is(err, errDiverged),
			errors.Is(err, errBadSnapshot), errors.Is(err, errBadPush):
			// The controller is fine; the broker resumes from its own offset
			// (or, after a divergence, from a snapshot).
			s.log.Warn("dropped the metadata stream; resuming", "controller", target,
				"from_offset", s.cfg.Follower.FromOffset(), "err", err)
		case errors.Is(err, errStaleControllerEpoch):
			s.log.Warn("dropped the metadata stream of a deposed controller", "controller", target, "err", err)
			rotate()
		default:
			switch code := status.Code(err); {
			case accepted > 0:
				s.log.Info("metadata stream ended; reconnecting", "controller", target, "err", errorText(err))
			case code == codes.Unavailable, code == codes.Canceled, errors.Is(err, errStreamEnded):
				// Normal while a controller is down or leadership moves.
				s.log.Debug("metadata stream failed", "controller", target, "err", errorText(err))
			default:
				s.log.Warn("metadata stream refused", "controller", target, "err", errorText(err))
			}
			rotate()
		}
		// A stream that had carried metadata ended, and the session goes on:
		// it is opened again. Attempts that failed before any push (a
		// controller down, a follower's leader hint followed) are retries
		// of one reconnect, not reconnects.
		if accepted > 0 && s.cfg.Reconnected != nil {
			s.cfg.Reconnected()
		}
		followed = follow
		if pause {
			if err := sleep(ctx, rd.next(time.Now(), unreached(err))); err != nil {
				return err
			}
		}
	}
}

// streamOnce opens one stream to target and hands each push to the
// Follower until it ends. It returns how many pushes it accepted and why it
// ended.
func (s *Session) streamOnce(ctx context.Context, target string, epoch int64) (accepted int, err error) {
	// A snapshot half received on this stream is of no use on the next.
	defer s.cfg.Follower.Reset()
	cl, err := s.cfg.Client.Controller(target)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.setStreamCancel(cancel)
	defer s.setStreamCancel(nil)
	from := s.cfg.Follower.FromOffset()
	stream, err := cl.StreamMetadata(ctx, &keelpb.StreamMetadataRequest{
		BrokerId:    s.cfg.BrokerID,
		BrokerEpoch: epoch,
		FromOffset:  from,
		ClusterId:   s.cfg.ClusterID(),
	})
	if err != nil {
		return 0, err
	}
	for {
		// Decoded from one copy of its bytes (pushMessage), not proto's two.
		push := &keelpb.MetadataPush{}
		err := stream.RecvMsg(&pushMessage{push: push})
		if err == io.EOF {
			return accepted, errStreamEnded
		}
		if err != nil {
			return accepted, err
		}
		err = s.cfg.Follower.Handle(push)
		// Even a push refused in part may have moved the offset (the
		// entries before a gap).
		s.pokeApplied()
		if err != nil {
			return accepted, err
		}
		if accepted == 0 {
			s.log.Info("streaming metadata", "controller", target, "controller_id", push.GetControllerId(),
				"controller_epoch", push.GetControllerEpoch(), "from_offset", from)
		}
		accepted++
	}
}

// errorText is a gRPC status's message, or the error's text.
func errorText(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Code().String() + ": " + st.Message()
	}
	return err.Error()
}
