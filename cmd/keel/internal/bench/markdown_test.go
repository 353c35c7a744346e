package bench

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestResult_JSONRoundTrip: what keel bench -o json prints reads back into
// the same Result, extras sorted by name.
func TestResult_JSONRoundTrip(t *testing.T) {
	want := newResult(ScenarioCreate, 1000000, 100, []time.Duration{11 * time.Second, 12 * time.Second},
		Figure{"records_per_s", 90900}, Figure{"commit_median_s", 11.0})
	data, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var got Result
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("%v in %s", err, data)
	}
	want.Extra = []Figure{{"commit_median_s", 11.0}, {"records_per_s", 90900}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
}

func TestWriteMarkdownRows(t *testing.T) {
	day := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	run := func(reps ...Report) string {
		var in bytes.Buffer
		for _, r := range reps {
			if err := json.NewEncoder(&in).Encode(r); err != nil {
				t.Fatal(err)
			}
		}
		reports, err := ReadReports(&in)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		if err := WriteMarkdownRows(&out, reports, day, "keel bench --scenarios failover|load"); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	for _, tc := range []struct {
		name    string
		reports []Report
		want    string
	}{
		{
			name: "one scenario per row, seconds at their scale",
			reports: []Report{{Scenarios: []Result{
				newResult(ScenarioFailover, 100000, 100, []time.Duration{329 * time.Millisecond, 625 * time.Millisecond, 300 * time.Millisecond}),
				newResult(ScenarioLoad, 1000000, 100, []time.Duration{2960 * time.Millisecond}),
			}}},
			want: "| `failover` | 100000 | 100 | 3 | 329.0ms | 625.0ms | — / — / — | — | 2026-12-02 | `keel bench --scenarios failover\\|load` |\n" +
				"| `load` | 1000000 | 100 | 1 | 2.960s | 2.960s | — / — / — | — | 2026-12-02 | `keel bench --scenarios failover\\|load` |\n",
		},
		{
			name: "the machine's figures: CPU by role, — for no broker processes; the gaps",
			reports: []Report{{Scenarios: []Result{
				newResult(ScenarioCreate, 1000000, 100, []time.Duration{5 * time.Second},
					Figure{"cpu_controllers_s", 12.345}, Figure{"cpu_bench_s", 9.5},
					Figure{"gap_max_ms", 48.04}, Figure{"gap_p99_ms", 3.21}, Figure{"gaps_over_10ms", 17}),
				newResult(ScenarioProduce, 6, 3, []time.Duration{20 * time.Millisecond},
					Figure{"cpu_controllers_s", 0.1}, Figure{"cpu_brokers_s", 14}, Figure{"cpu_bench_s", 6},
					Figure{"gap_max_ms", 9}, Figure{"gap_p99_ms", 0.25}, Figure{"gaps_over_10ms", 0}),
			}}},
			want: "| `create` | 1000000 | 100 | 1 | 5.000s | 5.000s | 12.35 / — / 9.50 | 48.0ms / 3.2ms / 17 | 2026-12-02 | `keel bench --scenarios failover\\|load` |\n" +
				"| `produce` | 6 | 3 | 1 | 20.0ms | 20.0ms | 0.10 / 14.00 / 6.00 | 9.0ms / 0.2ms / 0 | 2026-12-02 | `keel bench --scenarios failover\\|load` |\n",
		},
		{
			name: "reports concatenated make one table; skipped scenarios follow it",
			reports: []Report{
				{Scenarios: []Result{newResult(ScenarioHeartbeats, 0, 1000, []time.Duration{13900 * time.Microsecond})}},
				{Skipped: []Skipped{{Name: ScenarioCatchUp, Reason: "needs --brokers 3"}}},
			},
			want: "| `heartbeats` | 0 | 1000 | 1 | 13.9ms | 13.9ms | — / — / — | — | 2026-12-02 | `keel bench --scenarios failover\\|load` |\n" +
				"\nskipped `catch-up`: needs --brokers 3\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := run(tc.reports...); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestReadReports_Errors(t *testing.T) {
	for _, in := range []string{"", "not json", `{"scenarios":[{"name":"create","median_s":"fast"}]}`} {
		if _, err := ReadReports(strings.NewReader(in)); err == nil {
			t.Errorf("ReadReports(%q): no error", in)
		}
	}
}

func TestWriteMarkdownTargets(t *testing.T) {
	reports := []Report{{
		Targets: []TargetCheck{
			{Scenario: ScenarioCreate, Partitions: 1000000, Brokers: 100, Target: "applied by every broker in at most 6 s", Met: true},
			{Scenario: ScenarioBrokerCrash, Partitions: 1000000, Brokers: 100, Target: "under 0.8 s"},
		},
		IdleGapMaxMs: 2.5, IdleGapP99Ms: 0.125, IdleGapsOver10ms: 1,
	}}
	var out strings.Builder
	if err := WriteMarkdownTargets(&out, reports); err != nil {
		t.Fatal(err)
	}
	want := "| `create` | 1000000 | 100 | applied by every broker in at most 6 s | yes |\n" +
		"| `broker-crash` | 1000000 | 100 | under 0.8 s | no |\n" +
		"\nthe machine idle before the bench: scheduling gaps max 2.5ms, p99 0.12ms, 1 above 10 ms\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}
