package controller

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// Kafka's PartitionChangeBuilderTest and ReplicationControlManagerTest
// cases of eligible leader replicas (KIP-966) and leader recovery
// (KIP-704), in Keel's terms. Where Kafka empties the ISR for a fenced or
// shut down member, Keel keeps its last member (election.go): the Kafka
// states "ISR [], ELR E" read here as "ISR [x], ELR E less x" with x not
// eligible. An ISR emptied by an unclean shutdown is Kafka's own, from
// metadata.version 3 (unclean_shutdown_test.go). Kafka's builder tests run
// both lastKnownElr modes; Keel has only the one KRaft runs with
// (useLastKnownLeaderInBalancedRecovery: LastKnownElr holds the last
// leader), so the other mode's expectations of LastKnownElr do not apply.

var elrTopic = fsm.TopicID{0xe1}

const (
	recovered  = keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERED
	recovering = keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERING
)

// elrPartition is one partition's state as a test starts it.
type elrPartition struct {
	replicas, isr, elr, lastKnown []int32
	leader                        int32
	state                         keelpb.LeaderRecoveryState
}

// elrImage: brokers 0-5 registered (broker n at epoch n+2), those in
// active unfenced, and topic "e" holding partition 0 as p says, with the
// given configs.
func elrImage(t *testing.T, active []int32, configs map[string]string, p elrPartition) *fsm.Image {
	t.Helper()
	return elrImageAt(t, 1, active, configs, p)
}

// elrImageAt is elrImage at metadata.version level, every broker
// supporting it.
func elrImageAt(t *testing.T, level uint32, active []int32, configs map[string]string, p elrPartition) *fsm.Image {
	t.Helper()
	start := clusterStart()
	if level > 1 {
		start = append(start, levelRecord(level))
	}
	batches := [][]*keelpb.Record{start}
	for id := range int32(6) {
		batches = append(batches, []*keelpb.Record{regRange(id, 1, max(level, 1))})
	}
	var unfence []*keelpb.Record
	for _, id := range active {
		unfence = append(unfence, &keelpb.Record{Record: &keelpb.Record_UnfenceBroker{UnfenceBroker: &keelpb.UnfenceBrokerRecord{BrokerId: id, BrokerEpoch: int64(id) + 2}}})
	}
	if len(unfence) > 0 {
		batches = append(batches, unfence)
	}
	batches = append(batches, []*keelpb.Record{
		{Record: &keelpb.Record_Topic{Topic: &keelpb.TopicRecord{Name: "e", TopicId: bytes.Clone(elrTopic[:]), Configs: configs}}},
		{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{TopicId: bytes.Clone(elrTopic[:]), Partition: 0,
			Replicas: p.replicas, Isr: p.isr, Leader: p.leader, EligibleLeaderReplicas: p.elr, LastKnownElr: p.lastKnown,
			LeaderRecoveryState: p.state}}},
	})
	return imageWith(t, batches...)
}

func elrOf(img *fsm.Image) *fsm.Partition {
	p, _ := img.Partition(elrTopic, 0)
	return p
}

func minISR(n int) map[string]string { return map[string]string{fsm.MinInsyncReplicas: fmt.Sprint(n)} }

// checkPartition compares partition 0 of img with want.
func checkPartition(t *testing.T, img *fsm.Image, want elrPartition) {
	t.Helper()
	p := elrOf(img)
	if p.Leader != want.leader || !slices.Equal(p.ISR, want.isr) || !slices.Equal(p.ELR(), want.elr) ||
		!slices.Equal(p.LastKnownELR(), want.lastKnown) || p.LeaderRecoveryState != want.state {
		t.Fatalf("partition: leader %d isr %v elr %v last known %v %v;\nwant leader %d isr %v elr %v last known %v %v",
			p.Leader, p.ISR, p.ELR(), p.LastKnownELR(), p.LeaderRecoveryState,
			want.leader, want.isr, want.elr, want.lastKnown, want.state)
	}
}

// build is PartitionChangeBuilder.build in Keel's terms: the target is p
// with edit applied, the leader is elected with the view and unclean, and
// the record settles the ELR (nil when nothing changes).
func build(img *fsm.Image, v brokerView, unclean bool, edit func(*target)) *keelpb.Record {
	p := elrOf(img)
	t := targetOf(p)
	t.minISR = rulesFor(img, p.TopicID).minISR
	if edit != nil {
		edit(&t)
	}
	electLeader(&t, v, unclean)
	return changeRecord(p, t)
}

