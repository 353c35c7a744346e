package broker

import (
	"fmt"
	"slices"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

var (
	topicA  = fsm.TopicID{0xa}
	topicB  = fsm.TopicID{0xb}
	topicA2 = fsm.TopicID{0xc} // "a" created again after a deletion
	topicT  = fsm.TopicID{0x7}
)

// applyBatch applies records to img as the next batch.
func applyBatch(t *testing.T, img *fsm.Image, records ...*keelpb.Record) *fsm.Image {
	t.Helper()
	batch, err := fsm.DecodeBatch(mustEncode(t, records...))
	if err != nil {
		t.Fatal(err)
	}
	next, err := fsm.Apply(img, img.Offset+1, 1, batch)
	if err != nil {
		t.Fatalf("apply at %d: %v", img.Offset+1, err)
	}
	return next
}

// clusterImage is a cluster with brokers 1-3 registered and active (epochs
// 2-4), at offset 5.
func clusterImage(t *testing.T) *fsm.Image {
	t.Helper()
	img := applyBatch(t, fsm.Empty(), clusterIDRec("c"), featureLevelRec(1), epochRec(1, 1))
	for id := int32(1); id <= 3; id++ {
		img = applyBatch(t, img, registerRec(id, fmt.Sprint("incarnation-", id)))
	}
	return applyBatch(t, img, unfenceRec(1, 2), unfenceRec(2, 3), unfenceRec(3, 4))
}

// topicsRecs creates topic "a" (a-0: replicas 1,2,3 led by 1; a-1: 2,3,1
// led by 2) and topic "b" (b-0: replicas 2,3 led by 2, nothing on broker 1).
func topicsRecs() []*keelpb.Record {
	return []*keelpb.Record{
		topicRec("a", topicA),
		partitionRec(topicA, 0, []int32{1, 2, 3}, []int32{1, 2, 3}, 1),
		partitionRec(topicA, 1, []int32{2, 3, 1}, []int32{2, 3, 1}, 2),
		topicRec("b", topicB),
		partitionRec(topicB, 0, []int32{2, 3}, []int32{2, 3}, 2),
	}
}

// describeChanges renders changes one line each, in delivery order.
func describeChanges(ch ReplicaChanges) []string {
	var out []string
	for _, s := range ch.Stopped {
		out = append(out, fmt.Sprintf("stop %s-%d(%x) delete=%v", s.Topic, s.Partition, s.TopicID[0], s.Delete))
	}
	for _, p := range ch.Leaders {
		out = append(out, fmt.Sprintf("leader %s-%d(%x) epoch=%d/%d isr=%v", p.Topic, p.Partition, p.TopicID[0], p.LeaderEpoch, p.PartitionEpoch, p.ISR))
	}
	for _, p := range ch.Followers {
		out = append(out, fmt.Sprintf("follower %s-%d(%x) leader=%d epoch=%d/%d isr=%v", p.Topic, p.Partition, p.TopicID[0], p.Leader, p.LeaderEpoch, p.PartitionEpoch, p.ISR))
	}
	return out
}

func TestDiffReplicas(t *testing.T) {
	cluster := clusterImage(t)
	withTopics := applyBatch(t, cluster, topicsRecs()...)
	// A broker that lost its stream while topic "a" was deleted and created
	// again, and gets a snapshot of the result.
	recreated := applyBatch(t, applyBatch(t, withTopics, removeTopicRec(topicA)),
		topicRec("a", topicA2), partitionRec(topicA2, 0, []int32{3, 1}, []int32{3, 1}, 3))

	tests := []struct {
		name   string
		before *fsm.Image
		// after is before plus these records, as one batch, unless image is set.
		records []*keelpb.Record
		image   *fsm.Image
		want    []string
	}{
		{
			name:   "new partitions: led here, followed here, and none of this broker's",
			before: cluster, records: topicsRecs(),
			want: []string{"leader a-0(a) epoch=0/0 isr=[1 2 3]", "follower a-1(a) leader=2 epoch=0/0 isr=[2 3 1]"},
		},
		{
			name:   "an ISR change alone calls no role method",
			before: withTopics, records: []*keelpb.Record{changeRec(topicA, 0, nil, []int32{1, 2}, nil), changeRec(topicA, 1, nil, []int32{2, 1}, nil)},
		},
		{
			name:   "a change of another broker's partition",
			before: withTopics, records: []*keelpb.Record{changeRec(topicB, 0, leaderID(3), nil, nil)},
		},
		{
			name:   "leadership moved away: become follower",
			before: withTopics, records: []*keelpb.Record{changeRec(topicA, 0, leaderID(2), []int32{2, 3}, nil)},
			want: []string{"follower a-0(a) leader=2 epoch=1/1 isr=[2 3]"},
		},
		{
			name:   "leadership moved here: become leader",
			before: withTopics, records: []*keelpb.Record{changeRec(topicA, 1, leaderID(1), nil, nil)},
			want: []string{"leader a-1(a) epoch=1/1 isr=[2 3 1]"},
		},
		{
			name:   "the leader moved between two other brokers: follow the new one",
			before: withTopics, records: []*keelpb.Record{changeRec(topicA, 1, leaderID(3), nil, nil)},
			want: []string{"follower a-1(a) leader=3 epoch=1/1 isr=[2 3 1]"},
		},
		{
			name:   "the same leader at a new epoch (a replica removed): become leader again",
			before: withTopics, records: []*keelpb.Record{changeRec(topicA, 0, nil, []int32{1, 2}, []int32{1, 2})},
			want: []string{"leader a-0(a) epoch=1/1 isr=[1 2]"},
		},
		{
			name:   "the partition lost its leader: follow no one",
			before: withTopics, records: []*keelpb.Record{changeRec(topicA, 1, leaderID(fsm.NoLeader), []int32{2}, nil)},
			want: []string{"follower a-1(a) leader=-1 epoch=1/1 isr=[2]"},
		},
		{
			name:   "topic deleted: stop and delete its replicas here",
			before: withTopics, records: []*keelpb.Record{removeTopicRec(topicA)},
			want: []string{"stop a-0(a) delete=true", "stop a-1(a) delete=true"},
		},
		{
			name:   "reassigned off this broker: stop and delete",
			before: withTopics, records: []*keelpb.Record{changeRec(topicA, 1, nil, []int32{2, 3}, []int32{2, 3})},
			want: []string{"stop a-1(a) delete=true"},
		},
		{
			name:   "added to a partition's replicas: become follower",
			before: withTopics, records: []*keelpb.Record{changeRec(topicB, 0, nil, nil, []int32{2, 3, 1})},
			want: []string{"follower b-0(b) leader=2 epoch=0/1 isr=[2 3]"},
		},
		{
			name:   "a snapshot after an outage: the topic deleted meanwhile is stopped, the new one of the same name started",
			before: withTopics, image: recreated,
			want: []string{"stop a-0(a) delete=true", "stop a-1(a) delete=true", "follower a-0(c) leader=3 epoch=0/0 isr=[3 1]"},
		},
		{
			// The broker's image starts empty in every process, so the diff
			// cannot know what it held before: StrayReplicas is for that.
			name:   "after a restart the first image knows nothing of deleted topics",
			before: fsm.Empty(), image: recreated,
			want: []string{"follower a-0(c) leader=3 epoch=0/0 isr=[3 1]"},
		},
		{
			name:   "the same image: nothing",
			before: withTopics, image: withTopics,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			after := tt.image
			if after == nil {
				after = applyBatch(t, tt.before, tt.records...)
			}
			ch := DiffReplicas(1, tt.before, after)
			if got := describeChanges(ch); !slices.Equal(got, tt.want) {
				t.Fatalf("changes for broker 1:\n got %q\nwant %q", got, tt.want)
			}
			if ch.Empty() != (len(tt.want) == 0) {
				t.Fatalf("Empty() = %v with %d changes", ch.Empty(), len(tt.want))
			}
		})
	}
}

