package bench

import (
	"testing"
	"time"
)

func TestMedianAndMax(t *testing.T) {
	for _, tc := range []struct {
		name        string
		xs          []float64
		median, max float64
	}{
		{"none", nil, 0, 0},
		{"one", []float64{3}, 3, 3},
		{"odd unsorted", []float64{5, 1, 3}, 3, 5},
		{"even", []float64{4, 1, 3, 2}, 2.5, 4},
		{"equal", []float64{2, 2, 2}, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]float64(nil), tc.xs...)
			if got := Median(tc.xs); got != tc.median {
				t.Errorf("Median(%v) = %v, want %v", tc.xs, got, tc.median)
			}
			if got := Max(tc.xs); got != tc.max {
				t.Errorf("Max(%v) = %v, want %v", tc.xs, got, tc.max)
			}
			for i := range in {
				if in[i] != tc.xs[i] {
					t.Fatalf("the input was reordered: %v, was %v", tc.xs, in)
				}
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	var hundred []time.Duration
	for i := 100; i >= 1; i-- {
		hundred = append(hundred, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		name string
		ds   []time.Duration
		q    float64
		want time.Duration
	}{
		{"none", nil, 0.5, 0},
		{"one sample p99", []time.Duration{7}, 0.99, 7},
		{"p50 of 1..100ms", hundred, 0.50, 50 * time.Millisecond},
		{"p99 of 1..100ms", hundred, 0.99, 99 * time.Millisecond},
		{"p100 is the max", hundred, 1, 100 * time.Millisecond},
		{"p0 is the min", hundred, 0, time.Millisecond},
		{"p99 of two", []time.Duration{2, 1}, 0.99, 2},
		{"p50 of two", []time.Duration{2, 1}, 0.5, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percentile(tc.ds, tc.q); got != tc.want {
				t.Errorf("Percentile(q=%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
}

func TestTopicSizes(t *testing.T) {
	for _, tc := range []struct {
		total, per int
		want       []int
	}{
		{2000, 10000, []int{2000}},
		{10000, 10000, []int{10000}},
		{25000, 10000, []int{10000, 10000, 5000}},
	} {
		got := topicSizes(tc.total, tc.per)
		if len(got) != len(tc.want) {
			t.Fatalf("topicSizes(%d, %d) = %v, want %v", tc.total, tc.per, got, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("topicSizes(%d, %d) = %v, want %v", tc.total, tc.per, got, tc.want)
			}
		}
	}
}
