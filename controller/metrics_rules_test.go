package controller

import (
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

func TestMetrics_CountImage(t *testing.T) {
	fence := func(id int32, epoch int64) []*keelpb.Record { return []*keelpb.Record{fenceRec(id, epoch)} }
	tests := []struct {
		name string
		img  func(t *testing.T) *fsm.Image
		want imageCounts
	}{
		{
			name: "empty cluster",
			img:  func(*testing.T) *fsm.Image { return fsm.Empty() },
			want: imageCounts{},
		},
		{
			// Brokers 1-3 active, 4 fenced; both partitions led by their
			// first replica.
			name: "balanced",
			img:  func(t *testing.T) *fsm.Image { return fixture(t, false) },
			want: imageCounts{topics: 1, partitions: 2, fencedBrokers: 1, activeBrokers: 3},
		},
		{
			name: "a leader that is not the first replica",
			img: func(t *testing.T) *fsm.Image {
				return fixture(t, false, []*keelpb.Record{change(0, leaderPtr(2), nil)})
			},
			want: imageCounts{imbalanced: 1, topics: 1, partitions: 2, fencedBrokers: 1, activeBrokers: 3},
		},
		{
			// Offline, not imbalanced: imbalance counts partitions with a leader.
			name: "a partition without a leader",
			img: func(t *testing.T) *fsm.Image {
				return fixture(t, false, []*keelpb.Record{change(1, leaderPtr(fsm.NoLeader), nil)})
			},
			want: imageCounts{offline: 1, topics: 1, partitions: 2, fencedBrokers: 1, activeBrokers: 3},
		},
		{
			name: "one of each, and a broker fenced",
			img: func(t *testing.T) *fsm.Image {
				return fixture(t, false,
					[]*keelpb.Record{change(0, leaderPtr(3), nil), change(1, leaderPtr(fsm.NoLeader), nil)},
					fence(2, 3))
			},
			want: imageCounts{offline: 1, imbalanced: 1, topics: 1, partitions: 2, fencedBrokers: 2, activeBrokers: 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := countImage(tt.img(t)); got != tt.want {
				t.Errorf("countImage = %+v, want %+v", got, tt.want)
			}
		})
	}
}
