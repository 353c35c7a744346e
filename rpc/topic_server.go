package rpc

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/grpc/codes"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// Bounds on topic requests, so that one request cannot make one raft entry
// without limit.
const (
	maxPartitionsPerRequest = 100_000
	maxReplicationFactor    = 64
	maxConfigs              = 64
	maxConfigKeyLen         = 255
	maxConfigValueLen       = 4096
)

func validPartitionCount(field string, n int32) error {
	if n < 0 || n > maxPartitionsPerRequest {
		return invalidArgument(field, "%d is outside 1..%d", n, maxPartitionsPerRequest)
	}
	return nil
}

func validAssignments(as []*keelpb.PartitionAssignment) error {
	if len(as) > maxPartitionsPerRequest {
		return invalidArgument("assignments", "%d partitions; at most %d", len(as), maxPartitionsPerRequest)
	}
	for i, a := range as {
		switch n := len(a.GetReplicas()); {
		case n == 0:
			return invalidArgument("assignments", "partition %d has no replicas", i)
		case n > maxReplicationFactor:
			return invalidArgument("assignments", "partition %d has %d replicas; at most %d", i, n, maxReplicationFactor)
		case n != len(as[0].GetReplicas()):
			return invalidArgument("assignments", "partition %d has %d replicas, partition 0 has %d: the replication factor must be equal", i, n, len(as[0].GetReplicas()))
		}
		for _, id := range a.GetReplicas() {
			if id < 0 {
				return invalidArgument("assignments", "partition %d: broker id %d is negative", i, id)
			}
		}
		if id, ok := duplicateID(a.GetReplicas()); ok {
			return invalidArgument("assignments", "partition %d names broker %d twice", i, id)
		}
	}
	return nil
}

func validConfigMap(m map[string]string) error {
	if len(m) > maxConfigs {
		return invalidArgument("configs", "%d entries; at most %d", len(m), maxConfigs)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch {
		case k == "":
			return invalidArgument("configs", "a key is empty")
		case len(k) > maxConfigKeyLen:
			return invalidArgument("configs", "key %q is longer than %d bytes", truncate(k), maxConfigKeyLen)
		case len(m[k]) > maxConfigValueLen:
			return invalidArgument("configs", "%s: the value is longer than %d bytes", truncate(k), maxConfigValueLen)
		}
	}
	return nil
}

// validTopicCounts checks a CreateTopic's partitions and replication factor
// against its assignments: without assignments both must be positive; with
// them, partitions is their number or 0.
func validTopicCounts(req *keelpb.CreateTopicRequest) error {
	n := len(req.GetAssignments())
	switch {
	case n == 0 && req.GetPartitions() < 1:
		return invalidArgument("partitions", "%d; at least 1 without assignments", req.GetPartitions())
	case n == 0 && req.GetReplicationFactor() < 1:
		return invalidArgument("replication_factor", "%d; at least 1 without assignments", req.GetReplicationFactor())
	case n > 0 && req.GetPartitions() != 0 && int(req.GetPartitions()) != n:
		return invalidArgument("partitions", "%d, but %d assignments are given", req.GetPartitions(), n)
	}
	return nil
}

