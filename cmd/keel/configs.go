package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// alterConfigFlags are the flags of `keel topic alter` and `keel config
// alter`: configs to set and to delete.
type alterConfigFlags struct {
	configs      []string
	deletes      []string
	validateOnly bool
}

func (f *alterConfigFlags) add(cmd *cobra.Command, what string) {
	fl := cmd.Flags()
	fl.StringArrayVar(&f.configs, "config", nil, "set a config, key=value (repeatable), e.g. min.insync.replicas=2")
	fl.StringArrayVar(&f.deletes, "delete-config", nil, "delete a config (repeatable): "+what+" then takes it from the next source down")
	fl.BoolVar(&f.validateOnly, "validate-only", false, "check the change and show the result, but change nothing")
}

// request checks the flags and builds the request, before any RPC: sets in
// name order, then deletes in the order given. Names and values are checked
// as the controllers check them (fsm.CheckConfig), so a typo fails here.
func (f *alterConfigFlags) request(resource *keelpb.ConfigResource) (*keelpb.IncrementalAlterConfigsRequest, error) {
	sets, err := parseConfigs(f.configs)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	if len(sets) == 0 && len(f.deletes) == 0 {
		return nil, errors.New("nothing to change: give --config key=value or --delete-config key")
	}
	req := &keelpb.IncrementalAlterConfigsRequest{Resource: resource, ValidateOnly: f.validateOnly}
	for _, k := range slices.Sorted(maps.Keys(sets)) {
		if _, err := fsm.CheckConfig(k, sets[k]); err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
		req.Configs = append(req.Configs, &keelpb.AlterableConfig{Name: k, Op: keelpb.AlterConfigOp_ALTER_CONFIG_OP_SET, Value: sets[k]})
	}
	for i, k := range f.deletes {
		k = strings.TrimSpace(k)
		switch {
		case k == "":
			return nil, errors.New("--delete-config: empty key")
		case slices.Contains(f.deletes[:i], k):
			return nil, fmt.Errorf("--delete-config: %s given twice", k)
		}
		if _, ok := sets[k]; ok {
			return nil, fmt.Errorf("%s is both set (--config) and deleted (--delete-config)", k)
		}
		if _, ok := fsm.LookupConfig(k); !ok {
			_, err := fsm.CheckConfig(k, "")
			return nil, fmt.Errorf("--delete-config: %w", err)
		}
		req.Configs = append(req.Configs, &keelpb.AlterableConfig{Name: k, Op: keelpb.AlterConfigOp_ALTER_CONFIG_OP_DELETE})
	}
	return req, nil
}

// alteredConfigs is what `keel topic alter` and `keel config alter` print:
// the configs in effect afterwards, and the partitions the change gave a
// leader (unclean election turned on).
type alteredConfigs struct {
	// Topic is the topic altered; empty for the cluster defaults.
	Topic        string        `json:"topic,omitempty"`
	ValidateOnly bool          `json:"validate_only"`
	Configs      []configRow   `json:"configs"`
	Elections    []electionRow `json:"elections"`
}

func alteredTable(w io.Writer, a alteredConfigs) error {
	if a.ValidateOnly {
		fmt.Fprintln(w, "validated, nothing written")
	}
	if err := configTable(w, a.Configs); err != nil {
		return err
	}
	if len(a.Elections) > 0 {
		fmt.Fprintln(w)
		for _, e := range a.Elections {
			fmt.Fprintf(w, "elected leader %d of %s/%d (unclean election: the partition is recovering)\n", e.Leader, e.Topic, e.Partition)
		}
	}
	return nil
}

// alterConfigs is the body of `keel topic alter` and `keel config alter`.
func alterConfigs(cmd *cobra.Command, a *adminFlags, f *alterConfigFlags, resource *keelpb.ConfigResource) error {
	req, err := f.request(resource)
	if err != nil {
		return err
	}
	return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) (alteredConfigs, error) {
		resp, err := c.IncrementalAlterConfigs(ctx, req)
		if err != nil {
			return alteredConfigs{}, err
		}
		out := alteredConfigs{ValidateOnly: req.ValidateOnly, Configs: configRows(resp.GetConfigs()), Elections: []electionRow{}}
		if resource.GetType() == keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC {
			out.Topic = resource.GetName()
		}
		for _, e := range resp.GetElections() {
			out.Elections = append(out.Elections, electionRow{Topic: e.GetTopic(), Partition: e.GetPartition(), Leader: e.GetLeader(), Error: e.GetError()})
		}
		sortByPartition(out.Elections, func(r electionRow) (string, int32) { return r.Topic, r.Partition })
		return out, nil
	}, alteredTable)
}

