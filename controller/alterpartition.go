package controller

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// NoBrokerEpoch is the broker epoch of an ISR member whose epoch its leader
// does not know: the controller then checks only the member's state
// (Kafka's -1 in AlterPartition's NewIsrWithEpochs).
const NoBrokerEpoch int64 = -1

// isrMember is one member of a requested ISR and the broker epoch its
// leader knows it at (NoBrokerEpoch: unknown).
type isrMember struct {
	id    int32
	epoch int64
}

// requestedISR is an AlterPartition's new ISR and the field it came in:
// new_isr_with_epochs when given (KIP-903), else new_isr, whose members'
// epochs are not known (as Kafka reads a request older than version 3).
func requestedISR(req *keelpb.AlterPartitionRequest) (string, []isrMember) {
	if len(req.NewIsrWithEpochs) > 0 {
		out := make([]isrMember, len(req.NewIsrWithEpochs))
		for i, m := range req.NewIsrWithEpochs {
			out[i] = isrMember{m.GetBrokerId(), m.GetBrokerEpoch()}
		}
		return "new_isr_with_epochs", out
	}
	out := make([]isrMember, len(req.NewIsr))
	for i, id := range req.NewIsr {
		out[i] = isrMember{id, NoBrokerEpoch}
	}
	return "new_isr", out
}

// alterPartitionRecords decides a partition leader's ISR change with the
// checks of Kafka's ReplicationControlManager.alterPartition and
// validateAlterPartitionData, in their order, so that a request wrong in
// several ways gets the answer Kafka would give:
//
//  1. the sender is registered at its broker epoch (STALE_BROKER_EPOCH,
//     an unknown sender included);
//  2. the partition exists (UNKNOWN_TOPIC_OR_PARTITION);
//  3. neither its leader epoch nor its partition epoch is above the
//     controller's (NOT_CONTROLLER: the controller is behind);
//  4. its leader epoch is not below the controller's (FENCED_LEADER_EPOCH);
//  5. the sender is the leader (INVALID_REQUEST: at the current leader
//     epoch it cannot be anyone else);
//  6. its partition epoch is not below the controller's
//     (INVALID_UPDATE_VERSION, even when the ISR is unchanged);
//  7. the new ISR is a set of the partition's replicas (INVALID_REQUEST)
//     and holds the leader (INVALID_REQUEST);
//  8. every member is registered, not shutting down, not fenced, and at
//     the broker epoch the request gives for it, if any
//     (INELIGIBLE_REPLICA: a member at another epoch restarted since its
//     leader saw it, KIP-903).
//
// An ISR that completes a reassignment finishes it in the same record.
func alterPartitionRecords(img *fsm.Image, req *keelpb.AlterPartitionRequest) ([]*keelpb.Record, error) {
	if _, err := currentBroker(img, req.BrokerId, req.BrokerEpoch); err != nil {
		if errors.Is(err, ErrBrokerNotRegistered) {
			// Kafka's checkBrokerEpoch: no registration is a stale epoch.
			return nil, fmt.Errorf("%w: broker %d is not registered", ErrStaleBrokerEpoch, req.BrokerId)
		}
		return nil, err
	}
	id, err := fsm.ParseTopicID(req.TopicId)
	if err != nil {
		return nil, fieldError("topic_id", "%v", err)
	}
	p, ok := img.Partition(id, req.Partition)
	if !ok {
		return nil, fmt.Errorf("%w: %s/%d", ErrUnknownTopic, req.TopicId, req.Partition)
	}
	name := partitionName(img, p)
	switch {
	case req.LeaderEpoch > p.LeaderEpoch:
		return nil, fmt.Errorf("%w: leader epoch %d of %s is above the controller's %d", ErrNotController, req.LeaderEpoch, name, p.LeaderEpoch)
	case req.PartitionEpoch > p.PartitionEpoch:
		return nil, fmt.Errorf("%w: partition epoch %d of %s is above the controller's %d", ErrNotController, req.PartitionEpoch, name, p.PartitionEpoch)
	case req.LeaderEpoch < p.LeaderEpoch:
		return nil, fmt.Errorf("%w: leader epoch %d of %s, current %d", ErrFencedLeaderEpoch, req.LeaderEpoch, name, p.LeaderEpoch)
	case req.BrokerId != p.Leader:
		return nil, fmt.Errorf("%w: broker_id: broker %d is not the leader of %s at leader epoch %d (broker %d is)",
			ErrInvalidRequest, req.BrokerId, name, p.LeaderEpoch, p.Leader)
	case req.PartitionEpoch < p.PartitionEpoch:
		return nil, fmt.Errorf("%w: partition epoch %d of %s, current %d", ErrInvalidUpdateVersion, req.PartitionEpoch, name, p.PartitionEpoch)
	}
	field, members := requestedISR(req)
	isr := make([]int32, len(members))
	for i, m := range members {
		isr[i] = m.id
	}
	for i, b := range isr {
		switch {
		case b < 0:
			return nil, fmt.Errorf("%w: %s: %v holds the negative broker id %d", ErrInvalidRequest, field, isr, b)
		case slices.Contains(isr[:i], b):
			return nil, fmt.Errorf("%w: %s: %v names broker %d twice", ErrInvalidRequest, field, isr, b)
		case !slices.Contains(p.Replicas, b):
			return nil, fmt.Errorf("%w: %s: broker %d is not a replica of %s (replicas %v)", ErrInvalidRequest, field, b, name, p.Replicas)
		}
	}
	if !slices.Contains(isr, p.Leader) {
		return nil, fmt.Errorf("%w: %s: %v omits the leader %d", ErrInvalidRequest, field, isr, p.Leader)
	}
	if err := checkLeaderRecovery(p, req.LeaderRecoveryState, isr); err != nil {
		return nil, err
	}
	if bad := ineligibleMembers(img, members); len(bad) > 0 {
		return nil, fmt.Errorf("%w: %s: %s", ErrIneligibleReplica, field, strings.Join(bad, "; "))
	}
	rules := rulesFor(img, p.TopicID)
	t := targetOf(p)
	t.isr, t.minISR = isr, rules.minISR
	t.recovery = req.LeaderRecoveryState
	completeReassignment(&t, newView(img), rules.unclean)
	if r := changeRecord(p, t); r != nil {
		return []*keelpb.Record{r}, nil
	}
	return nil, nil
}

