package rpc

import (
	"fmt"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// checkReportReplicaLogs checks a ReportReplicaLogs request's shape: the
// reporting broker, then each report's partition (a topic id and an index),
// the leader epoch the broker's metadata gives it, the log's last leader
// epoch (-1 for a log that holds none) and its end offset.
func checkReportReplicaLogs(r *keelpb.ReportReplicaLogsRequest) error {
	if err := firstError(validBrokerID(r.GetBrokerId()), validBrokerEpoch(r.GetBrokerEpoch())); err != nil {
		return err
	}
	if n := len(r.GetReplicas()); n > maxPartitionsPerRequest {
		return invalidArgument("replicas", "%d reports; at most %d in one request", n, maxPartitionsPerRequest)
	}
	for i, l := range r.GetReplicas() {
		field := func(name string) string { return fmt.Sprintf("replicas[%d].%s", i, name) }
		if err := validTopicID(l.GetTopicId()); err != nil {
			return invalidArgument(field("topic_id"), "%q is not a topic id (a UUID)", fsm.Truncate(l.GetTopicId()))
		}
		switch {
		case l.GetPartition() < 0:
			return invalidArgument(field("partition"), "%d is negative", l.GetPartition())
		case l.GetCurrentLeaderEpoch() < 0:
			return invalidArgument(field("current_leader_epoch"), "%d is negative", l.GetCurrentLeaderEpoch())
		case l.GetLastWrittenLeaderEpoch() < -1:
			return invalidArgument(field("last_written_leader_epoch"), "%d is not a leader epoch, or -1 for a log that holds none", l.GetLastWrittenLeaderEpoch())
		case l.GetLogEndOffset() < 0:
			return invalidArgument(field("log_end_offset"), "%d is negative", l.GetLogEndOffset())
		}
	}
	return nil
}
