package raftlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/keel-dev/keel/internal/poll"
)

// testTiming is fast enough for a test cluster to elect in well under a second.
func testTiming() Timing {
	return Timing{
		HeartbeatTimeout:   50 * time.Millisecond,
		ElectionTimeout:    50 * time.Millisecond,
		LeaderLeaseTimeout: 50 * time.Millisecond,
		CommitTimeout:      5 * time.Millisecond,
	}
}

const waitTimeout = 10 * time.Second

// testNode is one member of an in-process test cluster.
type testNode struct {
	id   int32
	dir  string
	mux  *Mux
	sm   *listSM
	node *Node
}

func (n *testNode) addr() string { return n.mux.Addr().String() }

// close stops the node and then its mux, as a controller process would.
func (n *testNode) close(t testing.TB) {
	t.Helper()
	if err := n.node.Close(); err != nil {
		t.Errorf("node %d Close: %v", n.id, err)
	}
	if err := n.mux.Close(); err != nil {
		t.Errorf("node %d mux Close: %v", n.id, err)
	}
}

// openNode opens n.node on n.mux with a fresh state machine.
func openNode(t testing.TB, n *testNode, voters []Voter, logger func() Config) {
	t.Helper()
	cfg := logger()
	cfg.NodeID = n.id
	cfg.Advertise = n.addr()
	cfg.DataDir = n.dir
	cfg.Voters = voters
	n.sm = &listSM{}
	node, err := Open(cfg, n.sm, n.mux)
	if err != nil {
		t.Fatalf("Open node %d: %v", n.id, err)
	}
	n.node = node
	t.Cleanup(func() { _ = node.Close() })
}

// startCluster opens size nodes, each with its own mux on a free port, and
// bootstraps them all from the same voter list.
func startCluster(t *testing.T, size int) []*testNode {
	t.Helper()
	return startClusterWith(t, size, baseConfig(t))
}

// startClusterWith is startCluster with base as every node's config.
func startClusterWith(t testing.TB, size int, base func() Config) []*testNode {
	t.Helper()
	nodes := make([]*testNode, size)
	var voters []Voter
	for i := range nodes {
		n := &testNode{id: int32(i + 1), dir: t.TempDir(), mux: listen(t, "127.0.0.1:0")}
		nodes[i] = n
		voters = append(voters, Voter{ID: n.id, Address: n.addr()})
	}
	for _, n := range nodes {
		openNode(t, n, voters, base)
	}
	return nodes
}

func baseConfig(t *testing.T) func() Config {
	return storeConfig(t, LogStoreBoltDB)
}

// storeConfig is the test config with the given log store.
func storeConfig(t testing.TB, store string) func() Config {
	logger := testLogger(t)
	return func() Config {
		return Config{Timing: testTiming(), Logger: logger, LogStore: store}
	}
}

// logStores are the stores the tests that matter for both run over.
var logStores = []string{LogStoreBoltDB, LogStoreWAL}

// forEachStore runs f as a subtest per log store.
func forEachStore(t *testing.T, f func(t *testing.T, store string)) {
	for _, store := range logStores {
		t.Run(store, func(t *testing.T) { f(t, store) })
	}
}

// waitForLeader polls until exactly one node leads and every other node
// names it as leader, and returns it.
func waitForLeader(t testing.TB, nodes []*testNode) *testNode {
	t.Helper()
	var leader *testNode
	poll.Until(t, waitTimeout, "a leader all nodes agree on", func() bool {
		leader = nil
		for _, n := range nodes {
			if n.node.Raft.State() == raft.Leader {
				if leader != nil {
					return false
				}
				leader = n
			}
		}
		if leader == nil {
			return false
		}
		for _, n := range nodes {
			if _, id := n.node.Raft.LeaderWithID(); id != ServerID(leader.id) {
				return false
			}
		}
		return true
	})
	return leader
}

// waitForEntries polls until every node's state machine holds want.
func waitForEntries(t testing.TB, nodes []*testNode, want []string) {
	t.Helper()
	for _, n := range nodes {
		poll.Until(t, waitTimeout, fmt.Sprintf("node %d to apply %q", n.id, want), func() bool {
			return slices.Equal(n.sm.list(), want)
		})
	}
}

