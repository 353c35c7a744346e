package controller

import (
	"context"
	"time"

	"github.com/keel-dev/keel/consensus"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// What the quorum tests (package controller_test, on the in-memory quorum
// of memquorum_test.go) need of the controller's insides: they use the
// controller as its callers do, through its exported API, and these.

// Log is the consensus log the controller follows.
func (c *Controller) Log() consensus.Log { return c.quorum }

// Configuration is configuration: the latest configuration and the index a
// change guarded by it passes the log.
func (c *Controller) Configuration() (consensus.Configuration, uint64, error) {
	return c.configuration()
}

// ConfigChangeError is configChangeError.
var ConfigChangeError = configChangeError

// ExpiredSessions lists the brokers the active leadership's session tracker
// holds expired at now; it panics when the node is not active.
func (c *Controller) ExpiredSessions(now time.Time) []*fsm.Broker {
	return c.active.Load().sessions.expired(c.fsm.Image(), now)
}

// Leadership is the active controller's leadership, for the group-commit
// test, which holds its event loop and queues decisions behind it.
type Leadership = leadership

// ActiveLeadership is the leadership in force, or nil.
func (c *Controller) ActiveLeadership() *Leadership { return c.active.Load() }

// Run queues run on the event loop, as onLoop does without waiting.
func (l *leadership) Run(ctx context.Context, run func()) error {
	return l.submit(ctx, event{run: run, abandon: func(error) {}})
}

// Queue is queue: it puts d on the event loop and returns the wait for its
// outcome.
func (l *leadership) Queue(ctx context.Context, d func(*fsm.Image) ([]*keelpb.Record, error)) (func() (uint64, error), error) {
	return l.queue(ctx, d)
}

// SetTakeoverFault makes every takeover attempt of a controller built from
// cfg call fault first, and fail with its error.
func SetTakeoverFault(cfg *Config, fault func() error) { cfg.takeoverFault = fault }

// SetBrokerProbe makes a controller built from cfg dial a broker's
// registered address with probe before it fences the broker for a crash.
func SetBrokerProbe(cfg *Config, probe func(ctx context.Context, addr string) error) {
	cfg.probeBroker = probe
}

// SetSubmitFault makes a controller built from cfg call fault for every
// entry it hands to raft, and fail the entry with its error instead.
func SetSubmitFault(cfg *Config, fault func() error) { cfg.submitFault = fault }

// TakeoverTiming is takeoverTiming.
func (c *Controller) TakeoverTiming() (first, longest, giveUp time.Duration) {
	return c.takeoverTiming()
}

// VoterLagBound is voterLagBound.
const VoterLagBound = voterLagBound
