package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/cmd/keel/internal/reassign"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// drainFlags are the flags of `keel broker drain`.
type drainFlags struct {
	brokerID     int32
	cancel       bool
	noWait       bool
	waitTimeout  time.Duration
	pollInterval time.Duration
	throttle     throttleFlag
}

// drainView is what `keel broker drain -o json` prints.
type drainView struct {
	BrokerID int32 `json:"broker_id"`
	// Current is where the moved partitions were: the plan that puts
	// them back.
	Current reassign.Plan `json:"current"`
	// Plan is the moves the drain started.
	Plan reassign.Plan `json:"plan"`
	// Total counts the partitions that held the broker when the drain
	// began (those already moving off it too); Moved, those that no
	// longer do.
	Moved int  `json:"moved"`
	Total int  `json:"total"`
	Done  bool `json:"done"`
}

// drainCancelView is what `keel broker drain --cancel -o json` prints.
type drainCancelView struct {
	BrokerID  int32    `json:"broker_id"`
	Cancelled []string `json:"cancelled"`
}

func newBrokerDrainCmd() *cobra.Command {
	a := &adminFlags{}
	f := &drainFlags{}
	cmd := &cobra.Command{
		Use:   "drain",
		Short: "Move every replica and leadership off a broker",
		Long: `Move every replica off a broker, and with them its leaderships, before it is
taken out of service. One plan replaces the broker, in each partition it
holds, by another active broker (registered, unfenced, not shutting down)
that the partition does not use yet: in a rack the partition's other
replicas do not use where brokers have racks, then the least loaded, so the
replicas and preferred leaderships spread evenly. The controller accepts
the whole plan in one request, or refuses it whole (for instance when a
partition has as many replicas as there are active brokers).

Each move completes, as any reassignment does, only once every target
replica is in the ISR; the broker stays a replica, in the ISR and leading,
until then, so a partition never has fewer in-sync replicas than before.

The command prints the partitions' current assignment (a plan for
'keel partition reassign --plan' that moves them back), then waits, showing
progress on stderr, until no partition holds the broker; --no-wait returns
at once. Brokers and topics created meanwhile may still place replicas on
the broker: the command checks at the end, and says so.

--throttle RATE caps the bytes/s each broker sends and fetches for the
replicas the moves add, as 'keel partition reassign --throttle' does.

--cancel cancels every ongoing move off the broker (those a drain started);
partitions already moved stay where they are.`,
		Example: `  keel broker drain --broker-id 4
  keel broker drain --broker-id 4 --throttle 50MiB
  keel broker drain --broker-id 4 --no-wait
  keel broker drain --broker-id 4 --cancel`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case !cmd.Flags().Changed("broker-id"):
				return errors.New("--broker-id is required")
			case f.brokerID < 0:
				return fmt.Errorf("--broker-id %d: want a broker id, 0 or more", f.brokerID)
			case f.cancel && f.noWait:
				return errors.New("--cancel does not wait: give it without --no-wait")
			case f.pollInterval <= 0:
				return fmt.Errorf("--poll-interval %v: want a positive duration", f.pollInterval)
			case f.waitTimeout < 0:
				return fmt.Errorf("--wait-timeout %v: want 0 (no limit) or a positive duration", f.waitTimeout)
			}
			forbidden := ""
			if f.cancel {
				forbidden = "--cancel"
			}
			if err := f.throttle.check(cmd, forbidden); err != nil {
				return err
			}
			if f.cancel {
				return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) (drainCancelView, error) {
					names, err := cancelOngoing(ctx, c, func(r *keelpb.Reassignment) bool {
						return slices.Contains(r.GetRemovingReplicas(), f.brokerID)
					})
					return drainCancelView{BrokerID: f.brokerID, Cancelled: names}, err
				}, func(w io.Writer, v drainCancelView) error {
					if len(v.Cancelled) == 0 {
						fmt.Fprintf(w, "No partition is being moved off broker %d: nothing to cancel.\n", v.BrokerID)
						return nil
					}
					fmt.Fprintf(w, "Cancelled the moves off broker %d of %s: %s\n", v.BrokerID, count(len(v.Cancelled), "partition"), strings.Join(v.Cancelled, ","))
					fmt.Fprintln(w, "Partitions already moved stay where they are.")
					return nil
				})
			}
			return runDrain(cmd, a, f)
		},
	}
	fl := cmd.Flags()
	fl.Int32Var(&f.brokerID, "broker-id", -1, "the broker to drain (required)")
	hidePlaceholder(fl, "broker-id")
	fl.BoolVar(&f.cancel, "cancel", false, "cancel the ongoing moves off the broker instead")
	fl.BoolVar(&f.noWait, "no-wait", false, "start the moves and return, without waiting for them")
	fl.DurationVar(&f.waitTimeout, "wait-timeout", 0, "give up waiting after this long (0: never); the moves go on")
	fl.DurationVar(&f.pollInterval, "poll-interval", time.Second, "how often to check progress while waiting")
	f.throttle.add(cmd)
	a.add(cmd)
	return cmd
}