// apply writes data through the current leader. Under load a 50ms-timed
// cluster can change leader mid-write; then it retries on the new leader,
// which is safe because listSM ignores an entry it already holds (a lost
// leadership leaves the first attempt's outcome unknown).
func apply(t testing.TB, nodes []*testNode, data string) raft.ApplyFuture {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		leader := waitForLeader(t, nodes)
		f := leader.node.Raft.Apply([]byte(data), 5*time.Second)
		err := f.Error()
		if err == nil {
			return f
		}
		retry := errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost)
		if !retry || time.Now().After(deadline) {
			t.Fatalf("Apply(%q) on node %d: %v", data, leader.id, err)
		}
	}
}

// TestCluster_ElectApplyRestart runs a three-node cluster on loopback,
// restarts all of it on the same data dirs and addresses, and checks that it
// rejoins from its own state (no voter list given) with nothing lost: the
// state machines are rebuilt from a snapshot plus the log after it.
func TestCluster_ElectApplyRestart(t *testing.T) {
	forEachStore(t, testElectApplyRestart)
}

func testElectApplyRestart(t *testing.T, store string) {
	nodes := startClusterWith(t, 3, storeConfig(t, store))
	for _, n := range nodes {
		if got := n.node.transport.LocalAddr(); string(got) != n.addr() {
			t.Errorf("node %d transport LocalAddr = %s, want %s", n.id, got, n.addr())
		}
	}

	waitForLeader(t, nodes)
	if f := apply(t, nodes, "a"); f.Response() != 1 {
		t.Errorf("Apply response = %v, want the state machine's return value 1", f.Response())
	}
	waitForEntries(t, nodes, []string{"a"})

	// Snapshot everywhere, then write past the snapshot, so the restart has
	// to restore and then replay.
	for _, n := range nodes {
		if err := n.node.Raft.Snapshot().Error(); err != nil {
			t.Fatalf("node %d snapshot: %v", n.id, err)
		}
	}
	lastIndex := apply(t, nodes, "b").Index()
	waitForEntries(t, nodes, []string{"a", "b"})

	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.addr()
		n.close(t)
	}

	base := storeConfig(t, store)
	for i, n := range nodes {
		n.mux = listen(t, addrs[i])
		openNode(t, n, nil, base) // no voters: must rejoin, not bootstrap
		if got := n.node.Raft.LastIndex(); got < lastIndex {
			t.Errorf("node %d LastIndex after restart = %d, want >= %d", n.id, got, lastIndex)
		}
	}
	waitForLeader(t, nodes)
	waitForEntries(t, nodes, []string{"a", "b"})
	for _, n := range nodes {
		n.sm.mu.Lock()
		restores := n.sm.restores
		n.sm.mu.Unlock()
		if restores != 1 {
			t.Errorf("node %d restored %d snapshots on restart, want 1", n.id, restores)
		}
	}

	apply(t, nodes, "c")
	waitForEntries(t, nodes, []string{"a", "b", "c"})

	// The configuration is still the bootstrap one, with node ids as server ids.
	f := nodes[0].node.Raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range f.Configuration().Servers {
		id, err := ParseServerID(s.ID)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d@%s", id, s.Address))
	}
	want := []string{"1@" + addrs[0], "2@" + addrs[1], "3@" + addrs[2]}
	if !slices.Equal(got, want) {
		t.Errorf("configuration = %v, want %v", got, want)
	}

	for _, n := range nodes {
		n.close(t)
	}
}

