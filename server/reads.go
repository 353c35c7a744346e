package server

import (
	"context"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// Reads, and what a node tells about its own freshness.
//
// A read goes to the active controller, as in Kafka, where admin reads are
// answered by the active controller's metadata: a controller cut off from
// the quorum answers Unavailable rather than a table that may be empty or
// old. Reading one node's own image is the caller's choice (stale, as
// Consul's ?stale), and the answer says how far behind that node may be
// (ReadSource).

// appliedIndex is how far this node has applied the log: its image's
// position, or further when the entries since were raft configuration
// changes, which change no image (readiness and quorum status alike count
// them, so that a membership change leaves applied = commit).
func (s *Node) appliedIndex() uint64 {
	return max(s.node.StateMachineIndex(), s.fsm.Image().Offset)
}

// readSource describes this node as the source of a read of img.
func (s *Node) readSource(img *fsm.Image) *keelpb.ReadSource {
	active, _ := s.ctrl.Active()
	leader, _ := s.ctrl.Leader()
	src := &keelpb.ReadSource{
		NodeId:        s.cfg.NodeID,
		Active:        active,
		AppliedIndex:  max(img.Offset, s.node.StateMachineIndex()),
		LeaderId:      leader,
		LastContactMs: -1,
	}
	switch last := s.node.Raft.LastContact(); {
	case s.node.Raft.State() == raft.Leader:
		src.LastContactMs = 0
	case !last.IsZero():
		src.LastContactMs = time.Since(last).Milliseconds()
	}
	if idx, ago := s.node.LeaderCommit(src.AppliedIndex); idx > 0 {
		src.BehindIndex, src.BehindMs = idx, ago.Milliseconds()
	}
	return src
}

// replication is the active controller's view of each voter: the last
// index it holds and how long ago it last answered. Nil when this node is
// not active.
func (s *Node) replication(voters []*keelpb.QuorumMember) []*keelpb.VoterReplication {
	if active, _ := s.ctrl.Active(); !active {
		return nil
	}
	now := time.Now()
	out := make([]*keelpb.VoterReplication, 0, len(voters))
	for _, v := range voters {
		r := &keelpb.VoterReplication{Id: v.Id, LastContactMs: -1}
		if v.Id == s.cfg.NodeID {
			r.MatchIndex, r.LastContactMs = s.node.Raft.LastIndex(), 0
		} else {
			p := s.node.Progress(v.Id)
			r.MatchIndex = p.Match
			if !p.Contact.IsZero() {
				r.LastContactMs = now.Sub(p.Contact).Milliseconds()
			}
		}
		out = append(out, r)
	}
	return out
}

// readImage is the image a read answers from: with stale, this node's own;
// otherwise only the active controller answers, from its committed image,
// or with linearizable its confirmed one (controller.ReadImage). A node
// that is not active refuses as it refuses a write: FailedPrecondition
// naming the leader, or Unavailable when it knows none.
func (s *controllerService) readImage(ctx context.Context, linearizable, stale bool) (*fsm.Image, *keelpb.ReadSource, error) {
	switch {
	case linearizable:
		ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
		defer cancel()
		img, err := s.ctrl.ReadImage(ctx)
		if err != nil {
			return nil, nil, toStatus(err)
		}
		return img, s.node.readSource(img), nil
	case !stale:
		if active, _ := s.ctrl.Active(); !active {
			return nil, nil, toStatus(s.ctrl.NotActiveError())
		}
	case s.ctrl.Diverged() != nil:
		// Its image is not the quorum's: no one reads it.
		d := s.ctrl.Diverged()
		return nil, nil, status.Errorf(codes.Unavailable, "controller %d does not answer stale reads: its metadata image diverged at index %d (%s); ask another controller",
			s.node.cfg.NodeID, d.Index, d.Reason)
	}
	img := s.ctrl.Image()
	return img, s.node.readSource(img), nil
}
