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

// The topic configs Keel's own code reads by name.
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
	SegmentMs             = "segment.ms"
	SegmentIndexBytes     = "segment.index.bytes"
	IndexIntervalBytes    = "index.interval.bytes"
	MaxMessageBytes       = "max.message.bytes"
	CleanupPolicy         = "cleanup.policy"
	// DeleteRetentionMs, MinCleanableDirtyRatio and MinCompactionLagMs
	// are the log cleaner's, for cleanup.policy=compact.
	DeleteRetentionMs      = "delete.retention.ms"
	MinCleanableDirtyRatio = "min.cleanable.dirty.ratio"
	MinCompactionLagMs     = "min.compaction.lag.ms"
	CompressionType        = "compression.type"
	// MessageTimestampType is CreateTime (the producer's timestamps) or
	// LogAppendTime (the leader stamps each batch as it appends it).
	MessageTimestampType = "message.timestamp.type"
	// MessageTimestampBeforeMaxMs and MessageTimestampAfterMaxMs bound how
	// far a CreateTime record's timestamp may be before or after the
	// leader's clock (KIP-937).
	MessageTimestampBeforeMaxMs = "message.timestamp.before.max.ms"
	MessageTimestampAfterMaxMs  = "message.timestamp.after.max.ms"
	// LeaderReplicationThrottledRate and FollowerReplicationThrottledRate
	// are Kafka's broker configs of the same names: the bytes/s each
	// broker sends, as leader, and fetches, as follower, for the replicas
	// a reassignment is adding (ReplicationThrottled). Cluster-wide only.
	LeaderReplicationThrottledRate   = "leader.replication.throttled.rate"
	FollowerReplicationThrottledRate = "follower.replication.throttled.rate"
	// AutoCreateTopicsEnable, NumPartitions and DefaultReplicationFactor
	// are Kafka's broker configs of the same names: whether a Metadata
	// request for a topic that does not exist creates it, and the
	// partitions and replicas of a topic created without them (by
	// Metadata, or a CreateTopics that leaves them to the broker).
	// Cluster-wide only.
	AutoCreateTopicsEnable   = "auto.create.topics.enable"
	NumPartitions            = "num.partitions"
	DefaultReplicationFactor = "default.replication.factor"
)

// The values of message.timestamp.type.
const (
	CreateTime    = "CreateTime"
	LogAppendTime = "LogAppendTime"
)

// ConfigType is a config's value type, as Kafka's ConfigDef names it.
type ConfigType string

// The config types Keel's configs have.
const (
	TypeBoolean ConfigType = "boolean"
	TypeInt     ConfigType = "int"
	TypeLong    ConfigType = "long"
	TypeDouble  ConfigType = "double"
	TypeString  ConfigType = "string"
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
	// MinF and MaxF bound a double.
	MinF, MaxF float64
	// Values are the items a list may hold, or the values a string takes
	// (case matters, as in Kafka's ValidString). A list with none takes
	// items of the form check gives.
	Values []string
	// Synonym is the broker config Kafka takes the default from
	// (ServerTopicConfigSynonyms: log.retention.ms for retention.ms), for
	// DescribeConfigs' synonyms; empty for a config with no cluster default
	// (the replication throttles).
	Synonym string
	// Unsupported, when set, says why Keel's data plane cannot honour the
	// config yet: only its default is taken, and any other value is
	// refused with this reason. Every config without it takes effect on
	// every broker as soon as it has replayed the change.
	Unsupported string
	// Broker marks a broker config (Kafka's DynamicConfig.Broker): the
	// cluster holds it, and no topic takes it.
	Broker bool
	// Doc says what it does, for `keel config describe` and the docs.
	Doc string
	// check, when set, checks a list's items (each trimmed, not empty).
	check func(item string) error
}

// Honoured reports whether any valid value takes effect: the data plane
// enforces the config. One that is not takes only its default.
func (d ConfigDef) Honoured() bool { return d.Unsupported == "" }

