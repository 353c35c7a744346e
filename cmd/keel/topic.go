package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

func newTopicCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "topic", Short: "Create, alter, delete, list and describe topics"}
	cmd.AddCommand(newTopicCreateCmd(), newTopicAlterCmd(), newTopicDeleteCmd(), newTopicListCmd(), newTopicDescribeCmd())
	return cmd
}

// topicNameArg accepts exactly one positional argument, the topic name.
func topicNameArg(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) == 0 || strings.TrimSpace(args[0]) == "":
		return fmt.Errorf("topic name required: %s", cmd.UseLine())
	case len(args) > 1:
		return fmt.Errorf("want one topic name, got %d: %q", len(args), args)
	}
	return nil
}

// topicSummary is the JSON contract of `keel topic list` (DESIGN.md).
type topicSummary struct {
	Name              string `json:"name"`
	ID                string `json:"id"`
	Partitions        int32  `json:"partitions"`
	ReplicationFactor int32  `json:"replication_factor"`
}

// topicView is the JSON contract of `keel topic describe` (DESIGN.md); topic
// create and partition add-partitions print the topic the same way.
// Configs are the topic's own; EffectiveConfigs every config in effect.
type topicView struct {
	Name             string            `json:"name"`
	ID               string            `json:"id"`
	Configs          map[string]string `json:"configs"`
	EffectiveConfigs []configRow       `json:"effective_configs"`
	Partitions       []partitionRow    `json:"partitions"`
}

type partitionRow struct {
	Partition        int32   `json:"partition"`
	Leader           int32   `json:"leader"`
	LeaderEpoch      int32   `json:"leader_epoch"`
	PartitionEpoch   int32   `json:"partition_epoch"`
	Replicas         []int32 `json:"replicas"`
	ISR              []int32 `json:"isr"`
	AddingReplicas   []int32 `json:"adding_replicas"`
	RemovingReplicas []int32 `json:"removing_replicas"`
	// Eligible leader replicas (KIP-966) and the last known leader.
	ELR          []int32 `json:"eligible_leader_replicas"`
	LastKnownELR []int32 `json:"last_known_elr"`
	// recovered, or recovering after an unclean election (KIP-704).
	LeaderRecoveryState string `json:"leader_recovery_state"`
	// Why a partition without a leader has none, and what it waits for.
	NoLeaderReason string `json:"no_leader_reason,omitempty"`
}

// configRow is one config in effect, as `keel topic describe`, `keel topic
// alter` and `keel config describe|alter` print it: source is topic,
// cluster_default or default.
type configRow struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source string `json:"source"`
}

