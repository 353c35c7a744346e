package controller

import (
	"errors"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// TestTopics_InternalTopicRules: __consumer_offsets is created only by a
// broker's internal request, with the controller's configs whatever the
// request sends, and no one deletes it or adds partitions to it.
func TestTopics_InternalTopicRules(t *testing.T) {
	for _, tc := range []struct {
		name      string
		req       *keelpb.CreateTopicRequest
		wantField string
	}{
		{name: "a user creating it", req: &keelpb.CreateTopicRequest{Name: fsm.OffsetsTopic, Partitions: 3, ReplicationFactor: 1, Principal: "User:alice"}, wantField: "name"},
		{name: "an internal request for another topic", req: &keelpb.CreateTopicRequest{Name: "orders", Partitions: 1, ReplicationFactor: 1, Internal: true}, wantField: "name"},
		{name: "the broker's request", req: &keelpb.CreateTopicRequest{Name: fsm.OffsetsTopic, Partitions: 3, ReplicationFactor: 3, Internal: true,
			Configs: map[string]string{fsm.RetentionMs: "1000"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := fixture(t, false)
			recs, err := createTopicRecords(img, tc.req, fsm.TopicID{0x42}, 0)
			if tc.wantField != "" {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != tc.wantField {
					t.Fatalf("err = %v, want an error naming %s", err, tc.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			img = apply(t, img, recs)
			topic, ok := img.Topic(fsm.OffsetsTopic)
			if !ok || topic.Partitions != 3 {
				t.Fatalf("topic %+v", topic)
			}
			want := fsm.InternalTopicConfigs(img.FinalizedMetadataVersion(), tc.req.ReplicationFactor)
			// A majority of its 3 replicas must hold an acknowledged commit.
			if got := topic.Configs[fsm.MinInsyncReplicas]; got != "2" {
				t.Fatalf("min.insync.replicas %q, want 2 of its 3 replicas", got)
			}
			if len(topic.Configs) != len(want) {
				t.Fatalf("configs %v, want %v", topic.Configs, want)
			}
			for k, v := range want {
				if topic.Configs[k] != v {
					t.Fatalf("configs %v, want %v", topic.Configs, want)
				}
			}
			var fe *FieldError
			if _, err := deleteTopicRecords(img, fsm.OffsetsTopic); !errors.As(err, &fe) || fe.Field != "name" {
				t.Fatalf("deleting it: err = %v", err)
			}
			if _, err := createPartitionsRecords(img, &keelpb.CreatePartitionsRequest{Topic: fsm.OffsetsTopic, Count: 4}, 0); !errors.As(err, &fe) || fe.Field != "topic" {
				t.Fatalf("adding partitions: err = %v", err)
			}
		})
	}
}
