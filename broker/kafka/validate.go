package kafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/broker/batchcheck"
)

// checkBatch validates one produced partition's records before the data
// plane sees them: within the listener's size limit and the topic's
// max.message.bytes, then exactly one v2 batch that every consumer can
// read to its last record, with timestamps within the topic's bounds
// (batchcheck: Kafka's LogValidator). A refusal is counted by its reason.
func (s *Server) checkBatch(version int16, records []byte, tr topicRules, now int64) *batchcheck.Error {
	var err error
	if limit := min(int64(s.cfg.MaxBatchSize), tr.maxBytes); int64(len(records)) > limit {
		err = &batchcheck.Error{Code: kerr.MessageTooLarge, Reason: batchcheck.ReasonTooLarge, Record: -1,
			Detail: fmt.Sprintf("%d bytes, the limit is %d", len(records), limit)}
	} else {
		err = batchcheck.Check(records, tr.batchRules(version, now))
	}
	if err == nil {
		return nil
	}
	e := err.(*batchcheck.Error)
	s.met.refused(e.Reason)
	return e
}

// explain puts a refusal's reason in a Produce answer, where the version
// has room for it (v8+: KIP-467's error message and record errors).
func explain(p *kmsg.ProduceResponseTopicPartition, version int16, e *batchcheck.Error) {
	if version < 8 {
		return
	}
	msg := e.Error()
	p.ErrorMessage = &msg
	if e.Record >= 0 {
		p.ErrorRecords = []kmsg.ProduceResponseTopicPartitionErrorRecord{{RelativeOffset: int32(e.Record), ErrorMessage: &msg}}
	}
}
