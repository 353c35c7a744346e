package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

func newPartitionCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "partition", Short: "Add partitions, elect leaders, reassign replicas; show offsets, log dirs and segments"}
	cmd.AddCommand(newAddPartitionsCmd(), newElectCmd(), newReassignCmd(), newReassignmentsCmd(),
		newPartitionOffsetsCmd(), newPartitionLogDirsCmd(), newPartitionDumpCmd())
	return cmd
}

// parseID parses one non-negative 32-bit number: a partition index or a
// broker id. Only decimal digits are accepted (no sign, no spaces inside).
func parseID(s string) (int32, error) {
	switch {
	case s == "":
		return 0, errors.New("empty")
	case s[0] == '-' && len(s) > 1 && strings.Trim(s[1:], "0123456789") == "":
		return 0, fmt.Errorf("%s: want 0 or more", s)
	case strings.Trim(s, "0123456789") != "":
		return 0, fmt.Errorf("%q is not a number", s)
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%s is too large (at most %d)", s, math.MaxInt32)
	}
	return int32(n), nil
}

// parseReplicas parses a replica list, "4,5,6": broker ids, in order, each
// once. Spaces around an id are allowed; empty items are not.
func parseReplicas(s string) ([]int32, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("no replicas: want broker ids, e.g. 1,2,3")
	}
	var out []int32
	for i, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("replica %d is empty", i+1)
		}
		id, err := parseID(item)
		if err != nil {
			return nil, fmt.Errorf("replica %d: broker id %v", i+1, err)
		}
		if slices.Contains(out, id) {
			return nil, fmt.Errorf("broker %d is listed twice", id)
		}
		out = append(out, id)
	}
	return out, nil
}

// parseAssignment parses an explicit assignment, "0:1,2,3;1:2,3,1": entries
// separated by ';', each a partition index, ':', and its replicas (see
// parseReplicas). Partitions must be consecutive and in order, starting at
// first, and all have the same number of replicas. Spaces around items are
// allowed; empty entries are not.
func parseAssignment(s string) (first int32, replicas [][]int32, err error) {
	if strings.TrimSpace(s) == "" {
		return 0, nil, errors.New(`empty: want "partition:broker,broker,...;...", e.g. "0:1,2,3;1:2,3,1"`)
	}
	for i, entry := range strings.Split(s, ";") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return 0, nil, fmt.Errorf("entry %d is empty", i+1)
		}
		index, list, ok := strings.Cut(entry, ":")
		if !ok {
			return 0, nil, fmt.Errorf("entry %d, %q: want partition:broker,broker (e.g. 0:1,2,3)", i+1, entry)
		}
		p, err := parseID(strings.TrimSpace(index))
		if err != nil {
			return 0, nil, fmt.Errorf("entry %d: partition %v", i+1, err)
		}
		if i == 0 {
			first = p
		} else if want := int64(first) + int64(i); int64(p) != want {
			switch {
			case int64(p) > want:
				return 0, nil, fmt.Errorf("partition %d follows partition %d: partition %d is missing", p, want-1, want)
			case p >= first:
				return 0, nil, fmt.Errorf("partition %d is given twice", p)
			default:
				return 0, nil, fmt.Errorf("partition %d follows partition %d: partitions must be in order", p, want-1)
			}
		}
		r, err := parseReplicas(list)
		if err != nil {
			return 0, nil, fmt.Errorf("partition %d: %w", p, err)
		}
		if i > 0 && len(r) != len(replicas[0]) {
			return 0, nil, fmt.Errorf("partition %d has %d replicas, partition %d has %d: every partition needs the same number",
				p, len(r), first, len(replicas[0]))
		}
		replicas = append(replicas, r)
	}
	return first, replicas, nil
}

// formatAssignment is the inverse of parseAssignment.
func formatAssignment(first int32, replicas [][]int32) string {
	entries := make([]string, len(replicas))
	for i, r := range replicas {
		entries[i] = fmt.Sprintf("%d:%s", int64(first)+int64(i), joinIDs(r))
	}
	return strings.Join(entries, ";")
}

