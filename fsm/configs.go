package fsm

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/keel-dev/keel/proto/keelpb"
)

// Topic configs: Kafka's names, types, defaults and ranges, checked in this
// one place. The controller checks a request by them, the wire contract
// (package rpc) on every node before a request is forwarded or queued, and
// Apply every TopicRecord and ConfigRecord, so a config the image holds is
// always one CheckConfig accepts.
//
// A config comes from the first source that has it: the topic's own
// (TopicRecord, ConfigRecord for the topic), the cluster-wide default
// (ConfigRecord for the cluster), Keel's built-in default (Kafka's).

// The topic configs Keel knows.
const (
	// MinInsyncReplicas: the ISR size below which the partition's leader
	// refuses acks=all writes, and below which replicas leaving the ISR
	// become eligible leader replicas.
	MinInsyncReplicas = "min.insync.replicas"
	// UncleanLeaderElection lets a replica outside the ISR become leader
	// when no ISR member, and no eligible leader replica, is alive.
	UncleanLeaderElection = "unclean.leader.election.enable"
	RetentionMs           = "retention.ms"
	RetentionBytes        = "retention.bytes"
	SegmentBytes          = "segment.bytes"
	MaxMessageBytes       = "max.message.bytes"
	CleanupPolicy         = "cleanup.policy"
)

// ConfigType is a config's value type, as Kafka's ConfigDef names it.
type ConfigType string

// The config types Keel's configs have.
const (
	TypeBoolean ConfigType = "boolean"
	TypeInt     ConfigType = "int"
	TypeLong    ConfigType = "long"
	TypeList    ConfigType = "list"
)

// ConfigDef is one topic config: its name, type, built-in default and the
// values it takes.
type ConfigDef struct {
	Name    string
	Type    ConfigType
	Default string
	// Min and Max bound an int or long.
	Min, Max int64
	// Values are the items a list may hold.
	Values []string
	// Doc says what it does, for `keel config describe` and the docs.
	Doc string
}

// Range renders the values the config takes, as Kafka's docs do.
func (d ConfigDef) Range() string {
	switch d.Type {
	case TypeBoolean:
		return "true, false"
	case TypeList:
		return strings.Join(d.Values, ", ")
	}
	hi := "..."
	if (d.Type == TypeInt && d.Max != math.MaxInt32) || (d.Type == TypeLong && d.Max != math.MaxInt64) {
		hi = strconv.FormatInt(d.Max, 10)
	}
	if d.Min == math.MinInt64 {
		return "any"
	}
	return fmt.Sprintf("[%d,%s]", d.Min, hi)
}

// configDefs are Keel's topic configs, in name order. Defaults and ranges
// are Kafka 4's (segment.bytes at least 1 MiB since KIP-1030).
var configDefs = []ConfigDef{
	{Name: CleanupPolicy, Type: TypeList, Default: "delete", Values: []string{"delete"},
		Doc: "what happens to old log segments: delete (compact is not supported yet)"},
	{Name: MaxMessageBytes, Type: TypeInt, Default: "1048588", Min: 0, Max: math.MaxInt32,
		Doc: "the largest record batch the topic accepts"},
	{Name: MinInsyncReplicas, Type: TypeInt, Default: "1", Min: 1, Max: math.MaxInt32,
		Doc: "the fewest in-sync replicas an acks=all write needs; below it, replicas leaving the ISR become eligible leader replicas"},
	{Name: RetentionBytes, Type: TypeLong, Default: "-1", Min: math.MinInt64, Max: math.MaxInt64,
		Doc: "the most bytes a partition keeps before old segments go (-1: no limit)"},
	{Name: RetentionMs, Type: TypeLong, Default: "604800000", Min: -1, Max: math.MaxInt64,
		Doc: "how long a segment is kept, in milliseconds (-1: forever)"},
	{Name: SegmentBytes, Type: TypeInt, Default: "1073741824", Min: 1 << 20, Max: math.MaxInt32,
		Doc: "the size of one log segment"},
	{Name: UncleanLeaderElection, Type: TypeBoolean, Default: "false",
		Doc: "let a replica outside the ISR lead when no ISR member or eligible leader replica can (data may be lost)"},
}

// ConfigDefs returns every topic config Keel knows, in name order.
func ConfigDefs() []ConfigDef { return slices.Clone(configDefs) }

