package controller

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

var tid = fsm.TopicID{0x7}

// fixture: brokers 1, 2, 3 active (epochs 2, 3, 4), broker 4 fenced (epoch 5);
// topic "t" with partition 0 replicas [1 2 3] ISR [1 2 3] leader 1, and
// partition 1 replicas [2 3 1] ISR [2 3] leader 2. Extra batches follow.
func fixture(t *testing.T, unclean bool, extra ...[]*keelpb.Record) *fsm.Image {
	t.Helper()
	unfence := func(id int32, epoch int64) *keelpb.Record {
		return &keelpb.Record{Record: &keelpb.Record_UnfenceBroker{UnfenceBroker: &keelpb.UnfenceBrokerRecord{BrokerId: id, BrokerEpoch: epoch}}}
	}
	configs := map[string]string{}
	if unclean {
		configs[fsm.UncleanLeaderElection] = "true"
	}
	batches := [][]*keelpb.Record{
		clusterStart(),
		{regRecord(1, incA)}, {regRecord(2, incA)}, {regRecord(3, incA)}, {regRecord(4, incA)},
		{unfence(1, 2), unfence(2, 3), unfence(3, 4)},
		{
			{Record: &keelpb.Record_Topic{Topic: &keelpb.TopicRecord{Name: "t", TopicId: bytes.Clone(tid[:]), Configs: configs}}},
			{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{TopicId: bytes.Clone(tid[:]), Partition: 0, Replicas: []int32{1, 2, 3}, Isr: []int32{1, 2, 3}, Leader: 1}}},
			{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{TopicId: bytes.Clone(tid[:]), Partition: 1, Replicas: []int32{2, 3, 1}, Isr: []int32{2, 3}, Leader: 2}}},
		},
	}
	return imageWith(t, append(batches, extra...)...)
}

// apply replays records onto img, failing the test if they do not apply.
func apply(t *testing.T, img *fsm.Image, recs []*keelpb.Record) *fsm.Image {
	t.Helper()
	if len(recs) == 0 {
		return img
	}
	next, err := fsm.Apply(img, img.Offset+1, 1, &keelpb.RecordBatch{Records: recs})
	if err != nil {
		t.Fatalf("records do not apply: %v", err)
	}
	return next
}

type partState struct {
	leader int32
	isr    []int32
}

func state(img *fsm.Image, p int32) partState {
	part, _ := img.Partition(tid, p)
	return partState{part.Leader, part.ISR}
}

func (s partState) String() string { return fmt.Sprintf("leader %d isr %v", s.leader, s.isr) }

func equalState(a, b partState) bool { return a.leader == b.leader && slices.Equal(a.isr, b.isr) }

func heartbeat(id int32, epoch int64, offset uint64, fence, shutdown bool) *keelpb.BrokerHeartbeatRequest {
	return &keelpb.BrokerHeartbeatRequest{BrokerId: id, BrokerEpoch: epoch, MetadataOffset: offset, WantFence: fence, WantShutdown: shutdown}
}

func fenceRec(id int32, epoch int64) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_FenceBroker{FenceBroker: &keelpb.FenceBrokerRecord{BrokerId: id, BrokerEpoch: epoch}}}
}

