package server

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/raftlog"
	"github.com/keel-dev/keel/rpc"
)

// MetricRaftCrashElectionVetoes counts, by reason, the looks at a raft
// leader whose connection ended that started no election (raftlog's
// leaderCrash; raftlog.CrashVetoReasons).
const MetricRaftCrashElectionVetoes = "keel_raft_crash_election_vetoes_total"

// peerService answers what the other controllers of the quorum ask this
// one (keelpb.PeerService): a voter's crash election asks before it
// deposes a leader.
type peerService struct {
	keelpb.UnimplementedPeerServiceServer
	node *Node
}

// register adds the service to g.
func (p peerService) register(g *grpc.Server) { keelpb.RegisterPeerServiceServer(g, p) }

// LeaderContact answers from this node's raft: raftlog.Node.LeaderContact.
func (p peerService) LeaderContact(_ context.Context, req *keelpb.LeaderContactRequest) (*keelpb.LeaderContactResponse, error) {
	c := p.node.node.LeaderContact(req.GetLeaderId())
	since := int64(-1)
	if c.Since >= 0 {
		since = c.Since.Microseconds()
	}
	return &keelpb.LeaderContactResponse{
		NodeId: c.NodeID, Term: c.Term, LeaderId: c.Leader, SinceContactMicros: since,
		LastLogIndex: c.LastIndex, LastLogTerm: c.LastTerm, State: c.State.String(),
	}, nil
}

// askLeaderContact is raftlog's question to another voter
// (raftlog.Config.AskLeaderContact), over peers.
func askLeaderContact(peers *rpc.PeerClient) func(ctx context.Context, id int32, addr string, leader int32) (raftlog.LeaderContact, error) {
	return func(ctx context.Context, id int32, addr string, leader int32) (raftlog.LeaderContact, error) {
		resp, err := peers.LeaderContact(ctx, id, addr, leader)
		if err != nil {
			return raftlog.LeaderContact{}, err
		}
		state, ok := raftStates[resp.GetState()]
		if !ok {
			return raftlog.LeaderContact{}, fmt.Errorf("node %d answered an unknown raft state %q", id, resp.GetState())
		}
		c := raftlog.LeaderContact{
			NodeID: resp.GetNodeId(), State: state, Term: resp.GetTerm(), Leader: resp.GetLeaderId(), Since: -1,
			LastIndex: resp.GetLastLogIndex(), LastTerm: resp.GetLastLogTerm(),
		}
		if us := resp.GetSinceContactMicros(); us >= 0 {
			c.Since = time.Duration(us) * time.Microsecond
		}
		return c, nil
	}
}

// raftStates reads raft.RaftState's names back.
var raftStates = map[string]raft.RaftState{
	raft.Follower.String():  raft.Follower,
	raft.Candidate.String(): raft.Candidate,
	raft.Leader.String():    raft.Leader,
	raft.Shutdown.String():  raft.Shutdown,
}

// crashElectionVetoes are the counters of MetricRaftCrashElectionVetoes,
// one per reason, read from n.
func crashElectionVetoes(n *raftlog.Node) []prometheus.Collector {
	var cols []prometheus.Collector
	for _, reason := range raftlog.CrashVetoReasons {
		cols = append(cols, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        MetricRaftCrashElectionVetoes,
			Help:        "Looks at a raft leader whose connection ended that started no election, by reason: its port accepted a probe (port_accepts), a probe failed otherwise (probe_failed), it was heard from again (contact), not a quorum of voters said they had lost it (unanswered) or some still hear it (others_hear), or another election was under way (election_under_way) (--raft-crash-election).",
			ConstLabels: prometheus.Labels{"reason": reason},
		}, func() float64 { return float64(n.CrashElectionVetoes(reason)) }))
	}
	return cols
}
