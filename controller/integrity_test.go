package controller

import (
	"slices"
	"strings"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

func TestJudgeImages(t *testing.T) {
	a, b, c := []byte("digest-a"), []byte("digest-b"), []byte("digest-c")
	tests := []struct {
		name       string
		voters     []int32
		answers    map[int32]imageAnswer
		majority   []byte
		agree      []int32
		differ     []int32
		unknown    []int32
		noMajority bool
	}{
		{
			name:     "all agree",
			voters:   []int32{1, 2, 3},
			answers:  map[int32]imageAnswer{1: {sum: a}, 2: {sum: a}, 3: {sum: a}},
			majority: a, agree: []int32{1, 2, 3},
		},
		{
			name:     "one follower differs",
			voters:   []int32{1, 2, 3},
			answers:  map[int32]imageAnswer{1: {sum: a}, 2: {sum: a}, 3: {sum: b}},
			majority: a, agree: []int32{1, 2}, differ: []int32{3},
		},
		{
			// The asking node (1) is the odd one out: it stops itself.
			name:     "the asker differs",
			voters:   []int32{1, 2, 3},
			answers:  map[int32]imageAnswer{1: {sum: b}, 2: {sum: a}, 3: {sum: a}},
			majority: a, agree: []int32{2, 3}, differ: []int32{1},
		},
		{
			// Two of three answered and disagree: neither is a majority.
			name:       "two answers that differ",
			voters:     []int32{1, 2, 3},
			answers:    map[int32]imageAnswer{1: {sum: a}, 2: {sum: b}, 3: {why: "did not answer"}},
			differ:     []int32{1, 2},
			unknown:    []int32{3},
			noMajority: true,
		},
		{
			name:    "two answers that agree, one unknown",
			voters:  []int32{1, 2, 3},
			answers: map[int32]imageAnswer{1: {sum: a}, 2: {sum: a}},
			// Two of three are a majority.
			majority: a, agree: []int32{1, 2}, unknown: []int32{3},
		},
		{
			// Two of five agree: no majority, but nothing differs.
			name:    "too few answers to judge",
			voters:  []int32{1, 2, 3, 4, 5},
			answers: map[int32]imageAnswer{1: {sum: a}, 2: {sum: a}},
			agree:   []int32{1, 2}, unknown: []int32{3, 4, 5},
		},
		{
			name:       "three digests among five",
			voters:     []int32{1, 2, 3, 4, 5},
			answers:    map[int32]imageAnswer{1: {sum: a}, 2: {sum: a}, 3: {sum: b}, 4: {sum: b}, 5: {sum: c}},
			differ:     []int32{1, 2, 3, 4, 5},
			noMajority: true,
		},
		{
			name:     "a majority of five, two differing",
			voters:   []int32{1, 2, 3, 4, 5},
			answers:  map[int32]imageAnswer{1: {sum: a}, 2: {sum: a}, 3: {sum: a}, 4: {sum: b}, 5: {sum: c}},
			majority: a, agree: []int32{1, 2, 3}, differ: []int32{4, 5},
		},
		{
			// A non-voter's answer (a node being removed) counts for nothing.
			name:     "an answer from outside the voters",
			voters:   []int32{1, 2, 3},
			answers:  map[int32]imageAnswer{1: {sum: a}, 2: {sum: a}, 3: {sum: a}, 9: {sum: b}},
			majority: a, agree: []int32{1, 2, 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := judgeImages(tt.voters, tt.answers)
			if string(v.majority) != string(tt.majority) || !slices.Equal(v.agree, tt.agree) || !slices.Equal(v.differ, tt.differ) ||
				!slices.Equal(v.unknown, tt.unknown) || v.noMajority != tt.noMajority {
				t.Errorf("judgeImages = majority %q agree %v differ %v unknown %v noMajority %v; want %q %v %v %v %v",
					v.majority, v.agree, v.differ, v.unknown, v.noMajority, tt.majority, tt.agree, tt.differ, tt.unknown, tt.noMajority)
			}
		})
	}
}

// A voter told the majority's digest stops acting on its image only when
// its own digest at that index is another.
func TestJudgeOwnImage(t *testing.T) {
	f := fsm.New()
	data, err := fsm.EncodeBatch(&keelpb.Record{Record: &keelpb.Record_ControllerEpoch{ControllerEpoch: &keelpb.ControllerEpochRecord{Epoch: 1, LeaderId: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	f.ApplyEntry(4, 1, data)
	c := New(Config{NodeID: 2}, NewAppliedLog(f, 0, 0))
	own, err := f.DigestAt(4)
	if err != nil {
		t.Fatal(err)
	}
	if c.JudgeOwnImage(4, 0, own.Sum[:], "controllers 1, 3 of 3 hold it", 1) || c.Diverged() != nil {
		t.Fatal("a voter holding the majority's digest stopped")
	}
	if c.JudgeOwnImage(9, 0, make([]byte, 32), "controllers 1, 3 of 3 hold it", 1) || c.Diverged() != nil {
		t.Fatal("a voter without a digest at the index stopped")
	}
	if c.JudgeOwnImage(4, 3, make([]byte, 32), "controllers 1, 3 of 3 hold it", 1) || c.Diverged() != nil {
		t.Fatal("a voter whose chain started elsewhere stopped")
	}
	if !c.JudgeOwnImage(4, 0, make([]byte, 32), "controllers 1, 3 of 3 hold it", 1) {
		t.Fatal("a voter whose digest differs from the majority's did not stop")
	}
	d := c.Diverged()
	if d == nil || d.Index != 4 || !strings.Contains(d.Reason, "differs from the one a majority of the voters hold (controllers 1, 3 of 3 hold it; compared by controller 1)") {
		t.Fatalf("divergence = %+v", d)
	}
}
