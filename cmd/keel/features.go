package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/rpc"
)

// testMaxMetadataVersionFlag pretends an older binary (test wiring): the
// node reports a lower top of its supported metadata.version range, and a
// controller's state machine refuses levels above it as that binary's
// would.
const testMaxMetadataVersionFlag = "test-max-metadata-version"

// addTestMaxMetadataVersionFlag adds the hidden flag that makes a node
// report max as the top of its supported range: for Keel's own
// mixed-version tests, which need a node that says it is older.
func addTestMaxMetadataVersionFlag(f *pflag.FlagSet, max *uint32) {
	f.Uint32Var(max, testMaxMetadataVersionFlag, 0, "for Keel's own tests: behave as a binary whose highest metadata.version is this one (0: the binary's)")
	_ = f.MarkHidden(testMaxMetadataVersionFlag)
}

// checkMetadataVersions checks --initial-metadata-version and the hidden
// --test-max-metadata-version against the binary's range.
func checkMetadataVersions(initial, testMax uint32) error {
	top := fsm.MaxMetadataVersion
	if testMax != 0 {
		if testMax < fsm.MinMetadataVersion || testMax > fsm.MaxMetadataVersion {
			return fmt.Errorf("--%s %d: this binary supports metadata.version %d-%d", testMaxMetadataVersionFlag, testMax, fsm.MinMetadataVersion, fsm.MaxMetadataVersion)
		}
		top = testMax
	}
	if initial < fsm.MinMetadataVersion || initial > top {
		return fmt.Errorf("--initial-metadata-version %d: this node supports metadata.version %d-%d", initial, fsm.MinMetadataVersion, top)
	}
	return nil
}

func newFeaturesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "features",
		Short: "Describe and change the cluster's metadata.version",
		Long: `The cluster's metadata.version is the level of the metadata records every
node must understand; each level adds record types (docs/features.md).
Upgrade the binaries one node at a time, then raise the level once every node
supports it.

Levels this binary knows:
` + metadataVersionsHelp(),
	}
	cmd.AddCommand(newFeaturesDescribeCmd(), newFeaturesUpdateCmd(false), newFeaturesUpdateCmd(true))
	return cmd
}

// metadataVersionsHelp lists the levels, one a line.
func metadataVersionsHelp() string {
	var b strings.Builder
	for _, v := range fsm.MetadataVersions {
		fmt.Fprintf(&b, "  %d  %s\n", v.Level, v.Adds)
	}
	return b.String()
}

// featuresView is what `keel features describe` prints.
type featuresView struct {
	MetadataVersion uint32        `json:"metadata_version"`
	Nodes           []featureNode `json:"nodes"`
}

type featureNode struct {
	Kind               string `json:"kind"`
	ID                 int32  `json:"id"`
	Address            string `json:"address"`
	MinMetadataVersion uint32 `json:"min_metadata_version"`
	MaxMetadataVersion uint32 `json:"max_metadata_version"`
	Error              string `json:"error,omitempty"`
}

func newFeaturesDescribeCmd() *cobra.Command {
	a := &adminFlags{}
	cmd := &cobra.Command{
		Use:   "describe",
		Short: "Show the finalized metadata.version and every node's supported range",
		Long: `Show the cluster's finalized metadata.version, each controller's supported
range as it answers the active controller now, and each registered broker's as
it registered. A controller that does not answer shows why.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) (featuresView, error) {
				resp, err := c.DescribeFeatures(ctx)
				if err != nil {
					return featuresView{}, err
				}
				v := featuresView{MetadataVersion: resp.GetMetadataVersion(), Nodes: []featureNode{}}
				for _, n := range resp.GetNodes() {
					v.Nodes = append(v.Nodes, featureNode{Kind: n.GetKind(), ID: n.GetId(), Address: n.GetAddress(),
						MinMetadataVersion: n.GetMinMetadataVersion(), MaxMetadataVersion: n.GetMaxMetadataVersion(), Error: n.GetError()})
				}
				return v, nil
			}, func(w io.Writer, v featuresView) error {
				fmt.Fprintf(w, "metadata.version: %d\n\n", v.MetadataVersion)
				rows := [][]string{{"KIND", "ID", "ADDRESS", "SUPPORTED"}}
				for _, n := range v.Nodes {
					supported := fmt.Sprintf("%d-%d", n.MinMetadataVersion, n.MaxMetadataVersion)
					if n.Error != "" {
						supported = "unknown: " + n.Error
					}
					rows = append(rows, []string{n.Kind, strconv.Itoa(int(n.ID)), n.Address, supported})
				}
				return printTable(w, rows)
			})
		},
	}
	a.add(cmd)
	return cmd
}

// featureUpdate is what `keel features upgrade` and `downgrade` print.
type featureUpdate struct {
	PreviousMetadataVersion uint32 `json:"previous_metadata_version"`
	MetadataVersion         uint32 `json:"metadata_version"`
	Index                   uint64 `json:"index"`
}

func newFeaturesUpdateCmd(downgrade bool) *cobra.Command {
	a := &adminFlags{}
	var level uint32
	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "Raise the cluster's metadata.version, once every node supports it",
		Long: `Raise the finalized metadata.version to --metadata-version. The active
controller asks every controller which levels it supports, and checks every
registered broker's range; while any of them does not support the level (or a
controller does not answer) the upgrade is refused, naming them. Upgrade every
node's binary first (docs/operations.md, "Upgrading").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if level < fsm.MinMetadataVersion {
				return fmt.Errorf("--metadata-version is required: a level of at least %d", fsm.MinMetadataVersion)
			}
			return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) (featureUpdate, error) {
				resp, err := c.UpdateFeatures(ctx, level, downgrade)
				if err != nil {
					return featureUpdate{}, err
				}
				return featureUpdate{PreviousMetadataVersion: resp.GetPreviousMetadataVersion(), MetadataVersion: resp.GetMetadataVersion(), Index: resp.GetIndex()}, nil
			}, func(w io.Writer, u featureUpdate) error {
				if u.Index == 0 {
					fmt.Fprintf(w, "metadata.version is already %d\n", u.MetadataVersion)
					return nil
				}
				fmt.Fprintf(w, "metadata.version %d -> %d (index %d)\n", u.PreviousMetadataVersion, u.MetadataVersion, u.Index)
				return nil
			})
		},
	}
	if downgrade {
		cmd.Use = "downgrade"
		cmd.Short = "Lower the cluster's metadata.version, where no information would be lost"
		cmd.Long = `Lower the finalized metadata.version to --metadata-version. Refused, with the
reason, while the metadata holds anything the lower level cannot express (a
downgrade would drop it), or while a node does not support the lower level.`
	}
	a.add(cmd)
	cmd.Flags().Uint32Var(&level, "metadata-version", 0, "the level to move to (required)")
	return cmd
}
