package integration

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest/keelproc"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// checkPlacement fails the test unless every partition of a topic created
// with all of brokers active has rf distinct replicas among brokers, is led
// by its first replica, and has every replica in its ISR; and unless the
// leaders are spread evenly (no broker leads two more than another).
func checkPlacement(t *testing.T, d topicJSON, brokers []int32, partitions, rf int) {
	t.Helper()
	if len(d.Partitions) != partitions {
		t.Fatalf("topic %s has %d partitions, want %d:\n%s", d.Name, len(d.Partitions), partitions, formatTopic(d))
	}
	leads := map[int32]int{}
	for i, p := range d.Partitions {
		distinct := slices.Compact(slices.Sorted(slices.Values(p.Replicas)))
		inBrokers := !slices.ContainsFunc(p.Replicas, func(id int32) bool { return !slices.Contains(brokers, id) })
		if p.Partition != int32(i) || len(p.Replicas) != rf || len(distinct) != rf || !inBrokers ||
			p.Leader != p.Replicas[0] || !slices.Equal(p.ISR, p.Replicas) || len(p.AddingReplicas)+len(p.RemovingReplicas) != 0 {
			t.Errorf("topic %s, %s; want partition %d with %d distinct replicas of brokers %v, led by the first, all in the ISR",
				d.Name, p, i, rf, brokers)
		}
		leads[p.Leader]++
	}
	lo, hi := partitions, 0
	for _, id := range brokers {
		lo, hi = min(lo, leads[id]), max(hi, leads[id])
	}
	if hi-lo > 1 {
		t.Errorf("topic %s: partitions led per broker %v; want them spread evenly over %v", d.Name, leads, brokers)
	}
}

// TestPartition_KilledLeaderReplacedFromISR: RF 3 over three brokers. Every
// broker's own view agrees with the controllers' (leader where it leads,
// follower elsewhere, same leader, leader epoch and ISR), through the gRPC
// service and `keel broker inspect`. kill -9 of the broker leading the most
// partitions: once its session runs out (crash detection off, so that the
// session's timing is what is checked), each partition it led is led by
// the first replica of its ISR still alive (KRaft's rule), at the next
// leader epoch; it leaves every ISR; the other partitions keep their leader
// and leader epoch; and the survivors agree again.
func TestPartition_KilledLeaderReplacedFromISR(t *testing.T) {
	t.Parallel()
	c := startPartitionCluster(t, threeBrokers, withCrashGrace(0))
	const topic = "orders"
	created := c.createTopic(t, topic, "--partitions", "6", "--replication-factor", "3")
	checkPlacement(t, created, threeBrokers, 6, 3)

	before, _ := c.WaitForAgreement(t, topic, threeBrokers)
	for _, id := range threeBrokers {
		held := map[int32]replicaJSON{}
		for _, r := range c.cliReplicas(t, id) {
			if r.Topic == topic {
				held[r.Partition] = r
			}
		}
		for _, p := range before.Partitions {
			r, role := held[p.Partition], roleFollower
			if p.Leader == id {
				role = roleLeader
			}
			if r.Role != role || r.Leader != p.Leader || r.LeaderEpoch != p.LeaderEpoch || !slices.Equal(r.ISR, p.ISR) {
				t.Errorf("keel broker inspect (broker %d): %s/%d = %+v; want role %s as described: %s", id, topic, p.Partition, r, role, p)
			}
		}
	}

	victim := threeBrokers[0]
	for _, id := range threeBrokers {
		if len(before.ledBy(id)) > len(before.ledBy(victim)) {
			victim = id
		}
	}
	led := before.ledBy(victim)
	survivors := otherThan(threeBrokers, victim)
	t.Logf("killing broker %d, which leads partitions %v", victim, led)

	c.KillBroker(victim)
	killed := time.Now()
	after := c.WaitForTopic(t, topic, fmt.Sprintf("led by live brokers only, with broker %d in no ISR", victim), func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool {
			return p.Leader != victim && p.Leader != noLeader && !slices.Contains(p.ISR, victim)
		})
	})
	took := time.Since(killed)
	t.Logf("partitions moved off broker %d %s after kill -9 (session timeout %s)", victim, took.Round(time.Millisecond), testSessionTimeout)
	if earliest := testSessionTimeout - 4*testHeartbeat; took < earliest {
		t.Errorf("partitions moved %s after the kill; want no sooner than the session timeout allows (%s)", took, earliest)
	}
	for _, p := range after.Partitions {
		pre := before.partition(t, p.Partition)
		if slices.Contains(led, p.Partition) {
			want := firstLiveISRMember(pre.Replicas, pre.ISR, victim)
			if p.Leader != want || !slices.Contains(pre.ISR, p.Leader) || p.LeaderEpoch != pre.LeaderEpoch+1 {
				t.Errorf("after broker %d's fence, %s; want leader %d (the first live member of the ISR %v it had) at leader epoch %d",
					victim, p, want, pre.ISR, pre.LeaderEpoch+1)
			}
		} else if p.Leader != pre.Leader || p.LeaderEpoch != pre.LeaderEpoch {
			t.Errorf("after broker %d's fence, %s; want its leader %d kept, at leader epoch %d (only the ISR changed)",
				victim, p, pre.Leader, pre.LeaderEpoch)
		}
		if !slices.Equal(p.ISR, without(pre.ISR, victim)) || !slices.Equal(p.Replicas, pre.Replicas) || p.PartitionEpoch <= pre.PartitionEpoch {
			t.Errorf("after broker %d's fence, %s; want replicas %v, ISR %v, partition epoch above %d",
				victim, p, pre.Replicas, without(pre.ISR, victim), pre.PartitionEpoch)
		}
	}

	final, _ := c.WaitForAgreement(t, topic, survivors)
	for _, p := range final.Partitions {
		if a := after.partition(t, p.Partition); p.Leader != a.Leader || p.LeaderEpoch != a.LeaderEpoch {
			t.Errorf("leadership moved again after the fence: %s, was %s", p, a)
		}
	}
}

// TestPartition_AllReplicasDownThenLastISRMemberReturns: a topic on brokers
// 2 and 3 only. Broker 3 dies, then broker 2: the partitions have no leader
// (-1) and their ISR keeps its last member, 2. Broker 1, alive all along,
// holds none of them. When broker 2 returns, it leads them again: killed
// with kill -9, it left the ISR at its registration (KIP-966's unclean
// shutdown), but as their last known leader, with no ISR or eligible
// replica left, it leads by itself (RECOVERING until it confirms).
func TestPartition_AllReplicasDownThenLastISRMemberReturns(t *testing.T) {
	t.Parallel()
	c := startPartitionCluster(t, threeBrokers)
	const topic = "pinned"
	c.createTopic(t, topic, "--assignment", "0:2,3;1:3,2")
	created, _ := c.WaitForAgreement(t, topic, threeBrokers)

	c.KillBroker(3)
	alone := c.WaitForTopic(t, topic, "led by broker 2 alone, ISR [2]", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return p.Leader == 2 && slices.Equal(p.ISR, []int32{2}) })
	})

	c.KillBroker(2)
	down := c.WaitForTopic(t, topic, "without a leader, ISR [2] (its last member)", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return p.Leader == noLeader })
	})
	for _, p := range down.Partitions {
		a, cr := alone.partition(t, p.Partition), created.partition(t, p.Partition)
		if !slices.Equal(p.ISR, []int32{2}) || !slices.Equal(p.Replicas, cr.Replicas) || p.LeaderEpoch != a.LeaderEpoch+1 {
			t.Errorf("with brokers 2 and 3 down, %s; want no leader at leader epoch %d, the ISR kept at [2] (never empty), replicas %v",
				p, a.LeaderEpoch+1, cr.Replicas)
		}
	}
	for _, p := range c.cliDescribe(t, topic).Partitions {
		if p.Leader != noLeader || !slices.Equal(p.ISR, []int32{2}) {
			t.Errorf("keel topic describe: %s; want leader -1, ISR [2]", p)
		}
	}
	c.WaitForAgreement(t, topic, []int32{1})

	c.RestartBroker(2)
	back := c.WaitForTopic(t, topic, "led by broker 2 again", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return p.Leader == 2 })
	})
	for _, p := range back.Partitions {
		if d := down.partition(t, p.Partition); !slices.Equal(p.ISR, []int32{2}) || p.LeaderEpoch != d.LeaderEpoch+1 {
			t.Errorf("broker 2 back: %s; want leader 2 at leader epoch %d, ISR [2]", p, d.LeaderEpoch+1)
		}
	}
	c.WaitForAgreement(t, topic, []int32{1, 2})
}

