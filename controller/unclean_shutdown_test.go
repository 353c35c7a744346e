package controller

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// KIP-966's unclean shutdown rule and the last known leader, from
// metadata.version 3 (fsm.EmptyISRMetadataVersion), where the ISR may be
// empty as in Kafka: the states are Kafka's own, "ISR []" included.

const emptyISRLevel = fsm.EmptyISRMetadataVersion

// registerAgain registers a new incarnation of broker id that reports
// previous as its last incarnation's epoch (-1: an unclean shutdown), with
// no session holding the id.
func registerAgain(t *testing.T, img *fsm.Image, id int32, previous int64) *fsm.Image {
	t.Helper()
	req := registration(id, incB)
	req.MaxMetadataVersion, req.PreviousBrokerEpoch = img.FinalizedMetadataVersion(), previous
	recs, err := registrationRecords(img, req, noHold)
	if err != nil {
		t.Fatal(err)
	}
	return apply(t, img, recs)
}

// TestReplicationControlManager_UncleanShutdownEmptiesISR is Kafka's
// testEligibleLeaderReplicas_UncleanShutdown (ReplicationControlManagerTest)
// reached through registrations, as ClusterControlManager.registerBroker
// reaches handleBrokerUncleanShutdown, and carried on to the end: min ISR
// 3 on [0 1 2 3]; brokers 1-3 fenced, then 3 and 0 register after unclean
// shutdowns. 0, the ISR's last member, leaves it: the partition has no
// leader, and waits for 2, its eligible replica, not for 0.
func TestReplicationControlManager_UncleanShutdownEmptiesISR(t *testing.T) {
	img := elrImageAt(t, emptyISRLevel, []int32{0, 1, 2, 3}, minISR(3), elrPartition{replicas: []int32{0, 1, 2, 3}, isr: []int32{0, 1, 2, 3}, leader: 0})
	img = fenceOne(t, img, 1, 2, 3)
	checkPartition(t, img, elrPartition{leader: 0, isr: []int32{0}, elr: []int32{2, 3}})

	// An unclean shutdown ELR member is kicked out of the ELR.
	img = registerAgain(t, img, 3, -1)
	checkPartition(t, img, elrPartition{leader: 0, isr: []int32{0}, elr: []int32{2}})

	// An unclean shutdown last ISR member leaves the ISR and is the last
	// known leader.
	img = registerAgain(t, img, 0, -1)
	checkPartition(t, img, elrPartition{leader: fsm.NoLeader, isr: []int32{}, elr: []int32{2}, lastKnown: []int32{0}})

	// Its new incarnation caught up: still no leader, 2 is waited for.
	img = unfenceOne(t, img, 0)
	checkPartition(t, img, elrPartition{leader: fsm.NoLeader, isr: []int32{}, elr: []int32{2}, lastKnown: []int32{0}})
	// 2 is back: a clean election from the ELR.
	img = unfenceOne(t, img, 2)
	checkPartition(t, img, elrPartition{leader: 2, isr: []int32{2}})
}