// checkLeaderRecovery applies KRaft's leader recovery rules (KIP-704) to an
// AlterPartition (INVALID_REQUEST, as Kafka's validateAlterPartitionData): a
// leader still RECOVERING from an unclean election may not grow the ISR
// beyond itself, and a RECOVERED partition cannot go back to RECOVERING. The
// request's state is the one the partition takes, so RECOVERED (the default)
// confirms a RECOVERING partition.
func checkLeaderRecovery(p *fsm.Partition, state keelpb.LeaderRecoveryState, isr []int32) error {
	const recovering = keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERING
	switch {
	case state == recovering && len(isr) > 1:
		return fmt.Errorf("%w: leader_recovery_state: RECOVERING with an ISR of %d members: a leader recovering from an unclean election leads an ISR of itself alone until it confirms RECOVERED", ErrInvalidRequest, len(isr))
	case state == recovering && !p.Recovering():
		return fmt.Errorf("%w: leader_recovery_state: RECOVERING, but the partition is RECOVERED, and cannot go back", ErrInvalidRequest)
	}
	return nil
}

// ineligibleMembers says why each member of a requested ISR that may not be
// in it may not (Kafka's ineligibleReplicasForIsr, in its order).
func ineligibleMembers(img *fsm.Image, members []isrMember) []string {
	var bad []string
	for _, m := range members {
		b, ok := img.Broker(m.id)
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("broker %d is not registered", m.id))
		case b.ShuttingDown:
			bad = append(bad, fmt.Sprintf("broker %d is shutting down", m.id))
		case b.Fenced:
			bad = append(bad, fmt.Sprintf("broker %d is fenced", m.id))
		case m.epoch != NoBrokerEpoch && m.epoch != b.Epoch:
			bad = append(bad, fmt.Sprintf("broker %d is at broker epoch %d, not %d: it has registered again since", m.id, b.Epoch, m.epoch))
		}
	}
	return bad
}

// partitionName names p as topic/partition for messages.
func partitionName(img *fsm.Image, p *fsm.Partition) string {
	if t, ok := img.TopicByID(p.TopicID); ok {
		return fmt.Sprintf("%s/%d", t.Name, p.Partition)
	}
	return fmt.Sprintf("%s/%d", p.TopicID, p.Partition)
}
