package controller

import (
	"errors"
	"fmt"
	"slices"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// completeReassignment finishes a reassignment whose added replicas have all
// joined the ISR: the replicas become the target set, the removed ones leave
// the ISR, and a new leader is elected if the old one was removed.
func completeReassignment(t *target, v brokerView, unclean bool) {
	if len(t.addingReplicas) == 0 && len(t.removingRep) == 0 {
		return
	}
	for _, b := range t.addingReplicas {
		if !slices.Contains(t.isr, b) {
			return
		}
	}
	gone := map[int32]bool{}
	for _, b := range t.removingRep {
		gone[b] = true
	}
	t.replicas = slices.DeleteFunc(t.replicas, func(b int32) bool { return gone[b] })
	withoutISR(t, gone)
	if gone[t.leader] {
		t.leader = fsm.NoLeader
	}
	electLeader(t, v, unclean)
	t.addingReplicas, t.removingRep = nil, nil
}

// reassignRecords starts a reassignment to replicas (KRaft's way: the
// target set first, then the replicas being removed; the added ones must
// join the ISR before the switch). A target that adds nothing completes at
// once.
func reassignRecords(img *fsm.Image, topic string, partition int32, replicas []int32) ([]*keelpb.Record, error) {
	_, p, err := partitionOf(img, topic, partition)
	if err != nil {
		return nil, err
	}
	if p.Reassigning() {
		return nil, fmt.Errorf("%w: %s/%d is moving to %v; cancel it first", ErrReassignmentInProgress, topic, partition,
			slices.DeleteFunc(slices.Clone(p.Replicas), func(b int32) bool { return slices.Contains(p.RemovingReplicas, b) }))
	}
	if err := checkAssignments(img, [][]int32{replicas}); err != nil {
		return nil, fieldError("replicas", "%v", err.(*FieldError).Msg)
	}
	if slices.Equal(replicas, p.Replicas) {
		return nil, fieldError("replicas", "%v is already the assignment", replicas)
	}
	var adding, removing []int32
	for _, b := range replicas {
		if !slices.Contains(p.Replicas, b) {
			adding = append(adding, b)
		}
	}
	for _, b := range p.Replicas {
		if !slices.Contains(replicas, b) {
			removing = append(removing, b)
		}
	}
	t := targetOf(p)
	t.replicas = append(slices.Clone(replicas), removing...)
	t.addingReplicas, t.removingRep = adding, removing
	v := newView(img)
	if len(adding) == 0 {
		if !slices.ContainsFunc(t.isr, func(b int32) bool { return slices.Contains(replicas, b) }) {
			return nil, fieldError("replicas", "%v holds no ISR member of %s/%d (ISR %v): the partition would lose its data", replicas, topic, partition, p.ISR)
		}
		completeReassignment(&t, v, false)
		// Without additions the order may change too: take the target's.
		t.replicas = slices.Clone(replicas)
	}
	return []*keelpb.Record{changeRecord(p, t)}, nil
}

// cancelReassignmentRecords reverts an ongoing reassignment: the added
// replicas leave, the removed ones stay.
func cancelReassignmentRecords(img *fsm.Image, topic string, partition int32) ([]*keelpb.Record, error) {
	_, p, err := partitionOf(img, topic, partition)
	if err != nil {
		return nil, err
	}
	if !p.Reassigning() {
		return nil, fmt.Errorf("%w: %s/%d", ErrNoReassignment, topic, partition)
	}
	gone := map[int32]bool{}
	for _, b := range p.AddingReplicas {
		gone[b] = true
	}
	t := targetOf(p)
	t.replicas = slices.DeleteFunc(t.replicas, func(b int32) bool { return gone[b] })
	withoutISR(&t, gone)
	if gone[t.leader] {
		t.leader = fsm.NoLeader
	}
	t.addingReplicas, t.removingRep = nil, nil
	electLeader(&t, newView(img), topicUnclean(img, p.TopicID))
	return []*keelpb.Record{changeRecord(p, t)}, nil
}

// Why an election did not happen.
var (
	errElectionNotNeeded = errors.New("election not needed")
	errPreferredNotReady = errors.New("the preferred leader is not in the ISR or not available")
	errNoLiveReplica     = errors.New("no live replica can lead")
)

// electionRecord decides a preferred or unclean election for one partition.
func electionRecord(img *fsm.Image, p *fsm.Partition, typ keelpb.ElectionType) (*keelpb.Record, int32, error) {
	v := newView(img)
	t := targetOf(p)
	switch typ {
	case keelpb.ElectionType_ELECTION_TYPE_PREFERRED:
		pref := p.Replicas[0]
		if p.Leader == pref {
			return nil, p.Leader, errElectionNotNeeded
		}
		if !p.InISR(pref) || !v.eligible(pref) {
			return nil, p.Leader, errPreferredNotReady
		}
		t.leader = pref
	case keelpb.ElectionType_ELECTION_TYPE_UNCLEAN:
		if p.HasLeader() && v.eligible(p.Leader) {
			return nil, p.Leader, errElectionNotNeeded
		}
		t.leader = fsm.NoLeader
		electLeader(&t, v, true)
		if t.leader == fsm.NoLeader {
			return nil, fsm.NoLeader, errNoLiveReplica
		}
	default:
		return nil, p.Leader, fieldError("type", "%v is not preferred or unclean", typ)
	}
	return changeRecord(p, t), t.leader, nil
}

// imbalancedPartitions lists, for automatic leader rebalance, the partitions
// whose preferred leader could lead but does not, on every broker whose
// share of such partitions exceeds ratio (Kafka's
// leader.imbalance.per.broker.percentage, 10%).
func imbalancedPartitions(img *fsm.Image, ratio float64) []*fsm.Partition {
	var out []*fsm.Partition
	v := newView(img)
	for _, b := range img.Brokers() {
		if !v.eligible(b.ID) {
			continue
		}
		var preferred int
		var notLed []*fsm.Partition
		img.PartitionsOnBroker(b.ID, func(p *fsm.Partition) bool {
			if p.Replicas[0] == b.ID {
				preferred++
				if p.Leader != b.ID && p.InISR(b.ID) {
					notLed = append(notLed, p)
				}
			}
			return true
		})
		if preferred > 0 && float64(len(notLed))/float64(preferred) > ratio {
			out = append(out, notLed...)
		}
	}
	return out
}

// leadsAny reports whether broker id leads any partition.
func leadsAny(img *fsm.Image, id int32) bool {
	leads := false
	img.PartitionsOnBroker(id, func(p *fsm.Partition) bool {
		leads = p.Leader == id
		return !leads
	})
	return leads
}
