package group

import "context"

// OffsetsTopic is the internal topic that holds every group's state.
const OffsetsTopic = "__consumer_offsets"

// Record is one record of an __consumer_offsets partition: a key and a
// value in Kafka's formats; a nil Value is a tombstone.
type Record struct {
	Key, Value []byte
}

// Log is the coordinator's view of the __consumer_offsets partitions this
// broker leads; package broker/kafka implements it over the data plane. Its
// errors are franz-go's kerr values, returned directly or wrapped.
type Log interface {
	// Append appends records as one batch to partition, which this broker
	// leads, and returns once the batch is committed (acks=all: the high
	// watermark is past it), or an error: kerr.NotLeaderForPartition when
	// this broker does not lead it (any more), kerr.NotEnoughReplicas or
	// kerr.RequestTimedOut when it cannot be committed in time,
	// kerr.MessageTooLarge for a batch over the topic's limit.
	Append(ctx context.Context, partition int32, records []Record) error
	// Load calls fn for every record of partition in offset order, from
	// its log start up to its log end as of the call, once the high
	// watermark has reached that log end: a new leader's records that were
	// not yet committed are either committed or the leadership is lost
	// (an error) before the coordinator answers from them. It fails with
	// kerr.NotLeaderForPartition when this broker does not lead the
	// partition, and with ctx.Err() when ctx ends.
	Load(ctx context.Context, partition int32, fn func(offset int64, r Record) error) error
}