// TestPartition_UncleanElectionOnDemand: two topics on brokers 2 and 3,
// one with unclean.leader.election.enable=true. Broker 3 dies (the ISRs
// shrink to [2]), then broker 2 (no leader). Broker 3 returns: a live
// replica outside the ISR. The topic that allows unclean election gets it
// as leader when it is unfenced; the other stays without a leader until
// `keel partition elect --type unclean` makes broker 3 its leader, and the
// whole ISR.
func TestPartition_UncleanElectionOnDemand(t *testing.T) {
	t.Parallel()
	c := startPartitionCluster(t, threeBrokers)
	const clean, auto = "clean", "auto"
	c.createTopic(t, clean, "--assignment", "0:2,3")
	if v := c.createTopic(t, auto, "--assignment", "0:2,3", "--config", "unclean.leader.election.enable=true"); v.Configs["unclean.leader.election.enable"] != "true" {
		t.Errorf("keel topic create %s: configs %v; want unclean.leader.election.enable=true", auto, v.Configs)
	}
	topics := []string{clean, auto}
	for _, topic := range topics {
		c.WaitForAgreement(t, topic, threeBrokers)
	}

	c.KillBroker(3)
	for _, topic := range topics {
		c.WaitForTopic(t, topic, "led by broker 2, ISR [2]", func(d topicJSON) bool {
			p := d.Partitions[0]
			return p.Leader == 2 && slices.Equal(p.ISR, []int32{2})
		})
	}
	c.KillBroker(2)
	down := map[string]topicJSON{}
	for _, topic := range topics {
		down[topic] = c.WaitForTopic(t, topic, "without a leader, ISR [2]", func(d topicJSON) bool {
			p := d.Partitions[0]
			return p.Leader == noLeader && slices.Equal(p.ISR, []int32{2})
		})
	}

	c.RestartBroker(3)
	c.WaitForBrokers(t, map[int32]string{1: stateActive, 2: stateFenced, 3: stateActive})
	c.WaitForTopic(t, auto, "led by broker 3, ISR [3] (unclean election allowed by the topic)", func(d topicJSON) bool {
		p := d.Partitions[0]
		return p.Leader == 3 && slices.Equal(p.ISR, []int32{3})
	})
	// Broker 3's unfencing decided both topics; the one that does not allow
	// unclean election kept no leader.
	still := c.cliDescribe(t, clean).partition(t, 0)
	if pre := down[clean].partition(t, 0); still.Leader != noLeader || !slices.Equal(still.ISR, []int32{2}) {
		t.Fatalf("topic %s with broker 3 back (not in the ISR): %s; want still no leader and ISR [2] (was %s): no unclean election unless asked",
			clean, still, pre)
	}

	// Broker 3 holds it as a follower with no leader to fetch from.
	c.WaitForAgreement(t, clean, []int32{1, 3})

	rows := c.cliElect(t, "--type", "unclean", "--topic", clean, "--partition", "0")
	if want := []electionJSON{{Topic: clean, Partition: 0, Leader: 3}}; !slices.Equal(rows, want) {
		t.Errorf("keel partition elect --type unclean: %+v; want %+v", rows, want)
	}
	p := c.cliDescribe(t, clean).partition(t, 0)
	if p.Leader != 3 || !slices.Equal(p.ISR, []int32{3}) || p.LeaderEpoch != still.LeaderEpoch+1 {
		t.Errorf("after the unclean election: %s; want leader 3, ISR [3], leader epoch %d", p, still.LeaderEpoch+1)
	}
	// Now that it has a live leader there is nothing to elect.
	rows = c.cliElect(t, "--type", "unclean", "--topic", clean, "--partition", "0")
	if len(rows) != 1 || rows[0].Leader != 3 || rows[0].Error == "" {
		t.Errorf("a second unclean election: %+v; want one row, leader 3, with the reason nothing was elected", rows)
	}
	for _, topic := range topics {
		c.WaitForAgreement(t, topic, []int32{1, 3})
	}
}

// TestBroker_ControlledShutdownKeepsPartitionsLed: SIGTERM to a broker that
// leads partitions of an RF 3 topic. The controller moves its leaderships
// to other ISR members while it waits; it exits 0 once it leads nothing,
// and by then every other broker has applied the moves. A watch of the
// topic throughout sees no partition without a leader.
func TestBroker_ControlledShutdownKeepsPartitionsLed(t *testing.T) {
	t.Parallel()
	c := startPartitionCluster(t, threeBrokers)
	const topic = "orders"
	c.createTopic(t, topic, "--partitions", "6", "--replication-factor", "3")
	before, _ := c.WaitForAgreement(t, topic, threeBrokers)
	const id = 1
	survivors := otherThan(threeBrokers, id)
	led := before.ledBy(id)
	if len(led) == 0 {
		t.Fatalf("broker %d leads nothing to move:\n%s", id, formatTopic(before))
	}

	w := c.watchLeaders(t, topic)
	poll.Until(t, 10*time.Second, fmt.Sprintf("the watch of topic %s to read it 3 times", topic), func() bool { return w.count() >= 3 })
	readsBefore := w.count()
	sigterm := time.Now()
	c.StopBroker(id) // fails the test unless it exits 0
	took := time.Since(sigterm)
	readsDuring := w.count() - readsBefore // before anything else reads on
	// The brokers have applied the moves before it exits: no waiting here.
	d, err := c.DescribeTopicE(context.Background(), topic)
	if err != nil {
		t.Fatalf("describe %s: %v", topic, err)
	}
	views := map[int32]*keelpb.InspectResponse{}
	for _, s := range survivors {
		views[s] = c.Inspect(t, s)
	}
	reads, leaderless, samples := w.stopWatch()
	t.Logf("broker %d exited %s after SIGTERM; the watch read the topic %d times", id, took.Round(time.Millisecond), reads)

	out := c.broker(id).Output()
	if !strings.Contains(out, "controlled shutdown complete") || strings.Contains(out, "did not shut down cleanly") {
		t.Errorf("broker %d exited without completing its controlled shutdown; its output ends:\n%s", id, keelproc.LastLines(out, 10))
	}
	if leaderless > 0 {
		t.Errorf("during broker %d's controlled shutdown, %d of %d descriptions had a partition without a leader, though each had two more live ISR members:\n  %s",
			id, leaderless, reads, strings.Join(samples, "\n  "))
	}
	// A controlled shutdown takes tens of milliseconds: the watch must
	// have read the topic at least once while it ran.
	if readsDuring <= 0 {
		t.Errorf("the watch read the topic %d times, none during the shutdown", reads)
	}
	for _, p := range d.Partitions {
		pre := before.partition(t, p.Partition)
		switch {
		case p.Leader == id || slices.Contains(p.ISR, id):
			t.Errorf("broker %d exited, but %s: it still leads it or is in its ISR", id, p)
		case slices.Contains(led, p.Partition):
			if want := firstLiveISRMember(pre.Replicas, pre.ISR, id); p.Leader != want || p.LeaderEpoch != pre.LeaderEpoch+1 {
				t.Errorf("moved off broker %d: %s; want leader %d (the first other member of its ISR %v) at leader epoch %d",
					id, p, want, pre.ISR, pre.LeaderEpoch+1)
			}
		case p.Leader != pre.Leader || p.LeaderEpoch != pre.LeaderEpoch:
			t.Errorf("not led by broker %d, yet its leader changed: %s, was %s", id, p, pre)
		}
	}
	for _, s := range survivors {
		if diff := disagreement(s, views[s], d); diff != "" {
			t.Errorf("when broker %d had exited, broker %d had not applied the leadership moves: it %s", id, s, diff)
		}
	}
	c.WaitForAgreement(t, topic, survivors)
}

