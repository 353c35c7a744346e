package bench

import (
	"fmt"
	"slices"
	"strings"
)

// Scenario names, in the order they run.
const (
	ScenarioCreate             = "create"
	ScenarioHeartbeats         = "heartbeats"
	ScenarioBrokerFailure      = "broker-failure"
	ScenarioBrokerCrash        = "broker-crash"
	ScenarioControlledShutdown = "controlled-shutdown"
	ScenarioFailover           = "failover"
	ScenarioLoad               = "load"
	// ScenarioSteady runs only when named: it takes SteadyDuration.
	ScenarioSteady = "steady"
	// The data path's scenarios (scenario_produce.go and its neighbours)
	// run only when named, on a cluster of their own with real brokers.
	ScenarioProduce     = "produce"
	ScenarioLeaderCrash = "leader-crash"
	ScenarioCatchUp     = "catch-up"
	// ScenarioConsumeGroup is the data path through a consumer group
	// (scenario_group.go).
	ScenarioConsumeGroup = "consume-group"
)

// AllScenarios lists every scenario in the order they run: the partitions
// are created first, the scenarios that kill controllers come last.
var AllScenarios = []string{
	ScenarioCreate, ScenarioHeartbeats, ScenarioBrokerFailure, ScenarioBrokerCrash,
	ScenarioControlledShutdown, ScenarioFailover, ScenarioLoad,
}

// optionalScenarios run only when named, after the others.
var optionalScenarios = []string{ScenarioSteady, ScenarioProduce, ScenarioLeaderCrash, ScenarioCatchUp, ScenarioConsumeGroup}

// killsControllers: scenarios that kill and restart controller processes,
// which a bench against a running quorum (--controllers) cannot do.
var killsControllers = map[string]bool{ScenarioFailover: true, ScenarioLoad: true}

// ParseScenarios reads --scenarios: a comma-separated list of names, or
// "all" (also the meaning of an empty list). It returns the scenarios in run
// order, each once, and names an unknown one.
func ParseScenarios(s string) ([]string, error) {
	want := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		switch {
		case f == "":
		case f == "all":
			for _, n := range AllScenarios {
				want[n] = true
			}
		case slices.Contains(AllScenarios, f), slices.Contains(optionalScenarios, f):
			want[f] = true
		default:
			return nil, fmt.Errorf("--scenarios: unknown scenario %q (want all or some of %s)", f, strings.Join(append(slices.Clone(AllScenarios), optionalScenarios...), ","))
		}
	}
	if len(want) == 0 {
		return slices.Clone(AllScenarios), nil
	}
	var out []string
	for _, n := range append(slices.Clone(AllScenarios), optionalScenarios...) {
		if want[n] {
			out = append(out, n)
		}
	}
	return out, nil
}

// measures says what each scenario's median_s and max_s are.
var measures = map[string]string{
	ScenarioCreate:             "until every broker has the partitions (from the first request)",
	ScenarioHeartbeats:         "heartbeat latency p99 (per run)",
	ScenarioBrokerFailure:      "from the FenceBroker commit until every live broker has the new leaders",
	ScenarioBrokerCrash:        "kill -9 of a broker until every live broker has the new leaders",
	ScenarioControlledShutdown: "until the controller lets the broker exit",
	ScenarioFailover:           "kill -9 of the active controller to a new active controller",
	ScenarioLoad:               "restart of every controller from a snapshot until ready",
	ScenarioSteady:             "write latency p99 under steady load (per run); leader_changes must be 0",
	ScenarioProduce:            "acks=all produce latency p99 at half the acks=all peak rate (per run)",
	ScenarioLeaderCrash:        "kill -9 of a partition's leader under an acks=all producer, to the first write acknowledged by the new leader",
	ScenarioCatchUp:            "restart of a follower that missed --catch-up-bytes, until it is back in every ISR",
	ScenarioConsumeGroup:       "a 4th member's start until every partition is assigned again, one owner each",
}
