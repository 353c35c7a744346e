package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keel-dev/keel/internal/faultproxy"
)

// The ISR between brokers that cannot fetch from each other but still
// heartbeat to the controllers (issue 26, item 8): it follows the fetches,
// not the heartbeats, and costs a bounded number of metadata commits.

const (
	// isrTestLag is the brokers' --replica-lag-time-max in these tests:
	// short, so that the ISR shrinks early in the cut and the rest of it
	// shows what happens once it has.
	isrTestLag = 4 * time.Second
	// isrTestBlip is a cut of the fetches a tenth of the lag time long: the
	// followers are back (their fetch and connection back-offs included)
	// well within the lag time, and must stay in the ISR.
	isrTestBlip = isrTestLag / 10
	// isrTestCut is how long the leader's followers cannot fetch from it:
	// the 30 s of the report.
	isrTestCut = 30 * time.Second
)

// fetchProxies puts a fault proxy in front of each broker's gRPC service
// and has the broker advertise it (--advertise): its followers fetch from it
// through the proxy, while every broker's links to the controllers are
// direct. flags are a broker's flags; aim sets the proxies' targets once
// the brokers have ports. Made before the cluster, they are closed after
// it has stopped.
type fetchProxies map[int32]*faultproxy.Proxy

func newFetchProxies(t *testing.T, brokers []int32) fetchProxies {
	t.Helper()
	ps := fetchProxies{}
	for _, id := range brokers {
		// Its target is set once the broker has a port (aim).
		p, err := faultproxy.New(fmt.Sprintf("fetches-from-broker-%d", id), "127.0.0.1:1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		ps[id] = p
	}
	return ps
}

func (ps fetchProxies) flags(id int32) []string { return []string{"--advertise=" + ps[id].Addr()} }

func (ps fetchProxies) aim(c *Cluster) {
	for id, p := range ps {
		p.SetTarget(c.BrokerAddr(id))
	}
}

// partitionSample is a description of a topic's partition 0, and when it
// was read.
type partitionSample struct {
	at time.Time
	p  partitionJSON
}

// samplePartition describes topic's partition 0 every 100 ms for d and
// returns the answers (descriptions that failed are left out).
func (c *Cluster) samplePartition(topic string, d time.Duration) []partitionSample {
	var out []partitionSample
	for end := time.Now().Add(d); time.Now().Before(end); {
		if d, err := c.DescribeTopicE(context.Background(), topic); err == nil {
			out = append(out, partitionSample{time.Now(), d.Partitions[0]})
		}
		time.Sleep(100 * time.Millisecond) // the sampling interval, not synchronisation
	}
	return out
}

// TestISR_FollowsFetchingNotHeartbeats: three brokers, an RF-3 topic led
// by one of them; every broker heartbeats to the controllers throughout,
// over links of its own, while the leader's followers cannot fetch from it
// (its fetch proxy refuses and resets):
//   - for blips of a tenth of the lag time: the ISR does not change;
//   - for 30 s: the ISR shrinks to the leader once the lag time has passed,
//     in at most one commit per follower, and stays so: no follower
//     rejoins on its heartbeats or on fetches from before the cut (the
//     report's flapping between [1] and [1 2 3], about 200 commits a
//     second); records produced meanwhile are committed by the leader
//     alone;
//   - healed: the followers catch up by fetching and rejoin, in at most one
//     commit each, and an acks=all produce then needs all three.
func TestISR_FollowsFetchingNotHeartbeats(t *testing.T) {
	t.Parallel()
	proxies := newFetchProxies(t, threeBrokers)
	c := startCluster(t, 3, withSessionTimeout(testSessionTimeout), withLeaderImbalanceCheck(-time.Second))
	ctrl, _ := c.WaitForActive(t, activeTimeout)
	addrs := freeAddrs(t, len(threeBrokers))
	kafka := map[int32]string{}
	opts := make([][]brokerOption, len(threeBrokers))
	for i, id := range threeBrokers {
		kafka[id] = addrs[i]
		opts[i] = []brokerOption{withRack(fmt.Sprintf("r%d", id)), withBrokerFlags(append([]string{"--kafka-listen=" + addrs[i],
			"--replica-lag-time-max=" + isrTestLag.String(), "--replica-fetch-interval=100ms"}, proxies.flags(id)...)...)}
	}
	c.startBrokers(threeBrokers, opts)
	proxies.aim(c)
	c.WaitForBrokers(t, allActive(threeBrokers...))

	const topic = "isr"
	c.createTopic(t, topic, "--partitions", "1", "--replication-factor", "3")
	c.WaitForTopic(t, topic, "led with a full ISR", func(d topicJSON) bool {
		return d.Partitions[0].Leader > 0 && len(d.Partitions[0].ISR) == 3
	})
	producer := kafkaClient(t, kafka, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
	produce := func(n int, what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
		defer cancel()
		for i := range n {
			if err := producer.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "%s-%d", what, i)}).FirstErr(); err != nil {
				t.Fatalf("record %d %s: %v", i, what, err)
			}
		}
	}
	produce(10, "before the cut")
	p := c.WaitForTopic(t, topic, "a full ISR after the first records", func(d topicJSON) bool { return len(d.Partitions[0].ISR) == 3 }).Partitions[0]
	leader, full := p.Leader, p.ISR
	applied := func() uint64 {
		t.Helper()
		v, err := c.Describe(context.Background(), ctrl)
		if err != nil || !v.Active {
			t.Fatalf("controller %d, active at the start, describes the quorum as %v (%v): the test counts its commits", ctrl, v, err)
		}
		return v.AppliedIndex
	}
	mark := c.brokerLogMark()

	// Blips: the followers are back within the lag time, so nothing
	// changes, watched until a shrink they caused would have come.
	for range 3 {
		proxies[leader].Set(faultproxy.Drop)
		time.Sleep(isrTestBlip) // the fault's length
		proxies[leader].Set(faultproxy.Up)
		time.Sleep(time.Second) // between faults
	}
	for _, s := range c.samplePartition(topic, 3*isrTestLag/2+time.Second) {
		if !slices.Equal(s.p.ISR, full) || s.p.PartitionEpoch != p.PartitionEpoch {
			t.Fatalf("after three cuts of %v (lag time %v) the partition changed: %s; was %s", isrTestBlip, isrTestLag, s.p, p)
		}
	}

	// The cut: once the ISR is the leader alone, it must stay so.
	epoch0, applied0 := p.PartitionEpoch, applied()
	proxies[leader].Set(faultproxy.Drop)
	cutAt := time.Now()
	seen := c.samplePartition(topic, isrTestCut)
	var (
		shrunkAt time.Time
		rejoined []string
	)
	for _, s := range seen {
		switch alone := slices.Equal(s.p.ISR, []int32{leader}); {
		case shrunkAt.IsZero() && alone:
			shrunkAt = s.at
		case !shrunkAt.IsZero() && !alone && len(rejoined) < 5:
			rejoined = append(rejoined, fmt.Sprintf("%v after the cut: %s", s.at.Sub(cutAt).Round(time.Millisecond), s.p))
		}
	}
	p = c.WaitForTopic(t, topic, "described at the end of the cut", func(topicJSON) bool { return true }).Partitions[0]
	cutCommits, cutApplied := p.PartitionEpoch-epoch0, applied()-applied0
	t.Logf("cut %v (lag %v): ISR %v, shrunk %v after the cut; %d ISR changes, %d metadata commits; %d descriptions",
		isrTestCut, isrTestLag, p.ISR, shrunkAt.Sub(cutAt).Round(time.Millisecond), cutCommits, cutApplied, len(seen))
	if shrunkAt.IsZero() {
		t.Fatalf("the ISR never shrank to [%d] in %v with its followers cut off (lag time %v): %s", leader, isrTestCut, isrTestLag, p)
	}
	if len(rejoined) > 0 {
		t.Errorf("followers that could not fetch were back in the ISR after it shrank:\n  %s", strings.Join(rejoined, "\n  "))
	}
	// One shrink per follower at most (both usually go in one).
	if cutCommits > 2 || cutApplied > 2 {
		t.Errorf("a cut of %v between the brokers cost %d ISR changes and %d metadata commits; want at most 2 of each", isrTestCut, cutCommits, cutApplied)
	}
	c.checkNoFences(t, mark, "while the fetches were cut (every broker heartbeated)")

	// The leader commits alone; healed, the followers fetch what they
	// missed and rejoin.
	produce(10, "during the cut")
	p = c.WaitForTopic(t, topic, "described before the heal", func(topicJSON) bool { return true }).Partitions[0]
	epoch1 := p.PartitionEpoch
	proxies[leader].Set(faultproxy.Up)
	p = c.WaitForTopic(t, topic, "the followers back in the ISR after the heal", func(d topicJSON) bool {
		return len(d.Partitions[0].ISR) == 3
	}).Partitions[0]
	produce(10, "after the heal")
	t.Logf("healed: ISR %v after %d ISR changes", p.ISR, p.PartitionEpoch-epoch1)
	if n := p.PartitionEpoch - epoch1; n > 2 {
		t.Errorf("the followers' return cost %d ISR changes; want at most 2 (one each)", n)
	}
}
