package integration

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/keel-dev/keel/proto/keelpb"
)

// TestPartition_ReassignmentWaitsForEveryTargetReplica: partition 0 on
// brokers [1 2 3], broker 3 killed and fenced (ISR [1 2]), is moved to
// [2 3]. Before, that completed at once as replicas [2 3], ISR [2], led by
// 2: one in-sync replica where the target asks for two. Now it waits, as
// KRaft does: replicas [2 3 1], ISR [1 2], led by 1, 1 being removed, and
// listed, until broker 3 is back and in the ISR; then it completes as
// [2 3], led by 2, and broker 1 lets the partition go. Meanwhile a move to
// the current replicas is a successful no-op, and a new move replaces the
// ongoing one.
func TestPartition_ReassignmentWaitsForEveryTargetReplica(t *testing.T) {
	t.Parallel()
	c := startPartitionCluster(t, threeBrokers)
	const topic = "safe"
	c.createTopic(t, topic, "--assignment", "0:1,2,3;1:1,2,3")
	c.WaitForAgreement(t, topic, threeBrokers)

	// A move to the current replicas changes nothing and is no error.
	var r reassignJSON
	c.keelJSON(t, &r, "partition", "reassign", "--topic", topic, "--partition", "1", "--replicas", "1,2,3")
	if p1 := c.cliDescribe(t, topic).partition(t, 1); !slices.Equal(p1.Replicas, []int32{1, 2, 3}) || p1.PartitionEpoch != 0 || len(p1.AddingReplicas)+len(p1.RemovingReplicas) != 0 {
		t.Errorf("after a move of partition 1 to its own replicas: %s; want it unchanged at partition epoch 0", p1)
	}

	c.KillBroker(3)
	down := c.WaitForTopic(t, topic, "without broker 3 in the ISR", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return slices.Equal(p.ISR, []int32{1, 2}) })
	})
	p0 := down.partition(t, 0)

	c.keelJSON(t, &r, "partition", "reassign", "--topic", topic, "--partition", "0", "--replicas", "2,3")
	pending := func(p partitionJSON) bool {
		return slices.Equal(p.Replicas, []int32{2, 3, 1}) && slices.Equal(p.ISR, []int32{1, 2}) && p.Leader == 1 &&
			len(p.AddingReplicas) == 0 && slices.Equal(p.RemovingReplicas, []int32{1})
	}
	if !pending(r.partitionJSON) {
		t.Fatalf("keel partition reassign --replicas 2,3 with broker 3 down: %s; want replicas [2 3 1], ISR [1 2], leader 1, removing [1]: waiting for 3",
			r.partitionJSON)
	}
	// It stays so: a write after it has committed, and it is unchanged.
	c.appendNoOp(t, 10*time.Second)
	if p := c.cliDescribe(t, topic).partition(t, 0); !pending(p) || p.LeaderEpoch != p0.LeaderEpoch {
		t.Errorf("the move with broker 3 down, later: %s; want it still waiting, leader epoch %d", p, p0.LeaderEpoch)
	}
	var ongoing []reassignmentJSON
	c.keelJSON(t, &ongoing, "partition", "reassignments")
	if len(ongoing) != 1 || ongoing[0].Partition != 0 || !slices.Equal(ongoing[0].RemovingReplicas, []int32{1}) {
		t.Errorf("keel partition reassignments: %+v; want partition 0, removing [1]", ongoing)
	}

	// A new move replaces the ongoing one: [2 3] becomes [3 2].
	c.keelJSON(t, &r, "partition", "reassign", "--topic", topic, "--partition", "0", "--replicas", "3,2")
	if !slices.Equal(r.Replicas, []int32{3, 2, 1}) || !slices.Equal(r.RemovingReplicas, []int32{1}) || r.Leader != 1 || !slices.Equal(r.ISR, []int32{1, 2}) {
		t.Errorf("keel partition reassign --replicas 3,2 over the ongoing move: %s; want replicas [3 2 1], removing [1], still led by 1", r.partitionJSON)
	}

	c.RestartBroker(3)
	moved := c.WaitForTopic(t, topic, "moved to [3 2] once broker 3 is in the ISR", func(d topicJSON) bool {
		p := d.Partitions[0]
		return slices.Equal(p.Replicas, []int32{3, 2}) && len(p.AddingReplicas)+len(p.RemovingReplicas) == 0
	})
	if p := moved.partition(t, 0); !sameSet(p.ISR, []int32{2, 3}) || p.Leader != 3 {
		t.Errorf("moved: %s; want ISR {2,3}, led by 3, the first of [3 2]", p)
	}
	ongoing = nil
	c.keelJSON(t, &ongoing, "partition", "reassignments")
	if len(ongoing) != 0 {
		t.Errorf("keel partition reassignments after the move: %+v; want none", ongoing)
	}
	c.WaitForAgreement(t, topic, []int32{2, 3})
	c.WaitForInspect(t, []int32{1}, fmt.Sprintf("rid of %s/0 (or holding it stopped)", topic), func(v *keelpb.InspectResponse) bool {
		held, _ := replicasOf(v, topic)
		r, ok := held[0]
		return !ok || r.GetRole() == roleStopped
	})
}

