package bench

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestConsumeGroupResult(t *testing.T) {
	s := time.Second
	runs := []consumeGroupRun{
		{records: 1000, ceiling: consumed{1000, 1}, group: consumed{1000, 2}, firstRecord: 3 * s, join: 2 * s, leave: 1 * s, duplicates: 1},
		{records: 1000, ceiling: consumed{1000, 2}, group: consumed{1000, 4}, firstRecord: 1 * s, join: 1 * s, leave: 3 * s},
		{records: 1000, ceiling: consumed{1000, 1}, group: consumed{1000, 1}, firstRecord: 2 * s, join: 5 * s, leave: 2 * s},
	}
	res := consumeGroupResult(DataConfig{Partitions: 6, GroupRecords: 1000}, runs)
	if res.Name != ScenarioConsumeGroup || res.Runs != 3 || res.MedianS != 2 || res.MaxS != 5 || res.Partitions != 6 || res.Brokers != 3 {
		t.Fatalf("result %+v", res)
	}
	for name, want := range map[string]float64{
		"records": 1000, "members": 3,
		"group_records_per_s": 500, "one_consumer_records_per_s": 1000, "one_consumer_ratio": 0.5, // 0.5, 0.5, 1
		"first_record_s": 2, "leave_rebalance_s": 2, "leave_rebalance_max_s": 3, "duplicates": 1,
	} {
		if v, ok := res.Get(name); !ok || math.Abs(v-want) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}

// TestBenchGroup_Balanced: a rebalance is over when every partition has
// exactly one owner, and after a join when the newest member owns some.
func TestBenchGroup_Balanced(t *testing.T) {
	owned := func(ps ...int32) *benchMember {
		m := &benchMember{owned: map[int32]bool{}}
		for _, p := range ps {
			m.owned[p] = true
		}
		return m
	}
	for _, tc := range []struct {
		name    string
		members []*benchMember
		newest  bool
		want    bool
	}{
		{"OneOwnerEach", []*benchMember{owned(0, 1), owned(2), owned(3)}, false, true},
		{"PartitionUnowned", []*benchMember{owned(0, 1), owned(2)}, false, false},
		{"PartitionOwnedTwice", []*benchMember{owned(0, 1), owned(1, 2), owned(3)}, false, false},
		{"JoinerOwnsNothingYet", []*benchMember{owned(0, 1), owned(2), owned(3), owned()}, true, false},
		{"JoinerOwnsSome", []*benchMember{owned(0), owned(2), owned(3), owned(1)}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newBenchGroup(nil, "t", "g", map[int32]int64{0: 1, 1: 1, 2: 1, 3: 1})
			g.members = tc.members
			ctx, cancel := context.WithCancel(context.Background())
			if !tc.want {
				cancel() // poll.Wait checks once, then gives up
			}
			defer cancel()
			err := g.waitBalanced(ctx, "balanced", tc.newest)
			if (err == nil) != tc.want {
				t.Fatalf("waitBalanced = %v, want balanced %v", err, tc.want)
			}
		})
	}
}

// TestBenchGroup_CountsReads: every record read once counts once; a
// second read is a duplicate.
func TestBenchGroup_CountsReads(t *testing.T) {
	g := newBenchGroup(nil, "t", "g", map[int32]int64{0: 2, 1: 1})
	now := time.Now()
	for _, r := range []struct {
		p   int32
		off int64
	}{{0, 0}, {0, 1}, {1, 0}, {0, 1}, {1, 5}} {
		g.note(&kgo.Record{Partition: r.p, Offset: r.off}, now)
	}
	if g.read != 3 || g.duplicates() != 1 {
		t.Fatalf("read %d, duplicates %d; want 3 and 1", g.read, g.duplicates())
	}
	if err := g.waitConsumed(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
}

func TestDataConfig_CheckGroupRecords(t *testing.T) {
	d := DataConfig{}
	if err := d.check(); err != nil || d.GroupRecords != DefaultGroupRecords {
		t.Fatalf("default: %v, %d", err, d.GroupRecords)
	}
	d = DataConfig{GroupRecords: -1}
	if err := d.check(); err == nil || !strings.Contains(err.Error(), "--group-records -1") {
		t.Fatalf("err %v", err)
	}
}
