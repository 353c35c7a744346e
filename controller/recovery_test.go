package controller

import (
	"errors"
	"slices"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// Recovery of partitions from their replicas' logs (recovery.go): the
// election Kafka's unclean recovery makes from GetReplicaLogInfo answers
// (KIP-966), for the partitions a restore could not vouch for.

// awaitingImage: brokers 0-5 registered (broker n at epoch n+2), those in
// active unfenced, and partition e/0 on replicas 1, 2, 3 awaiting their
// logs at leader epoch 0.
func awaitingImage(t *testing.T, active []int32, unclean bool) *fsm.Image {
	t.Helper()
	var configs map[string]string
	if unclean {
		configs = map[string]string{fsm.UncleanLeaderElection: "true"}
	}
	return elrImage(t, active, configs, elrPartition{replicas: []int32{1, 2, 3}, isr: []int32{1, 2, 3}, leader: fsm.NoLeader, state: recovering})
}

// logOf is broker id's report of e/0's log, at the partition's leader
// epoch 0 and the broker's epoch in awaitingImage.
func logOf(id, lastEpoch int32, endOffset int64) (int32, replicaLog) {
	return id, replicaLog{brokerEpoch: int64(id) + 2, leaderEpoch: 0, lastEpoch: lastEpoch, endOffset: endOffset}
}

func reportsOf(logs ...func() (int32, replicaLog)) map[partitionKey]map[int32]replicaLog {
	m := map[int32]replicaLog{}
	for _, l := range logs {
		id, r := l()
		m[id] = r
	}
	return map[partitionKey]map[int32]replicaLog{{elrTopic, 0}: m}
}

func report(id, lastEpoch int32, endOffset int64) func() (int32, replicaLog) {
	return func() (int32, replicaLog) { return logOf(id, lastEpoch, endOffset) }
}

// edited is a report changed by edit.
func edited(l func() (int32, replicaLog), edit func(*replicaLog)) func() (int32, replicaLog) {
	return func() (int32, replicaLog) {
		id, r := l()
		edit(&r)
		return id, r
	}
}

func TestRecovery_ElectionFromReplicaLogs(t *testing.T) {
	all := []int32{1, 2, 3}
	tests := []struct {
		name    string
		active  []int32
		unclean bool
		reports map[partitionKey]map[int32]replicaLog
		// want: the leader elected (fsm.NoLeader: none, the partition
		// still awaits), its state, and the least leader epoch.
		leader   int32
		state    keelpb.LeaderRecoveryState
		minEpoch int32
	}{
		{name: "waits until every replica has reported", active: all,
			reports: reportsOf(report(1, 2, 100), report(2, 3, 50)), leader: fsm.NoLeader},
		{name: "the highest last leader epoch wins over a longer log", active: all,
			reports: reportsOf(report(1, 2, 100), report(2, 3, 50), report(3, 3, 80)), leader: 3, state: recovered, minEpoch: 4},
		{name: "a tie goes to the first replica in assignment order", active: all,
			reports: reportsOf(report(3, 1, 10), report(1, 1, 10), report(2, 1, 10)), leader: 1, state: recovered, minEpoch: 2},
		{name: "empty logs: the first replica, one epoch on", active: all,
			reports: reportsOf(report(1, -1, 0), report(2, -1, 0), report(3, -1, 0)), leader: 1, state: recovered, minEpoch: 1},
		{name: "the replica furthest on is fenced: it is waited for", active: []int32{1, 2},
			reports: reportsOf(report(1, 2, 100), report(2, 2, 90), report(3, 4, 10)), leader: fsm.NoLeader},
		{name: "unclean: the replica furthest on is fenced: the furthest of the others leads, RECOVERING, above every log", active: []int32{1, 2}, unclean: true,
			reports: reportsOf(report(1, 2, 100), report(2, 2, 90), report(3, 4, 10)), leader: 1, state: recovering, minEpoch: 5},
		{name: "a missing replica that is fenced still holds it up", active: []int32{1, 2},
			reports: reportsOf(report(1, 2, 100), report(2, 2, 90)), leader: fsm.NoLeader},
		{name: "unclean: a missing replica that is fenced does not hold it up", active: []int32{1, 2}, unclean: true,
			reports: reportsOf(report(1, 2, 100), report(2, 2, 90)), leader: 1, state: recovering, minEpoch: 3},
		{name: "unclean: a missing replica that is alive holds it up", active: all, unclean: true,
			reports: reportsOf(report(1, 2, 100), report(2, 2, 90)), leader: fsm.NoLeader},
		{name: "a report at another leader epoch counts as none", active: all,
			reports: reportsOf(report(1, 0, 5), report(2, 0, 5), edited(report(3, 0, 5), func(r *replicaLog) { r.leaderEpoch = 7 })),
			leader:  fsm.NoLeader},
		{name: "a report of an earlier incarnation counts as none", active: all,
			reports: reportsOf(report(1, 0, 5), report(2, 0, 5), edited(report(3, 0, 5), func(r *replicaLog) { r.brokerEpoch = 1 })),
			leader:  fsm.NoLeader},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			img := awaitingImage(t, tc.active, tc.unclean)
			recs, out, _ := recoveryChanges(img, tc.reports)
			after := apply(t, img, recs)
			p := elrOf(after)
			if tc.leader == fsm.NoLeader {
				if len(recs) != 0 || !p.AwaitsReplicaLogs() {
					t.Fatalf("wrote %d records (%v); want none, the partition still awaiting its logs", len(recs), out)
				}
				return
			}
			if p.Leader != tc.leader || p.LeaderRecoveryState != tc.state || !slices.Equal(p.ISR, []int32{tc.leader}) || len(p.ELR()) != 0 {
				t.Fatalf("after the election: leader %d %v ISR %v ELR %v; want leader %d %v, alone in the ISR", p.Leader, p.LeaderRecoveryState, p.ISR, p.ELR(), tc.leader, tc.state)
			}
			if p.LeaderEpoch < tc.minEpoch {
				t.Fatalf("leader epoch %d; want at least %d, above every log's", p.LeaderEpoch, tc.minEpoch)
			}
			for _, r := range tc.reports[partitionKey{elrTopic, 0}] {
				if p.LeaderEpoch <= r.lastEpoch {
					t.Fatalf("leader epoch %d is not above a log's %d", p.LeaderEpoch, r.lastEpoch)
				}
			}
			if len(out) != 1 || out[0].leader != tc.leader || out[0].epoch != p.LeaderEpoch {
				t.Fatalf("outcome %+v; want leader %d at epoch %d", out, tc.leader, p.LeaderEpoch)
			}
		})
	}
}

