package controller

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// Recovery from the replicas' logs: what the controller does when its
// metadata is behind the brokers' data, which only a restore makes so (a
// snapshot restored into a running cluster, or a new quorum started from
// one). A partition the restore cannot vouch for awaits its replicas' logs
// (fsm.Partition.AwaitsReplicaLogs); a broker whose log holds a leader
// epoch above the one its metadata gives the partition (KIP-101's epochs
// only grow, so only a metadata rollback does that) holds the replica and
// reports it, and the partition is put to await its logs. Every replica of
// an awaiting partition reports its log's last leader epoch and end offset
// (ReportReplicaLogs), and the partition is elected as Kafka's unclean
// recovery elects (KIP-966, GetReplicaLogInfo): the replica with the
// highest last leader epoch, then the longest log, at a leader epoch above
// every epoch any replica's log holds, so that no epoch is used twice.

// replicaLog is one replica's report of its log.
type replicaLog struct {
	brokerEpoch int64
	// leaderEpoch is the partition's leader epoch in the broker's image
	// when it reported: a report is about that state of the partition.
	leaderEpoch int32
	// lastEpoch is the highest leader epoch in the log, -1 for none.
	lastEpoch int32
	endOffset int64
}

// furtherOn orders two logs as the election does: the higher last leader
// epoch, then the longer log.
func (r replicaLog) furtherOn(o replicaLog) bool {
	return cmp.Or(cmp.Compare(r.lastEpoch, o.lastEpoch), cmp.Compare(r.endOffset, o.endOffset)) > 0
}

type partitionKey struct {
	topic     fsm.TopicID
	partition int32
}

// maxEpochRaise bounds the leader changes one recovery writes for one
// partition: an epoch moves by one per leader change (KRaft's rule, which
// every node applies), so passing epoch L from E takes L-E of them. A
// partition further behind is raised that far, stays awaiting, and is
// raised again once its replicas report at the new epoch.
const maxEpochRaise = 2048

// recoveryInterval is how often the active controller decides again for
// the partitions it holds reports of: a missing replica may have been
// fenced since, which lets a topic that allows unclean election go on.
const recoveryInterval = time.Second

// logReports holds the reports the active controller has received and not
// yet acted on, by partition and broker. They live in memory: a new active
// controller starts without them, and brokers report again to it (they
// report once per controller epoch).
type logReports struct {
	mu    sync.Mutex
	parts map[partitionKey]map[int32]replicaLog
	kick  chan struct{}
}

func newLogReports() *logReports {
	return &logReports{parts: map[partitionKey]map[int32]replicaLog{}, kick: make(chan struct{}, 1)}
}

func (r *logReports) add(broker int32, key partitionKey, log replicaLog) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.parts[key] == nil {
		r.parts[key] = map[int32]replicaLog{}
	}
	r.parts[key][broker] = log
}

func (r *logReports) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// snapshot copies the reports for a decision.
func (r *logReports) snapshot() map[partitionKey]map[int32]replicaLog {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[partitionKey]map[int32]replicaLog, len(r.parts))
	for k, v := range r.parts {
		out[k] = maps.Clone(v)
	}
	return out
}

// drop forgets the reports of done partitions that are still the ones
// decided on (a report that came meanwhile is kept).
func (r *logReports) drop(done map[partitionKey]map[int32]replicaLog) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, decided := range done {
		for b, log := range decided {
			if cur, ok := r.parts[k][b]; ok && cur == log {
				delete(r.parts[k], b)
			}
		}
		if len(r.parts[k]) == 0 {
			delete(r.parts, k)
		}
	}
}

func (r *logReports) empty() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.parts) == 0
}

// ReplicaLogReport is one replica's log as its broker reports it.
type ReplicaLogReport struct {
	TopicID     fsm.TopicID
	Partition   int32
	LeaderEpoch int32 // the partition's leader epoch in the broker's image
	LastEpoch   int32 // the log's highest leader epoch, -1 for none
	EndOffset   int64
}