// addPartitionsFlags are the flags of `keel partition add-partitions`.
type addPartitionsFlags struct {
	topic        string
	count        int32
	assignment   string
	validateOnly bool
}

// request checks the flags and builds the request, before any RPC.
func (f *addPartitionsFlags) request(changed func(flag string) bool) (*keelpb.CreatePartitionsRequest, error) {
	if f.topic == "" {
		return nil, errors.New("--topic is required")
	}
	req := &keelpb.CreatePartitionsRequest{Topic: f.topic, Count: f.count, ValidateOnly: f.validateOnly}
	if changed("assignment") {
		first, assignment, err := parseAssignment(f.assignment)
		if err != nil {
			return nil, fmt.Errorf("--assignment: %w", err)
		}
		// Validated by parseAssignment: the last index fits an int32.
		count := first + int32(len(assignment))
		if changed("count") && f.count != count {
			return nil, fmt.Errorf("--count %d disagrees with --assignment, whose last partition is %d (a count of %d)", f.count, count-1, count)
		}
		req.Count = count
		for _, r := range assignment {
			req.Assignments = append(req.Assignments, &keelpb.PartitionAssignment{Replicas: r})
		}
		return req, nil
	}
	switch {
	case !changed("count"):
		return nil, errors.New("--count is required: the new total number of partitions")
	case f.count < 1:
		return nil, fmt.Errorf("--count %d: want the new total number of partitions, at least 1", f.count)
	}
	return req, nil
}

