package controller_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

func writeSnapshotFile(t *testing.T, img *fsm.Image) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "snap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := fsm.WriteSnapshot(f, img); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRestore_ConvergesAndTheEpochMovesOn(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	ctx := context.Background()
	registerActive(t, leader, 1, incA)
	if _, err := leader.Controller().CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: "saved", Partitions: 2, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	saved := leader.FSM().Image()
	path := writeSnapshotFile(t, saved)
	// Change the cluster after the save.
	if err := leader.Controller().DeleteTopic(ctx, "saved"); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Controller().CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: "later", Partitions: 1, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	_, before := leader.Controller().Active()

	res, err := leader.Controller().RestoreSnapshot(ctx, path, false)
	if err != nil {
		t.Fatalf("RestoreSnapshot: %v", err)
	}
	if res.Epoch != before+1 || res.Info.Topics != 1 {
		t.Fatalf("result = epoch %d (was %d), %+v", res.Epoch, before, res.Info)
	}
	c.WaitForApplied(leader.FSM().Image().Offset)
	for _, nd := range c.Nodes() {
		img := nd.FSM().Image()
		_, hasSaved := img.Topic("saved")
		_, hasLater := img.Topic("later")
		if !hasSaved || hasLater || img.ControllerEpoch != before+1 || img.ClusterID != saved.ClusterID {
			t.Fatalf("node %d after restore: saved %v later %v epoch %d", nd.ID(), hasSaved, hasLater, img.ControllerEpoch)
		}
	}
}

func TestRestore_RefusesAnotherClusterUnlessForced(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	other := leader.FSM().Image().WithIdentity("another-cluster", 7, 1)
	path := writeSnapshotFile(t, other)
	ctx := context.Background()
	if _, err := leader.Controller().RestoreSnapshot(ctx, path, false); !errors.Is(err, controller.ErrInconsistentClusterID) {
		t.Fatalf("err = %v, want ErrInconsistentClusterID", err)
	}
	if id := leader.FSM().Image().ClusterID; id != clusterID {
		t.Fatalf("a refused restore changed the cluster id to %q", id)
	}
	res, err := leader.Controller().RestoreSnapshot(ctx, path, true)
	if err != nil {
		t.Fatal(err)
	}
	if img := leader.FSM().Image(); img.ClusterID != clusterID || img.ControllerEpoch != res.Epoch || res.Epoch != 2 {
		t.Fatalf("forced restore: cluster %q epoch %d (result %d)", img.ClusterID, img.ControllerEpoch, res.Epoch)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	os.WriteFile(bad, []byte("KEELSNAPgarbage"), 0o600)
	if _, err := leader.Controller().RestoreSnapshot(ctx, bad, true); !errors.Is(err, fsm.ErrCorruptSnapshot) {
		t.Fatalf("corrupt file: err = %v", err)
	}
}
