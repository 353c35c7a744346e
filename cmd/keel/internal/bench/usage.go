package bench

import (
	"time"

	"github.com/keel-dev/keel/keeltest/keelproc"
)

// meters are the bench's measures of the machine: the CPU its processes
// use and the stalls the bench process sees. Every scenario reports both
// for its measured step.
type meters struct {
	cpu  *cpuMeter
	gaps *gapSampler
}

// stepMark is the start of a measured step.
type stepMark struct {
	cpu cpuUse
	gap int
}

// stepUse is what the machine did during a step.
type stepUse struct {
	cpu  cpuUse
	gaps gapStats
}

func (m *meters) begin() stepMark {
	return stepMark{cpu: m.cpu.sample(), gap: m.gaps.mark()}
}

func (m *meters) end(s stepMark) stepUse {
	return stepUse{cpu: m.cpu.sample().minus(s.cpu), gaps: m.gaps.since(s.gap)}
}

// useFigures are every scenario's figures of the machine over its runs'
// measured steps: cpuFigures, then gapFigures.
func useFigures(steps []stepUse) []Figure {
	return append(cpuFigures(steps), gapFigures(steps)...)
}

// cpuFigures are the median CPU seconds of each role over the steps:
// controllers only where the bench started them, brokers only where
// `keel broker` processes run (the bench process hosts the simulated
// ones); none if a figure could not be read.
func cpuFigures(steps []stepUse) []Figure {
	if len(steps) == 0 {
		return nil
	}
	var ctrl, brk, self []float64
	controllers, brokers := false, false
	for _, s := range steps {
		if !s.cpu.ok {
			return nil
		}
		controllers = controllers || s.cpu.controllerProcs > 0
		brokers = brokers || s.cpu.brokerProcs > 0
		ctrl = append(ctrl, s.cpu.controllers.Seconds())
		brk = append(brk, s.cpu.brokers.Seconds())
		self = append(self, s.cpu.bench.Seconds())
	}
	var out []Figure
	if controllers {
		out = append(out, Figure{"cpu_controllers_s", Median(ctrl)})
	}
	if brokers {
		out = append(out, Figure{"cpu_brokers_s", Median(brk)})
	}
	return append(out, Figure{"cpu_bench_s", Median(self)})
}

// gapFigures are the steps' scheduling gaps: the largest of any step, the
// median of their p99s, and the gaps above 10 ms in all of them.
func gapFigures(steps []stepUse) []Figure {
	if len(steps) == 0 {
		return nil
	}
	var p99 []float64
	var worst time.Duration
	long := 0
	for _, s := range steps {
		p99 = append(p99, ms(s.gaps.p99))
		worst = max(worst, s.gaps.max)
		long += s.gaps.long
	}
	return []Figure{
		{"gap_max_ms", ms(worst)},
		{"gap_p99_ms", Median(p99)},
		{"gaps_over_10ms", float64(long)},
	}
}

// perUnit is CPU seconds per unit of work (0 for none), for the derived
// figures: CPU per GB acknowledged, CPU-µs per partition.
func perUnit(cpu time.Duration, units float64) float64 {
	if units <= 0 {
		return 0
	}
	return cpu.Seconds() / units
}

func ms(d time.Duration) float64 { return d.Seconds() * 1000 }

func newMeters() *meters { return &meters{cpu: startCPUMeter(), gaps: startGapSampler()} }

// watch counts a cluster's processes from now on. A runner made without
// meters (a test of one part) counts nothing.
func (m *meters) watch(c *keelproc.Cluster) {
	if m != nil {
		m.cpu.watch(c)
	}
}

func (m *meters) close() {
	m.cpu.close()
	m.gaps.close()
}

// withUse is a scenario's figures followed by its steps' useFigures.
func withUse(steps []stepUse, figs ...Figure) []Figure {
	return append(figs, useFigures(steps)...)
}
