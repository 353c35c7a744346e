package integration

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
)

// restorePace is how long the restarted controller's snapshot restore
// takes (--test-restore-pace): long enough for keel quorum status, a
// process started every poll, to catch it many times over.
const restorePace = 8 * time.Second

// loadingRow is a starting voter's row in keel quorum status's table.
var loadingRow = regexp.MustCompile(`\sstarting\s+-\s+loading snapshot \(\d+%\)$`)

// quorumVoter is a voter in `keel quorum status -o json`.
type quorumVoter struct {
	ID              int32  `json:"id"`
	State           string `json:"state"`
	AppliedIndex    uint64 `json:"applied_index"`
	LoadingSnapshot *struct {
		ReadBytes int64 `json:"read_bytes"`
		SizeBytes int64 `json:"size_bytes"`
		Percent   int   `json:"percent"`
	} `json:"loading_snapshot"`
}

// quorumVoterStatus runs keel quorum status, as JSON and as a table, and
// returns voter id's entry and its row of the table.
func (c *Cluster) quorumVoterStatus(t *testing.T, id int32) (quorumVoter, string) {
	t.Helper()
	var st struct {
		Voters []quorumVoter `json:"voters"`
	}
	c.keelJSON(t, &st, "quorum", "status")
	i := slices.IndexFunc(st.Voters, func(v quorumVoter) bool { return v.ID == id })
	if i < 0 {
		t.Fatalf("keel quorum status names no voter %d: %+v", id, st.Voters)
	}
	stdout, stderr, code := runKeel(t, 30*time.Second, c.adminArgs("quorum", "status")...)
	if code != 0 {
		t.Fatalf("keel quorum status: exit status %d: %s", code, stderr)
	}
	for line := range strings.Lines(stdout) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == fmt.Sprint(id) {
			return st.Voters[i], strings.TrimSpace(line)
		}
	}
	t.Fatalf("keel quorum status has no row for voter %d:\n%s", id, stdout)
	return quorumVoter{}, ""
}

// TestSnapshotLoad_QuorumStatusWhileRestoring restarts a follower whose
// snapshot restore is slowed (--test-restore-pace) and polls keel quorum
// status: while it restores it is "starting" with "loading snapshot (N%)"
// where the applied index goes (before, it was "unreachable" with an
// applied index of 0, which reads as lost state), then it shows its real
// applied index.
func TestSnapshotLoad_QuorumStatusWhileRestoring(t *testing.T) {
	c := startCluster(t, 3, snapshotFlags)
	leader, _ := c.WaitForActive(t, activeTimeout)
	follower := otherThan(c.IDs(), leader)[0]
	var last uint64
	for range 60 {
		last = c.appendNoOp(t, 10*time.Second).Index
	}
	c.waitForLog(t, follower, "compacting logs", 1, 20*time.Second)
	c.Stop(follower)

	nd := c.node(follower)
	nd.SetArgs(append(nd.Args(), "--test-restore-pace", restorePace.String()))
	started := make(chan error, 1)
	go func() { started <- c.h.StartNodes(context.Background(), nd) }()

	var seen []string
	poll.UntilState(t, 3*restorePace, fmt.Sprintf("keel quorum status to show voter %d loading its snapshot", follower), func() (bool, string) {
		v, row := c.quorumVoterStatus(t, follower)
		seen = append(seen, row)
		// Two runs, JSON then the table: each must show the load.
		return v.LoadingSnapshot != nil && v.State == "starting" && v.LoadingSnapshot.SizeBytes > 0 && loadingRow.MatchString(row), row
	})
	if err := <-started; err != nil {
		t.Fatalf("restart controller %d: %v", follower, err)
	}
	if !strings.Contains(nd.Output(), "restored from snapshot") {
		t.Fatalf("controller %d did not restore a snapshot on restart", follower)
	}
	poll.UntilState(t, 30*time.Second, fmt.Sprintf("keel quorum status to show voter %d's applied index at %d or later", follower, last), func() (bool, string) {
		v, row := c.quorumVoterStatus(t, follower)
		return v.LoadingSnapshot == nil && v.AppliedIndex >= last && !strings.Contains(row, "loading"), row
	})
	t.Logf("rows while restoring: %q", seen)
}
