package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/faultproxy"
	"github.com/keel-dev/keel/internal/poll"
)

// A controller cut off from the others (its raft links down, its own port
// up) answers reads Unavailable rather than from its own image, unless the
// read asks for that (--stale), which then says how far behind it is.
func TestReads_CutOffControllerAnswersUnavailableOrStale(t *testing.T) {
	c := startCluster(t, 3, withFaultNet())
	leader, _ := c.WaitForActive(t, activeTimeout)
	noop := c.appendNoOp(t, 10*time.Second)
	c.WaitForApplied(t, c.IDs(), noop.Index)
	cut := otherThan(c.IDs(), leader)[0]

	for _, other := range otherThan(c.IDs(), cut) {
		c.net.Link(cut, other).Set(faultproxy.Drop)
		c.net.Link(other, cut).Set(faultproxy.Drop)
	}
	defer c.net.Heal()
	poll.Until(t, 20*time.Second, fmt.Sprintf("node %d to know no leader", cut), func() bool {
		v, err := c.Describe(context.Background(), cut)
		return err == nil && v.LeaderId < 0
	})

	addr := c.Addr(cut)
	for _, args := range [][]string{{"topic", "list"}, {"broker", "list"}} {
		_, stderr, code := runKeel(t, 30*time.Second, append(args, "--controllers", addr, "--timeout", "2s")...)
		if code != 1 || !strings.Contains(stderr, "keel: Unavailable: no active controller answered the read") || !strings.Contains(stderr, "--stale") {
			t.Errorf("keel %v from cut-off node %d: exit %d, stderr %q; want Unavailable naming --stale", args, cut, code, stderr)
		}
		stdout, stderr, code := runKeel(t, 30*time.Second, append(args, "--controllers", addr, "--stale")...)
		want := fmt.Sprintf("stale read: answered by controller %d from its own image, at applied index ", cut)
		if code != 0 || !strings.HasPrefix(stdout, "NAME") && !strings.HasPrefix(stdout, "ID") ||
			!strings.Contains(stderr, want) || !strings.Contains(stderr, "it last heard from the leader") {
			t.Errorf("keel %v --stale from cut-off node %d: exit %d\nstdout %s\nstderr %s", args, cut, code, stdout, stderr)
		}
	}
	_, stderr, code := runKeel(t, 30*time.Second, "topic", "list", "--controllers", addr, "--timeout", "2s", "--linearizable")
	if code != 1 || !strings.Contains(stderr, "linearizable read") || strings.Contains(stderr, "accepted the write") {
		t.Errorf("topic list --linearizable from cut-off node %d: exit %d, stderr %q", cut, code, stderr)
	}

	// Given every controller, the read goes to the active one.
	stdout, stderr, code := runKeel(t, 30*time.Second, "topic", "list", "--controllers", strings.Join(c.Addrs(), ","))
	if code != 0 || !strings.HasPrefix(stdout, "NAME") {
		t.Errorf("topic list with the quorum: exit %d\n%s%s", code, stdout, stderr)
	}
}
