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
			want: "| `failover` | 100000 | 100 | 3 | 329.0ms | 625.0ms | 2026-12-02 | `keel bench --scenarios failover\\|load` |\n" +
				"| `load` | 1000000 | 100 | 1 | 2.960s | 2.960s | 2026-12-02 | `keel bench --scenarios failover\\|load` |\n",
		},
		{
			name: "reports concatenated make one table; skipped scenarios follow it",
			reports: []Report{
				{Scenarios: []Result{newResult(ScenarioHeartbeats, 0, 1000, []time.Duration{13900 * time.Microsecond})}},
				{Skipped: []Skipped{{Name: ScenarioCatchUp, Reason: "needs --brokers 3"}}},
			},
			want: "| `heartbeats` | 0 | 1000 | 1 | 13.9ms | 13.9ms | 2026-12-02 | `keel bench --scenarios failover\\|load` |\n" +
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
