package server_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/internal/poll"
)

// TestJoin_AddedThenRemoved: a node started with Join and an empty data dir
// bootstraps nothing; added, it catches up and records the cluster id in its
// data dir; removed, it reports ErrRemoved on Fatal.
func TestJoin_AddedThenRemoved(t *testing.T) {
	c, active := startCluster(t, 3)
	ctx := context.Background()
	n4 := c.StartJoiner(4)
	addr := n4.Addr()
	if d := n4.Controller().Describe("test"); len(d.Voters) != 0 || d.ClusterId != "" {
		t.Fatalf("a joining node bootstrapped: %v", d)
	}

	res, err := active.Controller().AddVoter(ctx, 4, addr, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Members) != 4 {
		t.Fatalf("AddVoter: members %v", res.Members)
	}
	index, err := active.Controller().Propose(ctx, noOps(1)...)
	if err != nil {
		t.Fatal(err)
	}
	cluster := active.FSM().Image().ClusterID
	poll.UntilState(t, 10*time.Second, "node 4 to catch up and record the cluster id", func() (bool, string) {
		applied, recorded := n4.FSM().Image().Offset, n4.RecordedClusterID()
		return applied >= index && recorded == cluster,
			fmt.Sprintf("node 4: applied %d of %d, recorded cluster id %q of %q", applied, index, recorded, cluster)
	})

	if _, err := c.WaitForActive(10*time.Second).Controller().RemoveVoter(ctx, 4); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-n4.Fatal():
		if !errors.Is(err, controller.ErrRemoved) {
			t.Fatalf("Fatal = %v, want ErrRemoved", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the removed node did not notice within 15s")
	}
}
