package integration

import (
	"fmt"
	"slices"
	"testing"

	"github.com/keel-dev/keel/internal/poll"
)

// Fetch sessions with real processes: each broker fetches every partition
// it follows from one leader broker on one session (broker/replication's
// fetcher), and serves one session to each follower broker.

// sessionSeries are the fetch sessions a broker has open, by side.
var sessionSeries = []string{`keel_broker_fetch_sessions{side="leader"}`, `keel_broker_fetch_sessions{side="follower"}`}

// waitOneSessionPerPair waits until each of ids serves one session to each
// other broker and fetches on one from each: one stream per follower and
// leader pair, whatever the number of partitions.
func waitOneSessionPerPair(t *testing.T, c *Cluster, ids []int32) {
	t.Helper()
	want := float64(len(ids) - 1)
	poll.UntilState(t, kafkaTimeout, fmt.Sprintf("every broker of %v with %v fetch sessions as leader and as follower", ids, want), func() (bool, string) {
		var got []string
		ok := true
		for _, id := range ids {
			v := brokerMetrics(t, c, id, sessionSeries...)
			got = append(got, fmt.Sprintf("broker %d: leader %v follower %v", id, v[0], v[1]))
			ok = ok && v[0] == want && v[1] == want
		}
		return ok, fmt.Sprint(got)
	})
}

// TestFetchSession_OnePerLeaderAndAckedSurviveKill: three brokers, a topic
// of 60 partitions RF 3 with min.insync.replicas=2, an acks=all producer
// writing to every partition. Each broker follows 40 partitions from the
// two others on exactly two sessions (and serves two), every partition's
// writes are acknowledged, and after a kill -9 of a broker leading some of
// them, leadership moves, writes go on, and no acknowledged record is
// lost; once the broker is back, it has its two sessions each way again.
func TestFetchSession_OnePerLeaderAndAckedSurviveKill(t *testing.T) {
	t.Parallel()
	const topic, partitions = "sessions", 60
	c, kafka, d := startSessionCluster(t, topic, partitions, "--replica-lag-time-max=1s", "--replica-fetch-interval=100ms")
	prod := startProducer(t, kafka, topic, partitions, "")
	prod.waitAcked(10*partitions, "on every partition")
	victim := d.Partitions[0].Leader
	var led []int32
	for _, p := range d.Partitions {
		if p.Leader == victim {
			led = append(led, p.Partition)
		}
	}
	killAndWaitMoved(t, c, topic, victim)
	prod.waitAcked(5*partitions, fmt.Sprintf("with broker %d killed", victim))
	c.RestartBroker(victim)
	c.WaitForTopic(t, topic, "back to a full ISR everywhere", func(d topicJSON) bool {
		for _, p := range d.Partitions {
			if len(p.ISR) != 3 {
				return false
			}
		}
		return true
	})
	prod.waitAcked(5*partitions, fmt.Sprintf("with broker %d back", victim))
	if !prod.stop(kafkaTimeout) {
		t.Fatalf("the producer did not finish: records still in flight after %s", kafkaTimeout)
	}
	sent, acked, failed := prod.results()
	for v, err := range failed {
		t.Errorf("%q: the producer gave up: %v", v, err)
	}
	ackedOn := map[int32]bool{}
	for _, a := range acked {
		ackedOn[a.partition] = true
	}
	for p := range int32(partitions) {
		if !ackedOn[p] {
			t.Errorf("no write to partition %d was acknowledged", p)
		}
	}
	reader := kafkaClient(t, kafka)
	hw := highWatermarks(t, reader, topic, partitions)
	read := consumeAll(t, kafka, topic, hw)
	lost, found, unacked := checkAckedRecords(t, sent, acked, hw, read, nil)
	// The restarted broker follows the partitions the others lead now
	// (and leads none until a preferred election): it fetches from both.
	poll.UntilState(t, kafkaTimeout, fmt.Sprintf("broker %d, restarted, fetching on a session from each other broker", victim), func() (bool, string) {
		v := brokerMetrics(t, c, victim, sessionSeries...)
		return v[1] == float64(len(threeBrokers)-1), fmt.Sprint(v)
	})
	slices.Sort(led)
	t.Logf("%d records sent, %d acknowledged (%d found, %d lost), %d never acknowledged; broker %d killed, leading partitions %v",
		len(sent), len(acked), found, lost, unacked, victim, led)
}
