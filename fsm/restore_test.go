package fsm

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/keel-dev/keel/proto/keelpb"
)

var topicGone = TopicID{0xc}

// restoreScenario is a snapshot and the cluster after it: the snapshot
// holds brokers 1-3 and 5, topic "a" (partitions 0 and 1) and topic
// "gone"; since, topic "a" partition 0's leader moved to 2 (ISR [2 3]),
// broker 1 registered again, broker 4 registered, broker 5 was
// unregistered, "gone" was deleted, "later" created, and producer ids were
// handed out.
func restoreScenario(t *testing.T) (snap, cur *Image) {
	t.Helper()
	snapBatches := []*keelpb.RecordBatch{
		batch(clusterID("c"), featureLevel(1), epoch(1, 1)),
		batch(register(1, "a")), batch(register(2, "b")), batch(register(3, "c")), batch(register(5, "e")),
		batch(unfence(1, 2), unfence(2, 3), unfence(3, 4)),
		batch(topicRec("a", topicA, nil), partRec(topicA, 0, []int32{1, 2, 3}, []int32{1, 2, 3}, 1), partRec(topicA, 1, []int32{2, 3, 1}, []int32{2, 3, 1}, 2)),
		batch(topicRec("gone", topicGone, nil), partRec(topicGone, 0, []int32{3, 1}, []int32{3, 1}, 3)),
		batch(producerIDs(2, 3, 1000)),
	}
	snap = replay(t, snapBatches...)
	later := []*keelpb.RecordBatch{
		batch(change(topicA, 0, leader(2), []int32{2, 3}, nil)),
		batch(fence(1, 2)),
		batch(register(1, "a2")), // index 12: broker 1's new epoch
		batch(register(4, "d")),  // index 13
		batch(unregister(5, 5)),
		batch(removeTopic(topicGone)),
		batch(topicRec("later", topicB, nil), partRec(topicB, 0, []int32{2}, []int32{2}, 2)),
		batch(producerIDs(2, 3, 5000)),
		batch(epoch(2, 1)), batch(epoch(3, 2)),
	}
	cur = replay(t, append(slices.Clone(snapBatches), later...)...)
	return snap, cur
}

// roundTrip writes img as a snapshot and reads it back: what a restore
// hands raft must be a snapshot every node reads.
func roundTrip(t *testing.T, img *Image) *Image {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteSnapshot(&buf, img); err != nil {
		t.Fatal(err)
	}
	back, err := ReadSnapshot(&buf)
	if err != nil {
		t.Fatalf("the restored image does not read back as a snapshot: %v", err)
	}
	if !sameImage(t, img, back) {
		t.Fatal("the restored image changed through a snapshot")
	}
	return back
}

func TestImage_RestoredOnto(t *testing.T) {
	snap, cur := restoreScenario(t)
	got, err := snap.RestoredOnto(cur, 3)
	if err != nil {
		t.Fatal(err)
	}
	got = roundTrip(t, got)
	if got.ClusterID != "c" || got.ControllerEpoch != 3 || got.ControllerLeaderID != 3 {
		t.Errorf("identity: cluster %q epoch %d leader %d; want the running cluster's (c, 3) and leader 3", got.ClusterID, got.ControllerEpoch, got.ControllerLeaderID)
	}
	if got.NextProducerID != 5000 {
		t.Errorf("next producer id %d; want the running cluster's 5000 (the snapshot's is 1000: ids handed out since would be handed out again)", got.NextProducerID)
	}

	partitions := []struct {
		name                   string
		topic                  TopicID
		partition              int32
		leader                 int32
		isr                    []int32
		leaderEpoch, partEpoch int32
		awaits                 bool
	}{
		// Moved since the save: where the data is now, one epoch above.
		{"a/0, moved since", topicA, 0, 2, []int32{2, 3}, 2, 2, false},
		{"a/1, unchanged since", topicA, 1, 2, []int32{2, 3, 1}, 1, 1, false},
		// Deleted since: nothing says where its data is.
		{"gone/0, deleted since", topicGone, 0, NoLeader, []int32{3, 1}, 1, 1, true},
	}
	for _, tc := range partitions {
		p, ok := got.Partition(tc.topic, tc.partition)
		switch {
		case !ok:
			t.Errorf("%s: missing", tc.name)
		case p.Leader != tc.leader || !slices.Equal(p.ISR, tc.isr) || p.LeaderEpoch != tc.leaderEpoch || p.PartitionEpoch != tc.partEpoch ||
			p.AwaitsReplicaLogs() != tc.awaits:
			t.Errorf("%s: leader %d ISR %v epochs %d/%d awaits logs %v; want leader %d ISR %v epochs %d/%d awaits logs %v",
				tc.name, p.Leader, p.ISR, p.LeaderEpoch, p.PartitionEpoch, p.AwaitsReplicaLogs(), tc.leader, tc.isr, tc.leaderEpoch, tc.partEpoch, tc.awaits)
		}
		if now, ok := cur.Partition(tc.topic, tc.partition); ok && (p.LeaderEpoch <= now.LeaderEpoch || p.PartitionEpoch <= now.PartitionEpoch) {
			t.Errorf("%s: epochs %d/%d, not above the running cluster's %d/%d", tc.name, p.LeaderEpoch, p.PartitionEpoch, now.LeaderEpoch, now.PartitionEpoch)
		}
	}
	if _, ok := got.Topic("later"); ok {
		t.Error(`topic "later", created after the save, was kept`)
	}

	brokers := []struct {
		id          int32
		incarnation string
		epoch       int64
		fenced      bool
	}{
		{1, "a2", 12, true}, // registered again since: the live incarnation
		{2, "b", 3, false},
		{3, "c", 4, false},
		{4, "d", 13, true}, // registered since: kept
		{5, "e", 5, true},  // unregistered since: restored, fenced
	}
	if got.BrokerCount() != len(brokers) {
		t.Errorf("%d brokers; want %d", got.BrokerCount(), len(brokers))
	}
	for _, w := range brokers {
		b, ok := got.Broker(w.id)
		if !ok || b.IncarnationID != w.incarnation || b.Epoch != w.epoch || b.Fenced != w.fenced {
			t.Errorf("broker %d: %+v; want incarnation %s epoch %d fenced %v", w.id, b, w.incarnation, w.epoch, w.fenced)
		}
	}
}

