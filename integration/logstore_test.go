package integration

// The raft log store (--log-store): the wal store under kill -9, the refusal
// to open a data dir with the store it does not hold, and the migration of a
// voter from boltdb to wal by rejoining on an empty data dir.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
)

// withLogStore passes --log-store to every controller.
func withLogStore(store string) clusterOption {
	return withControllerFlags("--log-store", store)
}

// ackedWrite is a no-op the quorum acknowledged: its request id and index.
type ackedWrite struct {
	index uint64
	id    string
}

// noOpWriters keeps writers no-ops going through the cluster's client until
// stop, recording every acknowledged one. A write that fails has an unknown
// outcome and is not recorded; failovers make some fail.
type noOpWriters struct {
	mu    sync.Mutex
	acked []ackedWrite
	stop  chan struct{}
	wg    sync.WaitGroup
}

func (c *Cluster) startNoOpWriters(t *testing.T, writers int) *noOpWriters {
	w := &noOpWriters{stop: make(chan struct{})}
	for range writers {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for {
				select {
				case <-w.stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				id := newRequestID()
				resp, err := c.Client().AppendNoOp(ctx, id)
				cancel()
				if err == nil {
					w.mu.Lock()
					w.acked = append(w.acked, ackedWrite{resp.GetIndex(), id})
					w.mu.Unlock()
				}
			}
		}()
	}
	t.Cleanup(w.halt) // before the processes' own cleanups run
	return w
}

func (w *noOpWriters) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.wg.Wait()
}

// snapshot returns the writes acknowledged so far.
func (w *noOpWriters) snapshot() []ackedWrite {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.acked)
}

// waitForMore polls until n more writes than have are acknowledged.
func (w *noOpWriters) waitForMore(t *testing.T, have, n int) {
	t.Helper()
	poll.UntilState(t, 20*time.Second, fmt.Sprintf("%d more writes acknowledged", n), func() (bool, string) {
		got := len(w.snapshot())
		return got >= have+n, fmt.Sprintf("%d of %d acknowledged", got-have, n)
	})
}

// nodeLog is what `keel metadata dump -o json` reads from a stopped node's
// data dir: the no-ops in its log by index, its last log index, and how many
// records came from its snapshot.
type nodeLog struct {
	noOps         map[uint64]string
	last          uint64
	snapshotLines int
}