// ReportReplicaLogs takes a broker's reports of its replicas' logs: the
// replicas of partitions that await their logs, and replicas whose log is
// ahead of the metadata's leader epoch. It fails with ErrStaleBrokerEpoch
// or ErrBrokerNotRegistered for an epoch that is not the broker's current
// one, and as a write does when this node is not active. The reports are
// acted on by the recovery loop; a report that no longer matches the
// partition when it is decided is dropped, and the broker reports again
// once its metadata moves.
func (c *Controller) ReportReplicaLogs(_ context.Context, brokerID int32, brokerEpoch int64, logs []ReplicaLogReport) error {
	l := c.active.Load()
	if l == nil {
		return c.notLeader()
	}
	if _, err := currentBroker(c.fsm.Image(), brokerID, brokerEpoch); err != nil {
		return err
	}
	for _, r := range logs {
		l.reports.add(brokerID, partitionKey{r.TopicID, r.Partition},
			replicaLog{brokerEpoch: brokerEpoch, leaderEpoch: r.LeaderEpoch, lastEpoch: r.LastEpoch, endOffset: r.EndOffset})
	}
	l.reports.poke()
	return nil
}

// recoverFromLogs decides on the reports as they come, and again every
// recoveryInterval while any are held.
func (l *leadership) recoverFromLogs() {
	defer l.wg.Done()
	tick := time.NewTicker(recoveryInterval)
	defer tick.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-l.reports.kick:
		case <-tick.C:
		}
		if l.reports.empty() {
			continue
		}
		var outcome []recovery
		_, err := l.decide(l.ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
			reports := l.reports.snapshot()
			recs, out, done := recoveryChanges(img, reports)
			l.reports.drop(done)
			outcome = out
			return recs, nil
		})
		if err != nil {
			if l.ctx.Err() == nil {
				l.log.Warn("recovering partitions from their replicas' logs failed", "err", err)
			}
			continue
		}
		for _, o := range outcome {
			o.logTo(l)
		}
	}
}

// recovery is what recoveryChanges did for one partition, for the log.
type recovery struct {
	topic      string
	partition  int32
	leader     int32 // fsm.NoLeader: the partition now awaits its logs
	epoch      int32 // the leader epoch it was left at
	lastEpoch  int32 // the log furthest on
	endOffset  int64
	reported   int // replicas that reported
	replicas   int
	incomplete bool // elected without every replica's report (unclean)
	ahead      bool // a log ahead of the metadata made the partition await its logs
}

func (o recovery) logTo(l *leadership) {
	switch {
	case o.ahead:
		l.log.Warn("a replica's log is ahead of the metadata (a restore?); the partition awaits its replicas' logs",
			"topic", o.topic, "partition", o.partition, "leader_epoch", o.epoch, "log_leader_epoch", o.lastEpoch, "log_end_offset", o.endOffset)
	case o.leader == fsm.NoLeader:
		l.log.Info("raising a partition's leader epoch above its replicas' logs", "topic", o.topic, "partition", o.partition, "leader_epoch", o.epoch,
			"log_leader_epoch", o.lastEpoch)
	default:
		l.log.Info("partition recovered from its replicas' logs", "topic", o.topic, "partition", o.partition, "leader", o.leader,
			"leader_epoch", o.epoch, "log_leader_epoch", o.lastEpoch, "log_end_offset", o.endOffset,
			"reported", fmt.Sprintf("%d of %d", o.reported, o.replicas), "unclean", o.incomplete)
	}
}

