package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// keel group administers consumer groups over the brokers' Kafka listeners
// with franz-go's admin client, as Kafka's kafka-consumer-groups.sh does:
// the group coordinators live in the brokers, not in the controllers.
func newGroupCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "group", Short: "List, describe, reset the offsets of and delete consumer groups"}
	cmd.AddCommand(newGroupListCmd(), newGroupDescribeCmd(), newGroupResetOffsetsCmd(), newGroupDeleteCmd())
	return cmd
}

// groupCLIFlags are what every group command shares: the brokers' Kafka
// listeners and how long to keep retrying; and -o, for those that print.
type groupCLIFlags struct {
	bootstrap string
	timeout   time.Duration
	output    string
}

func (g *groupCLIFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&g.bootstrap, "bootstrap", defaultBootstrap, "Kafka listeners of the brokers (keel broker --kafka-advertise), host:port,... (any one will do)")
	f.DurationVar(&g.timeout, "timeout", 30*time.Second, "how long to keep retrying (a coordinator that is loading, a leader that moved)")
}

func (g *groupCLIFlags) addOutput(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&g.output, "output", "o", "table", "output format: table or json")
}

// run checks -o, connects, and calls do with an admin client and a context
// that ends a little after --timeout: the client gives up retrying at
// --timeout, with the brokers' last answer rather than the context's end.
func (g *groupCLIFlags) run(cmd *cobra.Command, do func(ctx context.Context, adm groupAdmin) error) error {
	if g.output != "" {
		if err := checkOutput(g.output); err != nil {
			return err
		}
	}
	cl, err := kafkaClient(cmd, g.bootstrap, g.timeout)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := interrupted(cmd.Context())
	defer cancel()
	ctx, stop := context.WithTimeout(ctx, g.timeout+explainTimeout)
	defer stop()
	// Nothing listening is said at once, naming --bootstrap, rather than
	// as the client's "unable to dial" after its retries.
	if err := listening(ctx, splitAddrs(g.bootstrap)); err != nil {
		return err
	}
	return do(ctx, groupAdmin{Client: kadm.NewClient(cl), cl: cl})
}

// explainTimeout bounds the question that explains a failure.
const explainTimeout = 5 * time.Second

// groupAdmin is kadm over the command's client, which it keeps to ask the
// brokers why they failed when kadm does not say.
type groupAdmin struct {
	*kadm.Client
	cl *kgo.Client
}

// explain is groupError, with the broker's own reason when it has no
// coordinator for group: FindCoordinator's ErrorMessage (too few brokers
// for __consumer_offsets' replication factor, no leader), which kadm
// drops.
func (a groupAdmin) explain(ctx context.Context, group string, err error) error {
	if !errors.Is(err, kerr.CoordinatorNotAvailable) {
		return groupError(group, err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), explainTimeout)
	defer cancel()
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKey, req.CoordinatorKeys = group, []string{group}
	resp, ferr := req.RequestWith(ctx, a.cl)
	if ferr != nil {
		return groupError(group, err)
	}
	msg := resp.ErrorMessage
	if len(resp.Coordinators) == 1 {
		msg = resp.Coordinators[0].ErrorMessage
	}
	if msg == nil || *msg == "" {
		return groupError(group, err)
	}
	return fmt.Errorf("group %s: no coordinator is available: %s (%s)", group, *msg, kerr.CoordinatorNotAvailable.Message)
}

// groupArgs accepts one or more group names.
func groupArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("group name required: %s", cmd.UseLine())
	}
	for _, a := range args {
		if strings.TrimSpace(a) == "" {
			return errors.New("a group name must not be empty")
		}
	}
	return nil
}

// groupError says in one line why a request about group failed, naming
// Kafka's error code as kafka-consumer-groups.sh's users know it.
func groupError(group string, err error) error {
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return fmt.Errorf("group %s: %w", group, err)
	}
	why := ke.Description
	switch ke {
	case kerr.GroupAuthorizationFailed:
		why = "not authorized for this group (an ACL on the group is missing)"
	case kerr.NonEmptyGroup:
		why = "the group has active members; stop its consumers first"
	case kerr.GroupIDNotFound:
		why = "no such group"
	case kerr.CoordinatorNotAvailable:
		why = "no coordinator for the group is available (is __consumer_offsets created, with leaders?)"
	case kerr.CoordinatorLoadInProgress:
		why = "the coordinator is still loading the group; try again"
	case kerr.UnknownMemberID:
		why = "the group has active members; stop its consumers first"
	}
	return fmt.Errorf("group %s: %s (%s)", group, why, ke.Message)
}

// groupSummary is the JSON contract of `keel group list`.
type groupSummary struct {
	Group        string `json:"group"`
	State        string `json:"state"`
	ProtocolType string `json:"protocol_type"`
	Members      int    `json:"members"`
	Coordinator  int32  `json:"coordinator"`
}

