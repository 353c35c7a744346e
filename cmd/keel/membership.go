package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/internal/hostport"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/raftlog"
	"github.com/keel-dev/keel/rpc"
)

// membershipResult is the JSON of `keel quorum add-voter` and `remove-voter`.
type membershipResult struct {
	ConfigurationIndex uint64         `json:"configuration_index"`
	LeaderID           int32          `json:"leader_id"`
	Voters             []memberStatus `json:"voters"`
	// PreviousLeaderID is set when remove-voter removed the active
	// controller: it handed leadership to LeaderID first.
	PreviousLeaderID int32 `json:"previous_leader_id,omitempty"`
}

type memberStatus struct {
	ID       int32  `json:"id"`
	Address  string `json:"address"`
	Suffrage string `json:"suffrage"`
}

// transferResult is the JSON of `keel quorum transfer-leadership`.
type transferResult struct {
	PreviousLeaderID int32 `json:"previous_leader_id"`
	LeaderID         int32 `json:"leader_id"`
	ControllerEpoch  int64 `json:"controller_epoch"`
}

// parseNodeID parses a node id argument or flag value: a positive integer.
func parseNodeID(what, s string) (int32, error) {
	n, ok := raftlog.ParseNodeID(strings.TrimSpace(s))
	if !ok {
		return 0, fmt.Errorf("%s %q: want a node id, a positive integer", what, s)
	}
	return n, nil
}

// parseControllerAddr checks ADDR as --voters does.
func parseControllerAddr(s string) (string, error) {
	if strings.Contains(s, "@") {
		return "", fmt.Errorf("ADDR %q: want host:port alone (the node id is the first argument)", s)
	}
	if err := hostport.Check(s); err != nil {
		return "", fmt.Errorf("ADDR: %v", err)
	}
	return s, nil
}

func members(ms []*keelpb.QuorumMember) []memberStatus {
	out := make([]memberStatus, len(ms))
	for i, m := range ms {
		out[i] = memberStatus{ID: m.Id, Address: m.Address, Suffrage: m.Suffrage}
	}
	return out
}

func printMembers(w io.Writer, r membershipResult) error {
	return tableOf([]string{"ID", "ADDRESS", "SUFFRAGE"}, "", func(v memberStatus) []string {
		return []string{fmt.Sprint(v.ID), v.Address, v.Suffrage}
	})(w, r.Voters)
}

func newQuorumAddVoterCmd() *cobra.Command {
	a := &adminFlags{}
	var noCheck, force bool
	cmd := &cobra.Command{
		Use:   "add-voter ID ADDR",
		Short: "Add a controller (started with --join) to the quorum as a voter",
		Long: `Add controller ID at ADDR (its --listen address) to the quorum as a voter.

Start the node first with --join and an empty data dir: it waits to be added,
then receives the snapshot and the log from the leader. add-voter asks ADDR
who it is before adding it (--no-check skips that), and prints the voters
afterwards. The active controller asks the node too: one that does not answer
is refused, saying what it would cost the quorum (a voter that is down counts
towards every majority), unless --force; one that is behind is added as a
nonvoter first and made a voter once it has caught up, which the command waits
for (up to --timeout; run it again to go on waiting). Adding a voter already in
the quorum at ADDR changes nothing.`,
		Example: `  keel controller --node-id 4 --listen 10.0.0.4:9091 --data-dir /var/lib/keel --join   # on the new host
  keel quorum add-voter 4 10.0.0.4:9091 --controllers 10.0.0.1:9091`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseNodeID("ID", args[0])
			if err != nil {
				return err
			}
			addr, err := parseControllerAddr(args[1])
			if err != nil {
				return err
			}
			return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) (membershipResult, error) {
				if !noCheck && !force {
					if err := c.CheckJoiner(ctx, id, addr); err != nil {
						return membershipResult{}, err
					}
				}
				resp, err := c.AddVoter(ctx, id, addr, force)
				if err != nil {
					return membershipResult{}, err
				}
				return membershipResult{ConfigurationIndex: resp.ConfigurationIndex, LeaderID: resp.LeaderId, Voters: members(resp.Voters)}, nil
			}, func(w io.Writer, r membershipResult) error {
				fmt.Fprintf(w, "Voter %d at %s is in the quorum (configuration index %d, active controller %d).\n\n",
					id, addr, r.ConfigurationIndex, r.LeaderID)
				return printMembers(w, r)
			})
		},
	}
	a.add(cmd)
	cmd.Flags().BoolVar(&noCheck, "no-check", false, "do not ask ADDR whether it is node ID first (the active controller still does)")
	cmd.Flags().BoolVar(&force, "force", false, "add the voter at once, without asking whether it answers and has caught up")
	return cmd
}

