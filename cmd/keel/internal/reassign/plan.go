// Package reassign is the pure logic behind Keel's tools for moving data
// around: reassignment plans in the JSON format of Kafka's
// kafka-reassign-partitions (parsed, checked and printed), plans generated
// for a set of brokers, plans that drain a broker, and the verification of
// a plan against the partitions as they are. It decides nothing by itself
// and talks to nobody: the `keel` commands read the cluster, call it, and
// send the plan to the active controller, which decides every entry again
// from its own image as one batch.
package reassign

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/keel-dev/keel/fsm"
)

// PlanVersion is the one version of the reassignment JSON Kafka defines,
// and the one Keel reads and writes.
const PlanVersion = 1

// AnyLogDir is the only log_dirs entry Keel accepts: a Keel broker keeps
// its replicas in its one data dir, so a replica cannot be sent to a
// particular directory.
const AnyLogDir = "any"

// Plan is a reassignment plan, Kafka's JSON:
//
//	{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[1,2,3],"log_dirs":["any","any","any"]}]}
type Plan struct {
	Version    int         `json:"version"`
	Partitions []Partition `json:"partitions"`
}

// Partition is one entry of a plan: a partition and its target replicas,
// in preference order.
type Partition struct {
	Topic     string   `json:"topic"`
	Partition int32    `json:"partition"`
	Replicas  []int32  `json:"replicas"`
	LogDirs   []string `json:"log_dirs,omitempty"`
}

// Name is the partition as Kafka's tools print it, "orders-0".
func (p Partition) Name() string { return fmt.Sprintf("%s-%d", p.Topic, p.Partition) }

// NewPlan is a plan of partitions, sorted by topic then partition, each
// with log_dirs "any" for every replica, as Kafka's tools write them.
func NewPlan(parts []Partition) Plan {
	out := make([]Partition, len(parts))
	for i, p := range parts {
		dirs := make([]string, len(p.Replicas))
		for j := range dirs {
			dirs[j] = AnyLogDir
		}
		out[i] = Partition{Topic: p.Topic, Partition: p.Partition, Replicas: slices.Clone(p.Replicas), LogDirs: dirs}
	}
	slices.SortFunc(out, comparePartitions)
	return Plan{Version: PlanVersion, Partitions: out}
}

func comparePartitions(a, b Partition) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return int(a.Partition) - int(b.Partition)
}

// String is the plan as one line of JSON, as Kafka's tools print it; it
// parses back with ParsePlan.
func (p Plan) String() string {
	data, err := json.Marshal(p)
	if err != nil { // only ints and strings: cannot fail
		return fmt.Sprintf("<%v>", err)
	}
	return string(data)
}

// entryFields are the keys of a plan entry; any other key is refused, so
// that a misspelt "replica" is not taken for a missing "replicas".
var entryFields = []string{"topic", "partition", "replicas", "log_dirs"}

// ParsePlan reads and checks a plan. It is refused whole, with an error
// naming the entry (partitions[i], topic-partition) and the field, when
// the JSON does not parse, its version is not 1, it has no partitions, an
// entry lacks its topic, partition or replicas, or has a field of another
// kind, a negative or duplicate broker id, a log_dirs list of another
// length than its replicas or naming a directory, or names a partition
// another entry names. A missing version is version 1, as in Kafka.
func ParsePlan(data []byte) (Plan, error) {
	var raw struct {
		Version    *json.RawMessage   `json:"version"`
		Partitions *[]json.RawMessage `json:"partitions"`
	}
	if err := decodeStrict(data, &raw, "version", "partitions"); err != nil {
		return Plan{}, err
	}
	plan := Plan{Version: PlanVersion}
	if raw.Version != nil {
		var v int
		if err := json.Unmarshal(*raw.Version, &v); err != nil {
			return Plan{}, fmt.Errorf("version: %s is not a number", *raw.Version)
		}
		if v != PlanVersion {
			return Plan{}, fmt.Errorf("version %d: only version %d is known", v, PlanVersion)
		}
	}
	switch {
	case raw.Partitions == nil:
		return Plan{}, errors.New(`no "partitions": want {"version":1,"partitions":[{"topic":...,"partition":...,"replicas":[...]}]}`)
	case len(*raw.Partitions) == 0:
		return Plan{}, errors.New("partitions is empty: the plan moves nothing")
	}
	seen := map[string]int{}
	for i, entry := range *raw.Partitions {
		p, err := parseEntry(entry)
		if err != nil {
			if p.Topic != "" {
				return Plan{}, fmt.Errorf("partitions[%d] (%s): %w", i, p.Name(), err)
			}
			return Plan{}, fmt.Errorf("partitions[%d]: %w", i, err)
		}
		if j, ok := seen[p.Name()]; ok {
			return Plan{}, fmt.Errorf("partitions[%d]: partition %s is also partitions[%d]: each partition may appear once", i, p.Name(), j)
		}
		seen[p.Name()] = i
		plan.Partitions = append(plan.Partitions, p)
	}
	return plan, nil
}

