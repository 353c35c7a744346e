package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/raftlog"
)

// Quorum membership: adding and removing voters and handing leadership on,
// as raft configuration changes made by the active controller.
//
// Each change runs on the event loop, alone (a run event, as a snapshot
// restore does), for two reasons. Raft itself takes one configuration change
// at a time, and refuses one whose prevIndex is no longer the latest
// configuration's, so raft's own serialisation keeps the configuration
// consistent. But the event loop's pipeline assumes it is the only writer
// of raft entries while it runs (it predicts the index of each entry it
// submits); a configuration entry appended among the entries in flight
// would shift them, and a leadership transfer makes raft refuse every Apply
// until it ends. On the loop, a change starts only once the pipeline is
// empty, every earlier decision committed, and no decision is submitted
// until it is over.
//
// The decisions themselves (is the request sensible against the current
// configuration?) are pure functions of the configuration, tested without
// raft: decideAddVoter, decideRemoveVoter, decideTransfer.

// The applied log learns each committed configuration and its index.
var _ raftlog.ConfigurationObserver = (*AppliedLog)(nil)

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
func decideAddVoter(conf raft.Configuration, id int32, addr string) (noop bool, err error) {
	sid := raftlog.ServerID(id)
	for _, s := range conf.Servers {
		switch {
		case s.ID == sid && s.Address == raft.ServerAddress(addr):
			return s.Suffrage == raft.Voter, nil
		case s.ID == sid:
			return false, fmt.Errorf("%w: node %d is already a member at %s, not %s; remove it first to move it",
				ErrVoterExists, id, s.Address, addr)
		case s.Address == raft.ServerAddress(addr):
			// Two ids at one address would be one node counted twice
			// towards every majority.
			return false, fmt.Errorf("%w: address %s is node %s's", ErrVoterExists, addr, s.ID)
		}
	}
	return false, nil
}

// decideRemoveVoter checks removing id from conf on the leader self. self is
// true when the leader is asked to remove itself: it hands leadership on
// first (see RemoveVoter).
func decideRemoveVoter(conf raft.Configuration, leader, id int32) (self bool, err error) {
	i := slices.IndexFunc(conf.Servers, func(s raft.Server) bool { return s.ID == raftlog.ServerID(id) })
	if i < 0 {
		return false, fmt.Errorf("%w: node %d (members: %s)", ErrUnknownVoter, id, memberList(conf))
	}
	if conf.Servers[i].Suffrage == raft.Voter && voters(conf) == 1 {
		return false, fmt.Errorf("%w: node %d is the quorum's last voter; it cannot be removed", ErrLastVoter, id)
	}
	return id == leader, nil
}

// decideTransfer checks handing leadership from the leader self to target
// (0: whichever voter raft finds most up to date). noop is true when target
// is self: it leads already.
func decideTransfer(conf raft.Configuration, self, target int32) (to *raft.Server, noop bool, err error) {
	if target == self {
		return nil, true, nil
	}
	if target == 0 {
		if voters(conf) < 2 {
			return nil, false, fmt.Errorf("%w: node %d is the quorum's only voter; there is no one to hand leadership to", ErrLastVoter, self)
		}
		return nil, false, nil
	}
	i := slices.IndexFunc(conf.Servers, func(s raft.Server) bool { return s.ID == raftlog.ServerID(target) })
	if i < 0 {
		return nil, false, fmt.Errorf("%w: node %d (members: %s)", ErrUnknownVoter, target, memberList(conf))
	}
	if conf.Servers[i].Suffrage != raft.Voter {
		return nil, false, fmt.Errorf("%w: node %d is a nonvoter and cannot lead", ErrNotVoter, target)
	}
	s := conf.Servers[i]
	return &s, false, nil
}

func voters(conf raft.Configuration) int {
	n := 0
	for _, s := range conf.Servers {
		if s.Suffrage == raft.Voter {
			n++
		}
	}
	return n
}

