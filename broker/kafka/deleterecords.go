package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// deleteRecords answers DeleteRecords (KIP-107) for the partitions this
// broker leads, as Kafka's ReplicaManager.deleteRecords does: each
// partition's log start moves up to its offset (-1: the high watermark),
// and its answer is the partition's low watermark once every live
// replica's log start has reached the offset, or REQUEST_TIMED_OUT when the
// request's timeout ends first. The partitions are deleted one by one,
// then waited for under the one timeout: no goroutine per partition, which
// a request naming thousands would multiply.
// Each topic needs DELETE (TOPIC_AUTHORIZATION_FAILED); a partition named
// twice is refused (INVALID_REQUEST) and none of its offsets applied, as
// which one a client meant is not known.
func (s *Server) deleteRecords(ctx context.Context, c *conn, r *kmsg.DeleteRecordsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteRecordsResponse)
	img := s.cfg.Image.Image()
	named := map[tp]int{}
	for _, rt := range r.Topics {
		for _, rp := range rt.Partitions {
			named[tp{rt.Topic, rp.Partition}]++
		}
	}
	type pending struct {
		p     *kmsg.DeleteRecordsResponseTopicPartition
		await func(context.Context) (int64, error)
	}
	var waits []pending
	resp.Topics = make([]kmsg.DeleteRecordsResponseTopic, len(r.Topics))
	for i, rt := range r.Topics {
		t := &resp.Topics[i]
		*t = kmsg.NewDeleteRecordsResponseTopic()
		t.Topic = rt.Topic
		t.Partitions = make([]kmsg.DeleteRecordsResponseTopicPartition, len(rt.Partitions))
		allowed := s.allowed(c, kmsg.ACLOperationDelete, kmsg.ACLResourceTypeTopic, rt.Topic)
		for j, rp := range rt.Partitions {
			p := &t.Partitions[j]
			*p = kmsg.NewDeleteRecordsResponseTopicPartition()
			p.Partition, p.LowWatermark = rp.Partition, -1
			var ke *kerr.Error
			switch {
			case !allowed:
				ke = kerr.TopicAuthorizationFailed
			case named[tp{rt.Topic, rp.Partition}] > 1:
				ke = kerr.InvalidRequest
			default:
				ke = s.leaderCheck(img, rt.Topic, rp.Partition)
			}
			if ke != nil {
				p.ErrorCode = ke.Code
				continue
			}
			await, err := s.cfg.Backend.DeleteRecords(rt.Topic, rp.Partition, rp.Offset)
			if err != nil {
				p.ErrorCode = codeOf(err)
				s.log.Debug("delete records refused", "topic", rt.Topic, "partition", rp.Partition, "offset", rp.Offset, "err", err)
				continue
			}
			waits = append(waits, pending{p, await})
		}
	}
	// One timeout for the request, as Kafka's DelayedDeleteRecords: the
	// waits end together.
	ctx, cancel := context.WithTimeout(ctx, max(time.Duration(r.TimeoutMillis)*time.Millisecond, 0))
	defer cancel()
	for _, w := range waits {
		low, err := w.await(ctx)
		if err != nil {
			w.p.ErrorCode = codeOf(err)
			s.log.Debug("delete records: the replicas did not follow", "partition", w.p.Partition, "err", err)
			continue
		}
		w.p.LowWatermark = low
	}
	return resp
}
