package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
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
	// ImageCheck is the active controller's latest comparison of the
	// voters' image digests (each voter's result is in its image field).
	ImageCheck *imageCheckStatus `json:"image_check,omitempty"`
}

// imageCheckStatus is one comparison of the voters' image digests at one
// index: how long ago, and whether the digests differed with no majority
// among them.
type imageCheckStatus struct {
	Index      uint64 `json:"index"`
	AgeMS      int64  `json:"age_ms"`
	NoMajority bool   `json:"no_majority"`
}

type voterStatus struct {
	ID           int32  `json:"id"`
	Address      string `json:"address"`
	State        string `json:"state"`
	LastIndex    uint64 `json:"last_index"`
	AppliedIndex uint64 `json:"applied_index"`
	Error        string `json:"error,omitempty"`
	// LoadingSnapshot is set for a voter that is starting and restoring
	// its snapshot (its state "starting"): its indexes are not known yet.
	LoadingSnapshot *snapshotLoadStatus `json:"loading_snapshot,omitempty"`
	// Diverged is set when the voter does not act on its image (it refused
	// a committed entry, or its digest differed from the majority's).
	Diverged *divergedStatus `json:"diverged,omitempty"`
	// Image is the voter's result in the active controller's latest
	// comparison (ImageCheck): agrees, differs or unknown, and why unknown.
	Image       string `json:"image,omitempty"`
	ImageDetail string `json:"image_detail,omitempty"`
	// With --replication, the active controller's view of the voter.
	Replication *voterReplication `json:"replication,omitempty"`
}

// snapshotLoadStatus is how far a starting voter has read its snapshot.
type snapshotLoadStatus struct {
	ReadBytes int64 `json:"read_bytes"`
	SizeBytes int64 `json:"size_bytes"`
	Percent   int   `json:"percent"`
}

// divergedStatus says where and why a voter stopped acting on its image.
type divergedStatus struct {
	Index  uint64 `json:"index"`
	Reason string `json:"reason"`
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
		Short: "Show the quorum: leader, epoch, each voter's state and indexes; exit 1 with no leader",
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
		"show each voter's last index, lag and last contact as the active controller sees them")
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
	images := map[int32]*keelpb.ImageCheckVoter{}
	if ic := l.GetImageCheck(); l.Active && ic != nil {
		st.ImageCheck = &imageCheckStatus{Index: ic.Index, AgeMS: ic.AgeMs, NoMajority: ic.NoMajority}
		for _, v := range ic.Voters {
			images[v.Id] = v
		}
	}
	for _, v := range l.Voters {
		vs := voterStatus{ID: v.Id, Address: v.Address, State: "unreachable"}
		if n, ok := view.Nodes[v.Id]; ok {
			vs.State, vs.LastIndex, vs.AppliedIndex = n.State, n.LastIndex, n.AppliedIndex
			if n.DivergedIndex > 0 || n.DivergedReason != "" {
				vs.Diverged = &divergedStatus{Index: n.DivergedIndex, Reason: n.DivergedReason}
			}
		} else if e := view.Errors[v.Id]; e != nil {
			vs.Error = errorLine(e)
			if load, ok := rpc.SnapshotLoadOf(e); ok {
				vs.State = "starting"
				vs.LoadingSnapshot = &snapshotLoadStatus{ReadBytes: load.Read, SizeBytes: load.Size, Percent: load.Percent()}
			}
		}
		if im := images[v.Id]; im != nil {
			vs.Image, vs.ImageDetail = im.Result, im.Detail
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
	if err := tableOf([]string{"ID", "ADDRESS", "STATE", "LAST INDEX", "APPLIED INDEX"}, "", func(v voterStatus) []string {
		if l := v.LoadingSnapshot; l != nil {
			// Not an applied index of 0, which reads as lost state.
			load := rpc.SnapshotLoad{Read: l.ReadBytes, Size: l.SizeBytes}
			return []string{fmt.Sprint(v.ID), v.Address, v.State, "-", load.String()}
		}
		return []string{fmt.Sprint(v.ID), v.Address, v.State, fmt.Sprint(v.LastIndex), fmt.Sprint(v.AppliedIndex)}
	})(w, st.Voters); err != nil {
		return err
	}
	printImageStatus(w, st)
	return nil
}

// printImageStatus says, under the table, which voters do not act on their
// image and why, and what the active controller's latest comparison of the
// voters' digests found when it was not all agreement.
func printImageStatus(w io.Writer, st quorumStatus) {
	lines := []string{}
	for _, v := range st.Voters {
		if d := v.Diverged; d != nil {
			lines = append(lines, fmt.Sprintf("Controller %d does not act on its image (diverged at index %d): %s", v.ID, d.Index, d.Reason))
		}
	}
	if ic := st.ImageCheck; ic != nil {
		var differ, unknown []string
		for _, v := range st.Voters {
			switch v.Image {
			case "differs":
				differ = append(differ, fmt.Sprint(v.ID))
			case "unknown":
				unknown = append(unknown, fmt.Sprintf("%d (%s)", v.ID, v.ImageDetail))
			}
		}
		if len(differ) > 0 {
			what := "a majority holds another"
			if ic.NoMajority {
				what = "and no majority holds one digest"
			}
			who := "controller " + differ[0] + " differs"
			if len(differ) > 1 {
				who = "controllers " + strings.Join(differ, ", ") + " differ"
			}
			lines = append(lines, fmt.Sprintf("Image digests at index %d (%s ago): %s, %s", ic.Index, msAgo(ic.AgeMS), who, what))
		}
		if len(unknown) > 0 {
			lines = append(lines, fmt.Sprintf("Image digests at index %d (%s ago): not compared with %s", ic.Index, msAgo(ic.AgeMS), strings.Join(unknown, ", ")))
		}
	}
	if len(lines) > 0 {
		fmt.Fprintln(w)
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
	}
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
