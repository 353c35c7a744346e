package rpc

import (
	"context"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/proto/keelpb"
)

// CreateTopic creates a topic through the active controller (see Write for
// how it is found). AlreadyExists for a taken name; InvalidArgument naming
// the bad field. With ValidateOnly set the answer is the same and nothing is
// written.
//
// Write retries an Unavailable answer, and some of those (a write whose
// outcome is unknown) may have committed: a retried create can then answer
// AlreadyExists for the topic this very call created.
func (c *Client) CreateTopic(ctx context.Context, req *keelpb.CreateTopicRequest) (*keelpb.CreateTopicResponse, error) {
	var resp *keelpb.CreateTopicResponse
	err := c.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.CreateTopic(ctx, req)
		return err
	})
	return resp, err
}

// CreatePartitions raises a topic's partition count to req.Count through the
// active controller. The same caveat on retries as CreateTopic applies.
func (c *Client) CreatePartitions(ctx context.Context, req *keelpb.CreatePartitionsRequest) (*keelpb.CreatePartitionsResponse, error) {
	var resp *keelpb.CreatePartitionsResponse
	err := c.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.CreatePartitions(ctx, req)
		return err
	})
	return resp, err
}

// DeleteTopic deletes a topic through the active controller. A retry after
// an outcome-unknown Unavailable may answer NotFound for a topic this very
// call deleted.
func (c *Client) DeleteTopic(ctx context.Context, name string) error {
	return c.DeleteTopicRequest(ctx, &keelpb.DeleteTopicRequest{Name: name})
}

// DeleteTopicRequest is DeleteTopic with the whole request, as a broker
// sends it with the principal of the client it forwards.
func (c *Client) DeleteTopicRequest(ctx context.Context, req *keelpb.DeleteTopicRequest) error {
	return c.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		_, err := cl.DeleteTopic(ctx, req)
		return err
	})
}

// ElectLeaders runs a preferred or unclean election through the active
// controller. Partitions where no election happened carry their reason in
// the result's Error; the call itself fails only when the request does.
func (c *Client) ElectLeaders(ctx context.Context, req *keelpb.ElectLeadersRequest) (*keelpb.ElectLeadersResponse, error) {
	var resp *keelpb.ElectLeadersResponse
	err := c.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.ElectLeaders(ctx, req)
		return err
	})
	return resp, err
}

// AlterClientQuotas sets and removes client quotas through the active
// controller: one error message per entry, "" for an entry applied.
func (c *Client) AlterClientQuotas(ctx context.Context, req *keelpb.AlterClientQuotasRequest) (*keelpb.AlterClientQuotasResponse, error) {
	var resp *keelpb.AlterClientQuotasResponse
	err := c.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.AlterClientQuotas(ctx, req)
		return err
	})
	return resp, err
}

// AlterPartitionReassignments starts a reassignment of one partition to
// req.Replicas, or cancels the ongoing one when req.Replicas is empty,
// through the active controller.
func (c *Client) AlterPartitionReassignments(ctx context.Context, req *keelpb.AlterPartitionReassignmentsRequest) (*keelpb.AlterPartitionReassignmentsResponse, error) {
	var resp *keelpb.AlterPartitionReassignmentsResponse
	err := c.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.AlterPartitionReassignments(ctx, req)
		return err
	})
	return resp, err
}

// IncrementalAlterConfigs sets and deletes configs of a topic or of the
// cluster defaults through the active controller, all or none, and returns
// the resource's effective configs afterwards. InvalidArgument naming the
// bad config; NotFound for an unknown topic. With ValidateOnly set the
// answer is the same and nothing is written.
func (c *Client) IncrementalAlterConfigs(ctx context.Context, req *keelpb.IncrementalAlterConfigsRequest) (*keelpb.IncrementalAlterConfigsResponse, error) {
	var resp *keelpb.IncrementalAlterConfigsResponse
	err := c.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.IncrementalAlterConfigs(ctx, req)
		return err
	})
	return resp, err
}

// DescribeFeatures reads the finalized metadata.version and every node's
// supported range from the active controller.
func (c *Client) DescribeFeatures(ctx context.Context) (*keelpb.DescribeFeaturesResponse, error) {
	var resp *keelpb.DescribeFeaturesResponse
	err := c.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.DescribeFeatures(ctx, &keelpb.DescribeFeaturesRequest{})
		return err
	})
	return resp, err
}