// configRows turns configs in effect into their printed form, in name order.
func configRows(cs []*keelpb.ConfigEntry) []configRow {
	rows := make([]configRow, 0, len(cs))
	for _, c := range cs {
		if c != nil {
			rows = append(rows, configRow{Name: c.GetName(), Value: c.GetValue(), Source: configSourceName(c.GetSource())})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return rows
}

func configSourceName(s keelpb.ConfigSource) string {
	switch s {
	case keelpb.ConfigSource_CONFIG_SOURCE_TOPIC:
		return "topic"
	case keelpb.ConfigSource_CONFIG_SOURCE_CLUSTER_DEFAULT:
		return "cluster_default"
	case keelpb.ConfigSource_CONFIG_SOURCE_DEFAULT:
		return "default"
	}
	return "unknown"
}

var configTable = tableOf([]string{"CONFIG", "VALUE", "SOURCE"}, "No configs.", func(r configRow) []string {
	return []string{r.Name, orDash(r.Value), r.Source}
})

// recoveryStateName is a leader recovery state as the CLI prints it.
func recoveryStateName(s keelpb.LeaderRecoveryState) string {
	switch s {
	case keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERED:
		return "recovered"
	case keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERING:
		return "recovering"
	}
	return fmt.Sprintf("unknown(%d)", s)
}

// describeView turns a topic description into its printed form: partitions
// in order, and no null where a list or map belongs.
func describeView(t *keelpb.TopicDescription) topicView {
	v := topicView{Name: t.GetName(), ID: t.GetId(), Configs: map[string]string{}, Partitions: make([]partitionRow, 0, len(t.GetPartitions())),
		EffectiveConfigs: configRows(t.GetEffectiveConfigs())}
	for k, val := range t.GetConfigs() {
		v.Configs[k] = val
	}
	for _, p := range t.GetPartitions() {
		if p != nil {
			v.Partitions = append(v.Partitions, partitionView(p))
		}
	}
	sort.Slice(v.Partitions, func(i, j int) bool { return v.Partitions[i].Partition < v.Partitions[j].Partition })
	return v
}

func partitionView(p *keelpb.PartitionDescription) partitionRow {
	return partitionRow{
		Partition:           p.GetPartition(),
		Leader:              p.GetLeader(),
		LeaderEpoch:         p.GetLeaderEpoch(),
		PartitionEpoch:      p.GetPartitionEpoch(),
		Replicas:            ids(p.GetReplicas()),
		ISR:                 ids(p.GetIsr()),
		AddingReplicas:      ids(p.GetAddingReplicas()),
		RemovingReplicas:    ids(p.GetRemovingReplicas()),
		ELR:                 ids(p.GetEligibleLeaderReplicas()),
		LastKnownELR:        ids(p.GetLastKnownElr()),
		LeaderRecoveryState: recoveryStateName(p.GetLeaderRecoveryState()),
		NoLeaderReason:      p.GetNoLeaderReason(),
	}
}

// ids copies a list of broker ids; never nil, so JSON shows [] for none.
func ids(in []int32) []int32 { return append([]int32{}, in...) }

// joinIDs renders broker ids for a table: "1,2,3", or "-" for none.
func joinIDs(in []int32) string {
	if len(in) == 0 {
		return "-"
	}
	s := make([]string, len(in))
	for i, id := range in {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ",")
}

// leaderCell renders a leader for a table, a partition's or the quorum's:
// -1 is "none".
func leaderCell(id int32) string {
	if id < 0 {
		return "none"
	}
	return fmt.Sprint(id)
}

// topicTable prints a topic as `keel topic describe` does.
func topicTable(w io.Writer, v topicView) error {
	keys := make([]string, 0, len(v.Configs))
	for k := range v.Configs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	configs := make([]string, len(keys))
	for i, k := range keys {
		configs[i] = k + "=" + v.Configs[k]
	}
	fmt.Fprintf(w, "Topic:   %s\nID:      %s\nConfigs: %s\n\n", v.Name, orDash(v.ID), orDash(strings.Join(configs, ", ")))
	// Every config in effect and its source, when the controller said.
	if len(v.EffectiveConfigs) > 0 {
		if err := configTable(w, v.EffectiveConfigs); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	if err := tableOf(partitionHeader, "No partitions.", partitionCells)(w, v.Partitions); err != nil {
		return err
	}
	// Too long for a column: each leaderless partition's reason below.
	for _, p := range v.Partitions {
		if p.NoLeaderReason != "" {
			if _, err := fmt.Fprintf(w, "partition %d: %s\n", p.Partition, p.NoLeaderReason); err != nil {
				return err
			}
		}
	}
	return nil
}

var partitionHeader = []string{"PARTITION", "LEADER", "LEADER EPOCH", "PARTITION EPOCH", "REPLICAS", "ISR", "ELR", "LAST KNOWN LEADER", "RECOVERY", "ADDING", "REMOVING"}

func partitionCells(p partitionRow) []string {
	return []string{fmt.Sprint(p.Partition), leaderCell(p.Leader), fmt.Sprint(p.LeaderEpoch), fmt.Sprint(p.PartitionEpoch),
		joinIDs(p.Replicas), joinIDs(p.ISR), joinIDs(p.ELR), joinIDs(p.LastKnownELR), p.LeaderRecoveryState,
		joinIDs(p.AddingReplicas), joinIDs(p.RemovingReplicas)}
}

// topicCreateFlags are the flags of `keel topic create`.
type topicCreateFlags struct {
	partitions        int32
	replicationFactor int32
	assignment        string
	configs           []string
	validateOnly      bool
}

// request checks the flags and builds the request, before any RPC. changed
// tells whether a flag was given on the command line.
func (f *topicCreateFlags) request(name string, changed func(flag string) bool) (*keelpb.CreateTopicRequest, error) {
	req := &keelpb.CreateTopicRequest{Name: name, ValidateOnly: f.validateOnly}
	if changed("assignment") {
		first, assignment, err := parseAssignment(f.assignment)
		if err != nil {
			return nil, fmt.Errorf("--assignment: %w", err)
		}
		if first != 0 {
			return nil, fmt.Errorf("--assignment: partitions must be numbered from 0, not %d", first)
		}
		n, rf := int32(len(assignment)), int32(len(assignment[0]))
		if changed("partitions") && f.partitions != n {
			return nil, fmt.Errorf("--partitions %d disagrees with --assignment, which has %s", f.partitions, count(int(n), "partition"))
		}
		if changed("replication-factor") && f.replicationFactor != rf {
			return nil, fmt.Errorf("--replication-factor %d disagrees with --assignment, which has %d replicas per partition", f.replicationFactor, rf)
		}
		req.Partitions, req.ReplicationFactor = n, rf
		for _, r := range assignment {
			req.Assignments = append(req.Assignments, &keelpb.PartitionAssignment{Replicas: r})
		}
	} else {
		switch {
		case !changed("partitions"):
			return nil, errors.New("--partitions is required (or give --assignment)")
		case f.partitions < 1:
			return nil, fmt.Errorf("--partitions %d: want at least 1", f.partitions)
		case !changed("replication-factor"):
			return nil, errors.New("--replication-factor is required (or give --assignment)")
		case f.replicationFactor < 1:
			return nil, fmt.Errorf("--replication-factor %d: want at least 1", f.replicationFactor)
		}
		req.Partitions, req.ReplicationFactor = f.partitions, f.replicationFactor
	}
	configs, err := parseConfigs(f.configs)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	req.Configs = configs
	return req, nil
}

// parseConfigs parses repeated key=value settings. Keys must be non-empty
// and given once; a value may be empty and may hold '=' or ','.
func parseConfigs(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok:
			return nil, fmt.Errorf("%q: want key=value", kv)
		case k == "":
			return nil, fmt.Errorf("%q: empty key", kv)
		case strings.ContainsFunc(k, func(r rune) bool { return r <= ' ' }):
			return nil, fmt.Errorf("%q: the key holds a space or control character", kv)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%s given twice", k)
		}
		out[k] = v
	}
	return out, nil
}

func newTopicCreateCmd() *cobra.Command {
	a := &adminFlags{}
	f := &topicCreateFlags{}
	var ifNotExists bool
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a topic, with placed replicas or an explicit assignment",
		Long: `Create a topic. Without --assignment the active controller places
--partitions partitions of --replication-factor replicas each, rack-aware and
with leaders spread evenly. --assignment gives every partition's replicas
instead, the first of each being its preferred leader.

Prints the topic as 'keel topic describe' does.`,
		Example: `  keel topic create orders --partitions 6 --replication-factor 3
  keel topic create orders --assignment "0:1,2,3;1:2,3,1;2:3,1,2"
  keel topic create audit --partitions 1 --replication-factor 3 --config unclean.leader.election.enable=true
  keel topic create orders --partitions 6 --replication-factor 3 --validate-only
  keel topic create orders --partitions 6 --replication-factor 3 --if-not-exists`,
		Args: topicNameArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := f.request(args[0], cmd.Flags().Changed)
			if err != nil {
				return err
			}
			return writeTopic(cmd, a, req.Name, req.ValidateOnly, "created", func(ctx context.Context, c *rpc.Client) (*keelpb.TopicDescription, error) {
				resp, err := c.CreateTopic(ctx, req)
				if ifNotExists && status.Code(err) == codes.AlreadyExists {
					// Kafka's --if-not-exists: the topic there is the answer.
					fmt.Fprintf(cmd.ErrOrStderr(), "topic %s already exists; nothing created\n", req.Name)
					d, derr := c.DescribeTopic(ctx, req.Name)
					if derr != nil {
						return nil, fmt.Errorf("topic %q already exists, but reading it failed: %s", req.Name, errorLine(derr))
					}
					return d.GetTopic(), nil
				}
				return resp.GetTopic(), err
			})
		},
	}
	fl := cmd.Flags()
	fl.Int32Var(&f.partitions, "partitions", 0, "number of partitions (required without --assignment)")
	fl.Int32Var(&f.replicationFactor, "replication-factor", 0, "replicas per partition (required without --assignment)")
	fl.StringVar(&f.assignment, "assignment", "", `explicit replicas, "partition:broker,broker,...;..." numbered from 0, e.g. "0:1,2,3;1:2,3,1"`)
	fl.StringArrayVar(&f.configs, "config", nil, "topic config key=value (repeatable), e.g. unclean.leader.election.enable=true")
	fl.BoolVar(&f.validateOnly, "validate-only", false, "check the request and show the result, but create nothing")
	fl.BoolVar(&ifNotExists, "if-not-exists", false, "if the topic exists, show it and succeed (its settings are not compared)")
	a.add(cmd)
	return cmd
}

