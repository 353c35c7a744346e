package fsm

import (
	"fmt"
	"maps"

	"github.com/keel-dev/keel/proto/keelpb"
)

// A restored snapshot is older than the cluster it goes into: brokers'
// logs hold leader epochs the snapshot never saw, brokers hold epochs it
// never issued, and producers hold producer ids it never handed out. The
// images below are what a restore writes instead of the snapshot as it is,
// so that no epoch goes back: Kafka has no restore, and these are Keel's
// rules (docs/design.md, "Restores and epochs").

// AwaitsReplicaLogs reports whether the partition waits for its replicas'
// logs before it gets a leader: no leader, RECOVERING (whose data is in
// doubt), and no last known leader (nobody knows whose log is right). A
// restore that cannot vouch for a partition's leader leaves it so, and the
// active controller elects the replica whose log is furthest on (the
// highest last leader epoch, then the longest log: KIP-966's unclean
// recovery) at a leader epoch above every epoch the replicas' logs hold.
// A RECOVERING partition that lost its leader knows it as its last known
// leader, and is elected by the usual rules (KIP-704).
func (p *Partition) AwaitsReplicaLogs() bool {
	return p.Leader == NoLeader && p.Recovering() && len(p.LastKnownELR()) == 0
}

// DisasterRecoveryProducerIDs is how far a disaster recovery moves the next
// free producer id past the snapshot's: the lost quorum may have handed out
// blocks since the snapshot, and a producer id given twice lets a broker
// take a new producer's batch for an old one's duplicate. 2^40 ids are a
// billion blocks, more than a cluster hands out in centuries.
const DisasterRecoveryProducerIDs int64 = 1 << 40

// RestoredOnto returns the image that restoring img (a snapshot) into the
// running cluster whose committed image is cur writes, with the cluster's
// identity (cur's cluster id and controller epoch, and leader as the
// controller that restores it) and with nothing that goes back:
//   - every broker cur registers keeps its registration (its incarnation,
//     epoch and state are a live process's, which no snapshot knows
//     better); a broker only img registers (unregistered since) is
//     restored fenced;
//   - a partition cur holds (same topic id and index) keeps cur's replicas,
//     leader, ISR and eligible replicas, where its data is, and its leader
//     and partition epochs become one above the higher of cur's and img's;
//   - a partition only img holds (its topic deleted since) awaits its
//     replicas' logs (AwaitsReplicaLogs), one epoch above img's;
//   - the next free producer id is the higher of the two.
//
// Topics, their configs and partition counts, the cluster's configs and the
// metadata version are img's. The result is rebuilt record by record as a
// snapshot is read, so it is an image the state machine accepts.
func (img *Image) RestoredOnto(cur *Image, leader int32) (*Image, error) {
	c := img.clone()
	c.ClusterID, c.ControllerEpoch, c.ControllerLeaderID = cur.ClusterID, cur.ControllerEpoch, leader
	c.NextProducerID = max(img.NextProducerID, cur.NextProducerID)
	c.brokers = maps.Clone(cur.brokers)
	if c.brokers == nil {
		c.brokers = map[int32]*Broker{}
	}
	for id, b := range img.brokers {
		if _, ok := c.brokers[id]; !ok {
			gone := *b
			gone.Fenced, gone.ShuttingDown = true, false
			c.brokers[id] = &gone
		}
	}
	return c.rebuild(func(r *keelpb.PartitionRecord, id TopicID) {
		now, ok := cur.Partition(id, r.GetPartition())
		if !ok {
			awaitLogs(r)
			return
		}
		r.Replicas, r.Isr, r.Leader = now.Replicas, now.ISR, now.Leader
		r.AddingReplicas, r.RemovingReplicas = now.AddingReplicas, now.RemovingReplicas
		r.EligibleLeaderReplicas, r.LastKnownElr = now.ELR(), now.LastKnownELR()
		r.LeaderRecoveryState = now.LeaderRecoveryState
		r.LeaderEpoch = max(r.GetLeaderEpoch(), now.LeaderEpoch) + 1
		r.PartitionEpoch = max(r.GetPartitionEpoch(), now.PartitionEpoch) + 1
	})
}

// ForDisasterRecovery returns the image a new quorum started from img (a
// snapshot of a quorum that was lost) writes: img's identity, with nothing
// trusted that the lost quorum may have changed since:
//   - no broker is registered: every broker registers again, with an epoch
//     of the new quorum (a broker that kept running is told its epoch is
//     unknown, and learns the new quorum's controller epoch, lower than
//     the lost one's, from the answer to its registration);
//   - every partition awaits its replicas' logs (AwaitsReplicaLogs), one
//     epoch above img's: its leader may have moved since, and only the
//     brokers' logs say where the acknowledged records are;
//   - the next free producer id moves DisasterRecoveryProducerIDs on.
func (img *Image) ForDisasterRecovery() (*Image, error) {
	c := img.clone()
	c.brokers = map[int32]*Broker{}
	if img.NextProducerID > 0 {
		c.NextProducerID = img.NextProducerID + DisasterRecoveryProducerIDs
	}
	return c.rebuild(func(r *keelpb.PartitionRecord, _ TopicID) { awaitLogs(r) })
}

// awaitLogs makes a snapshot's partition record one that awaits its
// replicas' logs: no leader, RECOVERING, no eligible replicas (the election
// is by the logs, not by who was eligible), one epoch on.
func awaitLogs(r *keelpb.PartitionRecord) {
	r.Leader = NoLeader
	r.LeaderRecoveryState = keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERING
	r.EligibleLeaderReplicas, r.LastKnownElr = nil, nil
	r.LeaderEpoch++
	r.PartitionEpoch++
}

// rebuild replays img's records, as a snapshot of it would hold them, into
// a new image in restore mode, with edit applied to every partition record
// first: an edited image is checked as a snapshot is. edit may replace the
// record's slices (never write into them: they are img's).
func (img *Image) rebuild(edit func(r *keelpb.PartitionRecord, topic TopicID)) (*Image, error) {
	out := Empty()
	ctx := newApplyContext(img.Offset, img.Term, true, img.partitions)
	err := imageRecords(img, func(rec *keelpb.Record) error {
		if p := rec.GetPartition(); p != nil {
			id, err := topicIDFromBytes(p.GetTopicId())
			if err != nil {
				return err
			}
			edit(p, id)
		}
		if err := applyRecord(out, rec, ctx); err != nil {
			return fmt.Errorf("%s: %w", RecordType(rec), err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("restored image: %w", err)
	}
	ctx.finish()
	out.Offset, out.Term = img.Offset, img.Term
	return out, nil
}