func TestImage_RestoredOnto_AnotherCluster(t *testing.T) {
	snap, cur := restoreScenario(t)
	other := snap.WithIdentity("other", 9, 1)
	got, err := other.RestoredOnto(cur, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got.ClusterID != "c" || got.ControllerEpoch != 3 {
		t.Errorf("cluster %q epoch %d; want the running cluster's identity (c, 3)", got.ClusterID, got.ControllerEpoch)
	}
}

// TestImage_RestoredOnto_RefusesWhatABrokerCannotRead: a registered broker
// that cannot read the snapshot's metadata.version makes the restore fail,
// with the broker named, rather than hand brokers an image they refuse.
func TestImage_RestoredOnto_RefusesWhatABrokerCannotRead(t *testing.T) {
	snap := replay(t, batch(clusterID("c"), featureLevel(1), epoch(1, 1)))
	cur := replay(t, batch(clusterID("c"), featureLevel(2), epoch(1, 1)), batch(registerRange(7, "g", 2, 2)))
	_, err := snap.RestoredOnto(cur, 1)
	if err == nil || !strings.Contains(err.Error(), "broker supports metadata versions 2-2") {
		t.Fatalf("err = %v; want a refusal naming the broker's versions", err)
	}
}

func TestImage_ForDisasterRecovery(t *testing.T) {
	// The ELR and last known leader go: the election is by the logs.
	cur := replay(t, batch(clusterID("c"), featureLevel(1), epoch(1, 1)),
		batch(register(1, "a")), batch(register(2, "b")),
		batch(topicRec("a", topicA, map[string]string{MinInsyncReplicas: "2"}), partRec(topicA, 0, []int32{1, 2}, []int32{1, 2}, 1)),
		batch(producerIDs(1, 2, 3000)))
	withELR, err := Apply(cur, cur.Offset+1, 1, batch(&keelpb.Record{Record: &keelpb.Record_PartitionChange{PartitionChange: &keelpb.PartitionChangeRecord{
		TopicId: topicA[:], Partition: 0, Leader: leader(2), Isr: &keelpb.Int32List{Values: []int32{2}}, EligibleLeaderReplicas: &keelpb.Int32List{Values: []int32{1}}}}}))
	if err != nil {
		t.Fatal(err)
	}
	got, err := withELR.ForDisasterRecovery()
	if err != nil {
		t.Fatal(err)
	}
	got = roundTrip(t, got)
	if got.ClusterID != "c" || got.ControllerEpoch != 1 {
		t.Errorf("identity: cluster %q epoch %d; want the snapshot's (c, 1)", got.ClusterID, got.ControllerEpoch)
	}
	if got.BrokerCount() != 0 {
		t.Errorf("%v brokers registered; want none: every broker registers with the new quorum", got.Brokers())
	}
	if want := int64(3000) + DisasterRecoveryProducerIDs; got.NextProducerID != want {
		t.Errorf("next producer id %d; want %d", got.NextProducerID, want)
	}
	p, _ := got.Partition(topicA, 0)
	if !p.AwaitsReplicaLogs() || p.LeaderEpoch != 2 || p.PartitionEpoch != 2 || len(p.ELR()) != 0 || len(p.LastKnownELR()) != 0 ||
		!slices.Equal(p.Replicas, []int32{1, 2}) {
		t.Errorf("a/0: %+v, ELR %v, last known %v; want awaiting its logs at epochs 2/2, replicas [1 2], no ELR", *p, p.ELR(), p.LastKnownELR())
	}
}
