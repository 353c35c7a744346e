package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keel-dev/keel/cmd/keel/internal/bench"
)

// addBenchDataFlags adds the flags of the data path's scenarios (produce,
// leader-crash, catch-up) to keel bench.
func addBenchDataFlags(f *pflag.FlagSet, d *bench.DataConfig) {
	f.IntVar(&d.RecordSize, "record-size", bench.DefaultRecordSize, "produce, catch-up: each record's value, in bytes")
	f.IntVar(&d.Partitions, "produce-partitions", bench.DefaultDataPartitions, "produce, catch-up: partitions of the topic written to (RF 3)")
	f.IntVar(&d.Producers, "producers", bench.DefaultProducers, "produce, catch-up: franz-go clients producing at once")
	f.DurationVar(&d.Duration, "produce-duration", bench.DefaultProduceDuration, "produce: how long each of its three measurements lasts, after a warm-up")
	f.Int64Var(&d.CatchUpBytes, "catch-up-bytes", bench.DefaultCatchUpBytes, "catch-up: bytes of records written while the follower is down")
	f.Int64Var(&d.GroupRecords, "group-records", bench.DefaultGroupRecords, "consume-group: records written, then consumed by the group")
	f.DurationVar(&d.SessionTimeout, "broker-session-timeout", 0, "leader-crash: the data path controllers' --session-timeout (default: theirs, 9s)")
}

// newBenchSinkCmd is the hidden `keel bench-sink`: the other end of the
// loopback measurement of keel bench's produce scenario. It prints the
// loopback address it listens on, reads one connection to its end and
// answers with the count of bytes read.
func newBenchSinkCmd() *cobra.Command {
	return &cobra.Command{
		Use:    bench.SinkCommand,
		Short:  "Sink one TCP stream on loopback (keel bench's loopback measurement)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.ServeSink(cmd.OutOrStdout())
		},
	}
}
