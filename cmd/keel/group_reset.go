package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
)

// topicSpecs are the partitions --topic names: a topic's partitions, or
// nil for all of them.
type topicSpecs map[string][]int32

// parseTopicSpecs reads --topic values as kafka-consumer-groups.sh does:
// TOPIC (every partition) or TOPIC:P[,P...]. A topic named twice takes the
// union; named once without partitions, all of them.
func parseTopicSpecs(specs []string) (topicSpecs, error) { return parseTopicList("--topic ", specs) }

// parseTopicList is parseTopicSpecs for specs given as flag (e.g.
// "--topic ") or, flag empty, as arguments.
func parseTopicList(flag string, specs []string) (topicSpecs, error) {
	out := topicSpecs{}
	all := map[string]bool{}
	for _, spec := range specs {
		topic, list, hasParts := strings.Cut(spec, ":")
		topic = strings.TrimSpace(topic)
		if topic == "" {
			return nil, fmt.Errorf("%s%q: want TOPIC or TOPIC:PARTITION[,PARTITION...]", flag, spec)
		}
		if !hasParts {
			all[topic] = true
			out[topic] = nil
			continue
		}
		var parts []int32
		for _, f := range strings.Split(list, ",") {
			p, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
			if err != nil || p < 0 {
				return nil, fmt.Errorf("%s%q: partition %q is not a partition number", flag, spec, f)
			}
			parts = append(parts, int32(p))
		}
		if !all[topic] {
			out[topic] = append(out[topic], parts...)
		}
	}
	for t, ps := range out {
		out[t] = sortedUnique(ps)
	}
	return out, nil
}

func sortedUnique(ps []int32) []int32 {
	if ps == nil {
		return nil
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	out := ps[:0]
	for i, p := range ps {
		if i == 0 || p != ps[i-1] {
			out = append(out, p)
		}
	}
	return out
}

// resetKind is where reset-offsets moves the offsets.
type resetKind int

const (
	resetToEarliest resetKind = iota + 1
	resetToLatest
	resetToOffset
	resetToDatetime
	resetShiftBy
)

// resetTarget is the one --to-*/--shift-by option given.
type resetTarget struct {
	kind   resetKind
	offset int64 // --to-offset, or --shift-by's delta
	millis int64 // --to-datetime, in Unix milliseconds
}

// resetOpts are reset-offsets' scenario options as given; toOffset and
// shiftBy are nil when not given.
type resetOpts struct {
	earliest, latest  bool
	toOffset, shiftBy *int64
	toDatetime        string
}

// target checks that exactly one scenario option is given, as
// kafka-consumer-groups.sh does, and reads it.
func (o resetOpts) target() (resetTarget, error) {
	var given []string
	var t resetTarget
	if o.earliest {
		given, t = append(given, "--to-earliest"), resetTarget{kind: resetToEarliest}
	}
	if o.latest {
		given, t = append(given, "--to-latest"), resetTarget{kind: resetToLatest}
	}
	if o.toOffset != nil {
		if *o.toOffset < 0 {
			return resetTarget{}, fmt.Errorf("--to-offset %d: must not be negative", *o.toOffset)
		}
		given, t = append(given, "--to-offset"), resetTarget{kind: resetToOffset, offset: *o.toOffset}
	}
	if o.toDatetime != "" {
		at, err := time.Parse(time.RFC3339Nano, o.toDatetime)
		if err != nil {
			return resetTarget{}, fmt.Errorf("--to-datetime %q: want RFC 3339, e.g. 2026-12-06T01:00:00Z", o.toDatetime)
		}
		given, t = append(given, "--to-datetime"), resetTarget{kind: resetToDatetime, millis: at.UnixMilli()}
	}
	if o.shiftBy != nil {
		given, t = append(given, "--shift-by"), resetTarget{kind: resetShiftBy, offset: *o.shiftBy}
	}
	switch len(given) {
	case 0:
		return resetTarget{}, errors.New("say where to: one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by")
	case 1:
		return t, nil
	}
	return resetTarget{}, fmt.Errorf("give one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by, not %s", strings.Join(given, " and "))
}

// partitionOffsets is what the plan starts from, for one partition: the
// group's committed offset (-1: none), the log's start and end, and for
// --to-datetime the first offset at or after the time (-1: none).
type partitionOffsets struct {
	topic                 string
	partition             int32
	committed, start, end int64
	atTime                int64
}

// resetRow is one line of the plan, the JSON contract of `keel group
// reset-offsets`: CurrentOffset is -1 without a commit.
type resetRow struct {
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	CurrentOffset int64  `json:"current_offset"`
	NewOffset     int64  `json:"new_offset"`
}

// planReset computes each partition's new offset as kafka-consumer-groups.sh
// does: the earliest or latest offset, an offset or a shift clamped to
// [log start, log end], or the first offset at or after a time (the log
// end if none is). Shifting a partition without a committed offset is an
// error: there is nothing to shift from.
func planReset(parts []partitionOffsets, t resetTarget) ([]resetRow, error) {
	rows := make([]resetRow, 0, len(parts))
	for _, p := range parts {
		var next int64
		switch t.kind {
		case resetToEarliest:
			next = p.start
		case resetToLatest:
			next = p.end
		case resetToOffset:
			next = clampOffset(t.offset, p.start, p.end)
		case resetShiftBy:
			if p.committed < 0 {
				return nil, fmt.Errorf("cannot shift the offset of %s-%d: the group has no committed offset for it", p.topic, p.partition)
			}
			next = clampOffset(p.committed+t.offset, p.start, p.end)
		case resetToDatetime:
			next = p.end
			if p.atTime >= 0 {
				next = clampOffset(p.atTime, p.start, p.end)
			}
		default:
			return nil, errors.New("no reset target")
		}
		rows = append(rows, resetRow{Topic: p.topic, Partition: p.partition, CurrentOffset: p.committed, NewOffset: next})
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Topic != rows[j].Topic {
			return rows[i].Topic < rows[j].Topic
		}
		return rows[i].Partition < rows[j].Partition
	})
	return rows, nil
}