// offlineView is a view in which the given brokers may not lead: Kafka's
// isAcceptableLeader.
func offlineView(img *fsm.Image, ids ...int32) brokerView { return newView(img, ids...) }

// TestPartitionChangeBuilder_ElectLeader (testElectLeader): FOO is replicas
// [2 1 3], ISR [2 1 3], leader 1, broker 3 not acceptable; BAZ is ISR [1 3],
// leader 3, every broker acceptable.
func TestPartitionChangeBuilder_ElectLeader(t *testing.T) {
	foo := elrPartition{replicas: []int32{2, 1, 3}, isr: []int32{2, 1, 3}, leader: 1}
	baz := elrPartition{replicas: []int32{2, 1, 3}, isr: []int32{1, 3}, leader: 3}
	tests := []struct {
		name        string
		p           elrPartition
		offline     []int32
		unclean     bool
		isr         []int32
		replicas    []int32
		wantLeader  int32
		wantUnclean bool
	}{
		{name: "FOO online: the leader stays", p: foo, offline: []int32{3}, wantLeader: 1},
		{name: "FOO unclean: the leader stays", p: foo, offline: []int32{3}, unclean: true, wantLeader: 1},
		{name: "FOO ISR [1 3]", p: foo, offline: []int32{3}, isr: []int32{1, 3}, wantLeader: 1},
		{name: "FOO unclean, ISR [1 3]", p: foo, offline: []int32{3}, unclean: true, isr: []int32{1, 3}, wantLeader: 1},
		{name: "FOO ISR [3], 3 unacceptable: no leader", p: foo, offline: []int32{3}, isr: []int32{3}, wantLeader: fsm.NoLeader},
		{name: "FOO unclean, ISR [3]: the first acceptable replica", p: foo, offline: []int32{3}, unclean: true, isr: []int32{3}, wantLeader: 2, wantUnclean: true},
		{name: "FOO unclean, ISR [4], replicas [2 1 3 4]: 4 is clean", p: foo, offline: []int32{3}, unclean: true, isr: []int32{4}, replicas: []int32{2, 1, 3, 4}, wantLeader: 4},
		{name: "BAZ online", p: baz, wantLeader: 3},
		{name: "BAZ unclean", p: baz, unclean: true, wantLeader: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := elrImage(t, []int32{0, 1, 2, 3, 4}, nil, tt.p)
			tg := targetOf(elrOf(img))
			if tt.isr != nil {
				tg.isr = tt.isr
			}
			if tt.replicas != nil {
				tg.replicas = tt.replicas
			}
			electLeader(&tg, offlineView(img, tt.offline...), tt.unclean)
			if tg.leader != tt.wantLeader || tg.uncleanElected != tt.wantUnclean {
				t.Fatalf("elected %d (unclean %v), want %d (unclean %v)", tg.leader, tg.uncleanElected, tt.wantLeader, tt.wantUnclean)
			}
		})
	}
}

// TestPartitionChangeBuilder_ChangeRecordIsNoOp (testChangeRecordIsNoOp):
// a record is written only when something differs, and an ELR, a last
// known leader or a recovery state differing alone is a change.
func TestPartitionChangeBuilder_ChangeRecordIsNoOp(t *testing.T) {
	img := elrImage(t, []int32{1, 2, 3}, nil, elrPartition{replicas: []int32{1, 2, 3}, isr: []int32{1}, elr: []int32{2}, leader: 1})
	p := elrOf(img)
	for name, edit := range map[string]func(*target){
		"the ELR":             func(t *target) { t.elr = []int32{2, 3} },
		"the recovery state":  func(t *target) { t.recovery = recovering },
		"the last known elr":  func(t *target) { t.lastKnown = []int32{1}; t.leader = fsm.NoLeader },
		"the ISR, and so ELR": func(t *target) { t.isr = []int32{1, 3} },
	} {
		tg := targetOf(p)
		edit(&tg)
		if changeRecord(p, tg) == nil {
			t.Errorf("a change of %s wrote nothing", name)
		}
	}
	if r := changeRecord(p, targetOf(p)); r != nil {
		t.Fatalf("no change wrote %v", r)
	}
}

