package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// histogram is a Prometheus histogram's cumulative bucket counts by upper
// bound (+Inf last), possibly summed over nodes or taken as the difference
// of two scrapes.
type histogram struct {
	bounds []float64
	counts []float64
}

// parseHistogram finds the histogram name whose label has value ("" for an
// unlabelled one) in a Prometheus text exposition.
func parseHistogram(text, name, label, value string) (histogram, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return histogram{}, err
	}
	f, ok := families[name]
	if !ok {
		return histogram{}, fmt.Errorf("no metric %s", name)
	}
	for _, m := range f.GetMetric() {
		got := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				got = l.GetValue()
			}
		}
		if got != value || m.GetHistogram() == nil {
			continue
		}
		var h histogram
		for _, b := range m.GetHistogram().GetBucket() {
			h.bounds = append(h.bounds, b.GetUpperBound())
			h.counts = append(h.counts, float64(b.GetCumulativeCount()))
		}
		if len(h.bounds) == 0 || !math.IsInf(h.bounds[len(h.bounds)-1], 1) {
			h.bounds = append(h.bounds, math.Inf(1))
			h.counts = append(h.counts, float64(m.GetHistogram().GetSampleCount()))
		}
		return h, nil
	}
	return histogram{}, fmt.Errorf("no series of %s with %s=%q", name, label, value)
}

// scrapeHistogram sums the histogram over the nodes' metrics listeners.
func scrapeHistogram(ctx context.Context, addrs []string, name, label, value string) (histogram, error) {
	var sum histogram
	for _, addr := range addrs {
		text, err := httpGet(ctx, addr, "/metrics")
		if err != nil {
			return histogram{}, err
		}
		h, err := parseHistogram(text, name, label, value)
		if err != nil {
			return histogram{}, fmt.Errorf("%s: %w", addr, err)
		}
		if sum, err = sum.plus(h, 1); err != nil {
			return histogram{}, err
		}
	}
	return sum, nil
}

// plus is h + sign*o; the empty histogram takes o's buckets.
func (h histogram) plus(o histogram, sign float64) (histogram, error) {
	if len(h.bounds) == 0 {
		h = histogram{bounds: o.bounds, counts: make([]float64, len(o.counts))}
	}
	if !slices.Equal(h.bounds, o.bounds) {
		return histogram{}, fmt.Errorf("histograms with different buckets: %v and %v", h.bounds, o.bounds)
	}
	out := histogram{bounds: h.bounds, counts: make([]float64, len(h.counts))}
	for i := range h.counts {
		out.counts[i] = h.counts[i] + sign*o.counts[i]
	}
	return out, nil
}

// count is the number of observations.
func (h histogram) count() float64 {
	if len(h.counts) == 0 {
		return 0
	}
	return h.counts[len(h.counts)-1]
}

// quantile estimates the q-quantile as Prometheus's histogram_quantile
// does: linear within the bucket that holds it, from 0 for the first; the
// largest finite bound if it lies in the +Inf bucket; NaN if empty.
func (h histogram) quantile(q float64) float64 {
	n := h.count()
	if n == 0 || len(h.bounds) < 2 {
		return math.NaN()
	}
	rank := q * n
	i, _ := slices.BinarySearchFunc(h.counts, rank, func(c, r float64) int {
		switch {
		case c < r:
			return -1
		case c > r:
			return 1
		}
		return 0
	})
	if i >= len(h.bounds)-1 {
		return h.bounds[len(h.bounds)-2]
	}
	lo, below := 0.0, 0.0
	if i > 0 {
		lo, below = h.bounds[i-1], h.counts[i-1]
	}
	inBucket := h.counts[i] - below
	if inBucket == 0 {
		return h.bounds[i]
	}
	return lo + (h.bounds[i]-lo)*(rank-below)/inBucket
}