// recoveryChanges decides on the reports: a partition that awaits its logs
// is elected once recoveryElection can; a led partition that a replica's
// log is ahead of is put to await its logs. It returns the records, what
// they do, and the reports it is done with: those it acted on and those
// that no longer match their partition.
func recoveryChanges(img *fsm.Image, reports map[partitionKey]map[int32]replicaLog) ([]*keelpb.Record, []recovery, map[partitionKey]map[int32]replicaLog) {
	keys := slices.SortedFunc(maps.Keys(reports), func(a, b partitionKey) int {
		return cmp.Or(bytes.Compare(a.topic[:], b.topic[:]), cmp.Compare(a.partition, b.partition))
	})
	v := newView(img)
	var recs []*keelpb.Record
	var out []recovery
	done := map[partitionKey]map[int32]replicaLog{}
	for _, k := range keys {
		p, ok := img.Partition(k.topic, k.partition)
		if !ok {
			done[k] = reports[k]
			continue
		}
		valid := map[int32]replicaLog{}
		for b, r := range reports[k] {
			if br, ok := img.Broker(b); ok && br.Epoch == r.brokerEpoch && r.leaderEpoch == p.LeaderEpoch && slices.Contains(p.Replicas, b) {
				valid[b] = r
			} else {
				if done[k] == nil {
					done[k] = map[int32]replicaLog{}
				}
				done[k][b] = r
			}
		}
		topic := ""
		if t, ok := img.TopicByID(k.topic); ok {
			topic = t.Name
		}
		if p.AwaitsReplicaLogs() {
			r, o := recoveryElection(p, valid, v, rulesFor(img, p.TopicID).unclean)
			if r != nil {
				recs = append(recs, r...)
				o.topic = topic
				out = append(out, o)
				done[k] = reports[k]
			}
			continue
		}
		// A led (or leaderless) partition: a log ahead of its leader epoch
		// means the metadata went back; it awaits its logs from now on.
		ahead, found := replicaLog{lastEpoch: -1}, false
		for _, r := range valid {
			if r.lastEpoch > p.LeaderEpoch && r.furtherOn(ahead) {
				ahead, found = r, true
			}
		}
		if !found {
			done[k] = reports[k]
			continue
		}
		if p.HasLeader() {
			// Its leader epoch moves: every replica reports again.
			done[k] = reports[k]
		}
		if r := awaitLogsRecord(p); r != nil {
			recs = append(recs, r)
			out = append(out, recovery{topic: topic, partition: p.Partition, leader: fsm.NoLeader, epoch: p.LeaderEpoch + 1,
				ahead: true, lastEpoch: ahead.lastEpoch, endOffset: ahead.endOffset, replicas: len(p.Replicas)})
		}
	}
	return recs, out, done
}

// awaitLogsRecord makes p await its replicas' logs
// (fsm.Partition.AwaitsReplicaLogs): no leader, RECOVERING, and neither
// eligible replicas nor a last known leader, which the logs decide now.
func awaitLogsRecord(p *fsm.Partition) *keelpb.Record {
	noLeader := fsm.NoLeader
	state := keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERING
	r := &keelpb.PartitionChangeRecord{TopicId: bytes.Clone(p.TopicID[:]), Partition: p.Partition}
	if p.Leader != noLeader {
		r.Leader = &noLeader
	}
	if !p.Recovering() {
		r.LeaderRecoveryState = &state
	}
	if len(p.ELR()) > 0 {
		r.EligibleLeaderReplicas = &keelpb.Int32List{}
	}
	if len(p.LastKnownELR()) > 0 {
		r.LastKnownElr = &keelpb.Int32List{}
	}
	if r.Leader == nil && r.LeaderRecoveryState == nil && r.EligibleLeaderReplicas == nil && r.LastKnownElr == nil {
		return nil
	}
	return &keelpb.Record{Record: &keelpb.Record_PartitionChange{PartitionChange: r}}
}