func newQuorumRemoveVoterCmd() *cobra.Command {
	a := &adminFlags{}
	cmd := &cobra.Command{
		Use:   "remove-voter ID",
		Short: "Remove a controller from the quorum",
		Long: `Remove controller ID from the quorum.

The removed node stops getting the log; if it is running it notices within a
few seconds and exits with status 0. Its data dir is then of no use: to bring
the node back, start it with an empty data dir and --join, and add-voter it.
Removing the active controller hands leadership to another voter first (a
leadership transfer, not an election timeout); the new leader then removes it.
The last voter cannot be removed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseNodeID("ID", args[0])
			if err != nil {
				return err
			}
			return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) (membershipResult, error) {
				resp, err := c.RemoveVoter(ctx, id)
				if err != nil {
					return membershipResult{}, err
				}
				return membershipResult{ConfigurationIndex: resp.ConfigurationIndex, LeaderID: resp.LeaderId,
					Voters: members(resp.Voters), PreviousLeaderID: resp.HandedOffBy}, nil
			}, func(w io.Writer, r membershipResult) error {
				if r.PreviousLeaderID != 0 {
					fmt.Fprintf(w, "Node %d was the active controller: it handed leadership to node %d first.\n", id, r.LeaderID)
				}
				fmt.Fprintf(w, "Voter %d is out of the quorum (configuration index %d, active controller %d).\n\n",
					id, r.ConfigurationIndex, r.LeaderID)
				return printMembers(w, r)
			})
		},
	}
	a.add(cmd)
	return cmd
}

func newQuorumTransferLeadershipCmd() *cobra.Command {
	a := &adminFlags{}
	var to string
	cmd := &cobra.Command{
		Use:   "transfer-leadership",
		Short: "Hand leadership of the quorum to another voter",
		Long: `Hand raft leadership from the active controller to voter --to, or, without
it, to the most up-to-date other voter (a leadership transfer: the new leader
is elected at once, with no election timeout). Use it before maintenance on
the active controller's host. Prints the new active controller once it has
taken over.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var target int32
			if cmd.Flags().Changed("to") {
				var err error
				if target, err = parseNodeID("--to", to); err != nil {
					return err
				}
			}
			return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) (transferResult, error) {
				resp, err := c.TransferLeadership(ctx, target)
				if err != nil {
					return transferResult{}, err
				}
				prev := resp.PreviousLeaderId
				active, err := c.WaitActive(ctx, func(n *keelpb.DescribeQuorumResponse) bool {
					if target != 0 {
						return n.NodeId == target
					}
					return n.NodeId != prev
				})
				if err != nil {
					return transferResult{}, err
				}
				return transferResult{PreviousLeaderID: prev, LeaderID: active.NodeId, ControllerEpoch: active.ActiveEpoch}, nil
			}, func(w io.Writer, r transferResult) error {
				if r.LeaderID == r.PreviousLeaderID {
					fmt.Fprintf(w, "Node %d is the active controller already (epoch %d); nothing to do.\n", r.LeaderID, r.ControllerEpoch)
					return nil
				}
				fmt.Fprintf(w, "Leadership moved from node %d to node %d; node %d is the active controller at epoch %d.\n",
					r.PreviousLeaderID, r.LeaderID, r.LeaderID, r.ControllerEpoch)
				return nil
			})
		},
	}
	a.add(cmd)
	cmd.Flags().StringVar(&to, "to", "", "the voter to hand leadership to (default: the most up-to-date other voter)")
	return cmd
}
