package rpc

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/tlsauth"
)

// Leader returns the address of the controller that last accepted a write
// through this client, or "" when none has yet. It is a good first guess
// for the active controller, e.g. for a broker's metadata stream.
func (c *Client) Leader() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

// RegisterBroker registers a broker incarnation with the active controller
// (see Write for how it is found). Refusals carry an ErrorInfo reason; read
// it with ReasonOf.
func (c *Client) RegisterBroker(ctx context.Context, req *keelpb.RegisterBrokerRequest) (*keelpb.RegisterBrokerResponse, error) {
	var resp *keelpb.RegisterBrokerResponse
	err := c.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.RegisterBroker(ctx, req)
		return err
	})
	return resp, err
}

// BrokerHeartbeat sends one heartbeat to the active controller. A stale or
// unknown broker epoch fails with reason ReasonStaleBrokerEpoch or
// ReasonBrokerNotRegistered: the broker must register again.
//
// Each attempt gets a third of ctx's time (at least 100ms), so that a
// controller that hangs rather than refusing costs one attempt and the
// heartbeat still reaches the new active controller within the session.
func (c *Client) BrokerHeartbeat(ctx context.Context, req *keelpb.BrokerHeartbeatRequest) (*keelpb.BrokerHeartbeatResponse, error) {
	attempt := writeAttemptTimeout
	if d, ok := ctx.Deadline(); ok {
		attempt = max(time.Until(d)/3, 100*time.Millisecond)
	}
	var resp *keelpb.BrokerHeartbeatResponse
	err := c.WriteWithin(ctx, attempt, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.BrokerHeartbeat(ctx, req)
		return err
	})
	return resp, err
}

// UnregisterBroker removes a fenced broker through the active controller
// (broker_epoch 0: whichever incarnation is registered) and returns the
// epoch it removed. A broker that is not fenced is refused with reason
// ReasonBrokerNotFenced.
func (c *Client) UnregisterBroker(ctx context.Context, req *keelpb.UnregisterBrokerRequest) (*keelpb.UnregisterBrokerResponse, error) {
	var resp *keelpb.UnregisterBrokerResponse
	err := c.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.UnregisterBroker(ctx, req)
		return err
	})
	return resp, err
}

// ListBrokers reads the registered brokers, as ListTopics: from the active
// controller unless opts say otherwise.
func (c *Client) ListBrokers(ctx context.Context, opts ...ReadOption) (*keelpb.ListBrokersResponse, error) {
	o := readOpts(opts)
	var resp *keelpb.ListBrokersResponse
	err := c.read(ctx, o, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.ListBrokers(ctx, &keelpb.ListBrokersRequest{Stale: o.stale})
		return err
	})
	return resp, err
}

// BrokerClient talks to one broker's own gRPC service.
type BrokerClient struct {
	addr string
	cc   *grpc.ClientConn
	cl   keelpb.BrokerServiceClient
}

// DialBroker returns a client for the broker at addr (plaintext unless
// WithTLS). The connection is made on first use.
func DialBroker(addr string, opts ...Option) (*BrokerClient, error) {
	cc, err := grpc.NewClient(addr, clientDialOptions(buildOptions(opts), tlsauth.RoleBroker)...)
	if err != nil {
		return nil, fmt.Errorf("broker address %q: %w", addr, err)
	}
	return &BrokerClient{addr: addr, cc: cc, cl: keelpb.NewBrokerServiceClient(cc)}, nil
}

// Inspect asks the broker for its own view of itself.
func (b *BrokerClient) Inspect(ctx context.Context) (*keelpb.InspectResponse, error) {
	return b.cl.Inspect(ctx, &keelpb.InspectRequest{})
}

// ScrubLogs asks the broker to verify every sealed segment of its logs now
// (keel broker scrub), and returns each log as the scrub found it.
func (b *BrokerClient) ScrubLogs(ctx context.Context) (*keelpb.ScrubLogsResponse, error) {
	return b.cl.ScrubLogs(ctx, &keelpb.ScrubLogsRequest{})
}

// Close closes the connection.
func (b *BrokerClient) Close() error { return b.cc.Close() }

// AllocateProducerIds asks the active controller for a block of producer
// ids for broker id at epoch. A stale or unknown broker epoch fails with
// reason ReasonStaleBrokerEpoch or ReasonBrokerNotRegistered.
func (c *Client) AllocateProducerIds(ctx context.Context, req *keelpb.AllocateProducerIdsRequest) (*keelpb.AllocateProducerIdsResponse, error) {
	var resp *keelpb.AllocateProducerIdsResponse
	err := c.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.AllocateProducerIds(ctx, req)
		return err
	})
	return resp, err
}
