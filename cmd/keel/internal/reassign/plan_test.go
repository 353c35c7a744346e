package reassign

import (
	"reflect"
	"strings"
	"testing"
)

func TestParsePlan(t *testing.T) {
	tests := []struct {
		name    string
		json    string
		want    []Partition
		wantErr string // a fragment of the error; empty: parses
	}{
		{name: "Kafka's format",
			json: `{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[1,2,3],"log_dirs":["any","any","any"]},
			                                 {"topic":"orders","partition":1,"replicas":[2,3,4]}]}`,
			want: []Partition{{Topic: "orders", Partition: 0, Replicas: []int32{1, 2, 3}, LogDirs: []string{"any", "any", "any"}},
				{Topic: "orders", Partition: 1, Replicas: []int32{2, 3, 4}}}},
		{name: "no version is version 1", json: `{"partitions":[{"topic":"t","partition":3,"replicas":[4]}]}`,
			want: []Partition{{Topic: "t", Partition: 3, Replicas: []int32{4}}}},
		{name: "not JSON", json: "{\n\"version\":1,\n\"partitions\":[}", wantErr: "not valid JSON (line 3)"},
		{name: "trailing garbage", json: `{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]}]} x`, wantErr: "not valid JSON"},
		{name: "an array", json: `[1]`, wantErr: "want a JSON object, not a JSON array"},
		{name: "version 2", json: `{"version":2,"partitions":[]}`, wantErr: "version 2: only version 1 is known"},
		{name: "a version that is no number", json: `{"version":"1","partitions":[]}`, wantErr: `version: "1" is not a number`},
		{name: "no partitions", json: `{"version":1}`, wantErr: `no "partitions"`},
		{name: "empty partitions", json: `{"version":1,"partitions":[]}`, wantErr: "partitions is empty"},
		{name: "unknown top-level field", json: `{"version":1,"partition":[]}`, wantErr: `unknown field "partition" (want version, partitions)`},
		{name: "misspelt replicas", json: `{"partitions":[{"topic":"t","partition":0,"replica":[1]}]}`,
			wantErr: `partitions[0]: unknown field "replica" (want topic, partition, replicas, log_dirs)`},
		{name: "no topic", json: `{"partitions":[{"topic":"t","partition":0,"replicas":[1]},{"partition":0,"replicas":[1]}]}`, wantErr: `partitions[1]: no "topic"`},
		{name: "bad topic name", json: `{"partitions":[{"topic":"a/b","partition":0,"replicas":[1]}]}`, wantErr: "partitions[0]: topic: "},
		{name: "no partition", json: `{"partitions":[{"topic":"t","replicas":[1]}]}`, wantErr: `partitions[0]: no "partition"`},
		{name: "a fractional partition", json: `{"partitions":[{"topic":"t","partition":1.5,"replicas":[1]}]}`, wantErr: "partitions[0]: partition: want a whole number"},
		{name: "a partition too large", json: `{"partitions":[{"topic":"t","partition":4294967296,"replicas":[1]}]}`, wantErr: "partitions[0]: partition: want a whole number"},
		{name: "a negative partition", json: `{"partitions":[{"topic":"t","partition":-1,"replicas":[1]}]}`, wantErr: "partitions[0] (t--1): partition -1 is negative"},
		{name: "no replicas", json: `{"partitions":[{"topic":"t","partition":2}]}`, wantErr: `partitions[0] (t-2): no "replicas"`},
		{name: "empty replicas", json: `{"partitions":[{"topic":"t","partition":2,"replicas":[]}]}`, wantErr: "partitions[0] (t-2): replicas is empty"},
		{name: "replicas not a list", json: `{"partitions":[{"topic":"t","partition":2,"replicas":3}]}`, wantErr: "partitions[0]: replicas: want a list, not a JSON number"},
		{name: "a negative replica", json: `{"partitions":[{"topic":"t","partition":2,"replicas":[1,-2]}]}`, wantErr: "partitions[0] (t-2): replicas: broker id -2 is negative"},
		{name: "a replica twice", json: `{"partitions":[{"topic":"t","partition":2,"replicas":[1,2,1]}]}`, wantErr: "partitions[0] (t-2): replicas 1,2,1 name broker 1 twice"},
		{name: "log_dirs of another length", json: `{"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any"]}]}`,
			wantErr: "partitions[0] (t-0): log_dirs has 1 entries for 2 replicas"},
		{name: "a log dir", json: `{"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/data/1"]}]}`,
			wantErr: `partitions[0] (t-0): log_dirs: "/data/1": a Keel broker keeps its replicas in its one data dir`},
		{name: "a partition twice", json: `{"partitions":[{"topic":"t","partition":0,"replicas":[1]},{"topic":"u","partition":0,"replicas":[1]},{"topic":"t","partition":0,"replicas":[2]}]}`,
			wantErr: "partitions[2]: partition t-0 is also partitions[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePlan([]byte(tt.json))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParsePlan = %+v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePlan: %v", err)
			}
			if got.Version != 1 || !reflect.DeepEqual(got.Partitions, tt.want) {
				t.Fatalf("ParsePlan = %+v; want version 1, %+v", got, tt.want)
			}
		})
	}
}

// TestPlan_StringParsesBack: a plan prints as Kafka's tools print one, one
// line, sorted, log_dirs "any", and parses back to itself.
func TestPlan_StringParsesBack(t *testing.T) {
	p := NewPlan([]Partition{{Topic: "b", Partition: 0, Replicas: []int32{2}}, {Topic: "a", Partition: 10, Replicas: []int32{3, 1}}, {Topic: "a", Partition: 2, Replicas: []int32{1, 2}}})
	const want = `{"version":1,"partitions":[{"topic":"a","partition":2,"replicas":[1,2],"log_dirs":["any","any"]},{"topic":"a","partition":10,"replicas":[3,1],"log_dirs":["any","any"]},{"topic":"b","partition":0,"replicas":[2],"log_dirs":["any"]}]}`
	if got := p.String(); got != want {
		t.Fatalf("String() =\n%s\nwant\n%s", got, want)
	}
	back, err := ParsePlan([]byte(p.String()))
	if err != nil || !reflect.DeepEqual(back, p) {
		t.Fatalf("ParsePlan(String()) = %+v, %v; want %+v", back, err, p)
	}
}
