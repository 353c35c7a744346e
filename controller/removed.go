package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/keel-dev/keel/consensus"
)

// A removed node that never heard of its removal. Raft's leader stops
// replicating to a server as soon as a configuration without it is the
// latest, so a node removed while it was behind, partitioned, or just
// handing leadership on (RemoveVoter on the active controller itself) may
// never receive the entry that removes it: its own configuration lists it
// for good, and WaitRemoved's first rule (the node's configuration no
// longer lists it) never fires. Such a node hears from no leader, but
// neither does a member cut off by a partition or paused, which must go on.
// So a node that still lists itself and has heard from no leader for
// removedAfterHeartbeats heartbeat timeouts asks the other members of its
// configuration (Config.AskPeer) what theirs is, and takes itself as
// removed only on their word (removedBy). A node that nobody answers, a
// partitioned one, keeps waiting.

// peersAnswer is one member's answer to the question.
type peersAnswer struct {
	id     int32
	status PeerStatus
}

// askRemoved asks the other members of conf, this node's configuration,
// in parallel, each for at most wait, and returns an error wrapping
// ErrRemoved, naming who said so, when their answers show the quorum
// removed this node (removedBy); nil when they do not, or nobody answers.
func (c *Controller) askRemoved(ctx context.Context, conf consensus.Configuration, wait, silent time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var (
		mu      sync.Mutex
		answers []peersAnswer
		wg      sync.WaitGroup
	)
	for _, s := range conf.Servers {
		if s.ID == c.cfg.NodeID {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := c.cfg.AskPeer(ctx, s.ID, s.Address)
			if err != nil {
				return
			}
			mu.Lock()
			answers = append(answers, peersAnswer{id: s.ID, status: st})
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.SortFunc(answers, func(a, b peersAnswer) int { return cmp.Compare(a.id, b.id) })
	who, removed := removedBy(c.cfg.NodeID, conf, c.fsm.Image().ClusterID, answers)
	if !removed {
		c.log.Debug("no leader in touch, but the members that answered do not say this node was removed; waiting on",
			"silent", silent.Round(time.Millisecond), "answered", len(answers))
		return nil
	}
	return fmt.Errorf("%w: %s, though this node's own configuration (%s) still lists node %d: it never received its removal, and no leader has been in touch for %v",
		ErrRemoved, who, memberList(conf), c.cfg.NodeID, silent.Round(time.Millisecond))
}

// removedBy decides from answers, those of the other members of conf (this
// node's configuration, which lists self) that answered, whether the
// quorum removed self all the same, and if so says who says so. An
// answer from another cluster, or from a node with no configuration yet (a
// joiner), says nothing. A member that leads knows the latest
// configuration: its word decides, and if more than one claims to lead
// (one deposed and not yet aware), self is removed only if none lists it.
// Without a leader's word, self is removed when a majority of conf's
// voters hold a configuration without it: raft elects none of them that
// would still list it. Anything less, nobody answering included, is not
// removal: a member behind a partition must not stop.
func removedBy(self int32, conf consensus.Configuration, clusterID string, answers []peersAnswer) (string, bool) {
	var leaders, without []int32
	leaderLists := false
	for _, a := range answers {
		st := a.status
		if len(st.Members) == 0 || (st.ClusterID != "" && clusterID != "" && st.ClusterID != clusterID) {
			continue
		}
		lists := slices.Contains(st.Members, self)
		if st.Leads {
			leaders = append(leaders, a.id)
			leaderLists = leaderLists || lists
		}
		if !lists && isVoterIn(conf, a.id) {
			without = append(without, a.id)
		}
	}
	switch {
	case len(leaders) > 0 && !leaderLists:
		return fmt.Sprintf("node %s, the leader, holds a configuration without node %d", joinIDs(leaders), self), true
	case len(leaders) == 0 && len(without) >= conf.Voters()/2+1:
		return fmt.Sprintf("nodes %s, a majority of the voters, hold a configuration without node %d", joinIDs(without), self), true
	}
	return "", false
}

// isVoterIn reports whether id is a voter of conf.
func isVoterIn(conf consensus.Configuration, id int32) bool {
	for _, s := range conf.Servers {
		if s.ID == id {
			return s.Suffrage == consensus.Voter
		}
	}
	return false
}
