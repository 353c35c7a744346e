package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

const defaultWriteTimeout = 10 * time.Second

func newQuorumCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "quorum", Short: "Inspect, check and change the controller quorum"}
	cmd.AddCommand(newQuorumStatusCmd(), newQuorumVerifyCmd(),
		newQuorumAddVoterCmd(), newQuorumRemoveVoterCmd(), newQuorumTransferLeadershipCmd())
	return cmd
}

// quorumStatus is the JSON contract of `keel quorum status` (DESIGN.md).
type quorumStatus struct {
	ClusterID string `json:"cluster_id"`
	LeaderID  int32  `json:"leader_id"`
	// LeaderKnownBy is the controller that named the active one: itself,
	// or a follower when the active controller did not answer this client.
	LeaderKnownBy   int32         `json:"leader_known_by"`
	ControllerEpoch int64         `json:"controller_epoch"`
	RaftTerm        uint64        `json:"raft_term"`
	CommitIndex     uint64        `json:"commit_index"`
	Voters          []voterStatus `json:"voters"`
}

type voterStatus struct {
	ID           int32  `json:"id"`
	Address      string `json:"address"`
	State        string `json:"state"`
	LastIndex    uint64 `json:"last_index"`
	AppliedIndex uint64 `json:"applied_index"`
	Error        string `json:"error,omitempty"`
	// With --replication, the active controller's view of the voter.
	Replication *voterReplication `json:"replication,omitempty"`
}

// voterReplication is a voter as the active controller sees it (Kafka's
// describe --replication): the last index it holds, how many entries it is
// behind the leader's last index, and how long ago it last answered the
// leader (-1: not in this term).
type voterReplication struct {
	MatchIndex    uint64 `json:"match_index"`
	Lag           uint64 `json:"lag"`
	LastContactMS int64  `json:"last_contact_ms"`
}

// errNoActiveController fails quorum status after it printed the quorum,
// so that scripts can tell.
var errNoActiveController = status.Error(codes.Unavailable, "no active controller: none of the controllers that answered leads the quorum or knows one that does")

