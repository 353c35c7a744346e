package integration

// Consumer groups end to end: real `keel broker` processes, franz-go's
// group consumer (kgo.ConsumerGroup), and the group's coordinator killed
// with kill -9. What a Kafka user relies on: offsets committed (answered)
// survive the coordinator's death, and a new member of the group resumes
// from them: nothing below them is read again, nothing above them lost.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keel-dev/keel/internal/poll"
)

// groupBrokerFlags make groups quick to test: no initial rebalance delay,
// and a small __consumer_offsets (replicated on all three brokers, Kafka's
// default).
var groupBrokerFlags = []string{"--group-initial-rebalance-delay=0s", "--offsets-topic-partitions=3"}

// produceValues produces values to topic with acks=all, keyed by value,
// and fails the test on any error.
func produceValues(t *testing.T, cl *kgo.Client, topic string, values []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	var recs []*kgo.Record
	for _, v := range values {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(v), Value: []byte(v)})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// groupConsume reads with a member of group until it has read want
// records, and returns them by partition.
func groupConsume(t *testing.T, cl *kgo.Client, want int, what string) map[int32][]consumedRecord {
	t.Helper()
	got := map[int32][]consumedRecord{}
	n := 0
	poll.UntilState(t, kafkaTimeout, what, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fetches := cl.PollFetches(ctx)
		cancel()
		var errs []string
		fetches.EachError(func(topic string, p int32, err error) {
			if err != context.DeadlineExceeded {
				errs = append(errs, fmt.Sprintf("%s/%d: %v", topic, p, err))
			}
		})
		fetches.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], consumedRecord{offset: r.Offset, leaderEpoch: r.LeaderEpoch, value: string(r.Value)})
			n++
		})
		return n >= want, fmt.Sprintf("read %d of %d; errors: %s", n, want, strings.Join(errs, "; "))
	})
	return got
}

// coordinatorOf asks the cluster which broker coordinates group, until
// one does.
func coordinatorOf(t *testing.T, cl *kgo.Client, group string) int32 {
	t.Helper()
	var id int32
	poll.UntilState(t, kafkaTimeout, "a coordinator for group "+group, func() (bool, string) {
		var err error
		id, err = groupCoordinator(cl, group)
		return err == nil, fmt.Sprintf("error %v, node %d", err, id)
	})
	return id
}

// committedOffsets is group's committed offsets of topic, by partition,
// as OffsetFetch answers them.
func committedOffsets(t *testing.T, cl *kgo.Client, group, topic string) map[int32]int64 {
	t.Helper()
	var out map[int32]int64
	poll.UntilState(t, kafkaTimeout, "group "+group+"'s committed offsets", func() (bool, string) {
		var err error
		out, err = fetchCommitted(cl, group, topic)
		return err == nil, fmt.Sprint(err)
	})
	return out
}

// TestGroups_ConsumerResumesAfterCoordinatorKill: a group consumer reads
// every record produced and commits; the group's coordinator is killed
// with kill -9 while more records are produced; a new member of the group
// reads from the committed offsets on: every record above them, none
// below.
func TestGroups_ConsumerResumesAfterCoordinatorKill(t *testing.T) {
	t.Parallel()
	c, kafka := startKafkaClusterWith(t, threeBrokers, groupBrokerFlags)
	const topic, group = "orders", "billing"
	c.createTopic(t, topic, "--partitions", "3", "--replication-factor", "3", "--config", "min.insync.replicas=2")
	c.WaitForTopic(t, topic, "led with full ISRs", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return p.Leader > 0 && len(p.ISR) == 3 })
	})
	producer := kafkaClient(t, kafka)
	var first, second []string
	for i := range 300 {
		first = append(first, fmt.Sprintf("a%03d", i))
		second = append(second, fmt.Sprintf("b%03d", i))
	}
	produceValues(t, producer, topic, first)

	member := func() *kgo.Client {
		return kafkaClient(t, kafka, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	}
	a := member()
	read := groupConsume(t, a, len(first), "the first member reads every record")
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	if err := a.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	committed := map[int32]int64{}
	total := 0
	for p, recs := range read {
		committed[p] = recs[len(recs)-1].offset + 1
		total += len(recs)
	}
	if total != len(first) {
		t.Fatalf("the first member read %d records; want %d", total, len(first))
	}
	a.Close() // leaves the group

	victim := coordinatorOf(t, producer, group)
	c.KillBroker(victim)
	t.Logf("killed broker %d, the coordinator of %s, after commits %v", victim, group, committed)
	produceValues(t, producer, topic, second)
	if got := committedOffsets(t, producer, group, topic); len(got) != len(committed) {
		t.Fatalf("committed offsets after the kill: %v; want %v", got, committed)
	} else {
		for p, o := range committed {
			if got[p] != o {
				t.Fatalf("committed offsets after the kill: %v; want %v", got, committed)
			}
		}
	}
	if now := coordinatorOf(t, producer, group); now == victim {
		t.Fatalf("broker %d still coordinates %s after its kill", victim, group)
	}

	b := member()
	again := groupConsume(t, b, len(second), "the second member reads the records produced after the commit")
	seen := map[string]bool{}
	for p, recs := range again {
		for _, r := range recs {
			if r.offset < committed[p] {
				t.Errorf("partition %d: offset %d (%q) read again below the committed %d", p, r.offset, r.value, committed[p])
			}
			seen[r.value] = true
		}
	}
	for _, v := range second {
		if !seen[v] {
			t.Errorf("%q, produced after the commit, was not read", v)
		}
	}
	t.Logf("first member: %d records, committed %v; after the kill of broker %d the second member read %d records", total, committed, victim, len(seen))
}

