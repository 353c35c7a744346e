package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The partition tools that ask the brokers' Kafka listeners, as Kafka's
// kafka-get-offsets (GetOffsetShell) and kafka-log-dirs (LogDirsCommand)
// do: what the data plane holds, which the controllers do not know.

// topics are the topics selected, in order; none: every topic.
func (s topicSpecs) topics() []string {
	out := make([]string, 0, len(s))
	for t := range s {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// keeps reports whether partition p of topic is selected.
func (s topicSpecs) keeps(topic string, p int32) bool {
	if len(s) == 0 {
		return true
	}
	ps, ok := s[topic]
	return ok && (ps == nil || slices.Contains(ps, p))
}

// missing names the first selected partition that listed does not hold:
// a topic that does not exist (or that the brokers refused to describe:
// its error), or a partition past its count.
func (s topicSpecs) missing(listed func(topic string) (map[int32]bool, error)) error {
	for _, t := range s.topics() {
		have, err := listed(t)
		if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("topic %s: %w", t, err)
		}
		if len(have) == 0 {
			return fmt.Errorf("topic %s does not exist", t)
		}
		for _, p := range s[t] {
			if !have[p] {
				return fmt.Errorf("topic %s has no partition %d (it has %d)", t, p, len(have))
			}
		}
	}
	return nil
}

// parseOffsetTime parses --time as kafka-get-offsets does: a Unix time in
// milliseconds, or -1 (latest), -2 (earliest), -3 (the record with the
// largest timestamp), also by name.
func parseOffsetTime(s string) (int64, error) {
	switch strings.ToLower(s) {
	case "latest":
		return -1, nil
	case "earliest":
		return -2, nil
	case "max-timestamp":
		return -3, nil
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms < -3 {
		return 0, fmt.Errorf("--time %q: want milliseconds since 1970, or -1 (latest), -2 (earliest), -3 (max-timestamp)", s)
	}
	return ms, nil
}

// offsetsRow is one row of `keel partition offsets` (its JSON
// contract): the log start, the high watermark, and with --time the
// offset for it and its record's timestamp (-1: none).
type offsetsRow struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Earliest  int64  `json:"earliest"`
	Latest    int64  `json:"latest"`
	Time      *int64 `json:"time,omitempty"`
	Offset    *int64 `json:"offset,omitempty"`
	Timestamp *int64 `json:"timestamp,omitempty"`
	Error     string `json:"error,omitempty"`
}

func newPartitionOffsetsCmd() *cobra.Command {
	var g groupCLIFlags
	var at string
	cmd := &cobra.Command{
		Use:   "offsets [TOPIC[:PARTITION[,PARTITION...]]...]",
		Short: "Show partitions' earliest and latest offsets, and the offset for a time (kafka-get-offsets)",
		Long: `Show each partition's earliest offset (its log start) and latest (its high
watermark: the next offset a consumer will be given), asked of the leaders
through the brokers' Kafka listeners (ListOffsets), as kafka-get-offsets does.
Without arguments, every topic. With --time, also the offset for that time:
the first record stamped at or after it (milliseconds since 1970), or -1
(latest), -2 (earliest), -3 (the record with the largest timestamp), with
the record's timestamp; -1 when there is none.

A topic or partition that does not exist fails the command; a partition whose
leader did not answer is shown with its error, and the command exits
non-zero.`,
		Example: `  keel partition offsets orders
  keel partition offsets orders:0,1 --time 1765000000000
  keel partition offsets --time -3 -o json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			sel, err := parseTopicList("", args)
			if err != nil {
				return err
			}
			var ts int64
			timed := cmd.Flags().Changed("time")
			if timed {
				if ts, err = parseOffsetTime(at); err != nil {
					return err
				}
			}
			return g.run(cmd, func(ctx context.Context, adm groupAdmin) error {
				rows, err := listPartitionOffsets(ctx, adm.Client, sel, timed, ts)
				if err != nil {
					return err
				}
				if err := printAs(cmd.OutOrStdout(), g.output, rows, func(w io.Writer, rows []offsetsRow) error {
					return offsetsTable(w, rows, timed)
				}); err != nil {
					return err
				}
				return rowErrors(rows)
			})
		},
	}
	g.add(cmd)
	g.addOutput(cmd)
	cmd.Flags().StringVar(&at, "time", "", "also the offset for this time: milliseconds since 1970, or -1 (latest), -2 (earliest), -3 (max-timestamp)")
	return cmd
}

// rowErrors is the command's error when some rows carry one (each row is
// printed with its own): how many, and the first.
func rowErrors(rows []offsetsRow) error {
	bad, first := 0, ""
	for _, r := range rows {
		if r.Error != "" {
			if bad == 0 {
				first = fmt.Sprintf("%s/%d: %s", r.Topic, r.Partition, r.Error)
			}
			bad++
		}
	}
	if bad == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d partitions did not answer (the first: %s)", bad, len(rows), first)
}

// listPartitionOffsets asks for the start and end offsets of the selected
// partitions, and with timed those for ts.
func listPartitionOffsets(ctx context.Context, adm *kadm.Client, sel topicSpecs, timed bool, ts int64) ([]offsetsRow, error) {
	topics := sel.topics()
	start, err := partialOffsets(adm.ListStartOffsets(ctx, topics...))
	if err != nil {
		return nil, fmt.Errorf("list the earliest offsets: %w", err)
	}
	end, err := partialOffsets(adm.ListEndOffsets(ctx, topics...))
	if err != nil {
		return nil, fmt.Errorf("list the latest offsets: %w", err)
	}
	var atTime kadm.ListedOffsets
	if timed {
		switch ts {
		case -1:
			atTime = end
		case -2:
			atTime = start
		case -3:
			atTime, err = partialOffsets(adm.ListMaxTimestampOffsets(ctx, topics...))
		default:
			atTime, err = partialOffsets(adm.ListOffsetsAfterMilli(ctx, ts, topics...))
		}
		if err != nil {
			return nil, fmt.Errorf("list the offsets for time %d: %w", ts, err)
		}
	}
	if err := sel.missing(func(topic string) (map[int32]bool, error) {
		have := map[int32]bool{}
		for p, o := range end[topic] {
			if p < 0 { // kadm's -1: the topic's own error
				return nil, o.Err
			}
			have[p] = true
		}
		return have, nil
	}); err != nil {
		return nil, err
	}
	rows := []offsetsRow{}
	end.Each(func(e kadm.ListedOffset) {
		if e.Partition < 0 || !sel.keeps(e.Topic, e.Partition) {
			return
		}
		r := offsetsRow{Topic: e.Topic, Partition: e.Partition, Earliest: -1, Latest: e.Offset}
		var startErr, timeErr error
		if s, ok := start.Lookup(e.Topic, e.Partition); ok {
			r.Earliest, startErr = s.Offset, s.Err
		}
		if timed {
			r.Time = &ts
			o, ok := atTime.Lookup(e.Topic, e.Partition)
			if !ok {
				o = kadm.ListedOffset{Offset: -1, Timestamp: -1}
			}
			r.Offset, r.Timestamp, timeErr = &o.Offset, &o.Timestamp, o.Err
		}
		if err := cmp.Or(e.Err, startErr, timeErr); err != nil {
			r.Error = err.Error()
		}
		rows = append(rows, r)
	})
	sort.Slice(rows, func(i, j int) bool {
		return rows[i].Topic < rows[j].Topic || rows[i].Topic == rows[j].Topic && rows[i].Partition < rows[j].Partition
	})
	return rows, nil
}

// partialOffsets keeps what a listing's answered shards hold: each
// partition of a shard that failed (a leader that did not answer, or none
// in time) gets that shard's error, so that one partition without a leader
// does not hide the others. Other errors are returned as they are.
func partialOffsets(listed kadm.ListedOffsets, err error) (kadm.ListedOffsets, error) {
	var shards *kadm.ShardErrors
	if !errors.As(err, &shards) {
		return listed, err
	}
	if listed == nil {
		listed = kadm.ListedOffsets{}
	}
	for _, e := range shards.Errs {
		req, ok := e.Req.(*kmsg.ListOffsetsRequest)
		if !ok {
			return nil, err
		}
		for _, t := range req.Topics {
			if listed[t.Topic] == nil {
				listed[t.Topic] = map[int32]kadm.ListedOffset{}
			}
			for _, p := range t.Partitions {
				listed[t.Topic][p.Partition] = kadm.ListedOffset{Topic: t.Topic, Partition: p.Partition, Offset: -1, Timestamp: -1, LeaderEpoch: -1, Err: e.Err}
			}
		}
	}
	return listed, nil
}

func offsetsTable(w io.Writer, rows []offsetsRow, timed bool) error {
	header := []string{"TOPIC", "PARTITION", "EARLIEST", "LATEST"}
	if timed {
		header = append(header, "OFFSET FOR TIME", "TIMESTAMP")
	}
	withErrors := slices.ContainsFunc(rows, func(r offsetsRow) bool { return r.Error != "" })
	if withErrors {
		header = append(header, "ERROR")
	}
	return tableOf(header, "No partitions.", func(r offsetsRow) []string {
		cells := []string{r.Topic, fmt.Sprint(r.Partition), fmt.Sprint(r.Earliest), fmt.Sprint(r.Latest)}
		if timed {
			cells = append(cells, fmt.Sprint(*r.Offset), fmt.Sprint(*r.Timestamp))
		}
		if withErrors {
			cells = append(cells, orDash(r.Error))
		}
		return cells
	})(w, rows)
}
