package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/keeltest/keelproc"
)

// expectRefused runs keel with args and checks that it exits with status 1
// and exactly one line on stderr, "keel: ...", containing every one of want.
// If listen is not empty, the port must be free again afterwards: the failed
// start left nothing bound.
func expectRefused(t *testing.T, listen string, args []string, want ...string) (stderr string) {
	t.Helper()
	stdout, stderr, code := runKeel(t, 30*time.Second, args...)
	if code != 1 {
		t.Errorf("keel %s: exit status %d, want 1", strings.Join(args, " "), code)
	}
	if stdout != "" {
		t.Errorf("stdout = %q, want nothing", stdout)
	}
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "keel: ") || !strings.HasSuffix(stderr, "\n") {
		t.Errorf("stderr is not one line \"keel: ...\":\n%s", stderr)
	}
	for _, w := range want {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr %q does not contain %q", strings.TrimSpace(stderr), w)
		}
	}
	if listen != "" {
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			t.Errorf("after the refused start, %s is not free: %v", listen, err)
		} else {
			ln.Close()
		}
	}
	return stderr
}

func freeAddr(t *testing.T) string {
	t.Helper()
	return freeAddrs(t, 1)[0]
}

// controllerArgs is a bare controller's command line, extra last.
func controllerArgs(id int32, listen, dataDir, voters string, extra ...string) []string {
	return keelproc.ControllerArgs{ID: id, Listen: listen, DataDir: dataDir, Voters: voters, Flags: extra}.Build()
}

