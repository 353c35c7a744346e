package kafka

import (
	"cmp"
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// reassignError is adminError for a reassignment, with the refusals only
// reassignments get.
func reassignError(err error) (*kerr.Error, string) {
	switch rpc.ReasonOf(err) {
	case rpc.ReasonNoReassignmentInProgress:
		return kerr.NoReassignmentInProgress, status.Convert(err).Message()
	case rpc.ReasonUnknownTopicOrPartition:
		return kerr.UnknownTopicOrPartition, status.Convert(err).Message()
	}
	return adminError(err)
}

// refused reports whether err is the controller's refusal of the request
// itself, which wrote nothing and would be refused again: neither a write
// whose outcome is unknown nor one that found no active controller.
func refused(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound:
		return true
	case codes.FailedPrecondition:
		hint, _ := rpc.LeaderHintOf(err)
		return hint == nil
	}
	return false
}

// alterPartitionReassignments answers AlterPartitionReassignments as
// Kafka's controller does: each partition is started (replicas) or
// cancelled (null replicas) on its own, with its own error. The partitions
// are forwarded to the active controller as one plan, which is accepted
// whole or refused whole; when it is refused, each is forwarded alone, so
// that the valid ones are made and each refused one gets its own reason.
func (s *Server) alterPartitionReassignments(ctx context.Context, c *conn, r *kmsg.AlterPartitionAssignmentsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.AlterPartitionAssignmentsResponse)
	// results holds each partition's outcome, answered in request order.
	type result struct {
		topicPartition
		ke  *kerr.Error
		msg string
	}
	var results []*result
	add := func(tp topicPartition) *result {
		res := &result{topicPartition: tp}
		results = append(results, res)
		return res
	}
	answer := func() kmsg.Response {
		index := map[string]int{}
		for _, res := range results {
			i, ok := index[res.topic]
			if !ok {
				i = len(resp.Topics)
				index[res.topic] = i
				t := kmsg.NewAlterPartitionAssignmentsResponseTopic()
				t.Topic = res.topic
				resp.Topics = append(resp.Topics, t)
			}
			p := kmsg.NewAlterPartitionAssignmentsResponseTopicPartition()
			p.Partition = res.partition
			if res.ke != nil {
				p.ErrorCode, p.ErrorMessage = res.ke.Code, &res.msg
			}
			resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, p)
		}
		return resp
	}
	if !s.allowed(c, kmsg.ACLOperationAlter, kmsg.ACLResourceTypeCluster, clusterResourceName) {
		msg := "reassigning partitions needs ALTER on the cluster"
		resp.ErrorCode, resp.ErrorMessage = kerr.ClusterAuthorizationFailed.Code, &msg
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				res := add(topicPartition{t.Topic, p.Partition})
				res.ke, res.msg = kerr.ClusterAuthorizationFailed, msg
			}
		}
		return answer()
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout(r.TimeoutMillis))
	defer cancel()
	named := map[topicPartition]int{}
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			named[topicPartition{t.Topic, p.Partition}]++
		}
	}
	var plan []*keelpb.ReassignmentTarget
	var planned []*result
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			tp := topicPartition{t.Topic, p.Partition}
			n := named[tp]
			if n == 0 {
				continue
			}
			res := add(tp)
			single := &keelpb.AlterPartitionReassignmentsRequest{Topic: t.Topic, Partition: p.Partition, Replicas: p.Replicas, Principal: c.principal}
			switch {
			case n > 1:
				res.ke, res.msg = kerr.InvalidRequest, "the partition is named more than once in the request"
				named[tp] = 0 // answered once
			case badPartition(tp) != "":
				res.ke, res.msg = kerr.UnknownTopicOrPartition, badPartition(tp)
			case p.Replicas != nil && len(p.Replicas) == 0:
				// Kafka: null cancels; an empty list assigns nothing.
				res.ke, res.msg = kerr.InvalidReplicaAssignment, "the replica list is empty (a null list cancels the partition's reassignment)"
			default:
				if err := rpc.Validate(single); err != nil {
					res.ke, res.msg = reassignError(err)
					continue
				}
				plan = append(plan, &keelpb.ReassignmentTarget{Topic: t.Topic, Partition: p.Partition, Replicas: p.Replicas})
				planned = append(planned, res)
			}
		}
	}
	forward := func(req *keelpb.AlterPartitionReassignmentsRequest) error {
		if err := rpc.Validate(req); err != nil {
			return err
		}
		_, err := s.cfg.Controller.AlterPartitionReassignments(ctx, req)
		return err
	}
	switch {
	case len(plan) == 0:
	case len(plan) == 1:
		if err := forward(&keelpb.AlterPartitionReassignmentsRequest{Topic: plan[0].Topic, Partition: plan[0].Partition, Replicas: plan[0].Replicas, Principal: c.principal}); err != nil {
			planned[0].ke, planned[0].msg = reassignError(err)
		}
	default:
		err := forward(&keelpb.AlterPartitionReassignmentsRequest{Partitions: plan, Principal: c.principal})
		if err == nil || !refused(err) {
			for _, res := range planned {
				if err != nil {
					res.ke, res.msg = reassignError(err)
				}
			}
			break
		}
		// The plan wrote nothing: each partition alone.
		for i, t := range plan {
			if err := forward(&keelpb.AlterPartitionReassignmentsRequest{Topic: t.Topic, Partition: t.Partition, Replicas: t.Replicas, Principal: c.principal}); err != nil {
				planned[i].ke, planned[i].msg = reassignError(err)
			}
		}
	}
	return answer()
}