// Range renders the values the config takes, as Kafka's docs do.
func (d ConfigDef) Range() string {
	switch d.Type {
	case TypeBoolean:
		return "true, false"
	case TypeString:
		return strings.Join(d.Values, ", ")
	case TypeList:
		if len(d.Values) == 0 {
			return "[partition]:[broker],... or *"
		}
		return strings.Join(d.Values, ", ")
	case TypeDouble:
		return fmt.Sprintf("[%s,...,%s]", formatDouble(d.MinF), formatDouble(d.MaxF))
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

// The reasons configs the data plane cannot honour yet are refused at any
// value but their default.
const (
	noMaxLag        = "Keel's log cleaner cleans by dirty ratio only, not by a record's age"
	noTieredStorage = "tiered storage is not supported"
	noRecompression = "the broker does not recompress batches yet: they are kept as the producer compressed them (compression.type=producer)"
	noThrottles     = "Keel throttles the replicas a reassignment adds, by leader.replication.throttled.rate and follower.replication.throttled.rate, not by a list"
	brokerFlush     = "fsync is the broker's policy (keel broker --flush-interval), not a topic's"
)

// configDefs are Keel's topic configs: every one of Kafka 4's (LogConfig),
// in name order. Defaults and ranges are Kafka 4's (KIP-1030: segment.bytes
// at least 1 MiB, message.timestamp.after.max.ms one hour).
var configDefs = []ConfigDef{
	{Name: AutoCreateTopicsEnable, Type: TypeBoolean, Default: "true", Synonym: AutoCreateTopicsEnable, Broker: true,
		Doc: "a Kafka client's Metadata request for a topic that does not exist creates it, if the client may create it " +
			"(CREATE on the cluster or the topic), with num.partitions and default.replication.factor"},
	{Name: CleanupPolicy, Type: TypeList, Default: "delete", Values: []string{"compact", "delete"}, Synonym: "log.cleanup.policy",
		Doc: "what happens to old log segments: delete (by retention.ms and retention.bytes), compact (the newest record of each key is kept), or both"},
	{Name: "compression.gzip.level", Type: TypeInt, Default: "-1", Min: -1, Max: 9, Synonym: "compression.gzip.level", Unsupported: noRecompression,
		Doc: "the gzip level the broker compresses at, when compression.type is gzip"},
	{Name: "compression.lz4.level", Type: TypeInt, Default: "9", Min: 1, Max: 17, Synonym: "compression.lz4.level", Unsupported: noRecompression,
		Doc: "the lz4 level the broker compresses at, when compression.type is lz4"},
	{Name: CompressionType, Type: TypeString, Default: "producer", Values: []string{"uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"},
		Synonym: "compression.type", Unsupported: noRecompression,
		Doc: "the codec the broker stores batches in; producer keeps the producer's"},
	{Name: "compression.zstd.level", Type: TypeInt, Default: "3", Min: -131072, Max: 22, Synonym: "compression.zstd.level", Unsupported: noRecompression,
		Doc: "the zstd level the broker compresses at, when compression.type is zstd"},
	{Name: DefaultReplicationFactor, Type: TypeInt, Default: "1", Min: 1, Max: math.MaxInt16, Synonym: DefaultReplicationFactor, Broker: true,
		Doc: "the replicas of each partition of a topic created without a replication factor (auto-created, or CreateTopics with -1)"},
	{Name: DeleteRetentionMs, Type: TypeLong, Default: "86400000", Min: 0, Max: math.MaxInt64, Synonym: "log.cleaner.delete.retention.ms",
		Doc: "how long a compacted topic keeps delete markers"},
	{Name: "file.delete.delay.ms", Type: TypeLong, Default: "60000", Min: 0, Max: math.MaxInt64, Synonym: "log.segment.delete.delay.ms",
		Unsupported: "Keel deletes a segment's files as soon as retention removes it",
		Doc:         "how long a deleted segment's files stay on disk"},
	{Name: "flush.messages", Type: TypeLong, Default: "9223372036854775807", Min: 1, Max: math.MaxInt64, Synonym: "log.flush.interval.messages", Unsupported: brokerFlush,
		Doc: "fsync the log every this many records"},
	{Name: "flush.ms", Type: TypeLong, Default: "9223372036854775807", Min: 0, Max: math.MaxInt64, Synonym: "log.flush.interval.ms", Unsupported: brokerFlush,
		Doc: "fsync the log when its last fsync is this old"},
	{Name: FollowerReplicationThrottledRate, Type: TypeLong, Default: "9223372036854775807", Min: 0, Max: math.MaxInt64,
		Synonym: FollowerReplicationThrottledRate, Broker: true,
		Doc: "the bytes/s each broker fetches, as follower, for the replicas a reassignment adds that are not in sync yet"},
	{Name: "follower.replication.throttled.replicas", Type: TypeList, Default: "", Unsupported: noThrottles,
		Doc: "the replicas whose follower fetches are throttled", check: throttledReplica},
	{Name: IndexIntervalBytes, Type: TypeInt, Default: "4096", Min: 0, Max: math.MaxInt32, Synonym: "log.index.interval.bytes",
		Doc: "the bytes of batches between two offset index entries"},
	{Name: LeaderReplicationThrottledRate, Type: TypeLong, Default: "9223372036854775807", Min: 0, Max: math.MaxInt64,
		Synonym: LeaderReplicationThrottledRate, Broker: true,
		Doc: "the bytes/s each broker sends, as leader, to the replicas a reassignment adds that are not in sync yet"},
	{Name: "leader.replication.throttled.replicas", Type: TypeList, Default: "", Unsupported: noThrottles,
		Doc: "the replicas whose leader side of replication is throttled", check: throttledReplica},
	{Name: "local.retention.bytes", Type: TypeLong, Default: "-2", Min: -2, Max: math.MaxInt64, Synonym: "log.local.retention.bytes", Unsupported: noTieredStorage,
		Doc: "the bytes kept on local disk when tiered storage is on (-2: retention.bytes)"},
	{Name: "local.retention.ms", Type: TypeLong, Default: "-2", Min: -2, Max: math.MaxInt64, Synonym: "log.local.retention.ms", Unsupported: noTieredStorage,
		Doc: "how long a segment stays on local disk when tiered storage is on (-2: retention.ms)"},
	{Name: "max.compaction.lag.ms", Type: TypeLong, Default: "9223372036854775807", Min: 1, Max: math.MaxInt64, Synonym: "log.cleaner.max.compaction.lag.ms", Unsupported: noMaxLag,
		Doc: "the longest a record stays uncompacted"},
	{Name: MaxMessageBytes, Type: TypeInt, Default: "1048588", Min: 0, Max: math.MaxInt32, Synonym: "message.max.bytes",
		Doc: "the largest record batch the topic accepts, up to the broker's frame cap (keel broker --kafka-max-request-size)"},
	{Name: MessageTimestampAfterMaxMs, Type: TypeLong, Default: "3600000", Min: 0, Max: math.MaxInt64, Synonym: "log.message.timestamp.after.max.ms",
		Doc: "how far after the leader's clock a CreateTime record's timestamp may be"},
	{Name: MessageTimestampBeforeMaxMs, Type: TypeLong, Default: "9223372036854775807", Min: 0, Max: math.MaxInt64, Synonym: "log.message.timestamp.before.max.ms",
		Doc: "how far before the leader's clock a CreateTime record's timestamp may be"},
	{Name: MessageTimestampType, Type: TypeString, Default: CreateTime, Values: []string{CreateTime, LogAppendTime}, Synonym: "log.message.timestamp.type",
		Doc: "CreateTime keeps the producer's timestamps; LogAppendTime has the leader stamp each batch"},
	{Name: MinCleanableDirtyRatio, Type: TypeDouble, Default: "0.5", MinF: 0, MaxF: 1, Synonym: "log.cleaner.min.cleanable.ratio",
		Doc: "the share of a compacted log not yet cleaned that starts the cleaner"},
	{Name: MinCompactionLagMs, Type: TypeLong, Default: "0", Min: 0, Max: math.MaxInt64, Synonym: "log.cleaner.min.compaction.lag.ms",
		Doc: "the shortest a record stays uncompacted"},
	{Name: MinInsyncReplicas, Type: TypeInt, Default: "1", Min: 1, Max: math.MaxInt32, Synonym: "min.insync.replicas",
		Doc: "the fewest in-sync replicas an acks=all write needs; below it, replicas leaving the ISR become eligible leader replicas"},
	{Name: NumPartitions, Type: TypeInt, Default: "1", Min: 1, Max: math.MaxInt32, Synonym: NumPartitions, Broker: true,
		Doc: "the partitions of a topic created without a count (auto-created, or CreateTopics with -1)"},
	{Name: "preallocate", Type: TypeBoolean, Default: "false", Synonym: "log.preallocate", Unsupported: "Keel does not preallocate segment files",
		Doc: "preallocate a new segment's file"},
	{Name: "remote.log.copy.disable", Type: TypeBoolean, Default: "false", Unsupported: noTieredStorage,
		Doc: "stop copying segments to tiered storage"},
	{Name: "remote.log.delete.on.disable", Type: TypeBoolean, Default: "false", Unsupported: noTieredStorage,
		Doc: "delete tiered segments when tiered storage is turned off"},
	{Name: "remote.storage.enable", Type: TypeBoolean, Default: "false", Unsupported: noTieredStorage,
		Doc: "keep old segments in tiered storage"},
	{Name: RetentionBytes, Type: TypeLong, Default: "-1", Min: math.MinInt64, Max: math.MaxInt64, Synonym: "log.retention.bytes",
		Doc: "the most bytes a partition keeps before old segments go (-1: no limit)"},
	{Name: RetentionMs, Type: TypeLong, Default: "604800000", Min: -1, Max: math.MaxInt64, Synonym: "log.retention.ms",
		Doc: "how long a segment is kept, in milliseconds (-1: forever)"},
	{Name: SegmentBytes, Type: TypeInt, Default: "1073741824", Min: 1 << 20, Max: math.MaxInt32, Synonym: "log.segment.bytes",
		Doc: "the size of one log segment"},
	{Name: SegmentIndexBytes, Type: TypeInt, Default: "10485760", Min: 4, Max: math.MaxInt32, Synonym: "log.index.size.max.bytes",
		Doc: "the size of a segment's offset index; a full index rolls the segment"},
	{Name: "segment.jitter.ms", Type: TypeLong, Default: "0", Min: 0, Max: math.MaxInt64, Synonym: "log.roll.jitter.ms",
		Unsupported: "segments roll at segment.ms exactly", Doc: "the most a segment's roll by age is brought forward, at random"},
	{Name: SegmentMs, Type: TypeLong, Default: "604800000", Min: 1, Max: math.MaxInt64, Synonym: "log.roll.ms",
		Doc: "roll the active segment when its first batch is this old"},
	{Name: UncleanLeaderElection, Type: TypeBoolean, Default: "false", Synonym: "unclean.leader.election.enable",
		Doc: "let a replica outside the ISR lead when no ISR member or eligible leader replica can (data may be lost)"},
}

// throttledReplica checks an item of a replication throttle list: *, or
// partition:broker (Kafka's ThrottledReplicaListValidator).
func throttledReplica(item string) error {
	if item == "*" {
		return nil
	}
	p, b, ok := strings.Cut(item, ":")
	if ok {
		_, err1 := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
		_, err2 := strconv.ParseInt(strings.TrimSpace(b), 10, 32)
		if err1 == nil && err2 == nil {
			return nil
		}
	}
	return fmt.Errorf("%q is not [partition]:[broker] or *", Truncate(item))
}

func formatDouble(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

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
// Kafka parses them. A config the data plane cannot honour yet takes only
// its default, and any other value is refused with the reason. The error
// says what is wrong, naming the config but no request field.
func CheckConfig(name, value string) (string, error) {
	d, ok := LookupConfig(name)
	if !ok {
		return "", fmt.Errorf("unknown config %q: not one of Kafka's topic configs ('keel topic alter --help' lists them)", Truncate(name))
	}
	v, err := d.canonical(value)
	if err != nil {
		return "", err
	}
	if d.Unsupported != "" && v != d.Default {
		return "", fmt.Errorf("%s: only the default %q is supported: %s", name, d.Default, d.Unsupported)
	}
	return v, nil
}

// canonical checks value against d's type and range, and returns it in
// canonical form.
func (d ConfigDef) canonical(value string) (string, error) {
	name := d.Name
	v := strings.TrimSpace(value)
	switch d.Type {
	case TypeBoolean:
		switch {
		case strings.EqualFold(v, "true"):
			return "true", nil
		case strings.EqualFold(v, "false"):
			return "false", nil
		}
		return "", fmt.Errorf("%s: %q is not a boolean (true or false)", name, Truncate(value))
	case TypeInt, TypeLong:
		bits := 64
		if d.Type == TypeInt {
			bits = 32
		}
		n, err := strconv.ParseInt(v, 10, bits)
		if err != nil {
			if errors.Is(err, strconv.ErrRange) {
				return "", fmt.Errorf("%s: %s is outside %s (a %d-bit %s)", name, Truncate(v), d.Range(), bits, d.Type)
			}
			return "", fmt.Errorf("%s: %q is not a whole number (%s)", name, Truncate(value), d.Type)
		}
		if n < d.Min || n > d.Max {
			return "", fmt.Errorf("%s: %d is outside %s", name, n, d.Range())
		}
		return strconv.FormatInt(n, 10), nil
	case TypeDouble:
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return "", fmt.Errorf("%s: %q is not a number (double)", name, Truncate(value))
		}
		if f < d.MinF || f > d.MaxF {
			return "", fmt.Errorf("%s: %s is outside %s", name, formatDouble(f), d.Range())
		}
		return formatDouble(f), nil
	case TypeString:
		// Kafka's ValidString: exact, case and all.
		if !slices.Contains(d.Values, v) {
			return "", fmt.Errorf("%s: %q is not one of %s", name, Truncate(value), d.Range())
		}
		return v, nil
	case TypeList:
		var items []string
		for _, item := range strings.Split(v, ",") {
			item = strings.TrimSpace(item)
			if item == "" || slices.Contains(items, item) {
				continue
			}
			switch {
			case d.check != nil:
				if err := d.check(item); err != nil {
					return "", fmt.Errorf("%s: %w", name, err)
				}
			case !slices.Contains(d.Values, item):
				if name == CleanupPolicy && item == "compact" {
					return "", fmt.Errorf("%s: compact is not supported: it needs the log cleaner, which Keel's brokers do not have yet; only delete is", name)
				}
				return "", fmt.Errorf("%s: %q is not one of %s", name, Truncate(item), d.Range())
			}
			items = append(items, item)
		}
		if len(items) == 0 && d.Default != "" {
			return "", fmt.Errorf("%s: empty; want %s", name, d.Range())
		}
		return strings.Join(items, ","), nil
	}
	return "", fmt.Errorf("%s: unknown type %s", name, d.Type)
}

// Truncate shortens s, a name or value from a request quoted in an
// error, to 64 bytes and an ellipsis: an error never echoes a megabyte.
func Truncate(s string) string {
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

// TopicConfigs returns every topic config in effect for t, in name order:
// not the broker configs, which no topic takes.
func (img *Image) TopicConfigs(t *Topic) []ConfigValue {
	out := make([]ConfigValue, 0, len(configDefs))
	for _, d := range configDefs {
		if !d.Broker {
			out = append(out, img.resolve(t, d))
		}
	}
	return out
}

// ReplicationThrottle returns the leader and follower replication
// throttles in effect, in bytes/s (math.MaxInt64: none).
func (img *Image) ReplicationThrottle() (leader, follower int64) {
	rate := func(name string) int64 {
		v, ok := img.clusterConfigs[name]
		if !ok {
			return math.MaxInt64
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return math.MaxInt64
		}
		return n
	}
	return rate(LeaderReplicationThrottledRate), rate(FollowerReplicationThrottledRate)
}

// AutoCreate is how the cluster creates a topic a Kafka client names
// that does not exist: whether it does (auto.create.topics.enable), and
// with how many partitions (num.partitions) of how many replicas
// (default.replication.factor). The same counts stand in for a
// CreateTopics that leaves them to the broker.
type AutoCreate struct {
	Enabled           bool
	Partitions        int32
	ReplicationFactor int32
}

// AutoCreate returns the cluster's auto-creation settings in effect: the
// cluster-wide values, else Kafka's defaults (on, 1 partition, 1
// replica). Below AutoCreateMetadataVersion no broker creates topics: the
// operator could not turn it off, and brokers from before it do not.
func (img *Image) AutoCreate() AutoCreate {
	count := func(name string) int32 {
		n, err := strconv.ParseInt(img.TopicConfig(nil, name).Value, 10, 32)
		if err != nil || n < 1 {
			return 1
		}
		return int32(n)
	}
	return AutoCreate{
		Enabled: img.FinalizedMetadataVersion() >= AutoCreateMetadataVersion &&
			img.TopicConfig(nil, AutoCreateTopicsEnable).Value == "true",
		Partitions:        count(NumPartitions),
		ReplicationFactor: count(DefaultReplicationFactor),
	}
}

// CheckTopicConfig is CheckConfig for a topic's own value: a broker
// config is the cluster's only.
func CheckTopicConfig(name, value string) (string, error) {
	if d, ok := LookupConfig(name); ok && d.Broker {
		return "", errBrokerConfig(name)
	}
	return CheckConfig(name, value)
}

func errBrokerConfig(name string) error {
	return fmt.Errorf("%s is a broker config: set it cluster-wide ('keel config alter'), not on a topic", name)
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
func checkConfigs(img *Image, configs map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(configs)) {
		if _, err := CheckTopicConfig(k, configs[k]); err != nil {
			return err
		}
		if err := checkConfigLevel(img, k, configs[k]); err != nil {
			return err
		}
	}
	return nil
}

// firstConfigs are the configs Keel knew before TopicConfigsMetadataVersion:
// a binary from before it refuses any other, so no record names one below
// that level.
var firstConfigs = []string{CleanupPolicy, MaxMessageBytes, MinInsyncReplicas, RetentionBytes, RetentionMs, SegmentBytes, UncleanLeaderElection}

// ConfigLevel is the metadata.version that introduced the config name.
func ConfigLevel(name string) uint32 {
	if slices.Contains(firstConfigs, name) {
		return 1
	}
	switch name {
	case LeaderReplicationThrottledRate, FollowerReplicationThrottledRate:
		return ThrottleMetadataVersion
	case AutoCreateTopicsEnable, NumPartitions, DefaultReplicationFactor:
		return AutoCreateMetadataVersion
	}
	return TopicConfigsMetadataVersion
}

// cleanerConfigs are the log cleaner's configs: a binary below
// CompactionMetadataVersion takes only their defaults.
var cleanerConfigs = []string{DeleteRetentionMs, MinCleanableDirtyRatio, MinCompactionLagMs}

// ConfigValueLevel is the metadata.version a config's canonical value
// needs: ConfigLevel(name), and CompactionMetadataVersion for
// cleanup.policy with compact and for a cleaner config off its default,
// which a binary below that level refuses.
func ConfigValueLevel(name, value string) uint32 {
	level := ConfigLevel(name)
	switch {
	case name == CleanupPolicy && slices.Contains(strings.Split(value, ","), "compact"),
		slices.Contains(cleanerConfigs, name) && value != configDefault(name):
		level = max(level, CompactionMetadataVersion)
	}
	return level
}

// configDefault is a known config's default.
func configDefault(name string) string {
	d, _ := LookupConfig(name)
	return d.Default
}

// checkConfigLevel refuses a config value the image's finalized level
// does not allow yet.
func checkConfigLevel(img *Image, name, value string) error {
	if need, have := ConfigValueLevel(name, value), img.FinalizedMetadataVersion(); need > have {
		what := name
		if need > ConfigLevel(name) {
			what = name + "=" + value
		}
		return fmt.Errorf("%w: %s needs %s %d; the cluster is at %d", ErrAboveMetadataVersion, what, MetadataVersionFeature, need, have)
	}
	return nil
}

// levelConfigs counts the topics and cluster defaults that hold a config
// value of level or above, which a lower level cannot express.
func (img *Image) levelConfigs(level uint32) int {
	above := func(configs map[string]string) bool {
		for k, v := range configs {
			if ConfigValueLevel(k, v) >= level {
				return true
			}
		}
		return false
	}
	n := 0
	if above(img.clusterConfigs) {
		n++
	}
	for _, t := range img.Topics() {
		if above(t.Configs) {
			n++
		}
	}
	return n
}

func applyConfig(img *Image, rec *keelpb.Record, ctx *applyContext) error {
	r := rec.GetConfig()
	if r.Value != nil {
		if _, err := CheckConfig(r.GetName(), r.GetValue()); err != nil {
			return err
		}
		if err := checkConfigLevel(img, r.GetName(), r.GetValue()); err != nil {
			return err
		}
	} else if _, ok := LookupConfig(r.GetName()); !ok {
		return fmt.Errorf("unknown config %q", Truncate(r.GetName()))
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
			return fmt.Errorf("the cluster's configs have no resource name, not %q", Truncate(r.GetResourceName()))
		}
		// The map is never modified once published: a change copies it
		// (there are a handful of entries).
		img.clusterConfigs = edit(img.clusterConfigs)
	case keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC:
		t, ok := img.topicsByName.get(topicName(r.GetResourceName()))
		if !ok {
			return fmt.Errorf("topic %q does not exist", Truncate(r.GetResourceName()))
		}
		if d, _ := LookupConfig(r.GetName()); d.Broker {
			return errBrokerConfig(r.GetName())
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
