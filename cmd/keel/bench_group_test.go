package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestBenchRefusesBadGroupFlags(t *testing.T) {
	_, _, err := runBench(t, context.Background(), "bench", "--scenarios", "consume-group", "--group-records", "-1")
	if err == nil || !strings.Contains(err.Error(), "--group-records -1") {
		t.Fatalf("err = %v, want one with --group-records -1", err)
	}
}

// TestBenchConsumeGroupEndToEnd runs consume-group, tiny, against real
// controller and broker processes (this test binary as keel) and checks
// the JSON it prints: so that it cannot rot.
func TestBenchConsumeGroupEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster with brokers")
	}
	t.Setenv(asKeelEnv, "1")
	t.Setenv("TMPDIR", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	out, stderr, err := runBench(t, ctx, "bench", "--scenarios", "consume-group", "--runs", "1",
		"--group-records", "2000", "--produce-partitions", "4", "--producers", "1", "-o", "json")
	if err != nil {
		t.Fatalf("keel bench: %v\nstderr:\n%s", err, stderr)
	}
	var report struct {
		Scenarios []map[string]any `json:"scenarios"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil || len(report.Scenarios) != 1 {
		t.Fatalf("%v in %s", err, out)
	}
	s := report.Scenarios[0]
	if s["name"] != "consume-group" || s["runs"] != float64(1) || s["partitions"] != float64(4) {
		t.Fatalf("scenario %v", s)
	}
	for _, name := range []string{"median_s", "group_records_per_s", "one_consumer_records_per_s", "one_consumer_ratio",
		"first_record_s", "leave_rebalance_s"} {
		if v, ok := s[name].(float64); !ok || v <= 0 {
			t.Errorf("%s = %v, want above 0", name, s[name])
		}
	}
	if s["records"] != float64(2000) || s["members"] != float64(3) || s["duplicates"] != float64(0) {
		t.Errorf("records %v, members %v, duplicates %v; want 2000, 3, 0", s["records"], s["members"], s["duplicates"])
	}
}
