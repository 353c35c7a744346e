package raftlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/keel-dev/keel/internal/poll"
)

// applySingle commits count entries on a one-voter node.
func applySingle(t *testing.T, n *Node, prefix string, count int) {
	t.Helper()
	for i := range count {
		if err := n.Raft.Apply(fmt.Appendf(nil, "%s%d", prefix, i), waitTimeout).Error(); err != nil {
			t.Fatal(err)
		}
	}
}

func closeSingle(t *testing.T, n *Node, m *Mux) {
	t.Helper()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

// A log store put back from an older copy, its data dir otherwise as it
// was, opens as a consistent shorter log: the high-water mark beside it,
// written at the clean stop, refuses it in one line naming both indexes.
// The whole older data dir, its mark with it, still opens: only the peers
// can tell that one (server).
func TestOpen_RefusesALogStoreRolledBack(t *testing.T) {
	forEachStore(t, func(t *testing.T, store string) {
		dir := filepath.Join(t.TempDir(), "data")
		open := func() (*Node, *Mux, error) {
			return startSingle(t, dir, func(c *Config) { c.LogStore = store })
		}
		n, m, err := open()
		if err != nil {
			t.Fatal(err)
		}
		poll.Until(t, waitTimeout, "the node to lead", func() bool { return n.Raft.State() == raft.Leader })
		applySingle(t, n, "a", 5)
		closeSingle(t, n, m)
		old := filepath.Join(t.TempDir(), "old")
		copyDir(t, dir, old)

		n, m, err = open()
		if err != nil {
			t.Fatal(err)
		}
		poll.Until(t, waitTimeout, "the node to lead", func() bool { return n.Raft.State() == raft.Leader })
		applySingle(t, n, "b", 10)
		applied := n.Raft.AppliedIndex()
		closeSingle(t, n, m)
		hw, err := readHighWater(dir, 1)
		if err != nil || hw.Applied < applied {
			t.Fatalf("after a clean stop: %+v, %v; want applied %d", hw, err, applied)
		}

		storeName := map[string]string{LogStoreBoltDB: raftDBFileName, LogStoreWAL: walDirName}[store]
		rolled := filepath.Join(t.TempDir(), "rolled")
		copyDir(t, dir, rolled)
		remove(t, filepath.Join(rolled, storeName))
		copyDir(t, filepath.Join(old, storeName), filepath.Join(rolled, storeName))
		before := dirState(t, rolled)
		_, _, err = startSingle(t, rolled, func(c *Config) { c.LogStore = store })
		want := []string{
			fmt.Sprintf("data dir %s was rolled back: its raft log %s ends at index ", rolled, filepath.Join(rolled, storeName)),
			fmt.Sprintf("but %s records that this node applied index %d", filepath.Join(rolled, highWaterFileName), hw.Applied),
			"to recover, run keel quorum remove-voter 1",
		}
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("Open = %v; want it to say %q", err, w)
			}
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("the refusal is not one line: %q", err)
		}
		if after := dirState(t, rolled); !mapsEqual(before, after) {
			t.Errorf("the refused start changed the data dir: %v -> %v", before, after)
		}

		n, m, err = startSingle(t, old, func(c *Config) { c.LogStore = store })
		if err != nil {
			t.Fatalf("the whole older data dir: %v", err)
		}
		closeSingle(t, n, m)
	})
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// The marks a running quorum keeps: each node its applied index; the leader
// the committed part of what each follower acknowledged; each follower that
// its leader holds what it applied.
func TestHighWater_PeersRecorded(t *testing.T) {
	nodes := startCluster(t, 3)
	var last uint64
	for i := range 5 {
		last = apply(t, nodes, fmt.Sprintf("e%d", i)).Index()
	}
	leader := waitForLeader(t, nodes)
	for _, n := range nodes {
		poll.UntilState(t, waitTimeout, fmt.Sprintf("node %d's marks at index %d", n.id, last), func() (bool, string) {
			hw, err := readHighWater(n.dir, n.id)
			if err != nil {
				return false, err.Error()
			}
			ok := hw.Applied >= last
			for _, peer := range nodes {
				switch {
				case peer == n:
				case n == leader, peer == leader:
					ok = ok && hw.Peers[peer.id] >= last
				default:
					// Followers know nothing of each other.
					ok = ok && hw.Peers[peer.id] == 0
				}
			}
			return ok, fmt.Sprintf("%+v", hw)
		})
		for _, peer := range nodes {
			hw, _ := readHighWater(n.dir, n.id)
			if got := n.node.HighWater().Acknowledged(peer.id); got != hw.Peers[peer.id] && got < last {
				t.Errorf("node %d: Acknowledged(%d) = %d, the file says %d", n.id, peer.id, got, hw.Peers[peer.id])
			}
		}
	}
}

