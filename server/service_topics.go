package server

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// CreateTopic creates a topic, or with validate_only shows its placement.
func (s *controllerService) CreateTopic(ctx context.Context, req *keelpb.CreateTopicRequest) (*keelpb.CreateTopicResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	if req.ValidateOnly {
		img, t, err := s.ctrl.PreviewTopic(ctx, req)
		if err != nil {
			return nil, toStatus(err)
		}
		return &keelpb.CreateTopicResponse{Topic: DescribeTopic(img, t)}, nil
	}
	if _, err := s.ctrl.CreateTopic(ctx, req); err != nil {
		return nil, toStatus(err)
	}
	return &keelpb.CreateTopicResponse{Topic: s.describe(req.Name)}, nil
}

// describe renders a topic from this node's image (nil if it is gone).
func (s *controllerService) describe(name string) *keelpb.TopicDescription {
	return describeIn(s.ctrl.Image(), name)
}

// describeIn renders a topic from img (nil if it has none by that name).
func describeIn(img *fsm.Image, name string) *keelpb.TopicDescription {
	t, ok := img.Topic(name)
	if !ok {
		return nil
	}
	return DescribeTopic(img, t)
}

// CreatePartitions adds partitions to a topic, or with validate_only shows
// the topic with the new partitions placed.
func (s *controllerService) CreatePartitions(ctx context.Context, req *keelpb.CreatePartitionsRequest) (*keelpb.CreatePartitionsResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	if req.ValidateOnly {
		img, t, err := s.ctrl.PreviewPartitions(ctx, req)
		if err != nil {
			return nil, toStatus(err)
		}
		return &keelpb.CreatePartitionsResponse{Topic: DescribeTopic(img, t)}, nil
	}
	if err := s.ctrl.CreatePartitions(ctx, req); err != nil {
		return nil, toStatus(err)
	}
	return &keelpb.CreatePartitionsResponse{Topic: s.describe(req.Topic)}, nil
}

