// Package group is the reference broker's group coordinator: Kafka's
// classic consumer-group protocol (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup, static membership), committed offsets, and the group
// administration APIs, for the groups whose __consumer_offsets partition
// this broker leads.
//
// A group's state lives in its __consumer_offsets partition, in Kafka's own
// record format (kmsg's GroupMetadataKey/Value and OffsetCommitKey/Value),
// so that Kafka's tools read it unchanged. The coordinator writes through
// Log with acks=all and answers only once the write is committed; a broker
// that becomes a partition's leader loads its groups from the log before it
// answers for them (COORDINATOR_LOAD_IN_PROGRESS meanwhile), as Kafka's
// GroupCoordinator does. The package does no network I/O of its own: the
// Kafka listener (package broker/kafka) authorizes each request and hands it
// over, and implements Log over the broker's data plane.
package group
