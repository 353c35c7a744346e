package fsm

import (
	"errors"
	"fmt"

	"github.com/keel-dev/keel/proto/keelpb"
)

func applyBrokerRegistration(img *Image, rec *keelpb.Record, ctx *applyContext) error {
	r := rec.GetBrokerRegistration()
	switch {
	case r.GetBrokerId() < 0:
		return fmt.Errorf("broker_id %d is negative", r.GetBrokerId())
	case r.GetIncarnationId() == "":
		return errors.New("incarnation_id is empty")
	case r.GetAddress() == "":
		return errors.New("address is empty")
	case r.GetMinMetadataVersion() > r.GetMaxMetadataVersion():
		return fmt.Errorf("metadata version range %d-%d is empty", r.GetMinMetadataVersion(), r.GetMaxMetadataVersion())
	case img.FinalizedMetadataVersion() < r.GetMinMetadataVersion() || img.FinalizedMetadataVersion() > r.GetMaxMetadataVersion():
		return fmt.Errorf("%w: broker supports metadata versions %d-%d, the cluster is at %d",
			ErrUnsupportedMetadataVersion, r.GetMinMetadataVersion(), r.GetMaxMetadataVersion(), img.FinalizedMetadataVersion())
	}
	b := &Broker{
		ID:                 r.GetBrokerId(),
		IncarnationID:      r.GetIncarnationId(),
		Address:            r.GetAddress(),
		KafkaAddress:       r.GetKafkaAddress(),
		Rack:               r.GetRack(),
		MinMetadataVersion: r.GetMinMetadataVersion(),
		MaxMetadataVersion: r.GetMaxMetadataVersion(),
	}
	if ctx.restoring {
		// A snapshot states the epoch and fencing it had.
		if r.GetBrokerEpoch() <= 0 {
			return fmt.Errorf("broker %d has no epoch", b.ID)
		}
		b.Epoch, b.Fenced, b.ShuttingDown = r.GetBrokerEpoch(), r.GetFenced(), r.GetShuttingDown()
	} else {
		// From the log the epoch is the record's own index, so it is unique
		// and increasing, and every new incarnation starts fenced.
		if r.GetBrokerEpoch() != 0 {
			return errors.New("broker_epoch is assigned by the log and must not be set")
		}
		b.Epoch, b.Fenced = int64(ctx.index), true
	}
	ctx.mutBrokers(img)[b.ID] = b
	return nil
}

// currentBroker finds broker id and checks that epoch is its current epoch,
// so that a record meant for an earlier incarnation is refused.
func currentBroker(img *Image, id int32, epoch int64) (*Broker, error) {
	b, ok := img.brokers[id]
	if !ok {
		return nil, fmt.Errorf("broker %d is not registered", id)
	}
	if b.Epoch != epoch {
		return nil, fmt.Errorf("broker %d epoch %d is stale (current %d)", id, epoch, b.Epoch)
	}
	return b, nil
}

func applyFenceBroker(img *Image, rec *keelpb.Record, ctx *applyContext) error {
	r := rec.GetFenceBroker()
	b, err := currentBroker(img, r.GetBrokerId(), r.GetBrokerEpoch())
	if err != nil {
		return err
	}
	if b.Fenced {
		return fmt.Errorf("broker %d is already fenced", b.ID)
	}
	next := *b
	// A fenced broker has left; a controlled shutdown ends with its fencing.
	next.Fenced, next.ShuttingDown = true, false
	ctx.mutBrokers(img)[b.ID] = &next
	return nil
}

func applyUnfenceBroker(img *Image, rec *keelpb.Record, ctx *applyContext) error {
	r := rec.GetUnfenceBroker()
	b, err := currentBroker(img, r.GetBrokerId(), r.GetBrokerEpoch())
	if err != nil {
		return err
	}
	if !b.Fenced {
		return fmt.Errorf("broker %d is not fenced", b.ID)
	}
	next := *b
	next.Fenced = false
	ctx.mutBrokers(img)[b.ID] = &next
	return nil
}

func applyUnregisterBroker(img *Image, rec *keelpb.Record, ctx *applyContext) error {
	r := rec.GetUnregisterBroker()
	if _, err := currentBroker(img, r.GetBrokerId(), r.GetBrokerEpoch()); err != nil {
		return err
	}
	delete(ctx.mutBrokers(img), r.GetBrokerId())
	return nil
}

// ProducerIDBlockSize is how many producer ids one ProducerIdsRecord hands a
// broker (KRaft's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE).
const ProducerIDBlockSize = 1000

// applyProducerIds moves the next free producer id on: a block was handed
// to a broker. The id must grow, so that no two blocks overlap; from the
// log the broker must be registered at that epoch. A snapshot states the
// next free id alone.
func applyProducerIds(img *Image, rec *keelpb.Record, ctx *applyContext) error {
	r := rec.GetProducerIds()
	if r.GetNextProducerId() <= img.NextProducerID {
		return fmt.Errorf("next producer id %d is not above the current %d", r.GetNextProducerId(), img.NextProducerID)
	}
	if !ctx.restoring {
		if _, err := currentBroker(img, r.GetBrokerId(), r.GetBrokerEpoch()); err != nil {
			return err
		}
	}
	img.NextProducerID = r.GetNextProducerId()
	return nil
}
