package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

func TestBenchRefusesBadDataFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--scenarios", "produce", "--record-size", "-5"}, "--record-size -5"},
		{[]string{"bench", "--scenarios", "produce", "--producers", "-1"}, "--producers -1"},
		{[]string{"bench", "--scenarios", "catch-up", "--catch-up-bytes", "100"}, "--catch-up-bytes 100"},
		{[]string{"bench", "--scenarios", "produce", "--produce-duration", "1ms"}, "--produce-duration 1ms"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, _, err := runBench(t, context.Background(), tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one with %q", err, tc.want)
			}
		})
	}
}

// TestBenchDataPathEndToEnd runs the data path's three scenarios, tiny,
// against real controller and broker processes (this test binary as keel)
// and checks the JSON they print: so that they cannot rot.
func TestBenchDataPathEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster with brokers and waits out a broker session")
	}
	t.Setenv(asKeelEnv, "1")
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // the bench's data dir goes here, and must be gone after
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	start := time.Now()
	out, stderr, err := runBench(t, ctx, "bench", "--scenarios", "produce,leader-crash,catch-up", "--runs", "1",
		"--produce-duration", "1s", "--producers", "2", "--produce-partitions", "2", "--catch-up-bytes", "2097152", "-o", "json")
	if err != nil {
		t.Fatalf("keel bench: %v\nstderr:\n%s", err, stderr)
	}
	t.Logf("bench took %v\n%s", time.Since(start).Round(time.Millisecond), out)

	var report struct {
		Scenarios []map[string]any `json:"scenarios"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	byName := map[string]map[string]any{}
	var names []string
	for _, s := range report.Scenarios {
		name := s["name"].(string)
		names = append(names, name)
		byName[name] = s
		median, _ := s["median_s"].(float64)
		maxS, _ := s["max_s"].(float64)
		if median <= 0 || maxS < median || s["runs"] != float64(1) || s["brokers"] != float64(3) {
			t.Errorf("%s: median_s %v, max_s %v, runs %v, brokers %v", name, s["median_s"], s["max_s"], s["runs"], s["brokers"])
		}
	}
	if got := strings.Join(names, ","); got != "produce,leader-crash,catch-up" {
		t.Fatalf("scenarios %s, want produce,leader-crash,catch-up", got)
	}
	figure := func(scenario, name string) float64 {
		t.Helper()
		v, ok := byName[scenario][name].(float64)
		if !ok {
			t.Errorf("%s lacks %s", scenario, name)
		}
		return v
	}
	for _, name := range []string{"acks_1_mb_per_s", "acks_1_records_per_s", "acks_all_mb_per_s", "acks_all_records_per_s",
		"append_mb_per_s", "loopback_mb_per_s", "rf3_ceiling_mb_per_s", "acks_all_ceiling_ratio", "acks_1_ceiling_ratio",
		"half_rate_records_per_s", "latency_p50_ms", "latency_p99_ms",
		// The machine's figures: the brokers and clients worked in every
		// window, and the half-peak step's gaps were sampled.
		"cpu_controllers_s", "cpu_brokers_s", "cpu_bench_s", "brokers_cpu_s_per_gb_acks_1", "brokers_cpu_s_per_gb_acks_all",
		"clients_cpu_s_per_gb_acks_1", "clients_cpu_s_per_gb_acks_all", "gap_max_ms"} {
		if v := figure("produce", name); v <= 0 {
			t.Errorf("produce: %s = %v", name, v)
		}
	}
	if v := figure("produce", "failed_writes"); v != 0 {
		t.Errorf("produce: %v writes failed", v)
	}
	// kill -9 closes the victim's connections: crash detection fences it
	// after --crash-grace, long before its 9 s session runs out.
	if v := figure("leader-crash", "median_s"); v <= 0 || v >= 9 {
		t.Errorf("leader-crash: the first write at the new leader %vs after the kill; want it within the 9s session (crash detection)", v)
	}
	if v := figure("leader-crash", "session_timeout_s"); v != 9 {
		t.Errorf("leader-crash: session_timeout_s = %v, want the default 9", v)
	}
	if v := figure("catch-up", "catch_up_bytes"); v != 2<<20 {
		t.Errorf("catch-up: catch_up_bytes = %v", v)
	}
	for _, name := range []string{"leader-crash", "catch-up"} {
		if v := figure(name, "cpu_brokers_s"); v <= 0 {
			t.Errorf("%s: cpu_brokers_s = %v", name, v)
		}
	}
	if v := figure("catch-up", "failed_writes"); v != 0 {
		t.Errorf("catch-up: %v writes failed", v)
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		if strings.HasPrefix(e.Name(), "keel-bench-") {
			t.Errorf("the bench left %s behind", e.Name())
		}
	}
}
