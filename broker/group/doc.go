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
//
// Design. Each group has a state lock (Kafka's group lock) under the
// coordinator's map lock, and a write lock held across each of its appends,
// so that the group's records reach the log in the order they are applied
// in memory; memory changes only once an append returned nil, so a failed
// write leaves nothing half-applied. A JoinGroup or SyncGroup that must wait
// parks a buffered channel on its member, which the state machine answers
// (a completed join phase, a committed assignment, a Resign with
// NOT_COORDINATOR). Session, rebalance, initial-delay and pending-member
// timers are time.AfterFunc timers that carry a sequence number, so that a
// timer that fires after it was replaced does nothing. Files: state.go (the
// states and the rebalance), join.go, sync.go (SyncGroup, Heartbeat,
// LeaveGroup), offsets.go, admin.go, load.go, persist.go and records.go
// (Kafka's record formats), expiry.go, metrics.go.
package group
