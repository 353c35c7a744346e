package broker

import (
	"context"
	"time"

	"github.com/keel-dev/keel/internal/bufpool"
)

// Backend is what the Kafka listener (package broker/kafka) needs from the
// broker's data plane. It is defined here, beside DataPlane, so that the
// data plane (broker/replication's Manager) serves the listener directly,
// and neither package imports the other; kafka.MemoryBackend, a log per
// partition in memory for tests and dev, is a second one. Its errors are
// franz-go's kerr values, returned directly or wrapped; the listener
// answers with their codes, and UnknownServerError for anything else.
type Backend interface {
	// ProduceAppend appends one v2 record batch (as the client sent it) to
	// the partition this broker leads, or refuses it. acks: 0, 1 or -1
	// (all); with -1 and fewer ISR members than min.insync.replicas it
	// refuses before appending with kerr.NotEnoughReplicas. An idempotent
	// duplicate returns the original base offset with a nil error. With -1
	// it also returns commit (nil otherwise), which waits until the high
	// watermark passes the batch, or fails with kerr.RequestTimedOut when
	// timeout (or ctx) ends first, kerr.NotEnoughReplicasAfterAppend if the
	// ISR shrank meanwhile. The listener appends a connection's requests in
	// order and waits for their commits side by side: Kafka's clients keep
	// up to five produce requests in flight per broker, idempotent ones
	// included, and their answers go back in request order. It keeps no
	// slice of batch once it returns: the listener reuses its frames.
	ProduceAppend(topic string, partition int32, batch []byte, acks int16) (res ProduceResult, commit func(ctx context.Context, timeout time.Duration) error, err error)
	// Fetch reads whole batches starting at the one holding offset, up to
	// maxBytes (at least one batch, KIP-74), only below the high watermark,
	// from the partition this broker leads. currentLeaderEpoch, if >= 0, is
	// checked as KIP-320. Offset out of [logStart, HW] →
	// kerr.OffsetOutOfRange. maxWait: with no data at offset yet, wait up to
	// maxWait for some. (The listener passes 0 and waits with Watch, once
	// for the whole request.) The records may lie in a pooled buffer, which
	// the caller gives back with FetchResult.Release once it is done with
	// them.
	Fetch(ctx context.Context, topic string, partition int32, currentLeaderEpoch int32, offset int64, maxBytes int32, maxWait time.Duration) (FetchResult, error)
	// Watch calls wake whenever what Fetch answers for the partition may
	// have changed (its high watermark, log start or end, its leadership, or
	// the replica gone), from now until stop is called: a Fetch waiting for
	// data reads again when woken, as Kafka's purgatory watches a delayed
	// fetch by partition. wake runs under the data plane's locks and must
	// not block. A partition with no replica here is never woken (its
	// Fetch fails), and its stop does nothing.
	Watch(topic string, partition int32, wake func()) (stop func())
	// ListOffsets answers timestamp -2 (earliest: the log start) and -1
	// (latest: the high watermark) with the leader epoch; a timestamp >= 0
	// with the first record below the high watermark stamped at or after
	// it (KIP-79), and -3 with the first record with the largest timestamp
	// below the high watermark (KIP-734), each with the record's timestamp
	// and its batch's leader epoch, or offset, timestamp and epoch -1 when
	// no record matches. currentLeaderEpoch, if >= 0, is checked as in
	// Fetch. Only the leader answers.
	ListOffsets(ctx context.Context, topic string, partition int32, currentLeaderEpoch int32, timestamp int64) (ListOffsetsResult, error)
	// OffsetForLeaderEpoch answers OffsetsForLeaderEpoch (KIP-101,
	// KIP-320) from the leader's epoch cache: the largest epoch at or
	// below leaderEpoch that the log holds, and the offset where it ended
	// (the next epoch's start, or the log end for the latest); an epoch
	// below the first known answers leaderEpoch and the first epoch's
	// start. An epoch above every one known, or none known, answers
	// endOffset -1 and epoch -1 with a nil error (UNDEFINED_EPOCH_OFFSET).
	// currentLeaderEpoch, if >= 0, is checked as in Fetch
	// (kerr.FencedLeaderEpoch below the leader's, kerr.UnknownLeaderEpoch
	// above). Only the leader answers.
	OffsetForLeaderEpoch(ctx context.Context, topic string, partition int32, currentLeaderEpoch, leaderEpoch int32) (endOffset int64, epoch int32, err error)
	// LogEnd is the log end offset of a partition this broker leads: the
	// offset its next record gets, committed or not. The group
	// coordinator's Load (broker/kafka) reads its partition up to there,
	// once the high watermark has reached it. Only the leader answers
	// (kerr.NotLeaderForPartition).
	LogEnd(topic string, partition int32) (int64, error)
	// LogDirs describes the broker's log dirs and every partition replica
	// each holds (Kafka's ReplicaManager.describeLogDirs), leaders and
	// followers alike.
	LogDirs() []LogDir
	// DeleteRecords moves the log start of a partition this broker leads
	// up to offset (-1: the high watermark), deleting the segments wholly
	// below it (Kafka's Partition.deleteRecordsOnLeader). await then waits
	// until every replica on a live broker has moved its own there too
	// (the partition's low watermark, as DelayedDeleteRecords waits), and
	// returns the low watermark; it looks at least once, and when ctx
	// ends first fails with kerr.RequestTimedOut (the records are deleted
	// on the leader all the same). An offset past the high watermark, or
	// negative but -1, is kerr.OffsetOutOfRange and deletes nothing; a
	// leadership lost, before or meanwhile, kerr.NotLeaderForPartition.
	// The listener deletes a request's partitions one by one, then awaits
	// them under the request's one timeout.
	DeleteRecords(topic string, partition int32, offset int64) (await func(ctx context.Context) (lowWatermark int64, err error), err error)
	// Producers lists the idempotent producers the partition's replica
	// here remembers (Kafka's Partition.activeProducerState), by producer
	// id. A partition with no replica here is kerr.NotLeaderForPartition
	// (kerr.UnknownTopicOrPartition when the topic or partition does not
	// exist).
	Producers(topic string, partition int32) ([]ProducerState, error)
}