// UpdateFeatures raises metadata.version to level, or lowers it with
// downgrade, through the active controller. FailedPrecondition with the
// reason UNSUPPORTED_METADATA_VERSION or UNSAFE_DOWNGRADE, naming what
// stops it.
func (c *Client) UpdateFeatures(ctx context.Context, level uint32, downgrade bool) (*keelpb.UpdateFeaturesResponse, error) {
	var resp *keelpb.UpdateFeaturesResponse
	err := c.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.UpdateFeatures(ctx, &keelpb.UpdateFeaturesRequest{MetadataVersion: level, Downgrade: downgrade})
		return err
	})
	return resp, err
}

// DescribeConfigs reads a topic's or the cluster's effective configs, each
// with its source, from the active controller (see ListTopics for the
// options).
func (c *Client) DescribeConfigs(ctx context.Context, resource *keelpb.ConfigResource, opts ...ReadOption) (*keelpb.DescribeConfigsResponse, error) {
	o := readOpts(opts)
	var resp *keelpb.DescribeConfigsResponse
	err := c.read(ctx, o, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.DescribeConfigs(ctx, &keelpb.DescribeConfigsRequest{Resource: resource, Linearizable: o.linearizable, Stale: o.stale})
		return err
	})
	return resp, err
}

// ListTopics reads every topic's summary from the active controller; see
// Linearizable and Stale for the other choices. The response's Source says
// which controller answered, and how fresh its image was.
func (c *Client) ListTopics(ctx context.Context, opts ...ReadOption) (*keelpb.ListTopicsResponse, error) {
	o := readOpts(opts)
	var resp *keelpb.ListTopicsResponse
	err := c.read(ctx, o, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.ListTopics(ctx, &keelpb.ListTopicsRequest{Linearizable: o.linearizable, Stale: o.stale})
		return err
	})
	return resp, err
}

// DescribeTopic reads one topic, NotFound when there is none by that name;
// as ListTopics, from the active controller unless opts say otherwise.
func (c *Client) DescribeTopic(ctx context.Context, name string, opts ...ReadOption) (*keelpb.DescribeTopicResponse, error) {
	o := readOpts(opts)
	var resp *keelpb.DescribeTopicResponse
	err := c.read(ctx, o, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.DescribeTopic(ctx, &keelpb.DescribeTopicRequest{Name: name, Linearizable: o.linearizable, Stale: o.stale})
		return err
	})
	return resp, err
}

// ReadOption adjusts a read.
type ReadOption func(*readOptions)

type readOptions struct{ linearizable, stale bool }

func readOpts(opts []ReadOption) readOptions {
	var o readOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Without options a read is answered by the active controller from its
// committed image: it goes where writes go, following leader hints and
// retrying as Write does, and a controller that knows no active controller
// (cut off from the quorum) answers Unavailable rather than from an image
// that may be far behind.

// Linearizable makes a read reflect every write acknowledged to any client
// before it was sent: the active controller answers only after confirming
// with a quorum that it still leads. Without it, a deposed leader that has
// not noticed yet may answer for a moment.
func Linearizable() ReadOption {
	return func(o *readOptions) { o.linearizable = true }
}

// Stale lets any controller answer from its own committed image (see Read),
// which survives the loss of a quorum but may be behind, by as much as the
// answer's Source says: Consul's ?stale. Linearizable wins over it.
func Stale() ReadOption {
	return func(o *readOptions) { o.stale = true }
}

// read routes a read call: to the active controller unless stale, then as
// Read does.
func (c *Client) read(ctx context.Context, o readOptions, call func(context.Context, keelpb.ControllerServiceClient) error) error {
	switch {
	case o.linearizable:
		return c.toActive(ctx, attemptTimeout, "no active controller confirmed its leadership before the deadline, so none can answer a linearizable read (without a quorum no controller can know it has every acknowledged write)", call)
	case o.stale:
		return c.Read(ctx, call)
	}
	return c.toActive(ctx, attemptTimeout, "no active controller answered the read before the deadline", call)
}

// ListPartitionReassignments reads the ongoing reassignments, as ListTopics.
func (c *Client) ListPartitionReassignments(ctx context.Context, opts ...ReadOption) (*keelpb.ListPartitionReassignmentsResponse, error) {
	o := readOpts(opts)
	var resp *keelpb.ListPartitionReassignmentsResponse
	err := c.read(ctx, o, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.ListPartitionReassignments(ctx, &keelpb.ListPartitionReassignmentsRequest{Stale: o.stale, Linearizable: o.linearizable})
		return err
	})
	return resp, err
}