// BeforeRaft sees what the data dir holds: whether it held raft state, the
// last index, the other voters of its latest configuration; and an error
// it returns refuses the start, changing nothing.
func TestOpen_BeforeRaft(t *testing.T) {
	nodes := startCluster(t, 3)
	var last uint64
	for i := range 3 {
		last = apply(t, nodes, fmt.Sprintf("e%d", i)).Index()
	}
	waitForEntries(t, nodes, []string{"e0", "e1", "e2"})
	n := nodes[2]
	n.close(t)
	var got StartState
	refuse := errors.New("refused by the test")
	before := dirState(t, n.dir)
	m := listen(t, n.addr())
	defer m.Close()
	_, err := Open(Config{NodeID: n.id, Advertise: n.addr(), DataDir: n.dir, Timing: testTiming(), Logger: testLogger(t),
		BeforeRaft: func(st StartState) error { got = st; return refuse }}, &listSM{}, m)
	if !errors.Is(err, refuse) {
		t.Fatalf("Open = %v, want the hook's error", err)
	}
	if after := dirState(t, n.dir); !mapsEqual(before, after) {
		t.Errorf("the refused start changed the data dir: %v -> %v", before, after)
	}
	var peers []string
	for _, p := range got.Peers {
		peers = append(peers, fmt.Sprintf("%d@%s", p.ID, p.Address))
	}
	want := []string{fmt.Sprintf("1@%s", nodes[0].addr()), fmt.Sprintf("2@%s", nodes[1].addr())}
	if !got.HeldState || got.LastIndex < last || !slices.Equal(peers, want) || got.HighWater == nil {
		t.Errorf("StartState = held %v, last %d (want >= %d), peers %v (want %v), marks %v", got.HeldState, got.LastIndex, last, peers, want, got.HighWater)
	}

	// A new data dir: no state, no peers known yet.
	fresh := listen(t, "127.0.0.1:0")
	defer fresh.Close()
	node, err := Open(Config{NodeID: 9, Advertise: fresh.Addr().String(), DataDir: t.TempDir(), Join: true, Timing: testTiming(), Logger: testLogger(t),
		BeforeRaft: func(st StartState) error { got = st; return nil }}, &listSM{}, fresh)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	if got.HeldState || got.LastIndex != 0 || len(got.Peers) != 0 {
		t.Errorf("a new data dir's StartState = %+v", got)
	}
}

func TestReadHighWater(t *testing.T) {
	for _, tc := range []struct {
		name, content, wantErr string
	}{
		{name: "none", wantErr: ""},
		{name: "good", content: `{"format":1,"node_id":2,"applied":40,"peers":{"1":38}}`},
		{name: "not json", content: `{"format":`, wantErr: "highwater.json is corrupt"},
		{name: "another node's", content: `{"format":1,"node_id":3,"applied":40}`, wantErr: "highwater.json belongs to node 3, not node 2"},
		{name: "a later format", content: `{"format":2,"node_id":2}`, wantErr: "highwater.json has format 2; this keel reads format 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.content != "" {
				writeFile(t, filepath.Join(dir, highWaterFileName), tc.content)
			}
			hw, err := readHighWater(dir, 2)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("readHighWater: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("readHighWater = %v, want %q", err, tc.wantErr)
			case tc.name == "good" && (hw.Applied != 40 || hw.Peers[1] != 38):
				t.Fatalf("read %+v", hw)
			}
		})
	}
	// Written whole and read back.
	dir := t.TempDir()
	h := &HighWater{dir: dir, hw: highWater{Format: highWaterFormat, NodeID: 2}}
	h.observe(10, map[int32]uint64{1: 9, 3: 7, 4: 6}, nil)
	h.observe(8, map[int32]uint64{1: 5}, map[int32]bool{1: true, 2: true, 3: true}) // never lowered; 4 removed
	if err := h.flush(); err != nil {
		t.Fatal(err)
	}
	hw, err := readHighWater(dir, 2)
	if err != nil || hw.Applied != 10 || hw.Peers[1] != 9 || hw.Peers[3] != 7 || len(hw.Peers) != 2 {
		t.Fatalf("read back %+v, %v", hw, err)
	}
	if _, err := os.Stat(filepath.Join(dir, highWaterFileName)); err != nil {
		t.Fatal(err)
	}
}
