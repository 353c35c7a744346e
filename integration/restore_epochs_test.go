package integration

// A restore never rolls an epoch back (issue 26, item 5): after `keel
// snapshot restore` into a running cluster with data, and after a new
// quorum started from a snapshot (`keel controller --restore-from`) with
// the brokers' data kept, every partition is led again within seconds, at
// leader epochs above every one the cluster used before, and serves every
// record acknowledged before and after, with no manual step.

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/keel-dev/keel/proto/keelpb"
)

// restoreRecoveryLimit bounds how long a restore may leave a partition
// without a leader that takes writes: seconds, not the minutes an operator
// takes to move a leader by hand.
const restoreRecoveryLimit = 20 * time.Second

// finish stops the producer, fails the test if records are still in flight
// after kafkaTimeout or the producer gave any up, and returns what it sent
// and what was acknowledged.
func (p *streamProducer) finish() (sent map[string]bool, acked []ackedRecord) {
	p.t.Helper()
	if !p.stop(kafkaTimeout) {
		p.t.Fatalf("producer %q did not finish: records still in flight after %s", p.tag, kafkaTimeout)
	}
	sent, acked, failed := p.results()
	for v, err := range failed {
		p.t.Errorf("%q: the producer gave up: %v", v, err)
	}
	return sent, acked
}

// saveThenKillLeader creates topic (its partitions as args say, RF 3,
// min.insync.replicas=2), saves a snapshot once every partition is led
// with a full ISR, starts a producer tagged tag, and once it has 200
// records acknowledged kills the leader of partition 0 and waits for 200
// more without it: the partitions it led move on to leader epoch 1, which
// its log never sees. It returns the snapshot, the producer and the
// broker killed.
func saveThenKillLeader(t *testing.T, c *Cluster, kafka map[int32]string, topic, tag string, args ...string) (string, *streamProducer, int32) {
	t.Helper()
	c.createTopic(t, topic, append(args, "--config", "min.insync.replicas=2")...)
	c.WaitForTopic(t, topic, "led with full ISRs", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return p.Leader > 0 && len(p.ISR) == 3 })
	})
	file, _ := c.saveSnapshot(t)
	prod := startProducer(t, kafka, topic, int32(len(c.cliDescribe(t, topic).Partitions)), tag)
	prod.waitAcked(200, "before the leader change")
	victim := killLeaderOf(t, c, topic, 0)
	prod.waitAcked(200, fmt.Sprintf("with broker %d down", victim))
	return file, prod, victim
}

// epochsAbove reports whether every partition of d is led, at a leader
// epoch above before's (and, with partitionEpochs, a partition epoch
// above it too), and says which is not.
func epochsAbove(d, before topicJSON, partitionEpochs bool) (bool, string) {
	for _, p := range d.Partitions {
		b := before.Partitions[p.Partition]
		switch {
		case p.Leader == noLeader:
			return false, fmt.Sprintf("partition %d has no leader (%s)", p.Partition, p.RecoveryState)
		case p.LeaderEpoch <= b.LeaderEpoch:
			return false, fmt.Sprintf("partition %d at leader epoch %d, not above %d", p.Partition, p.LeaderEpoch, b.LeaderEpoch)
		case partitionEpochs && p.PartitionEpoch <= b.PartitionEpoch:
			return false, fmt.Sprintf("partition %d at partition epoch %d, not above %d", p.Partition, p.PartitionEpoch, b.PartitionEpoch)
		}
	}
	return true, ""
}

// killLeaderOf kills the broker that leads partition of topic, waits until
// every partition is led by another, and returns it.
func killLeaderOf(t *testing.T, c *Cluster, topic string, partition int32) int32 {
	t.Helper()
	victim := c.cliDescribe(t, topic).partition(t, partition).Leader
	c.KillBroker(victim)
	c.WaitForTopic(t, topic, fmt.Sprintf("led without broker %d", victim), func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return p.Leader > 0 && p.Leader != victim })
	})
	return victim
}

// readAllAcked reads topic to its high watermarks and checks that every
// record acked holds (checkAckedRecords); it logs what it read.
func readAllAcked(t *testing.T, kafka map[int32]string, topic string, partitions int32, sent map[string]bool, acked []ackedRecord) {
	t.Helper()
	hw := highWatermarks(t, kafkaClient(t, kafka), topic, partitions)
	read := consumeAll(t, kafka, topic, hw)
	lost, found, unacked := checkAckedRecords(t, sent, acked, hw, read, nil)
	t.Logf("%d records sent, %d acknowledged; read up to the high watermarks %v: %d acknowledged found, %d lost, %d never acknowledged",
		len(sent), len(acked), hw, found, lost, unacked)
}