// TestPartitionChangeBuilder_UncleanLeaderElection (testUncleanLeaderElection).
func TestPartitionChangeBuilder_UncleanLeaderElection(t *testing.T) {
	// FOO with the ISR down to 3, which may not lead: 2 leads uncleanly and
	// the partition is RECOVERING.
	img := elrImage(t, []int32{1, 2, 3}, nil, elrPartition{replicas: []int32{2, 1, 3}, isr: []int32{2, 1, 3}, leader: 1})
	rec := build(img, offlineView(img, 3), true, func(t *target) { t.isr = []int32{3} })
	checkPartition(t, apply(t, img, []*keelpb.Record{rec}), elrPartition{leader: 2, isr: []int32{2}, state: recovering})

	// OFFLINE_WITH_ELR: leaderless, ELR [3], last known leader 2, only 1
	// acceptable. The unclean election clears the ELR and the last known
	// leader (KRaft: "unclean election will clear these fields").
	img = elrImage(t, []int32{1}, minISR(2), elrPartition{replicas: []int32{2, 1, 3}, isr: []int32{2}, elr: []int32{3}, lastKnown: []int32{2}, leader: fsm.NoLeader})
	rec = build(img, newView(img), true, nil)
	checkPartition(t, apply(t, img, []*keelpb.Record{rec}), elrPartition{leader: 1, isr: []int32{1}, state: recovering})
}

// TestPartitionChangeBuilder_ChangeInLeadershipDoesNotChangeRecoveryState
// (testChangeInLeadershipDoesNotChangeRecoveryState): a RECOVERING
// partition that loses its leader and gets it back stays RECOVERING; only
// the leader's AlterPartition recovers it.
func TestPartitionChangeBuilder_ChangeInLeadershipDoesNotChangeRecoveryState(t *testing.T) {
	img := elrImage(t, []int32{1, 2, 3}, nil, elrPartition{replicas: []int32{1, 2, 3}, isr: []int32{1}, leader: 1, state: recovering})
	recs, err := heartbeatRecords(img, heartbeat(1, 3, 99, true, false))
	if err != nil {
		t.Fatal(err)
	}
	img = apply(t, img, recs)
	checkPartition(t, img, elrPartition{leader: fsm.NoLeader, isr: []int32{1}, lastKnown: []int32{1}, state: recovering})
	recs, err = heartbeatRecords(img, heartbeat(1, 3, 99, false, false))
	if err != nil {
		t.Fatal(err)
	}
	checkPartition(t, apply(t, img, recs), elrPartition{leader: 1, isr: []int32{1}, state: recovering})
}

// TestPartitionChangeBuilder_UncleanSetsLeaderRecoveringState
// (testUncleanSetsLeaderRecoveringState).
func TestPartitionChangeBuilder_UncleanSetsLeaderRecoveringState(t *testing.T) {
	img := elrImage(t, []int32{1}, nil, elrPartition{replicas: []int32{1, 2, 3}, isr: []int32{2, 3}, leader: fsm.NoLeader})
	rec := build(img, newView(img), true, nil)
	if r := rec.GetPartitionChange(); r.GetLeaderRecoveryState() != recovering || r.GetLeader() != 1 || !slices.Equal(r.GetIsr().GetValues(), []int32{1}) {
		t.Fatalf("record %v", r)
	}
	checkPartition(t, apply(t, img, []*keelpb.Record{rec}), elrPartition{leader: 1, isr: []int32{1}, state: recovering})
}