var groupListTable = tableOf([]string{"GROUP", "STATE", "PROTOCOL TYPE", "MEMBERS", "COORDINATOR"}, "No groups.", func(g groupSummary) []string {
	return []string{g.Group, g.State, orDash(g.ProtocolType), fmt.Sprint(g.Members), fmt.Sprint(g.Coordinator)}
})

func newGroupListCmd() *cobra.Command {
	var g groupCLIFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List consumer groups: state, protocol type, members, coordinator",
		Long: `List every consumer group the brokers' coordinators hold (ListGroups to every
broker), then describe them (DescribeGroups) for their member counts. With
ACLs, a client without DESCRIBE on the cluster sees only the groups it may
DESCRIBE.`,
		Example: `  keel group list --bootstrap 127.0.0.1:9092
  keel group list -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, adm groupAdmin) error {
				listed, err := adm.ListGroups(ctx)
				if err != nil {
					return fmt.Errorf("list groups: %w", err)
				}
				names := listed.Groups()
				sort.Strings(names)
				rows := []groupSummary{}
				if len(names) > 0 {
					described, err := adm.DescribeGroups(ctx, names...)
					if err != nil {
						return fmt.Errorf("describe groups: %w", err)
					}
					for _, name := range names {
						d, ok := described[name]
						if !ok {
							continue // gone since it was listed
						}
						if d.Err != nil {
							return adm.explain(ctx, name, d.Err)
						}
						rows = append(rows, groupSummary{Group: name, State: d.State, ProtocolType: d.ProtocolType,
							Members: len(d.Members), Coordinator: d.Coordinator.NodeID})
					}
				}
				return printAs(cmd.OutOrStdout(), g.output, rows, groupListTable)
			})
		},
	}
	g.add(cmd)
	g.addOutput(cmd)
	return cmd
}

// groupView is the JSON contract of `keel group describe`, one per group.
type groupView struct {
	Group        string              `json:"group"`
	State        string              `json:"state"`
	ProtocolType string              `json:"protocol_type"`
	Protocol     string              `json:"protocol"`
	Coordinator  int32               `json:"coordinator"`
	Members      []groupMemberRow    `json:"members"`
	Partitions   []groupPartitionRow `json:"partitions"`
}

// groupMemberRow is one member of a group and what it was assigned.
type groupMemberRow struct {
	MemberID   string             `json:"member_id"`
	InstanceID string             `json:"instance_id,omitempty"`
	ClientID   string             `json:"client_id"`
	Host       string             `json:"host"`
	Assigned   map[string][]int32 `json:"assigned"`
}

// groupPartitionRow is a partition the group has committed an offset for or
// a member is assigned, as kafka-consumer-groups.sh --describe prints it.
// CommittedOffset is -1 without a commit; Lag is -1 when unknown (the log
// end could not be listed). Owner is the member assigned it, if any.
type groupPartitionRow struct {
	Topic           string `json:"topic"`
	Partition       int32  `json:"partition"`
	CommittedOffset int64  `json:"committed_offset"`
	LogEndOffset    int64  `json:"log_end_offset"`
	Lag             int64  `json:"lag"`
	Owner           string `json:"owner,omitempty"`
	Host            string `json:"host,omitempty"`
	ClientID        string `json:"client_id,omitempty"`
	Error           string `json:"error,omitempty"`
}

// groupViewOf turns kadm's description of a group with its lag into what
// describe prints: members by member id, partitions by topic and partition.
func groupViewOf(l kadm.DescribedGroupLag) groupView {
	v := groupView{Group: l.Group, State: l.State, ProtocolType: l.ProtocolType, Protocol: l.Protocol,
		Coordinator: l.Coordinator.NodeID, Members: []groupMemberRow{}, Partitions: []groupPartitionRow{}}
	for _, m := range l.Members {
		row := groupMemberRow{MemberID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, Assigned: map[string][]int32{}}
		if m.InstanceID != nil {
			row.InstanceID = *m.InstanceID
		}
		if c, ok := m.Assigned.AsConsumer(); ok {
			row.Assigned = assignedOf(c.Topics)
		}
		v.Members = append(v.Members, row)
	}
	sort.Slice(v.Members, func(i, j int) bool { return v.Members[i].MemberID < v.Members[j].MemberID })
	for _, p := range l.Lag.Sorted() {
		row := groupPartitionRow{Topic: p.Topic, Partition: p.Partition, CommittedOffset: p.Commit.At,
			LogEndOffset: p.End.Offset, Lag: p.Lag}
		if p.End.Err != nil {
			row.LogEndOffset = -1
		}
		if p.Member != nil {
			row.Owner, row.Host, row.ClientID = p.Member.MemberID, p.Member.ClientHost, p.Member.ClientID
		}
		if p.Err != nil {
			row.Error = p.Err.Error()
		}
		v.Partitions = append(v.Partitions, row)
	}
	return v
}

// assignedOf is a consumer's assignment by topic, partitions in order.
func assignedOf(topics []kmsg.ConsumerMemberAssignmentTopic) map[string][]int32 {
	out := map[string][]int32{}
	for _, t := range topics {
		out[t.Topic] = sortedUnique(append(out[t.Topic], t.Partitions...))
	}
	return out
}

// assignedString prints an assignment as topic:p,p topic:p, topics in order.
func assignedString(a map[string][]int32) string {
	topics := make([]string, 0, len(a))
	for t := range a {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	var parts []string
	for _, t := range topics {
		parts = append(parts, t+":"+joinInt32(a[t], ","))
	}
	return orDash(strings.Join(parts, " "))
}

func joinInt32(xs []int32, sep string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, sep)
}

// offsetOrDash prints an offset, or - for none (-1).
func offsetOrDash(o int64) string {
	if o < 0 {
		return "-"
	}
	return fmt.Sprint(o)
}

var (
	groupPartitionTable = tableOf([]string{"TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"},
		"No committed offsets and no assigned partitions.", func(r groupPartitionRow) []string {
			lag := offsetOrDash(r.Lag)
			if r.Error != "" {
				lag = "- (" + r.Error + ")"
			}
			return []string{r.Topic, fmt.Sprint(r.Partition), offsetOrDash(r.CommittedOffset), offsetOrDash(r.LogEndOffset), lag,
				orDash(r.Owner), orDash(r.Host), orDash(r.ClientID)}
		})
	groupMemberTable = tableOf([]string{"CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "ASSIGNMENT"},
		"No active members.", func(r groupMemberRow) []string {
			return []string{r.MemberID, orDash(r.InstanceID), orDash(r.Host), orDash(r.ClientID), assignedString(r.Assigned)}
		})
)

// groupViewsTable prints each group: a heading line, its partitions, then
// its members.
func groupViewsTable(w io.Writer, vs []groupView) error {
	for i, v := range vs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "GROUP %s: state %s, protocol %s/%s, %d members, coordinator %d\n",
			v.Group, v.State, orDash(v.ProtocolType), orDash(v.Protocol), len(v.Members), v.Coordinator)
		if err := groupPartitionTable(w, v.Partitions); err != nil {
			return err
		}
		fmt.Fprintln(w)
		if err := groupMemberTable(w, v.Members); err != nil {
			return err
		}
	}
	return nil
}

func newGroupDescribeCmd() *cobra.Command {
	var g groupCLIFlags
	cmd := &cobra.Command{
		Use:   "describe GROUP...",
		Short: "Describe consumer groups: committed offsets and lag per partition, members and their assignments",
		Long: `Describe each group as kafka-consumer-groups.sh --describe does: per partition
the group has committed an offset for or a member is assigned, its committed
offset, log end offset, lag and owner; then each member with its instance id
(static membership), client id, host and assigned partitions. A group that
does not exist is described in state Dead.`,
		Example: `  keel group describe orders-app --bootstrap 127.0.0.1:9092
  keel group describe orders-app billing -o json`,
		Args: groupArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.run(cmd, func(ctx context.Context, adm groupAdmin) error {
				lags, err := adm.Lag(ctx, args...)
				if err != nil {
					return adm.explain(ctx, args[0], err)
				}
				var views []groupView
				for _, name := range args {
					l, ok := lags[name]
					if !ok {
						return fmt.Errorf("group %s: not in the brokers' answer", name)
					}
					if err := l.Error(); err != nil {
						return adm.explain(ctx, name, err)
					}
					views = append(views, groupViewOf(l))
				}
				return printAs(cmd.OutOrStdout(), g.output, views, groupViewsTable)
			})
		},
	}
	g.add(cmd)
	g.addOutput(cmd)
	return cmd
}

func newGroupDeleteCmd() *cobra.Command {
	var g groupCLIFlags
	cmd := &cobra.Command{
		Use:   "delete GROUP...",
		Short: "Delete consumer groups that have no members, with their committed offsets",
		Long: `Delete each group and its committed offsets (DeleteGroups). A group with
active members is refused (NON_EMPTY_GROUP): stop its consumers first. It
prints each group deleted and fails naming every one that was not.`,
		Example: `  keel group delete orders-app --bootstrap 127.0.0.1:9092`,
		Args:    groupArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.run(cmd, func(ctx context.Context, adm groupAdmin) error {
				resps, err := adm.DeleteGroups(ctx, args...)
				if err != nil {
					return adm.explain(ctx, args[0], err)
				}
				var failed []string
				for _, name := range args {
					r, ok := resps[name]
					switch {
					case !ok:
						failed = append(failed, fmt.Sprintf("group %s: not in the brokers' answer", name))
					case r.Err != nil:
						failed = append(failed, adm.explain(ctx, name, r.Err).Error())
					default:
						fmt.Fprintf(cmd.OutOrStdout(), "deleted group %s\n", name)
					}
				}
				if len(failed) > 0 {
					return errors.New(strings.Join(failed, "; "))
				}
				return nil
			})
		},
	}
	g.add(cmd)
	return cmd
}