func newAddPartitionsCmd() *cobra.Command {
	a := &adminFlags{}
	f := &addPartitionsFlags{}
	cmd := &cobra.Command{
		Use:   "add-partitions",
		Short: "Raise a topic's partition count",
		Long: `Raise a topic's partition count to --count. The active controller places the
new partitions, or --assignment gives their replicas: the new partitions only,
numbered from the topic's current count up to --count - 1 (which --count may
then be left out for).

Prints the topic as 'keel topic describe' does.`,
		Example: `  keel partition add-partitions --topic orders --count 12
  keel partition add-partitions --topic orders --assignment "6:1,2,3;7:2,3,1"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := f.request(cmd.Flags().Changed)
			if err != nil {
				return err
			}
			return writeTopic(cmd, a, req.Topic, req.ValidateOnly, "got its partitions", func(ctx context.Context, c *rpc.Client) (*keelpb.TopicDescription, error) {
				resp, err := c.CreatePartitions(ctx, req)
				return resp.GetTopic(), err
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.topic, "topic", "", "the topic (required)")
	fl.Int32Var(&f.count, "count", 0, "the new total number of partitions (required without --assignment)")
	fl.StringVar(&f.assignment, "assignment", "", `replicas of the new partitions, "partition:broker,broker,...;...", e.g. "6:1,2,3;7:2,3,1"`)
	fl.BoolVar(&f.validateOnly, "validate-only", false, "check the request and show the result, but change nothing")
	a.add(cmd)
	return cmd
}

// electFlags are the flags of `keel partition elect`.
type electFlags struct {
	typ       string
	topic     string
	partition int32
	all       bool
}

// request checks the flags and builds the request, before any RPC. With
// --topic alone the request names no partition yet: wholeTopic is true and
// the caller adds every partition of the topic.
func (f *electFlags) request(changed func(flag string) bool) (req *keelpb.ElectLeadersRequest, wholeTopic bool, err error) {
	req = &keelpb.ElectLeadersRequest{}
	switch f.typ {
	case "preferred":
		req.Type = keelpb.ElectionType_ELECTION_TYPE_PREFERRED
	case "unclean":
		req.Type = keelpb.ElectionType_ELECTION_TYPE_UNCLEAN
	case "":
		return nil, false, errors.New("--type is required: preferred or unclean")
	default:
		return nil, false, fmt.Errorf("--type %q: want preferred or unclean", f.typ)
	}
	hasPartition := changed("partition")
	switch {
	case f.all && (f.topic != "" || hasPartition):
		return nil, false, errors.New("--all elects for every partition: give it without --topic and --partition")
	case f.all:
		req.All = true
		return req, false, nil
	case f.topic == "" && hasPartition:
		return nil, false, errors.New("--partition needs --topic")
	case f.topic == "":
		return nil, false, errors.New("give --topic T [--partition P], or --all")
	case hasPartition && f.partition < 0:
		return nil, false, fmt.Errorf("--partition %d: want a partition index, 0 or more", f.partition)
	case hasPartition:
		req.Partitions = []*keelpb.TopicPartition{{Topic: f.topic, Partition: f.partition}}
		return req, false, nil
	}
	return req, true, nil
}

// sortByPartition orders rows by topic, then partition, as key gives them.
func sortByPartition[R any](rows []R, key func(R) (topic string, partition int32)) {
	sort.Slice(rows, func(i, j int) bool {
		ti, pi := key(rows[i])
		tj, pj := key(rows[j])
		if ti != tj {
			return ti < tj
		}
		return pi < pj
	})
}

// electionRow is what `keel partition elect -o json` prints per partition.
type electionRow struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Leader    int32  `json:"leader"`
	Error     string `json:"error"`
}

func newElectCmd() *cobra.Command {
	a := &adminFlags{}
	f := &electFlags{}
	cmd := &cobra.Command{
		Use:   "elect",
		Short: "Run a preferred or unclean leader election",
		Long: `Run a leader election on one partition, every partition of a topic, or every
partition (--all). A preferred election moves leadership back to the first
replica when it is in the ISR; an unclean one may choose a live replica
outside the ISR for a partition without a leader, at the risk of losing
data.

Prints one result per partition, with the reason where no election
happened; the exit status is 0 unless the request itself failed.`,
		Example: `  keel partition elect --type preferred --all
  keel partition elect --type preferred --topic orders
  keel partition elect --type unclean --topic orders --partition 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, wholeTopic, err := f.request(cmd.Flags().Changed)
			if err != nil {
				return err
			}
			return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) ([]electionRow, error) {
				if wholeTopic {
					d, err := c.DescribeTopic(ctx, f.topic)
					if err != nil {
						return nil, err
					}
					for _, p := range describeView(d.GetTopic()).Partitions {
						req.Partitions = append(req.Partitions, &keelpb.TopicPartition{Topic: f.topic, Partition: p.Partition})
					}
					if len(req.Partitions) == 0 {
						return nil, fmt.Errorf("topic %q has no partitions", f.topic)
					}
				}
				resp, err := c.ElectLeaders(ctx, req)
				if err != nil {
					return nil, err
				}
				rows := make([]electionRow, 0, len(resp.GetResults()))
				for _, r := range resp.GetResults() {
					rows = append(rows, electionRow{Topic: r.GetTopic(), Partition: r.GetPartition(), Leader: r.GetLeader(), Error: r.GetError()})
				}
				sortByPartition(rows, func(r electionRow) (string, int32) { return r.Topic, r.Partition })
				return rows, nil
			}, tableOf([]string{"TOPIC", "PARTITION", "LEADER", "RESULT"}, "No partitions.", func(r electionRow) []string {
				result := "ok"
				if r.Error != "" {
					result = r.Error
				}
				return []string{r.Topic, fmt.Sprint(r.Partition), leaderCell(r.Leader), result}
			}))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.typ, "type", "", "election type: preferred or unclean (required)")
	fl.StringVar(&f.topic, "topic", "", "elect for this topic's partitions")
	fl.Int32Var(&f.partition, "partition", -1, "elect for this partition of --topic only")
	hidePlaceholder(fl, "partition")
	fl.BoolVar(&f.all, "all", false, "elect for every partition of every topic")
	a.add(cmd)
	return cmd
}