// deletedTopic is what `keel topic delete -o json` prints.
type deletedTopic struct {
	Name    string `json:"name"`
	Deleted bool   `json:"deleted"`
}

func newTopicDeleteCmd() *cobra.Command {
	a := &adminFlags{}
	var ifExists bool
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a topic; its brokers stop and delete the replicas",
		Long: `Delete a topic. Its brokers stop and delete their replicas when they apply
the deletion; a broker that is down does so when it catches up.`,
		Args: topicNameArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) (deletedTopic, error) {
				err := c.DeleteTopic(ctx, args[0])
				if ifExists && status.Code(err) == codes.NotFound && rpc.ReasonOf(err) == rpc.ReasonUnknownTopicOrPartition {
					return deletedTopic{Name: args[0], Deleted: false}, nil
				}
				if err != nil {
					return deletedTopic{}, err
				}
				return deletedTopic{Name: args[0], Deleted: true}, nil
			}, func(w io.Writer, d deletedTopic) error {
				if !d.Deleted {
					fmt.Fprintf(w, "topic %s does not exist; nothing deleted\n", d.Name)
					return nil
				}
				fmt.Fprintf(w, "deleted topic %s\n", d.Name)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&ifExists, "if-exists", false, "succeed, deleting nothing, if there is no such topic")
	a.add(cmd)
	return cmd
}