func TestController_RefusesBadInput(t *testing.T) {
	t.Run("UnparsableVoters", func(t *testing.T) {
		t.Parallel()
		addr := freeAddr(t)
		for _, tc := range []struct {
			voters string
			want   []string
		}{
			{"x", []string{"--voters", `"x"`, "missing '@'"}},
			{"", []string{"--voters", "empty"}},
			{"1@" + addr + ",one@127.0.0.1:1", []string{"--voters", `"one"`, "not a positive integer"}},
			{"1@127.0.0.1:99999", []string{"--voters", "99999", "1..65535"}},
			{"1@" + addr + ",2@" + addr, []string{"--voters", addr, "more than once"}},
		} {
			stderr := expectRefused(t, addr, controllerArgs(1, addr, filepath.Join(t.TempDir(), "data"), tc.voters), tc.want...)
			if strings.Count(stderr, "--voters") > 1 {
				t.Errorf("stderr names --voters more than once: %q", stderr)
			}
		}
	})

	t.Run("VotersWithoutNodeID", func(t *testing.T) {
		t.Parallel()
		addrs := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
		voters := fmt.Sprintf("1@%s,2@%s,3@%s", addrs[0], addrs[1], addrs[2])
		dir := filepath.Join(t.TempDir(), "data")
		expectRefused(t, addrs[0], controllerArgs(4, addrs[0], dir, voters), "--voters", "node id 4")
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("refused start created data dir %s", dir)
		}
	})

	t.Run("Join", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "data")
		expectRefused(t, "", []string{"controller", "--node-id", "4", "--data-dir", dir, "--join"}, "--join needs --listen", "node 4")
		addr := freeAddr(t)
		expectRefused(t, addr, []string{"controller", "--node-id", "4", "--listen", addr, "--data-dir", dir, "--join", "--restore-from", "x.snap"},
			"--join and --restore-from")
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("refused start created data dir %s", dir)
		}
	})

	t.Run("ListenPortTaken", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		addr := ln.Addr().String()
		expectRefused(t, "", controllerArgs(1, addr, filepath.Join(t.TempDir(), "data"), "1@"+addr),
			addr, "address already in use")
	})

	t.Run("DataDirIsAFile", func(t *testing.T) {
		t.Parallel()
		addr := freeAddr(t)
		file := filepath.Join(t.TempDir(), "data")
		if err := os.WriteFile(file, []byte("not a dir\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		expectRefused(t, addr, controllerArgs(1, addr, file, "1@"+addr), file, "not a directory")
	})

	t.Run("BadRaftTiming", func(t *testing.T) {
		t.Parallel()
		addr := freeAddr(t)
		expectRefused(t, addr, controllerArgs(1, addr, filepath.Join(t.TempDir(), "data"), "1@"+addr,
			"--raft-leader-lease-timeout", "1s"), "--raft-leader-lease-timeout (1s)", "--raft-heartbeat-timeout (300ms)")
		expectRefused(t, addr, controllerArgs(1, addr, filepath.Join(t.TempDir(), "data"), "1@"+addr,
			"--raft-election-timeout", "100ms"), "--raft-election-timeout (100ms)", "--raft-heartbeat-timeout (300ms)")
	})

	t.Run("DataDirOfAnotherNode", func(t *testing.T) {
		t.Parallel()
		c := startCluster(t, 1)
		c.WaitForActive(t, activeTimeout)
		c.Stop(1)
		addr := freeAddr(t)
		expectRefused(t, addr, controllerArgs(2, addr, c.DataDir(1), "2@"+addr),
			c.DataDir(1), "belongs to node 1, not node 2")
		// The refused start left the data dir to its owner.
		c.Restart(1)
		c.WaitForActive(t, activeTimeout)
	})

	t.Run("DataDirInUse", func(t *testing.T) {
		t.Parallel()
		c := startCluster(t, 1)
		_, epoch := c.WaitForActive(t, activeTimeout)
		addr := freeAddr(t)
		expectRefused(t, addr, controllerArgs(1, addr, c.DataDir(1), "1@"+addr),
			c.DataDir(1), "in use by another process")
		// The running node did not notice.
		if _, ep := c.WaitForActive(t, activeTimeout); ep != epoch {
			t.Errorf("epoch %d after the refused start, want %d", ep, epoch)
		}
		c.appendNoOp(t, 10*time.Second)
	})

	t.Run("DataDirOfAnotherCluster", func(t *testing.T) {
		t.Parallel()
		c := startCluster(t, 1, withClusterID("A"))
		_, epoch := c.WaitForActive(t, activeTimeout)
		if v, err := c.Describe(context.Background(), 1); err != nil || v.ClusterId != "A" {
			t.Fatalf("cluster id = %q (%v), want A", v.GetClusterId(), err)
		}
		c.Stop(1)
		addr := c.Addr(1)
		expectRefused(t, addr, controllerArgs(1, addr, c.DataDir(1), "1@"+addr, "--cluster-id", "B"),
			c.DataDir(1), "cluster A", "not B")
		c.Restart(1)
		if _, ep := c.WaitForActive(t, activeTimeout); ep <= epoch {
			t.Errorf("epoch after restart %d, want > %d", ep, epoch)
		}
		if v, err := c.Describe(context.Background(), 1); err != nil || v.ClusterId != "A" {
			t.Errorf("cluster id after the refused start = %q (%v), want A", v.GetClusterId(), err)
		}
	})

	t.Run("DataDirOfAnotherGeneratedCluster", func(t *testing.T) {
		// No --cluster-id at first: the id the cluster generated must be
		// recorded in the data dir once it is known, and enforced.
		t.Parallel()
		c := startCluster(t, 1)
		c.WaitForActive(t, activeTimeout)
		v, err := c.Describe(context.Background(), 1)
		if err != nil || v.ClusterId == "" {
			t.Fatalf("cluster id = %q (%v), want a generated one", v.GetClusterId(), err)
		}
		c.Stop(1)
		addr := c.Addr(1)
		expectRefused(t, addr, controllerArgs(1, addr, c.DataDir(1), "1@"+addr, "--cluster-id", "B"),
			c.DataDir(1), "cluster "+v.ClusterId, "not B")
	})
}

// TestClusterID_WrongFlagDoesNotClaimDataDir: a node whose data dir has raft
// state but no cluster id recorded yet (it bootstrapped, then stopped before
// the quorum ever elected) is started once by mistake with the wrong
// --cluster-id. It must refuse to run, and must not record the wrong id: the
// next start with the right flags has to join the quorum.
func TestClusterID_WrongFlagDoesNotClaimDataDir(t *testing.T) {
	c := startCluster(t, 3, withDeferred(1, 2))
	c.Stop(3) // bootstrapped raft state, no cluster id: there was never a leader
	c.Start(1)
	c.Start(2)
	leader, _ := c.WaitForActive(t, activeTimeout)
	v, err := c.Describe(context.Background(), leader)
	if err != nil || v.ClusterId == "" {
		t.Fatalf("cluster id = %q (%v)", v.GetClusterId(), err)
	}

	_, stderr, code := runKeel(t, 30*time.Second, controllerArgs(3, c.Addr(3), c.DataDir(3), c.VotersFlag(), "--cluster-id", "B")...)
	last := keelproc.LastLines(stderr, 1)
	if code != 1 || !strings.HasPrefix(last, "keel: ") || !strings.Contains(last, v.ClusterId) {
		t.Errorf("start with --cluster-id B: exit %d, last line %q; want exit 1 naming cluster %s", code, last, v.ClusterId)
	}

	c.Start(3)
	c.WaitForConverged(t, c.IDs(), v.AppliedIndex)
}
