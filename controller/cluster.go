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

// registrationRecords decides a RegisterBroker request. remaining says how
// long a broker incarnation's session has left (0: it has none).
func registrationRecords(img *fsm.Image, req *keelpb.RegisterBrokerRequest, remaining func(id int32, epoch int64) time.Duration) ([]*keelpb.Record, error) {
	if req.ClusterId != "" && req.ClusterId != img.ClusterID {
		return nil, fmt.Errorf("%w: broker %d belongs to cluster %s, this is cluster %s",
			ErrInconsistentClusterID, req.BrokerId, req.ClusterId, img.ClusterID)
	}
	if v := img.MetadataVersion; v < req.MinMetadataVersion || v > req.MaxMetadataVersion {
		return nil, fmt.Errorf("%w: broker %d supports metadata versions %d-%d, the cluster is at %d",
			ErrUnsupportedMetadataVersion, req.BrokerId, req.MinMetadataVersion, req.MaxMetadataVersion, v)
	}
	if old, ok := img.Broker(req.BrokerId); ok && old.IncarnationID != req.IncarnationId {
		if left := remaining(old.ID, old.Epoch); left > 0 {
			return nil, &DuplicateRegistrationError{BrokerID: old.ID, IncarnationID: old.IncarnationID, Epoch: old.Epoch, Remaining: left,
				ControllerEpoch: img.ControllerEpoch}
		}
	}
	// A same-incarnation retry and a bounced broker (new incarnation after
	// its session expired) both get a new registration: a new epoch, fenced
	// until the broker has caught up. If the old incarnation was still
	// unfenced, its going is a failure first (processBrokerChange's bounced
	// broker): its leaderships and ISR places move in the same batch.
	var recs []*keelpb.Record
	if old, ok := img.Broker(req.BrokerId); ok && !old.Fenced {
		recs = offlineChanges(img, []int32{old.ID})
	}
	return append(recs, &keelpb.Record{Record: &keelpb.Record_BrokerRegistration{BrokerRegistration: &keelpb.BrokerRegistrationRecord{
		BrokerId:           req.BrokerId,
		IncarnationId:      req.IncarnationId,
		Address:            req.Address,
		Rack:               req.Rack,
		MinMetadataVersion: req.MinMetadataVersion,
		MaxMetadataVersion: req.MaxMetadataVersion,
	}}}), nil
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

// heartbeatRecords decides the state change a heartbeat asks for, if any:
//   - a broker asking to be fenced is fenced, and leaves leaderships and ISRs;
//   - a broker asking to shut down enters controlled shutdown: it is marked
//     shutting down, and leadership and ISR membership move off it (the
//     seeds' controlled shutdown; partitions with no other ISR member lose
//     their leader);
//   - a fenced broker that has applied the metadata up to its own
//     registration, and wants neither, is unfenced, and leaderless partitions
//     it can lead get it as leader (the seeds' onBrokerStartup).
func heartbeatRecords(img *fsm.Image, req *keelpb.BrokerHeartbeatRequest) ([]*keelpb.Record, error) {
	b, err := currentBroker(img, req.BrokerId, req.BrokerEpoch)
	if err != nil {
		return nil, err
	}
	switch {
	case req.WantFence && !b.Fenced:
		return append(offlineChanges(img, []int32{b.ID}), fenceRecord(b)), nil
	case req.WantShutdown && !b.Fenced && !b.ShuttingDown:
		rec := &keelpb.Record{Record: &keelpb.Record_BrokerShuttingDown{BrokerShuttingDown: &keelpb.BrokerShuttingDownRecord{BrokerId: b.ID, BrokerEpoch: b.Epoch}}}
		return append(offlineChanges(img, []int32{b.ID}), rec), nil
	case b.Fenced && !req.WantFence && !req.WantShutdown && caughtUp(b, req.MetadataOffset):
		rec := &keelpb.Record{Record: &keelpb.Record_UnfenceBroker{UnfenceBroker: &keelpb.UnfenceBrokerRecord{BrokerId: b.ID, BrokerEpoch: b.Epoch}}}
		return append([]*keelpb.Record{rec}, onlineChanges(img, b.ID)...), nil
	}
	return nil, nil
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

// unregisterRecords decides an UnregisterBroker request.
func unregisterRecords(img *fsm.Image, id int32, epoch int64) ([]*keelpb.Record, error) {
	b, err := currentBroker(img, id, epoch)
	if err != nil {
		return nil, err
	}
	rec := &keelpb.Record{Record: &keelpb.Record_UnregisterBroker{UnregisterBroker: &keelpb.UnregisterBrokerRecord{BrokerId: b.ID, BrokerEpoch: b.Epoch}}}
	return append(unregisterChanges(img, []int32{b.ID}), rec), nil
}