// reassignFlags are the flags of `keel partition reassign`.
type reassignFlags struct {
	topic     string
	partition int32
	replicas  string
	cancel    bool
	// The plan forms.
	plan     string
	verify   string
	generate bool
	topics   string
	brokers  string
}

// The forms of `keel partition reassign`.
const (
	reassignOne      = iota // --topic --partition --replicas|--cancel
	reassignPlan            // --plan FILE [--cancel]
	reassignGenerate        // --generate --topics --brokers
	reassignVerify          // --verify FILE
)

// form checks which form the flags ask for, and that they do not mix forms.
func (f *reassignFlags) form(changed func(flag string) bool) (int, error) {
	given := func(flags ...string) []string {
		var out []string
		for _, fl := range flags {
			if changed(fl) {
				out = append(out, "--"+fl)
			}
		}
		return out
	}
	single := []string{"topic", "partition", "replicas"}
	switch {
	case changed("plan"):
		if extra := given(append(single, "verify", "generate", "topics", "brokers")...); len(extra) > 0 {
			return 0, fmt.Errorf("--plan takes the partitions from the file: give it without %s", strings.Join(extra, ", "))
		}
		return reassignPlan, nil
	case changed("verify"):
		if extra := given(append(single, "cancel", "generate", "topics", "brokers")...); len(extra) > 0 {
			return 0, fmt.Errorf("--verify checks the plan file's partitions: give it without %s", strings.Join(extra, ", "))
		}
		return reassignVerify, nil
	case f.generate:
		if extra := given(append(single, "cancel")...); len(extra) > 0 {
			return 0, fmt.Errorf("--generate proposes a plan for --topics over --brokers: give it without %s", strings.Join(extra, ", "))
		}
		return reassignGenerate, nil
	case changed("topics") || changed("brokers"):
		return 0, errors.New("--topics and --brokers go with --generate")
	}
	return reassignOne, nil
}

// forbidsThrottle names the flag of a form that starts no move, which
// --throttle cannot go with; empty for a form that starts moves.
func (f *reassignFlags) forbidsThrottle(form int) string {
	switch {
	case form == reassignVerify:
		return "--verify"
	case form == reassignGenerate:
		return "--generate"
	case f.cancel:
		return "--cancel"
	}
	return ""
}

// request checks the flags of the single form and builds its request,
// before any RPC. An empty replica list in the request cancels.
func (f *reassignFlags) request(changed func(flag string) bool) (*keelpb.AlterPartitionReassignmentsRequest, error) {
	switch {
	case f.topic == "":
		return nil, errors.New("--topic is required (or --plan FILE, --generate, --verify FILE)")
	case !changed("partition"):
		return nil, errors.New("--partition is required")
	case f.partition < 0:
		return nil, fmt.Errorf("--partition %d: want a partition index, 0 or more", f.partition)
	case f.cancel && changed("replicas"):
		return nil, errors.New("--cancel takes no --replicas")
	case !f.cancel && !changed("replicas"):
		return nil, errors.New("give --replicas B1,B2,... (the target replicas), or --cancel")
	}
	req := &keelpb.AlterPartitionReassignmentsRequest{Topic: f.topic, Partition: f.partition}
	if !f.cancel {
		r, err := parseReplicas(f.replicas)
		if err != nil {
			return nil, fmt.Errorf("--replicas: %w", err)
		}
		req.Replicas = r
	}
	return req, nil
}

// reassignView is what `keel partition reassign -o json` prints: the
// partition as it is once the request is accepted.
type reassignView struct {
	Topic string `json:"topic"`
	partitionRow
}

