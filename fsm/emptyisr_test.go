package fsm

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/keel-dev/keel/proto/keelpb"
)

// withTopicsAt is withTopics at metadata.version level, its brokers
// supporting levels 1-3.
func withTopicsAt(t *testing.T, level uint32) *Image {
	t.Helper()
	return replay(t,
		batch(clusterID("c"), featureLevel(level), epoch(1, 1)),
		batch(registerRange(1, "a", 1, MaxMetadataVersion)), batch(registerRange(2, "b", 1, MaxMetadataVersion)), batch(registerRange(3, "c", 1, MaxMetadataVersion)),
		batch(unfence(1, 2), unfence(2, 3), unfence(3, 4)),
		batch(topicRec("a", topicA, nil), partRec(topicA, 0, []int32{1, 2, 3}, []int32{1, 2, 3}, 1), partRec(topicA, 1, []int32{2, 3, 1}, []int32{2, 3, 1}, 2)),
	)
}

// TestFSM_EmptyISR: KIP-966 lets a partition's ISR be empty (its last
// member restarted after an unclean shutdown; the partition waits for an
// eligible leader replica), from metadata.version 3 only: a binary below
// it refuses an empty ISR, so the state machine refuses one below the
// level, and a lowering of the level while a partition has one.
func TestFSM_EmptyISR(t *testing.T) {
	emptied := batch(elrChange(topicA, 0, leader(NoLeader), []int32{}, []int32{2}, []int32{1}, nil))
	tests := []struct {
		name    string
		level   uint32
		batches []*keelpb.RecordBatch
		wantErr error
		errText string
		check   func(t *testing.T, img *Image)
	}{
		{
			name: "at level 3, an empty ISR without a leader", level: 3, batches: []*keelpb.RecordBatch{emptied},
			check: func(t *testing.T, img *Image) {
				p, _ := img.Partition(topicA, 0)
				if p.HasLeader() || len(p.ISR) != 0 || !slices.Equal(p.ELR(), []int32{2}) || !slices.Equal(p.LastKnownELR(), []int32{1}) ||
					p.LeaderEpoch != 1 || p.PartitionEpoch != 1 {
					t.Fatalf("partition = %+v", p)
				}
			},
		},
		{
			name: "at level 3, an ELR member leads again from an empty ISR", level: 3,
			batches: []*keelpb.RecordBatch{emptied, batch(elrChange(topicA, 0, leader(2), []int32{2}, []int32{}, []int32{}, nil))},
			check: func(t *testing.T, img *Image) {
				p, _ := img.Partition(topicA, 0)
				if p.Leader != 2 || !slices.Equal(p.ISR, []int32{2}) || len(p.ELR()) != 0 || p.LeaderEpoch != 2 {
					t.Fatalf("partition = %+v", p)
				}
			},
		},
		{
			name: "at level 3, a leader with an empty ISR", level: 3,
			batches: []*keelpb.RecordBatch{batch(change(topicA, 0, nil, []int32{}, nil))}, errText: "leader 1 is not in the isr []",
		},
		{
			name: "at level 2, an empty ISR", level: 2, batches: []*keelpb.RecordBatch{emptied},
			wantErr: ErrAboveMetadataVersion, errText: "an empty isr needs metadata.version 3; the cluster is at 2",
		},
		{
			name: "at level 1, a new partition with an empty ISR", level: 1,
			batches: []*keelpb.RecordBatch{batch(topicRec("b", topicB, nil), partRec(topicB, 0, []int32{3}, nil, NoLeader))},
			wantErr: ErrAboveMetadataVersion, errText: "an empty isr needs metadata.version 3; the cluster is at 1",
		},
		{
			name: "lowering the level while an ISR is empty", level: 3, batches: []*keelpb.RecordBatch{emptied, batch(featureLevel(2))},
			wantErr: ErrUnsafeDowngrade, errText: "1 partitions with an empty ISR (metadata.version 3) could not be expressed",
		},
		{
			name: "lowering the level once every ISR has a member again", level: 3,
			batches: []*keelpb.RecordBatch{emptied, batch(elrChange(topicA, 0, leader(2), []int32{2}, []int32{}, []int32{}, nil)), batch(featureLevel(2))},
			check: func(t *testing.T, img *Image) {
				if img.FinalizedMetadataVersion() != 2 {
					t.Fatalf("level %d, want 2", img.FinalizedMetadataVersion())
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := withTopicsAt(t, tt.level)
			var err error
			for _, b := range tt.batches {
				if img, err = Apply(img, img.Offset+1, 1, b); err != nil {
					break
				}
			}
			if tt.errText != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errText) || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
					t.Fatalf("err = %v, want %v: %q", err, tt.wantErr, tt.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, img)
		})
	}
}

// TestSnapshot_RoundTripKeepsEmptyISR: a partition with an empty ISR
// survives a snapshot (its PartitionRecord after the level's).
func TestSnapshot_RoundTripKeepsEmptyISR(t *testing.T) {
	img := withTopicsAt(t, 3)
	img, err := Apply(img, img.Offset+1, 1, batch(elrChange(topicA, 0, leader(NoLeader), []int32{}, []int32{2}, []int32{1}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	back, err := ReadSnapshot(bytes.NewReader(imageBytes(t, img)))
	if err != nil {
		t.Fatalf("snapshot round trip: %v", err)
	}
	p, _ := back.Partition(topicA, 0)
	if p.HasLeader() || len(p.ISR) != 0 || !slices.Equal(p.ELR(), []int32{2}) || !slices.Equal(p.LastKnownELR(), []int32{1}) {
		t.Fatalf("after a snapshot: %+v", p)
	}
}