// restartAndRejoin kills broker victim, waits until its partitions have
// moved off it, restarts it and waits until it is back in every ISR of its
// partitions, which only its partitions' leaders can do (through
// AlterPartition, once it fetches from them). It returns the topic then.
func restartAndRejoin(t *testing.T, c *Cluster, topic string, victim int32) topicJSON {
	t.Helper()
	before := c.WaitForBrokers(t, allActive(c.BrokerIDs()...))
	c.KillBroker(victim)
	c.WaitForTopic(t, topic, fmt.Sprintf("moved off broker %d", victim), func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool {
			return p.Leader != victim && p.Leader != noLeader && !slices.Contains(p.ISR, victim)
		})
	})
	c.RestartBroker(victim)
	c.WaitForReregistered(t, allActive(c.BrokerIDs()...), victim, before[victim].Epoch)
	return c.WaitForTopic(t, topic, fmt.Sprintf("with broker %d back in every ISR (added by the leaders it fetches from)", victim), func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool {
			return !slices.Contains(p.Replicas, victim) || slices.Contains(p.ISR, victim)
		})
	})
}

// TestPartition_PreferredElectionRestoresLeaders: with automatic rebalance
// off, a broker killed and restarted gets back into its partitions' ISRs
// but not their leadership; `keel partition elect --type preferred --all`
// makes every partition's first replica its leader again: the leaders of
// before the kill.
func TestPartition_PreferredElectionRestoresLeaders(t *testing.T) {
	t.Parallel()
	c := startPartitionCluster(t, threeBrokers)
	const topic = "orders"
	c.createTopic(t, topic, "--partitions", "6", "--replication-factor", "3")
	original, _ := c.WaitForAgreement(t, topic, threeBrokers)
	const victim = 2
	lost := original.ledBy(victim)

	back := restartAndRejoin(t, c, topic, victim)
	if got := back.ledBy(victim); len(got) != 0 {
		t.Errorf("broker %d leads %v again without an election, with automatic rebalance off:\n%s", victim, got, formatTopic(back))
	}

	rows := c.cliElect(t, "--type", "preferred", "--all")
	if len(rows) != len(original.Partitions) {
		t.Errorf("keel partition elect --type preferred --all: %d rows, want %d: %+v", len(rows), len(original.Partitions), rows)
	}
	for _, r := range rows {
		p := original.partition(t, r.Partition)
		if r.Topic != topic || r.Leader != p.Replicas[0] || (slices.Contains(lost, r.Partition) && r.Error != "") {
			t.Errorf("keel partition elect --type preferred --all: %+v; want leader %d (the first replica)%s", r, p.Replicas[0],
				map[bool]string{true: ", elected without error", false: ""}[slices.Contains(lost, r.Partition)])
		}
	}
	after := c.cliDescribe(t, topic)
	for _, p := range after.Partitions {
		o, b := original.partition(t, p.Partition), back.partition(t, p.Partition)
		if p.Leader != o.Leader || p.Leader != p.Replicas[0] || !sameSet(p.ISR, o.ISR) {
			t.Errorf("after the preferred election: %s; want leader %d as before the kill (%s), ISR %v", p, o.Leader, o, o.ISR)
		}
		if slices.Contains(lost, p.Partition) && p.LeaderEpoch != b.LeaderEpoch+1 {
			t.Errorf("after the preferred election: %s; want leader epoch %d", p, b.LeaderEpoch+1)
		}
	}
	c.WaitForAgreement(t, topic, threeBrokers)
}

// TestPartition_AutoRebalanceRestoresLeaders: with the leader imbalance
// checked every second, a broker killed and restarted gets its preferred
// leaderships back by itself once it is in the ISRs again.
func TestPartition_AutoRebalanceRestoresLeaders(t *testing.T) {
	t.Parallel()
	c := startPartitionCluster(t, threeBrokers, withLeaderImbalanceCheck(time.Second))
	const topic = "orders"
	c.createTopic(t, topic, "--partitions", "6", "--replication-factor", "3")
	original, _ := c.WaitForAgreement(t, topic, threeBrokers)
	const victim = 3
	restartAndRejoin(t, c, topic, victim)
	c.WaitForTopic(t, topic, "led by the same brokers as before the kill", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool {
			return p.Leader == p.Replicas[0] && p.Leader == original.partition(t, p.Partition).Leader
		})
	})
	c.WaitForAgreement(t, topic, threeBrokers)
}

