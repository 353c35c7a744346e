package controller

import (
	"fmt"
	"time"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// The cluster manager: pure functions from the committed image and a broker
// request to the records that carry out the decision (Kafka's
// ClusterControlManager). They read no clock and touch no raft; sessions
// come in as a function.

// registrationRecords decides a RegisterBroker request (Kafka's
// ClusterControlManager.registerBroker). holding says how long a registered
// incarnation holds its broker id against another one (0: not at all; see
// sessionTracker.holding).
//
// A registration of the incarnation already registered is a retry (the
// answer to the first was lost, or the broker sent it again): it writes
// nothing, and the broker keeps its epoch, its state and its leaderships.
// KRaft writes the registration again with the same epoch and state; Keel
// writes nothing, since nothing changes: a retry must name the same
// address, rack and metadata versions, and one that does not is refused
// (a changed broker is a new incarnation).
func registrationRecords(img *fsm.Image, req *keelpb.RegisterBrokerRequest, holding func(b *fsm.Broker) time.Duration) ([]*keelpb.Record, error) {
	if req.ClusterId != "" && req.ClusterId != img.ClusterID {
		return nil, fmt.Errorf("%w: broker %d belongs to cluster %s, this is cluster %s",
			ErrInconsistentClusterID, req.BrokerId, req.ClusterId, img.ClusterID)
	}
	if v := img.FinalizedMetadataVersion(); v < req.MinMetadataVersion || v > req.MaxMetadataVersion {
		return nil, fmt.Errorf("%w: broker %d supports metadata versions %d-%d, the cluster is at %d (upgrade the broker's binary)",
			ErrUnsupportedMetadataVersion, req.BrokerId, req.MinMetadataVersion, req.MaxMetadataVersion, v)
	}
	old, registered := img.Broker(req.BrokerId)
	if registered && old.IncarnationID == req.IncarnationId {
		return nil, sameRegistration(old, req)
	}
	if registered {
		if left := holding(old); left > 0 {
			return nil, &DuplicateRegistrationError{BrokerID: old.ID, IncarnationID: old.IncarnationID, Epoch: old.Epoch, Remaining: left,
				ControllerEpoch: img.ControllerEpoch}
		}
	}
	// A new incarnation (a first start, or a bounced broker whose old
	// incarnation no longer holds the id) gets a new registration: a new
	// epoch, fenced until the broker has caught up. If the old incarnation
	// was still unfenced, its going is a failure first (processBrokerChange's
	// bounced broker): its leaderships and ISR places move in the same batch.
	//
	// A new incarnation that reports an unclean shutdown of the last one
	// (KIP-966: a previous broker epoch that is not the registered one) may
	// have lost records it had not flushed, so it also leaves every ISR,
	// even as its last member, and every ELR in the same batch (KRaft's
	// handleBrokerUncleanShutdown; uncleanShutdownChanges).
	var recs []*keelpb.Record
	unclean := registered && uncleanShutdown(old, req)
	switch {
	case unclean:
		recs = uncleanShutdownChanges(img, old.ID)
	case registered && !old.Fenced:
		recs = offlineChanges(img, []int32{old.ID})
	}
	return append(recs, &keelpb.Record{Record: &keelpb.Record_BrokerRegistration{BrokerRegistration: &keelpb.BrokerRegistrationRecord{
		BrokerId:           req.BrokerId,
		IncarnationId:      req.IncarnationId,
		Address:            req.Address,
		KafkaAddress:       req.KafkaAddress,
		Rack:               req.Rack,
		MinMetadataVersion: req.MinMetadataVersion,
		MaxMetadataVersion: req.MaxMetadataVersion,
	}}}), nil
}

// uncleanShutdown reports whether a registration says that broker b's
// incarnation stopped without a clean shutdown: its previous broker epoch
// is reported (not 0) and is not b's epoch. Kafka compares the same way
// (ClusterControlManager.registerBroker).
func uncleanShutdown(b *fsm.Broker, req *keelpb.RegisterBrokerRequest) bool {
	return req.PreviousBrokerEpoch != 0 && req.PreviousBrokerEpoch != b.Epoch
}

// sameRegistration checks that a retried registration of incarnation b
// says what b's registration says.
func sameRegistration(b *fsm.Broker, req *keelpb.RegisterBrokerRequest) error {
	differs := func(field string, registered, asked any) error {
		return fieldError(field, "broker %d incarnation %s is registered with %v, not %v; a broker whose details change must register as a new incarnation",
			b.ID, b.IncarnationID, registered, asked)
	}
	switch {
	case req.Address != b.Address:
		return differs("address", b.Address, req.Address)
	case req.KafkaAddress != b.KafkaAddress:
		return differs("kafka_address", fmt.Sprintf("%q", b.KafkaAddress), fmt.Sprintf("%q", req.KafkaAddress))
	case req.Rack != b.Rack:
		return differs("rack", fmt.Sprintf("%q", b.Rack), fmt.Sprintf("%q", req.Rack))
	case req.MinMetadataVersion != b.MinMetadataVersion || req.MaxMetadataVersion != b.MaxMetadataVersion:
		return differs("min_metadata_version", fmt.Sprintf("versions %d-%d", b.MinMetadataVersion, b.MaxMetadataVersion),
			fmt.Sprintf("versions %d-%d", req.MinMetadataVersion, req.MaxMetadataVersion))
	}
	return nil
}

// currentBroker finds the broker a request names, refusing an epoch that is
// not its current one.
func currentBroker(img *fsm.Image, id int32, epoch int64) (*fsm.Broker, error) {
	b, ok := img.Broker(id)
	if !ok {
		return nil, fmt.Errorf("%w: broker %d", ErrBrokerNotRegistered, id)
	}
	if b.Epoch != epoch {
		return nil, fmt.Errorf("%w: broker %d epoch %d, current epoch %d", ErrStaleBrokerEpoch, id, epoch, b.Epoch)
	}
	return b, nil
}

// heartbeatRecords decides the state change a heartbeat asks for, if any,
// by the transitions of Kafka's BrokerHeartbeatManager.calculateNextBrokerState:
//   - a fenced broker that has applied the metadata up to its own
//     registration, and wants neither to stay fenced nor to shut down, is
//     unfenced, and leaderless partitions it can lead get it as leader (the
//     seeds' onBrokerStartup); a fenced broker asking to shut down may go
//     at once, and nothing is written;
//   - an active broker asking to be fenced is fenced, and leaves
//     leaderships and ISRs;
//   - an active broker asking to shut down that leads nothing is fenced at
//     once (Kafka's SHUTDOWN_NOW); one that leads partitions enters
//     controlled shutdown: it is marked shutting down, and leadership and
//     ISR membership move off it (partitions with no other ISR member lose
//     their leader). It is fenced once it may go (shutdownRecords).
func heartbeatRecords(img *fsm.Image, req *keelpb.BrokerHeartbeatRequest) ([]*keelpb.Record, error) {
	b, err := currentBroker(img, req.BrokerId, req.BrokerEpoch)
	if err != nil {
		return nil, err
	}
	switch {
	case b.Fenced:
		if !req.WantFence && !req.WantShutdown && caughtUp(b, req.MetadataOffset) {
			rec := &keelpb.Record{Record: &keelpb.Record_UnfenceBroker{UnfenceBroker: &keelpb.UnfenceBrokerRecord{BrokerId: b.ID, BrokerEpoch: b.Epoch}}}
			return append([]*keelpb.Record{rec}, onlineChanges(img, b.ID)...), nil
		}
	case b.ShuttingDown:
		// Controlled shutdown ends in shutdownRecords, once every active
		// broker has applied the moves; a heartbeat asks for nothing else.
	case req.WantFence, req.WantShutdown && !leadsAny(img, b.ID):
		return fenceRecords(img, []*fsm.Broker{b}), nil
	case req.WantShutdown:
		rec := &keelpb.Record{Record: &keelpb.Record_BrokerShuttingDown{BrokerShuttingDown: &keelpb.BrokerShuttingDownRecord{BrokerId: b.ID, BrokerEpoch: b.Epoch}}}
		return append(offlineChanges(img, []int32{b.ID}), rec), nil
	}
	return nil, nil
}

// shutdownRecords ends the controlled shutdown of broker id at epoch, which
// every active broker has seen the moves of: KRaft fences it (SHUTDOWN_NOW
// from CONTROLLED_SHUTDOWN), so it stays registered, fenced, until it comes
// back or an operator unregisters it. Nothing is written unless it is still
// shutting down and leads nothing.
func shutdownRecords(img *fsm.Image, id int32, epoch int64) ([]*keelpb.Record, error) {
	b, err := currentBroker(img, id, epoch)
	if err != nil {
		return nil, err
	}
	if !b.ShuttingDown || b.Fenced || leadsAny(img, b.ID) {
		return nil, nil
	}
	return fenceRecords(img, []*fsm.Broker{b}), nil
}

// caughtUp: a broker has applied its own registration (KRaft's unfencing rule).
func caughtUp(b *fsm.Broker, offset uint64) bool { return offset >= uint64(b.Epoch) }

func fenceRecord(b *fsm.Broker) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_FenceBroker{FenceBroker: &keelpb.FenceBrokerRecord{BrokerId: b.ID, BrokerEpoch: b.Epoch}}}
}

