package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/keel-dev/keel/consensus"
	"github.com/keel-dev/keel/proto/keelpb"
)

// Quorum membership: adding and removing voters and handing leadership on,
// as configuration changes of the log made by the active controller.
//
// Each change runs on the event loop, alone (a run event, as a snapshot
// restore does), for two reasons. The log takes one configuration change
// at a time, and refuses one whose prevIndex is no longer the latest
// configuration's, so its own serialisation keeps the configuration
// consistent. But the event loop's pipeline assumes it is the only writer
// of entries while it runs (it predicts the index of each entry it
// submits); a configuration entry appended among the entries in flight
// would shift them, and a leadership transfer ends the leadership the
// pipeline writes in. On the loop, a change starts only once the pipeline
// is empty, every earlier decision committed, and no decision is submitted
// until it is over.
//
// The decisions themselves (is the request sensible against the current
// configuration?) are pure functions of the configuration, tested without
// a log: decideAddVoter, decideRemoveVoter, decideTransfer.

// Errors of membership changes; rpc maps each to a status code.
var (
	// ErrVoterExists: the id is a voter at another address, or the address
	// is another member's (AlreadyExists).
	ErrVoterExists = errors.New("conflicts with a member of the quorum")
	// ErrUnknownVoter: the id is not in the quorum's configuration (NotFound).
	ErrUnknownVoter = errors.New("not a member of the quorum")
	// ErrLastVoter: the change would leave the quorum without a voter, or
	// there is no other voter to hand leadership to (FailedPrecondition).
	ErrLastVoter = errors.New("no other voter")
	// ErrNotVoter: the member is a nonvoter (FailedPrecondition).
	ErrNotVoter = errors.New("not a voter")
	// ErrConfigurationChanged: the configuration changed between the check
	// and the change (Aborted); asking again decides against the new one.
	ErrConfigurationChanged = errors.New("the quorum's configuration changed meanwhile")
	// ErrTransferFailed: raft could not hand leadership on in time (the
	// target did not catch up or answer); this node still leads (Unavailable).
	ErrTransferFailed = errors.New("leadership transfer failed")
	// ErrTransferRefused: no voter fit to lead was found: the target (or
	// every other voter) is not ready, behind, or did not answer
	// (FailedPrecondition). Nothing was done.
	ErrTransferRefused = errors.New("leadership transfer refused")
	// ErrRemoved: this node has been removed from the quorum (WaitRemoved).
	ErrRemoved = errors.New("this node was removed from the quorum")
)

// MembershipResult is the quorum's configuration after a change.
type MembershipResult struct {
	// Index is the raft index of the configuration: the change's entry, or,
	// when nothing had to change, the latest configuration's when known (0
	// when not: see configuration).
	Index uint64
	// Members are the quorum's members in configuration order.
	Members []*keelpb.QuorumMember
	// LeaderID is the active controller that answered.
	LeaderID int32
}

// NodeID is this node's id.
func (c *Controller) NodeID() int32 { return c.cfg.NodeID }

// decideAddVoter checks adding voter id at addr to conf. noop is true when id
// already is a voter at addr: nothing to change, so that a retried request
// succeeds. A nonvoter with that id is promoted (raft's AddVoter does so).
func decideAddVoter(conf consensus.Configuration, id int32, addr string) (noop bool, err error) {
	for _, s := range conf.Servers {
		switch {
		case s.ID == id && s.Address == addr:
			return s.Suffrage == consensus.Voter, nil
		case s.ID == id:
			return false, fmt.Errorf("%w: node %d is already a member at %s, not %s; remove it first to move it",
				ErrVoterExists, id, s.Address, addr)
		case s.Address == addr:
			// Two ids at one address would be one node counted twice
			// towards every majority.
			return false, fmt.Errorf("%w: address %s is node %d's", ErrVoterExists, addr, s.ID)
		}
	}
	return false, nil
}