// TestRestore_OnlineUnderLoadMovesEpochsOn is the observation of issue 26
// item 5: a snapshot is saved; the leader of partition 0 is killed (its
// partitions move on to leader epoch 1) and comes back as a follower, its
// log at epoch 1 too; the snapshot is restored while a producer writes
// acks=all. Every partition is led again within seconds, at leader and
// partition epochs above those before the restore, the producer goes on,
// and every acknowledged record is read back at its offset. (Before the
// fix the restore put partition 0 back to its old leader at epoch 0, which
// refused to lead below its log's epoch 1: no writes, no reads, until an
// operator moved the leader, which then used epoch 1 a second time.)
func TestRestore_OnlineUnderLoadMovesEpochsOn(t *testing.T) {
	t.Parallel()
	c, kafka := startKafkaCluster(t, threeBrokers)
	const topic, partitions = "restored", 3
	file, prod, victim := saveThenKillLeader(t, c, kafka, topic, "", "--partitions", "3", "--replication-factor", "3")
	c.RestartBroker(victim)
	c.WaitForTopic(t, topic, "back to full ISRs", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return len(p.ISR) == 3 })
	})
	prod.waitAcked(200, fmt.Sprintf("with broker %d back in every ISR", victim))
	before := c.cliDescribe(t, topic)

	var res restoreJSON
	c.keelJSON(t, &res, "snapshot", "restore", file)
	restored := time.Now()
	after := c.WaitForTopic(t, topic, "led at leader and partition epochs above the ones before the restore", func(d topicJSON) bool {
		ok, _ := epochsAbove(d, before, true)
		return ok
	})
	prod.waitAckedWithin(200, restoreRecoveryLimit, "after the restore")
	t.Logf("restored %s (snapshot index %d, controller epoch %d); producing again %s after it; partitions before:\n%safter:\n%s",
		file, res.SnapshotIndex, res.ControllerEpoch, time.Since(restored).Round(time.Millisecond), formatTopic(before), formatTopic(after))

	sent, acked := prod.finish()
	readAllAcked(t, kafka, topic, partitions, sent, acked)
}

