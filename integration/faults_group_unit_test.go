package integration

import (
	"strings"
	"testing"
	"time"
)

// The consumer group's checks (faults_data_group_test.go), on histories
// built by hand: each must accept what a correct coordinator may answer
// and catch what it must not.

func TestCommitRegressions(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	commit := func(p int32, off int64, call, ret int) commitObs {
		return commitObs{topic: "t", partition: p, offset: off, call: ms(call), ret: ms(ret), source: "member 1's commit"}
	}
	fetch := func(p int32, off int64, call, ret int) commitObs {
		return commitObs{topic: "t", partition: p, offset: off, call: ms(call), ret: ms(ret), source: "OffsetFetch"}
	}
	tests := []struct {
		name string
		obs  []commitObs
		want []string // what each violation names, in order
	}{
		{"commits and fetches that only rise", []commitObs{commit(0, 10, 0, 5), fetch(0, 10, 10, 15), commit(0, 20, 20, 25), fetch(0, 20, 30, 35)}, nil},
		{"the same offset again", []commitObs{commit(0, 10, 0, 5), commit(0, 10, 10, 15), fetch(0, 10, 20, 25)}, nil},
		{"a fetch below an acknowledged commit", []commitObs{commit(0, 20, 0, 5), fetch(0, 10, 10, 15)},
			[]string{"t partition 0: the committed offset went backwards: 10 (OffsetFetch, 10ms to 15ms) after 20 (member 1's commit, 0s to 5ms)"}},
		{"the first regression is named", []commitObs{commit(0, 20, 0, 5), fetch(0, 12, 30, 35), fetch(0, 10, 10, 15)},
			[]string{"10 (OffsetFetch, 10ms to 15ms) after 20 (member 1's commit, 0s to 5ms); and 1 more"}},
		{"a commit below a fetch", []commitObs{fetch(0, 20, 0, 5), commit(0, 10, 10, 15)}, []string{"10 (member 1's commit"}},
		{"no offset after a commit", []commitObs{commit(0, 20, 0, 5), fetch(0, -1, 10, 15)}, []string{"-1 (OffsetFetch"}},
		{"no offset before any commit", []commitObs{fetch(0, -1, 0, 5), commit(0, 20, 10, 15)}, nil},
		{"a fetch below an earlier fetch", []commitObs{fetch(0, 20, 0, 5), fetch(0, 19, 10, 15)}, []string{"19 (OffsetFetch"}},
		// A fetch that began before the commit was acknowledged may see
		// the offset before it.
		{"a fetch concurrent with a commit", []commitObs{commit(0, 20, 0, 50), fetch(0, 10, 10, 15)}, nil},
		{"a fetch begun just before the commit returned", []commitObs{commit(0, 20, 0, 15), fetch(0, 10, 14, 30)}, nil},
		{"partitions are independent", []commitObs{commit(0, 20, 0, 5), fetch(1, 10, 10, 15)}, nil},
		{"topics are independent", []commitObs{commit(0, 20, 0, 5), {topic: "u", partition: 0, offset: 10, call: ms(10), ret: ms(15), source: "OffsetFetch"}}, nil},
		// The highest offset seen before counts, not the last one.
		{"below the highest, above the last", []commitObs{commit(0, 30, 0, 5), fetch(0, 30, 6, 8), commit(0, 31, 10, 40), fetch(0, 20, 9, 12), fetch(0, 25, 50, 55)},
			[]string{"20 (OffsetFetch, 9ms to 12ms) after 30 (member 1's commit, 0s to 5ms); and 1 more"}},
		{"one message for each partition", []commitObs{commit(0, 30, 0, 5), fetch(0, 20, 10, 15), commit(1, 30, 0, 5), fetch(1, 20, 10, 15)},
			[]string{"t partition 0: ", "t partition 1: "}},
		{"in any order of the input", []commitObs{fetch(0, 5, 100, 110), commit(0, 10, 0, 5)}, []string{"5 (OffsetFetch, 100ms to 110ms) after 10"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := commitRegressions(tt.obs)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d violations, want %d: %q", len(got), len(tt.want), got)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("violation %d: %q does not say %q", i, got[i], w)
				}
			}
		})
	}
}

func TestGroupMissed(t *testing.T) {
	acked := []ackedRecord{{partition: 0, offset: 0, value: "p0-0"}, {partition: 0, offset: 1, value: "p0-1"}, {partition: 1, offset: 0, value: "p1-0"}}
	tests := []struct {
		name string
		seen map[int32]map[int64]string
		want []string
	}{
		{"every acknowledged record consumed", map[int32]map[int64]string{0: {0: "p0-0", 1: "p0-1"}, 1: {0: "p1-0"}}, nil},
		{"records beyond the acknowledged ones", map[int32]map[int64]string{0: {0: "p0-0", 1: "p0-1", 2: "unacked"}, 1: {0: "p1-0"}}, nil},
		{"one missed", map[int32]map[int64]string{0: {0: "p0-0"}, 1: {0: "p1-0"}}, []string{`t partition 0 offset 1: "p0-1" was acknowledged, and the group never consumed it`}},
		{"a partition never read", map[int32]map[int64]string{0: {0: "p0-0", 1: "p0-1"}}, []string{"t partition 1 offset 0"}},
		{"another value at the offset", map[int32]map[int64]string{0: {0: "p0-0", 1: "other"}, 1: {0: "p1-0"}}, []string{`the group consumed "other" there`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := groupMissed("t", acked, tt.seen)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d violations, want %d: %q", len(got), len(tt.want), got)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("violation %d: %q does not say %q", i, got[i], w)
				}
			}
		})
	}
}
