package bench

import (
	"math"
	"testing"
)

const histogramText = `# HELP keel_kafka_request_duration_seconds Time.
# TYPE keel_kafka_request_duration_seconds histogram
keel_kafka_request_duration_seconds_bucket{request="Produce",le="0.01"} 50
keel_kafka_request_duration_seconds_bucket{request="Produce",le="0.02"} 90
keel_kafka_request_duration_seconds_bucket{request="Produce",le="0.05"} 100
keel_kafka_request_duration_seconds_bucket{request="Produce",le="+Inf"} 100
keel_kafka_request_duration_seconds_sum{request="Produce"} 1.2
keel_kafka_request_duration_seconds_count{request="Produce"} 100
keel_kafka_request_duration_seconds_bucket{request="Fetch",le="0.01"} 7
keel_kafka_request_duration_seconds_bucket{request="Fetch",le="0.02"} 7
keel_kafka_request_duration_seconds_bucket{request="Fetch",le="0.05"} 7
keel_kafka_request_duration_seconds_bucket{request="Fetch",le="+Inf"} 7
keel_kafka_request_duration_seconds_sum{request="Fetch"} 0.01
keel_kafka_request_duration_seconds_count{request="Fetch"} 7
`

func TestParseHistogram_TheLabelledSeries(t *testing.T) {
	h, err := parseHistogram(histogramText, "keel_kafka_request_duration_seconds", "request", "Produce")
	if err != nil {
		t.Fatal(err)
	}
	if h.count() != 100 || len(h.bounds) != 4 || !math.IsInf(h.bounds[3], 1) {
		t.Fatalf("parsed %+v, want the Produce series' 4 buckets and 100 observations", h)
	}
	for _, c := range []struct{ name, value string }{{"keel_kafka_request_duration_seconds", "Metadata"}, {"no_such_metric", "Produce"}} {
		if _, err := parseHistogram(histogramText, c.name, "request", c.value); err == nil {
			t.Errorf("%s{request=%q}: no error", c.name, c.value)
		}
	}
}

// Cases after Prometheus's histogram_quantile: linear within the bucket,
// from 0 in the first, the largest finite bound in +Inf.
func TestHistogram_Quantile(t *testing.T) {
	h := histogram{bounds: []float64{0.01, 0.02, 0.05, math.Inf(1)}, counts: []float64{50, 90, 100, 100}}
	tail := histogram{bounds: h.bounds, counts: []float64{50, 90, 98, 100}}
	for _, c := range []struct {
		name string
		h    histogram
		q    float64
		want float64
	}{
		{"median at the first bucket's bound", h, 0.5, 0.01},
		{"inside the first bucket, from 0", h, 0.25, 0.005},
		{"inside the second bucket", h, 0.7, 0.015},
		{"p99 in the third bucket", h, 0.99, 0.047},
		{"in the +Inf bucket: the largest finite bound", tail, 0.99, 0.05},
		{"empty", histogram{bounds: h.bounds, counts: make([]float64, 4)}, 0.5, math.NaN()},
	} {
		got := c.h.quantile(c.q)
		if math.IsNaN(c.want) != math.IsNaN(got) || (!math.IsNaN(got) && math.Abs(got-c.want) > 1e-9) {
			t.Errorf("%s: quantile(%v) = %v, want %v", c.name, c.q, got, c.want)
		}
	}
}

func TestHistogram_PlusAndDifference(t *testing.T) {
	a := histogram{bounds: []float64{1, math.Inf(1)}, counts: []float64{3, 4}}
	b := histogram{bounds: []float64{1, math.Inf(1)}, counts: []float64{5, 9}}
	sum, err := histogram{}.plus(a, 1)
	if err != nil {
		t.Fatal(err)
	}
	if sum, err = sum.plus(b, 1); err != nil || sum.counts[0] != 8 || sum.count() != 13 {
		t.Fatalf("a+b = %+v, %v; want counts [8 13]", sum, err)
	}
	if d, err := b.plus(a, -1); err != nil || d.counts[0] != 2 || d.count() != 5 {
		t.Fatalf("b-a = %+v, %v; want counts [2 5]", d, err)
	}
	if _, err := a.plus(histogram{bounds: []float64{2, math.Inf(1)}, counts: []float64{1, 1}}, 1); err == nil {
		t.Fatal("histograms with different buckets added without an error")
	}
}
