package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest"
	"github.com/keel-dev/keel/proto/keelpb"
)

// A controller cut off from the quorum does not answer reads from its own
// image unless asked to (--stale), and then says how far behind it is.
func TestReads_CutOffControllerIsUnavailableUnlessStale(t *testing.T) {
	c := keeltest.NewCluster(t, 3)
	leader := c.WaitForActive(10 * time.Second)
	addrs := strings.Join(c.Addrs(), ",")

	var cut int32
	for _, n := range c.Nodes() {
		if n.ID() != leader.ID() {
			cut = n.ID()
			break
		}
	}
	c.Partition(cut)
	poll.Until(t, 10*time.Second, "the cut-off node to know no leader", func() bool {
		id, _ := c.Node(cut).Controller().Leader()
		return id < 0
	})
	addr := c.Node(cut).Addr()
	for _, args := range [][]string{
		{"topic", "list"},
		{"topic", "describe", "orders"},
		{"broker", "list"},
		{"partition", "reassignments"},
		{"config", "describe"},
	} {
		_, _, err := runKeelSplit(t, append(args, "--controllers", addr, "--timeout", "1s")...)
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no active controller answered the read") ||
			!strings.Contains(err.Error(), "--stale") {
			t.Errorf("%v from a cut-off controller: %v; want Unavailable naming --stale", args, err)
		}
		out, errOut, err := runKeelSplit(t, append(args, "--controllers", addr, "--stale")...)
		if args[0] == "topic" && args[1] == "describe" {
			// There is no such topic: the stale answer says whose image
			// it looked in.
			if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), fmt.Sprintf("in controller %d's own image", cut)) {
				t.Errorf("%v --stale: %v", args, err)
			}
			continue
		}
		if err != nil || !strings.Contains(errOut, fmt.Sprintf("stale read: answered by controller %d from its own image, at applied index", cut)) ||
			!strings.Contains(errOut, "it last heard from the leader") || !strings.Contains(errOut, "it knows no leader now") {
			t.Errorf("%v --stale from a cut-off controller: %v\nstdout %s\nstderr %s", args, err, out, errOut)
		}
	}

	// --linearizable says what it means for a read, not a write.
	_, _, err := runKeelSplit(t, "topic", "list", "--controllers", addr, "--timeout", "1s", "--linearizable")
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "linearizable read") ||
		strings.Contains(err.Error(), "accepted the write") {
		t.Errorf("topic list --linearizable from a cut-off controller: %v", err)
	}
	if _, _, err := runKeelSplit(t, "topic", "list", "--stale", "--linearizable"); err == nil ||
		!strings.Contains(err.Error(), "none of the others can be") {
		t.Errorf("--stale with --linearizable: %v; want a refusal", err)
	}

	// Given every controller, a stale read is answered (by the active
	// controller unless it is slow to answer on a loaded machine) and says
	// by whom.
	out, errOut, err := runKeelSplit(t, "topic", "list", "--controllers", addrs, "--stale")
	if err != nil || !strings.Contains(out, "NAME") || !strings.Contains(errOut, "stale read: answered by ") {
		t.Errorf("topic list --stale with every controller: %v\n%s%s", err, out, errOut)
	}
	out, errOut, err = runKeelSplit(t, "broker", "list", "--controllers", addrs)
	if err != nil || !strings.HasPrefix(out, "ID") || errOut != "" {
		t.Errorf("broker list with the quorum: %v\n%s%s", err, out, errOut)
	}
	c.Heal()
}

func TestStaleNote(t *testing.T) {
	for _, tc := range []struct {
		src  *keelpb.ReadSource
		want string
	}{
		{&keelpb.ReadSource{NodeId: 1, Active: true, AppliedIndex: 90, LeaderId: 1}, "stale read: answered by the active controller 1, at applied index 90"},
		{&keelpb.ReadSource{NodeId: 2, AppliedIndex: 90, LeaderId: 1, LastContactMs: 40},
			"stale read: answered by controller 2 from its own image, at applied index 90; it last heard from the leader 40ms ago"},
		{&keelpb.ReadSource{NodeId: 3, AppliedIndex: 88, LeaderId: -1, LastContactMs: 12300, BehindIndex: 89, BehindMs: 2000},
			"stale read: answered by controller 3 from its own image, at applied index 88; it last heard from the leader 12.3s ago, and has yet to apply index 89, committed 2s ago; it knows no leader now, so writes since may be missing"},
		{&keelpb.ReadSource{NodeId: 3, AppliedIndex: 0, LeaderId: -1, LastContactMs: -1},
			"stale read: answered by controller 3 from its own image, at applied index 0; it has not heard from a leader since it started; it knows no leader now, so writes since may be missing"},
	} {
		if got := staleNote(tc.src); got != tc.want {
			t.Errorf("staleNote(%v) =\n%s\nwant\n%s", tc.src, got, tc.want)
		}
	}
}
