package controller

import (
	"bytes"
	"slices"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// The partition rules (Kafka's PartitionChangeBuilder, in Keel's words):
// pure functions from a partition, the brokers' states and a wanted change to
// one PartitionChange record, or none.

// brokerView answers which brokers may lead or be in an ISR, as a decision
// sees them: the committed image, with the brokers this very decision takes
// offline (fences, shuts down, unregisters) already counted out.
type brokerView struct {
	img     *fsm.Image
	offline map[int32]bool
	online  map[int32]bool // brokers this decision makes eligible (unfences)
}

func newView(img *fsm.Image, offline ...int32) brokerView {
	v := brokerView{img: img, offline: map[int32]bool{}, online: map[int32]bool{}}
	for _, id := range offline {
		v.offline[id] = true
	}
	return v
}

// eligible: registered, unfenced, not shutting down, and not being taken
// offline by this decision.
func (v brokerView) eligible(id int32) bool {
	if v.offline[id] {
		return false
	}
	if v.online[id] {
		return true
	}
	b, ok := v.img.Broker(id)
	return ok && b.Eligible()
}

// target is the state a decision wants for a partition; changeRecord turns
// it into a record holding only what differs.
type target struct {
	leader                      int32
	isr, replicas               []int32
	addingReplicas, removingRep []int32
	// elr and lastKnown are the eligible leader replicas and the last
	// known leader (KIP-966); changeRecord settles them (settleEligible).
	elr, lastKnown []int32
	recovery       keelpb.LeaderRecoveryState

	// minISR is the topic's min.insync.replicas in effect, for
	// settleEligible; 0 when the decision did not look it up, and then the
	// ELR is only kept consistent (replicas outside the ISR), never grown
	// or cleared.
	minISR int32
	// uncleanElected: electLeader chose a leader from outside the ISR and
	// the ELR.
	uncleanElected bool
	// ineligible are replicas that may no longer be eligible leader
	// replicas (unregistered brokers).
	ineligible []int32
	// awaiting: the partition awaits its replicas' logs
	// (fsm.Partition.AwaitsReplicaLogs); only recoveryElection elects it.
	awaiting bool
}

func targetOf(p *fsm.Partition) target {
	return target{
		leader: p.Leader, isr: slices.Clone(p.ISR), replicas: slices.Clone(p.Replicas),
		addingReplicas: slices.Clone(p.AddingReplicas), removingRep: slices.Clone(p.RemovingReplicas),
		elr: slices.Clone(p.ELR()), lastKnown: slices.Clone(p.LastKnownELR()), recovery: p.LeaderRecoveryState,
		awaiting: p.AwaitsReplicaLogs(),
	}
}

// sharedTarget is targetOf without the copies, for the decisions that only
// replace t's fields (withoutISR, electLeader) and never write into its
// slices, which are p's own.
func sharedTarget(p *fsm.Partition) target {
	return target{
		leader: p.Leader, isr: p.ISR, replicas: p.Replicas,
		addingReplicas: p.AddingReplicas, removingRep: p.RemovingReplicas,
		elr: p.ELR(), lastKnown: p.LastKnownELR(), recovery: p.LeaderRecoveryState,
		awaiting: p.AwaitsReplicaLogs(),
	}
}

// topicRules are the configs of a partition's topic that its decisions
// follow.
type topicRules struct {
	unclean bool
	minISR  int32
}

// rulesFor reads the rules of topic id from img: its own configs, else the
// cluster defaults, else the built-in ones.
func rulesFor(img *fsm.Image, id fsm.TopicID) topicRules {
	t, ok := img.TopicByID(id)
	if !ok {
		return topicRules{minISR: 1}
	}
	return topicRules{unclean: img.UncleanElection(t), minISR: img.MinISR(t)}
}

// settleEligible brings t's eligible leader replicas and last known leader
// in line with its ISR and leader, by KIP-966's rules as KRaft applies them
// (PartitionChangeBuilder, with the last known leader kept in
// LastKnownElr):
//   - an unclean election clears the ELR: its leader may lack records the
//     eligible replicas have, and so must not be followed by them;
//   - an ISR at or above min.insync.replicas (at most the replication
//     factor, as in KRaft's getTopicEffectiveMinIsr) needs no ELR;
//   - an ISR below it: every replica that was in the ISR or the ELR and is
//     not in the new ISR is eligible. Strict min ISR means the high
//     watermark cannot advance while the ISR is that small, so a replica
//     that left the ISR then holds every committed record;
//   - the last known leader is set to the leader the partition loses when
//     no replica can take over, and cleared once it has a leader again.
//
// Where Kafka empties the ISR into the ELR, Keel keeps the ISR's last
// member (election.go's withoutISR): it is what Kafka would hold as an ELR
// member, and "no live ISR member" is Keel's "empty ISR".
func settleEligible(p *fsm.Partition, t *target) {
	keep := func(id int32) bool {
		return slices.Contains(t.replicas, id) && !slices.Contains(t.isr, id) && !slices.Contains(t.ineligible, id)
	}
	// KRaft's effective min ISR: never above the replication factor.
	minISR := min(t.minISR, int32(len(t.replicas)))
	switch {
	case t.uncleanElected:
		t.elr = nil
	case minISR > 0 && int32(len(t.isr)) >= minISR:
		t.elr = nil
	case minISR > 0:
		// In assignment order, the order elections try them in.
		var elr []int32
		for _, id := range t.replicas {
			if (slices.Contains(t.elr, id) || slices.Contains(p.ISR, id)) && keep(id) {
				elr = append(elr, id)
			}
		}
		t.elr = elr
	default:
		if slices.ContainsFunc(t.elr, func(id int32) bool { return !keep(id) }) {
			t.elr = slices.DeleteFunc(slices.Clone(t.elr), func(id int32) bool { return !keep(id) })
		}
	}
	switch {
	case t.leader != fsm.NoLeader:
		t.lastKnown = nil
	case p.Leader != fsm.NoLeader && slices.Contains(t.replicas, p.Leader):
		t.lastKnown = []int32{p.Leader}
	case slices.ContainsFunc(t.lastKnown, func(id int32) bool { return !slices.Contains(t.replicas, id) }):
		t.lastKnown = nil
	}
}

// changeRecord returns the record that takes p to t, or nil if t is p. It
// settles t's eligible leader replicas first (settleEligible).
func changeRecord(p *fsm.Partition, t target) *keelpb.Record {
	settleEligible(p, &t)
	r := &keelpb.PartitionChangeRecord{TopicId: bytes.Clone(p.TopicID[:]), Partition: p.Partition}
	changed := false
	if t.leader != p.Leader {
		r.Leader, changed = &t.leader, true
	}
	if !slices.Equal(t.isr, p.ISR) {
		r.Isr, changed = &keelpb.Int32List{Values: t.isr}, true
	}
	if !slices.Equal(t.replicas, p.Replicas) {
		r.Replicas, changed = &keelpb.Int32List{Values: t.replicas}, true
	}
	if !slices.Equal(t.addingReplicas, p.AddingReplicas) {
		r.AddingReplicas, changed = &keelpb.Int32List{Values: t.addingReplicas}, true
	}
	if !slices.Equal(t.removingRep, p.RemovingReplicas) {
		r.RemovingReplicas, changed = &keelpb.Int32List{Values: t.removingRep}, true
	}
	if !slices.Equal(t.elr, p.ELR()) {
		r.EligibleLeaderReplicas, changed = &keelpb.Int32List{Values: t.elr}, true
	}
	if !slices.Equal(t.lastKnown, p.LastKnownELR()) {
		r.LastKnownElr, changed = &keelpb.Int32List{Values: t.lastKnown}, true
	}
	if t.recovery != p.LeaderRecoveryState {
		r.LeaderRecoveryState, changed = &t.recovery, true
	}
	if !changed {
		return nil
	}
	return &keelpb.Record{Record: &keelpb.Record_PartitionChange{PartitionChange: r}}
}

// electLeader sets t.leader by KRaft's rules (PartitionChangeBuilder's
// electAnyLeader, with KAFKA-19522's check of the last known leader), given
// t.isr, t.elr, t.lastKnown and t.replicas:
//   - the current leader stays while it is in the ISR and eligible;
//   - otherwise the first replica, in assignment order, that is in the ISR
//     and eligible;
//   - otherwise, when no ISR member is eligible, the first eligible replica
//     that is an eligible leader replica (KIP-966), which becomes the whole
//     ISR: a clean election, since it holds every committed record;
//   - otherwise, when the ISR and the ELR are both empty (every replica
//     that held every committed record restarted after an unclean
//     shutdown), the last known leader if it is eligible, whatever the
//     topic's configs: it was the last to lead, and nothing better can
//     come back (KRaft's "balanced" recovery). It leads as an unclean
//     election does, RECOVERING;
//   - otherwise, if unclean election is allowed, the first eligible
//     replica: it becomes the whole ISR, the ELR is cleared and the
//     partition is RECOVERING until its new leader confirms (KIP-704);
//   - otherwise no leader, and the ISR keeps what it has.
//
// A partition that awaits its replicas' logs gets no leader here: its ISR
// is a snapshot's, not a fact, and recoveryElection elects it from the logs.
func electLeader(t *target, v brokerView, unclean bool) {
	if t.awaiting {
		return
	}
	if t.leader != fsm.NoLeader && slices.Contains(t.isr, t.leader) && v.eligible(t.leader) {
		return
	}
	for _, id := range t.replicas {
		if slices.Contains(t.isr, id) && v.eligible(id) {
			t.leader = id
			return
		}
	}
	for _, id := range t.replicas {
		if slices.Contains(t.elr, id) && v.eligible(id) {
			t.leader, t.isr = id, []int32{id}
			return
		}
	}
	if len(t.isr) == 0 && len(t.elr) == 0 && len(t.lastKnown) == 1 &&
		slices.Contains(t.replicas, t.lastKnown[0]) && v.eligible(t.lastKnown[0]) {
		electUnclean(t, t.lastKnown[0])
		return
	}
	if unclean {
		for _, id := range t.replicas {
			if v.eligible(id) {
				electUnclean(t, id)
				return
			}
		}
	}
	t.leader = fsm.NoLeader
}

// electUnclean makes id the leader and the whole ISR of a partition that
// may lack committed records: its eligible replicas are cleared
// (settleEligible) and it is RECOVERING until id confirms (KIP-704).
func electUnclean(t *target, id int32) {
	t.leader, t.isr = id, []int32{id}
	t.uncleanElected = true
	t.recovery = keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERING
}

// withoutISR removes the given brokers from t's ISR, except that the ISR
// never becomes empty: when every member goes, it keeps the leader if that
// was a member (the most up to date replica), else its first member.
func withoutISR(t *target, gone map[int32]bool) {
	kept := slices.DeleteFunc(slices.Clone(t.isr), func(id int32) bool { return gone[id] })
	if len(kept) == 0 && len(t.isr) > 0 {
		last := t.isr[0]
		if slices.Contains(t.isr, t.leader) {
			last = t.leader
		}
		kept = []int32{last}
	}
	t.isr = kept
}

// offlineChanges moves leadership and ISR membership off brokers that this
// decision takes offline (fenced, shutting down, unregistered): the seeds'
// onBrokerFailure and controlled shutdown. Each affected partition gets one
// record, whichever of the brokers it touches. It visits only the
// partitions on those brokers. Below min.insync.replicas the brokers that
// leave an ISR become its eligible leader replicas.
func offlineChanges(img *fsm.Image, brokers []int32) []*keelpb.Record {
	return offlineChangesRemoving(img, brokers, false)
}

// unregisterChanges is offlineChanges for brokers that are unregistered:
// they also leave every ELR, as in KRaft's handleBrokerUnregistered (a
// broker that comes back under the same id is a new one, and may have
// nothing).
func unregisterChanges(img *fsm.Image, brokers []int32) []*keelpb.Record {
	return offlineChangesRemoving(img, brokers, true)
}

// uncleanShutdownChanges takes broker out of every ISR and ELR it is in,
// for a new incarnation that reports an unclean shutdown of the last one
// (KRaft's handleBrokerUncleanShutdown): it may have lost records it had
// not fsynced, so it is no longer known to hold every committed record. It
// leaves the ISR even as its last member, and the partition then waits
// without a leader for an eligible leader replica to come back (or for its
// last known leader, or an unclean election: electLeader). Below
// fsm.EmptyISRMetadataVersion, where an ISR may not be empty, it keeps its
// last ISR places and leaves only the ELRs (unregisterChanges).
func uncleanShutdownChanges(img *fsm.Image, broker int32) []*keelpb.Record {
	if img.FinalizedMetadataVersion() < fsm.EmptyISRMetadataVersion {
		return unregisterChanges(img, []int32{broker})
	}
	v := newView(img, broker)
	gone := []int32{broker}
	topics := topicCache{img: img}
	var recs []*keelpb.Record
	img.PartitionsOnBroker(broker, func(p *fsm.Partition) bool {
		if !p.InISR(broker) && !slices.Contains(p.ELR(), broker) {
			return true
		}
		t := sharedTarget(p)
		t.isr = slices.DeleteFunc(slices.Clone(p.ISR), func(id int32) bool { return id == broker })
		t.ineligible = gone
		recs = topics.elect(recs, p, t, v)
		return true
	})
	return recs
}

func offlineChangesRemoving(img *fsm.Image, brokers []int32, unregistering bool) []*keelpb.Record {
	v := newView(img, brokers...)
	type partitionID struct {
		topic fsm.TopicID
		index int32
	}
	// Only a partition on two of the brokers can be met twice.
	var seen map[partitionID]bool
	if len(brokers) > 1 {
		seen = map[partitionID]bool{}
	}
	topics := topicCache{img: img}
	var recs []*keelpb.Record
	for _, b := range brokers {
		img.PartitionsOnBroker(b, func(p *fsm.Partition) bool {
			if seen != nil {
				key := partitionID{p.TopicID, p.Partition}
				if seen[key] {
					return true
				}
				seen[key] = true
			}
			t := sharedTarget(p)
			withoutISR(&t, v.offline)
			if unregistering {
				t.ineligible = brokers
			}
			recs = topics.elect(recs, p, t, v)
			return true
		})
	}
	return recs
}

// topicCache remembers the last topic a walk over many partitions looked
// up: partitions come grouped by topic, so a decision over tens of
// thousands of them looks each topic up once, and its records share one
// copy of the topic id.
type topicCache struct {
	img     *fsm.Image
	id      fsm.TopicID
	valid   bool
	rules   topicRules
	idBytes []byte
}

func (c *topicCache) load(id fsm.TopicID) {
	if c.valid && c.id == id {
		return
	}
	c.id, c.valid = id, true
	c.rules = rulesFor(c.img, id)
	c.idBytes = bytes.Clone(id[:])
}

func (c *topicCache) unclean(id fsm.TopicID) bool {
	c.load(id)
	return c.rules.unclean
}

// elect elects t's leader by v and the topic's rules (electLeader), and
// appends to recs the change that takes p to t, if any.
func (c *topicCache) elect(recs []*keelpb.Record, p *fsm.Partition, t target, v brokerView) []*keelpb.Record {
	electLeader(&t, v, c.unclean(p.TopicID))
	if r := c.changeRecord(p, t); r != nil {
		recs = append(recs, r)
	}
	return recs
}

// changeRecord is the package's changeRecord with the shared topic id, and
// the topic's min.insync.replicas when t has none.
func (c *topicCache) changeRecord(p *fsm.Partition, t target) *keelpb.Record {
	c.load(p.TopicID)
	if t.minISR == 0 {
		t.minISR = c.rules.minISR
	}
	r := changeRecord(p, t)
	if r != nil {
		r.GetPartitionChange().TopicId = c.idBytes
	}
	return r
}

// onlineChanges gives a leader to every leaderless partition on a broker that
// has just become eligible and can lead it (the seeds' onBrokerStartup). It
// does not add the broker to ISRs: its partition leaders do that, through
// AlterPartition, once it has caught up.
func onlineChanges(img *fsm.Image, broker int32) []*keelpb.Record {
	v := newView(img)
	v.online[broker] = true
	return electForLeaderless(v, func(fn func(*fsm.Partition) bool) { img.PartitionsOnBroker(broker, fn) })
}

// electForLeaderless elects, by v, a leader for each leaderless partition
// that each visits, and returns the changes.
func electForLeaderless(v brokerView, each func(func(*fsm.Partition) bool)) []*keelpb.Record {
	topics := topicCache{img: v.img}
	var recs []*keelpb.Record
	each(func(p *fsm.Partition) bool {
		if p.HasLeader() {
			return true
		}
		recs = topics.elect(recs, p, sharedTarget(p), v)
		return true
	})
	return recs
}

// leaderlessChanges elects a leader for every partition that has none but
// could have one: the seeds' triggerOnlinePartitionStateChange, run once by
// each new active controller. A decision the previous controller had cut
// into several raft entries (an unfencing and the elections it allows) may
// have lost its tail with that controller; this finishes it.
func leaderlessChanges(img *fsm.Image) []*keelpb.Record {
	return electForLeaderless(newView(img), img.EachPartition)
}
