package bench

import (
	"reflect"
	"testing"
	"time"
)

func TestCheckTargets(t *testing.T) {
	s := time.Second
	ms := time.Millisecond
	create := func(p int, d time.Duration, figs ...Figure) Result {
		return newResult(ScenarioCreate, p, 100, []time.Duration{d}, figs...)
	}
	for _, tc := range []struct {
		name string
		res  []Result
		want []TargetCheck
	}{
		{
			name: "create at 1M and 100 brokers: both targets",
			res:  []Result{create(1_000_000, 5900*ms, Figure{"raft_one_at_a_time_ratio", 0.9}, Figure{"raft_pipelined_ratio", 0.1})},
			want: []TargetCheck{
				{ScenarioCreate, 1_000_000, 100, "applied by every broker in at most 6 s", true},
				{ScenarioCreate, 1_000_000, 100, "at least raw raft's rate one entry at a time (raft_one_at_a_time_ratio 1 or more)", false},
			},
		},
		{
			name: "create at another size: only the ratio",
			res:  []Result{create(100_000, 9*s, Figure{"raft_one_at_a_time_ratio", 1.2})},
			want: []TargetCheck{{ScenarioCreate, 100_000, 100, "at least raw raft's rate one entry at a time (raft_one_at_a_time_ratio 1 or more)", true}},
		},
		{
			name: "create without a ceiling measured: the ratio is left out",
			res:  []Result{create(100_000, 9*s)},
		},
		{
			name: "broker-crash under 0.8 s at 1M only; failover's median and max",
			res: []Result{
				newResult(ScenarioBrokerCrash, 1_000_000, 100, []time.Duration{800 * ms}),
				newResult(ScenarioBrokerCrash, 100_000, 100, []time.Duration{300 * ms}),
				newResult(ScenarioFailover, 100_000, 100, []time.Duration{300 * ms, 400 * ms, 1100 * ms}),
			},
			want: []TargetCheck{
				{ScenarioBrokerCrash, 1_000_000, 100, "under 0.8 s", false},
				{ScenarioFailover, 100_000, 100, "median under 0.5 s, max under 1 s", false},
			},
		},
		{
			name: "produce: the ceiling ratio and the p99",
			res:  []Result{newResult(ScenarioProduce, 6, 3, []time.Duration{24 * ms}, Figure{"acks_all_ceiling_ratio", 0.8})},
			want: []TargetCheck{
				{ScenarioProduce, 6, 3, "acks=all at least 0.8 of the RF-3 ceiling", true},
				{ScenarioProduce, 6, 3, "client p99 at half the peak under 25 ms", true},
			},
		},
		{
			name: "steady: no leader change",
			res:  []Result{newResult(ScenarioSteady, 1_000_000, 100, []time.Duration{30 * ms}, Figure{"leader_changes", 1})},
			want: []TargetCheck{{ScenarioSteady, 1_000_000, 100, "no leader change", false}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckTargets(&Report{Scenarios: tc.res})
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
