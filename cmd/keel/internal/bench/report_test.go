package bench

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"
)

func TestReportJSONShape(t *testing.T) {
	r := Report{
		Scenarios: []Result{
			newResult(ScenarioCreate, 2000, 6, []time.Duration{3 * time.Second, time.Second, 2 * time.Second},
				Figure{"records_per_s", 12345.5}, Figure{"commit_median_s", 0.5}),
			newResult(ScenarioHeartbeats, 0, 6, []time.Duration{2 * time.Millisecond}),
		},
		RaftCeilingRecordsPerS:   240000,
		RaftPipelinedRecordsPerS: 700000,
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Scenarios []map[string]any `json:"scenarios"`
		Ceiling   *float64         `json:"raft_ceiling_records_per_s"`
		Skipped   []any            `json:"skipped"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("%v in %s", err, data)
	}
	if got.Ceiling == nil || *got.Ceiling != 240000 {
		t.Fatalf("raft_ceiling_records_per_s missing or wrong in %s", data)
	}
	if bytes.Contains(data, []byte(`"skipped"`)) {
		t.Errorf("an empty skipped list is printed: %s", data)
	}
	c := got.Scenarios[0]
	for k, want := range map[string]any{
		"name": "create", "partitions": 2000.0, "brokers": 6.0, "runs": 3.0, "median_s": 2.0, "max_s": 3.0,
		"records_per_s": 12345.5, "commit_median_s": 0.5,
	} {
		if c[k] != want {
			t.Errorf("scenario field %s = %v (%T), want %v", k, c[k], c[k], want)
		}
	}
	if v, ok := c["values_s"].([]any); !ok || len(v) != 3 || v[0] != 3.0 {
		t.Errorf("values_s = %v, want each run's figure in run order", c["values_s"])
	}
	if _, ok := c["measures"].(string); !ok {
		t.Errorf("measures missing: %v", c)
	}
	// The fixed fields come first, in the order.
	var keys []string
	dec := json.NewDecoder(bytes.NewReader(data[bytes.Index(data, []byte(`[{`))+1:]))
	if _, err := dec.Token(); err != nil { // {
		t.Fatal(err)
	}
	for dec.More() {
		k, _ := dec.Token()
		keys = append(keys, k.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"name", "partitions", "brokers", "runs", "median_s", "max_s", "measures", "values_s", "records_per_s", "commit_median_s"}
	if !slices.Equal(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}

	r.Skipped = []Skipped{{Name: "load", Reason: "r"}}
	data, _ = json.Marshal(r)
	if !bytes.Contains(data, []byte(`"skipped":[{"name":"load","reason":"r"}]`)) {
		t.Errorf("skipped not printed: %s", data)
	}
}

func TestResultGet(t *testing.T) {
	r := newResult(ScenarioLoad, 1, 3, []time.Duration{time.Second}, Figure{"heap_live_bytes", 42})
	if v, ok := r.Get("heap_live_bytes"); !ok || v != 42 {
		t.Fatalf("Get = %v, %v", v, ok)
	}
	if _, ok := r.Get("nope"); ok {
		t.Fatal("Get found a figure that is not there")
	}
}
