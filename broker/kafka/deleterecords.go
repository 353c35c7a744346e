package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/fsm"
)

// deleteRecords answers DeleteRecords (KIP-107) for the partitions this
// broker leads, as Kafka's ReplicaManager.deleteRecords does: each
// partition's log start moves up to its offset (-1: the high watermark),
// and its answer is the partition's low watermark once every live
// replica's log start has reached the offset, or REQUEST_TIMED_OUT when the
// request's timeout ends first. The partitions are deleted one by one,
// before the connection's next request is read, then waited for under the
// one timeout, by one goroutine (not one per partition, which a request
// naming thousands would multiply); the answer is ready when it is done.
// Each topic needs DELETE (TOPIC_AUTHORIZATION_FAILED); a partition named
// twice is refused (INVALID_REQUEST) and none of its offsets applied, as
// which one a client meant is not known.
func (s *Server) deleteRecords(ctx context.Context, c *conn, r *kmsg.DeleteRecordsRequest) (resp kmsg.Response, ready chan struct{}) {
	dr := r.ResponseKind().(*kmsg.DeleteRecordsResponse)
	resp = dr
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
	dr.Topics = make([]kmsg.DeleteRecordsResponseTopic, len(r.Topics))
	for i, rt := range r.Topics {
		t := &dr.Topics[i]
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
			case fsm.IsInternalTopic(rt.Topic):
				// Kafka: "Cannot delete records of internal topic".
				ke = kerr.InvalidTopicException
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
	if len(waits) == 0 {
		return resp, readyNow
	}
	// The waits run off the connection's reader, as a fetch's, so that a
	// client closing its connection ends them (ctx), under one timeout
	// for the request, as Kafka's DelayedDeleteRecords.
	ready = make(chan struct{})
	go func() {
		defer close(ready)
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
	}()
	return resp, ready
}