// Read runs call against any one controller, preferring the active one: its
// committed image is the freshest, so a read after a write acknowledged to
// any client sees that write. It is how a Stale read is routed. The active controller is the one that last
// accepted a write through this client or, when there is none yet, the one
// the controllers name when asked (DescribeQuorum). Should it fail to
// answer, every other controller is tried in turn: each answers from its own
// committed image, at most a moment behind.
//
// An answer that another controller would give the same way (NotFound,
// InvalidArgument, ...) is returned at once, as it is. When no controller
// answers, the error is Unavailable and names the last failure; when every
// controller refused the call in the same other way (Unimplemented, say),
// that refusal is returned.
func (c *Client) Read(ctx context.Context, call func(context.Context, keelpb.ControllerServiceClient) error) error {
	leader := c.Leader()
	if leader == "" {
		leader = c.findLeader(ctx)
	}
	addrs := make([]string, 0, len(c.addrs)+1)
	if leader != "" {
		addrs = append(addrs, leader)
	}
	for _, a := range c.addrs {
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	var last error
	for _, addr := range addrs {
		err := c.try(ctx, addr, call)
		if err == nil || !tryElsewhere(err) {
			return err
		}
		if addr == leader {
			c.forgetLeader(addr)
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	switch status.Code(last) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return status.Errorf(codes.Unavailable, "no controller answered at %v; last error: %s", c.addrs, status.Convert(last).Message())
	}
	return last
}

// tryElsewhere reports whether another controller might answer a read that
// failed with err: not when the answer is about the request itself.
func tryElsewhere(err error) bool {
	switch status.Code(err) {
	case codes.NotFound, codes.InvalidArgument, codes.AlreadyExists, codes.OutOfRange,
		codes.PermissionDenied, codes.Unauthenticated:
		return false
	}
	return true
}

// findLeader asks every controller, in parallel, which one is active, and
// returns its address, or "" when none can tell. A controller that says it
// is active is taken at once (and remembered, so that writes start there);
// otherwise the leader address that the first controller to answer names
// is used, once the others have had hintGrace to say they are active. A
// controller that does not answer (down, or frozen with its port open)
// costs at most hintGrace when another names the leader, and one attempt
// when none does.
func (c *Client) findLeader(ctx context.Context) string {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		addr string
		resp *keelpb.DescribeQuorumResponse
	}
	answers := make(chan answer, len(c.addrs))
	var wg sync.WaitGroup
	for _, addr := range c.addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var resp *keelpb.DescribeQuorumResponse
			_ = c.try(ctx, addr, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
				var err error
				resp, err = cl.DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{})
				return err
			})
			answers <- answer{addr, resp}
		}()
	}
	// Cancel the stragglers before waiting for them, so that an early
	// answer is not held up by a controller that hangs.
	defer wg.Wait()
	defer cancel()
	hint := ""
	var grace <-chan time.Time
	for range c.addrs {
		var a answer
		select {
		case a = <-answers:
		case <-grace:
			return hint
		}
		switch {
		case a.resp == nil:
		case a.resp.GetActive():
			c.mu.Lock()
			if c.leader == "" {
				c.leader = a.addr
			}
			c.mu.Unlock()
			return a.addr
		case hint == "" && a.resp.GetLeaderId() >= 0 && a.resp.GetLeaderAddress() != "":
			hint = a.resp.GetLeaderAddress()
			grace = time.After(hintGrace)
		}
	}
	return hint
}

// hintGrace is how long findLeader waits, once a follower has named the
// leader, for the leader itself to answer that it is active: about a round
// trip and a little, not a whole attempt.
const hintGrace = 100 * time.Millisecond
