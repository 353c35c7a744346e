package kafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/broker/batchcheck"
)

// checkBatch validates one produced partition's records before the data
// plane sees them: within the size limit, then exactly one v2 batch that
// every consumer can read to its last record (batchcheck: Kafka's
// LogValidator). A refusal is counted by its reason.
func (s *Server) checkBatch(version int16, records []byte) *batchcheck.Error {
	var err error
	if len(records) > int(s.cfg.MaxBatchSize) {
		err = &batchcheck.Error{Code: kerr.MessageTooLarge, Reason: batchcheck.ReasonTooLarge, Record: -1,
			Detail: fmt.Sprintf("%d bytes, the limit is %d", len(records), s.cfg.MaxBatchSize)}
	} else {
		// Kafka takes zstd from Produce v7 on.
		err = batchcheck.Check(records, batchcheck.Rules{NoZstd: version < 7})
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