// The ELR cases of PartitionChangeBuilderTest: min ISR 3 on replicas
// [1 2 3 4] unless said otherwise. Those with an empty ISR, as Kafka's,
// run at metadata.version 3 (unclean_shutdown_test.go).
func TestPartitionChangeBuilder_EligibleLeaderReplicas(t *testing.T) {
	all := []int32{1, 2, 3, 4}
	tests := []struct {
		name    string
		level   uint32 // the metadata.version; 1 if 0
		start   elrPartition
		active  []int32
		unclean bool
		edit    func(*target)
		want    elrPartition
		noop    bool
	}{
		{
			name:   "IsrShrinkBelowMinISR: the replicas that leave become eligible",
			start:  elrPartition{replicas: all, isr: all, leader: 1},
			active: all, edit: func(t *target) { t.isr = []int32{1, 2} },
			want: elrPartition{leader: 1, isr: []int32{1, 2}, elr: []int32{3, 4}},
		},
		{
			name:   "IsrExpandAboveMinISR: the ELR is cleared",
			start:  elrPartition{replicas: all, isr: []int32{1, 2}, elr: []int32{3}, leader: 1},
			active: all, edit: func(t *target) { t.isr = []int32{1, 2, 3} },
			want: elrPartition{leader: 1, isr: []int32{1, 2, 3}},
		},
		{
			// Kafka's case keeps LastKnownElr [2] in its other mode; in the
			// last-known-leader mode a partition with a leader has none.
			name:   "IsrAddNewMemberNotInELR: the ELR stays",
			start:  elrPartition{replicas: all, isr: []int32{1}, elr: []int32{3}, lastKnown: []int32{2}, leader: 1},
			active: all, edit: func(t *target) { t.isr = []int32{1, 4} },
			want: elrPartition{leader: 1, isr: []int32{1, 4}, elr: []int32{3}},
		},
		{
			// Kafka's unclean shutdown replicas; Keel's are unregistered
			// brokers (unregisterChanges).
			name:   "RemoveUncleanShutdownReplicasFromElr",
			start:  elrPartition{replicas: all, isr: []int32{1}, elr: []int32{2, 3}, leader: 1},
			active: all, edit: func(t *target) { t.ineligible = []int32{3} },
			want: elrPartition{leader: 1, isr: []int32{1}, elr: []int32{2}},
		},
		{
			name:   "ElrCanBeElected: no ISR member is eligible, an ELR member leads cleanly",
			start:  elrPartition{replicas: all, isr: []int32{1}, elr: []int32{3}, leader: 1},
			active: []int32{2, 3, 4},
			want:   elrPartition{leader: 3, isr: []int32{3}, elr: []int32{1}},
		},
		{
			// Kafka: ISR [], ELR [1 2 3 4], last known [1]. Keel keeps the
			// leader as the ISR's last member.
			name:   "IsrCanShrinkToZero: every replica offline",
			start:  elrPartition{replicas: all, isr: all, leader: 1},
			active: nil, edit: func(t *target) { withoutISR(t, map[int32]bool{1: true, 2: true, 3: true, 4: true}) },
			want: elrPartition{leader: fsm.NoLeader, isr: []int32{1}, elr: []int32{2, 3, 4}, lastKnown: []int32{1}},
		},
		{
			name:   "IsrCanShrinkToZero, then an unregistered ELR member leaves: the last known leader stays",
			start:  elrPartition{replicas: all, isr: []int32{1}, elr: []int32{2, 3, 4}, lastKnown: []int32{1}, leader: fsm.NoLeader},
			active: nil, edit: func(t *target) { t.ineligible = []int32{2} },
			want: elrPartition{leader: fsm.NoLeader, isr: []int32{1}, elr: []int32{3, 4}, lastKnown: []int32{1}},
		},
		{
			// Kafka: ISR [], ELR [2], last known [3]. The last known
			// leader leads by itself only when the ISR and the ELR are both
			// empty (unclean_shutdown_test.go); otherwise an unclean
			// election takes the first eligible replica.
			name:   "ElectLastKnownLeader: with an ELR left, an unclean election takes the first eligible replica",
			start:  elrPartition{replicas: all, isr: []int32{2}, lastKnown: []int32{3}, leader: fsm.NoLeader},
			active: []int32{1, 3}, unclean: true,
			want: elrPartition{leader: 1, isr: []int32{1}, state: recovering},
		},
		{
			name:   "ElectLastKnownLeaderShouldFail: without unclean election nothing changes",
			start:  elrPartition{replicas: all, isr: []int32{3}, lastKnown: []int32{1}, leader: fsm.NoLeader},
			active: []int32{1, 2, 4},
			noop:   true,
		},
		{
			name:   "ElectLastKnownLeaderShouldFail: an ELR member that may not lead is waited for",
			start:  elrPartition{replicas: all, isr: []int32{2}, elr: []int32{3}, lastKnown: []int32{1}, leader: fsm.NoLeader},
			active: []int32{1, 4},
			noop:   true,
		},
		{
			name: "ElectLastKnownLeader: ISR and ELR empty, it leads, RECOVERING, whatever the configs", level: emptyISRLevel,
			start:  elrPartition{replicas: all, isr: []int32{}, lastKnown: []int32{1}, leader: fsm.NoLeader},
			active: all,
			want:   elrPartition{leader: 1, isr: []int32{1}, state: recovering},
		},
		{
			name: "ElectLastKnownLeaderShouldFail, ISR empty: an ELR member that may not lead is waited for", level: emptyISRLevel,
			start:  elrPartition{replicas: all, isr: []int32{}, elr: []int32{3}, lastKnown: []int32{1}, leader: fsm.NoLeader},
			active: []int32{1, 2, 4},
			noop:   true,
		},
		{
			name: "NotEligibleLastKnownLeader: a fenced last known leader is not elected", level: emptyISRLevel,
			start:  elrPartition{replicas: all, isr: []int32{}, lastKnown: []int32{1}, leader: fsm.NoLeader},
			active: []int32{2, 3, 4},
			noop:   true,
		},
		{
			name: "NotEligibleLastKnownLeader, unclean election on: the first eligible replica", level: emptyISRLevel,
			start:  elrPartition{replicas: all, isr: []int32{}, lastKnown: []int32{1}, leader: fsm.NoLeader},
			active: []int32{2, 3, 4}, unclean: true,
			want: elrPartition{leader: 2, isr: []int32{2}, state: recovering},
		},
		{
			name: "ElectLastKnownLeaderShouldFail, unclean election on: the first eligible replica, not the last known leader", level: emptyISRLevel,
			start:  elrPartition{replicas: all, isr: []int32{}, elr: []int32{3}, lastKnown: []int32{4}, leader: fsm.NoLeader},
			active: []int32{2, 4}, unclean: true,
			want: elrPartition{leader: 2, isr: []int32{2}, state: recovering},
		},
		{
			name: "IsrCanShrinkToZero, then an unclean shutdown ELR member leaves: the last known leader stays", level: emptyISRLevel,
			start:  elrPartition{replicas: all, isr: []int32{}, elr: all, lastKnown: []int32{1}, leader: fsm.NoLeader},
			active: nil, edit: func(t *target) { t.ineligible = []int32{2} },
			want: elrPartition{leader: fsm.NoLeader, isr: []int32{}, elr: []int32{1, 3, 4}, lastKnown: []int32{1}},
		},
		{
			name: "ElrCanBeElected from an empty ISR", level: emptyISRLevel,
			start:  elrPartition{replicas: all, isr: []int32{}, elr: []int32{2, 3}, lastKnown: []int32{1}, leader: fsm.NoLeader},
			active: []int32{1, 3},
			want:   elrPartition{leader: 3, isr: []int32{3}, elr: []int32{2}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := elrImageAt(t, max(tt.level, 1), tt.active, minISR(3), tt.start)
			rec := build(img, newView(img), tt.unclean, tt.edit)
			if tt.noop {
				if rec != nil {
					t.Fatalf("record %v, want none", rec)
				}
				return
			}
			checkPartition(t, apply(t, img, []*keelpb.Record{rec}), tt.want)
		})
	}
}

