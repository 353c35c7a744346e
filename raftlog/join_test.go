package raftlog

import (
	"bytes"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestCluster_JoinWaitsToBeAdded: a node opened with Join on an empty data
// dir bootstraps nothing and calls no election; once the leader adds it, it
// gets the whole log, and after a restart (Join still set, now ignored) it
// rejoins from its own state.
func TestCluster_JoinWaitsToBeAdded(t *testing.T) {
	nodes := startCluster(t, 3)
	apply(t, nodes, "a")
	joiner := &testNode{id: 4, dir: t.TempDir(), mux: listen(t, "127.0.0.1:0")}
	join := func() Config {
		cfg := baseConfig(t)()
		cfg.Join = true
		return cfg
	}
	openNode(t, joiner, nil, join)
	if _, ok := readMetaFile(t, joiner.dir)["raft_state"]; ok {
		t.Errorf("meta.json of a joining node before it is added: %v, want no raft_state", readMetaFile(t, joiner.dir))
	}
	// For several heartbeat timeouts (a node that bootstrapped itself would
	// have elected itself by then) it stays a follower with no configuration.
	for end := time.Now().Add(10 * testTiming().HeartbeatTimeout); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if st := joiner.node.Raft.State(); st != raft.Follower {
			t.Fatalf("a joining node is %v", st)
		}
		if servers := joiner.node.Raft.GetConfiguration().Configuration().Servers; len(servers) != 0 {
			t.Fatalf("a joining node has configuration %v", servers)
		}
	}

	leader := waitForLeader(t, nodes)
	if err := leader.node.Raft.AddVoter(ServerID(4), raft.ServerAddress(joiner.addr()), 0, time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	all := append(slices.Clone(nodes), joiner)
	apply(t, all, "b")
	waitForEntries(t, all, []string{"a", "b"})
	// Its first term on disk marked the data dir: it must never start
	// without its log again.
	if got := readMetaFile(t, joiner.dir)["raft_state"]; got != true {
		t.Errorf("meta.json of a joined node: %v, want raft_state", readMetaFile(t, joiner.dir))
	}

	joiner.node.Close()
	openNode(t, joiner, nil, join)
	apply(t, all, "c")
	waitForEntries(t, []*testNode{joiner}, []string{"a", "b", "c"})
}

// TestFSMAdapter_RecordsCommittedConfigurations: the adapter keeps the
// last committed configuration entry and its index, which raft's
// GetConfiguration does not report (Node.Configuration); after a snapshot
// restore the index is unknown.
func TestFSMAdapter_RecordsCommittedConfigurations(t *testing.T) {
	conf := raft.Configuration{Servers: []raft.Server{{ID: "1", Address: "a:1", Suffrage: raft.Voter}}}
	a := &fsmAdapter{sm: &listSM{}}
	if i, c := a.committed(); i != 0 || len(c.Servers) != 0 {
		t.Fatalf("before any: %d, %v; want 0 and none", i, c)
	}
	a.ApplyBatch([]*raft.Log{
		{Index: 1, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(conf)},
		{Index: 2, Type: raft.LogCommand, Data: []byte("x")},
		{Index: 3, Type: raft.LogNoop},
	})
	if i, c := a.committed(); i != 1 || !slices.Equal(c.Servers, conf.Servers) {
		t.Fatalf("after a batch: %d, %v; want 1, %v", i, c, conf)
	}
	a.Apply(&raft.Log{Index: 4, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(conf)})
	if i, _ := a.committed(); i != 4 {
		t.Fatalf("after Apply: index %d, want 4", i)
	}
	if err := a.Restore(io.NopCloser(bytes.NewReader(nil))); err != nil {
		t.Fatal(err)
	}
	if i, c := a.committed(); i != 0 || len(c.Servers) != 0 {
		t.Fatalf("after a restore: %d, %v; want 0 and none (unknown)", i, c)
	}
}
