package fsm

import (
	"bytes"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/keel-dev/keel/proto/keelpb"
)

// configRec sets (value non-nil) or deletes a config of a topic (name) or
// of the cluster (name "").
func configRec(resource, name string, value *string) *keelpb.Record {
	typ := keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC
	if resource == "" {
		typ = keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER
	}
	return &keelpb.Record{Record: &keelpb.Record_Config{Config: &keelpb.ConfigRecord{
		ResourceType: typ, ResourceName: resource, Name: name, Value: value}}}
}

func str(s string) *string { return &s }

// TestCheckConfig: Kafka's names, types and ranges (LogConfig, with
// KIP-1030's segment.bytes floor), case-insensitive booleans, and the
// canonical form values are stored in.
func TestCheckConfig(t *testing.T) {
	tests := []struct {
		name, value string
		want        string
		wantErr     string
	}{
		{UncleanLeaderElection, "true", "true", ""},
		{UncleanLeaderElection, "TRUE", "true", ""},
		{UncleanLeaderElection, " False ", "false", ""},
		{UncleanLeaderElection, "yes", "", `"yes" is not a boolean`},
		{UncleanLeaderElection, "", "", "is not a boolean"},
		{MinInsyncReplicas, "2", "2", ""},
		{MinInsyncReplicas, "+3", "3", ""},
		{MinInsyncReplicas, "0", "", "0 is outside [1,...]"},
		{MinInsyncReplicas, "2147483648", "", "outside [1,...] (a 32-bit int)"},
		{MinInsyncReplicas, "two", "", "is not a whole number"},
		{RetentionMs, "-1", "-1", ""},
		{RetentionMs, "-2", "", "-2 is outside [-1,...]"},
		{RetentionMs, "9223372036854775807", "9223372036854775807", ""},
		{RetentionMs, "1.5", "", "not a whole number"},
		{RetentionBytes, "-5", "-5", ""},
		{RetentionBytes, "1073741824", "1073741824", ""},
		{SegmentBytes, "1048576", "1048576", ""},
		{SegmentBytes, "1048575", "", "1048575 is outside [1048576,...]"},
		{SegmentBytes, "14", "", "outside"},
		{MaxMessageBytes, "0", "0", ""},
		{MaxMessageBytes, "-1", "", "-1 is outside [0,...]"},
		{CleanupPolicy, "delete", "delete", ""},
		{CleanupPolicy, " delete , delete", "delete", ""},
		{CleanupPolicy, "compact", "compact", ""},
		{CleanupPolicy, "compact, delete", "compact,delete", ""},
		{CleanupPolicy, "Delete", "", `"Delete" is not one of compact, delete`},
		{CleanupPolicy, "", "", "empty"},
		{"retention.hours", "1", "", `unknown config "retention.hours": not one of Kafka's topic configs`},
		// LogConfigTest.testFromPropsInvalid: each type refuses what does
		// not parse, and each range what is outside it.
		{SegmentMs, "0", "", "segment.ms: 0 is outside [1,...]"},
		{SegmentMs, "3600000", "3600000", ""},
		{SegmentIndexBytes, "3", "", "outside [4,...]"},
		{IndexIntervalBytes, "-1", "", "outside [0,...]"},
		{MaxMessageBytes, "3000000", "3000000", ""},
		{MessageTimestampAfterMaxMs, "-1", "", "outside [0,...]"},
		{MessageTimestampBeforeMaxMs, "86400000", "86400000", ""},
		// ConfigDefTest.testValidators: ValidString is exact, case and all.
		{MessageTimestampType, "LogAppendTime", "LogAppendTime", ""},
		{MessageTimestampType, " CreateTime ", "CreateTime", ""},
		{MessageTimestampType, "logappendtime", "", `"logappendtime" is not one of CreateTime, LogAppendTime`},
		{"min.cleanable.dirty.ratio", "0.5", "0.5", ""},
		{"min.cleanable.dirty.ratio", ".50", "0.5", ""},
		{"min.cleanable.dirty.ratio", "1.5", "", "1.5 is outside [0,...,1]"},
		{"min.cleanable.dirty.ratio", "NaN", "", "is not a number"},
		{"leader.replication.throttled.replicas", "", "", ""},
		{"leader.replication.throttled.replicas", "0:x", "", `"0:x" is not [partition]:[broker] or *`},
		// Configs the data plane cannot honour take their default (in any
		// spelling of it) and refuse anything else, saying why.
		{CompressionType, "producer", "producer", ""},
		{CompressionType, "zstd", "", "compression.type: only the default \"producer\" is supported: the broker does not recompress"},
		{CompressionType, "brotli", "", `"brotli" is not one of uncompressed, zstd`},
		{"compression.gzip.level", "0", "", "only the default"},
		{"compression.gzip.level", "10", "", "10 is outside [-1,9]"},
		{"remote.storage.enable", "FALSE", "false", ""},
		{"remote.storage.enable", "true", "", "remote.storage.enable: only the default \"false\" is supported: tiered storage is not supported"},
		{"local.retention.ms", "-2", "-2", ""},
		{"local.retention.ms", "1000", "", "tiered storage"},
		{"delete.retention.ms", "1000", "1000", ""},
		{"min.cleanable.dirty.ratio", "0.2", "0.2", ""},
		{"min.compaction.lag.ms", "60000", "60000", ""},
		{"max.compaction.lag.ms", "60000", "", "cleans by dirty ratio only"},
		{"leader.replication.throttled.replicas", "*", "", "Keel throttles the replicas a reassignment adds"},
		// The replication throttles: bytes/s, a long of at least 0 (Kafka's
		// DynamicConfig.Broker validators).
		{LeaderReplicationThrottledRate, "2000000", "2000000", ""},
		{FollowerReplicationThrottledRate, " 0 ", "0", ""},
		{FollowerReplicationThrottledRate, "-1", "", "outside [0,...]"},
		{LeaderReplicationThrottledRate, "10MB", "", "leader.replication.throttled.rate"},
		{"flush.messages", "1", "", "keel broker --flush-interval"},
		{"flush.ms", "9223372036854775807", "9223372036854775807", ""},
		{"segment.jitter.ms", "10", "", "segments roll at segment.ms exactly"},
		{"preallocate", "true", "", "does not preallocate"},
	}
	for _, tt := range tests {
		t.Run(tt.name+"="+tt.value, func(t *testing.T) {
			got, err := CheckConfig(tt.name, tt.value)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("CheckConfig = %q, %v; want an error with %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("CheckConfig = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	// Every default is a value its own config takes.
	for _, d := range ConfigDefs() {
		if v, err := CheckConfig(d.Name, d.Default); err != nil || v != d.Default {
			t.Errorf("%s: default %q checks to %q, %v", d.Name, d.Default, v, err)
		}
	}
	if !slices.IsSorted(ConfigNames()) {
		t.Errorf("configs are not in name order: %v", ConfigNames())
	}
}

// TestConfigDefs_KafkaTopicConfigs: every standard Kafka 4 topic config is
// known, with the broker synonym DescribeConfigs names (LogConfig,
// ServerTopicConfigSynonyms), and says whether the data plane honours it.
func TestConfigDefs_KafkaTopicConfigs(t *testing.T) {
	kafka := map[string]string{
		"cleanup.policy": "log.cleanup.policy", "compression.gzip.level": "compression.gzip.level",
		"compression.lz4.level": "compression.lz4.level", "compression.type": "compression.type",
		"compression.zstd.level": "compression.zstd.level", "delete.retention.ms": "log.cleaner.delete.retention.ms",
		"file.delete.delay.ms": "log.segment.delete.delay.ms", "flush.messages": "log.flush.interval.messages",
		"flush.ms": "log.flush.interval.ms", "follower.replication.throttled.replicas": "",
		"index.interval.bytes": "log.index.interval.bytes", "leader.replication.throttled.replicas": "",
		"local.retention.bytes": "log.local.retention.bytes", "local.retention.ms": "log.local.retention.ms",
		"max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms", "max.message.bytes": "message.max.bytes",
		"message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms", "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
		"message.timestamp.type": "log.message.timestamp.type", "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
		"min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms", "min.insync.replicas": "min.insync.replicas",
		"preallocate": "log.preallocate", "remote.log.copy.disable": "", "remote.log.delete.on.disable": "",
		"remote.storage.enable": "", "retention.bytes": "log.retention.bytes", "retention.ms": "log.retention.ms",
		"segment.bytes": "log.segment.bytes", "segment.index.bytes": "log.index.size.max.bytes",
		"segment.jitter.ms": "log.roll.jitter.ms", "segment.ms": "log.roll.ms",
		"unclean.leader.election.enable": "unclean.leader.election.enable",
		// Broker configs, named alike on the broker resource.
		"leader.replication.throttled.rate": "leader.replication.throttled.rate", "follower.replication.throttled.rate": "follower.replication.throttled.rate",
		"auto.create.topics.enable": "auto.create.topics.enable", "num.partitions": "num.partitions",
		"default.replication.factor": "default.replication.factor",
	}
	got := map[string]string{}
	for _, d := range ConfigDefs() {
		got[d.Name] = d.Synonym
		if d.Doc == "" {
			t.Errorf("%s has no doc line", d.Name)
		}
	}
	if !maps.Equal(got, kafka) {
		t.Errorf("configs and synonyms:\n got %v\nwant %v", got, kafka)
	}
	honoured := []string{CleanupPolicy, "delete.retention.ms", IndexIntervalBytes, MaxMessageBytes, MessageTimestampAfterMaxMs, MessageTimestampBeforeMaxMs,
		MessageTimestampType, "min.cleanable.dirty.ratio", "min.compaction.lag.ms", MinInsyncReplicas, RetentionBytes, RetentionMs, SegmentBytes, SegmentIndexBytes, SegmentMs, UncleanLeaderElection,
		LeaderReplicationThrottledRate, FollowerReplicationThrottledRate, AutoCreateTopicsEnable, NumPartitions, DefaultReplicationFactor}
	for _, d := range ConfigDefs() {
		if want := slices.Contains(honoured, d.Name); d.Honoured() != want {
			t.Errorf("%s: honoured %v, want %v", d.Name, d.Honoured(), want)
		}
	}
}

// TestConfigurationControlManager_Replay (ConfigurationControlManagerTest
// .testReplay): ConfigRecords set and delete a resource's configs; a
// deleted config falls back to the next source.
func TestConfigurationControlManager_Replay(t *testing.T) {
	img := withTopics(t)
	a, _ := img.Topic("a")
	if got := img.TopicConfig(a, MinInsyncReplicas); got != (ConfigValue{MinInsyncReplicas, "1", SourceDefault}) {
		t.Fatalf("before any record: %+v", got)
	}
	steps := []struct {
		rec  *keelpb.Record
		want ConfigValue // a's min.insync.replicas afterwards
		// cluster: the cluster configs afterwards
		cluster map[string]string
	}{
		{configRec("", MinInsyncReplicas, str("2")), ConfigValue{MinInsyncReplicas, "2", SourceClusterDefault}, map[string]string{MinInsyncReplicas: "2"}},
		{configRec("a", MinInsyncReplicas, str("3")), ConfigValue{MinInsyncReplicas, "3", SourceTopic}, map[string]string{MinInsyncReplicas: "2"}},
		{configRec("", MinInsyncReplicas, nil), ConfigValue{MinInsyncReplicas, "3", SourceTopic}, nil},
		{configRec("a", MinInsyncReplicas, nil), ConfigValue{MinInsyncReplicas, "1", SourceDefault}, nil},
		// Deleting what is not set changes nothing, and is no error.
		{configRec("a", MinInsyncReplicas, nil), ConfigValue{MinInsyncReplicas, "1", SourceDefault}, nil},
		{configRec("", UncleanLeaderElection, str("TRUE")), ConfigValue{MinInsyncReplicas, "1", SourceDefault}, map[string]string{UncleanLeaderElection: "TRUE"}},
	}
	for i, s := range steps {
		before := imageBytes(t, img)
		next, err := Apply(img, img.Offset+1, 1, batch(s.rec))
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if !bytes.Equal(imageBytes(t, img), before) {
			t.Fatalf("step %d changed the image it was applied to", i)
		}
		img = next
		a, _ = img.Topic("a")
		if got := img.TopicConfig(a, MinInsyncReplicas); got != s.want {
			t.Errorf("step %d: min.insync.replicas = %+v, want %+v", i, got, s.want)
		}
		if got := img.ClusterConfigs(); !maps.Equal(got, s.cluster) {
			t.Errorf("step %d: cluster configs %v, want %v", i, got, s.cluster)
		}
	}
	// Booleans are Kafka's: the cluster default TRUE turns unclean on.
	if !img.UncleanElection(a) || img.MinISR(a) != 1 {
		t.Fatalf("unclean %v, min ISR %d", img.UncleanElection(a), img.MinISR(a))
	}
	// A topic's configs survive a snapshot in its TopicRecord, the
	// cluster's in ConfigRecords.
	img = apply1(t, img, configRec("a", RetentionMs, str("1000")))
	back, err := ReadSnapshot(bytes.NewReader(imageBytes(t, img)))
	if err != nil {
		t.Fatal(err)
	}
	ba, _ := back.Topic("a")
	if !sameImage(t, back, img) || ba.Configs[RetentionMs] != "1000" || !back.UncleanElection(ba) {
		t.Fatalf("after a snapshot: topic configs %v, cluster %v", ba.Configs, back.ClusterConfigs())
	}
	// Every topic config, but not the broker configs (the throttles, and
	// auto-creation's).
	if got := back.TopicConfigs(ba); len(got) != len(ConfigDefs())-5 || got[0].Name != CleanupPolicy {
		t.Fatalf("TopicConfigs = %+v", got)
	}
}

func apply1(t *testing.T, img *Image, recs ...*keelpb.Record) *Image {
	t.Helper()
	next, err := Apply(img, img.Offset+1, 1, batch(recs...))
	if err != nil {
		t.Fatal(err)
	}
	return next
}

// TestFSM_ConfigRecordRefusals: what Apply refuses of a ConfigRecord, and
// of a TopicRecord's configs; the batch is refused whole.
func TestFSM_ConfigRecordRefusals(t *testing.T) {
	img := withTopics(t)
	tests := []struct {
		name    string
		batch   *keelpb.RecordBatch
		wantErr string
	}{
		{"an unknown config", batch(configRec("a", "retention.hours", str("1"))), `unknown config "retention.hours"`},
		{"deleting an unknown config", batch(configRec("", "retention.hours", nil)), `unknown config "retention.hours"`},
		{"a value out of range", batch(configRec("a", MinInsyncReplicas, str("0"))), "0 is outside"},
		{"max.compaction.lag.ms", batch(configRec("", "max.compaction.lag.ms", str("1000"))), "max.compaction.lag.ms: only the default"},
		{"an unknown topic", batch(configRec("zz", MinInsyncReplicas, str("2"))), `topic "zz" does not exist`},
		{"the cluster with a name", batch(&keelpb.Record{Record: &keelpb.Record_Config{Config: &keelpb.ConfigRecord{
			ResourceType: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER, ResourceName: "x", Name: MinInsyncReplicas, Value: str("2")}}}), "no resource name"},
		{"no resource type", batch(&keelpb.Record{Record: &keelpb.Record_Config{Config: &keelpb.ConfigRecord{Name: MinInsyncReplicas, Value: str("2")}}}), "is not topic or cluster"},
		{"a topic created with a bad config", batch(topicRec("b", topicB, map[string]string{SegmentBytes: "1"})), "segment.bytes: 1 is outside"},
		{"all or nothing", batch(configRec("", MinInsyncReplicas, str("2")), configRec("a", MinInsyncReplicas, str("x"))), "record 1 (config)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Apply(img, img.Offset+1, 1, tt.batch)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || got != img {
				t.Fatalf("err = %v, want %q and the image unchanged", err, tt.wantErr)
			}
		})
	}
}

// TestFSM_TopicConfigsAreCopiedOnWrite: a ConfigRecord gives the topic a new
// configs map; earlier images keep theirs, and a deleted topic takes its
// configs with it (KRaft's deleteTopicConfigs).
func TestFSM_TopicConfigsAreCopiedOnWrite(t *testing.T) {
	img := replay(t,
		batch(clusterID("c"), featureLevel(1), epoch(1, 1)),
		batch(topicRec("b", topicB, map[string]string{UncleanLeaderElection: "false"})),
	)
	b0, _ := img.Topic("b")
	img2 := apply1(t, img, configRec("b", UncleanLeaderElection, str("true")), configRec("b", MaxMessageBytes, str("100")))
	b2, _ := img2.Topic("b")
	if b0.Configs[UncleanLeaderElection] != "false" || len(b0.Configs) != 1 {
		t.Fatalf("the earlier image's topic changed: %v", b0.Configs)
	}
	if !img2.UncleanElection(b2) || b2.Configs[MaxMessageBytes] != "100" {
		t.Fatalf("after: %v", b2.Configs)
	}
	if byID, _ := img2.TopicByID(topicB); byID != b2 {
		t.Fatal("the topic by id and by name differ")
	}
	img3 := apply1(t, img2, removeTopic(topicB))
	img3 = apply1(t, img3, topicRec("b", topicA, nil))
	if b3, _ := img3.Topic("b"); len(b3.Configs) != 0 || img3.UncleanElection(b3) {
		t.Fatalf("a topic re-created under the name has configs %v", b3.Configs)
	}
}

// TestFSM_TopicConfigsNeedTheirLevel: a config beyond the first seven is
// refused, in a ConfigRecord or a TopicRecord, below
// TopicConfigsMetadataVersion (a binary from before it would refuse the
// record, and its image diverge); the first seven are taken at any level;
// and the level cannot be lowered below it while a topic or the cluster
// holds such a config.
func TestFSM_TopicConfigsNeedTheirLevel(t *testing.T) {
	low := withTopicsAt(t, TopicConfigsMetadataVersion-1)
	for _, b := range []*keelpb.RecordBatch{
		batch(configRec("a", MessageTimestampType, str(LogAppendTime))),
		batch(configRec("", SegmentMs, str("1000"))),
		batch(topicRec("b", topicB, map[string]string{SegmentMs: "1000"})),
	} {
		if got, err := Apply(low, low.Offset+1, 1, b); !errors.Is(err, ErrAboveMetadataVersion) || got != low ||
			!strings.Contains(err.Error(), "needs metadata.version 4; the cluster is at 3") {
			t.Errorf("at level %d: err = %v; want it refused for its level", TopicConfigsMetadataVersion-1, err)
		}
	}
	apply1(t, low, configRec("a", MaxMessageBytes, str("2000")), configRec("", MaxMessageBytes, nil))

	img := replay(t,
		batch(clusterID("c"), featureLevel(TopicConfigsMetadataVersion), epoch(1, 1)),
		batch(topicRec("a", topicA, map[string]string{MessageTimestampType: LogAppendTime})),
	)
	if b := LevelBlockers(img, TopicConfigsMetadataVersion-1); len(b) != 1 || !strings.Contains(b[0], "1 topics or cluster defaults") {
		t.Errorf("LevelBlockers to %d = %q; want the topic's config named", TopicConfigsMetadataVersion-1, b)
	}
	img = apply1(t, img, configRec("a", MessageTimestampType, nil))
	if b := LevelBlockers(img, TopicConfigsMetadataVersion-1); len(b) != 0 {
		t.Errorf("LevelBlockers once the config is deleted = %q; want none", b)
	}
}

// TestFSM_CompactionNeedsItsLevel: cleanup.policy with compact, and a
// cleaner config off its default, are refused below
// CompactionMetadataVersion (a binary from before it has no cleaner and
// refuses them); delete and the cleaner configs' defaults are taken; and
// the level cannot be lowered below it while a topic is compacted.
func TestFSM_CompactionNeedsItsLevel(t *testing.T) {
	low := withTopicsAt(t, CompactionMetadataVersion-1)
	for _, b := range []*keelpb.RecordBatch{
		batch(configRec("a", CleanupPolicy, str("compact"))),
		batch(configRec("", CleanupPolicy, str("compact,delete"))),
		batch(configRec("a", DeleteRetentionMs, str("1000"))),
		batch(configRec("a", MinCleanableDirtyRatio, str("0.1"))),
		batch(topicRec("b", topicB, map[string]string{CleanupPolicy: "compact"})),
		batch(topicRec("b", topicB, map[string]string{MinCompactionLagMs: "5"})),
	} {
		if got, err := Apply(low, low.Offset+1, 1, b); !errors.Is(err, ErrAboveMetadataVersion) || got != low ||
			!strings.Contains(err.Error(), "needs metadata.version 5; the cluster is at 4") {
			t.Errorf("at level %d: err = %v; want it refused for its level", CompactionMetadataVersion-1, err)
		}
	}
	apply1(t, low, configRec("a", CleanupPolicy, str("delete")), configRec("a", DeleteRetentionMs, str("86400000")))

	img := replay(t,
		batch(clusterID("c"), featureLevel(CompactionMetadataVersion), epoch(1, 1)),
		batch(topicRec("a", topicA, map[string]string{CleanupPolicy: "compact"})),
	)
	if b := LevelBlockers(img, CompactionMetadataVersion-1); len(b) != 1 || !strings.Contains(b[0], "configs of metadata.version 5") {
		t.Errorf("LevelBlockers to %d = %q; want the compacted topic named", CompactionMetadataVersion-1, b)
	}
	img = apply1(t, img, configRec("a", CleanupPolicy, nil))
	if b := LevelBlockers(img, CompactionMetadataVersion-1); len(b) != 0 {
		t.Errorf("LevelBlockers once the config is deleted = %q; want none", b)
	}
}

func TestConfigValueLevel(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        uint32
	}{
		{CleanupPolicy, "delete", 1},
		{CleanupPolicy, "compact", CompactionMetadataVersion},
		{CleanupPolicy, "compact,delete", CompactionMetadataVersion},
		{RetentionMs, "-1", 1},
		{SegmentMs, "1000", TopicConfigsMetadataVersion},
		{DeleteRetentionMs, "86400000", TopicConfigsMetadataVersion},
		{DeleteRetentionMs, "0", CompactionMetadataVersion},
		{MinCleanableDirtyRatio, "0.5", TopicConfigsMetadataVersion},
		{MinCleanableDirtyRatio, "0.01", CompactionMetadataVersion},
		{MinCompactionLagMs, "1", CompactionMetadataVersion},
	} {
		if got := ConfigValueLevel(tc.name, tc.value); got != tc.want {
			t.Errorf("ConfigValueLevel(%s, %s) = %d, want %d", tc.name, tc.value, got, tc.want)
		}
	}
}
