package kafka

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// ctlAdminFake is what fakeMeta keeps for the controller admin APIs; its
// fields are guarded by fakeMeta.mu.
type ctlAdminFake struct {
	// err, when set, is every call's answer.
	err error
	// reassigning are the ongoing reassignments, by partition.
	reassigning map[topicPartition][]int32
	// refuse are partitions whose reassignment the controller refuses,
	// alone or in a plan (which it then refuses whole).
	refuse map[topicPartition]bool
	// reassignCalls counts AlterPartitionReassignments calls.
	reassignCalls int
	// quorum is DescribeQuorum's answer.
	quorum *keelpb.DescribeQuorumResponse
	// features are the UpdateFeatures requests, in order.
	features []*keelpb.UpdateFeaturesRequest
}

// withCtl runs fn on the fake's controller state, under its lock: tests
// set and read it while the listener's goroutines use it.
func (m *fakeMeta) withCtl(fn func(*ctlAdminFake)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fn(&m.ctl)
}

func (m *fakeMeta) ctlErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ctl.err
}

// ElectLeaders elects each partition's first replica (preferred), or
// answers as the controller does when it need not or cannot.
func (m *fakeMeta) ElectLeaders(_ context.Context, req *keelpb.ElectLeadersRequest) (*keelpb.ElectLeadersResponse, error) {
	m.forwarded(req.GetPrincipal())
	if err := m.ctlErr(); err != nil {
		return nil, err
	}
	img := m.Image()
	parts := req.GetPartitions()
	if req.GetAll() {
		for _, t := range img.Topics() {
			for _, p := range img.Partitions(t.ID) {
				parts = append(parts, &keelpb.TopicPartition{Topic: t.Name, Partition: p.Partition})
			}
		}
	}
	resp := &keelpb.ElectLeadersResponse{}
	for _, tp := range parts {
		res := &keelpb.ElectionResult{Topic: tp.GetTopic(), Partition: tp.GetPartition(), Leader: fsm.NoLeader}
		resp.Results = append(resp.Results, res)
		t, ok := img.Topic(tp.GetTopic())
		var p *fsm.Partition
		if ok {
			p, ok = img.Partition(t.ID, tp.GetPartition())
		}
		switch {
		case !ok:
			res.Error, res.Reason = "unknown topic or partition", "UNKNOWN_TOPIC_OR_PARTITION"
		case req.GetType() == keelpb.ElectionType_ELECTION_TYPE_UNCLEAN && p.HasLeader(),
			req.GetType() == keelpb.ElectionType_ELECTION_TYPE_PREFERRED && p.Leader == p.Replicas[0]:
			res.Leader, res.Error, res.Reason = p.Leader, "election not needed", "ELECTION_NOT_NEEDED"
		case req.GetType() == keelpb.ElectionType_ELECTION_TYPE_UNCLEAN:
			res.Error, res.Reason = "no live replica can lead", "ELIGIBLE_LEADERS_NOT_AVAILABLE"
		default:
			m.moveLeader(tp.GetTopic(), tp.GetPartition(), p.Replicas[0])
			res.Leader = p.Replicas[0]
		}
	}
	return resp, nil
}

// AlterPartitionReassignments starts or cancels reassignments, all or
// none, as the controller decides a plan.
func (m *fakeMeta) AlterPartitionReassignments(_ context.Context, req *keelpb.AlterPartitionReassignmentsRequest) (*keelpb.AlterPartitionReassignmentsResponse, error) {
	m.forwarded(req.GetPrincipal())
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ctl.reassignCalls++
	if m.ctl.err != nil {
		return nil, m.ctl.err
	}
	plan := req.GetPartitions()
	if len(plan) == 0 {
		plan = []*keelpb.ReassignmentTarget{{Topic: req.GetTopic(), Partition: req.GetPartition(), Replicas: req.GetReplicas()}}
	}
	for i, t := range plan {
		tp := topicPartition{t.GetTopic(), t.GetPartition()}
		_, moving := m.ctl.reassigning[tp]
		switch {
		case m.ctl.refuse[tp]:
			return nil, rpc.WithReason(codes.FailedPrecondition, rpc.ReasonInvalidReplicaAssignment, fmt.Sprintf("partitions[%d]: replicas %v refused", i, t.GetReplicas()))
		case len(t.GetReplicas()) == 0 && !moving:
			return nil, rpc.WithReason(codes.FailedPrecondition, rpc.ReasonNoReassignmentInProgress, fmt.Sprintf("no reassignment in progress: %s/%d", tp.topic, tp.partition))
		}
	}
	if m.ctl.reassigning == nil {
		m.ctl.reassigning = map[topicPartition][]int32{}
	}
	for _, t := range plan {
		tp := topicPartition{t.GetTopic(), t.GetPartition()}
		if len(t.GetReplicas()) == 0 {
			delete(m.ctl.reassigning, tp)
		} else {
			m.ctl.reassigning[tp] = t.GetReplicas()
		}
	}
	return &keelpb.AlterPartitionReassignmentsResponse{}, nil
}

// ListPartitionReassignments lists the ongoing reassignments, each adding
// its whole target.
func (m *fakeMeta) ListPartitionReassignments(context.Context) (*keelpb.ListPartitionReassignmentsResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctl.err != nil {
		return nil, m.ctl.err
	}
	resp := &keelpb.ListPartitionReassignmentsResponse{}
	for tp, replicas := range m.ctl.reassigning {
		resp.Reassignments = append(resp.Reassignments, &keelpb.Reassignment{Topic: tp.topic, Partition: tp.partition,
			Replicas: append([]int32{1}, replicas...), AddingReplicas: replicas, RemovingReplicas: []int32{1}})
	}
	return resp, nil
}

// UpdateFeatures moves the finalized level, refusing as the controller
// does a level outside 1-3 or a direction that does not match downgrade.
func (m *fakeMeta) UpdateFeatures(_ context.Context, req *keelpb.UpdateFeaturesRequest) (*keelpb.UpdateFeaturesResponse, error) {
	m.forwarded(req.GetPrincipal())
	m.mu.Lock()
	m.ctl.features = append(m.ctl.features, req)
	err := m.ctl.err
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	cur, level := m.Image().FinalizedMetadataVersion(), req.GetMetadataVersion()
	switch {
	case level > fsm.MaxMetadataVersion:
		return nil, rpc.WithReason(codes.FailedPrecondition, rpc.ReasonUnsupportedMetadataVersion, fmt.Sprintf("broker 1 supports 1-%d", fsm.MaxMetadataVersion))
	case level < cur && !req.GetDowngrade():
		return nil, rpc.InvalidArgument("metadata_version", "%d is below the current %d", level, cur)
	}
	if !req.GetValidateOnly() && level != cur {
		if err := m.apply(&keelpb.Record{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{Name: fsm.MetadataVersionFeature, Level: level}}}); err != nil {
			return nil, rpc.WithReason(codes.FailedPrecondition, rpc.ReasonUnsupportedMetadataVersion, err.Error())
		}
	}
	return &keelpb.UpdateFeaturesResponse{PreviousMetadataVersion: cur, MetadataVersion: level}, nil
}

// DescribeQuorum answers the quorum set with setQuorum.
func (m *fakeMeta) DescribeQuorum(context.Context) (*keelpb.DescribeQuorumResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctl.err != nil {
		return nil, m.ctl.err
	}
	if m.ctl.quorum == nil {
		return nil, status.Error(codes.Unavailable, "no quorum in this fake")
	}
	return m.ctl.quorum, nil
}