// fenceOne fences broker id by its own heartbeat (one at a time, as
// Kafka's test context fences a set).
func fenceOne(t *testing.T, img *fsm.Image, ids ...int32) *fsm.Image {
	t.Helper()
	for _, id := range ids {
		b, _ := img.Broker(id)
		if b.Fenced {
			continue
		}
		recs, err := heartbeatRecords(img, heartbeat(id, b.Epoch, 99, true, false))
		if err != nil {
			t.Fatal(err)
		}
		img = apply(t, img, recs)
	}
	return img
}

func unfenceOne(t *testing.T, img *fsm.Image, ids ...int32) *fsm.Image {
	t.Helper()
	for _, id := range ids {
		b, _ := img.Broker(id)
		recs, err := heartbeatRecords(img, heartbeat(id, b.Epoch, 99, false, false))
		if err != nil {
			t.Fatal(err)
		}
		img = apply(t, img, recs)
	}
	return img
}

// TestReplicationControlManager_EligibleLeaderReplicas: the ELR cases of
// ReplicationControlManagerTest, through the controller's own decisions.
func TestReplicationControlManager_EligibleLeaderReplicas(t *testing.T) {
	// testEligibleLeaderReplicas_ShrinkAndExpandIsr: min ISR 2 on [0 1 2].
	t.Run("ShrinkAndExpandIsr", func(t *testing.T) {
		img := elrImage(t, []int32{0, 1, 2}, minISR(2), elrPartition{replicas: []int32{0, 1, 2}, isr: []int32{0, 1, 2}, leader: 0})
		img = alter(t, img, []int32{0})
		checkPartition(t, img, elrPartition{leader: 0, isr: []int32{0}, elr: []int32{1, 2}})
		img = alter(t, img, []int32{0, 1})
		checkPartition(t, img, elrPartition{leader: 0, isr: []int32{0, 1}})
	})
	// testEligibleLeaderReplicas_BrokerFence: min ISR 3 on [0 1 2 3].
	t.Run("BrokerFence", func(t *testing.T) {
		img := elrImage(t, []int32{0, 1, 2, 3}, minISR(3), elrPartition{replicas: []int32{0, 1, 2, 3}, isr: []int32{0, 1, 2, 3}, leader: 0})
		img = fenceOne(t, img, 2, 3)
		checkPartition(t, img, elrPartition{leader: 0, isr: []int32{0, 1}, elr: []int32{3}})
		img = fenceOne(t, img, 1, 2, 3)
		checkPartition(t, img, elrPartition{leader: 0, isr: []int32{0}, elr: []int32{1, 3}})
		img = unfenceOne(t, img, 1, 2, 3)
		checkPartition(t, img, elrPartition{leader: 0, isr: []int32{0}, elr: []int32{1, 3}})
	})
	// testEligibleLeaderReplicas_DeleteTopic: the ELR goes with the topic.
	t.Run("DeleteTopic", func(t *testing.T) {
		img := elrImage(t, []int32{0, 1, 2}, minISR(2), elrPartition{replicas: []int32{0, 1, 2}, isr: []int32{0, 1, 2}, leader: 0})
		img = alter(t, img, []int32{0})
		recs, err := deleteTopicRecords(img, "e")
		if err != nil {
			t.Fatal(err)
		}
		img = apply(t, img, recs)
		seen := false
		img.PartitionsOnBroker(1, func(*fsm.Partition) bool { seen = true; return false })
		if seen || img.PartitionCount() != 0 {
			t.Fatal("the deleted topic's partition is still held")
		}
	})
	// testEligibleLeaderReplicas_EffectiveMinIsr: min ISR above the
	// replication factor counts as the replication factor.
	t.Run("EffectiveMinIsr", func(t *testing.T) {
		img := elrImage(t, []int32{0, 1, 2}, minISR(5), elrPartition{replicas: []int32{0, 1, 2}, isr: []int32{0, 1, 2}, leader: 0})
		p := elrOf(img)
		tg := targetOf(p)
		tg.minISR = rulesFor(img, p.TopicID).minISR
		tg.isr = []int32{0, 1, 2}
		tg.elr = []int32{}
		settleEligible(p, &tg)
		if rulesFor(img, p.TopicID).minISR != 5 || tg.elr != nil {
			t.Fatalf("min ISR %d, elr %v", tg.minISR, tg.elr)
		}
		img = alter(t, img, []int32{0, 1})
		checkPartition(t, img, elrPartition{leader: 0, isr: []int32{0, 1}, elr: []int32{2}})
	})
	// testEligibleLeaderReplicas_CleanElection: min ISR 3 on [0 1 2 3].
	t.Run("CleanElection", func(t *testing.T) {
		img := elrImage(t, []int32{0, 1, 2, 3}, minISR(3), elrPartition{replicas: []int32{0, 1, 2, 3}, isr: []int32{0, 1, 2, 3}, leader: 0})
		img = fenceOne(t, img, 1, 2, 3)
		checkPartition(t, img, elrPartition{leader: 0, isr: []int32{0}, elr: []int32{2, 3}})
		img = unfenceOne(t, img, 2)
		img = fenceOne(t, img, 0, 1)
		checkPartition(t, img, elrPartition{leader: 2, isr: []int32{2}, elr: []int32{0, 3}})
	})
	// testEligibleLeaderReplicas_UncleanShutdown, with Keel's unregistered
	// brokers for Kafka's unclean shutdowns.
	t.Run("UncleanShutdown", func(t *testing.T) {
		img := elrImage(t, []int32{0, 1, 2, 3}, minISR(3), elrPartition{replicas: []int32{0, 1, 2, 3}, isr: []int32{0, 1, 2, 3}, leader: 0})
		img = fenceOne(t, img, 1, 2, 3)
		checkPartition(t, img, elrPartition{leader: 0, isr: []int32{0}, elr: []int32{2, 3}})
		b3, _ := img.Broker(3)
		recs, err := unregisterRecords(img, 3, b3.Epoch)
		if err != nil {
			t.Fatal(err)
		}
		img = apply(t, img, recs)
		checkPartition(t, img, elrPartition{leader: 0, isr: []int32{0}, elr: []int32{2}})
		// The last ISR member going (fenced first: only a fenced broker is
		// unregistered): it is the last known leader.
		img = fenceOne(t, img, 0)
		b0, _ := img.Broker(0)
		recs, err = unregisterRecords(img, 0, b0.Epoch)
		if err != nil {
			t.Fatal(err)
		}
		img = apply(t, img, recs)
		checkPartition(t, img, elrPartition{leader: fsm.NoLeader, isr: []int32{0}, elr: []int32{2}, lastKnown: []int32{0}})
	})
}

