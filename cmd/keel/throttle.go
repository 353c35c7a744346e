package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// The replication throttle of a move (Kafka's kafka-reassign-partitions
// --throttle): `keel partition reassign --throttle` and `keel broker drain
// --throttle` set leader.replication.throttled.rate and
// follower.replication.throttled.rate before starting the moves; the
// controller deletes both in the batch that ends the last move
// (controller/throttle.go).

const throttleUsage = "cap the bytes/s each broker sends and fetches for the replicas the move adds, e.g. 10MB or 50MiB " +
	"(sets leader.replication.throttled.rate and follower.replication.throttled.rate; removed when the last move completes)"

// rateUnits are the suffixes a rate takes: decimal and binary multiples of
// bytes, as Kafka's docs write them.
var rateUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1},
}

// parseRate parses a --throttle value: bytes/s, a whole number with an
// optional unit (10MB, 50MiB, 1000000), and an optional /s.
func parseRate(s string) (int64, error) {
	v := strings.TrimSuffix(strings.TrimSpace(s), "/s")
	mult := int64(1)
	for _, u := range rateUnits {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q: want bytes/s, e.g. 10MB, 50MiB or 1000000", s)
	case n <= 0:
		return 0, fmt.Errorf("%q: want a rate above 0", s)
	case n > math.MaxInt64/mult:
		return 0, fmt.Errorf("%q: too large", s)
	}
	return n * mult, nil
}

// throttleFlag is the --throttle flag of a move.
type throttleFlag struct {
	value string
	rate  int64
}

func (f *throttleFlag) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.value, "throttle", "", throttleUsage)
}

// check parses the flag, if given; a move that starts nothing (with
// forbidden set: --cancel, --verify, --generate) refuses it.
func (f *throttleFlag) check(cmd *cobra.Command, forbidden string) error {
	if !cmd.Flags().Changed("throttle") {
		return nil
	}
	if forbidden != "" {
		return fmt.Errorf("--throttle goes with moves it starts, not with %s", forbidden)
	}
	rate, err := parseRate(f.value)
	if err != nil {
		return fmt.Errorf("--throttle: %w", err)
	}
	f.rate = rate
	return nil
}

// set sets both rates, before the moves start; nothing without --throttle.
func (f *throttleFlag) set(ctx context.Context, c *rpc.Client) error {
	if f.rate == 0 {
		return nil
	}
	if err := alterThrottle(ctx, c, keelpb.AlterConfigOp_ALTER_CONFIG_OP_SET, strconv.FormatInt(f.rate, 10)); err != nil {
		return fmt.Errorf("setting the throttle: %w", err)
	}
	return nil
}

// alterThrottle applies op (with value) to both rates, in one request.
func alterThrottle(ctx context.Context, c *rpc.Client, op keelpb.AlterConfigOp, value string) error {
	req := &keelpb.IncrementalAlterConfigsRequest{Resource: clusterResource, Configs: []*keelpb.AlterableConfig{
		{Name: fsm.FollowerReplicationThrottledRate, Op: op, Value: value},
		{Name: fsm.LeaderReplicationThrottledRate, Op: op, Value: value},
	}}
	_, err := c.IncrementalAlterConfigs(ctx, req)
	return err
}

// started is called with the outcome of starting the moves, and returns
// it. It deletes both rates when no move is in progress then: the moves
// were refused, or completed at once (a new order, a removal) and so ended
// no move in progress, and the controller did not lift them.
func (f *throttleFlag) started(ctx context.Context, c *rpc.Client, moveErr error) error {
	if f.rate == 0 {
		return moveErr
	}
	if err := liftIfIdle(ctx, c); err != nil && moveErr == nil {
		return fmt.Errorf("the moves started, but lifting the throttle after them failed: %w", err)
	}
	return moveErr
}

// liftIfIdle deletes both rates if no move is in progress.
func liftIfIdle(ctx context.Context, c *rpc.Client) error {
	resp, err := c.ListPartitionReassignments(ctx, rpc.Linearizable())
	if err != nil || len(resp.GetReassignments()) > 0 {
		return err
	}
	return alterThrottle(ctx, c, keelpb.AlterConfigOp_ALTER_CONFIG_OP_DELETE, "")
}

// throttleInEffect reads the two rates in effect (math.MaxInt64: none).
func throttleInEffect(ctx context.Context, c *rpc.Client, opts ...rpc.ReadOption) (leader, follower int64, err error) {
	leader, follower = math.MaxInt64, math.MaxInt64
	resp, err := c.DescribeConfigs(ctx, clusterResource, opts...)
	if err != nil {
		return 0, 0, err
	}
	for _, e := range resp.GetConfigs() {
		n, perr := strconv.ParseInt(e.GetValue(), 10, 64)
		if perr != nil {
			continue
		}
		switch e.GetName() {
		case fsm.LeaderReplicationThrottledRate:
			leader = n
		case fsm.FollowerReplicationThrottledRate:
			follower = n
		}
	}
	return leader, follower, nil
}

// formatRate renders a rate for a table: "none" when unlimited.
func formatRate(n int64) string {
	if n == math.MaxInt64 {
		return "none"
	}
	return strconv.FormatInt(n, 10) + " B/s"
}