func clampOffset(o, start, end int64) int64 {
	return max(start, min(o, end))
}

// resettable says whether a group in state may have its offsets reset:
// only with no members (Empty), or not existing (Dead), as Kafka.
func resettable(group, state string) error {
	switch state {
	case "Empty", "Dead":
		return nil
	}
	return fmt.Errorf("group %s: offsets can be reset only while the group has no members, but it is %s: stop its consumers first", group, state)
}

var resetTable = tableOf([]string{"TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"}, "No partitions to reset.", func(r resetRow) []string {
	return []string{r.Topic, fmt.Sprint(r.Partition), offsetOrDash(r.CurrentOffset), fmt.Sprint(r.NewOffset)}
})

func newGroupResetOffsetsCmd() *cobra.Command {
	var g groupCLIFlags
	var o resetOpts
	var topics []string
	var allTopics, dryRun, execute bool
	var toOffset, shiftBy int64
	cmd := &cobra.Command{
		Use:   "reset-offsets GROUP",
		Short: "Move a consumer group's committed offsets: to the earliest or latest, an offset, a time, or by a shift",
		Long: `Reset the committed offsets of GROUP for the partitions of each --topic
(TOPIC or TOPIC:P[,P...]), or of every topic it has committed offsets for
(--all-topics), to exactly one of: --to-earliest, --to-latest, --to-offset N,
--to-datetime TIME (the first record at or after it; RFC 3339), --shift-by N
(from the committed offset; negative moves back). Offsets are clamped to
the partition's log start and end, as kafka-consumer-groups.sh does.

It prints the plan (current and new offset of each partition) and, with
--execute, commits it; with --dry-run it only prints it. One of the two is
required, as kafka-consumer-groups.sh asks for them. It is refused while
the group has members: stop its consumers first.`,
		Example: `  keel group reset-offsets orders-app --topic orders --to-earliest --dry-run
  keel group reset-offsets orders-app --topic orders:0,1 --shift-by -100 --execute
  keel group reset-offsets orders-app --all-topics --to-datetime 2026-12-06T01:00:00Z --execute`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("want one group name, got %d: %s", len(args), cmd.UseLine())
			}
			return groupArgs(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			group := args[0]
			if cmd.Flags().Changed("to-offset") {
				o.toOffset = &toOffset
			}
			if cmd.Flags().Changed("shift-by") {
				o.shiftBy = &shiftBy
			}
			target, err := o.target()
			if err != nil {
				return err
			}
			if dryRun == execute {
				return errors.New("give --dry-run (print the plan) or --execute (commit it), one of them")
			}
			if allTopics == (len(topics) > 0) {
				return errors.New("give --topic (repeatable) or --all-topics, one of them")
			}
			specs, err := parseTopicSpecs(topics)
			if err != nil {
				return err
			}
			return g.run(cmd, func(ctx context.Context, adm groupAdmin) error {
				rows, err := resetOffsets(ctx, adm, group, specs, target, dryRun)
				if err != nil {
					return err
				}
				return printAs(cmd.OutOrStdout(), g.output, rows, resetTable)
			})
		},
	}
	g.add(cmd)
	g.addOutput(cmd)
	f := cmd.Flags()
	f.StringArrayVar(&topics, "topic", nil, "a topic to reset, TOPIC or TOPIC:PARTITION[,PARTITION...]; repeatable")
	f.BoolVar(&allTopics, "all-topics", false, "reset every topic the group has committed offsets for")
	f.BoolVar(&o.earliest, "to-earliest", false, "to each partition's log start offset")
	f.BoolVar(&o.latest, "to-latest", false, "to each partition's log end offset")
	f.Int64Var(&toOffset, "to-offset", 0, "to this offset (clamped to the log's start and end)")
	f.StringVar(&o.toDatetime, "to-datetime", "", "to the first record at or after this time, RFC 3339 (e.g. 2026-12-06T01:00:00Z)")
	f.Int64Var(&shiftBy, "shift-by", 0, "by this many records from the committed offset; negative moves back")
	f.BoolVar(&dryRun, "dry-run", false, "print the plan and commit nothing")
	f.BoolVar(&execute, "execute", false, "commit the plan")
	return cmd
}

