package controller_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

func heartbeatOf(t *testing.T, nd *member, id int32, epoch int64, shutdown bool) *keelpb.BrokerHeartbeatResponse {
	t.Helper()
	resp, err := nd.Controller().BrokerHeartbeat(context.Background(), &keelpb.BrokerHeartbeatRequest{BrokerId: id, BrokerEpoch: epoch,
		MetadataOffset: nd.FSM().Image().Offset, WantShutdown: shutdown})
	if err != nil {
		t.Fatalf("heartbeat of broker %d: %v", id, err)
	}
	return resp
}

// A registration retried by the same incarnation (its answer lost) keeps
// the broker's epoch, its state and its leaderships, and writes nothing.
func TestBrokers_RetriedRegistrationKeepsEpochAndLeaderships(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	ctx := context.Background()
	e1 := registerActive(t, leader, 1, incA)
	registerActive(t, leader, 2, incB)
	if _, err := leader.Controller().CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: "orders",
		Assignments: []*keelpb.PartitionAssignment{{Replicas: []int32{1, 2}}}}); err != nil {
		t.Fatal(err)
	}
	before := leader.FSM().Image()
	resp, err := leader.Controller().RegisterBroker(ctx, registerReq(1, incA))
	if err != nil || resp.BrokerEpoch != e1 {
		t.Fatalf("retried registration = %+v, %v; want epoch %d", resp, err, e1)
	}
	img := leader.FSM().Image()
	topic, _ := img.Topic("orders")
	p, _ := img.Partition(topic.ID, 0)
	if b, _ := img.Broker(1); b.Fenced || b.Epoch != e1 || p.Leader != 1 || img.Offset != before.Offset {
		t.Fatalf("after the retry: broker 1 %+v, partition %+v, offset %d (was %d); want it active at epoch %d, leading, nothing written",
			b, p, img.Offset, before.Offset, e1)
	}
}

// A fenced broker's next incarnation registers at once when the old one no
// longer runs: after a controlled shutdown, and after a takeover started
// its session afresh. A fenced broker that is heard from (catching up)
// holds its id against a second process.
func TestBrokers_NewIncarnationOfAFencedBroker(t *testing.T) {
	clock := newClock()
	c := newCluster(t, 3, withSessionTimeout(testSession), withClock(clock.Now))
	leader := c.WaitForActive(5 * time.Second)
	ctx := context.Background()
	e1 := registerActive(t, leader, 1, incA)
	registerActive(t, leader, 2, incB)
	if _, err := leader.Controller().CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: "orders",
		Assignments: []*keelpb.PartitionAssignment{{Replicas: []int32{1, 2}}}}); err != nil {
		t.Fatal(err)
	}
	// Broker 1 leads: a controlled shutdown, released once broker 2 has
	// applied the move, and ending fenced. Its session has not expired.
	heartbeatOf(t, leader, 1, e1, true)
	heartbeatOf(t, leader, 2, brokerEpoch(t, leader, 2), false) // broker 2 has applied the move
	if resp := heartbeatOf(t, leader, 1, e1, true); !resp.ShouldShutDown || !resp.IsFenced {
		t.Fatalf("broker 1's controlled shutdown: %+v; want it fenced and released", resp)
	}
	if _, err := leader.Controller().RegisterBroker(ctx, registerReq(1, "00000000-0000-0000-0000-0000000000a2")); err != nil {
		t.Fatalf("broker 1 restarted right after its controlled shutdown: %v", err)
	}

	// Broker 3 registers and is catching up (fenced, heard from): a second
	// process with its id is refused.
	r3, err := leader.Controller().RegisterBroker(ctx, registerReq(3, "00000000-0000-0000-0000-0000000000c1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Controller().RegisterBroker(ctx, registerReq(3, "00000000-0000-0000-0000-0000000000c2")); !errors.Is(err, controller.ErrDuplicateRegistration) {
		t.Fatalf("a second process for broker 3 while the first catches up: err = %v, want %v", err, controller.ErrDuplicateRegistration)
	}
	// Broker 3 dies before it caught up, and the active controller fails
	// over: the new one starts every session afresh, but broker 3 is fenced
	// and not heard from, so its next incarnation registers at once.
	c.Kill(leader.ID())
	next := c.WaitForActive(5 * time.Second)
	resp, err := next.Controller().RegisterBroker(ctx, registerReq(3, "00000000-0000-0000-0000-0000000000c3"))
	if err != nil || resp.BrokerEpoch <= r3.BrokerEpoch {
		t.Fatalf("broker 3 restarted after a failover: %+v, %v", resp, err)
	}
}

