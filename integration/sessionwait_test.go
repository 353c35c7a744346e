package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFetchSession_LeaderChangeDoesNotWaitForLongPoll: three brokers with
// a fetch interval of 10 s (the sessions between them long-poll that
// long when idle), a topic RF 3 with min.insync.replicas=2. After a
// kill -9 of a broker, the partitions it led move to the others, whose
// sessions with each other are long-polling: the first acks=all write to
// each moved partition is acknowledged well within the interval, as the
// follower's session sends the moved partitions at once and the leader
// ends its long-poll for them.
func TestFetchSession_LeaderChangeDoesNotWaitForLongPoll(t *testing.T) {
	t.Parallel()
	const topic, partitions, interval = "moved", 12, 10 * time.Second
	c, kafka, d := startSessionCluster(t, topic, partitions, fmt.Sprintf("--replica-fetch-interval=%v", interval))
	cl := kafkaClient(t, kafka, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produceEach := func(ps []int32, what string) time.Duration {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
		defer cancel()
		start := time.Now()
		var recs []*kgo.Record
		for _, p := range ps {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte(what)})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("acks=all writes %s: %v", what, err)
		}
		return time.Since(start)
	}
	all := make([]int32, partitions)
	for p := range all {
		all[p] = int32(p)
	}
	produceEach(all, "before the kill")

	victim := d.Partitions[0].Leader
	var moved []int32
	for _, p := range d.Partitions {
		if p.Leader == victim {
			moved = append(moved, p.Partition)
		}
	}
	killAndWaitMoved(t, c, topic, victim)
	slices.Sort(moved)
	took := produceEach(moved, "after the leader change")
	t.Logf("broker %d killed; the first acks=all writes to the partitions it led, %v, were acknowledged %v after their new leaders were in the metadata (fetch interval %v)",
		victim, moved, took, interval)
	if took > 3*time.Second {
		t.Errorf("the first acks=all writes to the moved partitions took %v: the followers waited for the leaders' long-poll of %v", took, interval)
	}
}

// startSessionCluster starts three controllers and three brokers with
// Kafka listeners and brokerFlags, creates topic with partitions RF 3 and
// min.insync.replicas=2, and waits for every partition to be led with a
// full ISR and for one fetch session per pair of brokers.
func startSessionCluster(t *testing.T, topic string, partitions int, brokerFlags ...string) (*Cluster, map[int32]string, topicJSON) {
	t.Helper()
	c := startCluster(t, 3, withSessionTimeout(testSessionTimeout), withLeaderImbalanceCheck(-time.Second))
	c.WaitForActive(t, activeTimeout)
	kafka := map[int32]string{}
	addrs := freeAddrs(t, len(threeBrokers))
	bopts := make([][]brokerOption, len(threeBrokers))
	for i, id := range threeBrokers {
		kafka[id] = addrs[i]
		bopts[i] = []brokerOption{withRack(fmt.Sprintf("r%d", id)), withBrokerMetrics(),
			withBrokerFlags(append([]string{"--kafka-listen=" + addrs[i]}, brokerFlags...)...)}
	}
	c.startBrokers(threeBrokers, bopts)
	c.WaitForBrokers(t, allActive(threeBrokers...))
	c.createTopic(t, topic, "--partitions", fmt.Sprint(partitions), "--replication-factor", "3", "--config", "min.insync.replicas=2")
	d := c.WaitForTopic(t, topic, "every partition led with a full ISR", func(d topicJSON) bool {
		for _, p := range d.Partitions {
			if p.Leader <= 0 || len(p.ISR) != 3 {
				return false
			}
		}
		return len(d.Partitions) == partitions
	})
	waitOneSessionPerPair(t, c, threeBrokers)
	return c, kafka, d
}

// killAndWaitMoved kills victim (kill -9) and waits until no partition of
// topic is led by it.
func killAndWaitMoved(t *testing.T, c *Cluster, topic string, victim int32) {
	t.Helper()
	c.KillBroker(victim)
	c.WaitForTopic(t, topic, fmt.Sprintf("no partition led by %d, killed", victim), func(d topicJSON) bool {
		for _, p := range d.Partitions {
			if p.Leader <= 0 || p.Leader == victim {
				return false
			}
		}
		return true
	})
}