// alter sends the leader's AlterPartition for partition 0 with isr.
func alter(t *testing.T, img *fsm.Image, isr []int32) *fsm.Image {
	t.Helper()
	p := elrOf(img)
	b, _ := img.Broker(p.Leader)
	recs, err := alterPartitionRecords(img, &keelpb.AlterPartitionRequest{BrokerId: p.Leader, BrokerEpoch: b.Epoch, TopicId: elrTopic.String(),
		LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, NewIsr: isr})
	if err != nil {
		t.Fatal(err)
	}
	return apply(t, img, recs)
}

// TestReplicationControlManager_AlterPartitionLeaderRecovery: the leader
// recovery checks of validateAlterPartitionData (KIP-704) and the
// confirmation.
func TestReplicationControlManager_AlterPartitionLeaderRecovery(t *testing.T) {
	start := elrPartition{replicas: []int32{1, 2, 3}, isr: []int32{1}, leader: 1, state: recovering}
	req := func(p *fsm.Partition, isr []int32, state keelpb.LeaderRecoveryState) *keelpb.AlterPartitionRequest {
		return &keelpb.AlterPartitionRequest{BrokerId: 1, BrokerEpoch: 3, TopicId: elrTopic.String(), LeaderEpoch: p.LeaderEpoch,
			PartitionEpoch: p.PartitionEpoch, NewIsr: isr, LeaderRecoveryState: state}
	}
	tests := []struct {
		name      string
		state     keelpb.LeaderRecoveryState // the partition's
		isr       []int32
		req       keelpb.LeaderRecoveryState
		wantField string
		want      *elrPartition
	}{
		{name: "RECOVERING may not grow the ISR", state: recovering, isr: []int32{1, 2}, req: recovering, wantField: "leader_recovery_state"},
		{name: "RECOVERED cannot go back to RECOVERING", state: recovered, isr: []int32{1}, req: recovering, wantField: "leader_recovery_state"},
		{name: "the leader confirms with its ISR unchanged", state: recovering, isr: []int32{1}, req: recovered,
			want: &elrPartition{leader: 1, isr: []int32{1}}},
		{name: "the leader confirms and grows the ISR in one request", state: recovering, isr: []int32{1, 2}, req: recovered,
			want: &elrPartition{leader: 1, isr: []int32{1, 2}}},
		{name: "still RECOVERING with the ISR unchanged writes nothing", state: recovering, isr: []int32{1}, req: recovering},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := start
			s.state = tt.state
			img := elrImage(t, []int32{1, 2, 3}, nil, s)
			recs, err := alterPartitionRecords(img, req(elrOf(img), tt.isr, tt.req))
			switch {
			case tt.wantField != "":
				// Kafka's INVALID_REQUEST, naming the field.
				if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), tt.wantField+":") {
					t.Fatalf("err = %v, want INVALID_REQUEST naming %s", err, tt.wantField)
				}
				return
			case err != nil:
				t.Fatal(err)
			case tt.want == nil:
				if len(recs) != 0 {
					t.Fatalf("records %v, want none", recs)
				}
				return
			}
			checkPartition(t, apply(t, img, recs), *tt.want)
		})
	}
}

