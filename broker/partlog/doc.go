// Package partlog is the storage of one partition replica: Kafka's log, in
// Kafka's own on-disk format, for a broker that stores and serves data.
// The broker package itself stays data-plane-agnostic; a DataPlane opens a
// Log per replica it holds and serves produce, fetch and
// OffsetsForLeaderEpoch from it.
//
// # Layout
//
// A log is a directory of segments, each a .log file of v2 record batches
// stored exactly as received (CRC-32C checked on the way in) and named by
// its base offset in 20 digits, with a sparse .index of (relative offset,
// position) every IndexIntervalBytes. Beside them: leader-epoch-checkpoint
// (KIP-101's epoch → start offset), high-watermark-checkpoint,
// recovery-point-offset-checkpoint (everything below it was fsynced) and
// log-start-offset-checkpoint, each in Kafka's text format and replaced
// whole (temp file, fsync, rename).
//
// # Writers and readers
//
// A leader appends with Append (it assigns the offsets and stamps its
// epoch; CheckProducer is the idempotence check), a follower with
// AppendAsFollower (the leader's offsets, which must continue the log).
// Read and ReadUpTo return whole batches from the one holding an offset,
// at least one (KIP-74). One writer at a time; any number of readers beside
// it, who never see a batch that is not whole: a batch is written, then
// its segment's readable size moves, then the log end.
//
// # What survives
//
// Like Kafka, this log gets its durability from replication (acks=all and
// min.insync.replicas), not from fsync. By default nothing is fsynced on
// append:
//
//   - A process crash (kill -9, a panic, OOM) loses nothing that Append
//     returned: the bytes are in the kernel's page cache and reach the disk
//     without the process. At most the batch being written when the process
//     died is torn; Open cuts it off.
//   - A power loss or kernel crash loses what was not fsynced yet: the
//     active segment past the recovery point. Open checks every batch past
//     it and cuts the log at the first bad one; the replicas hold the rest,
//     and the follower fetches it again. The epoch cache (fsynced on every
//     new epoch) lets it truncate correctly first (KIP-101, KIP-279).
//
// What is always fsynced: a segment when it is rolled (and recovery point
// moves past it), the epoch checkpoint when an epoch is added, every
// checkpoint, and the whole log on Flush and Close. Config.FlushMessages and
// Config.FlushInterval (with MaybeFlush) fsync more often, for a cluster
// that wants a power loss of every replica at once to cost at most that.
//
// # Compaction
//
// Clean is Kafka's log cleaner for one log (cleanup.policy=compact): it
// rewrites sealed segments below the high watermark without the records
// a newer one of the same key supersedes, keeping every batch's offsets,
// and swaps each in by a rename (clean.go).
//
// # Recovery
//
// Open scans the segments. Those wholly below the recovery point are read
// header by header (their index checked, and rebuilt if missing or
// damaged); from the segment holding the recovery point on, every batch's
// length, magic, CRC and offsets are checked, and the index rebuilt. Past
// the recovery point, in the last segment, the log is cut at the first bad
// batch and the cut logged, as Kafka does: unflushed data may be torn or
// hold stale blocks after a power loss, even with valid batches after them.
// Any other damage refuses the open with one line naming the file: damage a
// crash cannot explain is not silently dropped. The producer state and any
// epochs the checkpoint lacks are rebuilt from the batch headers.
package partlog
