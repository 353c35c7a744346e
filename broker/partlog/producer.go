package partlog

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Errors an idempotent producer's batch is refused with (KIP-98, KIP-360).
var (
	// ErrOutOfOrderSequence: the batch does not follow the producer's last
	// one (Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER).
	ErrOutOfOrderSequence = errors.New("out of order sequence number")
	// ErrInvalidProducerEpoch: the producer has been fenced by a newer epoch
	// of the same producer id (Kafka's INVALID_PRODUCER_EPOCH).
	ErrInvalidProducerEpoch = errors.New("invalid producer epoch")
)

// producerBatchesKept is how many batches a producer's entry remembers:
// librdkafka's and the Java client's cap on in-flight requests.
const producerBatchesKept = 5

// producerBatch is one retained batch of a producer.
type producerBatch struct {
	firstSeq, lastSeq       int32
	firstOffset, lastOffset int64
}

// producerEntry is Kafka's ProducerStateEntry: the producer's epoch and
// its last batches, oldest first.
type producerEntry struct {
	epoch         int16
	batches       []producerBatch
	lastTimestamp int64 // the largest maxTimestamp of its batches
}

func (e *producerEntry) lastOffset() int64 { return e.batches[len(e.batches)-1].lastOffset }

// producerState holds an entry for each producer id with batches in the
// log. It is rebuilt at open by scanning the batch headers, and after a
// truncation; it is guarded by the log's writer lock.
type producerState struct {
	m map[int64]*producerEntry
}

func newProducerState() *producerState { return &producerState{m: make(map[int64]*producerEntry)} }

// check is the leader's check of an idempotent batch before it appends it
// (Kafka's ProducerAppendInfo). A duplicate of a retained batch returns
// that batch, to be answered with its original offsets.
func (p *producerState) check(h BatchHeader) (*producerBatch, error) {
	if !h.Idempotent() {
		return nil, nil
	}
	e, ok := p.m[h.ProducerID]
	if !ok || len(e.batches) == 0 {
		// New here, expired, or truncated away: any sequence is accepted.
		return nil, nil
	}
	switch {
	case h.ProducerEpoch < e.epoch:
		return nil, fmt.Errorf("%w: producer %d epoch %d, the log has epoch %d", ErrInvalidProducerEpoch, h.ProducerID, h.ProducerEpoch, e.epoch)
	case h.ProducerEpoch > e.epoch:
		if h.BaseSequence != 0 {
			return nil, fmt.Errorf("%w: producer %d's new epoch %d starts at sequence %d, not 0", ErrOutOfOrderSequence, h.ProducerID, h.ProducerEpoch, h.BaseSequence)
		}
		return nil, nil
	}
	last := h.LastSequence()
	for i := range e.batches {
		if b := &e.batches[i]; b.firstSeq == h.BaseSequence && b.lastSeq == last {
			dup := *b
			return &dup, nil
		}
	}
	if want := addSequence(e.batches[len(e.batches)-1].lastSeq, 1); h.BaseSequence != want {
		return nil, fmt.Errorf("%w: producer %d epoch %d sent sequence %d, expected %d", ErrOutOfOrderSequence, h.ProducerID, h.ProducerEpoch, h.BaseSequence, want)
	}
	return nil, nil
}

// update records an appended batch, with its offsets as written. Followers
// and recovery apply it without check: the leader checked.
func (p *producerState) update(h BatchHeader) {
	if !h.Idempotent() {
		return
	}
	e, ok := p.m[h.ProducerID]
	if !ok {
		e = &producerEntry{epoch: h.ProducerEpoch}
		p.m[h.ProducerID] = e
	}
	if h.ProducerEpoch != e.epoch {
		e.epoch, e.batches = h.ProducerEpoch, e.batches[:0]
	}
	if len(e.batches) == producerBatchesKept {
		copy(e.batches, e.batches[1:])
		e.batches = e.batches[:producerBatchesKept-1]
	}
	e.batches = append(e.batches, producerBatch{
		firstSeq: h.BaseSequence, lastSeq: h.LastSequence(),
		firstOffset: h.BaseOffset, lastOffset: h.LastOffset(),
	})
	e.lastTimestamp = max(e.lastTimestamp, h.MaxTimestamp)
}

// removeBefore forgets producers whose last batch is below the log start:
// their batches are gone (Kafka's truncateHead).
func (p *producerState) removeBefore(logStart int64) {
	for id, e := range p.m {
		if e.lastOffset() < logStart {
			delete(p.m, id)
		}
	}
}

// expire forgets producers whose last batch's timestamp is before cutoff
// (milliseconds), as producer.id.expiration.ms does.
func (p *producerState) expire(cutoff int64) int {
	n := 0
	for id, e := range p.m {
		if e.lastTimestamp < cutoff {
			delete(p.m, id)
			n++
		}
	}
	return n
}

// ProducerInfo is one idempotent producer the log remembers, as Kafka's
// DescribeProducers lists it.
type ProducerInfo struct {
	ProducerID    int64
	ProducerEpoch int16
	// LastSequence is the sequence of its last record in the log.
	LastSequence int32
	// LastTimestamp is the largest maxTimestamp of its batches.
	LastTimestamp int64
}

// Producers lists the idempotent producers with batches in the log (Kafka's
// UnifiedLog.activeProducers), by producer id: those a retried batch would
// be checked against.
func (l *Log) Producers() []ProducerInfo {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	out := make([]ProducerInfo, 0, len(l.producers.m))
	for id, e := range l.producers.m {
		if len(e.batches) == 0 {
			continue
		}
		out = append(out, ProducerInfo{ProducerID: id, ProducerEpoch: e.epoch,
			LastSequence: e.batches[len(e.batches)-1].lastSeq, LastTimestamp: e.lastTimestamp})
	}
	slices.SortFunc(out, func(a, b ProducerInfo) int { return cmp.Compare(a.ProducerID, b.ProducerID) })
	return out
}