// TestPartition_ReassignmentMovesReplicas: partition 0 of a topic moves
// from brokers {1,2,3} to {2,3,4}. Accepted, it is being moved: 4 added, 1
// removed. It completes once broker 4 has joined the ISR: replicas [2,3,4],
// led by 2 (the first of them in the ISR), no longer by 1; no reassignment
// is listed; broker 1 no longer holds the partition and broker 4 follows
// it. Partition 1 is untouched. Then a move of partition 1 to a broker that
// is down stays listed in `keel partition reassignments` until cancelled,
// which returns the partition to its replicas.
func TestPartition_ReassignmentMovesReplicas(t *testing.T) {
	t.Parallel()
	fourBrokers := []int32{1, 2, 3, 4}
	c := startPartitionCluster(t, fourBrokers)
	const topic = "moving"
	c.createTopic(t, topic, "--assignment", "0:1,2,3;1:2,3,4")
	before, _ := c.WaitForAgreement(t, topic, fourBrokers)
	p0 := before.partition(t, 0)
	if p0.Leader != 1 || !slices.Equal(p0.ISR, []int32{1, 2, 3}) {
		t.Fatalf("before the move: %s; want leader 1, ISR [1 2 3]", p0)
	}

	var r reassignJSON
	c.keelJSON(t, &r, "partition", "reassign", "--topic", topic, "--partition", "0", "--replicas", "2,3,4")
	moving := sameSet(r.Replicas, fourBrokers) && slices.Equal(r.Replicas[:3], []int32{2, 3, 4}) &&
		slices.Equal(r.AddingReplicas, []int32{4}) && slices.Equal(r.RemovingReplicas, []int32{1}) &&
		r.Leader == 1 && slices.Equal(r.ISR, p0.ISR)
	// Broker 4 may (rarely) have fetched and joined the ISR, completing the
	// move, before the answer was read from the image: then it must be done.
	done := slices.Equal(r.Replicas, []int32{2, 3, 4}) && len(r.AddingReplicas)+len(r.RemovingReplicas) == 0 && slices.Contains(r.ISR, 4)
	if r.Topic != topic || r.Partition != 0 || !(moving || done) {
		t.Errorf("keel partition reassign: %s %s; want it moving: replicas [2 3 4 1] (target first), adding [4], removing [1], still led by 1 with ISR %v",
			r.Topic, r.partitionJSON, p0.ISR)
	} else if done {
		t.Logf("the move completed before its answer was read: %s", r.partitionJSON)
	}

	moved := c.WaitForTopic(t, topic, "moved to replicas [2 3 4] (broker 4 in the ISR)", func(d topicJSON) bool {
		p := d.Partitions[0]
		return slices.Equal(p.Replicas, []int32{2, 3, 4}) && len(p.AddingReplicas) == 0 && len(p.RemovingReplicas) == 0
	})
	p := moved.partition(t, 0)
	if p.Leader != 2 || !sameSet(p.ISR, []int32{2, 3, 4}) || p.LeaderEpoch <= p0.LeaderEpoch {
		t.Errorf("moved: %s; want leader 2 (not 1: the first of [2 3 4] in the ISR), ISR {2,3,4}, leader epoch above %d", p, p0.LeaderEpoch)
	}
	if p1, was := moved.partition(t, 1), before.partition(t, 1); p1.Leader != was.Leader || !slices.Equal(p1.Replicas, was.Replicas) || p1.LeaderEpoch != was.LeaderEpoch {
		t.Errorf("partition 1 changed with partition 0's move: %s, was %s", p1, was)
	}
	var ongoing []reassignmentJSON
	c.keelJSON(t, &ongoing, "partition", "reassignments")
	if len(ongoing) != 0 {
		t.Errorf("keel partition reassignments after the move: %+v; want none", ongoing)
	}

	c.WaitForAgreement(t, topic, []int32{2, 3, 4})
	c.WaitForInspect(t, []int32{1}, fmt.Sprintf("rid of %s/0 (or holding it stopped)", topic), func(v *keelpb.InspectResponse) bool {
		held, _ := replicasOf(v, topic)
		r, ok := held[0]
		return !ok || r.GetRole() == roleStopped
	})
	for _, r := range c.cliReplicas(t, 4) {
		if r.Topic == topic && r.Partition == 0 && (r.Role != roleFollower || r.Leader != 2) {
			t.Errorf("keel broker inspect (broker 4): %+v; want it following broker 2", r)
		}
	}

	// A move that cannot complete (the broker to add is down) stays listed
	// until cancelled, which returns the partition to its replicas.
	c.KillBroker(1)
	p1 := c.cliDescribe(t, topic).partition(t, 1)
	c.keelJSON(t, &r, "partition", "reassign", "--topic", topic, "--partition", "1", "--replicas", "1,2,3")
	if !slices.Equal(r.AddingReplicas, []int32{1}) || !slices.Equal(r.RemovingReplicas, []int32{4}) || r.Leader != p1.Leader {
		t.Errorf("keel partition reassign of partition 1 to [1 2 3]: %s; want adding [1], removing [4], leader %d kept", r.partitionJSON, p1.Leader)
	}
	ongoing = nil
	c.keelJSON(t, &ongoing, "partition", "reassignments")
	if want := []reassignmentJSON{{Topic: topic, Partition: 1, Replicas: r.Replicas, AddingReplicas: []int32{1}, RemovingReplicas: []int32{4}}}; len(ongoing) != 1 ||
		ongoing[0].Topic != topic || ongoing[0].Partition != 1 || !slices.Equal(ongoing[0].AddingReplicas, []int32{1}) || !slices.Equal(ongoing[0].RemovingReplicas, []int32{4}) {
		t.Errorf("keel partition reassignments with broker 1 down: %+v; want %+v", ongoing, want)
	}
	c.keelJSON(t, &r, "partition", "reassign", "--topic", topic, "--partition", "1", "--cancel")
	cancelled := c.cliDescribe(t, topic).partition(t, 1)
	if !slices.Equal(cancelled.Replicas, p1.Replicas) || len(cancelled.AddingReplicas)+len(cancelled.RemovingReplicas) != 0 ||
		cancelled.Leader != p1.Leader || !slices.Equal(cancelled.ISR, p1.ISR) {
		t.Errorf("after cancelling the move of partition 1: %s; want it as before: %s", cancelled, p1)
	}
	ongoing = nil
	c.keelJSON(t, &ongoing, "partition", "reassignments")
	if len(ongoing) != 0 {
		t.Errorf("keel partition reassignments after the cancel: %+v; want none", ongoing)
	}
	c.WaitForAgreement(t, topic, []int32{2, 3, 4})
}

// TestTopic_DeletedWhileBrokerDownIsDeletedThere: a topic deleted while one
// of its replicas' brokers is down (and recreated under the same name on
// the other brokers) is gone from that broker when it returns: it lists
// none of the old topic's partitions, nothing by that name. Meanwhile
// partitions are added to another topic, some on the fenced broker: it
// holds them when it returns and joins their ISRs.
func TestTopic_DeletedWhileBrokerDownIsDeletedThere(t *testing.T) {
	t.Parallel()
	c := startPartitionCluster(t, threeBrokers)
	const doomed, kept = "doomed", "kept"
	old := c.createTopic(t, doomed, "--partitions", "3", "--replication-factor", "3")
	c.createTopic(t, kept, "--partitions", "1", "--replication-factor", "3")
	c.WaitForAgreement(t, doomed, threeBrokers)
	c.WaitForAgreement(t, kept, threeBrokers)
	before := c.WaitForBrokers(t, allActive(threeBrokers...))
	const victim = 3

	c.KillBroker(victim)
	var del struct {
		Name    string `json:"name"`
		Deleted bool   `json:"deleted"`
	}
	c.keelJSON(t, &del, "topic", "delete", doomed)
	if del.Name != doomed || !del.Deleted {
		t.Errorf("keel topic delete %s: %+v; want it deleted", doomed, del)
	}
	if rows := c.cliTopicList(t); len(rows) != 1 || rows[0].Name != kept {
		t.Errorf("keel topic list after deleting %s: %+v; want %s only", doomed, rows, kept)
	}
	expectRefused(t, "", c.adminArgs("topic", "describe", doomed), "keel: NotFound: ", doomed)
	// The same name again, on the live brokers only: another topic.
	recreated := c.createTopic(t, doomed, "--assignment", "0:1,2")
	if recreated.ID == old.ID {
		t.Errorf("topic %s recreated with the deleted topic's id %s", doomed, old.ID)
	}
	c.WaitForAgreement(t, doomed, []int32{1, 2})
	// Partitions added meanwhile may be placed on the fenced broker, as a
	// follower outside the ISR.
	c.waitBrokerState(t, victim, stateFenced, time.Now().Add(testSessionTimeout+5*time.Second))
	var grown topicJSON
	c.keelJSON(t, &grown, "partition", "add-partitions", "--topic", kept, "--count", "4")
	if len(grown.Partitions) != 4 {
		t.Fatalf("keel partition add-partitions --topic %s --count 4:\n%s; want 4 partitions", kept, formatTopic(grown))
	}
	for _, p := range grown.Partitions[1:] {
		if len(p.Replicas) != 3 || p.Leader == victim || p.Leader == noLeader || slices.Contains(p.ISR, victim) {
			t.Errorf("added with broker %d fenced: %s; want 3 replicas, led by a live one, broker %d in no ISR", victim, p, victim)
		}
	}
	last := c.appendNoOp(t, 10*time.Second).Index

	c.RestartBroker(victim)
	c.WaitForReregistered(t, allActive(threeBrokers...), victim, before[victim].Epoch)
	c.WaitForInspect(t, []int32{victim}, fmt.Sprintf("active at metadata offset >= %d", last), func(v *keelpb.InspectResponse) bool {
		return v.State == stateActive && v.MetadataOffset >= last
	})
	if held, _ := replicasOf(c.Inspect(t, victim), doomed); len(held) > 0 {
		var s []string
		for _, r := range held {
			s = append(s, formatReplica(r))
		}
		t.Errorf("broker %d, back after %s was deleted (and recreated on brokers 1 and 2), lists: %s", victim, doomed, strings.Join(s, "; "))
	}
	c.WaitForAgreement(t, doomed, threeBrokers)
	// The partitions added while it was down are its too, and it rejoins
	// their ISRs.
	c.WaitForTopic(t, kept, fmt.Sprintf("with broker %d back in every ISR", victim), func(d topicJSON) bool {
		return len(d.Partitions) == 4 && d.every(func(p partitionJSON) bool { return sameSet(p.ISR, p.Replicas) })
	})
	c.WaitForAgreement(t, kept, threeBrokers)
	for _, r := range c.cliReplicas(t, victim) {
		if r.Topic == doomed {
			t.Errorf("keel broker inspect (broker %d) lists %+v", victim, r)
		}
	}
}

