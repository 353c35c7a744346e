package raftlog

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// peerGuard binds raft connections to the quorum's membership. Raft itself
// takes an AppendEntries or a RequestVote from anyone who can reach its
// port and trusts the node id the request names; so, with TLS, the guard
// refuses, once per connection and before raft sees it:
//
//   - a connection from a node that is not in the latest raft configuration
//     (which holds a voter add-voter is adding as soon as the leader has
//     appended it), by the controller certificate it presented; and one
//     admitted before its node was removed is closed (dropRemoved);
//   - a dial toward an address no member has: a removed node is no longer
//     called, and a dial still under way to it is abandoned.
//
// Raft's requests themselves are not read: a member's certificate lets it
// say anything in raft, which is not Byzantine-tolerant, so naming another
// member in a request's header would gain it nothing it lacks. In
// plaintext nothing says who a peer is, and the guard checks only dials.
//
// A node that has no configuration yet (started with --join, waiting to be
// added) has nothing to protect and no list to check against: it takes any
// controller, as it must to be added.
type peerGuard struct {
	self int32
	log  *slog.Logger
	// dialAddrs are --raft-dial's addresses, by node id: a member may be
	// dialled there rather than at its configured address.
	dialAddrs map[int32]string
	// firstRequest is firstRequestTimeout (tests shorten it).
	firstRequest time.Duration

	mu      sync.Mutex
	conf    func() raft.Configuration // nil until raft runs
	started chan struct{}             // closed by setRaft

	refusals *logLimiter
	// connEnded, if set, is told of each inbound connection that carried
	// requests and that its peer ended, with the controller its
	// certificate names (0 in plaintext: unknown; leaderCrash.connEnded).
	// Set before the transport runs.
	connEnded func(peer int32)
}

func newPeerGuard(self int32, dialAddrs map[int32]string, log *slog.Logger) *peerGuard {
	if log == nil {
		log = slog.Default()
	}
	return &peerGuard{
		self:      self,
		log:       log,
		dialAddrs: dialAddrs,
		started:   make(chan struct{}),

		firstRequest: firstRequestTimeout,
		refusals:     newLogLimiter(10 * time.Second),
	}
}

// setRaft gives the guard raft's latest configuration to check against:
// raft keeps it in an atomic value, so each check reads the current one.
// Until then, checks wait (the transport accepts before raft has started).
func (g *peerGuard) setRaft(r *raft.Raft) {
	g.setConfiguration(func() raft.Configuration { return r.GetConfiguration().Configuration() })
}

// setConfiguration is setRaft with any source of the configuration (tests
// give a fixed one). Only the first call counts.
func (g *peerGuard) setConfiguration(conf func() raft.Configuration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.conf != nil {
		return
	}
	g.conf = conf
	close(g.started)
}

// members returns the latest configuration's servers by node id, waiting
// for raft to have started (or ctx to end).
func (g *peerGuard) members(ctx context.Context) (map[int32]raft.ServerAddress, error) {
	select {
	case <-g.started:
	case <-ctx.Done():
		return nil, fmt.Errorf("raft has not started: %w", ctx.Err())
	}
	g.mu.Lock()
	conf := g.conf
	g.mu.Unlock()
	out := make(map[int32]raft.ServerAddress)
	for _, s := range conf().Servers {
		if id, err := ParseServerID(s.ID); err == nil {
			out[id] = s.Address
		}
	}
	return out, nil
}

// memberList names the members for a refusal: "1, 2, 3".
func memberList(m map[int32]raft.ServerAddress) string {
	ids := make([]int, 0, len(m))
	for id := range m {
		ids = append(ids, int(id))
	}
	slices.Sort(ids)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(id)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// admit decides whether a peer that proved it is controller id (its
// certificate) may talk raft with this node.
func (g *peerGuard) admit(ctx context.Context, id int32) error {
	m, err := g.members(ctx)
	if err != nil {
		return err
	}
	if g.admits(m, id) {
		return nil
	}
	return fmt.Errorf("controller-%d is not in the quorum's configuration (members: %s)", id, memberList(m))
}

// admits is admit's rule, for members m.
func (g *peerGuard) admits(m map[int32]raft.ServerAddress, id int32) bool {
	if _, ok := m[id]; ok || len(m) == 0 {
		return true
	}
	// A node that is not in the configuration it holds is a joiner still
	// catching up (or a node removed, about to stop): the configuration it
	// holds is an old one, read from the start of the log it is replaying,
	// and may not name the leader that is sending it the rest (a voter
	// added since). It cannot judge membership yet; it takes any
	// controller, as a node with no configuration does.
	_, self := m[g.self]
	return !self
}

// dialTarget returns the member this node reaches at address: raft dials
// by address, and the answer names whose certificate must answer. A dial to
// an address no member has is refused.
func (g *peerGuard) dialTarget(ctx context.Context, address raft.ServerAddress) (id int32, err error) {
	m, err := g.members(ctx)
	if err != nil {
		return 0, err
	}
	for id, addr := range m {
		if d, ok := g.dialAddrs[id]; ok && raft.ServerAddress(d) == address || !ok && addr == address {
			return id, nil
		}
	}
	return 0, fmt.Errorf("no member of the quorum's configuration (%s) is at %s", memberList(m), address)
}

// current returns the members now, without waiting: false before raft has
// started.
func (g *peerGuard) current() (map[int32]raft.ServerAddress, bool) {
	select {
	case <-g.started:
	default:
		return nil, false
	}
	m, err := g.members(context.Background())
	return m, err == nil
}

// stillMember reports whether id is in the latest configuration (a dial
// toward a node that was removed meanwhile is abandoned).
func (g *peerGuard) stillMember(id int32) bool {
	m, ok := g.current()
	if !ok {
		return true
	}
	_, member := m[id]
	return member
}

// refused logs a refusal once per peer and reason every 10s, with the count
// of those held back: a refused peer redials at once.
func (g *peerGuard) refused(peer, what string, err error) {
	if ok, held := g.refusals.allow(peer+" "+what, time.Now()); ok {
		g.log.Warn("refused raft traffic: "+what, "remote", peer, "reason", err.Error(),
			"similar_refusals_not_logged", held)
	}
}

// abandonPoll is how often a dial under way checks that its target is
// still a member.
const abandonPoll = 50 * time.Millisecond

// abandonIfRemoved cancels a dial toward target once target is no longer a
// member; it returns when ctx ends (the dial is over).
func (g *peerGuard) abandonIfRemoved(ctx context.Context, cancel context.CancelFunc, target int32) {
	tick := time.NewTicker(abandonPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if !g.stillMember(target) {
				cancel()
				return
			}
		}
	}
}
