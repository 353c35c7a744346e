package kafka

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/broker/batchcheck"
	"github.com/keel-dev/keel/fsm"
)

// codeOf is the Kafka error code of a Backend error: its kerr code, or
// UNKNOWN_SERVER_ERROR.
func codeOf(err error) int16 {
	if err == nil {
		return 0
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	return kerr.UnknownServerError.Code
}

// v2 record batch header positions (DefaultRecordBatch), beside
// batchHeaderSize.
const (
	batchLengthAt = 8
	// lastOffsetDeltaAt: a batch's last offset is its base offset plus
	// this.
	lastOffsetDeltaAt = 23
)

func (s *Server) produce(ctx context.Context, c *conn, r *kmsg.ProduceRequest) (resp kmsg.Response, closeAfter bool, ready chan struct{}) {
	pr := r.ResponseKind().(*kmsg.ProduceResponse)
	img := s.cfg.Image.Image()
	timeout := time.Duration(r.TimeoutMillis) * time.Millisecond
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	// The whole request must be valid first, as Kafka checks it.
	var whole *kerr.Error
	switch {
	case r.Acks != 0 && r.Acks != 1 && r.Acks != -1:
		whole = kerr.InvalidRequiredAcks
	case r.TransactionID != nil:
		// Transactions are not served (ApiVersions does not list them).
		whole = kerr.TransactionalIDAuthorizationFailed
	case r.Version < 3:
		// Message formats v0 and v1 are not kept.
		whole = kerr.UnsupportedForMessageFormat
	}
	var (
		mu      sync.Mutex // guards failed and commits
		failed  bool
		commits []func()
		fail    = func(p *kmsg.ProduceResponseTopicPartition, topic string, partition int32, err error) {
			p.ErrorCode = codeOf(err)
			if p.ErrorCode == kerr.UnknownServerError.Code {
				s.log.Warn("produce failed", "topic", topic, "partition", partition, "err", err)
			}
			mu.Lock()
			failed = true
			mu.Unlock()
		}
		wg sync.WaitGroup
	)
	pr.Topics = make([]kmsg.ProduceResponseTopic, len(r.Topics))
	for i, rt := range r.Topics {
		tr := s.topicRules(img, rt.Topic)
		t := &pr.Topics[i]
		t.Topic = rt.Topic
		t.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		denied := whole == nil && !s.allowed(c, kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTopic, rt.Topic)
		for j, rp := range rt.Partitions {
			p := &t.Partitions[j]
			*p = kmsg.NewProduceResponseTopicPartition()
			p.Partition, p.BaseOffset, p.LogAppendTime, p.LogStartOffset = rp.Partition, -1, -1, -1
			ke := whole
			switch {
			case denied:
				ke = kerr.TopicAuthorizationFailed
			case ke == nil && fsm.IsInternalTopic(rt.Topic):
				// Only the group coordinator writes __consumer_offsets
				// (Kafka: "Cannot append to internal topic").
				ke = kerr.InvalidTopicException
			case ke == nil:
				ke = s.leaderCheck(img, rt.Topic, rp.Partition)
			}
			now := time.Now().UnixMilli()
			if ke == nil {
				if e := s.checkBatch(r.Version, rp.Records, tr, now); e != nil {
					ke = e.Code
					explain(p, r.Version, e)
				}
			}
			appendTime := int64(-1)
			if ke == nil && tr.logAppendTime {
				// The leader's clock, as Kafka's LogValidator stamps it
				// just before the append.
				batchcheck.StampLogAppendTime(rp.Records, now)
				appendTime = now
			}
			if ke != nil {
				p.ErrorCode = ke.Code
				mu.Lock()
				failed = true
				mu.Unlock()
				continue
			}
			// Partitions are appended side by side, and waited for
			// together (acks=all), as Kafka does.
			wg.Add(1)
			go func(topic string, partition int32, records []byte) {
				defer wg.Done()
				res, commit, err := s.cfg.Backend.ProduceAppend(topic, partition, records, r.Acks)
				if err != nil {
					fail(p, topic, partition, err)
					return
				}
				p.BaseOffset, p.LogStartOffset, p.LogAppendTime = res.BaseOffset, res.LogStartOffset, res.LogAppendTime
				if appendTime >= 0 {
					p.LogAppendTime = appendTime
				}
				if commit != nil {
					mu.Lock()
					commits = append(commits, func() {
						if err := commit(ctx, timeout); err != nil {
							p.BaseOffset, p.LogStartOffset, p.LogAppendTime = -1, -1, -1
							fail(p, topic, partition, err)
						}
					})
					mu.Unlock()
				}
			}(rt.Topic, rp.Partition, rp.Records)
		}
	}
	// Every batch is appended (or refused) before the connection's next
	// request is read, so a connection's batches reach each log in the
	// order it sent them.
	wg.Wait()
	if r.Acks == 0 {
		// No answer at all; a failure closes the connection instead.
		return nil, failed, readyNow
	}
	if len(commits) == 0 {
		return pr, false, readyNow
	}
	// The commits are waited for off the connection's reader: the answer
	// is ready once they all have.
	ready = make(chan struct{})
	go func() {
		defer close(ready)
		defer s.met.committed(time.Now())
		var cw sync.WaitGroup
		for _, c := range commits {
			cw.Add(1)
			go func() {
				defer cw.Done()
				c()
			}()
		}
		cw.Wait()
	}()
	return pr, false, ready
}

func (s *Server) listOffsets(ctx context.Context, c *conn, r *kmsg.ListOffsetsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
	img := s.cfg.Image.Image()
	resp.Topics = make([]kmsg.ListOffsetsResponseTopic, len(r.Topics))
	for i, rt := range r.Topics {
		t := &resp.Topics[i]
		t.Topic = rt.Topic
		t.Partitions = make([]kmsg.ListOffsetsResponseTopicPartition, len(rt.Partitions))
		denied := !s.allowed(c, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, rt.Topic)
		for j, rp := range rt.Partitions {
			p := &t.Partitions[j]
			*p = kmsg.NewListOffsetsResponseTopicPartition()
			p.Partition = rp.Partition
			if ke := authorizedLeader(s, img, denied, rt.Topic, rp.Partition); ke != nil {
				p.ErrorCode = ke.Code
				continue
			}
			epoch := rp.CurrentLeaderEpoch
			if r.Version < 4 {
				epoch = -1
			}
			ts := rp.Timestamp
			if ts == -3 && r.Version < 7 {
				// Before KIP-734 -3 was no special value: Kafka
				// refuses a negative timestamp it does not know.
				p.ErrorCode = kerr.UnsupportedVersion.Code
				continue
			}
			res, err := s.cfg.Backend.ListOffsets(ctx, rt.Topic, rp.Partition, epoch, ts)
			if err != nil {
				p.ErrorCode = codeOf(err)
				continue
			}
			p.Timestamp, p.Offset, p.LeaderEpoch = res.Timestamp, res.Offset, res.LeaderEpoch
			if r.Version == 0 {
				// v0 lists offsets, none when no record matched.
				if res.Offset >= 0 {
					p.OldStyleOffsets = []int64{res.Offset}
				} else {
					p.OldStyleOffsets = []int64{}
				}
			}
		}
	}
	return resp
}

// offsetForLeaderEpoch answers OffsetsForLeaderEpoch (KIP-101, KIP-320):
// clients ask it after a leader change, with the epoch of the last record
// they consumed, to learn whether the new leader's log still holds their
// position (kgo reports ErrDataLoss and moves back when it does not).
// Partitions this broker does not lead are answered as Fetch answers them;
// UNDEFINED_EPOCH_OFFSET is EndOffset -1, LeaderEpoch -1, no error.
func (s *Server) offsetForLeaderEpoch(ctx context.Context, c *conn, r *kmsg.OffsetForLeaderEpochRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	img := s.cfg.Image.Image()
	resp.Topics = make([]kmsg.OffsetForLeaderEpochResponseTopic, len(r.Topics))
	for i, rt := range r.Topics {
		t := &resp.Topics[i]
		*t = kmsg.NewOffsetForLeaderEpochResponseTopic()
		t.Topic = rt.Topic
		t.Partitions = make([]kmsg.OffsetForLeaderEpochResponseTopicPartition, len(rt.Partitions))
		denied := !s.allowed(c, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, rt.Topic)
		for j, rp := range rt.Partitions {
			p := &t.Partitions[j]
			*p = kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			p.Partition, p.LeaderEpoch, p.EndOffset = rp.Partition, -1, -1
			if ke := authorizedLeader(s, img, denied, rt.Topic, rp.Partition); ke != nil {
				p.ErrorCode = ke.Code
				continue
			}
			current := rp.CurrentLeaderEpoch
			if r.Version < 2 {
				current = -1 // not sent before v2
			}
			end, epoch, err := s.cfg.Backend.OffsetForLeaderEpoch(ctx, rt.Topic, rp.Partition, current, rp.LeaderEpoch)
			if err != nil {
				p.ErrorCode = codeOf(err)
				continue
			}
			p.EndOffset, p.LeaderEpoch = end, epoch
		}
	}
	return resp
}