// decideRemoveVoter checks removing id from conf on the leader self. self is
// true when the leader is asked to remove itself: it hands leadership on
// first (see RemoveVoter).
func decideRemoveVoter(conf consensus.Configuration, leader, id int32) (self bool, err error) {
	i := slices.IndexFunc(conf.Servers, func(s consensus.Server) bool { return s.ID == id })
	if i < 0 {
		return false, fmt.Errorf("%w: node %d (members: %s)", ErrUnknownVoter, id, memberList(conf))
	}
	if conf.Servers[i].Suffrage == consensus.Voter && conf.Voters() == 1 {
		return false, fmt.Errorf("%w: node %d is the quorum's last voter; it cannot be removed", ErrLastVoter, id)
	}
	return id == leader, nil
}

// decideTransfer checks handing leadership from the leader self to target
// (0: whichever voter is fittest, handOn). noop is true when target
// is self: it leads already.
func decideTransfer(conf consensus.Configuration, self, target int32) (to *consensus.Server, noop bool, err error) {
	if target == self {
		return nil, true, nil
	}
	if target == 0 {
		if conf.Voters() < 2 {
			return nil, false, fmt.Errorf("%w: node %d is the quorum's only voter; there is no one to hand leadership to", ErrLastVoter, self)
		}
		return nil, false, nil
	}
	i := slices.IndexFunc(conf.Servers, func(s consensus.Server) bool { return s.ID == target })
	if i < 0 {
		return nil, false, fmt.Errorf("%w: node %d (members: %s)", ErrUnknownVoter, target, memberList(conf))
	}
	if conf.Servers[i].Suffrage != consensus.Voter {
		return nil, false, fmt.Errorf("%w: node %d is a nonvoter and cannot lead", ErrNotVoter, target)
	}
	s := conf.Servers[i]
	return &s, false, nil
}

