package bench

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
)

func TestGapStatsOf(t *testing.T) {
	us := time.Microsecond
	// 100 wakes: 97 on time or nearly, two long gaps and one just at the
	// threshold (not above it).
	var late []time.Duration
	for i := range 97 {
		late = append(late, time.Duration(i%5)*100*us)
	}
	late = append(late, gapLong, 50*time.Millisecond, 12*time.Millisecond)
	for _, tc := range []struct {
		name string
		late []time.Duration
		want gapStats
	}{
		{"none", nil, gapStats{}},
		{"one on time", []time.Duration{0}, gapStats{wakes: 1}},
		{"one long", []time.Duration{15 * time.Millisecond}, gapStats{wakes: 1, max: 15 * time.Millisecond, p99: 15 * time.Millisecond, long: 1}},
		// p99 of 100 by nearest rank is the 99th smallest: 12 ms.
		{"a hundred", late, gapStats{wakes: 100, max: 50 * time.Millisecond, p99: 12 * time.Millisecond, long: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := gapStatsOf(tc.late); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestGapSampler: the sampler wakes about every millisecond, a mark
// starts a step's figures afresh, and close stops it.
func TestGapSampler(t *testing.T) {
	g := startGapSampler()
	defer g.close()
	if err := poll.Wait(context.Background(), time.Minute, 5*time.Millisecond, "20 wakes", func() (bool, error) {
		return g.since(0).wakes >= 20, nil
	}); err != nil {
		t.Fatal(err)
	}
	m := g.mark()
	if s := g.since(m); s.wakes > 5 {
		t.Errorf("%d wakes right after a mark", s.wakes)
	}
	if s := g.idle(context.Background(), 50*time.Millisecond); s.wakes < 1 || s.max > time.Minute {
		t.Errorf("idle for 50 ms: %+v", s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if s := g.idle(ctx, time.Hour); s.wakes > 1000 {
		t.Errorf("idle with an ended context: %+v, want it to return at once", s)
	}
}

func figureMap(figs []Figure) map[string]float64 {
	out := map[string]float64{}
	for _, f := range figs {
		out[f.Name] = f.Value
	}
	return out
}

func checkFigures(t *testing.T, got []Figure, want map[string]float64, absent ...string) {
	t.Helper()
	m := figureMap(got)
	for name, w := range want {
		if v, ok := m[name]; !ok || math.Abs(v-w) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, w)
		}
	}
	for _, name := range absent {
		if _, ok := m[name]; ok {
			t.Errorf("%s present, want it left out", name)
		}
	}
}

// step is a step of a cluster of 3 controllers the bench started, and
// procs broker processes.
func step(ctrl, brokers, bench time.Duration, procs int, gaps gapStats) stepUse {
	return stepUse{cpu: cpuUse{controllers: ctrl, brokers: brokers, bench: bench, controllerProcs: 3, brokerProcs: procs, ok: true}, gaps: gaps}
}

func TestUseFigures(t *testing.T) {
	s := time.Second
	msec := time.Millisecond
	for _, tc := range []struct {
		name   string
		steps  []stepUse
		want   map[string]float64
		absent []string
	}{
		{name: "no runs", absent: []string{"cpu_controllers_s", "gap_max_ms"}},
		{
			name: "control plane: no broker processes, medians of the CPU, the worst gap, gaps summed",
			steps: []stepUse{
				step(2*s, 0, 1*s, 0, gapStats{max: 30 * msec, p99: 2 * msec, long: 3}),
				step(3*s, 0, 4*s, 0, gapStats{max: 5 * msec, p99: 1 * msec}),
				step(1*s, 0, 2*s, 0, gapStats{max: 11 * msec, p99: 4 * msec, long: 1}),
			},
			want:   map[string]float64{"cpu_controllers_s": 2, "cpu_bench_s": 2, "gap_max_ms": 30, "gap_p99_ms": 2, "gaps_over_10ms": 4},
			absent: []string{"cpu_brokers_s"},
		},
		{
			name:  "data path: broker processes",
			steps: []stepUse{step(s/2, 6*s, s, 3, gapStats{})},
			want:  map[string]float64{"cpu_controllers_s": 0.5, "cpu_brokers_s": 6, "cpu_bench_s": 1, "gaps_over_10ms": 0},
		},
		{
			name:   "a running quorum (--controllers): no controller processes of the bench's",
			steps:  []stepUse{{cpu: cpuUse{controllers: 0, bench: 3 * s, ok: true}}},
			want:   map[string]float64{"cpu_bench_s": 3},
			absent: []string{"cpu_controllers_s", "cpu_brokers_s"},
		},
		{
			name:   "a figure not read: no CPU, the gaps still",
			steps:  []stepUse{step(s, s, s, 3, gapStats{max: msec}), {gaps: gapStats{max: 2 * msec}}},
			want:   map[string]float64{"gap_max_ms": 2},
			absent: []string{"cpu_controllers_s", "cpu_brokers_s", "cpu_bench_s"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) { checkFigures(t, useFigures(tc.steps), tc.want, tc.absent...) })
	}
}

func TestCPUUse_Minus(t *testing.T) {
	a := cpuUse{controllers: 5 * time.Second, brokers: 7 * time.Second, bench: 2 * time.Second, controllerProcs: 4, brokerProcs: 3, ok: true}
	b := cpuUse{controllers: 2 * time.Second, brokers: 1 * time.Second, bench: time.Second, controllerProcs: 3, brokerProcs: 3, ok: true}
	want := cpuUse{controllers: 3 * time.Second, brokers: 6 * time.Second, bench: time.Second, controllerProcs: 4, brokerProcs: 3, ok: true}
	if got := a.minus(b); got != want {
		t.Errorf("minus = %+v, want %+v", got, want)
	}
	b.ok = false
	if a.minus(b).ok {
		t.Error("a difference with an unread sample is ok")
	}
}

func TestCreateCPUFigures(t *testing.T) {
	s := time.Second
	steps := []stepUse{
		step(4*s, 0, 2*s, 0, gapStats{}),
		step(5*s, 0, 3*s, 0, gapStats{}),
		step(6*s, 0, 1*s, 0, gapStats{}),
	}
	// 1,000,000 partitions: 5 s of the controllers is 5 µs a partition.
	checkFigures(t, createCPUFigures(steps, 1_000_000), map[string]float64{
		"cpu_controllers_s": 5, "cpu_bench_s": 2,
		"controllers_cpu_us_per_partition": 5, "sim_brokers_cpu_us_per_partition": 2,
	})
	checkFigures(t, createCPUFigures([]stepUse{{}}, 1000), nil, "controllers_cpu_us_per_partition", "sim_brokers_cpu_us_per_partition")
}

func TestProduceUseFigures(t *testing.T) {
	s := time.Second
	run := func(acks1Bytes, allBytes int64, acks1, all, half stepUse) produceRun {
		return produceRun{
			acks1:   loadResult{bytes: acks1Bytes, took: s, use: acks1},
			acksAll: loadResult{bytes: allBytes, took: s, use: all},
			half:    loadResult{took: s, use: half},
		}
	}
	runs := []produceRun{
		// 2 GB acknowledged with acks=1 for 4 s of the brokers: 2 s a GB.
		run(2e9, 1e9, step(s, 4*s, 2*s, 3, gapStats{}), step(s, 3*s, s, 3, gapStats{}), step(0, 0, 0, 3, gapStats{max: 40 * time.Millisecond, long: 2})),
		run(1e9, 1e9, step(s, 3*s, s, 3, gapStats{}), step(2*s, 5*s, 2*s, 3, gapStats{}), step(0, 0, 0, 3, gapStats{max: time.Millisecond})),
		run(1e9, 5e8, step(s, 1*s, s, 3, gapStats{}), step(3*s, 2*s, s, 3, gapStats{}), step(0, 0, 0, 3, gapStats{long: 1})),
	}
	checkFigures(t, produceUseFigures(runs), map[string]float64{
		// The acks=all window's CPU.
		"cpu_controllers_s": 2, "cpu_brokers_s": 3, "cpu_bench_s": 1,
		"brokers_cpu_s_per_gb_acks_1":   2,   // 2, 3, 1
		"brokers_cpu_s_per_gb_acks_all": 4,   // 3, 5, 4
		"clients_cpu_s_per_gb_acks_1":   1,   // 1, 1, 1
		"clients_cpu_s_per_gb_acks_all": 2,   // 1, 2, 2
		"gap_max_ms":                    40,  // the half step's
		"gaps_over_10ms":                3.0, // 2 + 0 + 1
	})
}