// TestReplicationControlManager_ElectUncleanLeadersWithoutElr
// (testElectUncleanLeaders_WithoutElr): an unclean election on demand
// waits for a live replica, then elects it; partitions with a leader need
// none, and it never makes a preferred election.
func TestReplicationControlManager_ElectUncleanLeadersWithoutElr(t *testing.T) {
	img := elrImage(t, []int32{0, 1, 2, 3, 4}, nil, elrPartition{replicas: []int32{1, 2, 3}, isr: []int32{1, 2, 3}, leader: 1})
	img = fenceOne(t, img, 2, 3, 1)
	checkPartition(t, img, elrPartition{leader: fsm.NoLeader, isr: []int32{1}, lastKnown: []int32{1}})
	if rec, _, err := electionRecord(img, elrOf(img), keelpb.ElectionType_ELECTION_TYPE_UNCLEAN); rec != nil || err != ErrNoLiveReplica {
		t.Fatalf("with no live replica: %v, %v", rec, err)
	}
	img = unfenceOne(t, img, 2)
	rec, leader, err := electionRecord(img, elrOf(img), keelpb.ElectionType_ELECTION_TYPE_UNCLEAN)
	if err != nil || leader != 2 {
		t.Fatalf("elected %d, %v", leader, err)
	}
	checkPartition(t, apply(t, img, []*keelpb.Record{rec}), elrPartition{leader: 2, isr: []int32{2}, state: recovering})
}

