package server

import (
	"context"
	"fmt"

	"github.com/keel-dev/keel/internal/hostport"
	"github.com/keel-dev/keel/raftlog"
)

// selfVoter is this node's id and the address the quorum knows it by: its
// entry in Voters or, for a node joining a running quorum (Join) that the
// list does not name, Listen.
func selfVoter(cfg NodeConfig) (raftlog.Voter, error) {
	self, err := raftlog.FindVoter(cfg.Voters, cfg.NodeID)
	if err == nil || !cfg.Join {
		return self, err
	}
	if cfg.Listen == "" {
		return raftlog.Voter{}, fmt.Errorf("--join needs --listen, the address the quorum will reach node %d at (or a --voters list that names it)", cfg.NodeID)
	}
	if err := hostport.Check(cfg.Listen); err != nil {
		return raftlog.Voter{}, fmt.Errorf("--listen: %v", err)
	}
	return raftlog.Voter{ID: cfg.NodeID, Address: cfg.Listen}, nil
}

// watchRemoved stops the node (Fatal, with an error wrapping
// controller.ErrRemoved) once it finds it has been removed from the quorum:
// a removed node gets no more of the log, so it would only answer reads from
// an image that no longer moves.
func (s *Node) watchRemoved() {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stopWatch:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := s.ctrl.WaitRemoved(ctx); err != nil {
		s.fail(err)
	}
}