// TestTopic_RefusesBadInput: bad topic requests through the CLI are refused
// with one line naming the gRPC code and the field at fault, and create
// nothing; --validate-only answers as a create would, showing the
// placement (rack-aware: brokers 1 and 2 share a rack, so every partition of
// two replicas has broker 3), and writes nothing.
func TestTopic_RefusesBadInput(t *testing.T) {
	t.Parallel()
	c := startPartitionClusterWith(t, threeBrokers, map[int32]string{1: "a", 2: "a", 3: "b"}, nil)
	dup := c.createTopic(t, "dup", "--partitions", "2", "--replication-factor", "2")
	c.createTopic(t, "a.b", "--partitions", "1", "--replication-factor", "1")
	listed := c.cliTopicList(t)

	one := []string{"--partitions", "1", "--replication-factor", "1"}
	for _, tc := range []struct {
		what string
		args []string
		want []string
	}{
		{"a name with a slash", append([]string{"topic", "create", "bad/name"}, one...), []string{"keel: InvalidArgument: name: ", "bad/name"}},
		{"the name dot", append([]string{"topic", "create", "."}, one...), []string{"keel: InvalidArgument: name: "}},
		{"the name dot-dot", append([]string{"topic", "create", ".."}, one...), []string{"keel: InvalidArgument: name: "}},
		{"a 250-character name", append([]string{"topic", "create", strings.Repeat("x", 250)}, one...), []string{"keel: InvalidArgument: name: ", "249"}},
		{"a name colliding with a.b", append([]string{"topic", "create", "a_b"}, one...), []string{"keel: InvalidArgument: name: ", "a.b"}},
		{"a replication factor above the brokers", []string{"topic", "create", "rf4", "--partitions", "1", "--replication-factor", "4"},
			[]string{"keel: InvalidArgument: replication_factor: ", "4"}},
		{"an unregistered broker", []string{"topic", "create", "nine", "--assignment", "0:1,9"}, []string{"keel: InvalidArgument: assignments: ", "9"}},
		{"an unknown config", append([]string{"topic", "create", "cfg", "--config", "no.such.config=1"}, one...),
			[]string{"keel: InvalidArgument: configs: ", "no.such.config"}},
		{"a config Keel cannot honour yet", append([]string{"topic", "create", "cfg", "--config", "compression.type=zstd"}, one...),
			[]string{"compression.type: only the default \"producer\" is supported: the broker does not recompress"}},
		{"a new config out of range", append([]string{"topic", "create", "cfg", "--config", "segment.ms=0"}, one...),
			[]string{"segment.ms: 0 is outside [1,...]"}},
		{"altering a config to a value Keel cannot honour", []string{"topic", "alter", "dup", "--config", "remote.storage.enable=true"},
			[]string{"remote.storage.enable: only the default \"false\" is supported: tiered storage is not supported"}},
		{"an existing name", append([]string{"topic", "create", "dup"}, one...), []string{"keel: AlreadyExists: ", "dup"}},
		{"an existing name, validate only", append([]string{"topic", "create", "dup", "--validate-only"}, one...), []string{"keel: AlreadyExists: ", "dup"}},
		{"a replication factor above the brokers, validate only", []string{"topic", "create", "rf4", "--partitions", "1", "--replication-factor", "4", "--validate-only"},
			[]string{"keel: InvalidArgument: replication_factor: "}},
		{"deleting an unknown topic", []string{"topic", "delete", "nosuch"}, []string{`keel: NotFound: unknown topic or partition: topic "nosuch"`}},
		{"describing an unknown topic", []string{"topic", "describe", "nosuch"}, []string{`keel: NotFound: unknown topic or partition: topic "nosuch"`}},
		{"fewer partitions", []string{"partition", "add-partitions", "--topic", "dup", "--count", "1"}, []string{"keel: InvalidArgument: count: "}},
		{"reassigning to an unregistered broker", []string{"partition", "reassign", "--topic", "dup", "--partition", "0", "--replicas", "1,9"},
			[]string{"keel: InvalidArgument: replicas: ", "9"}},
		{"reassigning an unknown partition", []string{"partition", "reassign", "--topic", "dup", "--partition", "7", "--replicas", "1,2"},
			[]string{"keel: NotFound: "}},
		{"electing in an unknown topic", []string{"partition", "elect", "--type", "preferred", "--topic", "nosuch"}, []string{"keel: NotFound: ", "nosuch"}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			expectRefused(t, "", c.adminArgs(tc.args...), tc.want...)
		})
	}

	// Validate-only shows a placement and creates nothing.
	var preview topicJSON
	c.keelJSON(t, &preview, "topic", "create", "preview", "--partitions", "3", "--replication-factor", "2", "--validate-only")
	if preview.Name != "preview" {
		t.Errorf("keel topic create preview --validate-only: name %q", preview.Name)
	}
	checkPlacement(t, preview, threeBrokers, 3, 2)
	for _, p := range preview.Partitions {
		if !slices.Contains(p.Replicas, 3) {
			t.Errorf("keel topic create preview --validate-only: %s; want a replica in each rack (brokers 1 and 2 in rack a, 3 in rack b)", p)
		}
	}
	var explicit topicJSON
	c.keelJSON(t, &explicit, "topic", "create", "preview", "--assignment", "0:3,1", "--validate-only")
	if len(explicit.Partitions) != 1 || !slices.Equal(explicit.Partitions[0].Replicas, []int32{3, 1}) || explicit.Partitions[0].Leader != 3 {
		t.Errorf("keel topic create preview --assignment 0:3,1 --validate-only:\n%s; want one partition, replicas [3 1], leader 3", formatTopic(explicit))
	}
	stdout, stderr, code := runKeel(t, 30*time.Second, c.adminArgs("topic", "create", "preview", "--partitions", "1", "--replication-factor", "1", "--validate-only")...)
	if code != 0 || !strings.HasPrefix(stdout, "validated, nothing written\n") {
		t.Errorf("keel topic create --validate-only (table): exit %d, stdout %q, stderr %q; want it to say it wrote nothing", code, stdout, stderr)
	}

	// Validate-only add-partitions shows the new partitions placed, and
	// adds nothing (checked below: dup is as it was).
	var grown topicJSON
	c.keelJSON(t, &grown, "partition", "add-partitions", "--topic", "dup", "--count", "4", "--validate-only")
	if len(grown.Partitions) != 4 || grown.ID != dup.ID {
		t.Errorf("keel partition add-partitions --topic dup --count 4 --validate-only:\n%s; want dup with 4 partitions", formatTopic(grown))
	}
	for _, p := range grown.Partitions[min(2, len(grown.Partitions)):] {
		if len(p.Replicas) != 2 || !slices.Contains(p.Replicas, 3) || p.Leader != p.Replicas[0] {
			t.Errorf("add-partitions --validate-only: new %s; want 2 replicas, one in each rack, led by the first", p)
		}
	}
	expectRefused(t, "", c.adminArgs("partition", "add-partitions", "--topic", "dup", "--assignment", "0:1,3;1:2,3"),
		`keel: InvalidArgument: assignments: the new partitions start at 2, topic "dup"'s current partition count, not at 0`)

	// --if-not-exists and --if-exists succeed on what is, or is not, there.
	if stdout, stderr, code := runKeel(t, 30*time.Second, c.adminArgs(append([]string{"topic", "create", "dup", "--if-not-exists"}, one...)...)...); code != 0 ||
		!strings.Contains(stderr, "topic dup already exists; nothing created") || !strings.Contains(stdout, dup.ID) {
		t.Errorf("keel topic create dup --if-not-exists: exit %d, stdout %q, stderr %q; want exit 0 and dup shown", code, stdout, stderr)
	}
	if stdout, _, code := runKeel(t, 30*time.Second, c.adminArgs("topic", "delete", "nosuch", "--if-exists")...); code != 0 || stdout != "topic nosuch does not exist; nothing deleted\n" {
		t.Errorf("keel topic delete nosuch --if-exists: exit %d, stdout %q", code, stdout)
	}

	// Nothing was created, nothing changed.
	if got := c.cliTopicList(t); !slices.Equal(got, listed) {
		t.Errorf("keel topic list after the refused and validate-only creates: %+v; want %+v", got, listed)
	}
	for _, name := range []string{"bad/name", "rf4", "nine", "cfg", "a_b", "preview"} {
		if _, err := c.DescribeTopicE(context.Background(), name); !isNotFound(err) {
			t.Errorf("describe %q after its refused or validate-only create: %v; want NotFound", name, err)
		}
	}
	if got := c.cliDescribe(t, "dup"); !sameTopic(got, dup) {
		t.Errorf("topic dup changed:\n%swas\n%s", formatTopic(got), formatTopic(dup))
	}
}