// startSingle opens a one-voter cluster on dir.
func startSingle(t *testing.T, dir string, mutate func(*Config)) (*Node, *Mux, error) {
	t.Helper()
	m := listen(t, "127.0.0.1:0")
	cfg := Config{
		NodeID:    1,
		Advertise: m.Addr().String(),
		DataDir:   dir,
		Voters:    []Voter{{ID: 1, Address: m.Addr().String()}},
		Timing:    testTiming(),
		Logger:    testLogger(t),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	n, err := Open(cfg, &listSM{}, m)
	if err == nil {
		t.Cleanup(func() { _ = n.Close() })
	}
	return n, m, err
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestOpen_Errors(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string) string // returns the data dir to use
		mutate  func(*Config)
		wantErr string // %s is replaced by the data dir
	}{
		{
			name: "data dir is a regular file",
			setup: func(t *testing.T, dir string) string {
				p := filepath.Join(dir, "file")
				writeFile(t, p, "x")
				return p
			},
			wantErr: "data dir %s is not a directory",
		},
		{
			name: "data dir cannot be created",
			setup: func(t *testing.T, dir string) string {
				writeFile(t, filepath.Join(dir, "file"), "x")
				return filepath.Join(dir, "file", "sub")
			},
			wantErr: "cannot read data dir %s: not a directory",
		},
		{
			name: "meta names another node",
			setup: func(t *testing.T, dir string) string {
				writeFile(t, filepath.Join(dir, "meta.json"), `{"format":1,"node_id":2,"cluster_id":""}`)
				return dir
			},
			wantErr: "data dir %s belongs to node 2, not node 1",
		},
		{
			name: "meta names another cluster",
			setup: func(t *testing.T, dir string) string {
				writeFile(t, filepath.Join(dir, "meta.json"), `{"format":1,"node_id":1,"cluster_id":"A"}`)
				return dir
			},
			mutate:  func(c *Config) { c.ClusterID = "B" },
			wantErr: "data dir %s belongs to cluster A, not B",
		},
		{
			name: "meta is corrupt",
			setup: func(t *testing.T, dir string) string {
				writeFile(t, filepath.Join(dir, "meta.json"), `{"format":1,"node_`)
				return dir
			},
			wantErr: "meta file %s/meta.json is corrupt",
		},
		{
			name: "meta has an unknown format",
			setup: func(t *testing.T, dir string) string {
				writeFile(t, filepath.Join(dir, "meta.json"), `{"format":9,"node_id":1}`)
				return dir
			},
			wantErr: "meta file %s/meta.json has format 9",
		},
		{
			name: "raft.db without meta",
			setup: func(t *testing.T, dir string) string {
				writeFile(t, filepath.Join(dir, "raft.db"), "")
				return dir
			},
			wantErr: "data dir %s has raft.db but no meta.json",
		},
		{
			name: "wal without meta",
			setup: func(t *testing.T, dir string) string {
				if err := os.Mkdir(filepath.Join(dir, "wal"), 0o700); err != nil {
					t.Fatal(err)
				}
				return dir
			},
			mutate:  func(c *Config) { c.LogStore = LogStoreWAL },
			wantErr: "data dir %s has wal but no meta.json",
		},
		{
			name: "boltdb data dir opened as wal",
			setup: func(t *testing.T, dir string) string {
				writeFile(t, filepath.Join(dir, "meta.json"), `{"format":1,"node_id":1,"cluster_id":""}`)
				return dir
			},
			mutate:  func(c *Config) { c.LogStore = LogStoreWAL },
			wantErr: "data dir %s holds a boltdb raft log, not --log-store wal; to switch, start the node on an empty data dir and let it rejoin",
		},
		{
			name: "wal data dir opened as boltdb",
			setup: func(t *testing.T, dir string) string {
				writeFile(t, filepath.Join(dir, "meta.json"), `{"format":2,"node_id":1,"cluster_id":"","log_store":"wal"}`)
				return dir
			},
			wantErr: "data dir %s holds a wal raft log, not --log-store boltdb",
		},
		{
			name: "format 2 meta without a log store",
			setup: func(t *testing.T, dir string) string {
				writeFile(t, filepath.Join(dir, "meta.json"), `{"format":2,"node_id":1,"cluster_id":""}`)
				return dir
			},
			wantErr: `meta file %s/meta.json is corrupt: format 2 with log_store ""`,
		},
		{
			name: "format 1 meta naming a log store",
			setup: func(t *testing.T, dir string) string {
				writeFile(t, filepath.Join(dir, "meta.json"), `{"format":1,"node_id":1,"cluster_id":"","log_store":"wal"}`)
				return dir
			},
			mutate:  func(c *Config) { c.LogStore = LogStoreWAL },
			wantErr: `meta file %s/meta.json is corrupt: format 1 with log_store "wal"`,
		},
		{
			name:    "unknown log store",
			mutate:  func(c *Config) { c.LogStore = "rocksdb" },
			wantErr: `--log-store "rocksdb": want boltdb or wal`,
		},
		{
			name:    "voters lack this node",
			mutate:  func(c *Config) { c.Voters = []Voter{{ID: 2, Address: "127.0.0.1:1"}} },
			wantErr: "--voters does not contain node id 1",
		},
		{
			name:    "no voters on an empty data dir",
			mutate:  func(c *Config) { c.Voters = nil },
			wantErr: "data dir %s has no raft state and --voters is empty",
		},
		{
			name:    "bad timing",
			mutate:  func(c *Config) { c.Timing.LeaderLeaseTimeout = time.Second },
			wantErr: "--raft-leader-lease-timeout (1s) must not exceed --raft-heartbeat-timeout (50ms)",
		},
		{
			name:    "bad node id",
			mutate:  func(c *Config) { c.NodeID = 0 },
			wantErr: "--node-id (0) must be positive",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.setup != nil {
				dir = tt.setup(t, dir)
			}
			_, _, err := startSingle(t, dir, tt.mutate)
			want := tt.wantErr
			if strings.Contains(want, "%s") {
				want = strings.ReplaceAll(want, "%s", dir)
			}
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Open error = %v, want it to contain %q", err, want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestOpen_ClosedMux(t *testing.T) {
	m := listen(t, "127.0.0.1:0")
	_ = m.Close()
	addr := m.Addr().String()
	_, err := Open(Config{
		NodeID: 1, Advertise: addr, DataDir: t.TempDir(),
		Voters: []Voter{{ID: 1, Address: addr}}, Timing: testTiming(),
	}, &listSM{}, m)
	if err == nil || !strings.Contains(err.Error(), "Mux is closed") {
		t.Fatalf("Open on a closed mux: %v", err)
	}
}

// TestOpen_DataDirInUse checks that a second Open of a data dir that is
// open fails fast instead of waiting on bolt's lock, and leaves the first
// node working.
func TestOpen_DataDirInUse(t *testing.T) {
	forEachStore(t, testDataDirInUse)
}

func testDataDirInUse(t *testing.T, store string) {
	dir := t.TempDir()
	setStore := func(c *Config) { c.LogStore = store }
	first, _, err := startSingle(t, dir, setStore)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, _, err = startSingle(t, dir, setStore)
	if want := fmt.Sprintf("data dir %s is in use by another process", dir); err == nil || err.Error() != want {
		t.Fatalf("second Open error = %v, want %q", err, want)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("second Open took %s to fail", d)
	}
	poll.Until(t, waitTimeout, "the first node to lead", func() bool { return first.Raft.State() == raft.Leader })
	if err := first.Raft.Apply([]byte("x"), 5*time.Second).Error(); err != nil {
		t.Errorf("first node after a failed second Open: %v", err)
	}
}

func readMetaFile(t *testing.T, dir string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("meta.json %q: %v", b, err)
	}
	return m
}

func TestNode_ClusterID(t *testing.T) {
	forEachStore(t, testNodeClusterID)
}

// testNodeClusterID also checks the meta file's format and log store: a
// boltdb data dir's meta file is what keel wrote before --log-store, with
// raft_state, which keels before it ignore.
func testNodeClusterID(t *testing.T, store string) {
	dir := t.TempDir()
	setStore := func(c *Config) { c.LogStore = store }
	n, _, err := startSingle(t, dir, setStore)
	if err != nil {
		t.Fatal(err)
	}
	if n.DataDir() != dir {
		t.Errorf("DataDir() = %q, want %q", n.DataDir(), dir)
	}
	wantMeta := map[string]any{"format": 1.0, "node_id": 1.0, "cluster_id": "", "raft_state": true}
	if store == LogStoreWAL {
		wantMeta["format"], wantMeta["log_store"] = 2.0, "wal"
	}
	if got := readMetaFile(t, dir); !maps.Equal(got, wantMeta) {
		t.Errorf("meta.json after first Open = %v, want %v", got, wantMeta)
	}
	if id := n.ClusterID(); id != "" {
		t.Errorf("ClusterID() before recording = %q, want empty", id)
	}

	steps := []struct {
		id      string
		wantErr string
	}{
		{id: "", wantErr: "cannot record an empty cluster id"},
		{id: "c1"},
		{id: "c1"}, // the same id again is fine
		{id: "c2", wantErr: fmt.Sprintf("data dir %s belongs to cluster c1, not c2", dir)},
	}
	for _, s := range steps {
		err := n.RecordClusterID(s.id)
		if s.wantErr == "" && err != nil {
			t.Errorf("RecordClusterID(%q) = %v", s.id, err)
		}
		if s.wantErr != "" && (err == nil || err.Error() != s.wantErr) {
			t.Errorf("RecordClusterID(%q) = %v, want %q", s.id, err, s.wantErr)
		}
	}
	if id := n.ClusterID(); id != "c1" {
		t.Errorf("ClusterID() = %q, want c1", id)
	}
	if got := readMetaFile(t, dir)["cluster_id"]; got != "c1" {
		t.Errorf("meta.json cluster_id = %v, want c1", got)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, "meta.json.tmp-*"))
	if len(leftovers) > 0 {
		t.Errorf("temp files left behind: %v", leftovers)
	}

	// Reopening knows the id without being told, and accepts being told it.
	for _, cid := range []string{"", "c1"} {
		n, _, err := startSingle(t, dir, func(c *Config) { c.ClusterID, c.LogStore = cid, store })
		if err != nil {
			t.Fatalf("reopen with ClusterID %q: %v", cid, err)
		}
		if id := n.ClusterID(); id != "c1" {
			t.Errorf("ClusterID() after reopen = %q, want c1", id)
		}
		_ = n.Close()
	}
}

