package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/faultproxy"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// deposedLease is the raft lease (and heartbeat and election timeouts) of
// the controller TestDeposedController_AnswersNoWriteFromItsImage deposes:
// long enough that, cut off, it goes on believing it leads for seconds
// after the others have elected a leader of their own, as a leader behind
// reset links or paused does for a moment. The others keep the defaults.
const deposedLease = 5 * time.Second

// A controller cut off from the others that still believes it is the
// active controller is asked to create a topic that exists in its image,
// delete one that does not, set a config to the value it holds, and for a
// linearizable read, after the new active controller deleted that topic,
// created the other and changed the value. Each request goes to it alone,
// as a client that has not heard of the new leader sends it. It must answer
// none of them from its image (AlreadyExists, NotFound, OK): each fails
// with the not-active error once it finds it no longer leads, and nothing
// was written.
func TestDeposedController_AnswersNoWriteFromItsImage(t *testing.T) {
	c := startCluster(t, 3, withFaultNet(), withSessionTimeout(testSessionTimeout), withDeferred(1))
	slow := c.node(1)
	slow.SetArgs(append(slow.Args(), "--raft-heartbeat-timeout", deposedLease.String(),
		"--raft-election-timeout", deposedLease.String(), "--raft-leader-lease-timeout", deposedLease.String()))
	c.Start(1)
	c.WaitForActive(t, activeTimeout)
	c.StartBroker(1)
	c.WaitForBrokers(t, allActive(1))
	ctx := context.Background()
	poll.UntilState(t, activeTimeout, "node 1 to be the active controller", func() (bool, string) {
		if leader, _ := c.WaitForActive(t, activeTimeout); leader == 1 {
			return true, ""
		}
		// Refused while node 1 is behind or slow to answer: asked again.
		_, err := c.Client().TransferLeadership(ctx, 1)
		return false, fmt.Sprintf("handing leadership to node 1: %v", err)
	})

	one := []*keelpb.PartitionAssignment{{Replicas: []int32{1}}}
	retention := func(v string) *keelpb.IncrementalAlterConfigsRequest {
		return &keelpb.IncrementalAlterConfigsRequest{
			Resource: &keelpb.ConfigResource{Type: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER},
			Configs:  []*keelpb.AlterableConfig{{Name: fsm.RetentionMs, Op: keelpb.AlterConfigOp_ALTER_CONFIG_OP_SET, Value: v}},
		}
	}
	if _, err := c.Client().CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: "kept", Assignments: one}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client().IncrementalAlterConfigs(ctx, retention("1000")); err != nil {
		t.Fatal(err)
	}
	noop := c.appendNoOp(t, 10*time.Second)
	c.WaitForApplied(t, c.IDs(), noop.Index)
	_, epoch := c.WaitForActive(t, activeTimeout)

	// Node 1's raft links go down, both ways; its own port stays up.
	for _, other := range []int32{2, 3} {
		c.net.Link(1, other).Set(faultproxy.Drop)
		c.net.Link(other, 1).Set(faultproxy.Drop)
	}
	defer c.net.Heal()
	others, err := rpc.NewClient([]string{c.Addr(2), c.Addr(3)})
	if err != nil {
		t.Fatal(err)
	}
	defer others.Close()
	poll.UntilState(t, activeTimeout, "a new active controller among nodes 2 and 3", func() (bool, string) {
		views, errs := c.Views(ctx, []int32{2, 3})
		for _, v := range views {
			if v.GetActive() && v.GetControllerEpoch() > epoch {
				return true, ""
			}
		}
		return false, formatViews(views, errs)
	})
	if err := others.DeleteTopic(ctx, "kept"); err != nil && status.Code(err) != codes.NotFound {
		t.Fatalf("delete kept on the new active controller: %v", err)
	}
	if _, err := others.CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: "later", Assignments: one}); err != nil && status.Code(err) != codes.AlreadyExists {
		t.Fatalf("create later on the new active controller: %v", err)
	}
	if _, err := others.IncrementalAlterConfigs(ctx, retention("2000")); err != nil {
		t.Fatalf("set retention.ms on the new active controller: %v", err)
	}
	if v, err := c.Describe(ctx, 1); err != nil || !v.GetActive() {
		t.Fatalf("node 1 no longer says it is active (%v, %v) before it was asked: its %v lease passed (a very slow machine?); nothing to judge",
			v.GetActive(), err, deposedLease)
	}

	// Asked while it still believes it leads, each request once, to node 1
	// alone.
	cl, err := c.Client().Controller(c.Addr(1))
	if err != nil {
		t.Fatal(err)
	}
	asks := map[string]func(ctx context.Context) error{
		"create existing topic kept": func(ctx context.Context) error {
			_, err := cl.CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: "kept", Assignments: one})
			return err
		},
		"delete missing topic later": func(ctx context.Context) error {
			_, err := cl.DeleteTopic(ctx, &keelpb.DeleteTopicRequest{Name: "later"})
			return err
		},
		"set retention.ms to its value, 1000": func(ctx context.Context) error {
			_, err := cl.IncrementalAlterConfigs(ctx, retention("1000"))
			return err
		},
		"linearizable describe of kept": func(ctx context.Context) error {
			_, err := cl.DescribeTopic(ctx, &keelpb.DescribeTopicRequest{Name: "kept", Linearizable: true})
			return err
		},
	}
	answers := make(map[string]chan error, len(asks))
	for what, ask := range asks {
		ch := make(chan error, 1)
		answers[what] = ch
		go func() {
			ctx, cancel := context.WithTimeout(ctx, 3*deposedLease)
			defer cancel()
			ch <- ask(ctx)
		}()
	}
	// Healed, node 1 hears of the new term and steps down (else its lease
	// would end it).
	c.net.Heal()
	for what, ch := range answers {
		err := <-ch
		_, hinted := rpc.LeaderHintOf(err)
		switch code := status.Code(err); {
		case code == codes.Unavailable, code == codes.FailedPrecondition && hinted:
			t.Logf("%s on the deposed controller: %v", what, err)
		default:
			t.Errorf("%s on the deposed controller: %v (code %v); want Unavailable or the leader's hint, never an answer from its image", what, err, code)
		}
	}

	// The state the deposed controller's answers would have contradicted.
	d, err := c.Client().DescribeTopic(ctx, "kept", rpc.Linearizable())
	if status.Code(err) != codes.NotFound {
		t.Errorf("linearizable describe of kept: %v, %v; want NotFound", d, err)
	}
	if _, err := c.Client().DescribeTopic(ctx, "later", rpc.Linearizable()); err != nil {
		t.Errorf("linearizable describe of later: %v", err)
	}
	cfg, err := c.Client().DescribeConfigs(ctx, &keelpb.ConfigResource{Type: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER}, rpc.Linearizable())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range cfg.GetConfigs() {
		if e.GetName() == fsm.RetentionMs && e.GetValue() != "2000" {
			t.Errorf("cluster %s after the deposed controller's answers: %s, want 2000", fsm.RetentionMs, e.GetValue())
		}
	}
}
