package rpc

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/proto/keelpb"
)

// Quorum membership, the client side: Write finds the active controller,
// which makes the change.

// AddVoter adds node id at addr to the quorum as a voter, through the active
// controller (see Write). A retry of a change that did commit finds the voter
// there and succeeds. Unless force, the controller asks the node first and
// refuses one that does not answer (FailedPrecondition), and makes one that
// is behind a voter only once it has caught up (Unavailable until then,
// which Write retries until ctx ends).
func (c *Client) AddVoter(ctx context.Context, id int32, addr string, force bool) (*keelpb.AddVoterResponse, error) {
	var resp *keelpb.AddVoterResponse
	err := c.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.AddVoter(ctx, &keelpb.AddVoterRequest{Id: id, Address: addr, Force: force})
		return err
	})
	return resp, err
}

// RemovedVoter is the outcome of RemoveVoter.
type RemovedVoter struct {
	*keelpb.RemoveVoterResponse
	// HandedOffBy is the node that was the active controller and was asked
	// to remove itself: it handed leadership on first, and the new leader
	// made the change. 0 when the leader removed another node.
	HandedOffBy int32
}

// RemoveVoter removes node id from the quorum through the active controller.
// When id is the active controller, it hands leadership on first and the
// new leader removes it (this call follows it there). A retry after an
// outcome-unknown Unavailable may answer NotFound for a node this very call
// removed.
func (c *Client) RemoveVoter(ctx context.Context, id int32) (*RemovedVoter, error) {
	out := &RemovedVoter{}
	err := c.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		out.RemoveVoterResponse, err = cl.RemoveVoter(ctx, &keelpb.RemoveVoterRequest{Id: id})
		if ReasonOf(err) == ReasonLeadershipTransferred {
			out.HandedOffBy = id
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// TransferLeadership hands leadership from the active controller to target
// (0: the most up-to-date other voter).
func (c *Client) TransferLeadership(ctx context.Context, target int32) (*keelpb.TransferLeadershipResponse, error) {
	req := &keelpb.TransferLeadershipRequest{}
	if target != 0 {
		req.TargetId = &target
	}
	var resp *keelpb.TransferLeadershipResponse
	err := c.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.TransferLeadership(ctx, req)
		return err
	})
	if err == nil {
		// The next write should not start at the node that just stepped down.
		c.mu.Lock()
		c.leader = ""
		c.mu.Unlock()
	}
	return resp, err
}

// CheckJoiner asks the controller at addr (raft and gRPC share its port)
// who it is before it is added as voter id: it must answer, as node id, and
// hold no other cluster's metadata. A typo in the id or address, or a node
// of another quorum, is refused here, before raft would replicate to it.
func (c *Client) CheckJoiner(ctx context.Context, id int32, addr string) error {
	var resp *keelpb.DescribeQuorumResponse
	err := c.try(ctx, addr, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		var err error
		resp, err = cl.DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{})
		return err
	})
	if err != nil {
		return status.Errorf(codes.Unavailable, "%s does not answer (start the node there with --join first): %s", addr, status.Convert(err).Message())
	}
	if resp.GetNodeId() != id {
		return status.Errorf(codes.FailedPrecondition, "%s is node %d, not node %d", addr, resp.GetNodeId(), id)
	}
	if joiner := resp.GetClusterId(); joiner != "" {
		view, err := c.DescribeQuorum(ctx)
		if err != nil {
			return err
		}
		if cluster := view.Leader.GetClusterId(); cluster != "" && cluster != joiner {
			return status.Errorf(codes.FailedPrecondition, "node %d at %s belongs to cluster %s, not %s; start it with an empty data dir and --join", id, addr, joiner, cluster)
		}
	}
	return nil
}

// WaitActive polls the controllers until one says it is the active
// controller and accept takes its description, and returns it. When ctx
// ends first, the error is Unavailable and says what was last seen.
func (c *Client) WaitActive(ctx context.Context, accept func(*keelpb.DescribeQuorumResponse) bool) (*keelpb.DescribeQuorumResponse, error) {
	last := "no controller answered"
	for {
		if view, err := c.DescribeQuorum(ctx); err == nil {
			for _, n := range view.Nodes {
				if n.GetActive() && accept(n) {
					return n, nil
				}
			}
			last = fmt.Sprintf("active controller %d", view.Leader.GetLeaderId())
			if !view.Leader.GetActive() {
				last = "no active controller"
			}
		}
		select {
		case <-ctx.Done():
			return nil, status.Errorf(codes.Unavailable, "waiting for the active controller: %s", last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
