package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
)

// logDirReplica is one replica in a broker's log dir.
type logDirReplica struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	SizeBytes int64  `json:"size_bytes"`
	// OffsetLag is how far the replica's log end is behind its leader's
	// high watermark (0 on the leader).
	OffsetLag int64 `json:"offset_lag"`
}

// brokerLogDir is one log dir of one broker: the JSON contract of `keel
// partition log-dirs`, an array of them.
type brokerLogDir struct {
	Broker int32  `json:"broker"`
	Dir    string `json:"dir"`
	// SizeBytes is the replicas' total; TotalBytes and UsableBytes are the
	// volume's (-1: not reported).
	SizeBytes   int64           `json:"size_bytes"`
	TotalBytes  int64           `json:"total_bytes"`
	UsableBytes int64           `json:"usable_bytes"`
	Replicas    []logDirReplica `json:"replicas"`
	Error       string          `json:"error,omitempty"`
}

func newPartitionLogDirsCmd() *cobra.Command {
	var g groupCLIFlags
	cmd := &cobra.Command{
		Use:   "log-dirs [TOPIC[:PARTITION[,PARTITION...]]...]",
		Short: "Show the size of each replica on each broker, its offset lag, and each broker's totals (kafka-log-dirs)",
		Long: `Ask every broker for its log dirs (DescribeLogDirs, through the Kafka
listeners) and show, as kafka-log-dirs does, each replica it holds with its
size and offset lag (how far its log end is behind the leader's high
watermark), then per broker and dir the replicas' total and the volume's
total and usable bytes. Without arguments, every replica. The brokers asked
are those Kafka's metadata lists: unfenced, with a Kafka listener.

A broker that does not answer is named and the command exits non-zero, after
printing the others.`,
		Example: `  keel partition log-dirs
  keel partition log-dirs orders payments:0 -o json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			sel, err := parseTopicList("", args)
			if err != nil {
				return err
			}
			return g.run(cmd, func(ctx context.Context, adm groupAdmin) error {
				dirs, failed, err := describeLogDirs(ctx, adm.Client, sel)
				if err != nil {
					return err
				}
				if err := printAs(cmd.OutOrStdout(), g.output, dirs, logDirsTable); err != nil {
					return err
				}
				return failed
			})
		},
	}
	g.add(cmd)
	g.addOutput(cmd)
	return cmd
}

// describeLogDirs asks every broker for the selected replicas, sorted by
// broker and dir. failed names the brokers that did not answer, whose dirs
// are left out.
func describeLogDirs(ctx context.Context, adm *kadm.Client, sel topicSpecs) (dirs []brokerLogDir, failed, err error) {
	if len(sel) > 0 {
		topics, err := adm.ListTopics(ctx, sel.topics()...)
		if err != nil {
			return nil, nil, fmt.Errorf("describe the topics: %w", err)
		}
		if err := sel.missing(func(topic string) (map[int32]bool, error) {
			d := topics[topic]
			have := map[int32]bool{}
			for p := range d.Partitions {
				have[p] = true
			}
			return have, d.Err
		}); err != nil {
			return nil, nil, err
		}
	}
	all, err := adm.DescribeAllLogDirs(ctx, nil)
	var shards *kadm.ShardErrors
	if errors.As(err, &shards) && !shards.AllFailed {
		var why []string
		for _, e := range shards.Errs {
			why = append(why, fmt.Sprintf("broker %d: %v", e.Broker.NodeID, e.Err))
		}
		failed = fmt.Errorf("%s did not describe their log dirs: %s", count(len(shards.Errs), "broker"), strings.Join(why, "; "))
	} else if err != nil {
		return nil, nil, fmt.Errorf("describe the log dirs: %w", err)
	}
	dirs = []brokerLogDir{}
	for _, d := range all.Sorted() {
		bd := brokerLogDir{Broker: d.Broker, Dir: d.Dir, TotalBytes: d.TotalBytes, UsableBytes: d.UsableBytes, Replicas: []logDirReplica{}}
		if d.Err != nil {
			bd.Error = d.Err.Error()
		}
		for _, p := range d.Topics.Sorted() {
			if !sel.keeps(p.Topic, p.Partition) {
				continue
			}
			bd.Replicas = append(bd.Replicas, logDirReplica{Topic: p.Topic, Partition: p.Partition, SizeBytes: p.Size, OffsetLag: p.OffsetLag})
			bd.SizeBytes += p.Size
		}
		dirs = append(dirs, bd)
	}
	return dirs, failed, nil
}

// logDirsTable prints every replica, then each broker's dir and totals.
func logDirsTable(w io.Writer, dirs []brokerLogDir) error {
	rows := flatRows(dirs, func(d brokerLogDir) []logDirReplica { return d.Replicas })
	if err := tableOf([]string{"BROKER", "TOPIC", "PARTITION", "SIZE", "OFFSET LAG"}, "No replicas.", func(r nested[brokerLogDir, logDirReplica]) []string {
		return []string{fmt.Sprint(r.outer.Broker), r.inner.Topic, fmt.Sprint(r.inner.Partition), fmt.Sprint(r.inner.SizeBytes), fmt.Sprint(r.inner.OffsetLag)}
	})(w, rows); err != nil {
		return err
	}
	fmt.Fprintln(w)
	bytesOrDash := func(n int64) string {
		if n < 0 {
			return "-"
		}
		return fmt.Sprint(n)
	}
	return tableOf([]string{"BROKER", "DIR", "REPLICAS", "SIZE", "VOLUME TOTAL", "VOLUME USABLE", "ERROR"}, "No brokers answered.", func(d brokerLogDir) []string {
		return []string{fmt.Sprint(d.Broker), d.Dir, fmt.Sprint(len(d.Replicas)), fmt.Sprint(d.SizeBytes), bytesOrDash(d.TotalBytes), bytesOrDash(d.UsableBytes), orDash(d.Error)}
	})(w, dirs)
}

// nested is a row of a table of nested rows: an inner row (a replica, a
// partition) with the outer one it belongs to (a broker, a topic).
type nested[O, I any] struct {
	outer O
	inner I
}

// flatRows is every inner row of every outer one, in order, each with its
// outer row.
func flatRows[O, I any](outer []O, inner func(O) []I) []nested[O, I] {
	var out []nested[O, I]
	for _, o := range outer {
		for _, i := range inner(o) {
			out = append(out, nested[O, I]{o, i})
		}
	}
	return out
}