func newReassignCmd() *cobra.Command {
	a := &adminFlags{}
	f := &reassignFlags{}
	th := &throttleFlag{}
	cmd := &cobra.Command{
		Use:   "reassign",
		Short: "Move partitions to new replicas: one, or a plan of many; generate and verify plans",
		Long: `Move a partition to the target replicas: the controller adds the new ones,
waits until every target replica is in the ISR, then switches to the target
set, electing a leader from it if the old leader leaves. Until then the
replicas being removed stay, in the ISR and leading. A move over an ongoing
one replaces it; a move to the current replicas changes nothing.

--cancel stops an ongoing move and returns the partition to its replicas
before the move (those being added leave). It is refused when only replicas
being added are in the ISR, unless the topic allows unclean leader election.

Plans use the JSON of Kafka's kafka-reassign-partitions:
  {"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[4,5,6]}]}
(log_dirs may be given, as "any" only.)

--plan FILE starts every move of the plan in one request: the controller
accepts them all, or refuses the whole plan, naming the entry, when any is
invalid. It first prints the current assignment of the plan's partitions:
save it, it is the plan that rolls the change back. With --cancel it
cancels the plan's ongoing moves instead.

--generate --topics T1,T2 --brokers 1,2,3 writes nothing: it prints the
topics' current assignment and a proposed one over the brokers given, each
partition keeping its replication factor, placed as topic creation places
replicas (racks interleaved, preferred leaders spread evenly). Save the
proposal to a file, edit it if you like, and run it with --plan.

--throttle RATE (bytes/s: 10MB, 50MiB) with a move or --plan caps the bytes/s
each broker sends, as leader, and fetches, as follower, for the replicas the
moves add (Kafka's leader.replication.throttled.rate and
follower.replication.throttled.rate, which it sets); replicas in sync are
never throttled. The controller deletes both rates when the last move in
progress completes, whoever set them.

--verify FILE prints, per partition of the plan, whether its move is
complete, still in progress, or not what the plan asks; the exit status is 1
until every partition is complete.

The single form prints the partition as it is once the request is accepted;
follow a move with --verify, 'keel partition reassignments' or
'keel topic describe'.`,
		Example: `  keel partition reassign --topic orders --partition 0 --replicas 4,5,6
  keel partition reassign --topic orders --partition 0 --cancel
  keel partition reassign --generate --topics orders,payments --brokers 4,5,6
  keel partition reassign --plan move.json --throttle 50MiB
  keel partition reassign --verify move.json
  keel partition reassign --plan move.json --cancel`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			form, err := f.form(cmd.Flags().Changed)
			if err != nil {
				return err
			}
			if err := th.check(cmd, f.forbidsThrottle(form)); err != nil {
				return err
			}
			switch form {
			case reassignPlan:
				if f.cancel {
					return runPlanCancel(cmd, a, f.plan)
				}
				return runPlan(cmd, a, f.plan, th)
			case reassignGenerate:
				return runGenerate(cmd, a, f.topics, f.brokers)
			case reassignVerify:
				return runVerify(cmd, a, f.verify)
			}
			req, err := f.request(cmd.Flags().Changed)
			if err != nil {
				return err
			}
			return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) (reassignView, error) {
				if err := th.set(ctx, c); err != nil {
					return reassignView{}, err
				}
				resp, err := c.AlterPartitionReassignments(ctx, req)
				if err = th.started(ctx, c, err); err != nil {
					return reassignView{}, err
				}
				p := resp.GetPartition()
				if p == nil {
					return reassignView{}, fmt.Errorf("topic %q partition %d: the controller accepted the request but answered without the partition", req.Topic, req.Partition)
				}
				return reassignView{Topic: req.Topic, partitionRow: partitionView(p)}, nil
			}, func(w io.Writer, v reassignView) error {
				if f.cancel {
					fmt.Fprintf(w, "cancelled the reassignment of topic %s partition %d\n\n", req.Topic, req.Partition)
				} else {
					fmt.Fprintf(w, "reassigning topic %s partition %d to %s\n\n", req.Topic, req.Partition, joinIDs(req.Replicas))
				}
				return printTable(w, [][]string{partitionHeader, partitionCells(v.partitionRow)})
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.topic, "topic", "", "the topic (the single form)")
	fl.Int32Var(&f.partition, "partition", -1, "the partition (the single form)")
	hidePlaceholder(fl, "partition")
	fl.StringVar(&f.replicas, "replicas", "", "the target replicas, broker ids in preference order, e.g. 4,5,6")
	fl.BoolVar(&f.cancel, "cancel", false, "cancel the partition's ongoing reassignment (with --plan: the plan's)")
	fl.StringVar(&f.plan, "plan", "", "start every move of this plan file (Kafka's reassignment JSON), in one request")
	fl.StringVar(&f.verify, "verify", "", "report the progress of this plan file's moves; exit status 1 until all are complete")
	fl.BoolVar(&f.generate, "generate", false, "print the current assignment of --topics and a proposed one over --brokers; writes nothing")
	fl.StringVar(&f.topics, "topics", "", "with --generate: the topics to move, T1,T2,...")
	fl.StringVar(&f.brokers, "brokers", "", "with --generate: the brokers to move them to, B1,B2,...")
	th.add(cmd)
	a.add(cmd)
	return cmd
}

