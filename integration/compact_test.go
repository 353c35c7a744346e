package integration

// Log compaction (cleanup.policy=compact) on real brokers: a compacted
// RF-3 topic, many versions of few keys produced with kgo, the cleaner
// run on every replica, and a consumer from offset 0 that reads every
// key's newest record and little else, from the first leader and, after
// its kill -9, from the next; the killed broker's cleaned log survives its
// restart.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keel-dev/keel/broker/replication"
	"github.com/keel-dev/keel/internal/poll"
)

// producedVersion is what was produced at an offset.
type producedVersion struct {
	key, value string
	tombstone  bool
}

func TestCompaction_NewestValuePerKeySurvivesKill(t *testing.T) {
	const topic, keys = "compacted", 20
	c := startCluster(t, 3, withSessionTimeout(testSessionTimeout), withLeaderImbalanceCheck(-time.Second))
	c.WaitForActive(t, activeTimeout)
	ids := []int32{1, 2, 3}
	addrs := freeAddrs(t, len(ids))
	kafka := map[int32]string{}
	bopts := make([][]brokerOption, len(ids))
	for i, id := range ids {
		kafka[id] = addrs[i]
		bopts[i] = []brokerOption{withRack(fmt.Sprintf("r%d", id)), withBrokerMetrics(), withBrokerFlags("--kafka-listen="+addrs[i],
			"--replica-lag-time-max=1s", "--replica-fetch-interval=100ms", "--log-cleaner-backoff=200ms")}
	}
	c.startBrokers(ids, bopts)
	c.WaitForBrokers(t, allActive(ids...))

	// Segments roll by age every 100 ms of producing; any dirt cleans.
	adm := kafkaAdmin(t, kafka)
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	ptr := func(s string) *string { return &s }
	if res, err := adm.CreateTopic(ctx, 1, 3, map[string]*string{"cleanup.policy": ptr("compact"), "segment.ms": ptr("100"),
		"min.cleanable.dirty.ratio": ptr("0.01")}, topic); err != nil || res.Err != nil {
		t.Fatalf("create a compacted topic: %v, %v (%s)", err, res.Err, res.ErrMessage)
	}

	cl := kafkaClient(t, kafka, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()))
	produced := map[int64]producedVersion{}
	produce := func(recs ...*kgo.Record) {
		t.Helper()
		pctx, pcancel := context.WithTimeout(context.Background(), kafkaTimeout)
		defer pcancel()
		for _, r := range cl.ProduceSync(pctx, recs...) {
			if r.Err != nil {
				t.Fatalf("produce: %v", r.Err)
			}
			produced[r.Record.Offset] = producedVersion{string(r.Record.Key), string(r.Record.Value), r.Record.Value == nil}
		}
	}
	// A record without a key is refused (Kafka's LogValidator).
	pctx, pcancel := context.WithTimeout(context.Background(), kafkaTimeout)
	if err := cl.ProduceSync(pctx, &kgo.Record{Value: []byte("no key")}).FirstErr(); !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("a record without a key: %v, want INVALID_RECORD", err)
	}
	pcancel()
	// "gone" is deleted at once: its value is superseded by its
	// tombstone in the first segment, which every first clean covers.
	produce(&kgo.Record{Key: []byte("gone"), Value: []byte("gone-v0")}, &kgo.Record{Key: []byte("gone")})

	round := 0
	roundOf := func() {
		var recs []*kgo.Record
		for k := range keys {
			recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", k), Value: fmt.Appendf(nil, "k%d-v%d", k, round)})
		}
		produce(recs...)
		round++
	}
	// Versions until the cleaner has cleaned the log on every replica.
	cleaned := func() (bool, string) {
		var state []string
		done := true
		for _, id := range ids {
			runs := brokerMetric(t, c, id, replication.MetricCleanerRuns)
			done = done && runs >= 1
			state = append(state, fmt.Sprintf("broker %d: %v runs", id, runs))
		}
		return done, strings.Join(state, ", ")
	}
	var state string
	err := poll.Wait(context.Background(), 90*time.Second, 50*time.Millisecond, "the cleaner to run on every replica", func() (bool, error) {
		roundOf()
		var done bool
		done, state = cleaned()
		return done && round >= 10, nil
	})
	if err != nil {
		t.Fatalf("%v: %s", err, state)
	}
	t.Logf("%d records produced in %d rounds; %s", len(produced), round, state)
	// With producing stopped, every replica cleans what it can: nothing
	// left dirty below its high watermark.
	poll.UntilState(t, kafkaTimeout, "every replica's compacted log clean", func() (bool, string) {
		done := true
		var state []string
		for _, id := range ids {
			r := brokerMetric(t, c, id, replication.MetricCleanerMaxDirtyRatio)
			done = done && r == 0
			state = append(state, fmt.Sprintf("broker %d: dirty ratio %v", id, r))
		}
		return done, strings.Join(state, ", ")
	})

	check := func(what string) {
		t.Helper()
		hw := highWatermarks(t, cl, topic, 1)
		read := consumeAll(t, kafka, topic, hw)[0]
		newest := map[string]int64{}
		for off, v := range produced {
			if n, ok := newest[v.key]; !ok || off > n {
				newest[v.key] = off
			}
		}
		got := map[int64]bool{}
		for _, r := range read {
			v, ok := produced[r.offset]
			if !ok || r.value != v.value {
				t.Fatalf("%s: offset %d holds %q, produced %+v", what, r.offset, r.value, v)
			}
			got[r.offset] = true
		}
		for k, off := range newest {
			if !got[off] {
				t.Errorf("%s: key %s's newest record at %d was not read", what, k, off)
			}
		}
		for off, v := range produced {
			if v.key == "gone" && !v.tombstone && got[off] {
				t.Errorf("%s: gone's value at %d, superseded by its tombstone, was read", what, off)
			}
		}
		if len(read) > len(produced)/2 {
			t.Errorf("%s: %d records read of %d produced: little was cleaned", what, len(read), len(produced))
		}
		t.Logf("%s: %d of %d records read, up to the high watermark %d", what, len(read), len(produced), hw[0])
	}
	check("the first leader")

	md, err := adm.ListTopics(ctx, topic)
	if err != nil || md[topic].Err != nil {
		t.Fatalf("metadata: %v, %v", err, md[topic].Err)
	}
	leader := md[topic].Partitions[0].Leader
	c.KillBroker(leader)
	poll.UntilState(t, kafkaTimeout, "a new leader", func() (bool, string) {
		md, err := adm.ListTopics(ctx, topic)
		if err != nil || md[topic].Err != nil {
			return false, fmt.Sprint(err)
		}
		l := md[topic].Partitions[0].Leader
		return l >= 0 && l != leader, fmt.Sprintf("leader %d", l)
	})
	check("the leader after a kill -9 of the first")

	// The killed broker's cleaned log, and its cleaned offset, survive.
	cps, _ := filepath.Glob(filepath.Join(c.BrokerDataDir(leader), "logs", "*", "cleaner-offset-checkpoint"))
	if len(cps) != 1 {
		t.Fatalf("broker %d's cleaner checkpoints: %v", leader, cps)
	}
	c.RestartBroker(leader)
	c.WaitForBrokers(t, allActive(ids...))
	b, err := os.ReadFile(cps[0])
	lines := strings.Fields(string(b))
	if err != nil || len(lines) != 3 {
		t.Fatalf("%s: %q, %v", cps[0], b, err)
	}
	if off, err := strconv.ParseInt(lines[2], 10, 64); err != nil || off <= 0 {
		t.Fatalf("broker %d's cleaned offset after its restart: %q", leader, lines[2])
	}
	// Back in the ISR, the killed broker leads again if it is the
	// preferred replica (a preferred election), and serves the same.
	poll.Until(t, kafkaTimeout, fmt.Sprintf("broker %d back in the ISR", leader), func() bool {
		return slices.Contains(partitionMeta(t, adm, topic, 0).ISR, leader)
	})
	set := kadm.TopicsSet{}
	set.Add(topic, 0)
	if replicas := partitionMeta(t, adm, topic, 0).Replicas; replicas[0] == leader {
		if _, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, set); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, kafkaTimeout, fmt.Sprintf("broker %d leading again", leader), func() bool {
			return partitionMeta(t, adm, topic, 0).Leader == leader
		})
	}
	roundOf()
	check(fmt.Sprintf("after broker %d's restart (leader %d)", leader, partitionMeta(t, adm, topic, 0).Leader))
}
