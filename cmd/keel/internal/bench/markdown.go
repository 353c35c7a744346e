package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// UnmarshalJSON reads what MarshalJSON writes: the fixed fields by name,
// every other number as an extra figure. The extras come back sorted by
// name, since a JSON object keeps no order.
func (r *Result) UnmarshalJSON(data []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return err
	}
	fixed := map[string]any{
		"name": &r.Name, "partitions": &r.Partitions, "brokers": &r.Brokers, "runs": &r.Runs,
		"median_s": &r.MedianS, "max_s": &r.MaxS, "measures": &r.Measures, "values_s": &r.ValuesS,
	}
	r.Extra = nil
	for k, v := range fields {
		if dst, ok := fixed[k]; ok {
			if err := json.Unmarshal(v, dst); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			continue
		}
		var f float64
		if err := json.Unmarshal(v, &f); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		r.Extra = append(r.Extra, Figure{Name: k, Value: f})
	}
	sort.Slice(r.Extra, func(i, j int) bool { return r.Extra[i].Name < r.Extra[j].Name })
	return nil
}

// ReadReports decodes the reports of `keel bench -o json`, one after
// another in r, as several runs' output concatenated.
func ReadReports(r io.Reader) ([]Report, error) {
	var reports []Report
	dec := json.NewDecoder(r)
	for {
		var rep Report
		err := dec.Decode(&rep)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("report %d: %w", len(reports)+1, err)
		}
		reports = append(reports, rep)
	}
	if len(reports) == 0 {
		return nil, errors.New("no report: pipe in the output of keel bench -o json")
	}
	return reports, nil
}

// MarkdownHeader is the head of the table WriteMarkdownRows fills:
// docs/benchmarks.md's table of current figures. CPU is the median over
// the runs of each role's CPU seconds in the measured step; gaps are the
// bench process's scheduling gaps in it (the worst, the median p99, and
// how many were above 10 ms).
const MarkdownHeader = "| scenario | partitions | brokers | runs | median | max | CPU s: controllers / brokers / bench | gaps: max / p99 / >10 ms | date | command |\n" +
	"| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"

// WriteMarkdownRows writes one row of docs/benchmarks.md's table per
// scenario of the reports, each with the date and the command that
// measured it, then a line per skipped scenario.
func WriteMarkdownRows(w io.Writer, reports []Report, date time.Time, command string) error {
	var b strings.Builder
	cmd := "`" + strings.ReplaceAll(command, "|", `\|`) + "`"
	for _, rep := range reports {
		for _, s := range rep.Scenarios {
			fmt.Fprintf(&b, "| `%s` | %d | %d | %d | %s | %s | %s | %s | %s | %s |\n", s.Name, s.Partitions, s.Brokers, s.Runs,
				FormatSeconds(s.MedianS), FormatSeconds(s.MaxS), cpuCell(s), gapsCell(s), date.UTC().Format(time.DateOnly), cmd)
		}
	}
	for _, rep := range reports {
		for _, s := range rep.Skipped {
			fmt.Fprintf(&b, "\nskipped `%s`: %s\n", s.Name, s.Reason)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// cpuCell is a row's CPU seconds by role; — where not measured (no
// broker processes on the control plane's cluster, or a report from before
// the bench measured CPU).
func cpuCell(s Result) string {
	cell := func(name string) string {
		if v, ok := s.Get(name); ok {
			return fmt.Sprintf("%.2f", v)
		}
		return "—"
	}
	return cell("cpu_controllers_s") + " / " + cell("cpu_brokers_s") + " / " + cell("cpu_bench_s")
}

// gapsCell is a row's scheduling gaps; — for a report without them.
func gapsCell(s Result) string {
	mx, ok := s.Get("gap_max_ms")
	if !ok {
		return "—"
	}
	p99, _ := s.Get("gap_p99_ms")
	long, _ := s.Get("gaps_over_10ms")
	return fmt.Sprintf("%.1fms / %.1fms / %.0f", mx, p99, long)
}

// MarkdownTargetsHeader is the head of the table WriteMarkdownTargets
// fills.
const MarkdownTargetsHeader = "| scenario | partitions | brokers | target | met |\n" +
	"| --- | --- | --- | --- | --- |\n"

// WriteMarkdownTargets writes one row per target checked in the reports,
// and the machine's idle baseline of each report.
func WriteMarkdownTargets(w io.Writer, reports []Report) error {
	var b strings.Builder
	for _, rep := range reports {
		for _, t := range rep.Targets {
			met := "no"
			if t.Met {
				met = "yes"
			}
			fmt.Fprintf(&b, "| `%s` | %d | %d | %s | %s |\n", t.Scenario, t.Partitions, t.Brokers, t.Target, met)
		}
	}
	for _, rep := range reports {
		fmt.Fprintf(&b, "\nthe machine idle before the bench: scheduling gaps max %.1fms, p99 %.2fms, %d above 10 ms\n",
			rep.IdleGapMaxMs, rep.IdleGapP99Ms, rep.IdleGapsOver10ms)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// FormatSeconds prints a figure in seconds at the scale a reader wants:
// microseconds, milliseconds or seconds.
func FormatSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", s*1e6)
	case d < time.Second:
		return fmt.Sprintf("%.1fms", s*1e3)
	}
	return fmt.Sprintf("%.3fs", s)
}
