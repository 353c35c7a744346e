package fsm

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"slices"
	"strings"
	"testing"

	"github.com/keel-dev/keel/proto/keelpb"
)

const recovering = keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERING

// elrChange builds a PartitionChangeRecord of the KIP-966 and KIP-704
// fields; nil lists and a nil state are "unchanged".
func elrChange(id TopicID, p int32, leader *int32, isr, elr, lastKnown []int32, state *keelpb.LeaderRecoveryState) *keelpb.Record {
	rec := change(id, p, leader, isr, nil)
	r := rec.GetPartitionChange()
	if elr != nil {
		r.EligibleLeaderReplicas = &keelpb.Int32List{Values: elr}
	}
	if lastKnown != nil {
		r.LastKnownElr = &keelpb.Int32List{Values: lastKnown}
	}
	r.LeaderRecoveryState = state
	return rec
}

func recState(s keelpb.LeaderRecoveryState) *keelpb.LeaderRecoveryState { return &s }

// TestFSM_EligibleLeaderReplicas: the ELR, the last known leader and the
// leader recovery state as PartitionChangeRecords set them, with KRaft's
// epochs (only the partition epoch moves) and the FSM's checks.
func TestFSM_EligibleLeaderReplicas(t *testing.T) {
	base := withTopics(t) // a/0: replicas 1,2,3 ISR 1,2,3 leader 1
	type want struct {
		leader               int32
		isr, elr, lastKnown  []int32
		recovering           bool
		leaderEpoch, pEpochN int32
	}
	tests := []struct {
		name    string
		recs    []*keelpb.Record
		wantErr string
		want    want
	}{
		{
			name: "the ISR shrinks below min ISR: the replicas that left become eligible",
			recs: []*keelpb.Record{elrChange(topicA, 0, nil, []int32{1}, []int32{2, 3}, nil, nil)},
			want: want{leader: 1, isr: []int32{1}, elr: []int32{2, 3}, pEpochN: 1},
		},
		{
			name: "leaderless with the last known leader",
			recs: []*keelpb.Record{elrChange(topicA, 0, leader(NoLeader), []int32{1}, []int32{2, 3}, []int32{1}, nil)},
			want: want{leader: NoLeader, isr: []int32{1}, elr: []int32{2, 3}, lastKnown: []int32{1}, leaderEpoch: 1, pEpochN: 1},
		},
		{
			name: "an ELR change alone moves only the partition epoch",
			recs: []*keelpb.Record{
				elrChange(topicA, 0, nil, []int32{1}, []int32{2, 3}, nil, nil),
				elrChange(topicA, 0, nil, nil, []int32{}, nil, nil),
			},
			want: want{leader: 1, isr: []int32{1}, pEpochN: 2},
		},
		{
			name: "an unclean election: RECOVERING",
			recs: []*keelpb.Record{elrChange(topicA, 0, leader(3), []int32{3}, nil, nil, recState(recovering))},
			want: want{leader: 3, isr: []int32{3}, recovering: true, leaderEpoch: 1, pEpochN: 1},
		},
		{
			name: "the leader confirms: RECOVERED",
			recs: []*keelpb.Record{
				elrChange(topicA, 0, leader(3), []int32{3}, nil, nil, recState(recovering)),
				elrChange(topicA, 0, nil, nil, nil, nil, recState(keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERED)),
			},
			want: want{leader: 3, isr: []int32{3}, leaderEpoch: 1, pEpochN: 2},
		},
		{name: "an ELR member in the ISR is refused", recs: []*keelpb.Record{elrChange(topicA, 0, nil, []int32{1, 2}, []int32{2}, nil, nil)}, wantErr: "both in the isr"},
		{name: "an ELR member that is no replica is refused", recs: []*keelpb.Record{elrChange(topicA, 0, nil, []int32{1}, []int32{4}, nil, nil)}, wantErr: "must be distinct replicas"},
		{name: "an ELR member twice is refused", recs: []*keelpb.Record{elrChange(topicA, 0, nil, []int32{1}, []int32{2, 2}, nil, nil)}, wantErr: "must be distinct replicas"},
		{name: "a last known leader that is no replica is refused", recs: []*keelpb.Record{elrChange(topicA, 0, nil, nil, nil, []int32{9}, nil)}, wantErr: "last known elr"},
		{name: "an unknown recovery state is refused", recs: []*keelpb.Record{elrChange(topicA, 0, nil, nil, nil, nil, recState(5))}, wantErr: "leader recovery state 5"},
		{name: "a change of the recovery state to what it is changes nothing", recs: []*keelpb.Record{elrChange(topicA, 0, nil, nil, nil, nil, recState(0))}, wantErr: "changes nothing"},
		{name: "an empty ELR where there is none changes nothing", recs: []*keelpb.Record{elrChange(topicA, 0, nil, nil, []int32{}, []int32{}, nil)}, wantErr: "changes nothing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := base
			var err error
			for _, r := range tt.recs {
				var next *Image
				if next, err = Apply(img, img.Offset+1, 1, batch(r)); err != nil {
					break
				}
				img = next
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			p, _ := img.Partition(topicA, 0)
			got := want{leader: p.Leader, isr: p.ISR, elr: p.ELR(), lastKnown: p.LastKnownELR(), recovering: p.Recovering(),
				leaderEpoch: p.LeaderEpoch, pEpochN: p.PartitionEpoch}
			if got.leader != tt.want.leader || !slices.Equal(got.isr, tt.want.isr) || !slices.Equal(got.elr, tt.want.elr) ||
				!slices.Equal(got.lastKnown, tt.want.lastKnown) || got.recovering != tt.want.recovering ||
				got.leaderEpoch != tt.want.leaderEpoch || got.pEpochN != tt.want.pEpochN {
				t.Fatalf("partition %+v, want %+v", got, tt.want)
			}
			// The other partition's fields, and the image's history, are
			// untouched.
			if q, _ := img.Partition(topicA, 1); q.ELR() != nil || q.Recovering() {
				t.Fatalf("partition 1 changed: %+v", q)
			}
			if q, _ := base.Partition(topicA, 0); q.ELR() != nil || q.PartitionEpoch != 0 {
				t.Fatalf("the base image changed: %+v", q)
			}
			// And they survive a snapshot, through the hand decoder too.
			back, err := ReadSnapshot(bytes.NewReader(imageBytes(t, img)))
			if err != nil || !sameImage(t, back, img) {
				t.Fatalf("snapshot round trip: %v", err)
			}
			bp, _ := back.Partition(topicA, 0)
			if !slices.Equal(bp.ELR(), p.ELR()) || !slices.Equal(bp.LastKnownELR(), p.LastKnownELR()) || bp.LeaderRecoveryState != p.LeaderRecoveryState {
				t.Fatalf("after a snapshot: %+v, want %+v", bp, p)
			}
		})
	}
}