// sameTopic compares two descriptions field by field.
func sameTopic(a, b topicJSON) bool {
	if a.Name != b.Name || a.ID != b.ID || len(a.Partitions) != len(b.Partitions) {
		return false
	}
	for i, p := range a.Partitions {
		q := b.Partitions[i]
		if p.Partition != q.Partition || p.Leader != q.Leader || p.LeaderEpoch != q.LeaderEpoch || p.PartitionEpoch != q.PartitionEpoch ||
			!slices.Equal(p.Replicas, q.Replicas) || !slices.Equal(p.ISR, q.ISR) {
			return false
		}
	}
	return true
}

// TestPartition_SilentFollowerLeavesISRAndRejoins: brokers fetch every
// 100ms and a follower may go 1.5s without fetching (600ms let a live
// follower's fetch miss it on a loaded CI machine); sessions last 6s.
// Broker 3, a follower only, hangs (SIGSTOP): its partitions' leaders drop
// it from the ISR through AlterPartition, well before its session runs out
// (it is never fenced), keeping their leadership and leader epoch. When it
// resumes and fetches again, they add it back.
func TestPartition_SilentFollowerLeavesISRAndRejoins(t *testing.T) {
	t.Parallel()
	const fetch, lag, session = 100 * time.Millisecond, 1500 * time.Millisecond, 6 * time.Second
	c := startPartitionClusterWith(t, threeBrokers, nil,
		[]string{"--replica-fetch-interval=" + fetch.String(), "--replica-lag-time-max=" + lag.String()},
		withSessionTimeout(session))
	const topic, victim = "lagging", 3
	c.createTopic(t, topic, "--assignment", "0:1,2,3;1:2,1,3")
	before, _ := c.WaitForAgreement(t, topic, threeBrokers)
	brokers := c.WaitForBrokers(t, allActive(threeBrokers...))
	mark := c.brokerLogMark()

	c.PauseBroker(victim)
	paused := time.Now()
	shrunk := c.WaitForTopic(t, topic, fmt.Sprintf("without broker %d in its ISRs", victim), func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return !slices.Contains(p.ISR, victim) })
	})
	took := time.Since(paused)
	// The leaders dropped it, not a fence: it is still active at its epoch.
	list, err := c.ListBrokersOn(context.Background(), c.Live()[0])
	if err != nil {
		t.Fatalf("list brokers: %v", err)
	}
	t.Logf("broker %d left the ISRs %s after it hung (lag time max %s, session %s)", victim, took.Round(time.Millisecond), lag, session)
	if b := list[victim]; b.GetState() != stateActive || b.GetEpoch() != brokers[victim].Epoch {
		t.Errorf("when broker %d left the ISRs %s after it hung, it was listed %v; want still active at epoch %d: its leaders drop it, its session (%s) has not run out",
			victim, took.Round(time.Millisecond), b, brokers[victim].Epoch, session)
	}
	if earliest := lag - fetch - 50*time.Millisecond; took < earliest {
		t.Errorf("broker %d left the ISRs %s after it hung; want no sooner than its lag time max allows (%s)", victim, took, earliest)
	}
	for _, p := range shrunk.Partitions {
		pre := before.partition(t, p.Partition)
		if p.Leader != pre.Leader || p.LeaderEpoch != pre.LeaderEpoch || !slices.Equal(p.ISR, without(pre.ISR, victim)) || p.PartitionEpoch <= pre.PartitionEpoch {
			t.Errorf("follower %d dropped: %s; want leader %d kept at leader epoch %d, ISR %v, a new partition epoch (was %s)",
				victim, p, pre.Leader, pre.LeaderEpoch, without(pre.ISR, victim), pre)
		}
	}

	c.ResumeBroker(victim)
	back := c.WaitForTopic(t, topic, fmt.Sprintf("with broker %d back in its ISRs", victim), func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return slices.Contains(p.ISR, victim) })
	})
	for _, p := range back.Partitions {
		if pre := before.partition(t, p.Partition); p.Leader != pre.Leader || p.LeaderEpoch != pre.LeaderEpoch || !sameSet(p.ISR, pre.ISR) {
			t.Errorf("follower %d back: %s; want leader %d at leader epoch %d, ISR %v", victim, p, pre.Leader, pre.LeaderEpoch, pre.ISR)
		}
	}
	c.WaitForAgreement(t, topic, threeBrokers)
	// Once the brokers have replayed a write made after the pause, their
	// logs hold every fence committed during it.
	last := c.appendNoOp(t, 10*time.Second).Index
	c.WaitForBrokerOffsets(t, threeBrokers, last)
	c.checkNoFences(t, mark, fmt.Sprintf("while broker %d hung for less than its session", victim))
	c.WaitForBrokers(t, allActive(threeBrokers...))
}