// TestRestore_DisasterRecoveryKeepsAckedRecords: a snapshot is saved; the
// leader of partition 0 is killed and records are acknowledged without it
// (at leader epoch 1, which its log never saw); then every controller is
// lost with its data dir and every broker dies, its data dir kept. A new
// quorum is started from the snapshot, and the brokers on their data dirs,
// the killed one last. Every partition is led within seconds of that, from
// the replica whose log is furthest on, at a leader epoch above every one
// used before, and every acknowledged record is read back, with more
// written after. (Before the fix the snapshot's ISR elected the killed
// broker, the last of it left, and the replicas that had the later records
// truncated to its log.)
func TestRestore_DisasterRecoveryKeepsAckedRecords(t *testing.T) {
	t.Parallel()
	c, kafka := startKafkaCluster(t, threeBrokers)
	const topic, partitions = "survivor", 3
	// Partition 0 is led by broker 3, the one killed: the snapshot holds it
	// in every ISR, and as the highest id it is the last ISR member left
	// when the restored brokers' sessions end (the longest silent first,
	// ties by id), so that the snapshot's ISR alone would elect it.
	file, prod, victim := saveThenKillLeader(t, c, kafka, topic, "a", "--assignment", "0:3,1,2;1:1,2,3;2:2,3,1")
	if victim != 3 {
		t.Fatalf("partition 0 was led by broker %d; want broker 3, its preferred leader", victim)
	}
	prod.waitAcked(100, fmt.Sprintf("with broker %d down", victim))
	sent, acked := prod.finish()
	before := c.cliDescribe(t, topic)

	// The disaster: every controller and its data dir; every broker dies.
	alive := slices.DeleteFunc(slices.Clone(threeBrokers), func(id int32) bool { return id == victim })
	c.KillTogether(c.IDs(), alive)
	for _, id := range c.IDs() {
		if err := os.RemoveAll(c.DataDir(id)); err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now()
	r := startCluster(t, 3, withSessionTimeout(testSessionTimeout), withLeaderImbalanceCheck(-time.Second),
		withControllerFlags("--restore-from", file))
	r.WaitForActive(t, activeTimeout)
	startOn := func(ids ...int32) {
		opts := make([][]brokerOption, len(ids))
		for i, id := range ids {
			// The last --data-dir wins: the broker's own, from before the loss.
			opts[i] = []brokerOption{withRack(fmt.Sprintf("r%d", id)), withBrokerFlags("--data-dir", c.BrokerDataDir(id),
				"--kafka-listen="+kafka[id], "--replica-lag-time-max=1s", "--replica-fetch-interval=100ms")}
		}
		r.startBrokers(ids, opts)
	}
	// The brokers that hold every acknowledged record come back first; the
	// one whose log stops at epoch 0, and which the snapshot names as
	// partition 0's leader, comes back last.
	startOn(alive...)
	r.WaitForInspect(t, alive, "registered and active", func(v *keelpb.InspectResponse) bool { return v.GetState() == stateActive })
	startOn(victim)
	after := r.WaitForTopic(t, topic, "led at leader epochs above the ones before the loss", func(d topicJSON) bool {
		// Partition epochs are in no log: those of a disaster recovery
		// start again from the snapshot's (docs/design.md).
		ok, _ := epochsAbove(d, before, false)
		return ok
	})
	more := startProducer(t, kafka, topic, partitions, "b")
	more.waitAckedWithin(100, restoreRecoveryLimit, "after the recovery")
	t.Logf("a quorum from the snapshot and the brokers on their data: producing again %s after the start; partitions before:\n%safter:\n%s",
		time.Since(start).Round(time.Millisecond), formatTopic(before), formatTopic(after))
	sentB, ackedB := more.finish()
	for v := range sentB {
		sent[v] = true
	}
	readAllAcked(t, kafka, topic, partitions, sent, append(acked, ackedB...))
}

// TestRestore_DisasterRecoveryWhileBrokersRun: only the controllers are
// lost, after failovers took the controller epoch past the snapshot's; the
// brokers keep running, and a producer keeps writing to them. A new quorum
// on the same addresses, started from the snapshot, has a lower controller
// epoch than the brokers have seen and knows none of them: each registers
// again, follows the new quorum from a snapshot of its metadata, and
// reports its logs; every partition is led again at leader epochs above
// the ones before, and every acknowledged record is read back.
func TestRestore_DisasterRecoveryWhileBrokersRun(t *testing.T) {
	t.Parallel()
	c, kafka := startKafkaCluster(t, threeBrokers)
	const topic, partitions = "running", 3
	c.createTopic(t, topic, "--partitions", "3", "--replication-factor", "3", "--config", "min.insync.replicas=2")
	c.WaitForTopic(t, topic, "led with full ISRs", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return p.Leader > 0 && len(p.ISR) == 3 })
	})
	file, saved := c.saveSnapshot(t)
	prod := startProducer(t, kafka, topic, partitions, "")
	prod.waitAcked(200, "before the failovers")
	// Two failovers: the brokers see a controller epoch two above the
	// snapshot's, one above what the new quorum will start at.
	for range 2 {
		leader, _ := c.WaitForActive(t, activeTimeout)
		c.Kill(leader)
		c.WaitForActive(t, activeTimeout)
		c.Restart(leader)
	}
	_, seen := c.WaitForActive(t, activeTimeout)
	c.WaitForInspect(t, threeBrokers, fmt.Sprintf("streaming at controller epoch %d", seen), func(v *keelpb.InspectResponse) bool {
		return v.GetControllerEpoch() == seen
	})
	prod.waitAcked(200, "after the failovers")
	before := c.cliDescribe(t, topic)
	brokersBefore := c.WaitForBrokers(t, allActive(threeBrokers...))

	// The disaster: every controller and its data dir; a new quorum on the
	// same addresses, from the snapshot.
	c.KillTogether(c.IDs(), nil)
	for _, id := range c.IDs() {
		if err := os.RemoveAll(c.DataDir(id)); err != nil {
			t.Fatal(err)
		}
		nd := c.node(id)
		nd.SetArgs(append(nd.Args(), "--restore-from", file))
	}
	start := time.Now()
	for _, id := range c.IDs() {
		c.Start(id)
	}
	_, epoch := c.WaitForActive(t, activeTimeout)
	if epoch != saved.ControllerEpoch+1 || epoch >= seen {
		t.Fatalf("the new quorum is at controller epoch %d; want the snapshot's %d + 1, below the %d the brokers saw", epoch, saved.ControllerEpoch, seen)
	}
	c.WaitForInspect(t, threeBrokers, fmt.Sprintf("registered again and streaming at controller epoch %d", epoch), func(v *keelpb.InspectResponse) bool {
		return v.GetState() == stateActive && v.GetControllerEpoch() == epoch && v.GetBrokerEpoch() != brokersBefore[v.GetBrokerId()].GetEpoch()
	})
	after := c.WaitForTopic(t, topic, "led at leader epochs above the ones before the loss", func(d topicJSON) bool {
		ok, _ := epochsAbove(d, before, false)
		return ok
	})
	prod.waitAckedWithin(200, restoreRecoveryLimit, "after the recovery")
	t.Logf("a quorum from the snapshot under running brokers: producing again %s after its start; partitions before:\n%safter:\n%s",
		time.Since(start).Round(time.Millisecond), formatTopic(before), formatTopic(after))
	sent, acked := prod.finish()
	readAllAcked(t, kafka, topic, partitions, sent, acked)
	// The controllers started after the brokers, and the end of the test
	// stops the latest started first: the brokers stop now, while a quorum
	// can still take their controlled shutdowns.
	for _, id := range threeBrokers {
		c.StopBroker(id)
	}
}
