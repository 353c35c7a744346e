package controller

import (
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// The replication throttles (leader.replication.throttled.rate,
// follower.replication.throttled.rate) cap only the replicas a
// reassignment adds, so they matter only while one is in progress: `keel
// partition reassign --throttle` and `keel broker drain --throttle` set
// them before a move, and the decision whose batch ends the last
// reassignment in progress deletes them in the same batch (Kafka's
// `kafka-reassign-partitions --verify` removes the throttle it set once
// the moves are done). Always, whoever set them: Keel keeps no marker of
// who did, and a rate no move uses throttles nothing; an operator who wants
// every move capped gives --throttle to each.

// throttleConfigs are the configs the end of the last move deletes.
var throttleConfigs = []string{fsm.FollowerReplicationThrottledRate, fsm.LeaderReplicationThrottledRate}

// liftThrottles returns the records that delete the throttles set, when
// the batch that takes before to after ends the last reassignment in
// progress; else none. Deleting a set config is valid at any level, so the
// batch stays one the FSM accepts.
func liftThrottles(before, after *fsm.Image) []*keelpb.Record {
	if before.Reassignments() == 0 || after.Reassignments() > 0 {
		return nil
	}
	var recs []*keelpb.Record
	for _, name := range throttleConfigs {
		if _, ok := after.ClusterConfig(name); ok {
			recs = append(recs, &keelpb.Record{Record: &keelpb.Record_Config{Config: &keelpb.ConfigRecord{
				ResourceType: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER, Name: name}}})
		}
	}
	return recs
}