// TestRecovery_RaisesFarEpochsInSteps: an epoch far above the partition's
// is passed in steps of maxEpochRaise leader changes, each decided once the
// replicas report at the epoch the step left, the partition awaiting its
// logs meanwhile.
func TestRecovery_RaisesFarEpochsInSteps(t *testing.T) {
	img := awaitingImage(t, []int32{1, 2, 3}, false)
	const far = 2*maxEpochRaise + 100
	steps := 0
	for p := elrOf(img); p.AwaitsReplicaLogs(); p = elrOf(img) {
		if steps++; steps > 5 {
			t.Fatalf("still awaiting after %d steps, at leader epoch %d", steps, p.LeaderEpoch)
		}
		reports := reportsOf(report(1, far, 10), report(2, 1, 10), report(3, 1, 10))
		for id, r := range reports[partitionKey{elrTopic, 0}] {
			r.leaderEpoch = p.LeaderEpoch
			reports[partitionKey{elrTopic, 0}][id] = r
		}
		recs, _, _ := recoveryChanges(img, reports)
		if len(recs) == 0 || len(recs) > maxEpochRaise {
			t.Fatalf("step %d: %d records; want 1 to %d", steps, len(recs), maxEpochRaise)
		}
		img = apply(t, img, recs)
	}
	if p := elrOf(img); p.Leader != 1 || p.LeaderEpoch <= far || steps != 3 {
		t.Fatalf("after %d steps: leader %d at epoch %d; want broker 1 above %d in 3 steps", steps, p.Leader, p.LeaderEpoch, far)
	}
}

// TestRecovery_LogAheadOfALedPartition: a report of a log that holds a
// leader epoch above the partition's (the metadata went back) makes the
// partition await its logs; a log at or below it changes nothing.
func TestRecovery_LogAheadOfALedPartition(t *testing.T) {
	led := elrPartition{replicas: []int32{1, 2, 3}, isr: []int32{1, 2, 3}, leader: 1}
	img := elrImage(t, []int32{1, 2, 3}, nil, led)
	if recs, _, done := recoveryChanges(img, reportsOf(report(2, 0, 40))); len(recs) != 0 || len(done) != 1 {
		t.Fatalf("a log at the partition's epoch: %d records, %d done; want none, the report dropped", len(recs), len(done))
	}
	recs, out, _ := recoveryChanges(img, reportsOf(report(2, 3, 40)))
	img = apply(t, img, recs)
	p := elrOf(img)
	if !p.AwaitsReplicaLogs() || p.LeaderEpoch != 1 || len(out) != 1 || out[0].lastEpoch != 3 {
		t.Fatalf("after a log ahead: leader %d %v epoch %d, outcome %+v; want no leader, RECOVERING (awaiting its logs), epoch 1",
			p.Leader, p.LeaderRecoveryState, p.LeaderEpoch, out)
	}
}

// TestRecovery_OtherElectionsLeaveAwaitingPartitions: an awaiting
// partition's ISR is a snapshot's, not a fact: no election but the
// recovery's gives it a leader.
func TestRecovery_OtherElectionsLeaveAwaitingPartitions(t *testing.T) {
	img := awaitingImage(t, []int32{1, 2, 3}, true)
	if recs := leaderlessChanges(img); len(recs) != 0 {
		t.Errorf("the takeover's election wrote %v", recs)
	}
	if recs := onlineChanges(img, 1); len(recs) != 0 {
		t.Errorf("unfencing a replica wrote %v", recs)
	}
	p := elrOf(img)
	for _, typ := range []keelpb.ElectionType{keelpb.ElectionType_ELECTION_TYPE_PREFERRED, keelpb.ElectionType_ELECTION_TYPE_UNCLEAN} {
		if rec, _, err := electionRecord(img, p, typ); rec != nil || !errors.Is(err, ErrAwaitingLogs) {
			t.Errorf("%v election: %v, %v; want ErrAwaitingLogs", typ, rec, err)
		}
	}
	if ps := imbalancedPartitions(img, 0); len(ps) != 0 {
		t.Errorf("the leader rebalance would elect %d awaiting partitions", len(ps))
	}
	// A broker going offline changes its ISR place, and elects nobody.
	for _, rec := range offlineChanges(img, []int32{2}) {
		if l := rec.GetPartitionChange().Leader; l != nil && *l != fsm.NoLeader {
			t.Errorf("fencing broker 2 elected %d", *l)
		}
	}
}
