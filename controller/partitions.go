package controller

import (
	"errors"
	"fmt"
	"slices"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// completeReassignment finishes a reassignment once it is safe, by KRaft's
// rule (PartitionReassignmentReplicas.maybeCompleteReassignment): the ISR
// less the replicas being removed is not empty and holds every replica of
// the target. Then the replicas become the target, the removed ones leave
// the ISR, and a new leader is elected if the old one was removed. Until
// then nothing changes: a target whose replicas have not all caught up
// (one fenced, say) keeps the replicas being removed, in the ISR and
// leading, however long that takes, so that a move never leaves a partition
// with fewer in-sync replicas than its target asks for.
func completeReassignment(t *target, v brokerView, unclean bool) {
	if len(t.addingReplicas) == 0 && len(t.removingRep) == 0 {
		return
	}
	removed := func(b int32) bool { return slices.Contains(t.removingRep, b) }
	isr := slices.DeleteFunc(slices.Clone(t.isr), removed)
	if len(isr) == 0 {
		return
	}
	replicas := slices.DeleteFunc(slices.Clone(t.replicas), removed)
	if len(replicas) == 0 {
		return
	}
	for _, b := range replicas {
		if !slices.Contains(isr, b) {
			return
		}
	}
	if removed(t.leader) {
		t.leader = fsm.NoLeader
	}
	t.replicas, t.isr = replicas, isr
	t.addingReplicas, t.removingRep = nil, nil
	electLeader(t, v, unclean)
}

// reassignmentReplicas computes a reassignment of p to target, against p's
// current replicas (KRaft's PartitionReassignmentReplicas; during another
// reassignment these are its target and the replicas it is removing): the
// target first, then the current replicas it leaves out, which are
// removing; the target's replicas that are not current replicas are
// adding, and so are the ones an ongoing reassignment is still adding
// (they may not have caught up, and a cancel must take them away).
func reassignmentReplicas(p *fsm.Partition, target []int32) (replicas, adding, removing []int32) {
	for _, b := range target {
		if !slices.Contains(p.Replicas, b) || slices.Contains(p.AddingReplicas, b) {
			adding = append(adding, b)
		}
	}
	for _, b := range p.Replicas {
		if !slices.Contains(target, b) {
			removing = append(removing, b)
		}
	}
	return append(slices.Clone(target), removing...), adding, removing
}

// reassignRecords starts a reassignment to replicas, KRaft's way: the
// partition takes the target and keeps the replicas being removed; the
// switch to the target happens once every target replica is in the ISR
// (completeReassignment), at once if that is already so (a new order, or
// a removal the ISR allows). A reassignment over an ongoing one replaces it;
// one to the current replicas, with none ongoing, changes nothing and is
// no error.
func reassignRecords(img *fsm.Image, topic string, partition int32, replicas []int32) ([]*keelpb.Record, error) {
	_, p, err := partitionOf(img, topic, partition)
	if err != nil {
		return nil, err
	}
	if err := checkAssignments(img, [][]int32{replicas}); err != nil {
		return nil, fieldError("replicas", "%v", err.(*FieldError).Msg)
	}
	if !p.Reassigning() && slices.Equal(replicas, p.Replicas) {
		return nil, nil
	}
	t := targetOf(p)
	t.replicas, t.addingReplicas, t.removingRep = reassignmentReplicas(p, replicas)
	t.minISR = rulesFor(img, p.TopicID).minISR
	v := newView(img)
	// A reassignment is not an election: the leader stays while it may
	// (KRaft's ONLINE election), even if it is being removed.
	electLeader(&t, v, false)
	completeReassignment(&t, v, false)
	if r := changeRecord(p, t); r != nil {
		return []*keelpb.Record{r}, nil
	}
	return nil, nil
}

// cancelReassignmentRecords reverts an ongoing reassignment, KRaft's way
// (PartitionReassignmentRevert): the replicas being added leave the
// replicas and the ISR, the ones being removed stay. If the ISR holds only
// replicas being added, the revert would need an unclean election (the
// replicas kept are all out of sync): it is refused with
// ErrInvalidReplicaAssignment unless the topic allows unclean election, in
// which case the first replica kept becomes the ISR and a leader is
// elected as an unclean election would.
func cancelReassignmentRecords(img *fsm.Image, topic string, partition int32) ([]*keelpb.Record, error) {
	_, p, err := partitionOf(img, topic, partition)
	if err != nil {
		return nil, err
	}
	if !p.Reassigning() {
		return nil, fmt.Errorf("%w: %s/%d", ErrNoReassignment, topic, partition)
	}
	added := func(b int32) bool { return slices.Contains(p.AddingReplicas, b) }
	rules := rulesFor(img, p.TopicID)
	t := targetOf(p)
	t.minISR = rules.minISR
	t.replicas = slices.DeleteFunc(t.replicas, added)
	t.isr = slices.DeleteFunc(t.isr, added)
	unclean := rules.unclean
	if len(t.isr) == 0 {
		if !unclean {
			why := fmt.Sprintf("its ISR %v holds only replicas being added", p.ISR)
			if len(p.ISR) == 0 {
				why = "its ISR is empty (its last member restarted after an unclean shutdown)"
			}
			return nil, fmt.Errorf("%w: cannot cancel the reassignment of %s/%d: %s, so reverting to %v would need an unclean leader election; "+
				"wait until one of %v is back in the ISR, or allow unclean election on the topic (%s=true)",
				ErrInvalidReplicaAssignment, topic, partition, why, t.replicas, t.replicas, fsm.UncleanLeaderElection)
		}
		t.isr = []int32{t.replicas[0]}
	}
	if !slices.Contains(t.isr, t.leader) {
		t.leader = fsm.NoLeader
	}
	t.addingReplicas, t.removingRep = nil, nil
	electLeader(&t, newView(img), unclean)
	return []*keelpb.Record{changeRecord(p, t)}, nil
}

// ReassignmentTarget is one partition of a reassignment plan: its target
// replicas, or none to cancel its ongoing reassignment.
type ReassignmentTarget struct {
	Topic     string
	Partition int32
	Replicas  []int32
}

// planRecords decides a reassignment plan: each partition as a single
// reassignment (reassignRecords) or cancel (cancelReassignmentRecords)
// would be, all from the same image, as one batch. One refused entry
// refuses the plan, with the entry named, so that a plan is never half
// applied. A partition named twice is refused: both would be decided from
// the same image, and the second record would undo the first.
func planRecords(img *fsm.Image, plan []ReassignmentTarget) ([]*keelpb.Record, error) {
	type key struct {
		topic     string
		partition int32
	}
	seen := make(map[key]int, len(plan))
	var recs []*keelpb.Record
	for i, t := range plan {
		k := key{t.Topic, t.Partition}
		if j, ok := seen[k]; ok {
			return nil, fieldError(fmt.Sprintf("partitions[%d]", i), "%s/%d is named twice (also partitions[%d])", t.Topic, t.Partition, j)
		}
		seen[k] = i
		var r []*keelpb.Record
		var err error
		if len(t.Replicas) == 0 {
			r, err = cancelReassignmentRecords(img, t.Topic, t.Partition)
		} else {
			r, err = reassignRecords(img, t.Topic, t.Partition, t.Replicas)
		}
		if err != nil {
			return nil, planEntryError(i, t, err)
		}
		recs = append(recs, r...)
	}
	return recs, nil
}

// planEntryError names plan entry i in its refusal, keeping the error's
// kind (a field error stays one, under the entry's field name).
func planEntryError(i int, t ReassignmentTarget, err error) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fieldError(fmt.Sprintf("partitions[%d].%s", i, fe.Field), "%s/%d: %s; nothing in the plan was applied", t.Topic, t.Partition, fe.Msg)
	}
	return fmt.Errorf("partitions[%d] (%s/%d): %w; nothing in the plan was applied", i, t.Topic, t.Partition, err)
}

