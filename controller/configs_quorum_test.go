package controller

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

// TestController_MinIsrDefaultLeavesUnchangedElr: the configuration
// manager's ELR rule through a quorum (memlog): the cluster default of
// min.insync.replicas set to the value a topic already follows commits,
// and every controller keeps the topic's eligible leader replicas; set to
// another value, every controller clears them.
func TestController_MinIsrDefaultLeavesUnchangedElr(t *testing.T) {
	q := newMemQuorum(t, 3, nil)
	q.elect(1)
	c := q.ctrls[1]
	ctx := context.Background()
	write := func(d decision) {
		t.Helper()
		if _, err := c.decide(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	write(func(*fsm.Image) ([]*keelpb.Record, error) {
		return []*keelpb.Record{regRange(0, 1, 1), regRange(1, 1, 1), regRange(2, 1, 1)}, nil
	})
	write(func(img *fsm.Image) ([]*keelpb.Record, error) {
		var recs []*keelpb.Record
		for _, id := range []int32{0, 1, 2} {
			b, _ := img.Broker(id)
			recs = append(recs, &keelpb.Record{Record: &keelpb.Record_UnfenceBroker{UnfenceBroker: &keelpb.UnfenceBrokerRecord{BrokerId: id, BrokerEpoch: b.Epoch}}})
		}
		return recs, nil
	})
	write(func(*fsm.Image) ([]*keelpb.Record, error) {
		return []*keelpb.Record{
			{Record: &keelpb.Record_Topic{Topic: &keelpb.TopicRecord{Name: "e", TopicId: bytes.Clone(elrTopic[:])}}},
			{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{TopicId: bytes.Clone(elrTopic[:]),
				Replicas: []int32{0, 1, 2}, Isr: []int32{0}, Leader: 0, EligibleLeaderReplicas: []int32{1, 2}}}},
		}, nil
	})

	elrOn := func(id int32) ([]int32, bool) {
		p, ok := q.applied[id].FSM().Image().Partition(elrTopic, 0)
		if !ok {
			return nil, false
		}
		return p.ELR(), true
	}
	everyController := func(want []int32, what string) {
		t.Helper()
		for _, id := range []int32{1, 2, 3} {
			poll.UntilState(t, quorumWait, what, func() (bool, string) {
				got, ok := elrOn(id)
				return ok && slices.Equal(got, want), fmt.Sprintf("controller %d has the partition %v, ELR %v", id, ok, got)
			})
		}
	}
	everyController([]int32{1, 2}, "the ELR written")

	if _, err := c.AlterConfigs(ctx, alterReq(clusterResource, set(fsm.MinInsyncReplicas, "1"))); err != nil {
		t.Fatal(err)
	}
	idx := q.log.Node(1).LastIndex()
	for _, id := range []int32{1, 2, 3} {
		poll.Until(t, quorumWait, "the default applied", func() bool { return q.applied[id].FSM().Image().Offset >= idx })
		if v, ok := q.applied[id].FSM().Image().ClusterConfig(fsm.MinInsyncReplicas); !ok || v != "1" {
			t.Fatalf("controller %d: cluster min.insync.replicas %q, %v", id, v, ok)
		}
	}
	everyController([]int32{1, 2}, "the ELR kept: the value in effect did not change")

	if _, err := c.AlterConfigs(ctx, alterReq(clusterResource, set(fsm.MinInsyncReplicas, "2"))); err != nil {
		t.Fatal(err)
	}
	everyController(nil, "the ELR cleared: the value in effect changed")
}
