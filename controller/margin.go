package controller

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Adding a voter keeps the quorum's margin: a voter counts towards every
// majority from the moment it is added, so one that is down, or far
// behind, costs the quorum a failure it could otherwise survive (a fourth
// voter that is down leaves three voters that must all be up), and a dead
// address in the configuration also stops the crash election from telling
// a dead leader (raftlog ranks the voters that accept a dial). So AddVoter
// asks the node first, as a leadership transfer asks its target
// (Config.AskPeer): it must answer as that node, and its log must be within
// voterLagBound entries of the commit index. A node that answers but is
// behind (a joiner started with an empty data dir) is added as a nonvoter
// first, which raft replicates to without counting it, and made a voter
// once it has caught up and says it is ready. A node that does not answer
// is refused, with what it would cost, unless forced.

// voterLagBound is how far behind the commit index a node's log may end
// and still be added as a voter at once: about what the event loop may
// have in flight (maxInflightEntries), which a live follower catches up on
// within a round trip.
const voterLagBound = maxInflightEntries

// Errors of AddVoter's check; rpc maps each to a status code.
var (
	// ErrVoterUnfit: the node does not answer as the node to add, or
	// belongs to another cluster (FailedPrecondition). Nothing was done;
	// --force adds it anyway.
	ErrVoterUnfit = errors.New("not fit to be a voter")
	// ErrVoterCatchingUp: the node was added as a nonvoter and has not
	// caught up yet (Unavailable): asking again makes it a voter once it has.
	ErrVoterCatchingUp = errors.New("added as a nonvoter, still catching up")
)

// caughtUpTo reports whether a log that ends at last is within
// voterLagBound of commit.
func caughtUpTo(last, commit uint64) bool { return last+voterLagBound >= commit }

// marginCost says, in one line, what adding one voter that is down to a
// quorum of voters costs: how many failures of the others it survives
// while the new one is down, against how many it survives now.
func marginCost(voters int) string {
	n := voters + 1
	need := n/2 + 1
	if voters < need {
		return fmt.Sprintf("a %d-voter quorum needs %d, so while it is down the quorum could not commit at all", n, need)
	}
	return fmt.Sprintf("a %d-voter quorum needs %d, so while it is down the other %d would tolerate %s, where the %d voters now tolerate %s",
		n, need, voters, failures(voters-need), voters, failures(voters-(voters/2+1)))
}

func failures(n int) string {
	switch n {
	case 0:
		return "no failure"
	case 1:
		return "1 failure"
	}
	return fmt.Sprintf("%d failures", n)
}

// askVoter asks node id at addr how it is, for AddVoter: an error that
// refuses it (ErrVoterUnfit, naming the cost) when it does not answer as
// that node of this cluster; else whether its log has caught up.
func (c *Controller) askVoter(ctx context.Context, id int32, addr string, voters int) (PeerStatus, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, askVoterTimeout)
	defer cancel()
	st, err := c.cfg.AskPeer(ctx, id, addr)
	cluster := c.fsm.Image().ClusterID
	switch {
	case err != nil:
		return st, false, fmt.Errorf("%w: node %d at %s does not answer as node %d (%v): %s; --force adds it anyway", ErrVoterUnfit, id, addr, id, err, marginCost(voters))
	case st.ClusterID != "" && st.ClusterID != cluster:
		return st, false, fmt.Errorf("%w: node %d at %s belongs to cluster %s, not %s; start it with an empty data dir and --join", ErrVoterUnfit, id, addr, st.ClusterID, cluster)
	}
	return st, caughtUpTo(st.LastIndex, c.quorum.CommitIndex()), nil
}

// waitCaughtUp waits until node id at addr, a nonvoter, answers that it is
// ready and its log has caught up with the commit index, asking it every
// tenth of an election timeout. It fails with ErrVoterCatchingUp, saying
// where it was, when ctx ends first, and with the not-active error when
// this node stops being active.
func (c *Controller) waitCaughtUp(ctx context.Context, id int32, addr string) error {
	every := max(c.quorum.Timeouts().Election/10, 10*time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	why := "not asked yet"
	for {
		if c.active.Load() == nil {
			return c.notLeader()
		}
		actx, cancel := context.WithTimeout(ctx, askVoterTimeout)
		st, err := c.cfg.AskPeer(actx, id, addr)
		cancel()
		commit := c.quorum.CommitIndex()
		switch {
		case err != nil:
			why = fmt.Sprintf("it does not answer: %v", err)
		case !st.Ready:
			why = fmt.Sprintf("it is not ready: %s", st.NotReady)
		case !caughtUpTo(st.LastIndex, commit):
			why = fmt.Sprintf("its log ends at index %d, the commit index is %d", st.LastIndex, commit)
		default:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: node %d at %s is a nonvoter (%s); ask again to make it a voter once it has caught up", ErrVoterCatchingUp, id, addr, why)
		case <-tick.C:
		}
	}
}