// TestPartition_CancelWithOnlyAddedReplicasInSyncIsRefused: partition 0 on
// broker 1 moves to [2 3] while broker 3 is down; broker 2 catches up (ISR
// [1 2]); then broker 1 dies, leaving only broker 2, a replica being
// added, in the ISR. Cancelling would put the partition back on broker 1
// alone, out of sync: before, the cancel failed "Internal: batch refused by
// the state machine"; now it is refused as Kafka refuses it,
// FailedPrecondition INVALID_REPLICA_ASSIGNMENT, saying an unclean election
// would be needed, and nothing changes. The move itself completes once
// broker 3 is back.
func TestPartition_CancelWithOnlyAddedReplicasInSyncIsRefused(t *testing.T) {
	t.Parallel()
	c := startPartitionCluster(t, threeBrokers)
	const topic = "stuck"
	c.createTopic(t, topic, "--assignment", "0:1")
	c.WaitForAgreement(t, topic, threeBrokers)
	c.KillBroker(3)
	c.waitBrokerState(t, 3, stateFenced, time.Now().Add(testSessionTimeout+10*time.Second))

	var r reassignJSON
	c.keelJSON(t, &r, "partition", "reassign", "--topic", topic, "--partition", "0", "--replicas", "2,3")
	c.WaitForTopic(t, topic, "with broker 2 in the ISR, still moving", func(d topicJSON) bool {
		p := d.Partitions[0]
		return slices.Equal(p.ISR, []int32{1, 2}) && slices.Equal(p.AddingReplicas, []int32{2, 3})
	})
	c.KillBroker(1)
	only := c.WaitForTopic(t, topic, "led by broker 2, alone in the ISR", func(d topicJSON) bool {
		p := d.Partitions[0]
		return p.Leader == 2 && slices.Equal(p.ISR, []int32{2})
	})

	expectRefused(t, "", c.adminArgs("partition", "reassign", "--topic", topic, "--partition", "0", "--cancel"),
		"keel: FailedPrecondition: ", "unclean leader election", "unclean.leader.election.enable")
	if p, was := c.cliDescribe(t, topic).partition(t, 0), only.partition(t, 0); p.String() != was.String() {
		t.Errorf("after the refused cancel: %s; want it unchanged: %s", p, was)
	}

	c.RestartBroker(3)
	done := c.WaitForTopic(t, topic, "moved to [2 3]", func(d topicJSON) bool {
		p := d.Partitions[0]
		return slices.Equal(p.Replicas, []int32{2, 3}) && len(p.AddingReplicas)+len(p.RemovingReplicas) == 0
	})
	if p := done.partition(t, 0); p.Leader != 2 || !sameSet(p.ISR, []int32{2, 3}) {
		t.Errorf("moved: %s; want led by 2, ISR {2,3}", p)
	}
}

// TestTopic_PlacementAvoidsFencedBrokers: with broker 4 of four fenced, a
// topic of 12 partitions (RF 3) is placed on brokers 1-3 only, each
// partition led by its first replica with every replica in sync, leaders
// spread evenly. Before, the fenced broker took 9 of the 12, 3 of them as
// preferred leader. Then with brokers 2, 3 and 4 all fenced, a topic of RF
// 1 goes to broker 1 alone (before, it was refused when a fenced broker was
// chosen), and one of RF 3 is led by broker 1 with the fenced brokers as
// followers outside the ISR, never first.
func TestTopic_PlacementAvoidsFencedBrokers(t *testing.T) {
	t.Parallel()
	fourBrokers := []int32{1, 2, 3, 4}
	c := startPartitionCluster(t, fourBrokers)
	c.KillBroker(4)
	c.waitBrokerState(t, 4, stateFenced, time.Now().Add(testSessionTimeout+10*time.Second))

	spread := c.createTopic(t, "spread", "--partitions", "12", "--replication-factor", "3")
	checkPlacement(t, spread, threeBrokers, 12, 3)
	c.WaitForAgreement(t, "spread", threeBrokers)

	c.KillBroker(2)
	c.KillBroker(3)
	for _, id := range []int32{2, 3} {
		c.waitBrokerState(t, id, stateFenced, time.Now().Add(testSessionTimeout+10*time.Second))
	}
	single := c.createTopic(t, "single", "--partitions", "6", "--replication-factor", "1")
	checkPlacement(t, single, []int32{1}, 6, 1)
	wide := c.createTopic(t, "wide", "--partitions", "3", "--replication-factor", "3")
	for _, p := range wide.Partitions {
		if len(p.Replicas) != 3 || p.Replicas[0] != 1 || p.Leader != 1 || !slices.Equal(p.ISR, []int32{1}) {
			t.Errorf("topic wide with only broker 1 active: %s; want 3 replicas, broker 1 first, leading, alone in the ISR", p)
		}
	}
	c.WaitForAgreement(t, "single", []int32{1})
	c.WaitForAgreement(t, "wide", []int32{1})
	if t.Failed() {
		t.Logf("spread:\n%ssingle:\n%swide:\n%s", formatTopic(spread), formatTopic(single), formatTopic(wide))
	}
}
