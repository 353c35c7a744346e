package fsm

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/keel-dev/keel/proto/keelpb"
)

// reassign is a PartitionChangeRecord that sets a partition's replicas,
// adding and removing replicas (a reassignment's start or end).
func reassign(id TopicID, p int32, replicas, adding, removing []int32) *keelpb.Record {
	r := &keelpb.PartitionChangeRecord{TopicId: bytes.Clone(id[:]), Partition: p,
		Replicas: &keelpb.Int32List{Values: replicas}, AddingReplicas: &keelpb.Int32List{Values: adding},
		RemovingReplicas: &keelpb.Int32List{Values: removing}}
	return &keelpb.Record{Record: &keelpb.Record_PartitionChange{PartitionChange: r}}
}

// completed sets a reassignment's end record's ISR.
func completed(rec *keelpb.Record, isr []int32) *keelpb.Record {
	rec.GetPartitionChange().Isr = &keelpb.Int32List{Values: isr}
	rec.GetPartitionChange().Leader = leader(isr[0])
	return rec
}

// TestFSM_ReplicationThrottleConfigs: the throttles are broker configs,
// the cluster's only, from metadata.version 6 (ThrottleMetadataVersion):
// a binary below it refuses their names, so no record names one below it.
func TestFSM_ReplicationThrottleConfigs(t *testing.T) {
	tests := []struct {
		name    string
		level   uint32
		rec     *keelpb.Record
		wantErr string
		leader  int64
	}{
		{"set cluster-wide", ThrottleMetadataVersion, configRec("", LeaderReplicationThrottledRate, str("2000000")), "", 2000000},
		{"zero stops moves", ThrottleMetadataVersion, configRec("", LeaderReplicationThrottledRate, str("0")), "", 0},
		{"below the level", CompactionMetadataVersion, configRec("", LeaderReplicationThrottledRate, str("2000000")),
			"leader.replication.throttled.rate needs metadata.version 6; the cluster is at 5", math.MaxInt64},
		{"on a topic", ThrottleMetadataVersion, configRec("a", LeaderReplicationThrottledRate, str("1")), "is a broker config", math.MaxInt64},
		{"in a new topic's configs", ThrottleMetadataVersion, topicRec("b", topicB, map[string]string{FollowerReplicationThrottledRate: "1"}),
			"is a broker config", math.MaxInt64},
		{"negative", ThrottleMetadataVersion, configRec("", FollowerReplicationThrottledRate, str("-1")), "outside [0,...]", math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := withTopicsAt(t, tt.level)
			next, err := Apply(img, img.Offset+1, 1, batch(tt.rec))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				next = img
			} else if err != nil {
				t.Fatal(err)
			}
			if l, f := next.ReplicationThrottle(); l != tt.leader || f != math.MaxInt64 {
				t.Fatalf("throttle = %d, %d; want %d, unlimited", l, f, tt.leader)
			}
		})
	}
	// The level cannot go below 6 while a throttle is set.
	img := apply1(t, withTopicsAt(t, ThrottleMetadataVersion), configRec("", FollowerReplicationThrottledRate, str("1")))
	if _, err := Apply(img, img.Offset+1, 1, batch(featureLevel(CompactionMetadataVersion))); !errors.Is(err, ErrUnsafeDowngrade) {
		t.Fatalf("downgrade with a throttle set: %v", err)
	}
}

// TestFSM_Reassignments: the image counts the partitions with a
// reassignment in progress, as PartitionChange and RemoveTopic records
// start, end and drop them, and a snapshot keeps the count.
func TestFSM_Reassignments(t *testing.T) {
	steps := []struct {
		name string
		recs []*keelpb.Record
		want int
	}{
		{"start one", []*keelpb.Record{reassign(topicA, 0, []int32{2, 3, 1}, []int32{2}, []int32{1})}, 1},
		{"start another", []*keelpb.Record{reassign(topicA, 1, []int32{2, 3, 1}, []int32{1}, nil)}, 2},
		{"an ISR change keeps it", []*keelpb.Record{change(topicA, 1, nil, []int32{2, 3}, nil)}, 2},
		{"complete one", []*keelpb.Record{completed(reassign(topicA, 0, []int32{2, 3}, nil, nil), []int32{2, 3})}, 1},
		{"a new topic", []*keelpb.Record{topicRec("b", topicB, nil), partRec(topicB, 0, []int32{1}, []int32{1}, 1)}, 1},
		{"remove the topic moving", []*keelpb.Record{removeTopic(topicA)}, 0},
	}
	img := withTopics(t)
	for _, s := range steps {
		img = apply1(t, img, s.recs...)
		if got := img.Reassignments(); got != s.want {
			t.Fatalf("%s: %d reassignments, want %d", s.name, got, s.want)
		}
	}
	img = apply1(t, withTopics(t), reassign(topicA, 1, []int32{2, 3, 1}, []int32{1}, nil))
	back, err := ReadSnapshot(bytes.NewReader(imageBytes(t, img)))
	if err != nil {
		t.Fatal(err)
	}
	if back.Reassignments() != 1 {
		t.Fatalf("after a snapshot: %d reassignments, want 1", back.Reassignments())
	}
}