// CreateTopic validates the request's shape; the controller decides the rest.
func (s *ControllerServer) CreateTopic(ctx context.Context, req *keelpb.CreateTopicRequest) (*keelpb.CreateTopicResponse, error) {
	if err := firstError(
		toStatus(controller.CheckTopicName(req.GetName())),
		validPartitionCount("partitions", req.GetPartitions()),
		validRF(req.GetReplicationFactor()),
		validAssignments(req.GetAssignments()),
		validTopicCounts(req),
		validConfigMap(req.GetConfigs()),
	); err != nil {
		return nil, err
	}
	if req.ValidateOnly {
		d, err := s.ctrl.PreviewTopic(req)
		if err != nil {
			return nil, toStatus(err)
		}
		return &keelpb.CreateTopicResponse{Topic: d}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	if _, err := s.ctrl.CreateTopic(ctx, req); err != nil {
		return nil, toStatus(err)
	}
	return &keelpb.CreateTopicResponse{Topic: s.describe(req.Name)}, nil
}

func validRF(rf int32) error {
	if rf < 0 || rf > maxReplicationFactor {
		return invalidArgument("replication_factor", "%d is outside 1..%d", rf, maxReplicationFactor)
	}
	return nil
}

// describe renders a topic from this node's image (nil if it is gone).
func (s *ControllerServer) describe(name string) *keelpb.TopicDescription {
	return describeIn(s.ctrl.Image(), name)
}

// describeIn renders a topic from img (nil if it has none by that name).
func describeIn(img *fsm.Image, name string) *keelpb.TopicDescription {
	t, ok := img.Topic(name)
	if !ok {
		return nil
	}
	return controller.DescribeTopic(img, t)
}

// CreatePartitions adds partitions to a topic.
func (s *ControllerServer) CreatePartitions(ctx context.Context, req *keelpb.CreatePartitionsRequest) (*keelpb.CreatePartitionsResponse, error) {
	if err := firstError(
		validTopicRef("topic", req.GetTopic()),
		validPartitionCount("count", req.GetCount()),
		validNewPartitionTotal(req.GetCount()),
		validAssignments(req.GetAssignments()),
	); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	if err := s.ctrl.CreatePartitions(ctx, req); err != nil {
		return nil, toStatus(err)
	}
	return &keelpb.CreatePartitionsResponse{Topic: s.describe(req.Topic)}, nil
}

// validNewPartitionTotal: CreatePartitions' count is the new total, and a
// topic has at least one partition already.
func validNewPartitionTotal(n int32) error {
	if n < 1 {
		return invalidArgument("count", "%d; the new total must be at least 1", n)
	}
	return nil
}

// DeleteTopic removes a topic.
func (s *ControllerServer) DeleteTopic(ctx context.Context, req *keelpb.DeleteTopicRequest) (*keelpb.DeleteTopicResponse, error) {
	if err := validTopicRef("name", req.GetName()); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	if err := s.ctrl.DeleteTopic(ctx, req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	return &keelpb.DeleteTopicResponse{}, nil
}

// readImage is the image a read answers from: with linearizable, the active
// controller's confirmed image (controller.ReadImage); otherwise this node's
// own committed image.
func (s *ControllerServer) readImage(ctx context.Context, linearizable bool) (*fsm.Image, error) {
	if !linearizable {
		return s.ctrl.Image(), nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	img, err := s.ctrl.ReadImage(ctx)
	return img, toStatus(err)
}

// ListTopics answers from this node's committed image, or the active
// controller's confirmed one when the request is linearizable.
func (s *ControllerServer) ListTopics(ctx context.Context, req *keelpb.ListTopicsRequest) (*keelpb.ListTopicsResponse, error) {
	img, err := s.readImage(ctx, req.GetLinearizable())
	if err != nil {
		return nil, err
	}
	resp := &keelpb.ListTopicsResponse{}
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
func (s *ControllerServer) DescribeTopic(ctx context.Context, req *keelpb.DescribeTopicRequest) (*keelpb.DescribeTopicResponse, error) {
	if err := validTopicRef("name", req.GetName()); err != nil {
		return nil, err
	}
	img, err := s.readImage(ctx, req.GetLinearizable())
	if err != nil {
		return nil, err
	}
	d := describeIn(img, req.GetName())
	if d == nil {
		return nil, withReason(codes.NotFound, ReasonUnknownTopicOrPartition, "unknown topic "+req.GetName())
	}
	return &keelpb.DescribeTopicResponse{Topic: d}, nil
}

// AlterPartition is a partition leader's ISR change.
func (s *ControllerServer) AlterPartition(ctx context.Context, req *keelpb.AlterPartitionRequest) (*keelpb.AlterPartitionResponse, error) {
	if err := firstError(
		validBrokerID(req.GetBrokerId()),
		validBrokerEpoch(req.GetBrokerEpoch()),
		validTopicID(req.GetTopicId()),
		validNonNegative("partition", req.GetPartition()),
		validNonNegative("leader_epoch", req.GetLeaderEpoch()),
		validNonNegative("partition_epoch", req.GetPartitionEpoch()),
	); err != nil {
		return nil, err
	}
	if len(req.GetNewIsr()) == 0 || len(req.GetNewIsr()) > maxReplicationFactor {
		return nil, invalidArgument("new_isr", "has %d members; want 1..%d", len(req.GetNewIsr()), maxReplicationFactor)
	}
	if slices.ContainsFunc(req.GetNewIsr(), func(id int32) bool { return id < 0 }) {
		return nil, invalidArgument("new_isr", "%v holds a negative broker id", req.GetNewIsr())
	}
	if id, ok := duplicateID(req.GetNewIsr()); ok {
		return nil, invalidArgument("new_isr", "%v names broker %d twice", req.GetNewIsr(), id)
	}
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	p, err := s.ctrl.AlterPartition(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	return &keelpb.AlterPartitionResponse{Partition: controller.DescribePartition(p)}, nil
}

func validTopicID(id string) error {
	if _, err := fsm.ParseTopicID(id); err != nil || len(id) != 36 {
		return invalidArgument("topic_id", "%q is not a topic id (a UUID)", truncate(id))
	}
	return nil
}

// ElectLeaders runs a preferred or unclean election.
func (s *ControllerServer) ElectLeaders(ctx context.Context, req *keelpb.ElectLeadersRequest) (*keelpb.ElectLeadersResponse, error) {
	typ := req.GetType()
	if typ != keelpb.ElectionType_ELECTION_TYPE_PREFERRED && typ != keelpb.ElectionType_ELECTION_TYPE_UNCLEAN {
		return nil, invalidArgument("type", "want preferred or unclean")
	}
	if req.GetAll() == (len(req.GetPartitions()) > 0) {
		return nil, invalidArgument("partitions", "give either partitions or all, not both or neither")
	}
	if len(req.GetPartitions()) > maxPartitionsPerRequest {
		return nil, invalidArgument("partitions", "%d; at most %d", len(req.GetPartitions()), maxPartitionsPerRequest)
	}
	if err := validTopicPartitions(req.GetPartitions()); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	results, err := s.ctrl.ElectLeaders(ctx, typ, req.GetPartitions(), req.GetAll())
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &keelpb.ElectLeadersResponse{}
	for _, r := range results {
		er := &keelpb.ElectionResult{Topic: r.Topic, Partition: r.Partition, Leader: r.Leader}
		if r.Err != nil {
			er.Error = r.Err.Error()
		}
		resp.Results = append(resp.Results, er)
	}
	return resp, nil
}

// validTopicPartitions checks an election's partitions one by one: each
// names a possible topic and partition, and none twice (the election is one
// batch: a partition named twice would be decided twice from one image).
func validTopicPartitions(tps []*keelpb.TopicPartition) error {
	type key struct {
		topic     string
		partition int32
	}
	seen := make(map[key]bool, len(tps))
	for i, tp := range tps {
		// The field names are built only on refusal: there may be 100,000.
		switch {
		case tp.GetTopic() == "":
			return invalidArgument(fmt.Sprintf("partitions[%d].topic", i), "is empty")
		case len(tp.GetTopic()) > fsm.MaxTopicNameLen:
			return invalidArgument(fmt.Sprintf("partitions[%d].topic", i), "longer than %d bytes", fsm.MaxTopicNameLen)
		case tp.GetPartition() < 0:
			return invalidArgument(fmt.Sprintf("partitions[%d].partition", i), "%d is negative", tp.GetPartition())
		}
		k := key{tp.GetTopic(), tp.GetPartition()}
		if seen[k] {
			return invalidArgument(fmt.Sprintf("partitions[%d]", i), "%s/%d is named twice", k.topic, k.partition)
		}
		seen[k] = true
	}
	return nil
}

// AlterPartitionReassignments starts or (empty replicas) cancels a reassignment.
func (s *ControllerServer) AlterPartitionReassignments(ctx context.Context, req *keelpb.AlterPartitionReassignmentsRequest) (*keelpb.AlterPartitionReassignmentsResponse, error) {
	if err := validTopicRef("topic", req.GetTopic()); err != nil {
		return nil, err
	}
	if req.GetPartition() < 0 {
		return nil, invalidArgument("partition", "%d is negative", req.GetPartition())
	}
	if len(req.GetReplicas()) > maxReplicationFactor || slices.ContainsFunc(req.GetReplicas(), func(id int32) bool { return id < 0 }) {
		return nil, invalidArgument("replicas", "want 1..%d broker ids, none negative", maxReplicationFactor)
	}
	if id, ok := duplicateID(req.GetReplicas()); ok {
		return nil, invalidArgument("replicas", "%v names broker %d twice", req.GetReplicas(), id)
	}
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
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
		return nil, withReason(codes.NotFound, ReasonUnknownTopicOrPartition, "topic "+req.GetTopic()+" was deleted meanwhile")
	}
	p, ok := img.Partition(t.ID, req.GetPartition())
	if !ok {
		return nil, withReason(codes.NotFound, ReasonUnknownTopicOrPartition, "partition gone")
	}
	return &keelpb.AlterPartitionReassignmentsResponse{Partition: controller.DescribePartition(p)}, nil
}

// ListPartitionReassignments lists ongoing reassignments from this node's image.
func (s *ControllerServer) ListPartitionReassignments(context.Context, *keelpb.ListPartitionReassignmentsRequest) (*keelpb.ListPartitionReassignmentsResponse, error) {
	img := s.ctrl.Image()
	resp := &keelpb.ListPartitionReassignmentsResponse{}
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
