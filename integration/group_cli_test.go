package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keel-dev/keel/internal/poll"
)

// groupCLITimeout bounds one keel group command: a coordinator elected and
// loaded on first use, a group's rebalance.
const groupCLITimeout = 60 * time.Second

// TestGroupCLI_ListDescribeResetDelete is keel group against three brokers
// and a franz-go group consumer, as kafka-consumer-groups.sh is used: list
// and describe show the group, its member and its lag; reset-offsets and
// delete are refused while the member is active; once it left, a dry run
// changes nothing, --to-earliest moves the committed offsets (the consumer,
// started again, reads every record again), and delete removes the group.
func TestGroupCLI_ListDescribeResetDelete(t *testing.T) {
	_, kafka := startKafkaClusterWith(t, []int32{1, 2, 3}, groupBrokerFlags)
	const topic, group, partitions = "orders", "orders-app", 3
	createTopicThroughBrokers(t, kafka, topic, partitions, 3, nil)
	produceEach(t, kafka, topic, partitions, 10)
	boot := "--bootstrap=" + strings.Join(bootstrap(kafka), ",")

	member := groupConsumer(t, kafka, topic, group)
	groupConsume(t, member, partitions*10, "the member reading every record")
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	if err := member.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}

	listed := groupCLIJSON[[]groupSummaryJSON](t, "group", "list", boot)
	i := slices.IndexFunc(listed, func(g groupSummaryJSON) bool { return g.Group == group })
	if i < 0 || listed[i].State != "Stable" || listed[i].Members != 1 || listed[i].ProtocolType != "consumer" {
		t.Fatalf("group list: %+v, want %s Stable with 1 member of protocol type consumer", listed, group)
	}

	// Two more records a partition: the group lags by 2 on each.
	produceEach(t, kafka, topic, partitions, 2)
	var view groupViewJSON
	pollGroupCLI(t, "describe shows a lag of 2 on each partition", func() bool {
		view = groupCLIJSON[[]groupViewJSON](t, "group", "describe", group, boot)[0]
		if len(view.Partitions) != partitions || len(view.Members) != 1 {
			return false
		}
		for _, p := range view.Partitions {
			if p.CommittedOffset != 10 || p.LogEndOffset != 12 || p.Lag != 2 || p.Owner != view.Members[0].MemberID {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("%+v", view) })
	if got := view.Members[0].Assigned[topic]; len(got) != partitions {
		t.Fatalf("the member is assigned %v of %s, want all %d partitions", got, topic, partitions)
	}

	// While the member is active, its offsets and the group stay.
	_, stderr, code := runKeel(t, groupCLITimeout, "group", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute", boot)
	if code == 0 || !strings.Contains(stderr, "stop its consumers first") || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Fatalf("reset-offsets of an active group: exit %d, stderr %q; want one line refusing it", code, stderr)
	}
	_, stderr, code = runKeel(t, groupCLITimeout, "group", "delete", group, boot)
	if code == 0 || !strings.Contains(stderr, "NON_EMPTY_GROUP") && !strings.Contains(stderr, "active members") {
		t.Fatalf("delete of an active group: exit %d, stderr %q; want NON_EMPTY_GROUP in words", code, stderr)
	}

	member.Close() // leaves the group
	pollGroupCLI(t, "the group Empty once its member left", func() bool {
		view = groupCLIJSON[[]groupViewJSON](t, "group", "describe", group, boot)[0]
		return view.State == "Empty"
	}, func() string { return fmt.Sprintf("%+v", view) })

	plan := groupCLIJSON[[]resetRowJSON](t, "group", "reset-offsets", group, "--topic", topic, "--to-earliest", "--dry-run", boot)
	if len(plan) != partitions {
		t.Fatalf("dry-run plan %+v, want %d partitions", plan, partitions)
	}
	for _, r := range plan {
		if r.CurrentOffset != 10 || r.NewOffset != 0 {
			t.Fatalf("dry-run plan %+v, want each partition from 10 to 0", plan)
		}
	}
	for _, p := range groupCLIJSON[[]groupViewJSON](t, "group", "describe", group, boot)[0].Partitions {
		if p.CommittedOffset != 10 {
			t.Fatalf("after a dry run partition %d's committed offset is %d, want 10 still", p.Partition, p.CommittedOffset)
		}
	}

	groupCLIJSON[[]resetRowJSON](t, "group", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute", boot)
	for _, p := range groupCLIJSON[[]groupViewJSON](t, "group", "describe", group, boot)[0].Partitions {
		if p.CommittedOffset != 0 || p.Lag != 12 {
			t.Fatalf("after --to-earliest partition %d: committed %d, lag %d; want 0 and 12", p.Partition, p.CommittedOffset, p.Lag)
		}
	}

	// The consumer, started again, reads from the reset offsets: all 36.
	again := groupConsumer(t, kafka, topic, group)
	groupConsume(t, again, partitions*12, "the member reading every record again")
	again.Close()

	pollGroupCLI(t, "the group Empty again", func() bool {
		return groupCLIJSON[[]groupViewJSON](t, "group", "describe", group, boot)[0].State == "Empty"
	}, func() string { return "" })
	stdout, stderr, code := runKeel(t, groupCLITimeout, "group", "delete", group, boot)
	if code != 0 || !strings.Contains(stdout, "deleted group "+group) {
		t.Fatalf("delete of an empty group: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for _, g := range groupCLIJSON[[]groupSummaryJSON](t, "group", "list", boot) {
		if g.Group == group {
			t.Fatalf("group list after delete still has %+v", g)
		}
	}
}

// The JSON contracts of keel group, as the test reads them.
type (
	groupSummaryJSON struct {
		Group        string `json:"group"`
		State        string `json:"state"`
		ProtocolType string `json:"protocol_type"`
		Members      int    `json:"members"`
	}
	groupViewJSON struct {
		Group   string `json:"group"`
		State   string `json:"state"`
		Members []struct {
			MemberID string             `json:"member_id"`
			Assigned map[string][]int32 `json:"assigned"`
		} `json:"members"`
		Partitions []struct {
			Partition       int32  `json:"partition"`
			CommittedOffset int64  `json:"committed_offset"`
			LogEndOffset    int64  `json:"log_end_offset"`
			Lag             int64  `json:"lag"`
			Owner           string `json:"owner"`
		} `json:"partitions"`
	}
	resetRowJSON struct {
		Partition     int32 `json:"partition"`
		CurrentOffset int64 `json:"current_offset"`
		NewOffset     int64 `json:"new_offset"`
	}
)

// groupCLIJSON runs keel group ... -o json, which must succeed, and
// decodes its output.
func groupCLIJSON[V any](t *testing.T, args ...string) V {
	t.Helper()
	stdout, stderr, code := runKeel(t, groupCLITimeout, append(args, "-o", "json")...)
	if code != 0 {
		t.Fatalf("keel %s: exit %d: %s", strings.Join(args, " "), code, stderr)
	}
	var v V
	if err := json.Unmarshal([]byte(stdout), &v); err != nil {
		t.Fatalf("keel %s: %v in %q", strings.Join(args, " "), err, stdout)
	}
	return v
}

// pollGroupCLI polls cond until it holds, failing with last's account.
func pollGroupCLI(t *testing.T, what string, cond func() bool, last func() string) {
	t.Helper()
	err := poll.Wait(context.Background(), kafkaTimeout, 100*time.Millisecond, what, func() (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("%v; last seen: %s", err, last())
	}
}

// produceEach produces n records to each partition of topic, acks=all.
func produceEach(t *testing.T, kafka map[int32]string, topic string, partitions int32, n int) {
	t.Helper()
	cl := kafkaClient(t, kafka, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	var recs []*kgo.Record
	for p := range partitions {
		for i := range n {
			recs = append(recs, &kgo.Record{Partition: p, Value: fmt.Appendf(nil, "p%d-%d", p, i)})
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// groupConsumer is a franz-go consumer in group, reading topic from the
// committed offsets (from the start without one), committing only when
// told. It stays a member while open, polled or not: kgo heartbeats in the
// background.
func groupConsumer(t *testing.T, kafka map[int32]string, topic, group string) *kgo.Client {
	t.Helper()
	return kafkaClient(t, kafka, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.HeartbeatInterval(200*time.Millisecond))
}
