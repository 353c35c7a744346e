package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

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
	ClusterID       string        `json:"cluster_id"`
	LeaderID        int32         `json:"leader_id"`
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
}

func newQuorumStatusCmd() *cobra.Command {
	a := &adminFlags{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the quorum: leader, epoch, and each voter's own state and indexes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return adminCall(cmd, a, askQuorumStatus, printQuorumStatus)
		},
	}
	a.add(cmd)
	return cmd
}

func askQuorumStatus(ctx context.Context, c *rpc.Client) (quorumStatus, error) {
	view, err := c.DescribeQuorum(ctx)
	if err != nil {
		return quorumStatus{}, err
	}
	l := view.Leader
	st := quorumStatus{
		ClusterID:       l.ClusterId,
		LeaderID:        l.LeaderId,
		ControllerEpoch: l.ControllerEpoch,
		RaftTerm:        l.RaftTerm,
		CommitIndex:     l.CommitIndex,
	}
	if !l.Active {
		st.LeaderID = -1 // no active controller answered
	}
	for _, v := range l.Voters {
		vs := voterStatus{ID: v.Id, Address: v.Address, State: "unreachable"}
		if n, ok := view.Nodes[v.Id]; ok {
			vs.State, vs.LastIndex, vs.AppliedIndex = n.State, n.LastIndex, n.AppliedIndex
		} else if e := view.Errors[v.Id]; e != nil {
			vs.Error = errorLine(e)
		}
		st.Voters = append(st.Voters, vs)
	}
	sort.Slice(st.Voters, func(i, j int) bool { return st.Voters[i].ID < st.Voters[j].ID })
	return st, nil
}

func printQuorumStatus(w io.Writer, st quorumStatus) error {
	fmt.Fprintf(w, "Cluster ID:        %s\nActive controller: %s\nController epoch:  %d\nRaft term:         %d\nCommit index:      %d\n\n",
		st.ClusterID, leaderCell(st.LeaderID), st.ControllerEpoch, st.RaftTerm, st.CommitIndex)
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
