package fsm

import "strconv"

// OffsetsTopic is Kafka's internal topic of consumer groups' state (the
// group coordinators' log: broker/group.OffsetsTopic is the same name).
const OffsetsTopic = "__consumer_offsets"

// IsInternalTopic says whether name is an internal topic: one the
// brokers ask the controller for (CreateTopicRequest.internal) and users
// may not create, delete or add partitions to; Metadata calls it internal
// (Kafka's Topic.isInternal).
func IsInternalTopic(name string) bool {
	return name == OffsetsTopic
}

// InternalTopicConfigs are the configs an internal topic of
// replicationFactor is created with at metadata.version level, as Kafka's
// GroupCoordinator.offsetsTopicConfigs gives __consumer_offsets: compacted
// (one record per group and partition survives), 100 MiB segments;
// min.insync.replicas a majority of the replicas, so that a commit
// acknowledged survives any one replica's power loss (with Kafka's default
// of 1, an ISR shrunk to one broker acknowledges commits only that
// broker's page cache holds); compression.type is left at its default,
// producer, which is Kafka's for the topic. Below CompactionMetadataVersion
// a binary may have no cleaner, so the topic keeps every record instead
// (retention.ms=-1): a deleted segment would lose committed offsets; an
// operator compacts it after the upgrade (docs/kafka.md).
func InternalTopicConfigs(level uint32, replicationFactor int32) map[string]string {
	configs := map[string]string{SegmentBytes: "104857600", MinInsyncReplicas: strconv.Itoa(int(replicationFactor/2 + 1))}
	if level >= CompactionMetadataVersion {
		configs[CleanupPolicy] = "compact"
	} else {
		configs[RetentionMs] = "-1"
	}
	return configs
}
