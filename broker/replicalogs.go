package broker

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// ReplicaLog is one replica's log as its data plane reports it
// (Link.ReportReplicaLogs): Kafka's GetReplicaLogInfo answer (KIP-966).
type ReplicaLog struct {
	TopicID   fsm.TopicID
	Partition int32
	// LeaderEpoch is the partition's leader epoch in the image the report
	// was made from.
	LeaderEpoch int32
	// LastEpoch is the highest leader epoch in the log, -1 for a log that
	// holds none.
	LastEpoch int32
	EndOffset int64
}

// ReplicaLogAhead reports whether a log whose highest leader epoch is
// lastEpoch is ahead of a partition the metadata gives leaderEpoch. Leader
// epochs only grow, and a replica takes records only at the leader epoch
// its metadata shows (KIP-101, KIP-320), so this happens only when the
// metadata went back (a restore): the replica must then neither lead nor
// truncate, but report its log.
func ReplicaLogAhead(lastEpoch, leaderEpoch int32) bool { return lastEpoch > leaderEpoch }

// ReportReplicaLogs sends the active controller the logs of some of this
// broker's replicas, stamped with its id and current broker epoch (Link).
// Before the broker has registered it fails with Unavailable.
func (a *Agent) ReportReplicaLogs(ctx context.Context, logs []ReplicaLog) error {
	epoch := a.currentEpoch()
	if epoch == 0 {
		return status.Errorf(codes.Unavailable, "broker %d has not registered yet", a.cfg.BrokerID)
	}
	req := &keelpb.ReportReplicaLogsRequest{BrokerId: a.cfg.BrokerID, BrokerEpoch: epoch, Replicas: make([]*keelpb.ReplicaLog, len(logs))}
	for i, l := range logs {
		req.Replicas[i] = &keelpb.ReplicaLog{TopicId: l.TopicID.String(), Partition: l.Partition, CurrentLeaderEpoch: l.LeaderEpoch,
			LastWrittenLeaderEpoch: l.LastEpoch, LogEndOffset: l.EndOffset}
	}
	return a.client.Write(ctx, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		_, err := cl.ReportReplicaLogs(ctx, req)
		return err
	})
}