func newQuorumStatusCmd() *cobra.Command {
	a := &adminFlags{}
	var replication bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the quorum: leader, epoch, and each voter's own state and indexes; exits 1 when no controller is active",
		Long: `Show the quorum: the active controller, the controller epoch, the raft term and
commit index, and each voter's own state, last index and applied index. Any one
controller is enough: it names the others. With --replication, each voter as
the active controller sees it: the last index it holds, its lag behind the
leader's last index, and how long ago it last answered the leader.

The exit status is 1, after the output, when no active controller is known.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var st quorumStatus
			err := adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) (quorumStatus, error) {
				var err error
				st, err = askQuorumStatus(ctx, c, replication)
				return st, err
			}, func(w io.Writer, st quorumStatus) error { return printQuorumStatus(w, st, replication) })
			if err == nil && st.LeaderID < 0 {
				return errNoActiveController
			}
			return err
		},
	}
	a.add(cmd)
	cmd.Flags().BoolVar(&replication, "replication", false,
		"show each voter's replication as the active controller sees it: last index held, lag, time since it last answered")
	return cmd
}

func askQuorumStatus(ctx context.Context, c *rpc.Client, replication bool) (quorumStatus, error) {
	view, err := c.DescribeQuorum(ctx)
	if err != nil {
		return quorumStatus{}, err
	}
	l := view.Leader
	st := quorumStatus{
		ClusterID:       l.ClusterId,
		LeaderID:        view.ActiveID,
		LeaderKnownBy:   view.ActiveKnownBy,
		ControllerEpoch: l.ControllerEpoch,
		RaftTerm:        l.RaftTerm,
		CommitIndex:     l.CommitIndex,
	}
	progress := map[int32]*keelpb.VoterReplication{}
	if replication && l.Active {
		for _, r := range l.Replication {
			progress[r.Id] = r
		}
	}
	for _, v := range l.Voters {
		vs := voterStatus{ID: v.Id, Address: v.Address, State: "unreachable"}
		if n, ok := view.Nodes[v.Id]; ok {
			vs.State, vs.LastIndex, vs.AppliedIndex = n.State, n.LastIndex, n.AppliedIndex
		} else if e := view.Errors[v.Id]; e != nil {
			vs.Error = errorLine(e)
		}
		if replication {
			vs.Replication = &voterReplication{LastContactMS: -1}
			if r := progress[v.Id]; r != nil {
				vs.Replication.MatchIndex, vs.Replication.LastContactMS = r.MatchIndex, r.LastContactMs
				if last := l.LastIndex; last > r.MatchIndex {
					vs.Replication.Lag = last - r.MatchIndex
				}
			}
		}
		st.Voters = append(st.Voters, vs)
	}
	sort.Slice(st.Voters, func(i, j int) bool { return st.Voters[i].ID < st.Voters[j].ID })
	return st, nil
}

func printQuorumStatus(w io.Writer, st quorumStatus, replication bool) error {
	active := leaderCell(st.LeaderID)
	if st.LeaderID >= 0 && st.LeaderKnownBy != st.LeaderID {
		active += fmt.Sprintf(" (as controller %d knows it; it did not answer)", st.LeaderKnownBy)
	}
	fmt.Fprintf(w, "Cluster ID:        %s\nActive controller: %s\nController epoch:  %d\nRaft term:         %d\nCommit index:      %d\n\n",
		st.ClusterID, active, st.ControllerEpoch, st.RaftTerm, st.CommitIndex)
	if replication {
		if st.LeaderID < 0 || st.LeaderKnownBy != st.LeaderID {
			fmt.Fprintln(w, "Replication: unknown (only the active controller knows it, and it did not answer)")
			fmt.Fprintln(w)
		}
		return tableOf([]string{"ID", "ADDRESS", "STATE", "MATCH INDEX", "LAG", "LAST CONTACT"}, "", func(v voterStatus) []string {
			r := v.Replication
			if r == nil || r.LastContactMS < 0 {
				return []string{fmt.Sprint(v.ID), v.Address, v.State, "-", "-", "-"}
			}
			contact := msAgo(r.LastContactMS) + " ago"
			if v.ID == st.LeaderID {
				contact = "-"
			}
			return []string{fmt.Sprint(v.ID), v.Address, v.State, fmt.Sprint(r.MatchIndex), fmt.Sprint(r.Lag), contact}
		})(w, st.Voters)
	}
	return tableOf([]string{"ID", "ADDRESS", "STATE", "LAST INDEX", "APPLIED INDEX"}, "", func(v voterStatus) []string {
		return []string{fmt.Sprint(v.ID), v.Address, v.State, fmt.Sprint(v.LastIndex), fmt.Sprint(v.AppliedIndex)}
	})(w, st.Voters)
}

type verifyResult struct {
	Index           uint64  `json:"index"`
	ControllerEpoch int64   `json:"controller_epoch"`
	LatencyMS       float64 `json:"latency_ms"`
}

func newQuorumVerifyCmd() *cobra.Command {
	a := &adminFlags{}
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Commit a no-op record through the active controller: proof the quorum can write",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) (verifyResult, error) {
				start := time.Now()
				resp, err := c.AppendNoOp(ctx, uuid.NewString())
				if err != nil {
					return verifyResult{}, err
				}
				return verifyResult{Index: resp.Index, ControllerEpoch: resp.ControllerEpoch,
					LatencyMS: float64(time.Since(start).Microseconds()) / 1000}, nil
			}, func(w io.Writer, r verifyResult) error {
				fmt.Fprintf(w, "committed at index %d (controller epoch %d) in %.1f ms\n", r.Index, r.ControllerEpoch, r.LatencyMS)
				return nil
			})
		},
	}
	a.add(cmd)
	return cmd
}
