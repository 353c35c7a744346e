package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
)

// snapshotFlags make the controllers snapshot (and truncate their logs)
// every few entries, so that a test of a few hundred entries goes through
// many snapshots.
var snapshotFlags = withControllerFlags("--snapshot-threshold", "16", "--trailing-logs", "8", "--snapshot-interval", "100ms")

// snapshotJSON is `keel snapshot inspect -o json` (and what save prints).
type snapshotJSON struct {
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
	ElapsedSeconds  float64 `json:"elapsed_seconds"`
}

// waitForLog polls until node id's latest process has logged line at least
// n times.
func (c *Cluster) waitForLog(t testing.TB, id int32, line string, n int, timeout time.Duration) {
	t.Helper()
	poll.UntilState(t, timeout, fmt.Sprintf("node %d to log %q at least %d times", id, line, n), func() (bool, string) {
		got := strings.Count(c.node(id).Output(), line)
		return got >= n, fmt.Sprintf("logged %d times", got)
	})
}

func TestSnapshot_StoppedFollowerCatchesUpByInstall(t *testing.T) {
	c := startCluster(t, 3, snapshotFlags)
	leader, _ := c.WaitForActive(t, activeTimeout)
	lagging := otherThan(c.IDs(), leader)[0]
	c.Stop(lagging)

	var last uint64
	for range 200 {
		last = c.appendNoOp(t, 10*time.Second).Index
	}
	// Several snapshots, each truncating the log behind it: the entries the
	// stopped node needs are gone from the leader's log.
	c.waitForLog(t, leader, "compacting logs", 3, 20*time.Second)

	c.Restart(lagging)
	c.WaitForConverged(t, c.IDs(), last)
	c.waitForLog(t, lagging, "copied to local snapshot", 1, 10*time.Second)
	if r := c.appendNoOp(t, 10*time.Second); r.Index <= last {
		t.Fatalf("no-op after catch-up committed at %d, want > %d", r.Index, last)
	}
}

func TestSnapshot_RestartAfterTruncationKeepsCommittedState(t *testing.T) {
	brokers := []int32{1, 2, 3}
	c := startPartitionCluster(t, brokers, snapshotFlags)
	created := c.createTopic(t, "snap-keep", "--partitions", "4", "--replication-factor", "3")
	leader, epoch := c.WaitForActive(t, activeTimeout)
	var last uint64
	for range 60 {
		last = c.appendNoOp(t, 10*time.Second).Index
	}
	for _, id := range c.IDs() {
		c.waitForLog(t, id, "compacting logs", 1, 20*time.Second)
	}
	c.WaitForApplied(t, c.IDs(), last)

	for _, id := range otherThan(c.IDs(), leader) {
		c.Stop(id)
	}
	c.Stop(leader)
	for _, id := range c.IDs() {
		c.Restart(id)
	}
	// The restarted controllers' cleanups run first (last in, first out):
	// stop the brokers before them, while a controlled shutdown can finish.
	t.Cleanup(func() {
		for _, b := range brokers {
			if c.BrokerRunning(b) {
				c.StopBroker(b)
			}
		}
	})
	_, newEpoch := c.WaitForActive(t, activeTimeout)
	if newEpoch <= epoch {
		t.Fatalf("controller epoch after restarting every node = %d, want > %d", newEpoch, epoch)
	}
	c.WaitForApplied(t, c.IDs(), last)
	for _, id := range c.IDs() {
		if !strings.Contains(c.node(id).Output(), "restored from snapshot") {
			t.Errorf("node %d did not restore a snapshot on restart", id)
		}
		list, err := c.ListBrokersOn(t.Context(), id)
		if err != nil {
			t.Fatalf("list brokers on node %d: %v", id, err)
		}
		for _, b := range brokers {
			if _, ok := list[b]; !ok {
				t.Errorf("node %d: broker %d missing after restart: %s", id, b, formatBrokerList(list))
			}
		}
	}
	var got topicJSON
	c.keelJSON(t, &got, "topic", "describe", "snap-keep")
	if got.ID != created.ID || len(got.Partitions) != len(created.Partitions) {
		t.Fatalf("topic after restart: id %s with %d partitions, want id %s with %d", got.ID, len(got.Partitions), created.ID, len(created.Partitions))
	}
	for i, p := range got.Partitions {
		if len(p.Replicas) != len(created.Partitions[i].Replicas) {
			t.Errorf("partition %d: replicas %v after restart, want %v", p.Partition, p.Replicas, created.Partitions[i].Replicas)
		}
	}
}

func TestSnapshot_SaveAndInspectAgreeWithCluster(t *testing.T) {
	brokers := []int32{1, 2, 3}
	c := startPartitionCluster(t, brokers, snapshotFlags)
	c.createTopic(t, "snap-a", "--partitions", "3", "--replication-factor", "2")
	c.createTopic(t, "snap-b", "--partitions", "2", "--replication-factor", "3")
	st := quorumStatus(t, c.Addrs())

	file := filepath.Join(t.TempDir(), "meta.snap")
	var saved snapshotJSON
	c.keelJSON(t, &saved, "snapshot", "save", file)
	if saved.ClusterID != st.ClusterID || saved.Brokers != len(brokers) || saved.Topics != 2 || saved.Partitions != 5 {
		t.Fatalf("snapshot save printed %+v; want cluster %s, 3 brokers, 2 topics, 5 partitions", saved, st.ClusterID)
	}
	if saved.ControllerEpoch != st.ControllerEpoch || saved.Index == 0 || saved.Index > quorumStatus(t, c.Addrs()).CommitIndex {
		t.Errorf("snapshot save: epoch %d index %d; cluster epoch %d commit index %d", saved.ControllerEpoch, saved.Index, st.ControllerEpoch, st.CommitIndex)
	}
	if left, _ := filepath.Glob(file + ".tmp-*"); len(left) != 0 {
		t.Errorf("temp files left behind: %v", left)
	}

	stdout, stderr, code := runKeel(t, 10*time.Second, "snapshot", "inspect", file, "-o", "json")
	if code != 0 {
		t.Fatalf("snapshot inspect: exit %d: %s", code, stderr)
	}
	var inspected snapshotJSON
	if err := json.Unmarshal([]byte(stdout), &inspected); err != nil {
		t.Fatalf("snapshot inspect: %v\n%s", err, stdout)
	}
	saved.ElapsedSeconds = 0
	if inspected != saved {
		t.Errorf("inspect = %+v, save printed %+v", inspected, saved)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Size() != inspected.SizeBytes {
		t.Errorf("file size %v (%v), inspect says %d", fi, err, inspected.SizeBytes)
	}

	// A flipped byte anywhere is refused with one line and exit status 1.
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{len(data) / 2, len(data) - 3} {
		bad := append([]byte(nil), data...)
		bad[at] ^= 0x40
		badFile := filepath.Join(t.TempDir(), "bad.snap")
		if err := os.WriteFile(badFile, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := runKeel(t, 10*time.Second, "snapshot", "inspect", badFile)
		if code != 1 || stdout != "" || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, "corrupt snapshot") {
			t.Errorf("inspect of a file with byte %d flipped: exit %d, stdout %q, stderr %q; want exit 1 and one line naming the corruption", at, code, stdout, stderr)
		}
	}

	// A save that cannot write leaves nothing behind and says why.
	missing := filepath.Join(t.TempDir(), "no", "such", "dir", "x.snap")
	_, stderr, code = runKeel(t, 30*time.Second, c.adminArgs("snapshot", "save", missing)...)
	if code == 0 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Errorf("save into a missing directory: exit %d, stderr %q; want a non-zero exit and one line", code, stderr)
	}
}
