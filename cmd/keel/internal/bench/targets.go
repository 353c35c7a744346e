package bench

// target is a goal docs/benchmarks.md holds a scenario to, checked on the
// scenario's figures of the same run.
type target struct {
	scenario string
	// partitions and brokers, if above 0, are the only size the target
	// is for.
	partitions, brokers int
	text                string
	// met says whether the figures meet it; known is false when a figure
	// it needs is missing (a ceiling not measured).
	met func(Result) (met, known bool)
}

// targets are the scenarios' goals (issue 31's and the earlier ones). The
// retired one, create at 0.5 of pipelined raw raft, is gone: raw raft
// applies, decodes and pushes nothing, while three controllers and the
// simulated brokers share the machine; raft_pipelined_ratio stays as a
// figure for reference.
var targets = []target{
	{scenario: ScenarioCreate, partitions: 1_000_000, brokers: 100, text: "applied by every broker in at most 6 s",
		met: func(r Result) (bool, bool) { return r.MedianS <= 6, true }},
	{scenario: ScenarioCreate, text: "at least raw raft's rate one entry at a time (raft_one_at_a_time_ratio 1 or more)",
		met: func(r Result) (bool, bool) { return figureAtLeast(r, "raft_one_at_a_time_ratio", 1) }},
	{scenario: ScenarioBrokerCrash, partitions: 1_000_000, text: "under 0.8 s",
		met: func(r Result) (bool, bool) { return r.MedianS < 0.8, true }},
	{scenario: ScenarioBrokerFailure, text: "under 1 s", met: medianUnder(1)},
	{scenario: ScenarioControlledShutdown, text: "under 1 s", met: medianUnder(1)},
	{scenario: ScenarioFailover, text: "median under 0.5 s, max under 1 s",
		met: func(r Result) (bool, bool) { return r.MedianS < 0.5 && r.MaxS < 1, true }},
	{scenario: ScenarioLoad, text: "under 5 s", met: medianUnder(5)},
	{scenario: ScenarioHeartbeats, text: "p99 under 50 ms", met: medianUnder(0.05)},
	{scenario: ScenarioSteady, text: "no leader change",
		met: func(r Result) (bool, bool) {
			v, ok := r.Get("leader_changes")
			return v == 0, ok
		}},
	{scenario: ScenarioProduce, text: "acks=all at least 0.8 of the RF-3 ceiling",
		met: func(r Result) (bool, bool) { return figureAtLeast(r, "acks_all_ceiling_ratio", 0.8) }},
	{scenario: ScenarioProduce, text: "client p99 at half the peak under 25 ms", met: medianUnder(0.025)},
}

func medianUnder(s float64) func(Result) (bool, bool) {
	return func(r Result) (bool, bool) { return r.MedianS < s, true }
}

func figureAtLeast(r Result, name string, least float64) (met, known bool) {
	v, ok := r.Get(name)
	return ok && v >= least, ok
}

// TargetCheck is a target checked against a scenario's figures.
type TargetCheck struct {
	Scenario   string `json:"scenario"`
	Partitions int    `json:"partitions"`
	Brokers    int    `json:"brokers"`
	Target     string `json:"target"`
	Met        bool   `json:"met"`
}

// CheckTargets checks every target that applies to a scenario of the
// report, in the scenarios' order; one whose figure is missing is left
// out.
func CheckTargets(r *Report) []TargetCheck {
	var out []TargetCheck
	for _, s := range r.Scenarios {
		for _, t := range targets {
			if t.scenario != s.Name || (t.partitions > 0 && t.partitions != s.Partitions) || (t.brokers > 0 && t.brokers != s.Brokers) {
				continue
			}
			if met, known := t.met(s); known {
				out = append(out, TargetCheck{Scenario: s.Name, Partitions: s.Partitions, Brokers: s.Brokers, Target: t.text, Met: met})
			}
		}
	}
	return out
}