// LogDir is one of a broker's log dirs, as DescribeLogDirs reports it.
type LogDir struct {
	// Path is the dir's absolute path.
	Path string
	// TotalBytes and UsableBytes are the size of its volume and the bytes
	// free there for the broker; -1 where the system does not say.
	TotalBytes, UsableBytes int64
	// Replicas are the partition replicas it holds.
	Replicas []LogDirReplica
}

// LogDirReplica is one partition replica in a log dir.
type LogDirReplica struct {
	Topic     string
	Partition int32
	// Size is the bytes of its segments.
	Size int64
	// OffsetLag is how far its log end is behind the partition's high
	// watermark as the replica knows it: 0 on the leader.
	OffsetLag int64
}

// ProducerState is one idempotent producer a partition's log remembers.
type ProducerState struct {
	ProducerID    int64
	ProducerEpoch int16
	// LastSequence is the sequence of its last record in the log.
	LastSequence int32
	// LastTimestamp is the largest timestamp of its batches.
	LastTimestamp int64
}

// ProduceResult is where a produced batch landed.
type ProduceResult struct {
	BaseOffset, LogStartOffset int64
	LogAppendTime              int64 // -1: the topic uses CreateTime
}

// FetchResult is what a client's fetch read.
type FetchResult struct {
	Records                       []byte // whole v2 batches, all below HighWatermark
	HighWatermark, LogStartOffset int64  // LastStableOffset = HighWatermark
	// Pooled, when set, is the internal/bufpool buffer Records lies in:
	// a consumer's reads reuse their buffers instead of allocating one a
	// read.
	Pooled *[]byte
}

// Release gives the buffer Records lies in back to its pool, once no
// slice of Records is used any more; Records is then nil. A result that
// is dropped instead is the garbage collector's; a second Release does
// nothing.
func (r *FetchResult) Release() {
	bufpool.Put(r.Pooled)
	r.Pooled, r.Records = nil, nil
}

// ListOffsetsResult is one partition's ListOffsets answer: an offset, the
// timestamp of the record there (-1 for the earliest and latest offsets),
// and a leader epoch. Offset, Timestamp and LeaderEpoch -1: no record
// matched.
type ListOffsetsResult struct {
	Offset, Timestamp int64
	LeaderEpoch       int32
}