func newTopicListCmd() *cobra.Command {
	a := &adminFlags{}
	r := &readFlags{}
	var pattern string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List topics: name, id, partition count, replication factor",
		Example: `  keel topic list
  keel topic list --pattern 'orders\..*'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			match, err := namePattern(pattern)
			if err != nil {
				return err
			}
			return readCall(cmd, a, r, func(ctx context.Context, c *rpc.Client, opts []rpc.ReadOption) ([]topicSummary, *keelpb.ReadSource, error) {
				resp, err := c.ListTopics(ctx, opts...)
				if err != nil {
					return nil, nil, err
				}
				rows := make([]topicSummary, 0, len(resp.GetTopics()))
				for _, t := range resp.GetTopics() {
					if !match(t.GetName()) {
						continue
					}
					rows = append(rows, topicSummary{Name: t.GetName(), ID: t.GetId(), Partitions: t.GetPartitions(), ReplicationFactor: t.GetReplicationFactor()})
				}
				sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
				return rows, resp.GetSource(), nil
			}, tableOf([]string{"NAME", "ID", "PARTITIONS", "REPLICATION FACTOR"}, "", func(r topicSummary) []string {
				return []string{r.Name, orDash(r.ID), fmt.Sprint(r.Partitions), fmt.Sprint(r.ReplicationFactor)}
			}))
		},
	}
	cmd.Flags().StringVar(&pattern, "pattern", "", "only topics whose whole name matches this regular expression (RE2), e.g. 'orders\\..*'")
	a.add(cmd)
	r.add(cmd)
	return cmd
}

// namePattern compiles --pattern to a test of a whole topic name, as
// Kafka's topic regexes match: "orders" matches orders, not orders-eu.
// An empty pattern matches every name.
func namePattern(pattern string) (func(string) bool, error) {
	if pattern == "" {
		return func(string) bool { return true }, nil
	}
	if _, err := regexp.Compile(pattern); err != nil {
		return nil, fmt.Errorf("--pattern %q: %v", pattern, strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	return regexp.MustCompile("^(?:" + pattern + ")$").MatchString, nil
}

// partitionFilters are topic describe's filters, Kafka's: a partition is
// shown when it matches any one given; none given shows every partition.
type partitionFilters struct {
	underReplicated, underMinISR, atMinISR, unavailable bool
}

func (f partitionFilters) any() bool {
	return f.underReplicated || f.underMinISR || f.atMinISR || f.unavailable
}

// defaultMinISR is Keel's built-in min.insync.replicas, Kafka's default.
const defaultMinISR = 1

// minISR is the min.insync.replicas a topic's partitions are measured
// against: the value in effect as the controller reports it (the topic's
// own, else the cluster default, else the built-in one), else the topic's
// own config, else the built-in default.
func minISR(v topicView) int {
	for _, c := range v.EffectiveConfigs {
		if c.Name == fsm.MinInsyncReplicas {
			if n, err := strconv.Atoi(c.Value); err == nil && n > 0 {
				return n
			}
		}
	}
	if n, err := strconv.Atoi(v.Configs[fsm.MinInsyncReplicas]); err == nil && n > 0 {
		return n
	}
	return defaultMinISR
}

// keep reports whether p, of a topic whose min ISR is min, passes f.
func (f partitionFilters) keep(p partitionRow, min int) bool {
	if !f.any() {
		return true
	}
	isr := len(p.ISR)
	return (f.underReplicated && isr < len(p.Replicas)) ||
		(f.underMinISR && isr < min) ||
		(f.atMinISR && isr == min) ||
		(f.unavailable && p.Leader < 0)
}

// filter returns v with only the partitions f keeps.
func (f partitionFilters) filter(v topicView) topicView {
	if !f.any() {
		return v
	}
	min := minISR(v)
	kept := make([]partitionRow, 0, len(v.Partitions))
	for _, p := range v.Partitions {
		if f.keep(p, min) {
			kept = append(kept, p)
		}
	}
	v.Partitions = kept
	return v
}

// describes names the filters given, as a sentence's predicate:
// "under-replicated or unavailable".
func (f partitionFilters) describes() string {
	var out []string
	for _, c := range []struct {
		on   bool
		what string
	}{{f.underReplicated, "under-replicated"}, {f.underMinISR, "under min ISR"}, {f.atMinISR, "at min ISR"}, {f.unavailable, "unavailable"}} {
		if c.on {
			out = append(out, c.what)
		}
	}
	return strings.Join(out, " or ")
}

// table prints the partitions the filters kept, of one topic (named) or
// of every topic (name empty), and nothing else: one row each, its topic
// first, as kafka-topics --describe prints only the matching partitions'
// lines under a filter. None is one line saying so.
func (f partitionFilters) table(w io.Writer, name string, views []topicView) error {
	rows := flatRows(views, func(v topicView) []partitionRow { return v.Partitions })
	of := ""
	if name != "" {
		of = " of " + name
	}
	none := fmt.Sprintf("No partitions%s are %s.", of, f.describes())
	if err := tableOf(append([]string{"TOPIC"}, partitionHeader...), none, func(r nested[topicView, partitionRow]) []string {
		return append([]string{r.outer.Name}, partitionCells(r.inner)...)
	})(w, rows); err != nil {
		return err
	}
	for _, r := range rows {
		if p := r.inner; p.NoLeaderReason != "" {
			if _, err := fmt.Fprintf(w, "%s partition %d: %s\n", r.outer.Name, p.Partition, p.NoLeaderReason); err != nil {
				return err
			}
		}
	}
	return nil
}

// describeParallelism bounds the describes of `topic describe` without a
// name in flight at once.
const describeParallelism = 8

// describeAll describes every topic, in name order. A topic deleted
// between the list and its describe is left out.
func describeAll(ctx context.Context, c *rpc.Client, opts []rpc.ReadOption) ([]topicView, *keelpb.ReadSource, error) {
	list, err := c.ListTopics(ctx, opts...)
	if err != nil {
		return nil, nil, err
	}
	names := make([]string, 0, len(list.GetTopics()))
	for _, t := range list.GetTopics() {
		names = append(names, t.GetName())
	}
	sort.Strings(names)
	views := make([]*topicView, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, describeParallelism)
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			resp, err := c.DescribeTopic(ctx, name, opts...)
			switch {
			case status.Code(err) == codes.NotFound:
			case err != nil:
				errs[i] = fmt.Errorf("topic %q: %s", name, errorLine(err))
			case resp.GetTopic() != nil:
				v := describeView(resp.GetTopic())
				views[i] = &v
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	out := make([]topicView, 0, len(views))
	for _, v := range views {
		if v != nil {
			out = append(out, *v)
		}
	}
	return out, list.GetSource(), nil
}

func newTopicDescribeCmd() *cobra.Command {
	a := &adminFlags{}
	r := &readFlags{}
	var f partitionFilters
	cmd := &cobra.Command{
		Use:   "describe [NAME]",
		Short: "Show topics: configs, and each partition's leader, epochs, replicas and ISR",
		Long: `Show a topic, or without NAME every topic: its configs, and each partition's
leader, epochs, replicas and ISR. -o json prints one topic as an object, all of
them as an array.

The filters show only the partitions that need attention, as Kafka's do (a
partition is shown when it matches any filter given):
  --under-replicated-partitions   fewer replicas in the ISR than assigned
  --under-min-isr-partitions      fewer in the ISR than min.insync.replicas
  --at-min-isr-partitions         exactly min.insync.replicas in the ISR
  --unavailable-partitions        no leader