// memberList renders conf for an error message: "1@host:port, 2@host:port".
func memberList(conf consensus.Configuration) string {
	parts := make([]string, 0, len(conf.Servers))
	for _, s := range conf.Servers {
		p := fmt.Sprintf("%d@%s", s.ID, s.Address)
		if s.Suffrage != consensus.Voter {
			p += " (nonvoter)"
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// quorumMembers converts conf for the API.
func quorumMembers(conf consensus.Configuration) []*keelpb.QuorumMember {
	out := make([]*keelpb.QuorumMember, 0, len(conf.Servers))
	for _, s := range conf.Servers {
		suffrage := "voter"
		if s.Suffrage != consensus.Voter {
			suffrage = "nonvoter"
		}
		out = append(out, &keelpb.QuorumMember{Id: s.ID, Address: s.Address, Suffrage: suffrage})
	}
	return out
}

// configuration returns the latest configuration (committed or not) and
// the index to pass as prevIndex: 0 when the log does not know it, which
// checks nothing, leaving the log's one-change-at-a-time rule and the event
// loop to serialise changes.
func (c *Controller) configuration() (consensus.Configuration, uint64, error) {
	return c.quorum.Configuration()
}

// onLoop runs fn on the active controller's event loop, alone, once every
// decision queued before it has committed, and waits for it. It fails as a
// write does when this node is not active.
func (c *Controller) onLoop(ctx context.Context, fn func(l *leadership) error) error {
	l := c.active.Load()
	if l == nil {
		return c.notLeader()
	}
	done := make(chan error, 1)
	err := l.submit(ctx, event{
		run: func() {
			// A caller that has given up gets no change made behind its back.
			if err := ctx.Err(); err != nil {
				done <- err
				return
			}
			done <- fn(l)
		},
		abandon: func(err error) { done <- err },
	})
	if err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w (%v)", ErrOutcomeUnknown, ctx.Err())
	}
}

// configChangeError says what a failed configuration change means for
// the caller.
func configChangeError(err error) error {
	switch {
	case outcomeUnknown(err):
		return fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
	case errors.Is(err, consensus.ErrConfigurationChanged):
		return fmt.Errorf("%w: %v", ErrConfigurationChanged, err)
	}
	return err
}

// outcomeUnknown reports whether a write that failed with err may have
// committed, or may yet, as far as its caller can tell: a node no longer
// leading when the write was handed over answers the same, as the caller
// cannot tell that from losing leadership with the write in flight.
func outcomeUnknown(err error) bool {
	return consensus.OutcomeUnknown(err) || errors.Is(err, consensus.ErrNotLeader)
}

// result describes the latest configuration after a change at index.
func (c *Controller) result(index uint64) (*MembershipResult, error) {
	conf, latest, err := c.configuration()
	if err != nil {
		return nil, err
	}
	if index == 0 {
		index = latest
	}
	return &MembershipResult{Index: index, Members: quorumMembers(conf), LeaderID: c.cfg.NodeID}, nil
}

// AddVoter adds node id at addr to the quorum as a voter, through the active
// controller, and returns the configuration after it. The node should be
// running with --join: raft sends it the snapshot and the log. Adding a
// voter already in the quorum at addr changes nothing.
//
// Unless force, the node is asked first (margin.go): one that does not
// answer as node id of this cluster is refused with ErrVoterUnfit, saying
// what adding it would cost the quorum; one that answers but whose log is
// behind (a joiner) is added as a nonvoter, waited for until it is ready
// and caught up, then made a voter; ErrVoterCatchingUp when ctx ends before
// it has (asking again resumes the wait). With force, or without
// Config.AskPeer, it is added as a voter at once, as it is.
//
// It also fails with ErrVoterExists (the id elsewhere, or addr another
// member's), ErrConfigurationChanged, or as a write does. The change
// commits once a majority of the new configuration has it: adding a third
// voter to a quorum of three needs only the three, but adding a second
// voter to a quorum of one waits for the new node.
func (c *Controller) AddVoter(ctx context.Context, id int32, addr string, force bool) (*MembershipResult, error) {
	var (
		res     *MembershipResult
		member  bool // id is in the configuration at addr, as a nonvoter
		nvoters int
	)
	if err := c.onLoop(ctx, func(*leadership) error {
		conf, _, err := c.configuration()
		if err != nil {
			return err
		}
		noop, err := decideAddVoter(conf, id, addr)
		if err != nil || !noop {
			member, nvoters = conf.Has(id), conf.Voters()
			return err
		}
		res, err = c.result(0)
		return err
	}); err != nil || res != nil {
		return res, err
	}
	if !force && c.cfg.AskPeer != nil {
		_, caughtUp, err := c.askVoter(ctx, id, addr, nvoters)
		if err != nil {
			return nil, err
		}
		if !caughtUp && !member {
			if err := c.changeMembership(ctx, id, addr, false); err != nil {
				return nil, err
			}
			member = true
		}
		if member { // a nonvoter, which says whether it is ready
			if err := c.waitCaughtUp(ctx, id, addr); err != nil {
				return nil, err
			}
		}
	} else if !force {
		c.log.Warn("adding a voter unchecked: no way to ask it", "voter_id", id, "address", addr)
	} else {
		c.log.Warn("adding a voter without asking it first (forced)", "voter_id", id, "address", addr)
	}
	err := c.onLoop(ctx, func(*leadership) error {
		var err error
		res, err = c.addMember(id, addr, true)
		return err
	})
	return res, err
}

// changeMembership adds id at addr to the configuration, as a voter or a
// nonvoter, on the event loop.
func (c *Controller) changeMembership(ctx context.Context, id int32, addr string, voter bool) error {
	return c.onLoop(ctx, func(*leadership) error {
		_, err := c.addMember(id, addr, voter)
		return err
	})
}

// addMember adds id at addr to the latest configuration, as a voter (a
// nonvoter there is promoted) or a nonvoter, unless it is there already,
// and returns the configuration after it. It runs on the event loop.
func (c *Controller) addMember(id int32, addr string, voter bool) (*MembershipResult, error) {
	conf, prev, err := c.configuration()
	if err != nil {
		return nil, err
	}
	noop, err := decideAddVoter(conf, id, addr)
	if err != nil {
		return nil, err
	}
	if noop || !voter && conf.Has(id) {
		return c.result(0)
	}
	add, what := c.quorum.AddVoter, "voter added"
	if !voter {
		add, what = c.quorum.AddNonvoter, "nonvoter added: made a voter once it has caught up"
	}
	f := add(id, addr, prev, c.cfg.ApplyTimeout)
	if err := f.Error(); err != nil {
		return nil, configChangeError(err)
	}
	c.log.Info(what, "voter_id", id, "address", addr, "configuration_index", f.Index())
	return c.result(f.Index())
}

// RemoveVoter removes node id from the quorum through the active controller
// and returns the configuration after it. It fails with ErrUnknownVoter,
// ErrLastVoter, ErrConfigurationChanged, or as a write does.
//
// Asked to remove itself, the active controller does not: raft would have it
// step down once the change commits, and the others would wait an election
// timeout before electing a leader. It hands leadership to the most
// up-to-date other voter instead and fails with a *NotLeaderError marked
// HandedOff that names the new leader; a client that follows leader hints
// asks the new leader, which removes this node as a follower.
//
// A removed node stops receiving the log, perhaps before the entry that
// removes it, and the others refuse its calls for election; it notices it
// was removed (WaitRemoved) and its process stops.
func (c *Controller) RemoveVoter(ctx context.Context, id int32) (*MembershipResult, error) {
	var res *MembershipResult
	handedOff := false
	err := c.onLoop(ctx, func(*leadership) error {
		conf, prev, err := c.configuration()
		if err != nil {
			return err
		}
		self, err := decideRemoveVoter(conf, c.cfg.NodeID, id)
		if err != nil {
			return err
		}
		if self {
			if _, err := c.handOn(ctx, nil, true); err != nil {
				return fmt.Errorf("node %d was asked to remove itself and could not hand leadership on first: %w", id, err)
			}
			c.log.Info("asked to remove this node from the quorum: leadership handed on first; the new leader removes it", "voter_id", id)
			handedOff = true
			return nil
		}
		f := c.quorum.RemoveServer(id, prev, c.cfg.ApplyTimeout)
		if err := f.Error(); err != nil {
			return configChangeError(err)
		}
		c.log.Info("voter removed", "voter_id", id, "configuration_index", f.Index())
		res, err = c.result(f.Index())
		return err
	})
	if err != nil {
		return nil, err
	}
	if handedOff {
		leader, addr := c.waitNewLeader(ctx)
		return nil, &NotLeaderError{LeaderID: leader, LeaderAddress: addr, HandedOff: true}
	}
	return res, nil
}

// TransferLeadership hands leadership from this node, the active
// controller, to target (0: the most up-to-date other voter that is fit to
// lead) and returns the node it went to, or -1 if this node has not heard
// from the new leader yet. A target that already leads is answered with
// itself, with nothing done.
//
// Leadership goes only to a voter that answers, says it is ready, and whose
// log has caught up with this node's (Config.AskPeer); otherwise the
// transfer is refused, naming why, and nothing changes (handOn). The target
// is then told to start an election at once (consensus.Log's
// TransferLeadership: raft's TimeoutNow, not raft's own transfer, which
// refuses every write until it completes and does not give up on a target
// that broke meanwhile: writes stalled for 80 s behind a transfer to a
// follower whose disk had failed). A target that has not taken over within
// two election timeouts is given up on: this node still leads, and writes
// go on.
//
// It fails with ErrUnknownVoter, ErrNotVoter, ErrLastVoter,
// ErrTransferRefused, ErrTransferFailed, or as a write does.
func (c *Controller) TransferLeadership(ctx context.Context, target int32) (int32, error) {
	noop := false
	var to int32
	err := c.onLoop(ctx, func(*leadership) error {
		conf, _, err := c.configuration()
		if err != nil {
			return err
		}
		dest, nothing, err := decideTransfer(conf, c.cfg.NodeID, target)
		if err != nil || nothing {
			noop = nothing
			return err
		}
		start := time.Now()
		chosen, err := c.handOn(ctx, dest, false)
		if err != nil {
			return err
		}
		to = chosen.ID
		c.log.Info("leadership transferred on request", "target", chosen.ID, "took", time.Since(start).Round(time.Microsecond))
		return nil
	})
	switch {
	case err != nil:
		return 0, err
	case noop:
		return c.cfg.NodeID, nil
	}
	leader, _ := c.waitNewLeader(ctx)
	if leader < 0 {
		leader = to
	}
	return leader, nil
}

// otherVoters are conf's voters but self.
func otherVoters(conf consensus.Configuration, self int32) []consensus.Server {
	var out []consensus.Server
	for _, s := range conf.Servers {
		if s.Suffrage == consensus.Voter && s.ID != self {
			out = append(out, s)
		}
	}
	return out
}

// PeerStatus is what a voter says of itself when asked (AskPeer).
type PeerStatus struct {
	LastIndex uint64 // the last index in its raft log
	Ready     bool   // its readiness (/readyz)
	NotReady  string // why it is not ready
	ClusterID string // the cluster its data dir belongs to ("" before it has joined one)
	// The metadata.version levels its binary supports; 0 and 0 from a
	// binary from before they were reported.
	MinMetadataVersion, MaxMetadataVersion uint32
	// Leads: it is the leader. Members: the ids in its latest
	// configuration, voters and nonvoters (none from a node that has
	// none yet). A node that never received its own removal learns of it
	// from them (askRemoved).
	Leads   bool
	Members []int32
}

// fitToLead asks every candidate, in parallel, how it is, until one is
// ready and its log has reached this node's last index, and returns the one
// of them with the longest log; it waits up to an election timeout for
// candidates to catch up (entries in flight). Without one, the error names
// each candidate and why it is unfit.
func (c *Controller) fitToLead(ctx context.Context, candidates []consensus.Server) (consensus.Server, error) {
	wait := c.quorum.Timeouts().Election
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		last := c.quorum.LastIndex()
		why := make([]string, len(candidates))
		status := make([]PeerStatus, len(candidates))
		var wg sync.WaitGroup
		for i, s := range candidates {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := s.ID
				st, err := c.cfg.AskPeer(ctx, id, s.Address)
				switch {
				case err != nil:
					why[i] = fmt.Sprintf("node %d did not answer: %v", id, err)
				case !st.Ready:
					why[i] = fmt.Sprintf("node %d is not ready: %s", id, st.NotReady)
				case st.LastIndex < last:
					why[i] = fmt.Sprintf("node %d is behind: its log ends at index %d, this node's at %d", id, st.LastIndex, last)
				}
				status[i] = st
			}()
		}
		wg.Wait()
		best := -1
		for i := range candidates {
			if why[i] == "" && (best < 0 || status[i].LastIndex > status[best].LastIndex) {
				best = i
			}
		}
		if best >= 0 {
			return candidates[best], nil
		}
		select {
		case <-ctx.Done():
			return consensus.Server{}, fmt.Errorf("%w: %s", ErrTransferRefused, strings.Join(why, "; "))
		case <-time.After(wait / 10):
		}
	}
}

