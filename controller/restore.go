package controller

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/keel-dev/keel/consensus"
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
// What is restored is the snapshot onto the current image
// (fsm.Image.RestoredOnto), so that nothing goes back: the controller epoch
// is the current one and a new epoch is committed after it, the brokers
// keep their registrations, a partition that exists now keeps its leader
// and ISR at epochs above its current ones, and one that does not awaits
// its replicas' logs. Every node restores the image (followers by snapshot
// install); brokers get an image of it on their streams.
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
// cluster started from a backup (disaster recovery), which trusts nothing
// the snapshot says of brokers and leaders (fsm.Image.ForDisasterRecovery).
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
	if keepIdentity {
		img, err = img.ForDisasterRecovery()
	} else {
		if img.ClusterID != cur.ClusterID && !force {
			return nil, fmt.Errorf("%w: the snapshot is of cluster %s, this is cluster %s (keel snapshot restore --force-cluster-id restores it under this cluster's id)",
				ErrInconsistentClusterID, img.ClusterID, cur.ClusterID)
		}
		img, err = img.RestoredOnto(cur, l.c.cfg.NodeID)
	}
	if err != nil {
		return nil, fmt.Errorf("%w; nothing was restored: %w", ErrRefused, err)
	}
	// The image raft restores is written to a temporary file: raft reads
	// it from there, and so does every follower's install.
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
	st, err := tmp.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	meta := consensus.SnapshotMeta{Index: img.Offset, Term: img.Term, Size: size}
	if err := l.c.quorum.Restore(meta, tmp, l.c.cfg.ApplyTimeout); err != nil {
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