func dumpLog(t *testing.T, dataDir string) nodeLog {
	t.Helper()
	stdout, stderr, code := runKeel(t, 30*time.Second, "metadata", "dump", "--data-dir", dataDir, "-o", "json")
	if code != 0 {
		t.Fatalf("keel metadata dump --data-dir %s: exit %d: %s", dataDir, code, stderr)
	}
	l := nodeLog{noOps: map[uint64]string{}}
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct {
			Index  uint64 `json:"index"`
			Source string `json:"source"`
			Type   string `json:"type"`
			Record struct {
				RequestID string `json:"request_id"`
			} `json:"record"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("dump of %s: bad line %q: %v", dataDir, sc.Text(), err)
		}
		if line.Source == "snapshot" {
			l.snapshotLines++
			continue
		}
		l.last = max(l.last, line.Index)
		if line.Type == "no_op" {
			l.noOps[line.Index] = line.Record.RequestID
		}
	}
	return l
}

// missing returns the acknowledged writes that l does not hold at their index.
func (l nodeLog) missing(acked []ackedWrite) []ackedWrite {
	var out []ackedWrite
	for _, a := range acked {
		if l.noOps[a.index] != a.id {
			out = append(out, a)
		}
	}
	return out
}

// TestLogStore_KillLeaderKeepsAcknowledgedWrites: a quorum on each store,
// with writers running, has its leader killed with SIGKILL three times. Each
// killed leader's data dir, read offline before it restarts, holds every
// write acknowledged before the kill (a leader holds every committed entry,
// and it stores an entry before sending it); it restarts from that log and
// rejoins. At the end every node's log holds every acknowledged write at the
// index it was acknowledged with. A killed leader usually holds entries that
// never committed, which it truncates when it rejoins: the restart after that
// is what raft-wal v0.4.0 fails without truncatedTailFiler (raftlog).
func TestLogStore_KillLeaderKeepsAcknowledgedWrites(t *testing.T) {
	for _, store := range []string{"boltdb", "wal"} {
		t.Run(store, func(t *testing.T) { testKillLeaderKeepsAcknowledgedWrites(t, store) })
	}
}

func testKillLeaderKeepsAcknowledgedWrites(t *testing.T, store string) {
	c := startCluster(t, 3, withLogStore(store))
	c.WaitForActive(t, activeTimeout)
	storeFile := map[string]string{"boltdb": "raft.db", "wal": "wal"}
	for _, id := range c.IDs() {
		for s, f := range storeFile {
			if _, err := os.Stat(filepath.Join(c.DataDir(id), f)); (err == nil) != (s == store) {
				t.Fatalf("node %d with --log-store %s: stat %s: %v", id, store, f, err)
			}
		}
	}
	// The offline reader is kept out while the node runs.
	_, stderr, code := runKeel(t, 30*time.Second, "metadata", "dump", "--data-dir", c.DataDir(1))
	if code == 0 || !strings.Contains(stderr, "in use by a running controller; stop it first") {
		t.Errorf("dump of a running node: exit %d, stderr %q; want in use", code, stderr)
	}

	w := c.startNoOpWriters(t, 4)
	for round := 1; round <= 3; round++ {
		w.waitForMore(t, len(w.snapshot()), 30)
		leader, _ := c.WaitForActive(t, activeTimeout)
		before := w.snapshot()
		c.Kill(leader)
		c.WaitForActive(t, activeTimeout)

		killed := dumpLog(t, c.DataDir(leader))
		if miss := killed.missing(before); len(miss) > 0 {
			t.Fatalf("round %d: killed leader %d's log lacks %d of the %d writes acknowledged before the kill, e.g. %+v",
				round, leader, len(miss), len(before), miss[0])
		}
		c.Restart(leader)
		// It rejoins: it catches up past what it held when it was killed.
		c.WaitForApplied(t, []int32{leader}, killed.last)
		t.Logf("round %d: killed leader %d with %d writes acknowledged, its log at index %d; restarted",
			round, leader, len(before), killed.last)
	}
	w.waitForMore(t, len(w.snapshot()), 30)
	w.halt()
	final := c.appendNoOp(t, 10*time.Second)
	c.WaitForConverged(t, c.IDs(), final.Index)
	acked := w.snapshot()

	for _, id := range c.IDs() {
		c.Stop(id)
	}
	for _, id := range c.IDs() {
		l := dumpLog(t, c.DataDir(id))
		if miss := l.missing(acked); len(miss) > 0 {
			t.Errorf("node %d's log lacks %d of %d acknowledged writes, e.g. %+v", id, len(miss), len(acked), miss[0])
		}
		if l.last < final.Index {
			t.Errorf("node %d's log ends at %d, before the last write at %d", id, l.last, final.Index)
		}
	}
	t.Logf("%d acknowledged writes, all on every node", len(acked))
}

// TestLogStore_RefusesTheOtherStore: a data dir is never opened with the
// store it does not hold (it would look empty, and the node would bootstrap
// and forget its log and its vote), and a bad --log-store is refused naming
// the flag. A refused start leaves the data dir to its node.
func TestLogStore_RefusesTheOtherStore(t *testing.T) {
	for _, tc := range []struct {
		store, other string
		flags        []string // the start that must be refused
		holds        string
	}{
		{store: "boltdb", other: "wal", flags: []string{"--log-store", "wal"}, holds: "holds a boltdb raft log, not --log-store wal"},
		// The likelier mistake: a wal node started without the flag.
		{store: "wal", other: "boltdb", flags: nil, holds: "holds a wal raft log, not --log-store boltdb"},
	} {
		t.Run(tc.store, func(t *testing.T) {
			t.Parallel()
			c := startCluster(t, 1, withLogStore(tc.store))
			c.WaitForActive(t, activeTimeout)
			last := c.appendNoOp(t, 10*time.Second).Index
			c.Stop(1)
			before, _ := os.ReadFile(filepath.Join(c.DataDir(1), "meta.json"))

			addr := c.Addr(1)
			expectRefused(t, addr, controllerArgs(1, addr, c.DataDir(1), "1@"+addr, tc.flags...),
				c.DataDir(1), tc.holds, "start the node on an empty data dir and let it rejoin")
			after, _ := os.ReadFile(filepath.Join(c.DataDir(1), "meta.json"))
			if string(after) != string(before) {
				t.Errorf("meta.json changed by the refused start: %s -> %s", before, after)
			}
			otherFile := map[string]string{"boltdb": "raft.db", "wal": "wal"}[tc.other]
			if _, err := os.Stat(filepath.Join(c.DataDir(1), otherFile)); err == nil {
				t.Errorf("the refused start created %s", otherFile)
			}

			c.Restart(1)
			c.WaitForActive(t, activeTimeout)
			c.WaitForApplied(t, c.IDs(), last)
		})
	}
	t.Run("bad value", func(t *testing.T) {
		t.Parallel()
		addr := freeAddr(t)
		dir := filepath.Join(t.TempDir(), "data")
		expectRefused(t, addr, controllerArgs(1, addr, dir, "1@"+addr, "--log-store", "rocksdb"),
			`--log-store "rocksdb": want boltdb or wal`)
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("refused start created data dir %s", dir)
		}
	})
}

// TestLogStore_MigrateVoterToWAL follows the documented migration: a
// follower of a boltdb quorum, whose log the others have already truncated
// behind a snapshot, is stopped, its data dir moved aside, and started again
// with --log-store wal on an empty data dir. It rejoins from the leader's
// snapshot plus the log, and the mixed quorum goes on committing.
func TestLogStore_MigrateVoterToWAL(t *testing.T) {
	c := startCluster(t, 3, withControllerFlags(
		"--snapshot-threshold", "16", "--trailing-logs", "4", "--snapshot-interval", "100ms"))
	leader, _ := c.WaitForActive(t, activeTimeout)
	for range 40 {
		c.appendNoOp(t, 10*time.Second)
	}
	// The leader must have truncated the start of its log behind a
	// snapshot (every 16 entries, keeping 4), so that the migrated node can
	// only catch up by a snapshot install.
	waitForSnapshot(t, c.DataDir(leader), 20)
	follower := otherThan(c.IDs(), leader)[0]
	c.Stop(follower)
	c.WaitForActive(t, activeTimeout)
	dir := c.DataDir(follower)
	if err := os.Rename(dir, dir+".boltdb"); err != nil {
		t.Fatal(err)
	}

	nd := c.node(follower)
	nd.SetArgs(append(nd.Args(), "--log-store", "wal")) // still with --voters
	c.Start(follower)
	resp := c.appendNoOp(t, 10*time.Second)
	c.WaitForConverged(t, c.IDs(), resp.Index)
	resp = c.appendNoOp(t, 10*time.Second)
	c.WaitForConverged(t, c.IDs(), resp.Index)

	c.Stop(follower)
	l := dumpLog(t, dir)
	if l.snapshotLines == 0 || l.last < resp.Index || l.noOps[resp.Index] == "" {
		t.Errorf("migrated node's data dir: %d snapshot records, log to %d with no-op %q at %d; want a snapshot and the log to %d",
			l.snapshotLines, l.last, l.noOps[resp.Index], resp.Index, resp.Index)
	}
	if _, err := os.Stat(filepath.Join(dir, "raft.db")); err == nil {
		t.Errorf("migrated node has a raft.db")
	}
	c.Start(follower)
	c.WaitForConverged(t, c.IDs(), c.appendNoOp(t, 10*time.Second).Index)
}

// waitForSnapshot waits until the raft snapshot store in dataDir holds a
// snapshot at index or later (raft names them term-index-time).
func waitForSnapshot(t *testing.T, dataDir string, index uint64) {
	t.Helper()
	poll.Until(t, 30*time.Second, fmt.Sprintf("a raft snapshot at index %d or later in %s", index, dataDir), func() bool {
		entries, _ := os.ReadDir(filepath.Join(dataDir, "snapshots"))
		for _, e := range entries {
			parts := strings.Split(e.Name(), "-")
			if len(parts) != 3 || strings.HasSuffix(e.Name(), ".tmp") {
				continue
			}
			if at, err := strconv.ParseUint(parts[1], 10, 64); err == nil && at >= index {
				return true
			}
		}
		return false
	})
}