// handOn hands leadership from this node, the leader, to a voter fit to
// lead, and returns the voter it went to: the one place that chooses where
// leadership goes (a transfer on request, a SIGTERM hand-off, the removal of
// the active controller itself, a takeover that keeps failing, a diverged
// image). The voter is to, or when to is nil the other voter fitToLead finds
// ready and furthest along, asked over Config.AskPeer; the log then tells it
// to take over (consensus.Log.TransferLeadership), writes going on, and
// gives it up if it has not within two election timeouts. Without AskPeer
// no voter can be asked: to, or the log's own choice (the voter it knows to
// hold the most), goes unchecked. With anyIfUnfit a quorum with no voter fit
// to lead gets the log's own choice too, as raft's own transfer chose
// before: for a node that is going away, or cannot act as the active
// controller, any voter does better than itself.
//
// It fails with ErrTransferRefused when no voter is fit (nothing was done),
// or ErrTransferFailed when leadership did not move; this node then still
// leads.
func (c *Controller) handOn(ctx context.Context, to *consensus.Server, anyIfUnfit bool) (consensus.Server, error) {
	if c.cfg.AskPeer != nil {
		candidates := []consensus.Server{}
		if to != nil {
			candidates = append(candidates, *to)
		} else {
			conf, _, err := c.configuration()
			if err != nil {
				return consensus.Server{}, err
			}
			candidates = otherVoters(conf, c.cfg.NodeID)
		}
		chosen, err := c.fitToLead(ctx, candidates)
		switch {
		case err == nil:
			to = &chosen
		case !anyIfUnfit || ctx.Err() != nil:
			return consensus.Server{}, err
		default:
			c.log.Warn("no voter is fit to lead; handing leadership to the one whose log is longest, unchecked", "err", err)
		}
	}
	chosen, err := c.quorum.TransferLeadership(ctx, to)
	if err != nil {
		return chosen, fmt.Errorf("%w: %v", ErrTransferFailed, err)
	}
	return chosen, nil
}

