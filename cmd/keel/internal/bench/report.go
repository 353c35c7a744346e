package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Report is the outcome of a bench: `keel bench -o json` prints it.
type Report struct {
	Scenarios []Result `json:"scenarios"`
	// RaftCeilingRecordsPerS is the commit rate of raw hashicorp/raft (three
	// in-process nodes, raft-boltdb, TCP on loopback, Keel's timings, a no-op
	// state machine) on encoded batches of 1,000 Partition records, one
	// entry at a time, measured in the same run: the create scenario's
	// raft_one_at_a_time_ratio is its records_per_s over this. It is 0 (not
	// measured) when only the data path's scenarios ran: they measure
	// ceilings of their own.
	RaftCeilingRecordsPerS float64 `json:"raft_ceiling_records_per_s"`
	// RaftPipelinedRecordsPerS is the same with 64 entries in flight, for
	// reference (the create scenario's raft_pipelined_ratio): raw raft
	// applies, decodes and pushes nothing, while the controllers share the
	// machine with the simulated brokers.
	RaftPipelinedRecordsPerS float64 `json:"raft_pipelined_records_per_s"`
	// IdleGap* are the scheduling gaps the bench process saw in the 2 s
	// before it started anything: the machine's own stalls, the baseline
	// of every scenario's gap_* figures.
	IdleGapMaxMs     float64 `json:"idle_gap_max_ms"`
	IdleGapP99Ms     float64 `json:"idle_gap_p99_ms"`
	IdleGapsOver10ms int     `json:"idle_gaps_over_10ms"`
	// Targets are the goals of the scenarios that ran, each met or not by
	// this run's figures.
	Targets []TargetCheck `json:"targets,omitempty"`
	// Skipped names the scenarios asked for that could not run, and why.
	Skipped []Skipped `json:"skipped,omitempty"`
}

func (r *Report) setIdle(g gapStats) {
	r.IdleGapMaxMs, r.IdleGapP99Ms, r.IdleGapsOver10ms = round(ms(g.max)), round(ms(g.p99)), g.long
}

// Skipped is a scenario that did not run.
type Skipped struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Result is one scenario's figures over its runs. MedianS and MaxS are over
// the runs' primary figure (Measures says which); Extra holds the
// scenario's own figures, printed beside them.
type Result struct {
	Name       string
	Partitions int
	Brokers    int
	Runs       int
	MedianS    float64
	MaxS       float64
	Measures   string
	// ValuesS is each run's primary figure, in seconds.
	ValuesS []float64
	Extra   []Figure
}

// Figure is one named extra figure of a scenario. Names follow the JSON
// conventions: a suffix _s for seconds, _ms for milliseconds, _per_s for
// rates, _bytes for sizes; none for counts and ratios.
type Figure struct {
	Name  string
	Value float64
}

// newResult fills in the median and max of the runs' primary figures.
func newResult(name string, partitions, brokers int, values []time.Duration, extra ...Figure) Result {
	v := seconds(values...)
	for i := range v {
		v[i] = round(v[i])
	}
	return Result{
		Name: name, Partitions: partitions, Brokers: brokers, Runs: len(values),
		MedianS: round(Median(v)), MaxS: round(Max(v)), Measures: measures[name],
		ValuesS: v, Extra: extra,
	}
}

// Get returns the extra figure called name.
func (r Result) Get(name string) (float64, bool) {
	for _, f := range r.Extra {
		if f.Name == name {
			return f.Value, true
		}
	}
	return 0, false
}

// MarshalJSON writes the fixed fields first (name, partitions, brokers,
// runs, median_s, max_s, measures, values_s), then the extra figures in
// their order.
func (r Result) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	field := func(k string, v any) error {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
		return nil
	}
	values := r.ValuesS
	if values == nil {
		values = []float64{}
	}
	for _, kv := range []struct {
		k string
		v any
	}{
		{"name", r.Name}, {"partitions", r.Partitions}, {"brokers", r.Brokers}, {"runs", r.Runs},
		{"median_s", r.MedianS}, {"max_s", r.MaxS}, {"measures", r.Measures}, {"values_s", values},
	} {
		if err := field(kv.k, kv.v); err != nil {
			return nil, err
		}
	}
	for _, f := range r.Extra {
		if err := field(f.Name, round(f.Value)); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