// runDrain plans and starts the drain, then waits for it unless --no-wait.
// Each request gets --timeout; the wait, --wait-timeout.
func runDrain(cmd *cobra.Command, a *adminFlags, f *drainFlags) error {
	if err := checkOutput(a.output); err != nil {
		return err
	}
	tlsCfg, err := tlsFlags(cmd)
	if err != nil {
		return err
	}
	c, err := openAdmin(a, tlsCfg)
	if err != nil {
		return err
	}
	defer c.Close()
	step := func(do func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
		defer cancel()
		return do(ctx)
	}
	id := f.brokerID
	v := drainView{BrokerID: id}
	var watched []string // partitions that hold the broker
	var topics []string  // their topics
	err = step(func(ctx context.Context) error {
		states, err := readStates(ctx, c, nil, false)
		if err != nil {
			return err
		}
		brokers, err := readBrokers(ctx, c)
		if err != nil {
			return err
		}
		v.Plan, err = reassign.Drain(brokers, states, id)
		if err != nil {
			return err
		}
		v.Current = reassign.Current(statesIn(v.Plan, states))
		for _, s := range states {
			if slices.Contains(s.Replicas, id) {
				watched = append(watched, s.Name())
				if !slices.Contains(topics, s.Topic) {
					topics = append(topics, s.Topic)
				}
			}
		}
		v.Total = len(watched)
		if len(v.Plan.Partitions) == 0 {
			return nil
		}
		if err := f.throttle.set(ctx, c); err != nil {
			return err
		}
		_, err = sendPlan(ctx, c, targetsOf(v.Plan))
		return f.throttle.started(ctx, c, err)
	})
	if err != nil {
		return err
	}
	v.Done = v.Total == 0
	out, progress := cmd.OutOrStdout(), cmd.ErrOrStderr()
	table := a.output == "table"
	if table {
		if v.Total == 0 {
			fmt.Fprintf(out, "Broker %d holds no replicas: nothing to move.\n", id)
			return nil
		}
		if len(v.Plan.Partitions) > 0 {
			fmt.Fprintf(out, "Current partition replica assignment\n\n%s\n\nSave this to use as the --plan file of 'keel partition reassign' to move the partitions back\n\n", v.Current)
		}
		fmt.Fprintf(out, "Draining broker %d: %s to move off it (%s started).\n", id, count(v.Total, "partition"), count(len(v.Plan.Partitions), "move"))
	}
	// pending reads the watched partitions and returns those still on the
	// broker; a partition whose topic is gone has left it too.
	pending := func(ctx context.Context) ([]string, error) {
		states, err := readStates(ctx, c, topics, false)
		if err != nil {
			return nil, err
		}
		var still []string
		for _, s := range states {
			if slices.Contains(watched, s.Name()) && slices.Contains(s.Replicas, id) {
				still = append(still, s.Name())
			}
		}
		return still, nil
	}
	if !f.noWait && v.Total > 0 {
		timeout := f.waitTimeout
		if timeout == 0 {
			timeout = 100 * 365 * 24 * time.Hour
		}
		var still []string
		last := -1
		err := poll.Wait(cmd.Context(), timeout, f.pollInterval, fmt.Sprintf("every partition to move off broker %d", id), func() (bool, error) {
			err := step(func(ctx context.Context) error {
				var err error
				still, err = pending(ctx)
				return err
			})
			if err != nil {
				return false, err
			}
			v.Moved = v.Total - len(still)
			if v.Moved != last {
				fmt.Fprintf(progress, "moved %d/%d partitions off broker %d\n", v.Moved, v.Total, id)
				last = v.Moved
			}
			return len(still) == 0, nil
		})
		if err != nil {
			return fmt.Errorf("%w; still on broker %d: %s (the moves go on; each waits until its new replicas are in the ISR: see 'keel partition reassignments')",
				err, id, strings.Join(still, ","))
		}
		// Topics and partitions created meanwhile may have been placed on it.
		var placed []string
		err = step(func(ctx context.Context) error {
			states, err := readStates(ctx, c, nil, false)
			for _, s := range states {
				if slices.Contains(s.Replicas, id) {
					placed = append(placed, s.Name())
				}
			}
			return err
		})
		if err != nil {
			return err
		}
		if len(placed) > 0 {
			return fmt.Errorf("the drain's %d partitions moved off broker %d, but %s were placed on it meanwhile: run the drain again", v.Total, id, strings.Join(placed, ","))
		}
		v.Done = true
	} else if v.Total > 0 {
		err := step(func(ctx context.Context) error {
			still, err := pending(ctx)
			v.Moved = v.Total - len(still)
			return err
		})
		if err != nil {
			return err
		}
		v.Done = v.Moved == v.Total
	}
	if !table {
		return printJSON(out, v)
	}
	switch {
	case v.Done:
		fmt.Fprintf(out, "Broker %d is drained: it holds no replicas and leads no partitions.\n", id)
	default:
		fmt.Fprintf(out, "Moved %d/%d so far; follow with 'keel partition reassignments', cancel with 'keel broker drain --broker-id %d --cancel'.\n", v.Moved, v.Total, id)
	}
	return nil
}