// Why an election did not happen (Election.Err), told apart by a broker
// that answers a Kafka client's ElectLeaders with Kafka's error for each.
var (
	ErrElectionNotNeeded = errors.New("election not needed")
	ErrPreferredNotReady = errors.New("the preferred leader is not in the ISR or not available")
	ErrNoLiveReplica     = errors.New("no live replica can lead")
	ErrAwaitingLogs      = errors.New("the partition awaits its replicas' logs (after a restore): it is elected once every replica has reported its log, " +
		"or, with unclean.leader.election.enable=true on its topic, once every replica that has not is fenced")
)

// electionRecord decides a preferred or unclean election for one partition.
func electionRecord(img *fsm.Image, p *fsm.Partition, typ keelpb.ElectionType) (*keelpb.Record, int32, error) {
	v := newView(img)
	t := targetOf(p)
	t.minISR = rulesFor(img, p.TopicID).minISR
	if t.awaiting {
		return nil, fsm.NoLeader, ErrAwaitingLogs
	}
	switch typ {
	case keelpb.ElectionType_ELECTION_TYPE_PREFERRED:
		pref := p.Replicas[0]
		if p.Leader == pref {
			return nil, p.Leader, ErrElectionNotNeeded
		}
		if !p.InISR(pref) || !v.eligible(pref) {
			return nil, p.Leader, ErrPreferredNotReady
		}
		t.leader = pref
	case keelpb.ElectionType_ELECTION_TYPE_UNCLEAN:
		if p.HasLeader() && v.eligible(p.Leader) {
			return nil, p.Leader, ErrElectionNotNeeded
		}
		t.leader = fsm.NoLeader
		electLeader(&t, v, true)
		if t.leader == fsm.NoLeader {
			return nil, fsm.NoLeader, ErrNoLiveReplica
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
				if p.Leader != b.ID && p.InISR(b.ID) && !p.AwaitsReplicaLogs() {
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
