package integration

// Issue 26, items 6 and 7, on real processes: a controller whose state
// machine refuses a committed entry stops acting on its image, and a data
// dir put back from an older copy is refused at start.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest/keelproc"
	"github.com/keel-dev/keel/server"
)

// TestIntegrity_OldBinaryStopsActing: controller 1 is restarted on a binary
// too old for the log (the hidden flag that makes its state machine stop at
// metadata.version 1) after the cluster was raised to level 2. Replaying
// its log, it refuses the committed FeatureLevel record. It goes not ready,
// `keel quorum status` names it with the entry's index and the state
// machine's error, it logs one error line, and when the active controller
// is killed and raft elects it (it ranks first for the crash election), it
// does not take over: it hands leadership to the other live voter.
// (Before, it stayed ready, and became the active controller on an image
// at level 1 while the log said 2.)
func TestIntegrity_OldBinaryStopsActing(t *testing.T) {
	c := startCluster(t, 3, withMetrics(), withControllerFlags("--initial-metadata-version", "1"))
	leader, _ := c.WaitForActive(t, activeTimeout)
	var up featureUpdateJSON
	c.keelJSON(t, &up, "features", "upgrade", "--metadata-version", "2")
	if up.MetadataVersion != 2 {
		t.Fatalf("upgrade: %+v", up)
	}
	if leader == 1 {
		c.keelJSON(t, &struct{}{}, "quorum", "transfer-leadership", "--to", "2")
		leader, _ = c.WaitForActive(t, activeTimeout)
	}
	c.WaitForConverged(t, c.IDs(), c.appendNoOp(t, 10*time.Second).Index)

	// Controller 1 on the "old binary".
	old := c.node(1)
	c.Stop(1)
	old.SetArgs(append(old.Args(), oldBinaryFlag...))
	c.Start(1)
	var why string
	poll.UntilState(t, 20*time.Second, "controller 1 to say it is not ready, for the refused entry", func() (bool, string) {
		v, err := c.Describe(context.Background(), 1)
		if err != nil {
			return false, err.Error()
		}
		why = v.NotReadyReason
		return !v.Ready && strings.Contains(why, "refused committed entry"), fmt.Sprintf("ready=%v %q", v.Ready, why)
	})
	for _, want := range []string{"this node's metadata image diverged at index ", "metadata.version 2 is outside the range this binary supports, 1-1"} {
		if !strings.Contains(why, want) {
			t.Errorf("controller 1's not-ready reason %q does not say %q", why, want)
		}
	}

	// keel quorum status names it, with the index and the error.
	var st struct {
		Voters []struct {
			ID       int32 `json:"id"`
			Diverged *struct {
				Index  uint64 `json:"index"`
				Reason string `json:"reason"`
			} `json:"diverged"`
		} `json:"voters"`
	}
	c.keelJSON(t, &st, "quorum", "status")
	named := false
	for _, v := range st.Voters {
		switch {
		case v.ID == 1 && v.Diverged != nil && v.Diverged.Index > 0 && strings.Contains(v.Diverged.Reason, "metadata.version 2 is outside the range"):
			named = true
		case v.ID != 1 && v.Diverged != nil:
			t.Errorf("quorum status: controller %d diverged too: %+v", v.ID, v.Diverged)
		}
	}
	if !named {
		t.Errorf("quorum status -o json does not name controller 1 as diverged: %+v", st)
	}
	stdout, stderr, code := runKeel(t, 30*time.Second, c.adminArgs("quorum", "status")...)
	if code != 0 || !strings.Contains(stdout, "Controller 1 does not act on its image (diverged at index ") {
		t.Errorf("keel quorum status: exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
	}
	if s, err := scrapeMetrics(old.MetricsAddr()); err != nil || s["keel_controller_image_diverged"] != 1 {
		t.Errorf("controller 1's keel_controller_image_diverged = %v (%v), want 1", s["keel_controller_image_diverged"], err)
	}
	if n := strings.Count(old.Output(), `level=ERROR msg="this controller's metadata image is not the quorum's`); n != 1 {
		t.Errorf("controller 1 logged the divergence %d times, want once", n)
	}

	// The active controller killed: controller 1 ranks first among the
	// survivors and starts the crash election. It must not take over. On a
	// loaded machine the other survivor may win the election instead: then
	// kill that one's leadership again (up to three times) until controller
	// 1 has been elected once.
	for attempt := 1; attempt <= 3 && !strings.Contains(old.Output(), "handing leadership away"); attempt++ {
		c.Kill(leader)
		survivor := otherThan(otherThan(c.IDs(), leader), 1)[0]
		poll.UntilState(t, 20*time.Second, fmt.Sprintf("controller %d active after the kill of %d", survivor, leader), func() (bool, string) {
			views, errs := c.Views(context.Background(), []int32{1, survivor})
			if v := views[1]; v != nil && v.Active {
				t.Fatalf("controller 1, whose image diverged, is the active controller (epoch %d)", v.ActiveEpoch)
			}
			v := views[survivor]
			return v != nil && v.Active, formatViews(views, errs)
		})
		c.Restart(leader)
		leader, _ = c.WaitForActive(t, activeTimeout)
	}
	if !strings.Contains(old.Output(), "handing leadership away") {
		t.Errorf("raft never elected controller 1 in three kills of the active controller; its log:\n%s", keelproc.LastLines(old.Output(), 20))
	}
	if strings.Contains(old.Output(), `msg="active controller"`) {
		t.Errorf("controller 1 became the active controller; its log:\n%s", keelproc.LastLines(old.Output(), 20))
	}
	if leader == 1 {
		t.Errorf("controller 1 is the active controller")
	}
}

// TestIntegrity_RolledBackDataDirRefused is the observation of issue 26
// item 7: controller F's data dir is copied aside; F and the active
// controller L acknowledge ten writes while controller B is down (so only
// L and F hold them); the quorum stops; F's old copy is put back; then F
// and B start, and L a moment later, as a whole quorum restarted. Before,
// F and B (both without the writes) elected a leader between them before L
// was up, and the ten acknowledged writes were gone on every node. Now F
// asks its peers before its raft starts, L answers that it saw F hold the
// writes, and F refuses to start, in one line; L and B keep every write.
func TestIntegrity_RolledBackDataDirRefused(t *testing.T) {
	c := startCluster(t, 3)
	leader, _ := c.WaitForActive(t, activeTimeout)
	c.WaitForConverged(t, c.IDs(), c.appendNoOp(t, 10*time.Second).Index)
	followers := otherThan(c.IDs(), leader)
	f, b := followers[0], followers[1]

	c.Stop(f)
	old := filepath.Join(t.TempDir(), "old")
	copyTree(t, c.DataDir(f), old)
	c.Start(f)
	c.WaitForConverged(t, c.IDs(), c.appendNoOp(t, 10*time.Second).Index)
	c.Stop(b)
	var acked []ackedWrite
	for range 10 {
		id := newRequestID()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := c.Client().AppendNoOp(ctx, id)
		cancel()
		if err != nil {
			t.Fatalf("AppendNoOp: %v", err)
		}
		acked = append(acked, ackedWrite{index: resp.Index, id: id})
	}
	last := acked[len(acked)-1].index
	c.WaitForApplied(t, []int32{leader, f}, last)
	// Until the leader has recorded that F holds them (every second).
	poll.UntilState(t, 20*time.Second, fmt.Sprintf("controller %d to record that %d holds index %d", leader, f, last), func() (bool, string) {
		seen, err := recordedFor(c.DataDir(leader), f)
		return err == nil && seen >= last, fmt.Sprintf("%d (%v)", seen, err)
	})
	c.Stop(leader)
	c.Stop(f)
	mustRemove(t, c.DataDir(f))
	copyTree(t, old, c.DataDir(f))

	// F and B first: before, they elected a leader between them at once.
	nf, nb := c.node(f), c.node(b)
	launched := make(chan error, 1)
	go func() { launched <- c.h.StartNodes(context.Background(), nf, nb) }()
	poll.UntilState(t, 20*time.Second, fmt.Sprintf("controllers %d and %d to start (asking their peers, or electing a leader)", f, b), func() (bool, string) {
		asking := strings.Contains(nf.Output(), server.RollbackCheckMessage) && strings.Contains(nb.Output(), server.RollbackCheckMessage)
		views, errs := c.Views(context.Background(), []int32{f, b})
		_, _, elected := activeAgreed([]int32{f, b}, views)
		return asking || elected, formatViews(views, errs)
	})
	c.Start(leader)
	poll.Until(t, 30*time.Second, fmt.Sprintf("controller %d to exit", f), func() bool { return !nf.Running() })
	lastLine := keelproc.LastLines(strings.TrimSpace(nf.Output()), 1)
	want := fmt.Sprintf("keel: data dir %s was rolled back: voter %d saw this node hold index ", c.DataDir(f), leader)
	if nf.ExitCode() != 1 || !strings.HasPrefix(lastLine, want) || !strings.Contains(lastLine, "to recover, run keel quorum remove-voter") {
		t.Errorf("controller %d exited with status %d, last line %q; want 1 and %q...", f, nf.ExitCode(), lastLine, want)
	}
	if err := <-launched; err == nil {
		t.Errorf("controller %d started", f)
	}

	// L and B keep every acknowledged write.
	c.WaitForActive(t, activeTimeout)
	c.WaitForConverged(t, []int32{leader, b}, c.appendNoOp(t, 10*time.Second).Index)
	c.Stop(leader)
	c.Stop(b)
	for _, id := range []int32{leader, b} {
		if lost := dumpLog(t, c.DataDir(id)).missing(acked); len(lost) > 0 {
			t.Errorf("controller %d's log lacks %d of the %d acknowledged writes: %v", id, len(lost), len(acked), lost)
		}
	}
}

// recordedFor reads, from a controller's data dir, the highest committed
// index it recorded that node id holds (highwater.json: docs/storage.md).
func recordedFor(dataDir string, id int32) (uint64, error) {
	raw, err := os.ReadFile(filepath.Join(dataDir, "highwater.json"))
	if err != nil {
		return 0, err
	}
	var hw struct {
		Peers map[string]uint64 `json:"peers"`
	}
	if err := json.Unmarshal(raw, &hw); err != nil {
		return 0, err
	}
	return hw.Peers[fmt.Sprint(id)], nil
}
