package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/rpc"
)

const (
	defaultControllers  = "127.0.0.1:9091,127.0.0.1:9092,127.0.0.1:9093"
	defaultWriteTimeout = 10 * time.Second
)

// adminFlags are the flags every admin subcommand takes.
type adminFlags struct {
	controllers string
	output      string
	timeout     time.Duration
}

func (a *adminFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&a.controllers, "controllers", defaultControllers, "controller addresses, host:port,... (any one will do)")
	f.StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	f.DurationVar(&a.timeout, "timeout", 10*time.Second, "how long to keep trying before giving up")
}

func (a *adminFlags) client(cmd *cobra.Command) (*rpc.Client, error) {
	if err := checkOutput(a.output); err != nil {
		return nil, err
	}
	tlsCfg, err := tlsFlags(cmd)
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, s := range strings.Split(a.controllers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			addrs = append(addrs, s)
		}
	}
	return rpc.NewClient(addrs, rpc.WithTLS(tlsCfg))
}

// connect makes the client and the command's deadline (--timeout): every
// admin command starts so. done closes both.
func (a *adminFlags) connect(cmd *cobra.Command) (*rpc.Client, context.Context, func(), error) {
	c, err := a.client(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
	return c, ctx, func() { cancel(); c.Close() }, nil
}

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
			c, ctx, done, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer done()
			view, err := c.DescribeQuorum(ctx)
			if err != nil {
				return err
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
			if a.output == "json" {
				return printJSON(cmd.OutOrStdout(), st)
			}
			leader := "none"
			if st.LeaderID >= 0 {
				leader = fmt.Sprint(st.LeaderID)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Cluster ID:        %s\nActive controller: %s\nController epoch:  %d\nRaft term:         %d\nCommit index:      %d\n\n",
				st.ClusterID, leader, st.ControllerEpoch, st.RaftTerm, st.CommitIndex)
			rows := [][]string{{"ID", "ADDRESS", "STATE", "LAST INDEX", "APPLIED INDEX"}}
			for _, v := range st.Voters {
				rows = append(rows, []string{fmt.Sprint(v.ID), v.Address, v.State, fmt.Sprint(v.LastIndex), fmt.Sprint(v.AppliedIndex)})
			}
			return printTable(cmd.OutOrStdout(), rows)
		},
	}
	a.add(cmd)
	return cmd
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
			c, ctx, done, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer done()
			start := time.Now()
			resp, err := c.AppendNoOp(ctx, uuid.NewString())
			if err != nil {
				return err
			}
			r := verifyResult{Index: resp.Index, ControllerEpoch: resp.ControllerEpoch,
				LatencyMS: float64(time.Since(start).Microseconds()) / 1000}
			if a.output == "json" {
				return printJSON(cmd.OutOrStdout(), r)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "committed at index %d (controller epoch %d) in %.1f ms\n", r.Index, r.ControllerEpoch, r.LatencyMS)
			return nil
		},
	}
	a.add(cmd)
	return cmd
}