// listPartitionReassignments answers ListPartitionReassignments from the
// active controller's image, as Kafka's controller answers it: the ongoing
// reassignments of the partitions named, or of every partition for a null
// topic list; a partition that is not being reassigned, or does not exist,
// is left out.
func (s *Server) listPartitionReassignments(ctx context.Context, c *conn, r *kmsg.ListPartitionReassignmentsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ListPartitionReassignmentsResponse)
	fail := func(ke *kerr.Error, msg string) kmsg.Response {
		resp.ErrorCode, resp.ErrorMessage = ke.Code, &msg
		return resp
	}
	if !s.allowed(c, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeCluster, clusterResourceName) {
		return fail(kerr.ClusterAuthorizationFailed, "listing partition reassignments needs DESCRIBE on the cluster")
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout(r.TimeoutMillis))
	defer cancel()
	listed, err := s.cfg.Controller.ListPartitionReassignments(ctx)
	if err != nil {
		return fail(adminError(err))
	}
	var wanted map[topicPartition]bool
	if r.Topics != nil {
		wanted = map[topicPartition]bool{}
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				wanted[topicPartition{t.Topic, p}] = true
			}
		}
	}
	ras := slices.Clone(listed.GetReassignments())
	slices.SortFunc(ras, func(a, b *keelpb.Reassignment) int {
		return cmp.Or(cmp.Compare(a.GetTopic(), b.GetTopic()), cmp.Compare(a.GetPartition(), b.GetPartition()))
	})
	for _, ra := range ras {
		if wanted != nil && !wanted[topicPartition{ra.GetTopic(), ra.GetPartition()}] {
			continue
		}
		if n := len(resp.Topics); n == 0 || resp.Topics[n-1].Topic != ra.GetTopic() {
			t := kmsg.NewListPartitionReassignmentsResponseTopic()
			t.Topic = ra.GetTopic()
			resp.Topics = append(resp.Topics, t)
		}
		p := kmsg.NewListPartitionReassignmentsResponseTopicPartition()
		p.Partition = ra.GetPartition()
		// Never null: Kafka's arrays here are not nullable.
		p.Replicas = append([]int32{}, ra.GetReplicas()...)
		p.AddingReplicas = append([]int32{}, ra.GetAddingReplicas()...)
		p.RemovingReplicas = append([]int32{}, ra.GetRemovingReplicas()...)
		t := &resp.Topics[len(resp.Topics)-1]
		t.Partitions = append(t.Partitions, p)
	}
	return resp
}