// resetOffsets plans the reset of group's offsets for specs (nil: every
// topic it has committed offsets for) and, unless dryRun, commits the plan.
// It refuses a group with members before it plans, and the coordinator
// refuses a commit from outside a group that gained one since.
func resetOffsets(ctx context.Context, adm groupAdmin, group string, specs topicSpecs, t resetTarget, dryRun bool) ([]resetRow, error) {
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return nil, adm.explain(ctx, group, err)
	}
	d, ok := described[group]
	if !ok {
		return nil, fmt.Errorf("group %s: not in the brokers' answer", group)
	}
	if d.Err != nil {
		return nil, adm.explain(ctx, group, d.Err)
	}
	if err := resettable(group, d.State); err != nil {
		return nil, err
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = committed.Error()
	}
	if err != nil {
		return nil, adm.explain(ctx, group, err)
	}
	if len(specs) == 0 {
		specs = topicSpecs{}
		for topic := range committed {
			specs[topic] = nil
		}
		if len(specs) == 0 {
			return nil, fmt.Errorf("group %s has no committed offsets: name the topics with --topic", group)
		}
	}
	topics := make([]string, 0, len(specs))
	for topic := range specs {
		topics = append(topics, topic)
	}
	sort.Strings(topics)
	starts, err := listedOffsets(ctx, topics, adm.ListStartOffsets)
	if err != nil {
		return nil, err
	}
	ends, err := listedOffsets(ctx, topics, adm.ListEndOffsets)
	if err != nil {
		return nil, err
	}
	var atTime kadm.ListedOffsets
	if t.kind == resetToDatetime {
		if atTime, err = listedOffsets(ctx, topics, func(ctx context.Context, ts ...string) (kadm.ListedOffsets, error) {
			return adm.ListOffsetsAfterMilli(ctx, t.millis, ts...)
		}); err != nil {
			return nil, err
		}
	}
	var parts []partitionOffsets
	for _, topic := range topics {
		ps := specs[topic]
		if ps == nil {
			for p := range ends[topic] {
				ps = append(ps, p)
			}
		}
		for _, p := range ps {
			end, ok := ends.Lookup(topic, p)
			if !ok {
				return nil, fmt.Errorf("topic %s has no partition %d", topic, p)
			}
			start, _ := starts.Lookup(topic, p)
			po := partitionOffsets{topic: topic, partition: p, committed: -1, start: start.Offset, end: end.Offset, atTime: -1}
			if c, ok := committed.Lookup(topic, p); ok {
				po.committed = c.At
			}
			if at, ok := atTime.Lookup(topic, p); ok {
				po.atTime = at.Offset
			}
			parts = append(parts, po)
		}
	}
	rows, err := planReset(parts, t)
	if err != nil || dryRun {
		return rows, err
	}
	var commit kadm.Offsets
	for _, r := range rows {
		commit.Add(kadm.Offset{Topic: r.Topic, Partition: r.Partition, At: r.NewOffset, LeaderEpoch: -1})
	}
	resps, err := adm.CommitOffsets(ctx, group, commit)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		return nil, adm.explain(ctx, group, err)
	}
	return rows, nil
}

// listedOffsets lists topics' offsets with list, and fails on the first
// partition it could not list.
func listedOffsets(ctx context.Context, topics []string, list func(context.Context, ...string) (kadm.ListedOffsets, error)) (kadm.ListedOffsets, error) {
	listed, err := list(ctx, topics...)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list the offsets of %s: %w", strings.Join(topics, ", "), err)
	}
	for _, topic := range topics {
		if len(listed[topic]) == 0 {
			return nil, fmt.Errorf("topic %s does not exist", topic)
		}
	}
	return listed, nil
}
