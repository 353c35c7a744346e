package keeltest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func noOp() *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_NoOp{NoOp: &keelpb.NoOpRecord{}}}
}

// propose commits a no-op through active and returns its index.
func propose(t *testing.T, active *server.Node) uint64 {
	t.Helper()
	index, err := active.Controller().Propose(context.Background(), noOp())
	if err != nil {
		t.Fatalf("Propose on node %d: %v", active.ID(), err)
	}
	return index
}

func epochOf(n *server.Node) int64 {
	_, epoch := n.Controller().Active()
	return epoch
}

// TestCluster_KillPartitionHealRestart walks a three-node cluster through
// the faults the helpers exist for: one active controller is elected; a
// killed active controller is replaced; a restarted node rejoins and
// catches up; a partitioned active controller stops being active while the
// majority elects another; healing brings every node to the same applied
// index.
func TestCluster_KillPartitionHealRestart(t *testing.T) {
	c := keeltest.NewCluster(t, 3)
	if n := len(c.Nodes()); n != 3 {
		t.Fatalf("%d nodes running, want 3", n)
	}
	first := c.WaitForActive(5 * time.Second)

	c.Kill(first.ID())
	second := c.WaitForActive(5 * time.Second)
	if second.ID() == first.ID() || epochOf(second) <= epochOf(first) {
		t.Fatalf("after killing node %d (epoch %d): node %d active at epoch %d", first.ID(), epochOf(first), second.ID(), epochOf(second))
	}
	if n := len(c.Nodes()); n != 2 {
		t.Fatalf("%d nodes running after Kill, want 2", n)
	}

	c.Restart(first.ID())
	restarted := c.Node(first.ID())
	if restarted == first || restarted.Addr() != first.Addr() {
		t.Fatalf("Restart(%d): node %p at %s, was %p at %s", first.ID(), restarted, restarted.Addr(), first, first.Addr())
	}
	c.WaitForApplied(propose(t, second))
	poll.Until(t, 5*time.Second, fmt.Sprintf("the restarted node to follow node %d", second.ID()), func() bool {
		id, _ := restarted.Controller().Leader()
		return id == second.ID()
	})

	c.Partition(second.ID())
	poll.Until(t, 5*time.Second, "the partitioned controller to stop being active", func() bool {
		ok, _ := second.Controller().Active()
		return !ok
	})
	var majority []int32
	for _, n := range c.Nodes() {
		if n.ID() != second.ID() {
			majority = append(majority, n.ID())
		}
	}
	third := c.WaitForActive(5*time.Second, majority...)
	if epochOf(third) <= epochOf(second) {
		t.Fatalf("the majority's controller, node %d, is at epoch %d, not past the partitioned one's", third.ID(), epochOf(third))
	}

	c.Heal()
	c.WaitForApplied(propose(t, third))
	poll.UntilState(t, keeltest.WaitTimeout, "every node at the same applied index", func() (bool, string) {
		var seen []string
		want := third.FSM().Image().Offset
		same := true
		for _, n := range c.Nodes() {
			at := n.FSM().Image().Offset
			same = same && at == want
			seen = append(seen, fmt.Sprintf("node %d: %d", n.ID(), at))
		}
		return same, strings.Join(seen, ", ")
	})

	// The quorum's client finds the active controller from any address.
	if _, err := c.Client().AppendNoOp(context.Background(), "after-heal"); err != nil {
		t.Fatalf("AppendNoOp through the cluster's client: %v", err)
	}
}

// TestCluster_Options: the clock, session timeout, metrics and tune options
// reach every node, a restarted one included.
func TestCluster_Options(t *testing.T) {
	const session = 400 * time.Millisecond
	clock := keeltest.NewClock()
	c := keeltest.NewCluster(t, 3,
		keeltest.WithClock(clock.Now),
		// Short, because the controller checks sessions every eighth of
		// one by the wall clock; whether they expired is the fake clock's.
		keeltest.WithSessionTimeout(session),
		keeltest.WithMetrics(),
		keeltest.WithTune(func(cfg *server.NodeConfig) { cfg.ClusterID = "options" }))
	active := c.WaitForActive(5 * time.Second)
	c.WaitForApplied(active.FSM().Image().Offset)
	for _, n := range c.Nodes() {
		if id := n.FSM().Image().ClusterID; id != "options" {
			t.Errorf("node %d: cluster id %q, want the tuned one", n.ID(), id)
		}
		if fams, err := c.Metrics(n.ID()).Gather(); err != nil || len(fams) == 0 {
			t.Errorf("node %d: %d metric families, %v; want its own registry filled", n.ID(), len(fams), err)
		}
	}

	// A broker's session is the fake clock's: it outlives two sessions of
	// wall time, and expires when the fake clock passes it.
	ctx := context.Background()
	reg, err := active.Controller().RegisterBroker(ctx, &keelpb.RegisterBrokerRequest{BrokerId: 1,
		IncarnationId: "00000000-0000-0000-0000-00000000000a", Address: "127.0.0.1:9092", MinMetadataVersion: fsm.MinMetadataVersion, MaxMetadataVersion: fsm.MaxMetadataVersion})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := active.Controller().BrokerHeartbeat(ctx, &keelpb.BrokerHeartbeatRequest{BrokerId: 1, BrokerEpoch: reg.BrokerEpoch, MetadataOffset: uint64(reg.BrokerEpoch)}); err != nil {
		t.Fatal(err)
	}
	fenced := func() bool { b, ok := active.FSM().Image().Broker(1); return ok && b.Fenced }
	start := time.Now()
	err = poll.Wait(ctx, 5*time.Second, poll.Interval, "two sessions of wall time", func() (bool, error) {
		if fenced() {
			return false, fmt.Errorf("broker 1 fenced after %v of wall time, with the fake clock still", time.Since(start))
		}
		return time.Since(start) > 2*session, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	clock.Add(session + time.Millisecond)
	poll.Until(t, 5*time.Second, "broker 1 fenced once the clock passed its session", fenced)

	// A restart keeps the node's registry.
	id := active.ID()
	c.Kill(id)
	c.Restart(id)
	poll.Until(t, 5*time.Second, fmt.Sprintf("node %d's metrics registered again", id), func() bool {
		fams, err := c.Metrics(id).Gather()
		return err == nil && len(fams) > 0
	})
}

// TestCluster_DirectRaft: without the fault proxies, the nodes dial each
// other directly, elect and commit.
func TestCluster_DirectRaft(t *testing.T) {
	c := keeltest.NewCluster(t, 3, keeltest.WithDirectRaft())
	active := c.WaitForActive(5 * time.Second)
	c.WaitForApplied(propose(t, active))
}