// DeleteTopic removes a topic.
func (s *controllerService) DeleteTopic(ctx context.Context, req *keelpb.DeleteTopicRequest) (*keelpb.DeleteTopicResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	if err := s.ctrl.DeleteTopic(ctx, req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	return &keelpb.DeleteTopicResponse{}, nil
}

// ListTopics answers from the active controller's committed image (its
// confirmed one when the request is linearizable), or with stale from this
// node's (readImage).
func (s *controllerService) ListTopics(ctx context.Context, req *keelpb.ListTopicsRequest) (*keelpb.ListTopicsResponse, error) {
	img, src, err := s.readImage(ctx, req.GetLinearizable(), req.GetStale())
	if err != nil {
		return nil, err
	}
	resp := &keelpb.ListTopicsResponse{Source: src}
	for _, t := range img.Topics() {
		rf := 0
		if p, ok := img.Partition(t.ID, 0); ok {
			rf = len(p.Replicas) - len(p.AddingReplicas)
		}
		resp.Topics = append(resp.Topics, &keelpb.TopicSummary{Name: t.Name, Id: t.ID.String(), Partitions: t.Partitions, ReplicationFactor: int32(rf)})
	}
	return resp, nil
}

// DescribeTopic answers as ListTopics does.
func (s *controllerService) DescribeTopic(ctx context.Context, req *keelpb.DescribeTopicRequest) (*keelpb.DescribeTopicResponse, error) {
	img, src, err := s.readImage(ctx, req.GetLinearizable(), req.GetStale())
	if err != nil {
		return nil, err
	}
	d := describeIn(img, req.GetName())
	if d == nil {
		// Worded as a write's refusal (toStatus) is: describe and delete say the same.
		msg := fmt.Sprintf("%v: topic %q", controller.ErrUnknownTopic, req.GetName())
		if !src.Active {
			msg += fmt.Sprintf(" in controller %d's own image, at index %d (a stale read)", src.NodeId, src.AppliedIndex)
		}
		return nil, rpc.WithReason(codes.NotFound, rpc.ReasonUnknownTopicOrPartition, msg)
	}
	return &keelpb.DescribeTopicResponse{Topic: d, Source: src}, nil
}

// AlterPartition is a partition leader's ISR change.
func (s *controllerService) AlterPartition(ctx context.Context, req *keelpb.AlterPartitionRequest) (*keelpb.AlterPartitionResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	p, err := s.ctrl.AlterPartition(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	return &keelpb.AlterPartitionResponse{Partition: DescribePartition(p)}, nil
}

// ElectLeaders runs a preferred or unclean election.
func (s *controllerService) ElectLeaders(ctx context.Context, req *keelpb.ElectLeadersRequest) (*keelpb.ElectLeadersResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	results, err := s.ctrl.ElectLeaders(ctx, req.GetType(), req.GetPartitions(), req.GetAll())
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &keelpb.ElectLeadersResponse{}
	for _, r := range results {
		er := &keelpb.ElectionResult{Topic: r.Topic, Partition: r.Partition, Leader: r.Leader}
		if r.Err != nil {
			er.Error, er.Reason = r.Err.Error(), electionReason(req.GetType(), r.Err)
		}
		resp.Results = append(resp.Results, er)
	}
	return resp, nil
}

// electionReason is Kafka's name for why a partition's election did not
// happen (ElectionResult.reason), as Kafka's ReplicationControlManager
// answers ElectLeaders: a partition awaiting its replicas' logs has no
// leader to elect yet, as one whose replicas are all down.
func electionReason(typ keelpb.ElectionType, err error) string {
	switch {
	case errors.Is(err, controller.ErrElectionNotNeeded):
		return "ELECTION_NOT_NEEDED"
	case errors.Is(err, controller.ErrUnknownTopic):
		return "UNKNOWN_TOPIC_OR_PARTITION"
	case errors.Is(err, controller.ErrPreferredNotReady),
		errors.Is(err, controller.ErrAwaitingLogs) && typ == keelpb.ElectionType_ELECTION_TYPE_PREFERRED:
		return "PREFERRED_LEADER_NOT_AVAILABLE"
	case errors.Is(err, controller.ErrNoLiveReplica), errors.Is(err, controller.ErrAwaitingLogs):
		return "ELIGIBLE_LEADERS_NOT_AVAILABLE"
	}
	return "INVALID_REQUEST"
}

// AlterPartitionReassignments starts or (empty replicas) cancels a reassignment.
func (s *controllerService) AlterPartitionReassignments(ctx context.Context, req *keelpb.AlterPartitionReassignmentsRequest) (*keelpb.AlterPartitionReassignmentsResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	if len(req.GetPartitions()) > 0 {
		return s.reassignPlan(ctx, req.GetPartitions())
	}
	var err error
	if len(req.GetReplicas()) == 0 {
		err = s.ctrl.CancelReassignment(ctx, req.GetTopic(), req.GetPartition())
	} else {
		err = s.ctrl.Reassign(ctx, req.GetTopic(), req.GetPartition(), req.GetReplicas())
	}
	if err != nil {
		return nil, toStatus(err)
	}
	img := s.ctrl.Image()
	t, ok := img.Topic(req.GetTopic())
	if !ok {
		return nil, rpc.WithReason(codes.NotFound, rpc.ReasonUnknownTopicOrPartition, "topic "+req.GetTopic()+" was deleted meanwhile")
	}
	p, ok := img.Partition(t.ID, req.GetPartition())
	if !ok {
		return nil, rpc.WithReason(codes.NotFound, rpc.ReasonUnknownTopicOrPartition, "partition gone")
	}
	return &keelpb.AlterPartitionReassignmentsResponse{Partition: DescribePartition(p)}, nil
}

// reassignPlan starts or cancels many reassignments in one decision, and
// answers with each partition as it is once accepted.
func (s *controllerService) reassignPlan(ctx context.Context, targets []*keelpb.ReassignmentTarget) (*keelpb.AlterPartitionReassignmentsResponse, error) {
	plan := make([]controller.ReassignmentTarget, len(targets))
	for i, t := range targets {
		plan[i] = controller.ReassignmentTarget{Topic: t.GetTopic(), Partition: t.GetPartition(), Replicas: t.GetReplicas()}
	}
	if err := s.ctrl.ReassignPlan(ctx, plan); err != nil {
		return nil, toStatus(err)
	}
	img := s.ctrl.Image()
	resp := &keelpb.AlterPartitionReassignmentsResponse{Partitions: make([]*keelpb.ReassignedPartition, 0, len(plan))}
	for _, t := range plan {
		rp := &keelpb.ReassignedPartition{Topic: t.Topic}
		// A topic deleted meanwhile is left without its partition.
		if tp, ok := img.Topic(t.Topic); ok {
			if p, ok := img.Partition(tp.ID, t.Partition); ok {
				rp.Partition = DescribePartition(p)
			}
		}
		resp.Partitions = append(resp.Partitions, rp)
	}
	return resp, nil
}

// ListPartitionReassignments lists ongoing reassignments, from the image
// readImage picks.
func (s *controllerService) ListPartitionReassignments(ctx context.Context, req *keelpb.ListPartitionReassignmentsRequest) (*keelpb.ListPartitionReassignmentsResponse, error) {
	img, src, err := s.readImage(ctx, req.GetLinearizable(), req.GetStale())
	if err != nil {
		return nil, err
	}
	resp := &keelpb.ListPartitionReassignmentsResponse{Source: src}
	img.EachPartition(func(p *fsm.Partition) bool {
		if p.Reassigning() {
			t, _ := img.TopicByID(p.TopicID)
			resp.Reassignments = append(resp.Reassignments, &keelpb.Reassignment{
				Topic: t.Name, Partition: p.Partition, Replicas: p.Replicas,
				AddingReplicas: p.AddingReplicas, RemovingReplicas: p.RemovingReplicas,
			})
		}
		return true
	})
	return resp, nil
}

// DescribePartition renders a partition for the API.
func DescribePartition(p *fsm.Partition) *keelpb.PartitionDescription {
	d := &keelpb.PartitionDescription{}
	describePartition(d, p)
	return d
}

func describePartition(d *keelpb.PartitionDescription, p *fsm.Partition) {
	d.Partition, d.Leader, d.LeaderEpoch, d.PartitionEpoch = p.Partition, p.Leader, p.LeaderEpoch, p.PartitionEpoch
	d.Replicas, d.Isr = nonNil(p.Replicas), nonNil(p.ISR)
	d.AddingReplicas, d.RemovingReplicas = nonNil(p.AddingReplicas), nonNil(p.RemovingReplicas)
	d.EligibleLeaderReplicas, d.LastKnownElr = nonNil(p.ELR()), nonNil(p.LastKnownELR())
	d.LeaderRecoveryState = p.LeaderRecoveryState
}

// DescribeTopic renders a topic and its partitions for the API, with why
// each partition without a leader has none (controller.NoLeaderReason).
func DescribeTopic(img *fsm.Image, t *fsm.Topic) *keelpb.TopicDescription {
	d := &keelpb.TopicDescription{Name: t.Name, Id: t.ID.String(), Configs: t.Configs, EffectiveConfigs: configEntries(img.TopicConfigs(t))}
	parts := img.Partitions(t.ID)
	// One allocation for the descriptions rather than one each: a
	// 10,000-partition create answers with all of them.
	descs := make([]keelpb.PartitionDescription, len(parts))
	d.Partitions = make([]*keelpb.PartitionDescription, len(parts))
	for i, p := range parts {
		describePartition(&descs[i], p)
		descs[i].NoLeaderReason = controller.NoLeaderReason(img, p)
		d.Partitions[i] = &descs[i]
	}
	return d
}

// nonNil keeps empty lists as [] in JSON output rather than null.
func nonNil(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return s
}
