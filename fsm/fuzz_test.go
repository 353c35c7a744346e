package fsm

import (
	"bytes"
	"testing"

	"github.com/keel-dev/keel/proto/keelpb"
)

// fuzzBase is a small populated image: a cluster, three active brokers and
// a fenced one, a topic of four partitions.
func fuzzBase(tb testing.TB) *Image {
	tb.Helper()
	id := TopicID{0xf}
	batches := []*keelpb.RecordBatch{
		batch(clusterID("c"), featureLevel(1), epoch(1, 1)),
		batch(register(1, "a")), batch(register(2, "a")), batch(register(3, "a")), batch(register(4, "a")),
		batch(unfence(1, 2), unfence(2, 3), unfence(3, 4)),
		batch(topicRec("t", id, map[string]string{UncleanLeaderElection: "true"}),
			partRec(id, 0, []int32{1, 2, 3}, []int32{1, 2, 3}, 1),
			partRec(id, 1, []int32{2, 3, 1}, []int32{2, 3}, 2),
			partRec(id, 2, []int32{3, 1, 2}, []int32{3}, 3),
			partRec(id, 3, []int32{1, 4}, []int32{1}, 1)),
		// A cluster default, a topic config, and a partition with eligible
		// leader replicas, a last known leader and a recovering leader.
		batch(configRec("", MinInsyncReplicas, str("2")), configRec("t", RetentionMs, str("60000")),
			elrChange(id, 2, leader(NoLeader), nil, []int32{1, 2}, []int32{3}, nil)),
		batch(elrChange(id, 3, leader(4), []int32{4}, nil, nil, recState(recovering))),
	}
	img := Empty()
	for i, b := range batches {
		var err error
		if img, err = Apply(img, uint64(i+1), 1, b); err != nil {
			tb.Fatalf("batch %d: %v", i+1, err)
		}
	}
	return img
}

func imageSnapshot(tb testing.TB, img *Image) []byte {
	tb.Helper()
	var buf bytes.Buffer
	if err := WriteSnapshot(&buf, img); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzApply feeds any raft entry to the FSM on top of a populated image.
// Whatever the bytes: no panic; the image applied to is never changed; a
// refused batch yields no image; an accepted one yields an image whose
// snapshot reads back to the same image.
func FuzzApply(f *testing.F) {
	base := fuzzBase(f)
	baseSnap := imageSnapshot(f, base)
	id := TopicID{0xf}
	leader := int32(2)
	for _, b := range []*keelpb.RecordBatch{
		batch(change(id, 0, &leader, []int32{2, 3}, nil)),
		batch(fence(1, 2), change(id, 0, &leader, []int32{2, 3}, nil)),
		batch(register(5, "b")),
		batch(topicRec("u", TopicID{0xe}, nil), partRec(TopicID{0xe}, 0, []int32{1}, []int32{1}, 1)),
		batch(&keelpb.Record{Record: &keelpb.Record_RemoveTopic{RemoveTopic: &keelpb.RemoveTopicRecord{TopicId: id[:]}}}),
		batch(epoch(2, 3)),
		batch(configRec("", UncleanLeaderElection, str("FALSE")), configRec("t", MinInsyncReplicas, nil)),
		batch(configRec("t", CleanupPolicy, str("compact"))),
		batch(elrChange(id, 2, &leader, []int32{2}, []int32{1}, []int32{}, nil)),
		batch(elrChange(id, 3, nil, nil, nil, nil, recState(keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERED))),
	} {
		data, err := EncodeBatch(b.Records...)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{EntryFormatV1})
	f.Add([]byte{EntryFormatV1, 0x0a, 0x02, 0x52, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeBatch(data)
		if err != nil {
			return
		}
		next, err := Apply(base, base.Offset+1, base.Term, b)
		if !bytes.Equal(imageSnapshot(t, base), baseSnap) {
			t.Fatal("Apply changed the image it was given")
		}
		if err != nil {
			if next != nil && next != base {
				t.Fatalf("a refused batch (%v) returned a new image", err)
			}
			return
		}
		snap := imageSnapshot(t, next)
		back, err := ReadSnapshot(bytes.NewReader(snap))
		if err != nil {
			t.Fatalf("the snapshot of an accepted image does not read back: %v", err)
		}
		if !bytes.Equal(imageSnapshot(t, back), snap) {
			t.Fatal("the snapshot of an accepted image reads back to another image")
		}
	})
}

// FuzzReadSnapshot decodes any bytes as a snapshot: no panic, and whatever
// ReadSnapshot accepts, VerifySnapshot accepts too and the image writes a
// snapshot that reads back to itself.
func FuzzReadSnapshot(f *testing.F) {
	snap := imageSnapshot(f, fuzzBase(f))
	f.Add(snap)
	f.Add(snap[:len(snap)/2])
	f.Add(snap[:16])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		img, err := ReadSnapshot(bytes.NewReader(data))
		if err != nil {
			return
		}
		if _, err := VerifySnapshot(bytes.NewReader(data)); err != nil {
			t.Fatalf("ReadSnapshot accepted what VerifySnapshot refuses: %v", err)
		}
		out := imageSnapshot(t, img)
		back, err := ReadSnapshot(bytes.NewReader(out))
		if err != nil || !bytes.Equal(imageSnapshot(t, back), out) {
			t.Fatalf("a read snapshot does not write back to itself: %v", err)
		}
	})
}