// TestPartition_ControllerFailoverKeepsPartitions: kill -9 of the active
// controller moves no partition: the new one holds the same leaders,
// epochs and ISRs, and the brokers follow it and still agree. Then a broker
// dies, and the new controller moves the partitions it led, by the same
// rules.
func TestPartition_ControllerFailoverKeepsPartitions(t *testing.T) {
	t.Parallel()
	c := startPartitionCluster(t, threeBrokers)
	const topic = "orders"
	c.createTopic(t, topic, "--partitions", "6", "--replication-factor", "3")
	before, _ := c.WaitForAgreement(t, topic, threeBrokers)
	leader, epoch := c.WaitForActive(t, activeTimeout)

	c.Kill(leader)
	newLeader, newEpoch := c.WaitForActive(t, activeTimeout)
	if newLeader == leader || newEpoch != epoch+1 {
		t.Fatalf("after kill -9 of node %d: active %d epoch %d; want another node, epoch %d", leader, newLeader, newEpoch, epoch+1)
	}
	c.WaitForInspect(t, threeBrokers, "following the new controller", func(v *keelpb.InspectResponse) bool {
		return v.ControllerId == newLeader && v.ControllerEpoch == newEpoch
	})
	same, _ := c.WaitForAgreement(t, topic, threeBrokers)
	if !sameTopic(same, before) {
		t.Errorf("the controller failover changed topic %s:\n%swas\n%s", topic, formatTopic(same), formatTopic(before))
	}

	const victim = 1
	led := same.ledBy(victim)
	c.KillBroker(victim)
	after := c.WaitForTopic(t, topic, fmt.Sprintf("moved off broker %d by the new controller", victim), func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool {
			return p.Leader != victim && p.Leader != noLeader && !slices.Contains(p.ISR, victim)
		})
	})
	for _, p := range after.Partitions {
		pre := same.partition(t, p.Partition)
		want, wantEpoch := pre.Leader, pre.LeaderEpoch
		if slices.Contains(led, p.Partition) {
			want, wantEpoch = firstLiveISRMember(pre.Replicas, pre.ISR, victim), pre.LeaderEpoch+1
		}
		if p.Leader != want || p.LeaderEpoch != wantEpoch || !slices.Equal(p.ISR, without(pre.ISR, victim)) {
			t.Errorf("after broker %d's fence by the new controller: %s; want leader %d at leader epoch %d, ISR %v",
				victim, p, want, wantEpoch, without(pre.ISR, victim))
		}
	}
	c.WaitForAgreement(t, topic, otherThan(threeBrokers, victim))
}