func brokerEpoch(t *testing.T, nd *member, id int32) int64 {
	t.Helper()
	b, ok := nd.FSM().Image().Broker(id)
	if !ok {
		t.Fatalf("broker %d is not registered", id)
	}
	return b.Epoch
}

// Brokers whose sessions expire together are fenced one at a time, the one
// silent the longest first (Kafka's BrokerHeartbeatManager): an ISR whose
// last two members die together keeps the one heard from last, which a
// single decision fencing both would not.
func TestFencing_ExpiredBrokersOneAtATimeOldestFirst(t *testing.T) {
	clock := newClock()
	c := newCluster(t, 3, withSessionTimeout(testSession), withClock(clock.Now))
	leader := c.WaitForActive(5 * time.Second)
	ctx := context.Background()
	epochs := map[int32]int64{1: registerActive(t, leader, 1, incA), 2: registerActive(t, leader, 2, incB),
		3: registerActive(t, leader, 3, "00000000-0000-0000-0000-00000000000c")}
	id, err := leader.Controller().CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: "orders",
		Assignments: []*keelpb.PartitionAssignment{{Replicas: []int32{1, 2, 3}}}})
	if err != nil {
		t.Fatal(err)
	}
	// Broker 1, the leader, drops broker 3 from the ISR: ISR [1 2].
	p, _ := leader.FSM().Image().Partition(id, 0)
	if _, err := leader.Controller().AlterPartition(ctx, &keelpb.AlterPartitionRequest{BrokerId: 1, BrokerEpoch: epochs[1], TopicId: id.String(),
		LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch,
		NewIsrWithEpochs: []*keelpb.BrokerState{{BrokerId: 1, BrokerEpoch: epochs[1]}, {BrokerId: 2, BrokerEpoch: epochs[2]}}}); err != nil {
		t.Fatal(err)
	}
	// Broker 1 is last heard at T, broker 2 just after; broker 3 lives on.
	clock.Advance(time.Millisecond)
	heartbeatOf(t, leader, 2, epochs[2], false)
	clock.Advance(testSession / 2)
	heartbeatOf(t, leader, 3, epochs[3], false)
	clock.Advance(testSession/2 + 2*time.Millisecond)
	poll.Until(t, 5*time.Second, "brokers 1 and 2 fenced", func() bool { return brokerFenced(leader, 1) && brokerFenced(leader, 2) })
	img := leader.FSM().Image()
	if p, _ := img.Partition(id, 0); !slices.Equal(p.ISR, []int32{2}) || p.Leader != fsm.NoLeader {
		t.Fatalf("after brokers 1 and 2 were fenced: %+v; want ISR [2] (heard from last), no leader", p)
	}
	if brokerFenced(leader, 3) {
		t.Fatal("broker 3, which heartbeated, was fenced")
	}
}

// Unregistering is refused while the broker runs, and accepted once it is
// fenced (here at the end of a controlled shutdown, at once since it leads
// nothing), for whichever incarnation is registered (epoch 0).
func TestUnregister_RefusedWhileActive(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	ctx := context.Background()
	e1 := registerActive(t, leader, 1, incA)
	if _, err := leader.Controller().UnregisterBroker(ctx, &keelpb.UnregisterBrokerRequest{BrokerId: 1}); !errors.Is(err, controller.ErrBrokerNotFenced) {
		t.Fatalf("unregistering an active broker: err = %v, want %v", err, controller.ErrBrokerNotFenced)
	}
	if resp := heartbeatOf(t, leader, 1, e1, true); !resp.ShouldShutDown || !resp.IsFenced {
		t.Fatalf("a broker leading nothing asks to shut down: %+v; want fenced at once", resp)
	}
	epoch, err := leader.Controller().UnregisterBroker(ctx, &keelpb.UnregisterBrokerRequest{BrokerId: 1})
	if err != nil || epoch != e1 {
		t.Fatalf("unregistering the fenced broker: epoch %d, %v; want %d", epoch, err, e1)
	}
	if _, ok := leader.FSM().Image().Broker(1); ok {
		t.Fatal("broker 1 still registered")
	}
}