// TestFSM_PartitionRecordCarriesELR: a PartitionRecord (as a snapshot
// states one) holds the KIP-966 and KIP-704 fields, checked as a change's.
func TestFSM_PartitionRecordCarriesELR(t *testing.T) {
	img := withTopics(t)
	rec := partRec(topicB, 0, []int32{1, 2, 3}, []int32{3}, NoLeader)
	rec.GetPartition().EligibleLeaderReplicas = []int32{1}
	rec.GetPartition().LastKnownElr = []int32{3}
	rec.GetPartition().LeaderRecoveryState = recovering
	img = apply1(t, img, topicRec("b", topicB, nil), rec)
	p, _ := img.Partition(topicB, 0)
	if !slices.Equal(p.ELR(), []int32{1}) || !slices.Equal(p.LastKnownELR(), []int32{3}) || !p.Recovering() {
		t.Fatalf("partition %+v", p)
	}
	bad := partRec(topicB, 1, []int32{1, 2, 3}, []int32{3}, 3)
	bad.GetPartition().EligibleLeaderReplicas = []int32{3}
	if _, err := Apply(img, img.Offset+1, 1, batch(bad)); err == nil || !strings.Contains(err.Error(), "both in the isr") {
		t.Fatalf("an ELR member in the ISR: err = %v", err)
	}
}

// TestSnapshot_ReadsFormatVersion1: a snapshot written before version 2 (no
// configs count, no ELR fields) still restores; a version beyond this
// reader's is refused.
func TestSnapshot_ReadsFormatVersion1(t *testing.T) {
	img := withTopics(t)
	v1 := snapshotWithHeader(t, img, func(h *keelpb.SnapshotHeader) { h.FormatVersion = 1 })
	back, err := ReadSnapshot(bytes.NewReader(v1))
	if err != nil {
		t.Fatalf("a version 1 snapshot: %v", err)
	}
	if !sameImage(t, back, img) {
		t.Fatal("a version 1 snapshot restores another image")
	}
	future := snapshotWithHeader(t, img, func(h *keelpb.SnapshotHeader) { h.FormatVersion = SnapshotFormatVersion + 1 })
	if _, err := ReadSnapshot(bytes.NewReader(future)); err == nil || !strings.Contains(err.Error(), "format version 3 is not supported (want 1 to 2)") {
		t.Fatalf("a version 3 snapshot: err = %v", err)
	}
	// A header that miscounts the cluster's configs is refused.
	withConfigs := apply1(t, img, configRec("", RetentionMs, str("1")))
	bad := snapshotWithHeader(t, withConfigs, func(h *keelpb.SnapshotHeader) { h.Configs = 0 })
	if _, err := ReadSnapshot(bytes.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "do not match the body") {
		t.Fatalf("miscounted configs: err = %v", err)
	}
	info, err := VerifySnapshot(bytes.NewReader(imageBytes(t, withConfigs)))
	if err != nil || info.Configs != 1 {
		t.Fatalf("VerifySnapshot = %+v, %v", info, err)
	}
}