// recoveryElection elects an awaiting partition from its replicas' logs
// (logs holds the reports that match it), Kafka's unclean recovery
// (KIP-966) in Keel's words:
//   - it waits until every replica has reported, or, when the topic allows
//     unclean election, until every replica that has not is fenced (or
//     otherwise cannot lead); a replica that has not reported may hold the
//     only copy of acknowledged records;
//   - the leader is the replica whose log is furthest on (the highest last
//     leader epoch, then the longest log; the first in assignment order on
//     a tie), once it can lead (registered, unfenced), alone in the ISR,
//     with no eligible replicas, RECOVERED: no replica holds more. When
//     the topic allows unclean election and it cannot lead, or some
//     replica has not reported, it is the one furthest on among those that
//     can lead, RECOVERING, as after an unclean election (KIP-704);
//   - its leader epoch ends above every epoch the reports hold. The epoch
//     moves by one per leader change, so the records alternate the leader
//     between the new one and none until it does; beyond maxEpochRaise
//     changes they stop on none, and the partition still awaits.
//
// It returns nil when the partition must still wait.
func recoveryElection(p *fsm.Partition, logs map[int32]replicaLog, v brokerView, unclean bool) ([]*keelpb.Record, recovery) {
	complete := true
	gone := true // every replica that has not reported cannot lead
	for _, b := range p.Replicas {
		if _, ok := logs[b]; !ok {
			complete = false
			gone = gone && !v.eligible(b)
		}
	}
	o := recovery{partition: p.Partition, reported: len(logs), replicas: len(p.Replicas), incomplete: !complete}
	if !complete && (!unclean || !gone) {
		return nil, o
	}
	// The log furthest on, whoever holds it, and the one furthest on among
	// the replicas that can lead now.
	first, best := fsm.NoLeader, replicaLog{}
	leader, lead := fsm.NoLeader, replicaLog{}
	above := p.LeaderEpoch
	for _, b := range p.Replicas {
		r, ok := logs[b]
		if !ok {
			continue
		}
		above = max(above, r.lastEpoch)
		if first == fsm.NoLeader || r.furtherOn(best) {
			first, best = b, r
		}
		if v.eligible(b) && (leader == fsm.NoLeader || r.furtherOn(lead)) {
			leader, lead = b, r
		}
	}
	switch {
	case first != fsm.NoLeader && v.eligible(first):
		leader, lead = first, best
	case !unclean:
		// The replica furthest on is not up (fenced since it reported, or
		// still catching up): wait for it.
		return nil, o
	default:
		complete = false // the leader may lack what first holds
		o.incomplete = true
	}
	if leader == fsm.NoLeader {
		return nil, o
	}
	// The fewest leader changes, an odd number (the last one to the
	// leader), that take the epoch above every log's.
	changes := int(above-p.LeaderEpoch) + 1
	if changes%2 == 0 {
		changes++
	}
	elected := changes <= maxEpochRaise
	if !elected {
		changes = maxEpochRaise - maxEpochRaise%2
	}
	state := keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERED
	if !complete {
		state = keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERING
	}
	id := bytes.Clone(p.TopicID[:])
	noLeader := fsm.NoLeader
	recs := make([]*keelpb.Record, 0, changes)
	for i := 1; i <= changes; i++ {
		r := &keelpb.PartitionChangeRecord{TopicId: id, Partition: p.Partition, Leader: &noLeader}
		if i%2 == 1 {
			r.Leader = &leader
		}
		if i == 1 {
			r.Isr = &keelpb.Int32List{Values: []int32{leader}}
			if len(p.ELR()) > 0 {
				r.EligibleLeaderReplicas = &keelpb.Int32List{}
			}
			if len(p.LastKnownELR()) > 0 {
				r.LastKnownElr = &keelpb.Int32List{}
			}
		}
		if i == changes && elected && state != p.LeaderRecoveryState {
			r.LeaderRecoveryState = &state
		}
		recs = append(recs, &keelpb.Record{Record: &keelpb.Record_PartitionChange{PartitionChange: r}})
	}
	o.epoch, o.lastEpoch, o.endOffset = p.LeaderEpoch+int32(changes), lead.lastEpoch, lead.endOffset
	if elected {
		o.leader = leader
	} else {
		o.leader = fsm.NoLeader
	}
	return recs, o
}
