package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/rpc"
)

// defaultSnapshotTimeout bounds `snapshot save` and `restore`: a large image
// takes a while to move.
const defaultSnapshotTimeout = 10 * time.Minute

func newSnapshotCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "snapshot", Short: "Save, inspect and restore snapshots of the cluster metadata"}
	cmd.AddCommand(newSnapshotSaveCmd(), newSnapshotInspectCmd(), newSnapshotRestoreCmd())
	return cmd
}

// snapshotSummary is the JSON contract of `keel snapshot inspect`
// (DESIGN.md); `snapshot save` prints the same plus its elapsed time.
type snapshotSummary struct {
	FormatVersion   uint32  `json:"format_version"`
	MetadataVersion uint32  `json:"metadata_version"`
	ClusterID       string  `json:"cluster_id"`
	Index           uint64  `json:"index"`
	Term            uint64  `json:"term"`
	ControllerEpoch int64   `json:"controller_epoch"`
	Brokers         int     `json:"brokers"`
	Topics          int     `json:"topics"`
	Partitions      int     `json:"partitions"`
	SizeBytes       int64   `json:"size_bytes"`
	SHA256          string  `json:"sha256"`
	ElapsedSeconds  float64 `json:"elapsed_seconds,omitempty"`
}

// inspectSnapshotFile reads and verifies the snapshot at path: magic, format
// version, the encoding of every record, the record count and the checksum.
// (It does not rebuild the image: that is the controller's check on restore,
// and would cost a million partitions some seconds here.)
func inspectSnapshotFile(path string) (*snapshotSummary, error) {
	sum, err := verifySnapshotFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return sum, nil
}

func verifySnapshotFile(path string) (*snapshotSummary, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	info, err := fsm.VerifySnapshot(f)
	if err != nil {
		return nil, err
	}
	return &snapshotSummary{
		FormatVersion:   info.FormatVersion,
		MetadataVersion: info.MetadataVersion,
		ClusterID:       info.ClusterID,
		Index:           info.Index,
		Term:            info.Term,
		ControllerEpoch: info.ControllerEpoch,
		Brokers:         info.Brokers,
		Topics:          info.Topics,
		Partitions:      info.Partitions,
		SizeBytes:       st.Size(),
		SHA256:          hex.EncodeToString(info.SHA256),
	}, nil
}

// saveSnapshot fetches a snapshot from the active controller into a temp
// file beside path, fsyncs it, verifies it by reading it back, and only then
// renames it to path. On any failure the temp file is removed and path is
// left as it was.
func saveSnapshot(ctx context.Context, c *rpc.Client, path string) (_ *snapshotSummary, err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	_, err = c.FetchSnapshot(ctx, func() (io.Writer, error) {
		// A retried transfer starts over from an empty file.
		if err := f.Truncate(0); err != nil {
			return nil, err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		return f, nil
	})
	if err != nil {
		return nil, err
	}
	if err = f.Sync(); err != nil {
		return nil, err
	}
	if err = f.Close(); err != nil {
		return nil, err
	}
	sum, err := verifySnapshotFile(tmp)
	if err != nil {
		return nil, fmt.Errorf("the snapshot received does not verify: %w", err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return nil, err
	}
	// Make the rename durable; a directory that cannot be synced (some
	// filesystems) still holds the file.
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		d.Close()
	}
	return sum, nil
}

func snapshotTable(w io.Writer, s *snapshotSummary) error {
	rows := [][]string{
		{"Format version:", fmt.Sprint(s.FormatVersion)},
		{"Metadata version:", fmt.Sprint(s.MetadataVersion)},
		{"Cluster ID:", s.ClusterID},
		{"Index:", fmt.Sprint(s.Index)},
		{"Term:", fmt.Sprint(s.Term)},
		{"Controller epoch:", fmt.Sprint(s.ControllerEpoch)},
		{"Brokers:", fmt.Sprint(s.Brokers)},
		{"Topics:", fmt.Sprint(s.Topics)},
		{"Partitions:", fmt.Sprint(s.Partitions)},
		{"Size:", fmt.Sprintf("%d bytes", s.SizeBytes)},
		{"SHA-256:", s.SHA256},
	}
	if s.ElapsedSeconds > 0 {
		rows = append(rows, []string{"Elapsed:", fmt.Sprintf("%.3fs", s.ElapsedSeconds)})
	}
	return printTable(w, rows)
}

func newSnapshotSaveCmd() *cobra.Command {
	a := &adminFlags{timeout: defaultSnapshotTimeout}
	cmd := &cobra.Command{
		Use:   "save FILE",
		Short: "Save a consistent snapshot of the cluster metadata from the active controller",
		Long: `Save a consistent snapshot of the committed metadata, fetched from the active
controller. It is written to a temporary file beside FILE, synced, verified
(checksum, record count, format version), and only then renamed to FILE. On
failure FILE is left as it was.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) (*snapshotSummary, error) {
				start := time.Now()
				sum, err := saveSnapshot(ctx, c, args[0])
				if err != nil {
					return nil, err
				}
				sum.ElapsedSeconds = time.Since(start).Seconds()
				return sum, nil
			}, snapshotTable)
		},
	}
	a.add(cmd)
	return cmd
}

func newSnapshotInspectCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "inspect FILE",
		Short: "Verify a snapshot file and print its header, counts, size and checksum",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			sum, err := inspectSnapshotFile(args[0])
			if err != nil {
				return err
			}
			return printAs(cmd.OutOrStdout(), output, sum, snapshotTable)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

// restoreResult is what `keel snapshot restore -o json` prints.
type restoreResult struct {
	ClusterID       string `json:"cluster_id"`
	ControllerEpoch int64  `json:"controller_epoch"`
	SnapshotIndex   uint64 `json:"snapshot_index"`
	Brokers         int32  `json:"brokers"`
	Topics          int32  `json:"topics"`
	Partitions      int32  `json:"partitions"`
}

func newSnapshotRestoreCmd() *cobra.Command {
	a := &adminFlags{timeout: defaultSnapshotTimeout}
	var force bool
	cmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "Replace the running cluster's metadata with a snapshot file",
		Long: `Restore the metadata of the running cluster from a snapshot file, through the
active controller (raft's user restore). Every controller converges to the
snapshot's image; the controller epoch keeps increasing; brokers get an image of
the restored state, and brokers the snapshot does not hold register again.

The file is verified here first. A snapshot of another cluster is refused
unless --force-cluster-id, which restores it under this cluster's id.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := verifySnapshotFile(args[0]); err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) (restoreResult, error) {
				resp, err := c.RestoreSnapshot(ctx, args[0], force)
				if err != nil {
					// The file, named: the error alone may be the cluster's.
					return restoreResult{}, fmt.Errorf("restore %s: %s", args[0], errorLine(err))
				}
				return restoreResult{ClusterID: resp.ClusterId, ControllerEpoch: resp.ControllerEpoch, SnapshotIndex: resp.SnapshotIndex,
					Brokers: resp.Brokers, Topics: resp.Topics, Partitions: resp.Partitions}, nil
			}, func(w io.Writer, r restoreResult) error {
				fmt.Fprintf(w, "restored cluster %s from %s (snapshot index %d): %d brokers, %d topics, %d partitions; controller epoch now %d\n",
					r.ClusterID, args[0], r.SnapshotIndex, r.Brokers, r.Topics, r.Partitions, r.ControllerEpoch)
				return nil
			})
		},
	}
	a.add(cmd)
	cmd.Flags().BoolVar(&force, "force-cluster-id", false, "restore a snapshot of another cluster, under this cluster's id")
	return cmd
}