// TestClusterControlManager_RegisterUncleanShutdownOfLastISRMember is issue
// 26's power loss, decided: min ISR 2 on [1 2 3]; 3 fenced, then 2 (ISR
// [1], ELR [2]: 2 holds every committed record); then broker 1 loses power
// and registers again reporting an unclean shutdown, fenced first by its
// crash or not. From metadata.version 3 it leaves the ISR and the
// partition waits for 2 (or, with unclean election on, takes the first
// live replica, RECOVERING); below it, broker 1 keeps its last ISR place
// and leads again with what it has, and 2 would truncate to it. A clean
// restart keeps the place at any level.
func TestClusterControlManager_RegisterUncleanShutdownOfLastISRMember(t *testing.T) {
	noLeaderWaitingFor2 := elrPartition{leader: fsm.NoLeader, isr: []int32{}, elr: []int32{2}, lastKnown: []int32{1}}
	tests := []struct {
		name    string
		level   uint32
		unclean bool
		fence1  bool // broker 1 is fenced for its crash before it registers again
		clean   bool // broker 1 reports a clean shutdown of its epoch
		// afterRegister, after1 and after2: the partition once broker 1
		// registered again, once it is unfenced, once 2 is unfenced.
		afterRegister, after1, after2 elrPartition
	}{
		{name: "fenced first, then unclean", level: emptyISRLevel, fence1: true,
			afterRegister: noLeaderWaitingFor2, after1: noLeaderWaitingFor2, after2: elrPartition{leader: 2, isr: []int32{2}}},
		{name: "replaced while active, unclean", level: emptyISRLevel,
			afterRegister: noLeaderWaitingFor2, after1: noLeaderWaitingFor2, after2: elrPartition{leader: 2, isr: []int32{2}}},
		{name: "unclean, unclean election on: broker 1 once it is back", level: emptyISRLevel, unclean: true, fence1: true,
			afterRegister: noLeaderWaitingFor2,
			after1:        elrPartition{leader: 1, isr: []int32{1}, state: recovering},
			after2:        elrPartition{leader: 1, isr: []int32{1}, state: recovering}},
		{name: "clean: it keeps its place and leads again", level: emptyISRLevel, fence1: true, clean: true,
			afterRegister: elrPartition{leader: fsm.NoLeader, isr: []int32{1}, elr: []int32{2}, lastKnown: []int32{1}},
			after1:        elrPartition{leader: 1, isr: []int32{1}, elr: []int32{2}},
			after2:        elrPartition{leader: 1, isr: []int32{1}, elr: []int32{2}}},
		{name: "below metadata.version 3, unclean: it keeps its last ISR place", level: 2, fence1: true,
			afterRegister: elrPartition{leader: fsm.NoLeader, isr: []int32{1}, elr: []int32{2}, lastKnown: []int32{1}},
			after1:        elrPartition{leader: 1, isr: []int32{1}, elr: []int32{2}},
			after2:        elrPartition{leader: 1, isr: []int32{1}, elr: []int32{2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			configs := minISR(2)
			if tt.unclean {
				configs[fsm.UncleanLeaderElection] = "true"
			}
			img := elrImageAt(t, tt.level, []int32{1, 2, 3}, configs, elrPartition{replicas: []int32{1, 2, 3}, isr: []int32{1, 2, 3}, leader: 1})
			img = fenceOne(t, img, 3, 2)
			checkPartition(t, img, elrPartition{leader: 1, isr: []int32{1}, elr: []int32{2}})
			if tt.fence1 {
				img = fenceOne(t, img, 1)
				checkPartition(t, img, elrPartition{leader: fsm.NoLeader, isr: []int32{1}, elr: []int32{2}, lastKnown: []int32{1}})
			}
			previous := int64(-1)
			if tt.clean {
				b, _ := img.Broker(1)
				previous = b.Epoch
			}
			img = registerAgain(t, img, 1, previous)
			checkPartition(t, img, tt.afterRegister)
			img = unfenceOne(t, img, 1)
			checkPartition(t, img, tt.after1)
			img = unfenceOne(t, img, 2)
			checkPartition(t, img, tt.after2)
		})
	}
}

// TestReplicationControlManager_CancelReassignmentOfEmptyISR: a
// reassignment of a partition whose ISR is empty cannot complete, and its
// cancel needs an unclean election (Kafka's PartitionReassignmentRevert
// with an empty ISR): refused, saying why, unless the topic allows one.
func TestReplicationControlManager_CancelReassignmentOfEmptyISR(t *testing.T) {
	start := elrPartition{replicas: []int32{1, 2, 3}, isr: []int32{}, elr: []int32{2}, lastKnown: []int32{1}, leader: fsm.NoLeader}
	for _, unclean := range []bool{false, true} {
		configs := minISR(2)
		if unclean {
			configs[fsm.UncleanLeaderElection] = "true"
		}
		img := elrImageAt(t, emptyISRLevel, []int32{1, 3, 4}, configs, start)
		img = apply(t, img, must(t)(reassignRecords(img, "e", 0, []int32{1, 2, 3, 4})))
		if p := elrOf(img); !slices.Equal(p.AddingReplicas, []int32{4}) || len(p.ISR) != 0 || p.HasLeader() {
			t.Fatalf("after the reassignment: %+v", p)
		}
		recs, err := cancelReassignmentRecords(img, "e", 0)
		if !unclean {
			if !errors.Is(err, ErrInvalidReplicaAssignment) || !strings.Contains(err.Error(), "its ISR is empty (its last member restarted after an unclean shutdown)") {
				t.Fatalf("cancel: %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		checkPartition(t, apply(t, img, recs), elrPartition{leader: 1, isr: []int32{1}, elr: []int32{2}})
	}
}

func must(t *testing.T) func([]*keelpb.Record, error) []*keelpb.Record {
	return func(recs []*keelpb.Record, err error) []*keelpb.Record {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
}