func TestReplication_BrokerStateChanges(t *testing.T) {
	tests := []struct {
		name    string
		unclean bool
		extra   [][]*keelpb.Record
		decide  func(img *fsm.Image) ([]*keelpb.Record, error)
		want    map[int32]partState
	}{
		{
			name: "fencing the leader elects the first ISR replica in assignment order",
			decide: func(img *fsm.Image) ([]*keelpb.Record, error) {
				return heartbeatRecords(img, heartbeat(1, 2, 99, true, false))
			},
			want: map[int32]partState{0: {2, []int32{2, 3}}, 1: {2, []int32{2, 3}}},
		},
		{
			name: "fencing a follower only shrinks the ISR; the leader stays",
			decide: func(img *fsm.Image) ([]*keelpb.Record, error) {
				return heartbeatRecords(img, heartbeat(3, 4, 99, true, false))
			},
			want: map[int32]partState{0: {1, []int32{1, 2}}, 1: {2, []int32{2}}},
		},
		{
			name: "session expiry of two brokers at once: one record per partition",
			decide: func(img *fsm.Image) ([]*keelpb.Record, error) {
				b1, _ := img.Broker(1)
				b2, _ := img.Broker(2)
				return fenceRecords(img, []*fsm.Broker{b1, b2}), nil
			},
			want: map[int32]partState{0: {3, []int32{3}}, 1: {3, []int32{3}}},
		},
		{
			name: "losing the last ISR member leaves no leader and keeps that member",
			extra: [][]*keelpb.Record{{
				fenceRec(2, 3), fenceRec(3, 4),
				change(0, leaderPtr(1), []int32{1}), change(1, leaderPtr(fsm.NoLeader), []int32{2}),
			}},
			decide: func(img *fsm.Image) ([]*keelpb.Record, error) {
				return heartbeatRecords(img, heartbeat(1, 2, 99, true, false))
			},
			want: map[int32]partState{0: {fsm.NoLeader, []int32{1}}, 1: {fsm.NoLeader, []int32{2}}},
		},
		{
			name:    "unclean election picks a live replica outside the ISR",
			unclean: true,
			extra:   [][]*keelpb.Record{{fenceRec(2, 3), change(0, leaderPtr(1), []int32{1})}},
			decide: func(img *fsm.Image) ([]*keelpb.Record, error) {
				return heartbeatRecords(img, heartbeat(1, 2, 99, true, false))
			},
			want: map[int32]partState{0: {3, []int32{3}}},
		},
		{
			name:  "an unfenced broker leads the leaderless partitions it is in the ISR of",
			extra: [][]*keelpb.Record{{fenceRec(1, 2), fenceRec(2, 3), fenceRec(3, 4), change(0, leaderPtr(fsm.NoLeader), []int32{1}), change(1, leaderPtr(fsm.NoLeader), []int32{2})}},
			decide: func(img *fsm.Image) ([]*keelpb.Record, error) {
				return heartbeatRecords(img, heartbeat(1, 2, 99, false, false))
			},
			want: map[int32]partState{0: {1, []int32{1}}, 1: {fsm.NoLeader, []int32{2}}},
		},
		{
			name: "a new active controller finishes an unfencing whose elections were lost with its entry",
			extra: [][]*keelpb.Record{
				{fenceRec(1, 2), fenceRec(2, 3), fenceRec(3, 4), change(0, leaderPtr(fsm.NoLeader), []int32{1}), change(1, leaderPtr(fsm.NoLeader), []int32{2})},
				{{Record: &keelpb.Record_UnfenceBroker{UnfenceBroker: &keelpb.UnfenceBrokerRecord{BrokerId: 1, BrokerEpoch: 2}}}},
			},
			decide: func(img *fsm.Image) ([]*keelpb.Record, error) { return leaderlessChanges(img), nil },
			want:   map[int32]partState{0: {1, []int32{1}}, 1: {fsm.NoLeader, []int32{2}}},
		},
		{
			name: "controlled shutdown moves leadership to another ISR member and leaves the ISRs",
			decide: func(img *fsm.Image) ([]*keelpb.Record, error) {
				return heartbeatRecords(img, heartbeat(2, 3, 99, false, true))
			},
			want: map[int32]partState{0: {1, []int32{1, 3}}, 1: {3, []int32{3}}},
		},
		{
			name:   "unregistering a fenced broker: an ISR it is the last member of keeps it",
			extra:  [][]*keelpb.Record{{fenceRec(2, 3), fenceRec(3, 4), change(1, leaderPtr(fsm.NoLeader), []int32{2}), change(0, nil, []int32{1})}},
			decide: func(img *fsm.Image) ([]*keelpb.Record, error) { return unregisterRecords(img, 2, 3) },
			// The ISR is never emptied: broker 2 stays its last member.
			want: map[int32]partState{0: {1, []int32{1}}, 1: {fsm.NoLeader, []int32{2}}},
		},
		{
			name: "a bounced broker (new incarnation) loses its leaderships at once",
			decide: func(img *fsm.Image) ([]*keelpb.Record, error) {
				return registrationRecords(img, &keelpb.RegisterBrokerRequest{BrokerId: 1, IncarnationId: incB, Address: "h:1", MinMetadataVersion: 1, MaxMetadataVersion: 1},
					func(*fsm.Broker) time.Duration { return 0 })
			},
			want: map[int32]partState{0: {2, []int32{2, 3}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := fixture(t, tt.unclean, tt.extra...)
			recs, err := tt.decide(img)
			if err != nil {
				t.Fatal(err)
			}
			after := apply(t, img, recs)
			for p, want := range tt.want {
				if got := state(after, p); !equalState(got, want) {
					t.Errorf("partition %d: %v, want %v", p, got, want)
				}
			}
		})
	}
}

func leaderPtr(id int32) *int32 { return &id }

func change(p int32, leader *int32, isr []int32) *keelpb.Record {
	r := &keelpb.PartitionChangeRecord{TopicId: bytes.Clone(tid[:]), Partition: p, Leader: leader}
	if isr != nil {
		r.Isr = &keelpb.Int32List{Values: isr}
	}
	return &keelpb.Record{Record: &keelpb.Record_PartitionChange{PartitionChange: r}}
}

func TestReplication_Elections(t *testing.T) {
	tests := []struct {
		name    string
		unclean bool
		extra   [][]*keelpb.Record
		typ     keelpb.ElectionType
		part    int32
		wantErr error
		want    int32
	}{
		{name: "preferred leader already leads", typ: keelpb.ElectionType_ELECTION_TYPE_PREFERRED, part: 0, wantErr: ErrElectionNotNeeded},
		{
			name:  "preferred leader back in the ISR takes over",
			extra: [][]*keelpb.Record{{change(0, leaderPtr(2), []int32{2, 3})}, {change(0, nil, []int32{2, 3, 1})}},
			typ:   keelpb.ElectionType_ELECTION_TYPE_PREFERRED, part: 0, want: 1,
		},
		{
			name:  "preferred leader not in the ISR",
			extra: [][]*keelpb.Record{{change(0, leaderPtr(2), []int32{2, 3})}},
			typ:   keelpb.ElectionType_ELECTION_TYPE_PREFERRED, part: 0, wantErr: ErrPreferredNotReady,
		},
		{
			name:  "unclean election on demand elects a live replica outside the ISR",
			extra: [][]*keelpb.Record{{fenceRec(2, 3), change(1, leaderPtr(fsm.NoLeader), []int32{2})}},
			typ:   keelpb.ElectionType_ELECTION_TYPE_UNCLEAN, part: 1, want: 3,
		},
		{name: "unclean election with a live leader is not needed", typ: keelpb.ElectionType_ELECTION_TYPE_UNCLEAN, part: 1, wantErr: ErrElectionNotNeeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := fixture(t, tt.unclean, tt.extra...)
			p, _ := img.Partition(tid, tt.part)
			rec, leader, err := electionRecord(img, p, tt.typ)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			after := apply(t, img, []*keelpb.Record{rec})
			if leader != tt.want || state(after, tt.part).leader != tt.want {
				t.Fatalf("leader = %d (image %v), want %d", leader, state(after, tt.part), tt.want)
			}
		})
	}
}

func TestReplication_ImbalanceAndLeads(t *testing.T) {
	// Partition 0's preferred leader (1) is in the ISR but 2 leads: broker 1
	// leads 0 of its 1 preferred partitions, over any ratio.
	img := fixture(t, false, []*keelpb.Record{change(0, leaderPtr(2), nil)})
	got := imbalancedPartitions(img, 0.10)
	if len(got) != 1 || got[0].Partition != 0 {
		t.Fatalf("imbalanced = %v", got)
	}
	if leadsAny(img, 1) || !leadsAny(img, 2) {
		t.Fatal("leadsAny is wrong")
	}
}
