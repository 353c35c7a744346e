package controller

import (
	"context"
	"fmt"
	"math"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// ProducerIDBlock is a block of producer ids a broker may hand to the
// idempotent producers it serves: Start up to Start+Len, exclusive.
type ProducerIDBlock struct {
	Start int64
	Len   int32
}

// AllocateProducerIds hands broker id (at epoch) the next block of
// fsm.ProducerIDBlockSize producer ids, in KRaft's way
// (ProducerIdControlManager.generateNextProducerId): the block is written as
// a ProducerIdsRecord naming the next free id, so no two blocks overlap,
// whichever controller hands them out. A broker epoch that is not the
// registered one is refused with ErrStaleBrokerEpoch or
// ErrBrokerNotRegistered.
func (c *Controller) AllocateProducerIds(ctx context.Context, id int32, epoch int64) (ProducerIDBlock, error) {
	l := c.active.Load()
	if l == nil {
		return ProducerIDBlock{}, c.notLeader()
	}
	var block ProducerIDBlock
	if _, err := l.decide(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		recs, b, err := producerIDRecords(img, id, epoch)
		block = b
		return recs, err
	}); err != nil {
		return ProducerIDBlock{}, err
	}
	c.log.Debug("producer ids allocated", "broker_id", id, "broker_epoch", epoch, "start", block.Start, "len", block.Len)
	return block, nil
}

// producerIDRecords decides the next block of producer ids for broker id at
// epoch, from img: it starts at the image's next free id.
func producerIDRecords(img *fsm.Image, id int32, epoch int64) ([]*keelpb.Record, ProducerIDBlock, error) {
	if _, err := currentBroker(img, id, epoch); err != nil {
		return nil, ProducerIDBlock{}, err
	}
	start := img.NextProducerID
	if start > math.MaxInt64-fsm.ProducerIDBlockSize {
		return nil, ProducerIDBlock{}, fmt.Errorf("%w: every producer id has been handed out (the next block would pass %d)", ErrRefused, int64(math.MaxInt64))
	}
	block := ProducerIDBlock{Start: start, Len: fsm.ProducerIDBlockSize}
	rec := &keelpb.Record{Record: &keelpb.Record_ProducerIds{ProducerIds: &keelpb.ProducerIdsRecord{
		BrokerId: id, BrokerEpoch: epoch, NextProducerId: start + fsm.ProducerIDBlockSize,
	}}}
	return []*keelpb.Record{rec}, block, nil
}
