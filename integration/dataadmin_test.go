package integration

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keel-dev/keel/internal/poll"
)

// TestKafka_DataAdmin drives the broker's data admin APIs through kadm on
// an RF-3 topic of three brokers, as operators' tooling calls them:
// DescribeAllLogDirs lists every replica on each broker, in its data dir,
// with a size that grows with a produce; DescribeProducers lists the
// idempotent producer that wrote; DeleteRecords past the high watermark is
// OFFSET_OUT_OF_RANGE and deletes nothing; DeleteRecords to N answers
// low watermark N, after which a consumer from the start begins at N and
// ListOffsets EARLIEST is N; after the leader's kill -9 the new leader
// answers N too, serving nothing below N and everything from N; and the
// killed broker, restarted and leading, still starts its log at N.
func TestKafka_DataAdmin(t *testing.T) {
	t.Parallel()
	c, kafka := startKafkaCluster(t, threeBrokers)
	const topic = "purge"
	c.createTopic(t, topic, "--partitions", "1", "--replication-factor", "3")
	d := c.WaitForTopic(t, topic, "led with a full ISR", func(d topicJSON) bool {
		return d.Partitions[0].Leader > 0 && len(d.Partitions[0].ISR) == 3
	})
	adm := kafkaAdmin(t, kafka)
	ctx, cancel := context.WithTimeout(context.Background(), 5*kafkaTimeout)
	defer cancel()

	sizes := func() (map[int32]int64, string) {
		dirs, err := adm.DescribeAllLogDirs(ctx, nil)
		if err != nil {
			return nil, err.Error()
		}
		out := map[int32]int64{}
		for _, id := range threeBrokers {
			want, err := filepath.Abs(filepath.Join(c.BrokerDataDir(id), "logs"))
			if err != nil {
				t.Fatal(err)
			}
			bd := dirs[id]
			dir, ok := bd[want]
			if len(bd) != 1 || !ok || dir.Err != nil {
				return nil, fmt.Sprintf("broker %d: dirs %+v, want the one %s", id, bd, want)
			}
			if dir.TotalBytes <= 0 || dir.UsableBytes < 0 || dir.UsableBytes > dir.TotalBytes {
				return nil, fmt.Sprintf("broker %d: volume of %d bytes, %d usable", id, dir.TotalBytes, dir.UsableBytes)
			}
			p, ok := dir.Topics.Lookup(topic, 0)
			if !ok || p.OffsetLag < 0 {
				return nil, fmt.Sprintf("broker %d: %s/0 %+v (listed %v)", id, topic, p, ok)
			}
			out[id] = p.Size
		}
		return out, ""
	}
	var before map[int32]int64
	poll.UntilState(t, kafkaTimeout, "every broker to list its replica", func() (bool, string) {
		var why string
		before, why = sizes()
		return before != nil, why
	})

	producer := kafkaClient(t, kafka, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0))
	var last *kgo.Record
	for i := range 20 {
		last = &kgo.Record{Value: fmt.Appendf(nil, "r%d", i)}
		if err := producer.ProduceSync(ctx, last).FirstErr(); err != nil || last.Offset != int64(i) {
			t.Fatalf("record %d: offset %d, %v", i, last.Offset, err)
		}
	}
	poll.UntilState(t, kafkaTimeout, "every replica to grow", func() (bool, string) {
		after, why := sizes()
		if after == nil {
			return false, why
		}
		for id, n := range after {
			if n <= before[id] {
				return false, fmt.Sprintf("sizes %v, before %v", after, before)
			}
		}
		return true, ""
	})

	described, err := adm.DescribeProducers(ctx, kadm.TopicsSet{topic: {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	dp := described[topic].Partitions[0]
	pr, ok := dp.ActiveProducers[last.ProducerID]
	if dp.Err != nil || len(dp.ActiveProducers) != 1 || !ok || dp.Leader != d.Partitions[0].Leader {
		t.Fatalf("DescribeProducers: %+v, want producer %d at the leader %d", dp, last.ProducerID, d.Partitions[0].Leader)
	}
	if pr.ProducerEpoch != last.ProducerEpoch || pr.LastSequence != 19 || pr.LastTimestamp < last.Timestamp.UnixMilli() ||
		pr.CoordinatorEpoch != -1 || pr.CurrentTxnStartOffset != -1 {
		t.Fatalf("DescribeProducers: %+v, want epoch %d, last sequence 19, no transaction", pr, last.ProducerEpoch)
	}

	deleteTo := func(offset int64) kadm.DeleteRecordsResponse {
		t.Helper()
		os := kadm.Offsets{}
		os.AddOffset(topic, 0, offset, -1)
		rs, err := adm.DeleteRecords(ctx, os)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := rs.Lookup(topic, 0)
		return r
	}
	if r := deleteTo(21); !errors.Is(r.Err, kerr.OffsetOutOfRange) {
		t.Fatalf("DeleteRecords past the high watermark 20: %+v, want OFFSET_OUT_OF_RANGE", r)
	}
	checkStart(t, adm, topic, 0, "after a refused DeleteRecords")
	const n = 8
	if r := deleteTo(n); r.Err != nil || r.LowWatermark != n {
		t.Fatalf("DeleteRecords to %d: %+v, want low watermark %d", n, r, n)
	}
	checkStart(t, adm, topic, n, "after DeleteRecords")
	readFromStart(t, kafka, topic, n, 20)

	victim := d.Partitions[0].Leader
	c.KillBroker(victim)
	c.WaitForTopic(t, topic, fmt.Sprintf("led by another broker than %d", victim), func(d topicJSON) bool {
		return d.Partitions[0].Leader > 0 && d.Partitions[0].Leader != victim
	})
	checkStart(t, adm, topic, n, fmt.Sprintf("after broker %d's kill -9", victim))
	readFromStart(t, kafka, topic, n, 20)
	for i := 20; i < 25; i++ {
		r := &kgo.Record{Value: fmt.Appendf(nil, "r%d", i)}
		if err := producer.ProduceSync(ctx, r).FirstErr(); err != nil || r.Offset != int64(i) {
			t.Fatalf("record %d after the failover: offset %d, %v", i, r.Offset, err)
		}
	}

	// The killed broker comes back, catches up, and is made the leader by
	// stopping the others, one leader at a time: its own log still starts
	// at n.
	c.RestartBroker(victim)
	d = c.WaitForTopic(t, topic, "back to a full ISR", func(d topicJSON) bool { return len(d.Partitions[0].ISR) == 3 })
	for leader := d.Partitions[0].Leader; leader != victim; {
		c.StopBroker(leader)
		stopped := leader
		d = c.WaitForTopic(t, topic, fmt.Sprintf("led by another broker than %d", stopped), func(d topicJSON) bool {
			return d.Partitions[0].Leader > 0 && d.Partitions[0].Leader != stopped
		})
		leader = d.Partitions[0].Leader
	}
	checkStart(t, adm, topic, n, fmt.Sprintf("on broker %d, restarted and leading", victim))
	readFromStart(t, kafka, topic, n, 25)
	t.Logf("log sizes %v before the produce; broker %d killed, restarted and leading at epoch %d", before, victim, d.Partitions[0].LeaderEpoch)
}

// checkStart waits until ListOffsets EARLIEST of topic's partition 0 is
// answered, and checks that it is want.
func checkStart(t *testing.T, adm *kadm.Client, topic string, want int64, when string) {
	t.Helper()
	var got kadm.ListedOffset
	poll.UntilState(t, kafkaTimeout, "ListOffsets EARLIEST "+when, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		listed, err := adm.ListStartOffsets(ctx, topic)
		if err != nil {
			return false, err.Error()
		}
		got, _ = listed.Lookup(topic, 0)
		return got.Err == nil, fmt.Sprintf("%+v", got)
	})
	if got.Offset != want {
		t.Fatalf("ListOffsets EARLIEST %s: %d, want %d", when, got.Offset, want)
	}
}

// readFromStart consumes topic's partition 0 from the start with a new
// client, and checks that it reads exactly the records "r<from>" to
// "r<to-1>", at their offsets.
func readFromStart(t *testing.T, kafka map[int32]string, topic string, from, to int64) {
	t.Helper()
	cl := kafkaClient(t, kafka, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []string
	poll.UntilState(t, kafkaTimeout, fmt.Sprintf("records %d to %d from the start", from, to-1), func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fetches := cl.PollFetches(ctx)
		cancel()
		var errs []string
		fetches.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				errs = append(errs, err.Error())
			}
		})
		fetches.EachRecord(func(r *kgo.Record) { got = append(got, fmt.Sprintf("%d:%s", r.Offset, r.Value)) })
		return int64(len(got)) >= to-from, fmt.Sprintf("read %v; errors: %s", got, strings.Join(errs, "; "))
	})
	for i, rec := range got {
		if want := fmt.Sprintf("%d:r%d", from+int64(i), from+int64(i)); rec != want || int64(len(got)) != to-from {
			t.Fatalf("read from the start %v, want offsets %d to %d, each its own record", got, from, to-1)
		}
	}
}