func TestStrayReplicas(t *testing.T) {
	img := applyBatch(t, clusterImage(t), topicsRecs()...)
	img = applyBatch(t, img, changeRec(topicA, 1, nil, []int32{2, 3}, []int32{2, 3}))
	held := []TopicPartition{
		{topicA, 0},  // still assigned here
		{topicA, 1},  // reassigned away
		{topicB, 0},  // never this broker's (held by mistake)
		{topicA2, 0}, // a topic that no longer exists
		{topicA, 7},  // a partition that never existed
	}
	got := StrayReplicas(img, 1, held)
	want := []TopicPartition{{topicA, 1}, {topicB, 0}, {topicA2, 0}, {topicA, 7}}
	if !slices.Equal(got, want) {
		t.Fatalf("StrayReplicas = %v, want %v", got, want)
	}
}

func TestOtherShuttingDown(t *testing.T) {
	shuttingDown := func(id int32, epoch int64) *keelpb.Record {
		return &keelpb.Record{Record: &keelpb.Record_BrokerShuttingDown{BrokerShuttingDown: &keelpb.BrokerShuttingDownRecord{BrokerId: id, BrokerEpoch: epoch}}}
	}
	base := clusterImage(t)
	two := applyBatch(t, base, shuttingDown(2, 3))
	tests := []struct {
		name string
		img  *fsm.Image
		self int32
		want bool
	}{
		{"nobody shutting down", base, 1, false},
		{"another broker shutting down", two, 1, true},
		{"only this broker shutting down", two, 2, false},
		{"its shutdown over (fenced)", applyBatch(t, two, &keelpb.Record{Record: &keelpb.Record_FenceBroker{FenceBroker: &keelpb.FenceBrokerRecord{BrokerId: 2, BrokerEpoch: 3}}}), 1, false},
	}
	for _, tt := range tests {
		if got := otherShuttingDown(tt.img, tt.self); got != tt.want {
			t.Errorf("%s: otherShuttingDown(broker %d) = %v, want %v", tt.name, tt.self, got, tt.want)
		}
	}
}