// parseEntry reads one entry. On error the partition returned holds the
// topic and partition if they were read, for the error to name.
func parseEntry(data []byte) (Partition, error) {
	var raw struct {
		Topic     *string   `json:"topic"`
		Partition *int32    `json:"partition"`
		Replicas  *[]int32  `json:"replicas"`
		LogDirs   *[]string `json:"log_dirs"`
	}
	if err := decodeStrict(data, &raw, entryFields...); err != nil {
		return Partition{}, err
	}
	var p Partition
	switch {
	case raw.Topic == nil:
		return p, errors.New(`no "topic"`)
	case raw.Partition == nil:
		return p, errors.New(`no "partition"`)
	}
	p.Topic, p.Partition = *raw.Topic, *raw.Partition
	if err := fsm.CheckTopicName(p.Topic); err != nil {
		return Partition{}, fmt.Errorf("topic: %w", err)
	}
	switch {
	case p.Partition < 0:
		return p, fmt.Errorf("partition %d is negative", p.Partition)
	case raw.Replicas == nil:
		return p, errors.New(`no "replicas"`)
	case len(*raw.Replicas) == 0:
		return p, errors.New("replicas is empty: a partition needs at least one replica")
	}
	p.Replicas = *raw.Replicas
	for j, id := range p.Replicas {
		switch {
		case id < 0:
			return p, fmt.Errorf("replicas: broker id %d is negative", id)
		case slices.Contains(p.Replicas[:j], id):
			return p, fmt.Errorf("replicas %s name broker %d twice", FormatIDs(p.Replicas), id)
		}
	}
	if raw.LogDirs != nil {
		p.LogDirs = *raw.LogDirs
		if len(p.LogDirs) != len(p.Replicas) {
			return p, fmt.Errorf("log_dirs has %d entries for %d replicas: want one per replica", len(p.LogDirs), len(p.Replicas))
		}
		for _, d := range p.LogDirs {
			if d != AnyLogDir {
				return p, fmt.Errorf("log_dirs: %q: a Keel broker keeps its replicas in its one data dir; only %q is accepted", d, AnyLogDir)
			}
		}
	}
	return p, nil
}

// decodeStrict decodes one JSON object into v, refusing keys not in known,
// trailing data, and values of the wrong kind, with errors that say which
// field and where.
func decodeStrict(data []byte, v any, known ...string) error {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(data, &keys); err != nil {
		return jsonError(data, err)
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if !slices.Contains(known, k) {
			return fmt.Errorf("unknown field %q (want %s)", k, strings.Join(known, ", "))
		}
	}
	if err := json.Unmarshal(data, v); err != nil {
		return jsonError(data, err)
	}
	return nil
}

// jsonError says what encoding/json found wrong in words an operator can
// act on: the field and the kind it wants, or the line of a syntax error.
func jsonError(data []byte, err error) error {
	var syntax *json.SyntaxError
	var kind *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		line := 1 + bytes.Count(data[:min(int(syntax.Offset), len(data))], []byte("\n"))
		return fmt.Errorf("not valid JSON (line %d): %v", line, syntax)
	case errors.As(err, &kind) && kind.Field != "":
		return fmt.Errorf("%s: want %s, not a JSON %s", kind.Field, kindName(kind.Type.Kind().String()), kind.Value)
	case errors.As(err, &kind):
		return fmt.Errorf("want a JSON object, not a JSON %s", kind.Value)
	}
	return fmt.Errorf("not valid JSON: %v", err)
}

func kindName(k string) string {
	switch k {
	case "int32", "int":
		return "a whole number (within 32 bits)"
	case "slice":
		return "a list"
	case "string":
		return "a string"
	case "ptr":
		return "a value"
	}
	return k
}

// FormatIDs prints broker ids as Kafka's tools do, "1,2,3".
func FormatIDs(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ",")
}
