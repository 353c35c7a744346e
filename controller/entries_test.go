package controller

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

func TestSplitRecords(t *testing.T) {
	topicID := []byte("0123456789abcdef")
	topic := &keelpb.Record{Record: &keelpb.Record_Topic{Topic: &keelpb.TopicRecord{Name: "t", TopicId: topicID}}}
	part := func(i int32) *keelpb.Record {
		return &keelpb.Record{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{
			TopicId: topicID, Partition: i, Replicas: []int32{1, 2, 3}, Isr: []int32{1, 2, 3}, Leader: 1}}}
	}
	chg := func(i int32) *keelpb.Record {
		leader := int32(2)
		return &keelpb.Record{Record: &keelpb.Record_PartitionChange{PartitionChange: &keelpb.PartitionChangeRecord{
			TopicId: topicID, Partition: i, Leader: &leader}}}
	}
	fence := &keelpb.Record{Record: &keelpb.Record_FenceBroker{FenceBroker: &keelpb.FenceBrokerRecord{BrokerId: 1, BrokerEpoch: 5}}}
	changeSize := recordSize(chg(1000))

	many := func(n int, f func(int32) *keelpb.Record) []*keelpb.Record {
		out := make([]*keelpb.Record, n)
		for i := range out {
			out[i] = f(int32(i + 1000))
		}
		return out
	}
	tests := []struct {
		name    string
		records []*keelpb.Record
		limit   int
		sizes   []int // records per entry
	}{
		{"fits in one", many(10, chg), 100 * changeSize, []int{10}},
		{"changes cut at the limit", many(10, chg), 4 * changeSize, []int{4, 4, 2}},
		{"a state record stays with the last changes", append(many(5, chg), fence), 4 * changeSize, []int{4, 2}},
		{"a topic is never cut", append([]*keelpb.Record{topic}, many(10, part)...), 3 * changeSize, []int{11}},
		{"changes after a topic start a new entry", append(append([]*keelpb.Record{topic}, many(3, part)...), many(2, chg)...),
			3 * changeSize, []int{4, 2}},
		{"one record larger than the limit", many(1, chg), 1, []int{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parts := splitRecords(tt.records, tt.limit)
			var got []int
			total := 0
			for _, p := range parts {
				got = append(got, len(p))
				total += len(p)
			}
			if len(got) != len(tt.sizes) {
				t.Fatalf("entries of %v records, want %v", got, tt.sizes)
			}
			for i := range got {
				if got[i] != tt.sizes[i] {
					t.Fatalf("entries of %v records, want %v", got, tt.sizes)
				}
			}
			if total != len(tt.records) {
				t.Fatalf("%d records out of %d", total, len(tt.records))
			}
		})
	}
}

// recordSize must match the encoder, or entries overshoot the limit.
func TestRecordSizeMatchesEncoding(t *testing.T) {
	leader := int32(7)
	recs := []*keelpb.Record{
		{Record: &keelpb.Record_PartitionChange{PartitionChange: &keelpb.PartitionChangeRecord{
			TopicId: make([]byte, 16), Partition: 300, Leader: &leader}}},
		{Record: &keelpb.Record_FenceBroker{FenceBroker: &keelpb.FenceBrokerRecord{BrokerId: 1, BrokerEpoch: 1 << 40}}},
	}
	want := 0
	for _, r := range recs {
		want += recordSize(r)
	}
	data, err := fsm.EncodeBatch(recs...)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(data) - 1; got != want || got != proto.Size(&keelpb.RecordBatch{Records: recs}) {
		t.Fatalf("encoded %d bytes, recordSize sums to %d", got, want)
	}
}
