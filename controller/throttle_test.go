package controller

import (
	"bytes"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// TestLiftThrottles: the batch that ends the last reassignment in progress
// deletes the replication throttles set, and no other batch does; the
// batch with the deletes still applies.
func TestLiftThrottles(t *testing.T) {
	rate := "2000000"
	throttle := func(name string) *keelpb.Record {
		return &keelpb.Record{Record: &keelpb.Record_Config{Config: &keelpb.ConfigRecord{
			ResourceType: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER, Name: name, Value: &rate}}}
	}
	part := func(p int32, adding ...int32) *keelpb.Record {
		replicas := append([]int32{1, 2}, adding...)
		return &keelpb.Record{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{TopicId: bytes.Clone(tid[:]), Partition: p,
			Replicas: replicas, Isr: []int32{1, 2}, Leader: 1, AddingReplicas: adding}}}
	}
	// done is the ISR change that completes partition p's move to 1,2,3.
	done := func(p int32) *keelpb.Record {
		return &keelpb.Record{Record: &keelpb.Record_PartitionChange{PartitionChange: &keelpb.PartitionChangeRecord{
			TopicId: bytes.Clone(tid[:]), Partition: p, Isr: &keelpb.Int32List{Values: []int32{1, 2, 3}},
			AddingReplicas: &keelpb.Int32List{}}}}
	}
	tests := []struct {
		name      string
		setup     []*keelpb.Record
		batch     []*keelpb.Record
		wantLifts []string
	}{
		{"the last move ends", []*keelpb.Record{part(0, 3), throttle(fsm.LeaderReplicationThrottledRate), throttle(fsm.FollowerReplicationThrottledRate)},
			[]*keelpb.Record{done(0)}, throttleConfigs},
		{"only the leader rate set", []*keelpb.Record{part(0, 3), throttle(fsm.LeaderReplicationThrottledRate)},
			[]*keelpb.Record{done(0)}, []string{fsm.LeaderReplicationThrottledRate}},
		{"another move goes on", []*keelpb.Record{part(0, 3), part(1, 3), throttle(fsm.LeaderReplicationThrottledRate)},
			[]*keelpb.Record{done(0)}, nil},
		{"no throttle set", []*keelpb.Record{part(0, 3)}, []*keelpb.Record{done(0)}, nil},
		// Set before the move starts: no move was in progress to end.
		{"set before any move", []*keelpb.Record{part(0)}, []*keelpb.Record{throttle(fsm.LeaderReplicationThrottledRate)}, nil},
		{"the moving topic deleted", []*keelpb.Record{part(0, 3), throttle(fsm.FollowerReplicationThrottledRate)},
			[]*keelpb.Record{{Record: &keelpb.Record_RemoveTopic{RemoveTopic: &keelpb.RemoveTopicRecord{TopicId: bytes.Clone(tid[:])}}}},
			[]string{fsm.FollowerReplicationThrottledRate}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &replicationCtx{t: t, img: fsm.Empty()}
			c.replay([]*keelpb.Record{
				{Record: &keelpb.Record_ClusterId{ClusterId: &keelpb.ClusterIdRecord{ClusterId: "c1"}}},
				{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{Name: fsm.MetadataVersionFeature, Level: fsm.ThrottleMetadataVersion}}},
				{Record: &keelpb.Record_ControllerEpoch{ControllerEpoch: &keelpb.ControllerEpochRecord{Epoch: 1, LeaderId: 1}}},
			})
			for _, id := range []int32{1, 2, 3} {
				rec := regRecord(id, incA)
				rec.GetBrokerRegistration().MaxMetadataVersion = fsm.MaxMetadataVersion
				c.replay([]*keelpb.Record{rec})
			}
			c.replay(append([]*keelpb.Record{{Record: &keelpb.Record_Topic{Topic: &keelpb.TopicRecord{Name: "t", TopicId: bytes.Clone(tid[:])}}}}, tt.setup...))
			before := c.img
			c.replay(tt.batch)
			lifts := liftThrottles(before, c.img)
			var got []string
			for _, r := range lifts {
				if r.GetConfig().Value != nil {
					t.Fatalf("a lift sets %s", r.GetConfig().GetName())
				}
				got = append(got, r.GetConfig().GetName())
			}
			if len(got) != len(tt.wantLifts) || (len(got) > 0 && got[0] != tt.wantLifts[0]) || (len(got) > 1 && got[1] != tt.wantLifts[1]) {
				t.Fatalf("lifts %v, want %v", got, tt.wantLifts)
			}
			// The decision's batch with the lifts applies, and leaves no throttle.
			after, err := fsm.Apply(before, before.Offset+1, 1, &keelpb.RecordBatch{Records: append(tt.batch, lifts...)})
			if err != nil {
				t.Fatal(err)
			}
			if len(lifts) > 0 {
				if l, f := after.ReplicationThrottle(); l != 1<<63-1 || f != 1<<63-1 {
					t.Fatalf("throttles %d, %d remain", l, f)
				}
			}
		})
	}
}
