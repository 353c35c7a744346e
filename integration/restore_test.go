package integration

// Restoring the metadata from a snapshot file: into a brand-new quorum
// (disaster recovery, `keel controller --restore-from`) and into a running
// cluster (`keel snapshot restore`).

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

// restoreJSON is `keel snapshot restore -o json`.
type restoreJSON struct {
	ClusterID       string `json:"cluster_id"`
	ControllerEpoch int64  `json:"controller_epoch"`
	SnapshotIndex   uint64 `json:"snapshot_index"`
	Brokers         int    `json:"brokers"`
	Topics          int    `json:"topics"`
	Partitions      int    `json:"partitions"`
}

// saveSnapshot runs `keel snapshot save FILE -o json` into a new file in the
// test's temp dir and returns its path and what save printed.
func (c *Cluster) saveSnapshot(t testing.TB) (string, snapshotJSON) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "meta.snap")
	var saved snapshotJSON
	c.keelJSON(t, &saved, "snapshot", "save", file)
	return file, saved
}

// topicsOn asks controller ctrl alone for the topics of its committed
// image, by name, with their ids.
func (c *Cluster) topicsOn(ctx context.Context, ctrl int32) (map[string]string, error) {
	cl, err := c.client.Controller(c.node(ctrl).Addr())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, describeLimit)
	defer cancel()
	resp, err := cl.ListTopics(ctx, &keelpb.ListTopicsRequest{Stale: true})
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(resp.GetTopics()))
	for _, tp := range resp.GetTopics() {
		out[tp.GetName()] = tp.GetId()
	}
	return out, nil
}

// WaitForTopicsOnEvery polls every controller's own view until each lists
// exactly the topics of want (name to id).
func (c *Cluster) WaitForTopicsOnEvery(t testing.TB, want map[string]string) {
	t.Helper()
	poll.UntilState(t, partitionTimeout, fmt.Sprintf("every controller to list exactly the topics %v", want), func() (bool, string) {
		c.requireRunning(t, c.IDs())
		var diffs []string
		for _, id := range c.IDs() {
			got, err := c.topicsOn(context.Background(), id)
			switch {
			case err != nil:
				diffs = append(diffs, fmt.Sprintf("node %d: %v", id, err))
			case !maps.Equal(got, want):
				diffs = append(diffs, fmt.Sprintf("node %d lists %v", id, got))
			}
		}
		return len(diffs) == 0, "  " + strings.Join(diffs, "\n  ")
	})
}

// topicIDs is the name-to-id map of a `keel topic list`.
func topicIDs(rows []topicListJSON) map[string]string {
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r.Name] = r.ID
	}
	return out
}

// requireEpoch fails the test unless every controller reports epoch.
func (c *Cluster) requireEpoch(t testing.TB, epoch int64, when string) {
	t.Helper()
	views, errs := c.Views(context.Background(), c.IDs())
	for _, id := range c.IDs() {
		if v, ok := views[id]; !ok || v.ControllerEpoch != epoch {
			t.Errorf("%s: controller epochs are\n%swant %d on every node", when, formatViews(views, errs), epoch)
			return
		}
	}
}

// refusedOneLine runs the admin command args and fails the test unless it
// exits 1 with nothing on stdout and one line on stderr that contains want.
func (c *Cluster) refusedOneLine(t testing.TB, want string, args ...string) {
	t.Helper()
	stdout, stderr, code := runKeel(t, 30*time.Second, c.adminArgs(args...)...)
	line := strings.TrimSpace(stderr)
	if code != 1 || stdout != "" || strings.Contains(line, "\n") || !strings.Contains(line, want) {
		t.Errorf("keel %s: exit %d, stdout %q, stderr %q; want exit 1 and one line containing %q",
			strings.Join(args, " "), code, stdout, stderr, want)
	}
}

