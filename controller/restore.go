package controller

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// RestoreResult describes a completed restore.
type RestoreResult struct {
	Info  *fsm.SnapshotInfo // of the snapshot as given
	Epoch int64             // the controller epoch committed after it
}

// RestoreSnapshot replaces the cluster's metadata with the snapshot in the
// file at path, through raft's user restore, on the event loop so that no
// decision interleaves with it. The snapshot is verified first; one of
// another cluster is refused unless force, and then takes this cluster's id.
// Its controller epoch is replaced by the current one and a new epoch is
// committed after it, so the epoch never goes back. Every node restores the
// image (followers by snapshot install); brokers get an image of it on
// their streams, and brokers it does not hold must register again.
func (c *Controller) RestoreSnapshot(ctx context.Context, path string, force bool) (*RestoreResult, error) {
	var result *RestoreResult
	err := c.onLoop(ctx, func(l *leadership) (err error) {
		result, err = l.restore(path, force, false)
		return err
	})
	if err != nil {
		// result is not read: after ctx ends, the loop may still write it.
		return nil, err
	}
	return result, nil
}

// restore runs on the event loop (or in establish, before it starts).
// keepIdentity restores the snapshot's own cluster id and epoch: a new
// cluster started from a backup.
func (l *leadership) restore(path string, force, keepIdentity bool) (*RestoreResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	img, info, err := fsm.ReadSnapshotInfo(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	cur := l.c.fsm.Image()
	if !keepIdentity {
		if img.ClusterID != cur.ClusterID && !force {
			return nil, fmt.Errorf("%w: the snapshot is of cluster %s, this is cluster %s (keel snapshot restore --force-cluster-id restores it under this cluster's id)",
				ErrInconsistentClusterID, img.ClusterID, cur.ClusterID)
		}
		img = img.WithIdentity(cur.ClusterID, cur.ControllerEpoch, l.c.cfg.NodeID)
	}
	// A snapshot restored as it is (a new cluster from a backup) goes to raft
	// straight from its file; one given this cluster's identity is
	// rewritten to a temporary file first.
	src, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	if !keepIdentity {
		tmp, err := os.CreateTemp("", "keel-restore-*")
		if err != nil {
			return nil, err
		}
		defer os.Remove(tmp.Name())
		defer tmp.Close()
		if err := fsm.WriteSnapshot(tmp, img); err != nil {
			return nil, err
		}
		if _, err := tmp.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		src = tmp
	}
	st, err := src.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: img.Offset, Term: img.Term, Size: size}
	if err := l.c.raft.Restore(meta, src, l.c.cfg.ApplyTimeout); err != nil {
		return nil, fmt.Errorf("raft restore: %w", err)
	}
	// The image now holds the snapshot; the epoch moves on from it.
	next := l.c.fsm.Image().ControllerEpoch + 1
	rec := &keelpb.Record{Record: &keelpb.Record_ControllerEpoch{ControllerEpoch: &keelpb.ControllerEpochRecord{Epoch: next, LeaderId: l.c.cfg.NodeID}}}
	if _, err := l.c.commitBatch(rec); err != nil {
		return nil, fmt.Errorf("commit controller epoch %d after the restore: %w", next, err)
	}
	l.epoch.Store(next)
	// The restored brokers start fresh sessions, as after a failover.
	l.sessions.reset(l.c.fsm.Image().Brokers(), l.c.cfg.Now())
	l.log.Info("metadata restored from snapshot", "cluster_id", l.c.fsm.Image().ClusterID, "snapshot_index", info.Index,
		"brokers", info.Brokers, "topics", info.Topics, "partitions", info.Partitions, "epoch", next)
	return &RestoreResult{Info: info, Epoch: next}, nil
}