min.insync.replicas is the value in effect for the topic (topic describe
shows it with its source). With a filter the output is one table of those
partitions, each with its topic, and no configs, or one line when none
matches (-o json: the topics that have any, with only those partitions).`,
		Example: `  keel topic describe orders
  keel topic describe
  keel topic describe --under-replicated-partitions
  keel topic describe orders --unavailable-partitions -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			return topicNameArg(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return readCall(cmd, a, r, func(ctx context.Context, c *rpc.Client, opts []rpc.ReadOption) ([]topicView, *keelpb.ReadSource, error) {
					all, src, err := describeAll(ctx, c, opts)
					if err != nil {
						return nil, nil, err
					}
					out := make([]topicView, 0, len(all))
					for _, v := range all {
						if v = f.filter(v); !f.any() || len(v.Partitions) > 0 {
							out = append(out, v)
						}
					}
					return out, src, nil
				}, func(w io.Writer, views []topicView) error {
					if f.any() {
						return f.table(w, "", views)
					}
					if len(views) == 0 {
						fmt.Fprintln(w, "No topics.")
						return nil
					}
					for i, v := range views {
						if i > 0 {
							fmt.Fprintln(w)
						}
						if err := topicTable(w, v); err != nil {
							return err
						}
					}
					return nil
				})
			}
			return readCall(cmd, a, r, func(ctx context.Context, c *rpc.Client, opts []rpc.ReadOption) (topicView, *keelpb.ReadSource, error) {
				resp, err := c.DescribeTopic(ctx, args[0], opts...)
				if err != nil {
					return topicView{}, nil, err
				}
				if resp.GetTopic() == nil {
					return topicView{}, nil, fmt.Errorf("topic %q: the controller answered without a description", args[0])
				}
				return f.filter(describeView(resp.GetTopic())), resp.GetSource(), nil
			}, func(w io.Writer, v topicView) error {
				if f.any() {
					return f.table(w, v.Name, []topicView{v})
				}
				return topicTable(w, v)
			})
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.underReplicated, "under-replicated-partitions", false, "only partitions with fewer replicas in the ISR than assigned")
	fl.BoolVar(&f.underMinISR, "under-min-isr-partitions", false, "only partitions with fewer replicas in the ISR than min.insync.replicas")
	fl.BoolVar(&f.atMinISR, "at-min-isr-partitions", false, "only partitions with exactly min.insync.replicas in the ISR")
	fl.BoolVar(&f.unavailable, "unavailable-partitions", false, "only partitions without a leader")
	a.add(cmd)
	r.add(cmd)
	return cmd
}

// writeTopic is the body of topic create and partition add-partitions:
// write makes the change and returns the topic its answer carried, printed
// as `keel topic describe` prints it. An answer without one is read back,
// since the write is done by then: what names it in the error if that fails.
func writeTopic(cmd *cobra.Command, a *adminFlags, name string, validateOnly bool, what string,
	write func(ctx context.Context, c *rpc.Client) (*keelpb.TopicDescription, error),
) error {
	return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) (topicView, error) {
		topic, err := write(ctx, c)
		if err != nil {
			return topicView{}, err
		}
		if topic == nil && !validateOnly {
			d, err := c.DescribeTopic(ctx, name)
			if err != nil {
				return topicView{}, fmt.Errorf("topic %q %s, but reading it back failed: %s", name, what, errorLine(err))
			}
			topic = d.GetTopic()
		}
		if topic == nil {
			topic = &keelpb.TopicDescription{Name: name}
		}
		return describeView(topic), nil
	}, func(w io.Writer, v topicView) error {
		if validateOnly {
			fmt.Fprintln(w, "validated, nothing written")
		}
		return topicTable(w, v)
	})
}
