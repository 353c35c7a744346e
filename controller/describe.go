package controller

import (
	"strings"

	"github.com/keel-dev/keel/proto/keelpb"
)

// Describe reports this node's own view of the quorum: its raft state and
// indexes, the leader it knows, the committed controller epoch, and the voters
// in its latest raft configuration. It never blocks on other nodes.
func (c *Controller) Describe(version string) *keelpb.DescribeQuorumResponse {
	img := c.fsm.Image()
	leaderID, leaderAddr := c.Leader()
	active, activeEpoch := c.Active()
	resp := &keelpb.DescribeQuorumResponse{
		ClusterId:               img.ClusterID,
		NodeId:                  c.cfg.NodeID,
		State:                   strings.ToLower(c.quorum.State().String()),
		Active:                  active,
		ActiveEpoch:             activeEpoch,
		LeaderId:                leaderID,
		LeaderAddress:           leaderAddr,
		ControllerEpoch:         img.ControllerEpoch,
		ControllerEpochLeaderId: img.ControllerLeaderID,
		RaftTerm:                c.quorum.CurrentTerm(),
		CommitIndex:             c.quorum.CommitIndex(),
		LastIndex:               c.quorum.LastIndex(),
		// The state machine's own position: raft's AppliedIndex counts
		// entries handed to the FSM, which may still be applying them (a
		// node catching up after a restart can be seconds behind).
		AppliedIndex: img.Offset,
		Version:      version,
	}
	resp.MinMetadataVersion, resp.MaxMetadataVersion = c.SupportedMetadataVersions()
	if d := c.fsm.Diverged(); d != nil {
		resp.DivergedIndex, resp.DivergedReason = d.Index, d.Reason
	}
	resp.ImageCheck = c.ImageCheck()
	if conf, _, err := c.quorum.Configuration(); err == nil {
		resp.Voters = quorumMembers(conf)
	}
	return resp
}