// fenceRecords fences the given brokers in one batch, with every partition
// change their going takes (the seeds' onBrokerFailure).
func fenceRecords(img *fsm.Image, brokers []*fsm.Broker) []*keelpb.Record {
	ids := make([]int32, len(brokers))
	for i, b := range brokers {
		ids[i] = b.ID
	}
	// The moves first, the fencing last: if raft takes the decision in
	// several entries and leadership is lost between them, what committed
	// is a valid state, and the next controller fences the broker again.
	recs := offlineChanges(img, ids)
	for _, b := range brokers {
		recs = append(recs, fenceRecord(b))
	}
	return recs
}

// unregisterRecords decides an UnregisterBroker request: an operator's
// act, for a broker that is gone for good. epoch 0 means whichever
// incarnation is registered. A broker that is not fenced is refused: it is
// running (a stopped broker is fenced at the end of its controlled shutdown,
// or when its session expires), and would only register again.
func unregisterRecords(img *fsm.Image, id int32, epoch int64) ([]*keelpb.Record, error) {
	b, ok := img.Broker(id)
	if !ok {
		return nil, fmt.Errorf("%w: broker %d", ErrBrokerNotRegistered, id)
	}
	if epoch != 0 && b.Epoch != epoch {
		return nil, fmt.Errorf("%w: broker %d epoch %d, current epoch %d", ErrStaleBrokerEpoch, id, epoch, b.Epoch)
	}
	if !b.Fenced {
		return nil, fmt.Errorf("%w: broker %d (epoch %d) is %s; stop it first (a broker stopped with SIGTERM is fenced once its controlled shutdown ends, a killed one when its session expires)",
			ErrBrokerNotFenced, id, b.Epoch, b.State())
	}
	rec := &keelpb.Record{Record: &keelpb.Record_UnregisterBroker{UnregisterBroker: &keelpb.UnregisterBrokerRecord{BrokerId: b.ID, BrokerEpoch: b.Epoch}}}
	return append(unregisterChanges(img, []int32{b.ID}), rec), nil
}
