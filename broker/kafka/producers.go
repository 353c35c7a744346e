package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// describeProducers answers DescribeProducers (KIP-664) from the producer
// state of this broker's replicas, as Kafka's
// ReplicaManager.activeProducerState does: the idempotent producers each
// remembers, with no transaction (coordinator epoch and transaction start
// -1). A partition with no replica here is NOT_LEADER_OR_FOLLOWER. Each
// topic needs READ (TOPIC_AUTHORIZATION_FAILED, before whether it exists).
func (s *Server) describeProducers(c *conn, r *kmsg.DescribeProducersRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeProducersResponse)
	img := s.cfg.Image.Image()
	resp.Topics = make([]kmsg.DescribeProducersResponseTopic, len(r.Topics))
	for i, rt := range r.Topics {
		t := &resp.Topics[i]
		*t = kmsg.NewDescribeProducersResponseTopic()
		t.Topic = rt.Topic
		var topicErr *kerr.Error
		meta, ok := img.Topic(rt.Topic)
		switch {
		case !s.allowed(c, kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, rt.Topic):
			topicErr = kerr.TopicAuthorizationFailed
		case !ok:
			topicErr = kerr.UnknownTopicOrPartition
		}
		t.Partitions = make([]kmsg.DescribeProducersResponseTopicPartition, len(rt.Partitions))
		for j, idx := range rt.Partitions {
			p := &t.Partitions[j]
			*p = kmsg.NewDescribeProducersResponseTopicPartition()
			p.Partition = idx
			ke := topicErr
			if ke == nil && (idx < 0 || idx >= meta.Partitions) {
				ke = kerr.UnknownTopicOrPartition
			}
			if ke != nil {
				p.ErrorCode, p.ErrorMessage = ke.Code, &ke.Description
				continue
			}
			producers, err := s.cfg.Backend.Producers(rt.Topic, idx)
			if err != nil {
				p.ErrorCode = codeOf(err)
				continue
			}
			p.ActiveProducers = make([]kmsg.DescribeProducersResponseTopicPartitionActiveProducer, len(producers))
			for k, ps := range producers {
				ap := &p.ActiveProducers[k]
				*ap = kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
				ap.ProducerID, ap.ProducerEpoch, ap.LastSequence, ap.LastTimestamp = ps.ProducerID, int32(ps.ProducerEpoch), ps.LastSequence, ps.LastTimestamp
				ap.CoordinatorEpoch, ap.CurrentTxnStartOffset = -1, -1
			}
		}
	}
	return resp
}