// TestGroups_ApplicationOnTLS: on a TLS cluster the brokers create
// __consumer_offsets on their own (the controllers take a broker's
// internal request, with no principal); an application's certificate with
// READ on a topic and a group consumes in the group and commits, and is
// refused a group it has no ACL for (GROUP_AUTHORIZATION_FAILED); not even
// an admin deletes __consumer_offsets or adds partitions to it.
func TestGroups_ApplicationOnTLS(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	c, kafka := startKafkaClusterWith(t, threeBrokers, groupBrokerFlags, withTLS(pki))
	const topic, group = "orders", "billing"
	c.createTopic(t, topic, "--partitions", "3", "--replication-factor", "3")
	c.WaitForTopic(t, topic, "led with full ISRs", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return p.Leader > 0 && len(p.ISR) == 3 })
	})
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	adm := kafkaAdmin(t, kafka, kafkaTLS(pki, "admin"))
	grant := kadm.NewACLs().Allow("User:app-orders").AllowHosts("*").Topics(topic).Groups(group).
		Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral)
	res, err := adm.CreateACLs(ctx, grant)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("CreateACLs: %v", r.Err)
		}
	}
	admin := kafkaClient(t, kafka, kafkaTLS(pki, "admin"))
	var values []string
	for i := range 100 {
		values = append(values, fmt.Sprintf("v%03d", i))
	}
	produceValues(t, admin, topic, values)

	member := func(group string) *kgo.Client {
		return kafkaClient(t, kafka, appTLS(t, pki, "app-orders"), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	}
	app := member(group)
	read := groupConsume(t, app, len(values), "the application reads every record in its group")
	if err := app.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	want := map[int32]int64{}
	for p, recs := range read {
		want[p] = recs[len(recs)-1].offset + 1
	}
	got := committedOffsets(t, admin, group, topic)
	for p, o := range want {
		if got[p] != o {
			t.Fatalf("committed offsets %v; want %v", got, want)
		}
	}

	// Not even an admin deletes the internal topic or grows it.
	if dr, err := adm.DeleteTopics(ctx, "__consumer_offsets"); err != nil || !errors.Is(dr["__consumer_offsets"].Err, kerr.InvalidTopicException) {
		t.Fatalf("DeleteTopics(__consumer_offsets): %+v, %v; want INVALID_TOPIC_EXCEPTION", dr, err)
	}
	if cr, err := adm.CreatePartitions(ctx, 1, "__consumer_offsets"); err != nil || !errors.Is(cr["__consumer_offsets"].Err, kerr.InvalidTopicException) {
		t.Fatalf("CreatePartitions(__consumer_offsets): %+v, %v; want INVALID_TOPIC_EXCEPTION", cr, err)
	}

	stranger := member("other")
	poll.UntilState(t, kafkaTimeout, "a group without ACLs refused", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var seen []string
		refused := false
		stranger.PollFetches(ctx).EachError(func(_ string, _ int32, err error) {
			refused = refused || errors.Is(err, kerr.GroupAuthorizationFailed)
			seen = append(seen, err.Error())
		})
		return refused, strings.Join(seen, "; ")
	})
}