// LookupConfig returns the config named name.
func LookupConfig(name string) (ConfigDef, bool) {
	i, ok := slices.BinarySearchFunc(configDefs, name, func(d ConfigDef, n string) int { return strings.Compare(d.Name, n) })
	if !ok {
		return ConfigDef{}, false
	}
	return configDefs[i], true
}

// ConfigNames lists the configs Keel knows, in name order.
func ConfigNames() []string {
	out := make([]string, len(configDefs))
	for i, d := range configDefs {
		out[i] = d.Name
	}
	return out
}

// CheckConfig checks a config's name and value by Kafka's rules and returns
// the value in its one canonical form: booleans in any case ("TRUE" is
// true), numbers in decimal, list items trimmed and without repeats, as
// Kafka parses them. The error says what is wrong, naming the config but no
// request field.
func CheckConfig(name, value string) (string, error) {
	d, ok := LookupConfig(name)
	if !ok {
		return "", fmt.Errorf("unknown config %q; Keel knows %s", truncateName(name), strings.Join(ConfigNames(), ", "))
	}
	v := strings.TrimSpace(value)
	switch d.Type {
	case TypeBoolean:
		switch {
		case strings.EqualFold(v, "true"):
			return "true", nil
		case strings.EqualFold(v, "false"):
			return "false", nil
		}
		return "", fmt.Errorf("%s: %q is not a boolean (true or false)", name, truncateName(value))
	case TypeInt, TypeLong:
		bits := 64
		if d.Type == TypeInt {
			bits = 32
		}
		n, err := strconv.ParseInt(v, 10, bits)
		if err != nil {
			if errors.Is(err, strconv.ErrRange) {
				return "", fmt.Errorf("%s: %s is outside %s (a %d-bit %s)", name, truncateName(v), d.Range(), bits, d.Type)
			}
			return "", fmt.Errorf("%s: %q is not a whole number (%s)", name, truncateName(value), d.Type)
		}
		if n < d.Min || n > d.Max {
			return "", fmt.Errorf("%s: %d is outside %s", name, n, d.Range())
		}
		return strconv.FormatInt(n, 10), nil
	case TypeList:
		var items []string
		for _, item := range strings.Split(v, ",") {
			item = strings.TrimSpace(item)
			if item == "" || slices.Contains(items, item) {
				continue
			}
			if !slices.Contains(d.Values, item) {
				if name == CleanupPolicy && item == "compact" {
					return "", fmt.Errorf("%s: compact is not supported: Keel's brokers do not compact logs yet; only delete is", name)
				}
				return "", fmt.Errorf("%s: %q is not one of %s", name, truncateName(item), d.Range())
			}
			items = append(items, item)
		}
		if len(items) == 0 {
			return "", fmt.Errorf("%s: empty; want %s", name, d.Range())
		}
		return strings.Join(items, ","), nil
	}
	return "", fmt.Errorf("%s: unknown type %s", name, d.Type)
}

