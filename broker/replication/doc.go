// Package replication is the reference broker's data plane: Kafka's replica
// manager over one broker/partlog.Log per replica, kept under the broker's
// data dir (DATA_DIR/logs/TOPICID-PARTITION). Manager implements
// broker.DataPlane, so the agent tells it of every role change and hands it
// its followers' fetches, and broker.Backend, so it serves the Kafka
// listener's produce, fetch and list-offsets for the partitions this broker
// leads.
//
// It follows Kafka's replication protocol:
//
//   - A follower fetches from its leader with its log end offset and the
//     epoch of its last batch (KIP-320), every partition it follows from
//     one leader broker on one fetch session (fetcher.go, fetchsession.go:
//     KIP-227's incremental fetches, on the brokers' gRPC FetchSession),
//     or, from a leader without sessions, one unary Fetch loop per replica. A leader whose log ends that epoch
//     earlier answers the epoch and its end instead of records; the
//     follower truncates to it (KIP-101, KIP-279) and fetches again, so no
//     follower keeps a record its leader does not have.
//   - The leader's high watermark is the smallest log end offset among it
//     and the ISR (with the replicas an ISR change in flight adds), learnt
//     from this leader epoch's fetches, never moving back, and frozen while
//     the ISR is below min.insync.replicas (KAFKA-15583), which is what lets
//     the controllers trust the eligible leader replicas (KIP-966).
//     Followers learn it from their fetches; consumers read only below it.
//   - The leader adds a follower to the ISR once it has fetched up to the
//     high watermark and the start of the leader's epoch (KAFKA-7128), and
//     drops an ISR member that has not caught up for ReplicaLagTimeMax,
//     each through AlterPartition with the broker epochs the followers
//     fetched with (KIP-903), one change in flight per partition.
//   - Produce with acks=-1 answers once the high watermark passes the
//     batch; with an ISR below min.insync.replicas it refuses before
//     appending (NOT_ENOUGH_REPLICAS).
//   - Followers move their log start to their leader's, which every fetch
//     answer carries, and say theirs in every fetch: DeleteRecords moves
//     the leader's at once and answers once every live replica's has
//     followed (Kafka's DelayedDeleteRecords).
//
// Each replica's role state (its role, high watermark, followers, ISR
// change) has a lock of its own, so that one partition's produces, fetches
// and ISR changes never wait for another's; the Manager's lock covers only
// which replicas it holds, the connections and the fetchers (Manager.mu
// gives the lock order).
//
// Errors of Produce, Fetch, ListOffsets and OffsetForLeaderEpoch are
// franz-go's kerr values (wrapped: find them with errors.As), the codes a
// Kafka listener answers.
package replication
