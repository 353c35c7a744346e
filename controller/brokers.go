package controller

import (
	"context"
	"errors"
	"time"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// RegisterBroker registers a broker incarnation and returns its broker epoch
// (the raft index of its registration record). A retry of the registration
// in force (same incarnation) writes nothing and returns the epoch it has.
// The request is validated by the caller; the decision is made on the event
// loop from the committed image.
func (c *Controller) RegisterBroker(ctx context.Context, req *keelpb.RegisterBrokerRequest) (*keelpb.RegisterBrokerResponse, error) {
	l := c.active.Load()
	if l == nil {
		return nil, c.notLeader()
	}
	holding := func(b *fsm.Broker) time.Duration { return l.sessions.holding(b, c.cfg.Now()) }
	var kept int64 // the epoch a retry keeps
	index, err := l.decide(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		recs, err := registrationRecords(img, req, holding)
		kept = 0
		if b, ok := img.Broker(req.BrokerId); ok && err == nil && len(recs) == 0 {
			kept = b.Epoch
		}
		return recs, err
	})
	var dup *DuplicateRegistrationError
	if errors.As(err, &dup) {
		// The incarnation that holds the id may be the one this process
		// replaces: crash detection takes that as its death (crash.go).
		l.sessions.successorAsked(dup.BrokerID, dup.Epoch)
	}
	if err != nil {
		return nil, err
	}
	epoch := int64(index)
	if kept > 0 {
		epoch = kept
	}
	l.sessions.registered(req.BrokerId, epoch, c.cfg.Now())
	if kept > 0 {
		c.log.Info("broker registration retried: epoch and state kept", "broker_id", req.BrokerId, "broker_epoch", epoch,
			"incarnation_id", req.IncarnationId)
	} else {
		c.log.Info("broker registered", "broker_id", req.BrokerId, "broker_epoch", epoch,
			"incarnation_id", req.IncarnationId, "address", req.Address, "rack", req.Rack)
	}
	return &keelpb.RegisterBrokerResponse{BrokerEpoch: epoch, ClusterId: c.fsm.Image().ClusterID, ControllerEpoch: l.epoch.Load()}, nil
}

// BrokerHeartbeat renews a broker's session from memory, and writes a record
// only when the heartbeat changes the broker's state (unfence, fence,
// controlled shutdown and its end). A heartbeat that changes nothing is
// answered at once, from this node's image, without confirming that it
// still leads, as a default read is: heartbeats are the hot path (every
// broker, every few seconds), the answer only says how this controller
// sees the broker, and a deposed one stops answering once it notices (in
// its lease, unless paused). A refusal (a stale epoch, an unknown broker)
// and a release (should shut down) are confirmed first.
func (c *Controller) BrokerHeartbeat(ctx context.Context, req *keelpb.BrokerHeartbeatRequest) (*keelpb.BrokerHeartbeatResponse, error) {
	l := c.active.Load()
	if l == nil {
		return nil, c.notLeader()
	}
	img := c.fsm.Image()
	confirmed := false // by a decision, or a read that confirmed this node still leads
	if _, err := currentBroker(img, req.BrokerId, req.BrokerEpoch); err != nil {
		// The refusal sends the broker to register again: it is given only
		// once this node has confirmed it still leads, from the image that
		// confirms it (a deposed leader's may miss the registration the
		// broker made with a newer one).
		if img, err = c.ReadImage(ctx); err != nil {
			return nil, err
		}
		if _, err := currentBroker(img, req.BrokerId, req.BrokerEpoch); err != nil {
			return nil, err
		}
		confirmed = true
	}
	l.sessions.touch(req.BrokerId, req.BrokerEpoch, c.cfg.Now(), req.MetadataOffset, req.WantShutdown || req.WantFence)
	// The common case, no change, costs no event and no write.
	if recs, err := heartbeatRecords(img, req); err != nil {
		return nil, err
	} else if len(recs) > 0 {
		index, err := l.decide(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
			return heartbeatRecords(img, req)
		})
		if err != nil {
			return nil, err
		}
		img, confirmed = c.fsm.Image(), true
		if b, ok := img.Broker(req.BrokerId); ok && b.ShuttingDown && index > 0 {
			l.noteShutdown(req.BrokerId, index)
		}
	}
	b, err := currentBroker(img, req.BrokerId, req.BrokerEpoch)
	if err != nil {
		return nil, err
	}
	// KRaft's rule: a broker in controlled shutdown may go once it leads
	// nothing and every active broker has applied the moves it caused; it
	// is then fenced, and stays registered.
	if req.WantShutdown && b.ShuttingDown && !leadsAny(img, b.ID) &&
		l.sessions.allApplied(img, l.shutdownOffset(b.ID, img.Offset), b.ID) {
		if _, err := l.decide(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
			return shutdownRecords(img, req.BrokerId, req.BrokerEpoch)
		}); err != nil {
			return nil, err
		}
		img, confirmed = c.fsm.Image(), true
		if b, err = currentBroker(img, req.BrokerId, req.BrokerEpoch); err != nil {
			return nil, err
		}
		if b.Fenced {
			c.log.Info("broker fenced: controlled shutdown complete", "broker_id", b.ID, "broker_epoch", b.Epoch)
		}
	}
	if req.WantShutdown && b.Fenced && !confirmed {
		// Letting the broker go is final: confirmed as a refusal is.
		if img, err = c.ReadImage(ctx); err != nil {
			return nil, err
		}
		if b, err = currentBroker(img, req.BrokerId, req.BrokerEpoch); err != nil {
			return nil, err
		}
	}
	return &keelpb.BrokerHeartbeatResponse{
		IsCaughtUp:      caughtUp(b, req.MetadataOffset),
		IsFenced:        b.Fenced,
		ShouldShutDown:  req.WantShutdown && b.Fenced,
		ControllerEpoch: l.epoch.Load(),
		ControllerId:    c.cfg.NodeID,
	}, nil
}

// UnregisterBroker removes a broker for good: an operator's act. It returns
// the epoch of the incarnation removed. A broker that is not fenced is
// refused with ErrBrokerNotFenced; an epoch (0: any) that is not the
// registered one with ErrStaleBrokerEpoch.
func (c *Controller) UnregisterBroker(ctx context.Context, req *keelpb.UnregisterBrokerRequest) (int64, error) {
	l := c.active.Load()
	if l == nil {
		return 0, c.notLeader()
	}
	var epoch int64
	if _, err := l.decide(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		recs, err := unregisterRecords(img, req.BrokerId, req.BrokerEpoch)
		if b, ok := img.Broker(req.BrokerId); ok && err == nil {
			epoch = b.Epoch
		}
		return recs, err
	}); err != nil {
		return 0, err
	}
	l.sessions.forget(req.BrokerId)
	c.log.Info("broker unregistered", "broker_id", req.BrokerId, "broker_epoch", epoch)
	return epoch, nil
}

// Brokers lists the brokers of the committed image this node holds.
func (c *Controller) Brokers() []*fsm.Broker { return c.fsm.Image().Brokers() }