// reassignmentRow is what `keel partition reassignments -o json` prints.
type reassignmentRow struct {
	Topic            string  `json:"topic"`
	Partition        int32   `json:"partition"`
	Replicas         []int32 `json:"replicas"`
	AddingReplicas   []int32 `json:"adding_replicas"`
	RemovingReplicas []int32 `json:"removing_replicas"`
	// The replication throttle in effect, bytes/s (none: omitted); it
	// caps the replicas the moves add.
	LeaderThrottledRate   *int64 `json:"leader_replication_throttled_rate,omitempty"`
	FollowerThrottledRate *int64 `json:"follower_replication_throttled_rate,omitempty"`
}

func newReassignmentsCmd() *cobra.Command {
	a := &adminFlags{}
	r := &readFlags{}
	cmd := &cobra.Command{
		Use:   "reassignments",
		Short: "List the ongoing reassignments, and the replication throttle in effect",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var leader, follower int64
			return readCall(cmd, a, r, func(ctx context.Context, c *rpc.Client, opts []rpc.ReadOption) ([]reassignmentRow, *keelpb.ReadSource, error) {
				resp, err := c.ListPartitionReassignments(ctx, opts...)
				if err != nil {
					return nil, nil, err
				}
				rows := make([]reassignmentRow, 0, len(resp.GetReassignments()))
				if len(resp.GetReassignments()) > 0 {
					if leader, follower, err = throttleInEffect(ctx, c, opts...); err != nil {
						return nil, nil, err
					}
				}
				for _, r := range resp.GetReassignments() {
					row := reassignmentRow{Topic: r.GetTopic(), Partition: r.GetPartition(), Replicas: ids(r.GetReplicas()),
						AddingReplicas: ids(r.GetAddingReplicas()), RemovingReplicas: ids(r.GetRemovingReplicas())}
					if leader != math.MaxInt64 {
						row.LeaderThrottledRate = &leader
					}
					if follower != math.MaxInt64 {
						row.FollowerThrottledRate = &follower
					}
					rows = append(rows, row)
				}
				sortByPartition(rows, func(r reassignmentRow) (string, int32) { return r.Topic, r.Partition })
				return rows, resp.GetSource(), nil
			}, func(w io.Writer, rows []reassignmentRow) error {
				if len(rows) > 0 && (leader != math.MaxInt64 || follower != math.MaxInt64) {
					fmt.Fprintf(w, "Replication throttle: leader %s, follower %s\n\n", formatRate(leader), formatRate(follower))
				}
				return tableOf([]string{"TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"}, "No reassignments in progress.", func(r reassignmentRow) []string {
					return []string{r.Topic, fmt.Sprint(r.Partition), joinIDs(r.Replicas), joinIDs(r.AddingReplicas), joinIDs(r.RemovingReplicas)}
				})(w, rows)
			})
		},
	}
	a.add(cmd)
	r.add(cmd)
	return cmd
}
