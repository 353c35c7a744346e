package integration

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMembership_AddVoterThatIsDownIsRefused: adding a voter at an address
// where nothing answers is refused by the active controller (--no-check
// skips only the command's own look), with one line that says what it
// would cost the quorum, and nothing changes; with --force it is added.
func TestMembership_AddVoterThatIsDownIsRefused(t *testing.T) {
	c := startCluster(t, 3)
	c.WaitForActive(t, activeTimeout)
	dead := freeAddr(t)
	_, errOut, code := runKeel(t, 30*time.Second, c.adminArgs("quorum", "add-voter", "4", dead, "--no-check", "--timeout", "10s")...)
	line := strings.TrimSpace(errOut)
	want := "keel: FailedPrecondition: not fit to be a voter: node 4 at " + dead + " does not answer"
	cost := "a 4-voter quorum needs 3, so while it is down the other 3 would tolerate no failure, where the 3 voters now tolerate 1 failure; --force adds it anyway"
	if code != 1 || !strings.HasPrefix(line, want) || !strings.HasSuffix(line, cost) || strings.Contains(line, "\n") {
		t.Fatalf("add-voter of a node that is down: exit %d, stderr %q; want one line %q ... %q", code, errOut, want, cost)
	}
	c.waitStatus(t, "the three voters, unchanged", caughtUp([]int32{1, 2, 3}, 0))

	var added membershipJSON
	c.keelJSON(t, &added, "quorum", "add-voter", "4", dead, "--force")
	if got := added.ids(); !slices.Equal(got, []int32{1, 2, 3, 4}) {
		t.Fatalf("add-voter --force of a node that is down: voters %v", got)
	}
}
