package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

// A broker in controlled shutdown may go only once it leads nothing and
// every other active broker has applied the moves (KRaft's rule), and a
// broker that dies has its leaderships moved when its session ends.
func TestControlledShutdown_WaitsForEveryActiveBroker(t *testing.T) {
	clock := newClock()
	c := newCluster(t, 3, withSessionTimeout(testSession), withClock(clock.Now))
	leader := c.WaitForActive(5 * time.Second)
	ctx := context.Background()
	epochs := map[int32]int64{}
	for id := int32(1); id <= 3; id++ {
		epochs[id] = registerActive(t, leader, id, []string{incA, incB, "00000000-0000-0000-0000-00000000000c"}[id-1])
	}
	// Broker 2 is the preferred leader of partitions 0 and 2.
	_, err := leader.Controller().CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: "orders", Assignments: []*keelpb.PartitionAssignment{
		{Replicas: []int32{2, 1, 3}}, {Replicas: []int32{1, 2, 3}}, {Replicas: []int32{2, 3, 1}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	offset := leader.FSM().Image().Offset
	hb := func(id int32, shutdown bool) *keelpb.BrokerHeartbeatResponse {
		t.Helper()
		resp, err := leader.Controller().BrokerHeartbeat(ctx, &keelpb.BrokerHeartbeatRequest{BrokerId: id, BrokerEpoch: epochs[id], MetadataOffset: offset, WantShutdown: shutdown})
		if err != nil {
			t.Fatalf("heartbeat %d: %v", id, err)
		}
		return resp
	}
	if hb(2, true).ShouldShutDown {
		t.Fatal("broker 2 may shut down before anyone applied its moves")
	}
	img := leader.FSM().Image()
	if b, _ := img.Broker(2); b.State() != fsm.BrokerShuttingDown {
		t.Fatalf("broker 2 is %s", b.State())
	}
	topic, _ := img.Topic("orders")
	for _, p := range img.Partitions(topic.ID) {
		if p.Leader == 2 {
			t.Fatalf("broker 2 still leads partition %d", p.Partition)
		}
		if p.InISR(2) && len(p.Replicas) > 1 {
			t.Fatalf("broker 2 still in the ISR of partition %d: %v", p.Partition, p.ISR)
		}
	}
	if p, _ := img.Partition(topic.ID, 0); p.Leader != 1 {
		t.Fatalf("partition 0 leader = %d, want 1 (next ISR replica in assignment order)", p.Leader)
	}
	// Brokers 1 and 3 catch up, one at a time.
	offset = img.Offset
	hb(1, false)
	if hb(2, true).ShouldShutDown {
		t.Fatal("broker 2 may shut down before broker 3 applied its moves")
	}
	hb(3, false)
	if resp := hb(2, true); !resp.ShouldShutDown || !resp.IsFenced {
		t.Fatalf("broker 2's heartbeat once everyone applied its moves: %+v; want fenced, may shut down", resp)
	}
	// As in KRaft, the end of a controlled shutdown is a fencing: broker 2
	// stays registered, at its epoch, in every replica set.
	if b, ok := leader.FSM().Image().Broker(2); !ok || !b.Fenced || b.ShuttingDown || b.Epoch != epochs[2] {
		t.Fatalf("broker 2 after its controlled shutdown: %+v (registered %v); want registered at epoch %d, fenced", b, ok, epochs[2])
	}

	// Broker 1, now leading partitions 0 and 1, dies: its session ends and
	// leadership moves to broker 3, the only eligible ISR member left.
	clock.Advance(testSession / 2)
	hb(3, false)
	clock.Advance(testSession/2 + time.Millisecond)
	poll.Until(t, 5*time.Second, "partitions 0 and 1 led by broker 3", func() bool {
		img := leader.FSM().Image()
		p0, _ := img.Partition(topic.ID, 0)
		p1, _ := img.Partition(topic.ID, 1)
		return p0.Leader == 3 && p1.Leader == 3
	})
}
