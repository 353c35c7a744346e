package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keel-dev/keel/cmd/keel/internal/bench"
)

// asKeelEnv makes this test binary act as the keel binary: the bench
// starts its controllers from os.Executable(), which in a test is this
// binary, so they must run main, not the tests.
const asKeelEnv = "KEEL_TEST_RUN_AS_KEEL"

func TestMain(m *testing.M) {
	if os.Getenv(asKeelEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runBench runs `keel args...` in this process and returns its stdout and
// stderr apart.
func runBench(t *testing.T, ctx context.Context, args ...string) (string, string, error) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

func TestBenchRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "-o", "yaml"}, `-o "yaml"`},
		{[]string{"bench", "--scenarios", "create,nope"}, `unknown scenario "nope"`},
		{[]string{"bench", "--brokers", "2"}, "--brokers 2"},
		{[]string{"bench", "--brokers", "6", "--full-brokers", "5"}, "--full-brokers 5"},
		{[]string{"bench", "--runs", "-1"}, "--runs -1"},
		{[]string{"bench", "extra"}, "unknown command"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, _, err := runBench(t, context.Background(), tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one with %q", err, tc.want)
			}
		})
	}
}

func TestBenchTable(t *testing.T) {
	r := &bench.Report{
		Scenarios: []bench.Result{{
			Name: "create", Partitions: 2000, Brokers: 6, Runs: 1, MedianS: 1.5, MaxS: 2.25, Measures: "until x",
			Extra: []bench.Figure{{Name: "partitions_per_s", Value: 12345.6}, {Name: "commit_median_s", Value: 0.0123},
				{Name: "p99_ms", Value: 1.234}, {Name: "heap_live_bytes", Value: 3 << 20}, {Name: "topics", Value: 1},
				{Name: "raft_pipelined_ratio", Value: 0.5123}, {Name: "raft_one_at_a_time_ratio", Value: 2.25}},
		}},
		RaftCeilingRecordsPerS:   240000,
		RaftPipelinedRecordsPerS: 700000,
		Skipped:                  []bench.Skipped{{Name: "load", Reason: "a running quorum"}},
	}
	var b bytes.Buffer
	if err := printBenchTable(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"SCENARIO", "MEDIAN", "create", "2000", "1.500s", "2.250s", "until x",
		"partitions_per_s=12346/s", "commit_median_s=12.3ms", "p99_ms=1.23ms", "heap_live_bytes=3.0MiB", "topics=1", "raft_pipelined_ratio=0.512", "raft_one_at_a_time_ratio=2.25",
		"240000 records/s one entry at a time", "700000 records/s pipelined", "skipped load: a running quorum",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestBenchEndToEnd runs a small bench against a real local quorum (this
// test binary as the keel controllers) and checks the JSON it prints.
func TestBenchEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a quorum and waits out a broker session")
	}
	t.Setenv(asKeelEnv, "1")
	profile := filepath.Join(t.TempDir(), "bench.prof")
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // the bench's data dir goes here, and must be gone after
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	start := time.Now()
	out, stderr, err := runBench(t, ctx, "bench", "--partitions", "2000", "--brokers", "6", "--runs", "1",
		"--scenarios", "create,broker-failure,broker-crash,heartbeats", "-o", "json", "--cpuprofile", profile)
	if err != nil {
		t.Fatalf("keel bench: %v\nstderr:\n%s", err, stderr)
	}
	// --cpuprofile: a pprof profile (gzipped protobuf) of the bench process.
	if b, err := os.ReadFile(profile); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("--cpuprofile %s: %d bytes, %v; want a gzipped pprof profile", profile, len(b), err)
	}
	t.Logf("bench took %v\n%s", time.Since(start).Round(time.Millisecond), out)

	var report struct {
		Scenarios  []map[string]any `json:"scenarios"`
		Ceiling    float64          `json:"raft_ceiling_records_per_s"`
		IdleGapMax float64          `json:"idle_gap_max_ms"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if report.Ceiling <= 0 {
		t.Errorf("raft_ceiling_records_per_s = %v", report.Ceiling)
	}
	var names []string
	for _, s := range report.Scenarios {
		names = append(names, s["name"].(string))
		for k, want := range map[string]float64{"partitions": 2000, "brokers": 6, "runs": 1} {
			if s[k] != want {
				t.Errorf("%s: %s = %v, want %v", s["name"], k, s[k], want)
			}
		}
		median, _ := s["median_s"].(float64)
		maxS, _ := s["max_s"].(float64)
		if median <= 0 || maxS < median {
			t.Errorf("%s: median_s %v, max_s %v: want 0 < median <= max", s["name"], s["median_s"], s["max_s"])
		}
		if median > 60 {
			t.Errorf("%s: median_s %v is not a sane figure for 2000 partitions", s["name"], median)
		}
	}
	if got := strings.Join(names, ","); got != "create,heartbeats,broker-failure,broker-crash" {
		t.Fatalf("scenarios %s, want create,heartbeats,broker-failure,broker-crash", got)
	}
	figure := func(scenario, name string) float64 {
		for _, s := range report.Scenarios {
			if s["name"] == scenario {
				v, ok := s[name].(float64)
				if !ok {
					t.Errorf("%s lacks %s", scenario, name)
				}
				return v
			}
		}
		return 0
	}
	if v := figure("create", "partitions_per_s"); v <= 0 {
		t.Errorf("create: partitions_per_s = %v", v)
	}
	if v := figure("create", "records_per_s"); v <= 0 {
		t.Errorf("create: records_per_s = %v", v)
	}
	if p50, p99 := figure("heartbeats", "p50_ms"), figure("heartbeats", "p99_ms"); p50 <= 0 || p99 < p50 {
		t.Errorf("heartbeats: p50 %vms, p99 %vms", p50, p99)
	}
	if v := figure("heartbeats", "failures"); v != 0 {
		t.Errorf("heartbeats: %v failures", v)
	}
	if v := figure("broker-failure", "led_partitions"); v <= 0 {
		t.Errorf("broker-failure: led_partitions = %v", v)
	}
	if v := figure("broker-failure", "leaderless_partitions"); v != 0 {
		t.Errorf("broker-failure: %v partitions left without a leader", v)
	}
	if v := figure("broker-failure", "kill_to_fence_median_s"); v < 5 {
		t.Errorf("broker-failure: fenced %vs after the kill, before its 9s session could run out", v)
	}
	// A broker whose connections closed is fenced after the crash grace
	// (500 ms), long before its session runs out.
	if v := figure("broker-crash", "led_partitions"); v <= 0 {
		t.Errorf("broker-crash: led_partitions = %v", v)
	}
	if v := figure("broker-crash", "kill_to_fence_median_s"); v <= 0 || v >= 5 {
		t.Errorf("broker-crash: fenced %vs after the kill; want it within the crash grace, well before the 9s session", v)
	}
	// The machine's figures: every scenario's CPU by role (the simulated
	// brokers are the bench's: no broker processes here) and its
	// scheduling gaps; create's CPU per partition.
	for _, name := range names {
		if v := figure(name, "cpu_controllers_s"); v <= 0 {
			t.Errorf("%s: cpu_controllers_s = %v: the controllers worked in every scenario", name, v)
		}
		figure(name, "cpu_bench_s")
		if mx, p99 := figure(name, "gap_max_ms"), figure(name, "gap_p99_ms"); mx < p99 || p99 < 0 {
			t.Errorf("%s: gap max %vms, p99 %vms", name, mx, p99)
		}
		figure(name, "gaps_over_10ms")
	}
	if v := figure("create", "controllers_cpu_us_per_partition"); v <= 0 {
		t.Errorf("create: controllers_cpu_us_per_partition = %v", v)
	}
	if v := figure("create", "sim_brokers_cpu_us_per_partition"); v <= 0 {
		t.Errorf("create: sim_brokers_cpu_us_per_partition = %v", v)
	}
	if report.IdleGapMax <= 0 {
		t.Errorf("idle_gap_max_ms = %v: the idle baseline was not measured", report.IdleGapMax)
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

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestControllerMetricsAddr runs `keel controller --metrics-addr` (this
// test binary as keel) and checks that the metrics are served, with the
// live heap, and stop with the controller.
func TestControllerMetricsAddr(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	addr, metricsAddr := freeAddr(t), freeAddr(t)
	var logs bytes.Buffer
	cmd := exec.Command(exe, "controller", "--node-id", "1", "--listen", addr, "--data-dir", t.TempDir(),
		"--voters", "1@"+addr, "--metrics-addr", metricsAddr)
	cmd.Env = append(os.Environ(), asKeelEnv+"=1")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{}) // closed once the process is gone, waitErr set
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // if still running
		<-exited
	})
	url := "http://" + metricsAddr + "/metrics"
	client := &http.Client{Timeout: 2 * time.Second}
	get := func() (string, error) {
		resp, err := client.Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return string(body), err
	}
	var text string
	for deadline := time.Now().Add(30 * time.Second); ; {
		if text, err = get(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no metrics at %s: %v\n%s", url, err, logs.String())
		}
		select {
		case <-exited:
			t.Fatalf("the controller exited: %v\n%s", waitErr, logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	for _, want := range []string{"\ngo_gc_heap_live_bytes ", "\nprocess_resident_memory_bytes "} {
		if !strings.Contains(text, want) {
			t.Errorf("the metrics lack %q", strings.TrimSpace(want))
		}
	}
	// No profiler without --pprof: it would show the command line.
	if resp, err := client.Get("http://" + metricsAddr + "/debug/pprof/cmdline"); err != nil {
		t.Error(err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET /debug/pprof/cmdline without --pprof: %s, want 404", resp.Status)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("the controller stopped with %v\n%s", waitErr, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the controller did not stop on SIGTERM\n%s", logs.String())
	}
	if _, err := get(); err == nil {
		t.Fatal("the metrics are still served after the controller stopped")
	}
}
