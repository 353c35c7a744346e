package controller

import (
	"strings"
	"testing"
)

// TestMarginCost: the one line that says what adding a voter that is down
// costs each quorum size, against what it tolerates now.
func TestMarginCost(t *testing.T) {
	for _, tt := range []struct {
		voters int
		want   string
	}{
		{1, "a 2-voter quorum needs 2, so while it is down the quorum could not commit at all"},
		{2, "a 3-voter quorum needs 2, so while it is down the other 2 would tolerate no failure, where the 2 voters now tolerate no failure"},
		{3, "a 4-voter quorum needs 3, so while it is down the other 3 would tolerate no failure, where the 3 voters now tolerate 1 failure"},
		{4, "a 5-voter quorum needs 3, so while it is down the other 4 would tolerate 1 failure, where the 4 voters now tolerate 1 failure"},
		{5, "a 6-voter quorum needs 4, so while it is down the other 5 would tolerate 1 failure, where the 5 voters now tolerate 2 failures"},
	} {
		if got := marginCost(tt.voters); got != tt.want {
			t.Errorf("marginCost(%d) = %q\nwant %q", tt.voters, got, tt.want)
		}
		if strings.Contains(marginCost(tt.voters), "\n") {
			t.Errorf("marginCost(%d) is not one line", tt.voters)
		}
	}
}

// TestCaughtUpTo: a log within voterLagBound of the commit index has
// caught up enough to vote at once.
func TestCaughtUpTo(t *testing.T) {
	for _, tt := range []struct {
		last, commit uint64
		want         bool
	}{
		{0, 0, true},
		{100, 100, true},
		{120, 100, true}, // a follower may hold entries not yet committed
		{0, voterLagBound, true},
		{0, voterLagBound + 1, false},
		{1000, 1000 + voterLagBound + 1, false},
	} {
		if got := caughtUpTo(tt.last, tt.commit); got != tt.want {
			t.Errorf("caughtUpTo(%d, %d) = %v, want %v", tt.last, tt.commit, got, tt.want)
		}
	}
}
