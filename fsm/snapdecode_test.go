package fsm

import (
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/proto/keelpb"
)

// decodeBoth decodes payload by hand and with proto.Unmarshal, and fails
// the test if the hand decoder accepts what Unmarshal refuses or reads it
// differently.
func decodeBoth(t *testing.T, payload []byte) {
	t.Helper()
	d := &recordDecoder{reuse: true}
	got, gotErr := d.decode(payload)
	want := &keelpb.Record{}
	wantErr := proto.Unmarshal(payload, want)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("%x: decode err %v, Unmarshal err %v", payload, gotErr, wantErr)
	}
	if gotErr == nil && !proto.Equal(got, want) {
		t.Fatalf("%x: decode %v, Unmarshal %v", payload, got, want)
	}
}

func randomInts(r *rand.Rand) []int32 {
	out := make([]int32, r.IntN(5))
	for i := range out {
		out[i] = int32(r.Uint32()) >> r.IntN(32)
	}
	return out
}

func TestRecordDecoder_AgreesWithUnmarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 2000 {
		pr := &keelpb.PartitionRecord{
			TopicId: make([]byte, r.IntN(20)), Partition: int32(r.Uint32()), Replicas: randomInts(r), Isr: randomInts(r),
			Leader: int32(r.Uint32()) >> r.IntN(32), LeaderEpoch: int32(r.IntN(1000)), PartitionEpoch: int32(r.IntN(1000)),
			AddingReplicas: randomInts(r), RemovingReplicas: randomInts(r),
			EligibleLeaderReplicas: randomInts(r), LastKnownElr: randomInts(r),
			LeaderRecoveryState: keelpb.LeaderRecoveryState(r.IntN(3)),
		}
		payload, err := marshal.Marshal(&keelpb.Record{Record: &keelpb.Record_Partition{Partition: pr}})
		if err != nil {
			t.Fatal(err)
		}
		decodeBoth(t, payload)
		// Damaged: cut short, or one byte changed.
		decodeBoth(t, payload[:r.IntN(len(payload))])
		bad := append([]byte(nil), payload...)
		bad[r.IntN(len(bad))] ^= byte(1 + r.IntN(255))
		decodeBoth(t, bad)
	}
	// Unpacked lists, an unknown field, another record type, two partition
	// fields (which Unmarshal merges).
	inner := protowire.AppendTag(nil, 3, protowire.VarintType)
	inner = protowire.AppendVarint(inner, 7)
	inner = protowire.AppendTag(inner, 3, protowire.VarintType)
	inner = protowire.AppendVarint(inner, 8)
	unknown := protowire.AppendTag(append([]byte(nil), inner...), 99, protowire.VarintType)
	unknown = protowire.AppendVarint(unknown, 1)
	wrap := func(b []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, recordPartitionField, protowire.BytesType), b)
	}
	for _, payload := range [][]byte{
		wrap(inner), wrap(unknown), append(wrap(inner), wrap(inner)...), nil,
		protowire.AppendBytes(protowire.AppendTag(nil, 9, protowire.BytesType), nil),
	} {
		decodeBoth(t, payload)
	}
}