// TestOpen_DoesNotRecordConfiguredClusterID: Config.ClusterID is only
// compared, never written: the id is recorded once the committed log names
// it, so a mistyped flag cannot claim a data dir.
func TestOpen_DoesNotRecordConfiguredClusterID(t *testing.T) {
	dir := t.TempDir()
	n, _, err := startSingle(t, dir, func(c *Config) { c.ClusterID = "c9" })
	if err != nil {
		t.Fatal(err)
	}
	if n.ClusterID() != "" || readMetaFile(t, dir)["cluster_id"] != "" {
		t.Errorf("ClusterID() = %q, meta = %v; want nothing recorded", n.ClusterID(), readMetaFile(t, dir))
	}
}

// TestCluster_FollowerCatchesUpBySnapshot: a follower that is down while the
// others snapshot and truncate their logs behind it must catch up by an
// installed snapshot, then restart from its own store. With the wal store,
// small segments make the truncation delete whole segment files, and the
// install takes raft's path for a monotonic store (it deletes the whole log
// before appending after the snapshot).
func TestCluster_FollowerCatchesUpBySnapshot(t *testing.T) {
	forEachStore(t, testFollowerCatchesUpBySnapshot)
}

func testFollowerCatchesUpBySnapshot(t *testing.T, store string) {
	logger := testLogger(t)
	base := func() Config {
		return Config{
			Timing: testTiming(), Logger: logger, LogStore: store,
			TrailingLogs:      4,
			SnapshotThreshold: 1 << 30, // only the snapshots this test asks for
			walSegmentSize:    16 << 10,
		}
	}
	nodes := startClusterWith(t, 3, base)
	leader := waitForLeader(t, nodes)
	var want []string
	write := func(live []*testNode, n int) {
		for range n {
			// 1 KiB each: a 16 KiB segment holds about 15.
			e := fmt.Sprintf("%04d%s", len(want), strings.Repeat("x", 1020))
			apply(t, live, e)
			want = append(want, e)
		}
	}
	write(nodes, 10)
	waitForEntries(t, nodes, want)

	var lagging *testNode
	var live []*testNode
	for _, n := range nodes {
		if n != leader && lagging == nil {
			lagging = n
		} else {
			live = append(live, n)
		}
	}
	addr := lagging.addr()
	lagging.close(t)

	write(live, 60)
	for _, n := range live {
		if err := n.node.Raft.Snapshot().Error(); err != nil {
			t.Fatalf("node %d snapshot: %v", n.id, err)
		}
	}
	write(live, 5)
	waitForEntries(t, live, want)
	for _, n := range live {
		first, err := n.node.store.FirstIndex()
		if err != nil || first <= lagging.node.Raft.LastIndex() {
			t.Fatalf("node %d first index after the snapshot = %d, %v; want past the lagging node's last, %d",
				n.id, first, err, lagging.node.Raft.LastIndex())
		}
	}
	if store == LogStoreWAL {
		// About 70 KiB written in 16 KiB segments, then truncated to the
		// last 4 entries: the first segments are gone.
		segs, _ := filepath.Glob(filepath.Join(leader.dir, "wal", "*.wal"))
		first, _ := filepath.Glob(filepath.Join(leader.dir, "wal", "00000000000000000001-*.wal"))
		if len(segs) == 0 || len(segs) > 2 || len(first) > 0 {
			t.Errorf("leader's wal segments after truncation: %q; want one or two, not the first", segs)
		}
	}

	lagging.mux = listen(t, addr)
	openNode(t, lagging, nil, base)
	waitForEntries(t, nodes, want)
	lagging.sm.mu.Lock()
	restores := lagging.sm.restores
	lagging.sm.mu.Unlock()
	if restores != 1 {
		t.Errorf("lagging node restored %d snapshots, want 1 (caught up by an installed snapshot)", restores)
	}
	write(nodes, 3)
	waitForEntries(t, nodes, want)
	lastIndex := lagging.node.Raft.LastIndex()

	// Every node restarts from its own store. The lagging one's log holds
	// what came after the installed snapshot (boltdb also keeps the entries
	// it had before it, with a gap up to the snapshot; the wal, which
	// allows no gap, deleted them).
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.addr()
		n.close(t)
	}
	r, err := OpenReadOnly(lagging.dir)
	if err != nil {
		t.Fatalf("OpenReadOnly(lagging node): %v", err)
	}
	snap, rc, err := r.LatestSnapshot()
	if err != nil || snap == nil {
		t.Fatalf("lagging node's LatestSnapshot = %v, %v", snap, err)
	}
	_ = rc.Close()
	first, _ := r.FirstIndex()
	last, _ := r.LastIndex()
	var cmds []string
	err = r.Entries(snap.Index+1, func(_, _ uint64, typ raft.LogType, data []byte) error {
		if typ == raft.LogCommand {
			cmds = append(cmds, string(data))
		}
		return nil
	})
	_ = r.Close()
	wantFirst := uint64(2) // boltdb: what it had before it went down, after the bootstrap entry
	if store == LogStoreWAL {
		wantFirst = snap.Index + 1
	}
	if err != nil || first < wantFirst || first > snap.Index+1 || last < lastIndex {
		t.Errorf("lagging node's log: first %d last %d (%v); want first in %d..%d, last at least %d",
			first, last, err, wantFirst, snap.Index+1, lastIndex)
	}
	// The snapshot the leader sent was taken before the last 5+3 writes
	// (or a little earlier, when a loaded machine delayed it): the log
	// after it holds the writes that followed it, in order, those eight
	// among them.
	if len(cmds) < 8 || len(cmds) > len(want) || !slices.Equal(cmds, want[len(want)-len(cmds):]) {
		t.Errorf("lagging node's log after the snapshot holds %d commands, want the last ones written, at least eight", len(cmds))
	}

	for i, n := range nodes {
		n.mux = listen(t, addrs[i])
		openNode(t, n, nil, base)
	}
	waitForLeader(t, nodes)
	waitForEntries(t, nodes, want)
	write(nodes, 1)
	waitForEntries(t, nodes, want)
	for _, n := range nodes {
		n.close(t)
	}
}