// configsHelp lists the configs Keel knows, for --help.
func configsHelp() string {
	var b strings.Builder
	for _, d := range fsm.ConfigDefs() {
		note := ""
		if !d.Honoured() {
			note = " (only the default: not supported yet)"
		}
		fmt.Fprintf(&b, "  %-39s %-7s default %-21q %s%s\n", d.Name, d.Type, d.Default, d.Range(), note)
	}
	return b.String()
}

func newTopicAlterCmd() *cobra.Command {
	a := &adminFlags{}
	f := &alterConfigFlags{}
	cmd := &cobra.Command{
		Use:   "alter NAME",
		Short: "Set and delete a topic's configs",
		Long: `Set (--config key=value) and delete (--delete-config key) configs of a topic,
all or none, through the active controller (Kafka's IncrementalAlterConfigs).
A deleted config comes from the cluster default again, or the built-in one
('keel config describe'). Booleans take any case: TRUE is true.

Turning unclean.leader.election.enable on elects a live replica for each of the
topic's leaderless partitions in the same change; such a partition is
recovering until its new leader confirms. Changing min.insync.replicas clears
the topic's eligible leader replicas.

Prints every config in effect for the topic and where it comes from (topic,
cluster_default, default), and the partitions the change gave a leader.

The configs Keel knows (name, type, built-in default, values):
` + configsHelp(),
		Example: `  keel topic alter orders --config min.insync.replicas=2 --config retention.ms=86400000
  keel topic alter orders --delete-config retention.ms
  keel topic alter audit --config unclean.leader.election.enable=true --validate-only`,
		Args: topicNameArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			return alterConfigs(cmd, a, f, &keelpb.ConfigResource{Type: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC, Name: args[0]})
		},
	}
	f.add(cmd, "the topic")
	a.add(cmd)
	return cmd
}

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Describe and alter the cluster-wide defaults of topic configs"}
	cmd.AddCommand(newConfigDescribeCmd(), newConfigAlterCmd())
	return cmd
}

var clusterResource = &keelpb.ConfigResource{Type: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER}

func newConfigDescribeCmd() *cobra.Command {
	a := &adminFlags{}
	r := &readFlags{}
	cmd := &cobra.Command{
		Use:   "describe",
		Short: "Show the cluster-wide default of every topic config and its source",
		Long: `Show every topic config as a topic without its own value has it: the
cluster-wide default ('keel config alter'), source cluster_default, or Keel's
built-in one (Kafka's), source default.

The configs Keel knows (name, type, built-in default, values):
` + configsHelp(),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return readCall(cmd, a, r, func(ctx context.Context, c *rpc.Client, opts []rpc.ReadOption) ([]configRow, *keelpb.ReadSource, error) {
				resp, err := c.DescribeConfigs(ctx, clusterResource, opts...)
				if err != nil {
					return nil, nil, err
				}
				return configRows(resp.GetConfigs()), resp.GetSource(), nil
			}, configTable)
		},
	}
	a.add(cmd)
	r.add(cmd)
	return cmd
}

func newConfigAlterCmd() *cobra.Command {
	a := &adminFlags{}
	f := &alterConfigFlags{}
	cmd := &cobra.Command{
		Use:   "alter",
		Short: "Set and delete cluster-wide defaults of topic configs",
		Long: `Set (--config key=value) and delete (--delete-config key) the cluster-wide
defaults of topic configs, all or none, through the active controller (Kafka's
IncrementalAlterConfigs on the default broker resource). Every topic without
its own value of a config follows its default at once. Keel names the defaults
as the topic configs (Kafka's brokers spell some otherwise: log.retention.ms,
message.max.bytes, ...).

Turning unclean.leader.election.enable on elects a live replica for every
leaderless partition of the topics that follow the default; changing
min.insync.replicas clears the eligible leader replicas of those whose value in
effect changes.

Prints the defaults in effect afterwards, as 'keel config describe' does, and
the partitions the change gave a leader.`,
		Example: `  keel config alter --config min.insync.replicas=2
  keel config alter --config retention.ms=259200000 --delete-config retention.bytes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return alterConfigs(cmd, a, f, clusterResource)
		},
	}
	f.add(cmd, "every topic without its own value")
	a.add(cmd)
	return cmd
}
