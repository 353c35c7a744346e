package controller

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

func TestTopics_CreateRules(t *testing.T) {
	assign := func(rs ...[]int32) []*keelpb.PartitionAssignment {
		var out []*keelpb.PartitionAssignment
		for _, r := range rs {
			out = append(out, &keelpb.PartitionAssignment{Replicas: r})
		}
		return out
	}
	long := strings.Repeat("x", 250)
	tests := []struct {
		name      string
		req       *keelpb.CreateTopicRequest
		wantErr   error
		wantField string
	}{
		{name: "placed", req: &keelpb.CreateTopicRequest{Name: "orders", Partitions: 6, ReplicationFactor: 3}},
		{name: "explicit assignment", req: &keelpb.CreateTopicRequest{Name: "orders", Assignments: assign([]int32{1, 2}, []int32{4, 3})}},
		{name: "taken name", req: &keelpb.CreateTopicRequest{Name: "t", Partitions: 1, ReplicationFactor: 1}, wantErr: ErrTopicExists},
		{name: "'.' and '_' collide", req: &keelpb.CreateTopicRequest{Name: "a_b", Partitions: 1, ReplicationFactor: 1}, wantField: "name"},
		{name: "empty name", req: &keelpb.CreateTopicRequest{Partitions: 1, ReplicationFactor: 1}, wantField: "name"},
		{name: "name too long", req: &keelpb.CreateTopicRequest{Name: long, Partitions: 1, ReplicationFactor: 1}, wantField: "name"},
		{name: "name '..'", req: &keelpb.CreateTopicRequest{Name: "..", Partitions: 1, ReplicationFactor: 1}, wantField: "name"},
		{name: "bad character", req: &keelpb.CreateTopicRequest{Name: "a/b", Partitions: 1, ReplicationFactor: 1}, wantField: "name"},
		{name: "no partitions", req: &keelpb.CreateTopicRequest{Name: "x", ReplicationFactor: 1}, wantField: "partitions"},
		{name: "no replication factor", req: &keelpb.CreateTopicRequest{Name: "x", Partitions: 1}, wantField: "replication_factor"},
		{name: "replication factor above the brokers", req: &keelpb.CreateTopicRequest{Name: "x", Partitions: 1, ReplicationFactor: 5}, wantField: "replication_factor"},
		{name: "duplicate replica", req: &keelpb.CreateTopicRequest{Name: "x", Assignments: assign([]int32{1, 1})}, wantField: "assignments"},
		{name: "unregistered broker", req: &keelpb.CreateTopicRequest{Name: "x", Assignments: assign([]int32{1, 9})}, wantField: "assignments"},
		{name: "unequal replication factors", req: &keelpb.CreateTopicRequest{Name: "x", Assignments: assign([]int32{1, 2}, []int32{3})}, wantField: "assignments"},
		{name: "only fenced replicas", req: &keelpb.CreateTopicRequest{Name: "x", Assignments: assign([]int32{4})}, wantField: "assignments"},
		{name: "partition count disagrees with assignments", req: &keelpb.CreateTopicRequest{Name: "x", Partitions: 3, Assignments: assign([]int32{1})}, wantField: "partitions"},
		{name: "unknown config", req: &keelpb.CreateTopicRequest{Name: "x", Partitions: 1, ReplicationFactor: 1, Configs: map[string]string{"retention.hours": "1"}}, wantField: "configs"},
		{name: "bad config value", req: &keelpb.CreateTopicRequest{Name: "x", Partitions: 1, ReplicationFactor: 1, Configs: map[string]string{fsm.UncleanLeaderElection: "yes"}}, wantField: "configs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := fixture(t, false, []*keelpb.Record{{Record: &keelpb.Record_Topic{Topic: &keelpb.TopicRecord{Name: "a.b", TopicId: []byte("0123456789abcdef")}}}})
			recs, err := createTopicRecords(img, tt.req, fsm.TopicID{0x42}, 0)
			var fe *FieldError
			switch {
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			case tt.wantField != "":
				if !errors.As(err, &fe) || fe.Field != tt.wantField {
					t.Fatalf("err = %v, want an error naming %s", err, tt.wantField)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			after := apply(t, img, recs)
			topic, _ := after.Topic(tt.req.Name)
			for _, p := range after.Partitions(topic.ID) {
				// Leader and ISR only from active brokers, in assignment order.
				var want []int32
				for _, b := range p.Replicas {
					if b != 4 {
						want = append(want, b)
					}
				}
				if !slices.Equal(p.ISR, want) || p.Leader != want[0] {
					t.Fatalf("partition %d: replicas %v isr %v leader %d", p.Partition, p.Replicas, p.ISR, p.Leader)
				}
			}
		})
	}
}

func TestTopics_PlacementIsRackAwareAndSpreadsLeaders(t *testing.T) {
	var brokers []*fsm.Broker
	for i := int32(1); i <= 6; i++ {
		brokers = append(brokers, &fsm.Broker{ID: i, Rack: []string{"a", "b", "c"}[i%3]})
	}
	rack := map[int32]string{}
	for _, b := range brokers {
		rack[b.ID] = b.Rack
	}
	placed := placeReplicas(brokers, 0, 60, 3, 7)
	leaders := map[int32]int{}
	for i, rs := range placed {
		if len(rs) != 3 {
			t.Fatalf("partition %d: %v", i, rs)
		}
		racks := map[string]bool{}
		for _, b := range rs {
			racks[rack[b]] = true
		}
		if len(racks) != 3 {
			t.Fatalf("partition %d: replicas %v share a rack", i, rs)
		}
		leaders[rs[0]]++
	}
	for id, n := range leaders {
		if n != 10 {
			t.Fatalf("broker %d is preferred leader of %d partitions, want 10 each: %v", id, n, leaders)
		}
	}
	// With fewer racks than replicas, replicas still differ.
	for i, rs := range placeReplicas(brokers[:4], 0, 20, 4, 0) {
		if len(slices.Compact(slices.Sorted(slices.Values(rs)))) != 4 {
			t.Fatalf("partition %d: %v", i, rs)
		}
	}
}

func TestTopics_AddPartitionsAndDelete(t *testing.T) {
	img := fixture(t, false)
	recs, err := createPartitionsRecords(img, &keelpb.CreatePartitionsRequest{Topic: "t", Count: 4}, 0)
	if err != nil {
		t.Fatal(err)
	}
	img = apply(t, img, recs)
	topic, _ := img.Topic("t")
	if topic.Partitions != 4 || len(img.Partitions(tid)[3].Replicas) != 3 {
		t.Fatalf("after adding: %d partitions", topic.Partitions)
	}
	var fe *FieldError
	if _, err := createPartitionsRecords(img, &keelpb.CreatePartitionsRequest{Topic: "t", Count: 2}, 0); !errors.As(err, &fe) || fe.Field != "count" {
		t.Fatalf("shrinking: err = %v", err)
	}
	if _, err := createPartitionsRecords(img, &keelpb.CreatePartitionsRequest{Topic: "nope", Count: 2}, 0); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("unknown topic: err = %v", err)
	}
	recs, err = deleteTopicRecords(img, "t")
	if err != nil {
		t.Fatal(err)
	}
	img = apply(t, img, recs)
	if img.TopicCount() != 0 || img.PartitionCount() != 0 {
		t.Fatal("topic not deleted")
	}
	if _, err := deleteTopicRecords(img, "t"); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("deleting twice: err = %v", err)
	}
}
