package server

import (
	"context"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// ReportReplicaLogs takes a broker's reports of its replicas' logs, which
// elect the partitions that await them (controller/recovery.go).
func (s *controllerService) ReportReplicaLogs(ctx context.Context, req *keelpb.ReportReplicaLogsRequest) (*keelpb.ReportReplicaLogsResponse, error) {
	logs := make([]controller.ReplicaLogReport, len(req.GetReplicas()))
	for i, l := range req.GetReplicas() {
		// rpc.Validate has checked the id.
		id, _ := fsm.ParseTopicID(l.GetTopicId())
		logs[i] = controller.ReplicaLogReport{TopicID: id, Partition: l.GetPartition(), LeaderEpoch: l.GetCurrentLeaderEpoch(),
			LastEpoch: l.GetLastWrittenLeaderEpoch(), EndOffset: l.GetLogEndOffset()}
	}
	if err := s.ctrl.ReportReplicaLogs(ctx, req.GetBrokerId(), req.GetBrokerEpoch(), logs); err != nil {
		return nil, toStatus(err)
	}
	return &keelpb.ReportReplicaLogsResponse{}, nil
}
