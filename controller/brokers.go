package controller

import (
	"context"
	"time"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// RegisterBroker registers a broker incarnation and returns its broker epoch
// (the raft index of its registration record). The request is validated by
// the caller; the decision is made on the event loop from the committed image.
func (c *Controller) RegisterBroker(ctx context.Context, req *keelpb.RegisterBrokerRequest) (*keelpb.RegisterBrokerResponse, error) {
	l := c.active.Load()
	if l == nil {
		return nil, c.notLeader()
	}
	remaining := func(id int32, epoch int64) time.Duration { return l.sessions.remaining(id, epoch, c.cfg.Now()) }
	index, err := l.decide(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		return registrationRecords(img, req, remaining)
	})
	if err != nil {
		return nil, err
	}
	l.sessions.touch(req.BrokerId, int64(index), c.cfg.Now(), 0)
	c.log.Info("broker registered", "broker_id", req.BrokerId, "broker_epoch", index,
		"incarnation_id", req.IncarnationId, "address", req.Address, "rack", req.Rack)
	return &keelpb.RegisterBrokerResponse{BrokerEpoch: int64(index), ClusterId: c.fsm.Image().ClusterID, ControllerEpoch: l.epoch.Load()}, nil
}

// BrokerHeartbeat renews a broker's session from memory, and writes a record
// only when the heartbeat changes the broker's state (unfence, fence,
// controlled shutdown).
func (c *Controller) BrokerHeartbeat(ctx context.Context, req *keelpb.BrokerHeartbeatRequest) (*keelpb.BrokerHeartbeatResponse, error) {
	l := c.active.Load()
	if l == nil {
		return nil, c.notLeader()
	}
	img := c.fsm.Image()
	if _, err := currentBroker(img, req.BrokerId, req.BrokerEpoch); err != nil {
		return nil, err
	}
	l.sessions.touch(req.BrokerId, req.BrokerEpoch, c.cfg.Now(), req.MetadataOffset)
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
		if req.WantShutdown && index > 0 {
			l.noteShutdown(req.BrokerId, uint64(index))
		}
		img = c.fsm.Image()
	}
	b, err := currentBroker(img, req.BrokerId, req.BrokerEpoch)
	if err != nil {
		return nil, err
	}
	resp := &keelpb.BrokerHeartbeatResponse{
		IsCaughtUp:      caughtUp(b, req.MetadataOffset),
		IsFenced:        b.Fenced,
		ControllerEpoch: l.epoch.Load(),
		ControllerId:    c.cfg.NodeID,
	}
	if req.WantShutdown {
		// KRaft's rule: a broker in controlled shutdown may go once it leads
		// nothing and every active broker has applied the moves it caused.
		resp.ShouldShutDown = b.Fenced || (b.ShuttingDown && !leadsAny(img, b.ID) &&
			l.sessions.allApplied(img, l.shutdownOffset(b.ID, img.Offset), b.ID))
	}
	return resp, nil
}

// UnregisterBroker removes a broker for good.
func (c *Controller) UnregisterBroker(ctx context.Context, req *keelpb.UnregisterBrokerRequest) error {
	l := c.active.Load()
	if l == nil {
		return c.notLeader()
	}
	if _, err := l.decide(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		return unregisterRecords(img, req.BrokerId, req.BrokerEpoch)
	}); err != nil {
		return err
	}
	l.sessions.forget(req.BrokerId)
	c.log.Info("broker unregistered", "broker_id", req.BrokerId, "broker_epoch", req.BrokerEpoch)
	return nil
}

// Brokers lists the brokers of the committed image this node holds.
func (c *Controller) Brokers() []*fsm.Broker { return c.fsm.Image().Brokers() }
