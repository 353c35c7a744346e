package fsm

import (
	"errors"
	"fmt"
	"maps"

	iradix "github.com/hashicorp/go-immutable-radix/v2"

	"github.com/keel-dev/keel/proto/keelpb"
)

// EntryFormatV1 is the first byte of every raft entry Keel writes: the protobuf
// RecordBatch follows it. A new encoding gets a new byte; old logs stay readable.
const EntryFormatV1 byte = 1

// ErrEmptyBatch is returned for a batch with no records.
var ErrEmptyBatch = errors.New("batch has no records")

// RecordError says which record of a batch failed validation, and why.
type RecordError struct {
	Position int    // index of the record within its batch
	Type     string // record type, e.g. "controller_epoch"
	Err      error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("record %d (%s): %v", e.Position, e.Type, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

// applyContext is what a record's apply function may know beyond the record:
// the raft position of its batch, and whether it is being replayed from a
// snapshot (which states facts) rather than the log (which states changes).
type applyContext struct {
	index, term uint64
	restoring   bool

	// brokersOwned is set once this batch has its own copy of the brokers
	// map: copy on first write, at most once per batch.
	brokersOwned bool

	// Transactions on the image's trees, opened on first use; finish
	// commits them into the new image.
	byName, byID *iradix.Txn[*Topic]
	parts        *iradix.Txn[*Partition]
	replicas     *iradix.Txn[struct{}]
}

func (ctx *applyContext) topicsByName(img *Image) *iradix.Txn[*Topic] {
	if ctx.byName == nil {
		ctx.byName = treeOr(img.topicsByName).Txn()
	}
	return ctx.byName
}

func (ctx *applyContext) topicsByID(img *Image) *iradix.Txn[*Topic] {
	if ctx.byID == nil {
		ctx.byID = treeOr(img.topicsByID).Txn()
	}
	return ctx.byID
}

func (ctx *applyContext) partitions(img *Image) *iradix.Txn[*Partition] {
	if ctx.parts == nil {
		ctx.parts = treeOr(img.partitions).Txn()
	}
	return ctx.parts
}

func (ctx *applyContext) replicaIndex(img *Image) *iradix.Txn[struct{}] {
	if ctx.replicas == nil {
		ctx.replicas = treeOr(img.replicaIndex).Txn()
	}
	return ctx.replicas
}

// finish commits the batch's tree transactions into img.
func (ctx *applyContext) finish(img *Image) {
	if ctx.byName != nil {
		img.topicsByName = ctx.byName.CommitOnly()
	}
	if ctx.byID != nil {
		img.topicsByID = ctx.byID.CommitOnly()
	}
	if ctx.parts != nil {
		img.partitions = ctx.parts.CommitOnly()
	}
	if ctx.replicas != nil {
		img.replicaIndex = ctx.replicas.CommitOnly()
	}
}

// mutBrokers returns img's brokers map, copied first if this batch does not
// own it yet.
func (ctx *applyContext) mutBrokers(img *Image) map[int32]*Broker {
	if !ctx.brokersOwned {
		img.brokers = maps.Clone(img.brokers)
		if img.brokers == nil {
			img.brokers = map[int32]*Broker{}
		}
		ctx.brokersOwned = true
	}
	return img.brokers
}

// applier applies one record to img, which the caller owns and may edit.
type applier func(img *Image, rec *keelpb.Record, ctx *applyContext) error

// appliers dispatches on the record type: one function per record.
var appliers = map[string]applier{
	"cluster_id":           applyClusterID,
	"controller_epoch":     applyControllerEpoch,
	"no_op":                applyNoOp,
	"topic":                applyTopic,
	"partition":            applyPartition,
	"partition_change":     applyPartitionChange,
	"remove_topic":         applyRemoveTopic,
	"broker_shutting_down": applyBrokerShuttingDown,
	"feature_level":        applyFeatureLevel,
	"broker_registration":  applyBrokerRegistration,
	"fence_broker":         applyFenceBroker,
	"unfence_broker":       applyUnfenceBroker,
	"unregister_broker":    applyUnregisterBroker,
}

// RecordType names the record's type as its oneof field is named in the proto.
func RecordType(rec *keelpb.Record) string {
	if rec == nil || rec.Record == nil {
		return "unknown"
	}
	return string(rec.ProtoReflect().WhichOneof(rec.ProtoReflect().Descriptor().Oneofs().ByName("record")).Name())
}

// Apply applies a batch committed at raft (index, term) to img and returns the
// new image. The batch is all or nothing: if any record is invalid, Apply
// returns img itself, unchanged, and a *RecordError.
func Apply(img *Image, index, term uint64, batch *keelpb.RecordBatch) (*Image, error) {
	if len(batch.GetRecords()) == 0 {
		return img, ErrEmptyBatch
	}
	next := img.clone()
	ctx := &applyContext{index: index, term: term}
	for i, rec := range batch.Records {
		if err := applyRecord(next, rec, ctx); err != nil {
			return img, &RecordError{Position: i, Type: RecordType(rec), Err: err}
		}
	}
	ctx.finish(next)
	next.Offset, next.Term = index, term
	return next, nil
}

func applyRecord(img *Image, rec *keelpb.Record, ctx *applyContext) error {
	fn, ok := appliers[RecordType(rec)]
	if !ok {
		return errors.New("unknown record type")
	}
	return fn(img, rec, ctx)
}

func applyClusterID(img *Image, rec *keelpb.Record, _ *applyContext) error {
	id := rec.GetClusterId().GetClusterId()
	switch {
	case id == "":
		return errors.New("cluster_id is empty")
	case img.ClusterID != "" && img.ClusterID != id:
		return fmt.Errorf("cluster id is already %q; it cannot become %q", img.ClusterID, id)
	}
	img.ClusterID = id
	return nil
}

func applyControllerEpoch(img *Image, rec *keelpb.Record, ctx *applyContext) error {
	r := rec.GetControllerEpoch()
	if r.GetLeaderId() <= 0 {
		return fmt.Errorf("leader_id %d is not a node id", r.GetLeaderId())
	}
	// From the log, an epoch must follow the current one exactly: a takeover
	// is one step, and a stale controller's record (epoch too low) is refused.
	// A snapshot states the epoch it had.
	if !ctx.restoring && r.GetEpoch() != img.ControllerEpoch+1 {
		return fmt.Errorf("epoch %d does not follow the current epoch %d", r.GetEpoch(), img.ControllerEpoch)
	}
	if ctx.restoring && r.GetEpoch() < img.ControllerEpoch {
		return fmt.Errorf("epoch %d is below the current epoch %d", r.GetEpoch(), img.ControllerEpoch)
	}
	img.ControllerEpoch = r.GetEpoch()
	img.ControllerLeaderID = r.GetLeaderId()
	return nil
}

func applyNoOp(*Image, *keelpb.Record, *applyContext) error { return nil }