// TestClusterControlManager_RegisterUncleanShutdown is Kafka's
// testEligibleLeaderReplicas_UncleanShutdown (ReplicationControlManagerTest)
// reached the way KRaft reaches it, through a registration
// (ClusterControlManager.registerBroker compares previousBrokerEpoch with
// the registered epoch): a new incarnation that reports an unclean
// shutdown of the last one leaves every ELR; a clean one, or one that
// reports nothing (0: no logs), keeps its places.
func TestClusterControlManager_RegisterUncleanShutdown(t *testing.T) {
	// min ISR 3 on [0 1 2 3], brokers 1-3 fenced: ISR [0], ELR [2 3].
	fencedELR := func(t *testing.T) *fsm.Image {
		img := elrImage(t, []int32{0, 1, 2, 3}, minISR(3), elrPartition{replicas: []int32{0, 1, 2, 3}, isr: []int32{0, 1, 2, 3}, leader: 0})
		img = fenceOne(t, img, 1, 2, 3)
		checkPartition(t, img, elrPartition{leader: 0, isr: []int32{0}, elr: []int32{2, 3}})
		return img
	}
	// min ISR 3 on [0 1 2], every broker active.
	allActive := func(t *testing.T) *fsm.Image {
		return elrImage(t, []int32{0, 1, 2}, minISR(3), elrPartition{replicas: []int32{0, 1, 2}, isr: []int32{0, 1, 2}, leader: 0})
	}
	epochOf := func(img *fsm.Image, id int32) int64 { b, _ := img.Broker(id); return b.Epoch }
	tests := []struct {
		name   string
		start  func(*testing.T) *fsm.Image
		broker int32
		// previous gives the request's previous_broker_epoch from the image.
		previous func(img *fsm.Image) int64
		want     elrPartition
	}{
		{name: "fenced, unclean shutdown (-1): leaves the ELR", start: fencedELR, broker: 3,
			previous: func(*fsm.Image) int64 { return -1 }, want: elrPartition{leader: 0, isr: []int32{0}, elr: []int32{2}}},
		{name: "fenced, a clean shutdown of another epoch: leaves the ELR", start: fencedELR, broker: 3,
			previous: func(img *fsm.Image) int64 { return epochOf(img, 3) - 1 }, want: elrPartition{leader: 0, isr: []int32{0}, elr: []int32{2}}},
		{name: "fenced, clean shutdown of the registered epoch: keeps its place", start: fencedELR, broker: 3,
			previous: func(img *fsm.Image) int64 { return epochOf(img, 3) }, want: elrPartition{leader: 0, isr: []int32{0}, elr: []int32{2, 3}}},
		{name: "fenced, nothing reported (0): keeps its place", start: fencedELR, broker: 3,
			previous: func(*fsm.Image) int64 { return 0 }, want: elrPartition{leader: 0, isr: []int32{0}, elr: []int32{2, 3}}},
		{name: "active and replaced, unclean: leaves the ISR and never enters the ELR", start: allActive, broker: 2,
			previous: func(*fsm.Image) int64 { return -1 }, want: elrPartition{leader: 0, isr: []int32{0, 1}}},
		{name: "active and replaced, clean: leaves the ISR for the ELR", start: allActive, broker: 2,
			previous: func(img *fsm.Image) int64 { return epochOf(img, 2) }, want: elrPartition{leader: 0, isr: []int32{0, 1}, elr: []int32{2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := tt.start(t)
			req := registration(tt.broker, incB)
			req.PreviousBrokerEpoch = tt.previous(img)
			recs, err := registrationRecords(img, req, noHold)
			if err != nil {
				t.Fatal(err)
			}
			img = apply(t, img, recs)
			checkPartition(t, img, tt.want)
			if b, _ := img.Broker(tt.broker); b.IncarnationID != incB || !b.Fenced {
				t.Fatalf("broker %d after the registration: %+v", tt.broker, b)
			}
		})
	}
}
