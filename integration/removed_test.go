package integration

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/faultproxy"
	"github.com/keel-dev/keel/keeltest/keelproc"
	"github.com/keel-dev/keel/proto/keelpb"
)

// TestMembership_RemovedWithoutHearingItExits: the active controller,
// asked under write load to remove itself, hands leadership on, and the new
// leader removes it; it never receives the configuration that removes it,
// as under load when raft's leader stops replicating to it (its removal
// being the latest configuration) before it has caught up. Here the raft
// links into it are cut first, so that it never does; its own port stays
// up. It used to run on for good, a voter of its own configuration only.
// It must learn from the others that it was removed, and exit, status 0;
// with mutual TLS too, where it asks them with its own certificate.
func TestMembership_RemovedWithoutHearingItExits(t *testing.T) {
	t.Run("plaintext", func(t *testing.T) { testRemovedWithoutHearingIt(t) })
	t.Run("tls", func(t *testing.T) { testRemovedWithoutHearingIt(t, withTLS(newTestPKI(t))) })
}

func testRemovedWithoutHearingIt(t *testing.T, opts ...clusterOption) {
	c := startCluster(t, 3, append([]clusterOption{withFaultNet()}, opts...)...)
	leader, _ := c.WaitForActive(t, activeTimeout)
	w := startWriter(c)
	t.Cleanup(w.stop)
	w.waitWrites(t, 20)

	for _, other := range c.IDs() {
		if other != leader {
			c.net.Link(other, leader).Set(faultproxy.Drop)
		}
	}
	t.Cleanup(c.net.Heal)
	var removed membershipJSON
	c.keelJSON(t, &removed, "quorum", "remove-voter", strconv.Itoa(int(leader)))
	if slices.Contains(removed.ids(), leader) || len(removed.Voters) != 2 {
		t.Fatalf("remove-voter %d (the leader): %+v", leader, removed)
	}
	// It has not heard of its removal: its own configuration lists it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	view, err := c.Describe(ctx, leader)
	if err != nil {
		t.Fatalf("describe node %d: %v", leader, err)
	}
	if !slices.ContainsFunc(view.GetVoters(), func(m *keelpb.QuorumMember) bool { return m.GetId() == leader }) {
		t.Fatalf("node %d received its removal (its voters: %v): the fault was not reproduced", leader, view.GetVoters())
	}

	if code := c.waitExited(leader, 30*time.Second); code != 0 {
		t.Fatalf("removed node %d exited with status %d", leader, code)
	}
	if out := c.node(leader).Output(); !strings.Contains(out, "removed from the quorum") || !strings.Contains(out, "never received its removal") {
		t.Fatalf("removed node %d did not say why it stopped; output ends:\n%s", leader, keelproc.LastLines(out, 10))
	}
	w.waitWrites(t, 20)
}