// memberList renders conf for an error message: "1@host:port, 2@host:port".
func memberList(conf raft.Configuration) string {
	parts := make([]string, 0, len(conf.Servers))
	for _, s := range conf.Servers {
		p := fmt.Sprintf("%s@%s", s.ID, s.Address)
		if s.Suffrage != raft.Voter {
			p += " (nonvoter)"
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// quorumMembers converts conf for the API. Servers whose id is not a Keel
// node id are left out.
func quorumMembers(conf raft.Configuration) []*keelpb.QuorumMember {
	out := make([]*keelpb.QuorumMember, 0, len(conf.Servers))
	for _, s := range conf.Servers {
		id, err := raftlog.ParseServerID(s.ID)
		if err != nil {
			continue
		}
		suffrage := "voter"
		if s.Suffrage != raft.Voter {
			suffrage = "nonvoter"
		}
		out = append(out, &keelpb.QuorumMember{Id: id, Address: string(s.Address), Suffrage: suffrage})
	}
	return out
}

// configuration returns the latest raft configuration (committed or not) and
// the index to pass raft as prevIndex. raft v1.7's GetConfiguration reports
// index 0 (it copies the configuration without its index), so the index is
// the one of the last configuration this node's state machine saw commit,
// used only while that still is the latest; otherwise 0, which raft takes as
// "no check", leaving raft's one-change-at-a-time rule and the event loop to
// serialise changes.
func (c *Controller) configuration() (raft.Configuration, uint64, error) {
	f := c.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return raft.Configuration{}, 0, err
	}
	conf := f.Configuration()
	index := f.Index()
	if index == 0 {
		if i, committed := c.applied.committedConfiguration(); i > 0 && slices.Equal(committed.Servers, conf.Servers) {
			index = i
		}
	}
	return conf, index, nil
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

// configChangeError says what a failed raft configuration change means for
// the caller.
func configChangeError(err error) error {
	switch {
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrNotLeader),
		errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrEnqueueTimeout),
		errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
	case strings.Contains(err.Error(), "configuration changed since"):
		// raft's own words (nextConfiguration) for a stale prevIndex.
		return fmt.Errorf("%w: %v", ErrConfigurationChanged, err)
	}
	return err
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
			member, nvoters = slices.ContainsFunc(conf.Servers, func(s raft.Server) bool { return s.ID == raftlog.ServerID(id) }), voters(conf)
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
	if noop || !voter && slices.ContainsFunc(conf.Servers, func(s raft.Server) bool { return s.ID == raftlog.ServerID(id) }) {
		return c.result(0)
	}
	add, what := c.raft.AddVoter, "voter added"
	if !voter {
		add, what = c.raft.AddNonvoter, "nonvoter added: made a voter once it has caught up"
	}
	f := add(raftlog.ServerID(id), raft.ServerAddress(addr), prev, c.cfg.ApplyTimeout)
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
// A removed node stops receiving the log and never calls an election; it
// notices it was removed (WaitRemoved) and its process stops.
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
			if err := c.raft.LeadershipTransfer().Error(); err != nil {
				return fmt.Errorf("%w: node %d was asked to remove itself and could not hand leadership on first: %v", ErrTransferFailed, id, err)
			}
			c.log.Info("asked to remove this node from the quorum: leadership handed on first; the new leader removes it", "voter_id", id)
			handedOff = true
			return nil
		}
		f := c.raft.RemoveServer(raftlog.ServerID(id), prev, c.cfg.ApplyTimeout)
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
// transfer is refused, naming why, and nothing changes. The target is then
// told to start an election at once (raft's TimeoutNow, sent here rather
// than through raft's own transfer, which refuses every write until it
// completes and does not give up on a target that broke meanwhile: writes
// stalled for 80 s behind a transfer to a follower whose disk had failed).
// A target that has not taken over within two election timeouts is given
// up on: this node still leads, and writes go on.
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
		candidates := otherVoters(conf, c.cfg.NodeID)
		if dest != nil {
			candidates = []raft.Server{*dest}
		}
		start := time.Now()
		if c.cfg.AskPeer == nil {
			// Unchecked (tests without a network): raft's own transfer.
			var f raft.Future
			if dest != nil {
				f = c.raft.LeadershipTransferToServer(dest.ID, dest.Address)
			} else {
				f = c.raft.LeadershipTransfer()
			}
			if err := f.Error(); err != nil {
				return fmt.Errorf("%w: %v", ErrTransferFailed, err)
			}
			c.log.Info("leadership transferred on request", "target", target, "took", time.Since(start).Round(time.Microsecond))
			return nil
		}
		chosen, err := c.fitToLead(ctx, candidates)
		if err != nil {
			return err
		}
		id, _ := raftlog.ParseServerID(chosen.ID)
		to = id
		if err := c.handTo(ctx, id, string(chosen.Address)); err != nil {
			return err
		}
		c.log.Info("leadership transferred on request", "target", id, "took", time.Since(start).Round(time.Microsecond))
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
func otherVoters(conf raft.Configuration, self int32) []raft.Server {
	var out []raft.Server
	for _, s := range conf.Servers {
		if s.Suffrage == raft.Voter && s.ID != raftlog.ServerID(self) {
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
}

// fitToLead asks every candidate, in parallel, how it is, until one is
// ready and its log has reached this node's last index, and returns the one
// of them with the longest log; it waits up to an election timeout for
// candidates to catch up (entries in flight). Without one, the error names
// each candidate and why it is unfit.
func (c *Controller) fitToLead(ctx context.Context, candidates []raft.Server) (raft.Server, error) {
	wait := c.raft.ReloadableConfig().ElectionTimeout
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		last := c.raft.LastIndex()
		why := make([]string, len(candidates))
		status := make([]PeerStatus, len(candidates))
		var wg sync.WaitGroup
		for i, s := range candidates {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id, _ := raftlog.ParseServerID(s.ID)
				st, err := c.cfg.AskPeer(ctx, id, string(s.Address))
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
			return raft.Server{}, fmt.Errorf("%w: %s", ErrTransferRefused, strings.Join(why, "; "))
		case <-time.After(wait / 10):
		}
	}
}

// handTo tells voter id at addr to start an election now, and waits up to
// two election timeouts for this node to lose leadership to it. A target
// that does not take over is given up on: ErrTransferFailed, and this node
// still leads.
func (c *Controller) handTo(ctx context.Context, id int32, addr string) error {
	wait := 2 * c.raft.ReloadableConfig().ElectionTimeout
	sent := make(chan error, 1)
	// The transport's call has its own timeout; it is not waited for
	// beyond ours.
	go func() { sent <- c.cfg.TimeoutNow(id, addr) }()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if c.raft.State() != raft.Leader {
			return nil
		}
		select {
		case err := <-sent:
			if err != nil {
				return fmt.Errorf("%w: telling node %d to take over: %v", ErrTransferFailed, id, err)
			}
			sent = nil
		case <-deadline.C:
			return fmt.Errorf("%w: node %d did not take over within %v; given up, this node still leads", ErrTransferFailed, id, wait)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// waitNewLeader waits, briefly, until this node (which just handed
// leadership on) hears from the new leader, so that its answer can name
// it. It returns -1 and "" if it has not by then.
func (c *Controller) waitNewLeader(ctx context.Context) (int32, string) {
	wait := 2 * c.raft.ReloadableConfig().ElectionTimeout
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
// Removed means: this node's latest configuration is not empty (a node
// started with --join has none until it is added) and does not list it, and
// no leader has been in touch for removedAfterHeartbeats heartbeat timeouts.
// The leader stops replicating to a node once its removal is in the log, so
// a removed node learns of its removal but not always of its commit; waiting
// for silence keeps a node that saw an uncommitted removal (the leader lost
// leadership before it committed, and the next leader does not have it) from
// stopping while a leader still replicates to it.
func (c *Controller) WaitRemoved(ctx context.Context) error {
	hb := c.raft.ReloadableConfig().HeartbeatTimeout
	tick := time.NewTicker(hb)
	defer tick.Stop()
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		conf := c.raft.GetConfiguration().Configuration()
		if c.raft.State() == raft.Leader || !outside(conf, c.cfg.NodeID) {
			continue
		}
		last := c.raft.LastContact()
		if last.Before(start) {
			last = start
		}
		if silent := time.Since(last); silent >= removedAfterHeartbeats*hb {
			return fmt.Errorf("%w: node %d is not in the quorum's configuration (%s) and no leader has been in touch for %v",
				ErrRemoved, c.cfg.NodeID, memberList(conf), silent.Round(time.Millisecond))
		}
	}
}

// outside reports whether conf is a configuration (not the empty one of a
// node waiting to join) that does not hold id.
func outside(conf raft.Configuration, id int32) bool {
	return len(conf.Servers) > 0 &&
		!slices.ContainsFunc(conf.Servers, func(s raft.Server) bool { return s.ID == raftlog.ServerID(id) })
}