func truncateName(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// ConfigSource is where an effective config comes from.
type ConfigSource int

// The sources, from the most specific.
const (
	SourceTopic ConfigSource = iota + 1
	SourceClusterDefault
	SourceDefault
)

// String names the source as the CLI and its JSON do.
func (s ConfigSource) String() string {
	switch s {
	case SourceTopic:
		return "topic"
	case SourceClusterDefault:
		return "cluster_default"
	case SourceDefault:
		return "default"
	}
	return "unknown"
}

// ConfigValue is one config in effect.
type ConfigValue struct {
	Name   string
	Value  string
	Source ConfigSource
}

// ClusterConfig returns the cluster-wide default of a config, if one is set.
func (img *Image) ClusterConfig(name string) (string, bool) {
	v, ok := img.clusterConfigs[name]
	return v, ok
}

// ClusterConfigs returns a copy of the cluster-wide defaults that are set.
func (img *Image) ClusterConfigs() map[string]string { return maps.Clone(img.clusterConfigs) }

// ClusterDefaults returns every config as a topic without configs of its
// own has it: the cluster default or the built-in one, in name order.
func (img *Image) ClusterDefaults() []ConfigValue {
	out := make([]ConfigValue, len(configDefs))
	for i, d := range configDefs {
		out[i] = img.resolve(nil, d)
	}
	return out
}

// TopicConfig returns the config name in effect for topic t (nil: a topic
// with no configs of its own), and where it comes from. An unknown name
// has an empty value and no source.
func (img *Image) TopicConfig(t *Topic, name string) ConfigValue {
	d, ok := LookupConfig(name)
	if !ok {
		return ConfigValue{Name: name}
	}
	return img.resolve(t, d)
}

// TopicConfigs returns every config in effect for t, in name order.
func (img *Image) TopicConfigs(t *Topic) []ConfigValue {
	out := make([]ConfigValue, len(configDefs))
	for i, d := range configDefs {
		out[i] = img.resolve(t, d)
	}
	return out
}

func (img *Image) resolve(t *Topic, d ConfigDef) ConfigValue {
	if t != nil {
		if v, ok := t.Configs[d.Name]; ok {
			return ConfigValue{Name: d.Name, Value: v, Source: SourceTopic}
		}
	}
	if v, ok := img.clusterConfigs[d.Name]; ok {
		return ConfigValue{Name: d.Name, Value: v, Source: SourceClusterDefault}
	}
	return ConfigValue{Name: d.Name, Value: d.Default, Source: SourceDefault}
}

// UncleanElection reports whether topic t allows unclean leader election:
// its own config, else the cluster default, else false. Booleans are
// Kafka's: case does not matter.
func (img *Image) UncleanElection(t *Topic) bool {
	return strings.EqualFold(strings.TrimSpace(img.TopicConfig(t, UncleanLeaderElection).Value), "true")
}

// MinISR returns topic t's min.insync.replicas in effect, at least 1.
func (img *Image) MinISR(t *Topic) int32 {
	n, err := strconv.ParseInt(strings.TrimSpace(img.TopicConfig(t, MinInsyncReplicas).Value), 10, 32)
	if err != nil || n < 1 {
		return 1
	}
	return int32(n)
}

// checkConfigs checks a topic's configs as a TopicRecord carries them.
func checkConfigs(configs map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(configs)) {
		if _, err := CheckConfig(k, configs[k]); err != nil {
			return err
		}
	}
	return nil
}

func applyConfig(img *Image, rec *keelpb.Record, ctx *applyContext) error {
	r := rec.GetConfig()
	if r.Value != nil {
		if _, err := CheckConfig(r.GetName(), r.GetValue()); err != nil {
			return err
		}
	} else if _, ok := LookupConfig(r.GetName()); !ok {
		return fmt.Errorf("unknown config %q", truncateName(r.GetName()))
	}
	edit := func(m map[string]string) map[string]string {
		m = maps.Clone(m)
		if r.Value == nil {
			delete(m, r.GetName())
		} else {
			if m == nil {
				m = map[string]string{}
			}
			m[r.GetName()] = r.GetValue()
		}
		if len(m) == 0 {
			return nil
		}
		return m
	}
	switch r.GetResourceType() {
	case keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER:
		if r.GetResourceName() != "" {
			return fmt.Errorf("the cluster's configs have no resource name, not %q", truncateName(r.GetResourceName()))
		}
		// The map is never modified once published: a change copies it
		// (there are a handful of entries).
		img.clusterConfigs = edit(img.clusterConfigs)
	case keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC:
		t, ok := img.topicsByName.get(topicName(r.GetResourceName()))
		if !ok {
			return fmt.Errorf("topic %q does not exist", truncateName(r.GetResourceName()))
		}
		e, _ := ctx.topic(img, t.ID)
		e = ctx.mutTopic(img, e)
		// Configs may be shared with the topic's published versions.
		e.topic.Configs = edit(e.topic.Configs)
		ctx.setTopic(img, e)
	default:
		return fmt.Errorf("resource type %v is not topic or cluster", r.GetResourceType())
	}
	return nil
}

// configRecords lists the cluster-wide defaults as records, in name order,
// for a snapshot.
func configRecords(img *Image, emit func(*keelpb.Record) error) error {
	for _, k := range slices.Sorted(maps.Keys(img.clusterConfigs)) {
		v := img.clusterConfigs[k]
		rec := &keelpb.ConfigRecord{ResourceType: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER, Name: k, Value: &v}
		if err := emit(&keelpb.Record{Record: &keelpb.Record_Config{Config: rec}}); err != nil {
			return err
		}
	}
	return nil
}