// TestRestore_DisasterRecoveryFromFile: a cluster with brokers, topics and
// partition changes is saved, then lost with every data dir; a brand-new
// quorum on other ports, started from the file, describes the same topics
// under the saved cluster id, one controller epoch later, each partition
// on its replicas awaiting their logs one leader epoch above the saved
// one, and lists no broker: every broker registers again.
func TestRestore_DisasterRecoveryFromFile(t *testing.T) {
	t.Parallel()
	brokers := []int32{1, 2, 3}
	c := startPartitionCluster(t, brokers)
	c.createTopic(t, "dr-a", "--partitions", "3", "--replication-factor", "3")
	c.createTopic(t, "dr-b", "--partitions", "2", "--replication-factor", "3")
	// Partition changes: broker 1 dies (its leaderships move, it leaves the
	// ISRs), comes back (rejoins them), and a preferred election gives its
	// leaderships back: leader and partition epochs above their first ones.
	restartAndRejoin(t, c, "dr-a", 1)
	c.WaitForTopic(t, "dr-b", "with every replica in the ISR", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return sameSet(p.ISR, p.Replicas) })
	})
	for _, row := range c.cliElect(t, "--type", "preferred", "--all") {
		if row.Error != "" && !strings.Contains(row.Error, "not needed") {
			t.Fatalf("preferred election: %+v", row)
		}
	}
	topics := []string{"dr-a", "dr-b"}
	for _, name := range topics {
		c.WaitForTopic(t, name, "led by its preferred replicas", func(d topicJSON) bool {
			return d.every(func(p partitionJSON) bool { return p.Leader == p.Replicas[0] && sameSet(p.ISR, p.Replicas) })
		})
	}

	describe := func() (map[string]topicJSON, map[int32]brokerListRow) {
		ds := map[string]topicJSON{}
		for _, name := range topics {
			ds[name] = c.cliDescribe(t, name)
		}
		return ds, c.cliBrokerList(t)
	}
	before, beforeBrokers := describe()
	file, saved := c.saveSnapshot(t)
	want, wantBrokers := describe()
	// Nothing changed while saving, so the file holds exactly this state.
	for _, name := range topics {
		if !sameTopic(before[name], want[name]) {
			t.Fatalf("topic %s changed while saving:\n%swas\n%s", name, formatTopic(want[name]), formatTopic(before[name]))
		}
	}
	if !maps.Equal(beforeBrokers, wantBrokers) {
		t.Fatalf("brokers changed while saving: %v, was %v", wantBrokers, beforeBrokers)
	}
	if want["dr-a"].every(func(p partitionJSON) bool { return p.LeaderEpoch == 0 }) {
		t.Fatalf("topic dr-a has no leader change to restore:\n%s", formatTopic(want["dr-a"]))
	}
	if saved.Brokers != 3 || saved.Topics != 2 || saved.Partitions != 5 {
		t.Fatalf("snapshot save printed %+v; want 3 brokers, 2 topics, 5 partitions", saved)
	}

	// The disaster: every process dies at once and every data dir is lost.
	c.KillTogether(c.IDs(), brokers)
	for _, id := range c.IDs() {
		if err := os.RemoveAll(c.DataDir(id)); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range brokers {
		if err := os.RemoveAll(c.BrokerDataDir(id)); err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now()
	r := startCluster(t, 3, withSessionTimeout(testSessionTimeout), withLeaderImbalanceCheck(-time.Second),
		withControllerFlags("--restore-from", file))
	_, epoch := r.WaitForActive(t, activeTimeout)
	t.Logf("new quorum from the file: active after %s", time.Since(start).Round(time.Millisecond))
	if epoch != saved.ControllerEpoch+1 {
		t.Errorf("controller epoch of the restored quorum = %d, want the snapshot's %d + 1", epoch, saved.ControllerEpoch)
	}
	if st := quorumStatus(t, r.Addrs()); st.ClusterID != saved.ClusterID {
		t.Errorf("cluster id of the restored quorum = %s, want the snapshot's %s", st.ClusterID, saved.ClusterID)
	}
	for _, name := range topics {
		if got := r.cliDescribe(t, name); !awaitingLogs(got, want[name]) {
			t.Errorf("topic %s restored as\n%swant it awaiting its replicas' logs one leader epoch above\n%s", name, formatTopic(got), formatTopic(want[name]))
		}
	}
	if gotBrokers := r.cliBrokerList(t); len(gotBrokers) != 0 || len(wantBrokers) != 3 {
		t.Errorf("restored brokers %v (saved %v), want none: every broker registers with the new quorum", gotBrokers, wantBrokers)
	}
	// Every controller holds the restored topics, not just the active one.
	wantIDs := map[string]string{"dr-a": want["dr-a"].ID, "dr-b": want["dr-b"].ID}
	r.WaitForTopicsOnEvery(t, wantIDs)

	// The restored state is the quorum's own: a restart of every node (with
	// --restore-from still given, now ignored) keeps it and moves the epoch
	// on, rather than restoring the file again (which would start over at
	// the snapshot's epoch + 1, this quorum's first epoch). By how much it
	// moves on depends on timing: a leader stopped with SIGTERM hands
	// leadership on first, and its successor may commit an epoch of its own
	// before it is stopped too.
	for _, id := range r.IDs() {
		r.Stop(id)
	}
	for _, id := range r.IDs() {
		r.Restart(id)
	}
	if _, again := r.WaitForActive(t, activeTimeout); again <= epoch {
		t.Errorf("controller epoch after restarting the restored quorum = %d, want more than %d", again, epoch)
	}
	r.WaitForTopicsOnEvery(t, wantIDs)
	for _, name := range topics {
		if got := r.cliDescribe(t, name); !awaitingLogs(got, want[name]) {
			t.Errorf("topic %s after restarting the restored quorum:\n%swant it awaiting its replicas' logs one leader epoch above\n%s", name, formatTopic(got), formatTopic(want[name]))
		}
	}
}

// awaitingLogs reports whether got is saved as a disaster recovery restores
// it: the same topic on the same replicas, each partition without a leader,
// RECOVERING (awaiting its replicas' logs), one leader and partition epoch
// on.
func awaitingLogs(got, saved topicJSON) bool {
	if got.Name != saved.Name || got.ID != saved.ID || len(got.Partitions) != len(saved.Partitions) {
		return false
	}
	for i, p := range got.Partitions {
		q := saved.Partitions[i]
		if p.Partition != q.Partition || p.Leader != noLeader || p.RecoveryState != stateRecovering ||
			p.LeaderEpoch != q.LeaderEpoch+1 || p.PartitionEpoch != q.PartitionEpoch+1 || !slices.Equal(p.Replicas, q.Replicas) {
			return false
		}
	}
	return true
}

// TestRestore_OnlineConvergesEverywhere: a snapshot restored into the
// running cluster it was saved from undoes what happened since on every
// controller and every broker; the controller epoch moves on by one; the
// brokers keep their registrations, a broker registered after the save too.
func TestRestore_OnlineConvergesEverywhere(t *testing.T) {
	t.Parallel()
	brokers := []int32{1, 2, 3}
	c := startPartitionCluster(t, brokers)
	keep := c.createTopic(t, "on-keep", "--partitions", "3", "--replication-factor", "3")
	gone := c.createTopic(t, "on-gone", "--partitions", "2", "--replication-factor", "2")
	file, saved := c.saveSnapshot(t)
	savedTopics := map[string]string{keep.Name: keep.ID, gone.Name: gone.ID}

	// After the save: a topic deleted, another created, a fourth broker.
	if _, stderr, code := runKeel(t, 30*time.Second, c.adminArgs("topic", "delete", gone.Name)...); code != 0 {
		t.Fatalf("keel topic delete %s: exit %d: %s", gone.Name, code, stderr)
	}
	later := c.createTopic(t, "on-later", "--partitions", "2", "--replication-factor", "3")
	c.StartBroker(4, withRack("r4"))
	all := append(slices.Clone(brokers), 4)
	before := c.WaitForBrokers(t, allActive(all...))
	c.WaitForInspect(t, brokers, "without replicas of "+gone.Name+" and with those of "+later.Name, func(v *keelpb.InspectResponse) bool {
		g, _ := replicasOf(v, gone.Name)
		l, _ := replicasOf(v, later.Name)
		return len(g) == 0 && len(l) > 0
	})
	_, epoch := c.WaitForActive(t, activeTimeout)

	start := time.Now()
	var res restoreJSON
	c.keelJSON(t, &res, "snapshot", "restore", file)
	t.Logf("restore: %+v in %s", res, time.Since(start).Round(time.Millisecond))
	if res.ClusterID != saved.ClusterID || res.SnapshotIndex != saved.Index || res.Topics != 2 || res.Partitions != 5 || res.Brokers != 3 {
		t.Errorf("snapshot restore printed %+v; want cluster %s, snapshot index %d, 3 brokers, 2 topics, 5 partitions", res, saved.ClusterID, saved.Index)
	}
	if res.ControllerEpoch != epoch+1 {
		t.Errorf("snapshot restore printed controller epoch %d, want %d + 1", res.ControllerEpoch, epoch)
	}

	c.WaitForTopicsOnEvery(t, savedTopics)
	_, after := c.WaitForActive(t, activeTimeout)
	if after != epoch+1 || after <= saved.ControllerEpoch {
		t.Errorf("controller epoch after the restore = %d, want %d + 1 and above the snapshot's %d", after, epoch, saved.ControllerEpoch)
	}
	c.requireEpoch(t, after, "after the restore")
	t.Logf("every controller holds the saved topics %s after the restore", time.Since(start).Round(time.Millisecond))

	// Broker 4 is not in the snapshot: a registration is a live process's,
	// which the restore keeps (a new one would bounce it).
	for id, b := range c.WaitForBrokers(t, allActive(all...)) {
		if b.GetEpoch() != before[id].GetEpoch() {
			t.Errorf("broker %d at epoch %d after the restore, want its registration's %d", id, b.GetEpoch(), before[id].GetEpoch())
		}
	}
	for _, name := range []string{keep.Name, gone.Name} {
		d, _ := c.WaitForAgreement(t, name, all)
		if d.ID != savedTopics[name] {
			t.Errorf("topic %s restored with id %s, want %s", name, d.ID, savedTopics[name])
		}
	}
	c.WaitForInspect(t, all, fmt.Sprintf("streaming the restored image at controller epoch %d, without replicas of %s", after, later.Name), func(v *keelpb.InspectResponse) bool {
		l, _ := replicasOf(v, later.Name)
		return len(l) == 0 && v.GetControllerEpoch() == after && v.GetClusterId() == saved.ClusterID && v.GetState() == stateActive
	})
	t.Logf("every broker agrees with the restored image %s after the restore", time.Since(start).Round(time.Millisecond))
	if _, err := c.DescribeTopicE(context.Background(), later.Name); !isNotFound(err) {
		t.Errorf("describe %s after the restore: %v, want NotFound", later.Name, err)
	}

	// The restored cluster is writable, from the restored state: the topic
	// created after the save can be created again (a new topic, new id),
	// and the restored one deleted again.
	again := c.createTopic(t, later.Name, "--partitions", "2", "--replication-factor", "3")
	if again.ID == later.ID {
		t.Errorf("topic %s created again after the restore with its old id %s", later.Name, later.ID)
	}
	c.WaitForAgreement(t, later.Name, all)
	if _, stderr, code := runKeel(t, 30*time.Second, c.adminArgs("topic", "delete", gone.Name)...); code != 0 {
		t.Fatalf("keel topic delete %s after the restore: exit %d: %s", gone.Name, code, stderr)
	}
	final := map[string]string{keep.Name: keep.ID, later.Name: again.ID}
	c.WaitForTopicsOnEvery(t, final)

	// The restore survives a failover and a restart: the followers took
	// the restored image into their own raft state, not only into memory.
	leader, ep := c.WaitForActive(t, activeTimeout)
	c.Kill(leader)
	if _, ep2 := c.WaitForActive(t, activeTimeout); ep2 != ep+1 {
		t.Errorf("controller epoch after killing the active controller = %d, want %d", ep2, ep+1)
	}
	c.Restart(leader)
	c.WaitForActive(t, activeTimeout)
	c.WaitForTopicsOnEvery(t, final)
}

// TestRestore_RefusesCorruptAndForeignSnapshots: a file with a flipped
// byte is refused before the cluster is asked, a snapshot of another
// cluster without --force-cluster-id by the cluster; neither changes
// anything. With --force-cluster-id the other cluster's metadata is
// restored under this cluster's id.
func TestRestore_RefusesCorruptAndForeignSnapshots(t *testing.T) {
	t.Parallel()
	c := startPartitionCluster(t, []int32{1})
	c.createTopic(t, "rf-stay", "--partitions", "2", "--replication-factor", "1")
	file, saved := c.saveSnapshot(t)
	topics := topicIDs(c.cliTopicList(t))
	_, epoch := c.WaitForActive(t, activeTimeout)
	brokersBefore := c.WaitForBrokers(t, allActive(1))

	unchanged := func(when string) {
		t.Helper()
		if got := topicIDs(c.cliTopicList(t)); !maps.Equal(got, topics) {
			t.Errorf("%s: topics %v, want %v", when, got, topics)
		}
		c.requireEpoch(t, epoch, when)
		if st := quorumStatus(t, c.Addrs()); st.ClusterID != saved.ClusterID {
			t.Errorf("%s: cluster id %s, want %s", when, st.ClusterID, saved.ClusterID)
		}
		l, err := c.ListBrokersOn(context.Background(), c.IDs()[0])
		if err != nil || !sameBrokerInfo(l[1], brokersBefore[1]) {
			t.Errorf("%s: broker 1 is %v (%v), want %v", when, l[1], err, brokersBefore[1])
		}
	}

	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// The header frame (fsm/snapshot.go) follows the 8-byte magic: 'H', a
	// one-byte length, then format_version as field 1 (0x08, then 3).
	if len(data) < 12 || string(data[:9]) != "KEELSNAPH" || data[10] != 0x08 || data[11] != 3 {
		t.Fatalf("snapshot file does not start as fsm/snapshot.go lays out: % x", data[:min(len(data), 16)])
	}
	versioned := slices.Clone(data)
	versioned[11] = 4 // a version from the future
	bads := []struct {
		name string
		data []byte
		want string
	}{
		{"a flipped byte in the middle", flip(data, len(data)/2), "corrupt snapshot"},
		{"a flipped byte in the trailer", flip(data, len(data)-3), "corrupt snapshot"},
		{"a file cut in half", data[:len(data)/2], "corrupt snapshot"},
		{"format version 4", versioned, "format version 4"},
	}
	for i, bad := range bads {
		badFile := filepath.Join(t.TempDir(), fmt.Sprintf("bad-%d.snap", i))
		if err := os.WriteFile(badFile, bad.data, 0o644); err != nil {
			t.Fatal(err)
		}
		c.refusedOneLine(t, bad.want, "snapshot", "restore", badFile)
		unchanged("after restoring " + bad.name)
	}
	// Refused before the cluster is contacted: no controller is needed.
	badFile := filepath.Join(t.TempDir(), "flipped.snap")
	if err := os.WriteFile(badFile, flip(data, len(data)/2), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runKeel(t, 10*time.Second, "snapshot", "restore", badFile, "--controllers", freeAddr(t), "--timeout", "5s")
	if line := strings.TrimSpace(stderr); code != 1 || stdout != "" || strings.Contains(line, "\n") || !strings.Contains(line, "corrupt snapshot") {
		t.Errorf("restore of a flipped file with no controller reachable: exit %d, stdout %q, stderr %q; want exit 1 and one line naming the corruption", code, stdout, stderr)
	}

	// A controller given a corrupt --restore-from refuses to start, and
	// leaves its data dir so that a start with a good file still restores.
	fresh := startCluster(t, 1, withDeferred(1), withControllerFlags("--restore-from", file))
	expectRefused(t, fresh.Addr(1), controllerArgs(1, fresh.Addr(1), fresh.DataDir(1), fresh.VotersFlag(), "--restore-from", badFile), "corrupt snapshot")
	fresh.Start(1)
	if _, ep := fresh.WaitForActive(t, activeTimeout); ep != saved.ControllerEpoch+1 {
		t.Errorf("controller epoch of a quorum started from the file after a refused start = %d, want %d", ep, saved.ControllerEpoch+1)
	}
	fresh.WaitForTopicsOnEvery(t, topics)
	if st := quorumStatus(t, fresh.Addrs()); st.ClusterID != saved.ClusterID {
		t.Errorf("cluster id of a quorum started from the file after a refused start = %s, want %s", st.ClusterID, saved.ClusterID)
	}

	other := startCluster(t, 1)
	other.WaitForActive(t, activeTimeout)
	foreignFile, foreign := other.saveSnapshot(t)
	if foreign.ClusterID == saved.ClusterID {
		t.Fatalf("two clusters share the id %s", saved.ClusterID)
	}
	c.refusedOneLine(t, "FailedPrecondition: inconsistent cluster id", "snapshot", "restore", foreignFile)
	// The refusal names the file and the flag that restores it anyway.
	c.refusedOneLine(t, "restore "+foreignFile+": ", "snapshot", "restore", foreignFile)
	c.refusedOneLine(t, "--force-cluster-id", "snapshot", "restore", foreignFile)
	unchanged("after restoring another cluster's snapshot without --force-cluster-id")

	var res restoreJSON
	c.keelJSON(t, &res, "snapshot", "restore", foreignFile, "--force-cluster-id")
	if res.ClusterID != saved.ClusterID || res.Topics != 0 || res.ControllerEpoch != epoch+1 {
		t.Errorf("forced restore printed %+v; want cluster %s, no topics, controller epoch %d", res, saved.ClusterID, epoch+1)
	}
	c.WaitForTopicsOnEvery(t, map[string]string{})
	if _, after := c.WaitForActive(t, activeTimeout); after != epoch+1 {
		t.Errorf("controller epoch after the forced restore = %d, want %d", after, epoch+1)
	}
	if st := quorumStatus(t, c.Addrs()); st.ClusterID != saved.ClusterID {
		t.Errorf("cluster id after the forced restore = %s, want %s (unchanged)", st.ClusterID, saved.ClusterID)
	}
	// The other cluster has no brokers: broker 1 keeps its registration,
	// and still belongs to this cluster.
	if b := c.WaitForBrokers(t, allActive(1))[1]; b.GetEpoch() != brokersBefore[1].GetEpoch() {
		t.Errorf("broker 1 at epoch %d after the forced restore, want its registration's %d", b.GetEpoch(), brokersBefore[1].GetEpoch())
	}
	c.WaitForInspect(t, []int32{1}, "of cluster "+saved.ClusterID+" without replicas", func(v *keelpb.InspectResponse) bool {
		return v.GetClusterId() == saved.ClusterID && len(v.GetPartitions()) == 0
	})
}

// flip returns a copy of data with a bit of byte at flipped.
func flip(data []byte, at int) []byte {
	out := slices.Clone(data)
	out[at] ^= 0x40
	return out
}

// TestRestore_DisasterRecoveryBrokersRejoin: only the controllers are lost.
// The brokers, which kept their data dirs and had applied metadata the
// snapshot does not hold (a topic created after the save), rejoin a quorum
// started from the file and converge on the restored image: the saved topic
// as described, nothing of the later one.
func TestRestore_DisasterRecoveryBrokersRejoin(t *testing.T) {
	t.Parallel()
	brokers := []int32{1, 2, 3}
	c := startPartitionCluster(t, brokers)
	c.createTopic(t, "rj-saved", "--partitions", "2", "--replication-factor", "3")
	file, saved := c.saveSnapshot(t)
	later := c.createTopic(t, "rj-later", "--partitions", "2", "--replication-factor", "3")
	c.WaitForAgreement(t, later.Name, brokers)
	ahead := c.WaitForBrokerOffsets(t, brokers, saved.Index+1)

	c.KillTogether(c.IDs(), brokers)
	for _, id := range c.IDs() {
		if err := os.RemoveAll(c.DataDir(id)); err != nil {
			t.Fatal(err)
		}
	}

	r := startCluster(t, 3, withSessionTimeout(testSessionTimeout), withLeaderImbalanceCheck(-time.Second),
		withControllerFlags("--restore-from", file))
	_, epoch := r.WaitForActive(t, activeTimeout)
	for _, id := range brokers {
		// The last --data-dir wins: the broker's own, from before the loss.
		r.StartBroker(id, withRack(fmt.Sprintf("r%d", id)), withBrokerFlags("--data-dir", c.BrokerDataDir(id)))
	}
	r.WaitForBrokers(t, allActive(brokers...))
	d, _ := r.WaitForAgreement(t, "rj-saved", brokers)
	if ids := topicIDs(r.cliTopicList(t)); len(ids) != 1 || ids["rj-saved"] != d.ID {
		t.Errorf("topics of the restored quorum: %v, want only rj-saved", ids)
	}
	r.WaitForInspect(t, brokers, fmt.Sprintf("of cluster %s at controller epoch %d, without replicas of %s", saved.ClusterID, epoch, later.Name),
		func(v *keelpb.InspectResponse) bool {
			l, _ := replicasOf(v, later.Name)
			return len(l) == 0 && v.GetClusterId() == saved.ClusterID && v.GetControllerEpoch() == epoch
		})
	t.Logf("brokers were at metadata offset %d (snapshot index %d) before the loss", ahead[1].GetMetadataOffset(), saved.Index)
}