// waitNewLeader waits, briefly, until this node (which just handed
// leadership on) hears from the new leader, so that its answer can name
// it. It returns -1 and "" if it has not by then.
func (c *Controller) waitNewLeader(ctx context.Context) (int32, string) {
	wait := 2 * c.quorum.Timeouts().Election
	deadline := time.Now().Add(wait)
	for {
		if id, addr := c.Leader(); id >= 0 && id != c.cfg.NodeID {
			return id, addr
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return -1, ""
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// removedAfterHeartbeats is how many heartbeat timeouts a node outside the
// configuration waits without hearing from a leader before it takes itself
// as removed. A member hears from the leader every tenth of a heartbeat
// timeout.
const removedAfterHeartbeats = 10

// WaitRemoved blocks until this node finds it has been removed from the
// quorum, and returns an error wrapping ErrRemoved that says so; or until ctx
// ends, returning nil.
//
// Removed means: no leader has been in touch for removedAfterHeartbeats
// heartbeat timeouts, and this node's latest configuration, not empty (a
// node started with --join has none until it is added), either does not
// list it, or does but the other members say the quorum removed it all
// the same (askRemoved). The leader stops replicating to a node once its
// removal is in the log, so a removed node may learn of its removal but
// not of its commit, or not at all; waiting for silence keeps a node that
// saw an uncommitted removal (the leader lost leadership before it
// committed, and the next leader does not have it) from stopping while a
// leader still replicates to it.
func (c *Controller) WaitRemoved(ctx context.Context) error {
	hb := c.quorum.Timeouts().Heartbeat
	window := removedAfterHeartbeats * hb
	tick := time.NewTicker(hb)
	defer tick.Stop()
	start := time.Now()
	var asked time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		conf, _, err := c.quorum.Configuration()
		if err != nil || c.quorum.State() == consensus.Leader || len(conf.Servers) == 0 {
			continue
		}
		last := c.quorum.LastContact()
		if last.Before(start) {
			last = start
		}
		silent := time.Since(last)
		switch {
		case silent < window:
		case outside(conf, c.cfg.NodeID):
			return fmt.Errorf("%w: node %d is not in the quorum's configuration (%s) and no leader has been in touch for %v",
				ErrRemoved, c.cfg.NodeID, memberList(conf), silent.Round(time.Millisecond))
		case c.cfg.AskPeer != nil && time.Since(asked) >= window:
			// Once a window: a partitioned member asks on while it waits.
			asked = time.Now()
			if err := c.askRemoved(ctx, conf, window, silent); err != nil {
				return err
			}
		}
	}
}

// outside reports whether conf is a configuration (not the empty one of a
// node waiting to join) that does not hold id.
func outside(conf consensus.Configuration, id int32) bool {
	return len(conf.Servers) > 0 && !conf.Has(id)
}