// snapshotWithHeader writes img's snapshot with its header edited, and a
// trailer that sums it: a well-formed snapshot that says what edit says.
func snapshotWithHeader(t *testing.T, img *Image, edit func(*keelpb.SnapshotHeader)) []byte {
	t.Helper()
	var buf bytes.Buffer
	sum := sha256.New()
	bw := bufio.NewWriter(&buf)
	fw := &frameWriter{w: bw}
	bw.WriteString(snapshotMagic)
	header := &keelpb.SnapshotHeader{
		FormatVersion: SnapshotFormatVersion, ClusterId: img.ClusterID, Index: img.Offset, Term: img.Term,
		ControllerEpoch: img.ControllerEpoch, Brokers: uint64(img.BrokerCount()), Topics: uint64(img.TopicCount()),
		Partitions: uint64(img.PartitionCount()), Configs: uint64(len(img.clusterConfigs)),
		RecordCount: uint64(img.BrokerCount() + img.TopicCount() + img.PartitionCount() + len(img.clusterConfigs) + identityRecords(img)),
	}
	edit(header)
	if err := fw.frame(frameHeader, header); err != nil {
		t.Fatal(err)
	}
	var count uint64
	if err := imageRecords(img, func(r *keelpb.Record) error { count++; return fw.frame(frameRecord, r) }); err != nil {
		t.Fatal(err)
	}
	bw.Flush()
	sum.Write(buf.Bytes())
	tw := bufio.NewWriter(&buf)
	if err := (&frameWriter{w: tw}).frame(frameTrailer, &keelpb.SnapshotTrailer{RecordCount: count, Sha256: sum.Sum(nil)}); err != nil {
		t.Fatal(err)
	}
	tw.Flush()
	return buf.Bytes()
}

// TestSnapshot_RoundTripKeepsConfigsAndELR: a snapshot restores the
// cluster defaults, a topic's own configs, and each partition's ELR, last
// known leader and recovery state, and a log replayed on top of it goes on
// as on the image it was taken from.
func TestSnapshot_RoundTripKeepsConfigsAndELR(t *testing.T) {
	img := apply1(t, withTopics(t),
		configRec("", MinInsyncReplicas, str("2")), configRec("", UncleanLeaderElection, str("TRUE")),
		configRec("a", MinInsyncReplicas, str("3")), configRec("a", RetentionMs, str("1000")),
		elrChange(topicA, 0, leader(NoLeader), []int32{1}, []int32{2, 3}, []int32{1}, nil),
		elrChange(topicA, 1, leader(2), []int32{2}, nil, nil, recState(recovering)))
	var buf bytes.Buffer
	if err := WriteSnapshot(&buf, img); err != nil {
		t.Fatal(err)
	}
	back, err := ReadSnapshot(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !sameImage(t, back, img) {
		t.Fatal("the restored image differs")
	}
	a, _ := back.Topic("a")
	// The log's values as written (the controller writes them canonical);
	// read as Kafka reads them.
	if v, _ := back.ClusterConfig(UncleanLeaderElection); v != "TRUE" || !back.UncleanElection(nil) || back.MinISR(a) != 3 || a.Configs[RetentionMs] != "1000" {
		t.Fatalf("configs after restore: cluster %v, topic %v", back.ClusterConfigs(), a.Configs)
	}
	p0, _ := back.Partition(topicA, 0)
	p1, _ := back.Partition(topicA, 1)
	if !slices.Equal(p0.ELR(), []int32{2, 3}) || !slices.Equal(p0.LastKnownELR(), []int32{1}) || p0.Recovering() || !p1.Recovering() {
		t.Fatalf("partitions after restore: %+v %+v", p0, p1)
	}
	// The same next entry applies the same way to both.
	next := batch(elrChange(topicA, 0, leader(2), []int32{2}, []int32{}, []int32{}, nil))
	want, err1 := Apply(img, img.Offset+1, img.Term, next)
	got, err2 := Apply(back, back.Offset+1, back.Term, next)
	if err1 != nil || err2 != nil || !sameImage(t, got, want) {
		t.Fatalf("after restore the log goes on differently: %v, %v", err1, err2)
	}
}