// TestAlterPartition_Refusals: AlterPartition requests sent over gRPC, as
// the partition leader's broker would send them, are refused as Kafka's
// controller refuses them, with its error codes as reasons: an unknown
// sender or a stale broker epoch (STALE_BROKER_EPOCH), epochs above the
// controller's (NOT_CONTROLLER), a stale leader epoch (FENCED_LEADER_EPOCH),
// a stale partition epoch even with the ISR unchanged
// (INVALID_UPDATE_VERSION), all FailedPrecondition; a sender that is not the
// leader, an ISR without the leader or with a broker that is no replica
// (InvalidArgument, INVALID_REQUEST); an ISR member fenced, or at another
// broker epoch than its registration's (FailedPrecondition,
// INELIGIBLE_REPLICA); NotFound for an unknown partition. None changes the
// partition. A valid one shrinks the ISR, and the leader, which sees the
// follower still fetching, adds it back. Once broker 3 restarts and is back
// in the ISR, an ISR that names it at the epoch of its previous incarnation
// is refused (KIP-903), and at its new one accepted.
func TestAlterPartition_Refusals(t *testing.T) {
	t.Parallel()
	c := startPartitionCluster(t, threeBrokers)
	const topic = "isr"
	c.createTopic(t, topic, "--assignment", "0:3,1,2")
	c.WaitForAgreement(t, topic, threeBrokers)
	brokers := c.WaitForBrokers(t, allActive(threeBrokers...))
	// Broker 3 dies: broker 1 leads at leader epoch 1, ISR [1 2], and
	// broker 3 is fenced.
	c.KillBroker(3)
	d := c.WaitForTopic(t, topic, "led by broker 1, ISR [1 2]", func(d topicJSON) bool {
		p := d.Partitions[0]
		return p.Leader == 1 && slices.Equal(p.ISR, []int32{1, 2})
	})
	c.WaitForBrokers(t, map[int32]string{1: stateActive, 2: stateActive, 3: stateFenced})
	p := d.partition(t, 0)
	if p.LeaderEpoch != 1 {
		t.Fatalf("after broker 3's fence: %s; want leader epoch 1", p)
	}
	leader, _ := c.WaitForActive(t, activeTimeout)
	cl, err := c.Client().Controller(c.Addr(leader))
	if err != nil {
		t.Fatal(err)
	}
	e1, e2, e3 := brokers[1].Epoch, brokers[2].Epoch, brokers[3].Epoch
	req := func(broker int32, epoch int64, leaderEpoch, partitionEpoch int32, isr ...int32) *keelpb.AlterPartitionRequest {
		return &keelpb.AlterPartitionRequest{BrokerId: broker, BrokerEpoch: epoch, TopicId: d.ID, Partition: 0,
			LeaderEpoch: leaderEpoch, PartitionEpoch: partitionEpoch, NewIsr: isr}
	}
	withEpochs := func(r *keelpb.AlterPartitionRequest, members ...*keelpb.BrokerState) *keelpb.AlterPartitionRequest {
		r.NewIsr, r.NewIsrWithEpochs = nil, members
		return r
	}
	for _, tc := range []struct {
		what   string
		req    *keelpb.AlterPartitionRequest
		code   codes.Code
		reason string
	}{
		{"a stale broker epoch", req(1, e1-1, p.LeaderEpoch, p.PartitionEpoch, 1), codes.FailedPrecondition, rpc.ReasonStaleBrokerEpoch},
		{"an unknown sender", req(9, e1, p.LeaderEpoch, p.PartitionEpoch, 1), codes.FailedPrecondition, rpc.ReasonStaleBrokerEpoch},
		{"a leader epoch above the controller's", req(1, e1, p.LeaderEpoch+1, p.PartitionEpoch, 1), codes.FailedPrecondition, rpc.ReasonNotController},
		{"a partition epoch above the controller's", req(1, e1, p.LeaderEpoch, p.PartitionEpoch+1, 1), codes.FailedPrecondition, rpc.ReasonNotController},
		{"a stale leader epoch", req(1, e1, p.LeaderEpoch-1, p.PartitionEpoch, 1), codes.FailedPrecondition, rpc.ReasonFencedLeaderEpoch},
		{"a stale partition epoch", req(1, e1, p.LeaderEpoch, p.PartitionEpoch-1, 1), codes.FailedPrecondition, rpc.ReasonInvalidUpdateVersion},
		{"a stale partition epoch, ISR unchanged", req(1, e1, p.LeaderEpoch, p.PartitionEpoch-1, 1, 2), codes.FailedPrecondition, rpc.ReasonInvalidUpdateVersion},
		{"a sender that is not the leader", req(2, e2, p.LeaderEpoch, p.PartitionEpoch, 2), codes.InvalidArgument, rpc.ReasonInvalidRequest},
		{"a fenced broker in the ISR", req(1, e1, p.LeaderEpoch, p.PartitionEpoch, 1, 2, 3), codes.FailedPrecondition, rpc.ReasonIneligibleReplica},
		{"an ISR without the leader", req(1, e1, p.LeaderEpoch, p.PartitionEpoch, 2), codes.InvalidArgument, rpc.ReasonInvalidRequest},
		{"an ISR with a broker that is no replica", req(1, e1, p.LeaderEpoch, p.PartitionEpoch, 1, 4), codes.InvalidArgument, rpc.ReasonInvalidRequest},
		{"an ISR naming a broker twice", req(1, e1, p.LeaderEpoch, p.PartitionEpoch, 1, 1), codes.InvalidArgument, rpc.ReasonInvalidRequest},
		{"an ISR member at another broker epoch", withEpochs(req(1, e1, p.LeaderEpoch, p.PartitionEpoch),
			&keelpb.BrokerState{BrokerId: 1, BrokerEpoch: e1}, &keelpb.BrokerState{BrokerId: 2, BrokerEpoch: e2 + 1}), codes.FailedPrecondition, rpc.ReasonIneligibleReplica},
		{"an unknown partition", &keelpb.AlterPartitionRequest{BrokerId: 1, BrokerEpoch: e1, TopicId: d.ID, Partition: 5,
			LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, NewIsr: []int32{1}}, codes.NotFound, rpc.ReasonUnknownTopicOrPartition},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cl.AlterPartition(ctx, tc.req)
		cancel()
		if status.Code(err) != tc.code || rpc.ReasonOf(err) != tc.reason {
			t.Errorf("AlterPartition with %s (%v): %v (reason %q); want %s, reason %s", tc.what, tc.req, err, rpc.ReasonOf(err), tc.code, tc.reason)
		}
	}
	if now := c.cliDescribe(t, topic).partition(t, 0); !slices.Equal(now.ISR, p.ISR) || now.PartitionEpoch != p.PartitionEpoch || now.Leader != p.Leader {
		t.Errorf("after the refused AlterPartitions: %s; want it unchanged: %s", now, p)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.AlterPartition(ctx, req(1, e1, p.LeaderEpoch, p.PartitionEpoch, 1))
	if err != nil {
		t.Fatalf("AlterPartition shrinking the ISR to [1] at the current epochs: %v", err)
	}
	if got := resp.GetPartition(); !slices.Equal(got.GetIsr(), []int32{1}) || got.GetPartitionEpoch() != p.PartitionEpoch+1 ||
		got.GetLeader() != 1 || got.GetLeaderEpoch() != p.LeaderEpoch {
		t.Errorf("AlterPartition shrinking the ISR to [1]: %v; want ISR [1], partition epoch %d, leader 1 at leader epoch %d",
			got, p.PartitionEpoch+1, p.LeaderEpoch)
	}
	c.WaitForTopic(t, topic, "with broker 2 back in the ISR (it still fetches from broker 1)", func(d topicJSON) bool {
		q := d.Partitions[0]
		return q.Leader == 1 && q.LeaderEpoch == p.LeaderEpoch && slices.Equal(q.ISR, []int32{1, 2}) && q.PartitionEpoch > p.PartitionEpoch+1
	})
	c.WaitForAgreement(t, topic, []int32{1, 2})

	// KIP-903: broker 3 comes back as a new incarnation, and its leader
	// adds it to the ISR. Naming it at its old epoch is refused; at its new
	// one the (unchanged) ISR is accepted.
	c.RestartBroker(3)
	now := c.WaitForReregistered(t, allActive(threeBrokers...), 3, e3)
	q := c.WaitForTopic(t, topic, "with broker 3 back in the ISR", func(d topicJSON) bool {
		return slices.Equal(d.Partitions[0].ISR, []int32{1, 2, 3})
	}).partition(t, 0)
	members := func(epoch3 int64) *keelpb.AlterPartitionRequest {
		return withEpochs(req(1, e1, q.LeaderEpoch, q.PartitionEpoch), &keelpb.BrokerState{BrokerId: 1, BrokerEpoch: e1},
			&keelpb.BrokerState{BrokerId: 2, BrokerEpoch: e2}, &keelpb.BrokerState{BrokerId: 3, BrokerEpoch: epoch3})
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if _, err := cl.AlterPartition(ctx2, members(e3)); status.Code(err) != codes.FailedPrecondition || rpc.ReasonOf(err) != rpc.ReasonIneligibleReplica {
		t.Errorf("AlterPartition naming broker 3 at its previous epoch %d (now %d): %v; want FailedPrecondition, reason %s",
			e3, now[3].Epoch, err, rpc.ReasonIneligibleReplica)
	}
	if resp, err := cl.AlterPartition(ctx2, members(now[3].Epoch)); err != nil || resp.GetPartition().GetPartitionEpoch() != q.PartitionEpoch {
		t.Errorf("AlterPartition naming broker 3 at its new epoch %d: %v, %v; want accepted, nothing to change", now[3].Epoch, resp, err)
	}
}

// fencingOrder reads, from controller id's log, the brokers it fenced for an
// expired session, in the order it fenced them.
func fencingOrder(out string) []int32 {
	re := regexp.MustCompile(`fencing broker: session expired"[^\n]*? broker_id=(\d+)`)
	var order []int32
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		id, _ := strconv.ParseInt(m[1], 10, 32)
		order = append(order, int32(id))
	}
	return order
}

// TestPartition_ISRMembersExpiringTogetherFencedOldestFirst: a topic on
// brokers 1 and 2, ISR [1 2]. Both are killed together, and broker 2 is
// heard from last: their sessions run out together, and the active controller fences them one at a
// time, the one silent the longest (1) first, as Kafka's
// BrokerHeartbeatManager does. So leadership goes to 2 when 1 is fenced, and
// when 2 is fenced the ISR keeps 2, the member heard from last, not 1, which
// a single decision fencing both would keep. Broker 2 restarted leads again;
// broker 1 rejoins the ISR through it. Crash detection is off: with it,
// broker 1 would be fenced for its crash half a second after the kill, and
// broker 2, heard from since its stream ended, a session later.
func TestPartition_ISRMembersExpiringTogetherFencedOldestFirst(t *testing.T) {
	t.Parallel()
	c := startPartitionCluster(t, threeBrokers, withCrashGrace(0))
	leader, _ := c.WaitForActive(t, activeTimeout)
	const topic = "pair"
	c.createTopic(t, topic, "--assignment", "0:1,2;1:2,1")
	c.WaitForAgreement(t, topic, threeBrokers)
	brokers := c.WaitForBrokers(t, allActive(threeBrokers...))
	c.WaitForTopic(t, topic, "with ISR [1 2] or [2 1] everywhere", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return len(p.ISR) == 2 })
	})
	logged := len(fencingOrder(c.node(leader).Output()))

	// Both die at once; broker 2 is heard from last, by a heartbeat in its
	// name right after (an admin may send one), so their sessions run out
	// within one session check of each other, broker 1's first.
	c.KillTogether(nil, []int32{1, 2})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Client().BrokerHeartbeat(ctx, &keelpb.BrokerHeartbeatRequest{BrokerId: 2, BrokerEpoch: brokers[2].Epoch}); err != nil {
		t.Fatalf("a heartbeat in broker 2's name: %v", err)
	}
	down := c.WaitForTopic(t, topic, "without a leader", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return p.Leader == noLeader })
	})
	for _, p := range down.Partitions {
		if !slices.Equal(p.ISR, []int32{2}) {
			t.Errorf("brokers 1 and 2 killed, 2 heard from last: %s; want no leader, ISR [2]", p)
		}
	}
	if order := fencingOrder(c.node(leader).Output())[logged:]; !slices.Equal(order, []int32{1, 2}) {
		t.Errorf("active controller %d fenced, for expired sessions, brokers %v; want 1 then 2, one at a time", leader, order)
	}

	c.RestartBroker(2)
	c.WaitForTopic(t, topic, "led by broker 2 again", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return p.Leader == 2 })
	})
	c.RestartBroker(1)
	c.WaitForTopic(t, topic, "with broker 1 back in the ISR", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return p.Leader == 2 && len(p.ISR) == 2 })
	})
	c.WaitForAgreement(t, topic, threeBrokers)
}
