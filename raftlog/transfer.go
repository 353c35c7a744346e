package raftlog

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/consensus"
)

// transferPoll is how often TransferLeadership looks whether this node
// still leads.
const transferPoll = 5 * time.Millisecond

// TransferLeadership hands leadership from this node, the leader, to to
// (nil: the other voter with the highest match index this leader has seen,
// Progress), and returns the voter it chose (consensus.Log).
//
// It waits until the target holds this leader's last entry, then sends it
// raft's TimeoutNow, which has it start an election at once, and waits, up
// to two election timeouts in all, for this node to lose leadership, writes
// going on meanwhile. Raft's own LeadershipTransfer is
// not used: it refuses every write until the transfer ends and does not
// give up on a target that broke meanwhile (writes stalled for 80 s behind
// a transfer to a follower whose disk had failed). A target that has not
// taken over by then is given up on: ErrTransferFailed, and this node
// still leads. Which voter is fit to lead (ready, caught up) is the
// caller's to judge; this is only the mechanics.
func (n *Node) TransferLeadership(ctx context.Context, to *consensus.Server) (consensus.Server, error) {
	if n.Raft.State() != raft.Leader {
		return consensus.Server{}, fmt.Errorf("%w: %w: this node does not lead", consensus.ErrTransferFailed, consensus.ErrNotLeader)
	}
	target, err := n.transferTarget(to)
	if err != nil {
		return consensus.Server{}, err
	}
	wait := 2 * n.Raft.ReloadableConfig().ElectionTimeout
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(transferPoll)
	defer tick.Stop()
	// A target told to start its election while it lacks entries this
	// leader has loses it (the voters holding them refuse it their vote),
	// and the quorum then waits an election timeout for another: so, as
	// raft's own transfer does, the target is told only once it holds
	// this leader's last entry. The caller stops its writes meanwhile if
	// it can (the controller's event loop does), or the target chases a
	// moving end until the deadline.
	for {
		if n.Raft.State() != raft.Leader {
			return target, fmt.Errorf("%w: %w: leadership lost before node %d caught up", consensus.ErrTransferFailed, consensus.ErrNotLeader, target.ID)
		}
		last := n.Raft.LastIndex()
		match := n.Progress(target.ID).Match
		if match >= last {
			break
		}
		select {
		case <-deadline.C:
			return target, fmt.Errorf("%w: node %d did not catch up within %v (it holds index %d, this node's log ends at %d); given up, this node still leads", consensus.ErrTransferFailed, target.ID, wait, match, last)
		case <-ctx.Done():
			return target, fmt.Errorf("%w: %w", consensus.ErrTransferFailed, ctx.Err())
		case <-tick.C:
		}
	}
	sent := make(chan error, 1)
	// The transport's call has its own timeout; it is not waited for
	// beyond ours.
	go func() { sent <- n.timeoutNow(target.ID, target.Address) }()
	for {
		if n.Raft.State() != raft.Leader {
			return target, nil
		}
		select {
		case err := <-sent:
			if err != nil {
				return target, fmt.Errorf("%w: telling node %d to take over: %v", consensus.ErrTransferFailed, target.ID, err)
			}
			sent = nil
		case <-deadline.C:
			return target, fmt.Errorf("%w: node %d did not take over within %v; given up, this node still leads", consensus.ErrTransferFailed, target.ID, wait)
		case <-ctx.Done():
			return target, fmt.Errorf("%w: %w", consensus.ErrTransferFailed, ctx.Err())
		case <-tick.C:
		}
	}
}

// transferTarget is to, or when to is nil the other voter with the highest
// match index this leader has seen (the first in the configuration among
// equals).
func (n *Node) transferTarget(to *consensus.Server) (consensus.Server, error) {
	if to != nil {
		return *to, nil
	}
	conf, _, err := n.Configuration()
	if err != nil {
		return consensus.Server{}, fmt.Errorf("%w: %w", consensus.ErrTransferFailed, err)
	}
	var best consensus.Server
	var bestMatch uint64
	found := false
	for _, s := range conf.Servers {
		if s.Suffrage != consensus.Voter || s.ID == n.id {
			continue
		}
		if m := n.Progress(s.ID).Match; !found || m > bestMatch {
			best, bestMatch, found = s, m, true
		}
	}
	if !found {
		return consensus.Server{}, fmt.Errorf("%w: no other voter", consensus.ErrTransferFailed)
	}
	return best, nil
}
