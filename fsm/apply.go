package fsm

import (
	"errors"
	"fmt"
	"maps"

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
// It is also the batch's transient: what the batch has copied from the
// image it started from and may therefore edit in place.
type applyContext struct {
	index, term uint64
	restoring   bool

	// brokersOwned is set once this batch has its own copy of the brokers
	// map: copy on first write, at most once per batch.
	brokersOwned bool
	// aclsOwned: this batch has its own copy of the ACLs.
	aclsOwned bool

	// own marks the tree nodes, vector nodes and topics this batch made.
	own *owner
	// built are the replica lists this batch has copied or made; lists
	// caches some of them.
	built []*replicaList
	lists *listCache
	// slab holds new partitions (slab.go).
	slab slab
	// last is the topic the batch's latest record touched: records come
	// grouped by topic (a topic's partitions, a broker's partitions in
	// topic order), so most find their topic here, not in the tree.
	last struct {
		id    TopicID
		entry topicEntry
	}
}

// newApplyContext starts a batch that will create at least partitions
// partitions (a hint for the slab).
func newApplyContext(index, term uint64, restoring bool, partitions int) *applyContext {
	return &applyContext{index: index, term: term, restoring: restoring, own: new(owner), slab: slab{left: partitions}}
}

// finish readies the batch's image for publishing.
func (ctx *applyContext) finish() {
	ctx.trimLists()
}

// topic returns the topic id and its partitions, as this batch has them.
func (ctx *applyContext) topic(img *Image, id TopicID) (topicEntry, bool) {
	if ctx.last.entry.topic != nil && ctx.last.id == id {
		return ctx.last.entry, true
	}
	e, ok := img.topicsByID.get(id)
	if ok {
		ctx.last.id, ctx.last.entry = id, e
	}
	return e, ok
}

// setTopic stores the topic entry e by id (not by name: see mutTopic).
func (ctx *applyContext) setTopic(img *Image, e topicEntry) {
	img.topicsByID.set(ctx.own, e.topic.ID, e)
	ctx.last.id, ctx.last.entry = e.topic.ID, e
}

// removeTopic drops the topic of e from both indexes.
func (ctx *applyContext) removeTopic(img *Image, e topicEntry) {
	img.topicsByName.delete(ctx.own, topicName(e.topic.Name))
	img.topicsByID.delete(ctx.own, e.topic.ID)
	ctx.last.entry = topicEntry{}
}

// mutTopic returns e with a topic this batch may edit: a published topic is
// copied, and the copy indexed by name. The caller stores e by id.
func (ctx *applyContext) mutTopic(img *Image, e topicEntry) topicEntry {
	if e.owner != ctx.own {
		t := *e.topic
		e.topic, e.owner = &t, ctx.own
		img.topicsByName.set(ctx.own, topicName(t.Name), &t)
	}
	return e
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

// applyRecord applies one record to img, which the caller owns and may edit:
// one function per record type.
func applyRecord(img *Image, rec *keelpb.Record, ctx *applyContext) error {
	if err := checkRecordLevel(img, rec); err != nil {
		return err
	}
	switch rec.GetRecord().(type) {
	case *keelpb.Record_ClusterId:
		return applyClusterID(img, rec, ctx)
	case *keelpb.Record_ControllerEpoch:
		return applyControllerEpoch(img, rec, ctx)
	case *keelpb.Record_NoOp:
		return applyNoOp(img, rec, ctx)
	case *keelpb.Record_Topic:
		return applyTopic(img, rec, ctx)
	case *keelpb.Record_Partition:
		return applyPartition(img, rec, ctx)
	case *keelpb.Record_PartitionChange:
		return applyPartitionChange(img, rec, ctx)
	case *keelpb.Record_RemoveTopic:
		return applyRemoveTopic(img, rec, ctx)
	case *keelpb.Record_BrokerShuttingDown:
		return applyBrokerShuttingDown(img, rec, ctx)
	case *keelpb.Record_FeatureLevel:
		return applyFeatureLevel(img, rec, ctx)
	case *keelpb.Record_BrokerRegistration:
		return applyBrokerRegistration(img, rec, ctx)
	case *keelpb.Record_FenceBroker:
		return applyFenceBroker(img, rec, ctx)
	case *keelpb.Record_UnfenceBroker:
		return applyUnfenceBroker(img, rec, ctx)
	case *keelpb.Record_UnregisterBroker:
		return applyUnregisterBroker(img, rec, ctx)
	case *keelpb.Record_Config:
		return applyConfig(img, rec, ctx)
	case *keelpb.Record_ProducerIds:
		return applyProducerIds(img, rec, ctx)
	case *keelpb.Record_ControllerRegistration:
		return applyControllerRegistration(img, rec, ctx)
	case *keelpb.Record_UserScramCredential:
		return applyUserScramCredential(img, rec, ctx)
	case *keelpb.Record_RemoveUserScramCredential:
		return applyRemoveUserScramCredential(img, rec, ctx)
	case *keelpb.Record_ClientQuota:
		return applyClientQuota(img, rec, ctx)
	case *keelpb.Record_Acl:
		return applyACL(img, rec, ctx)
	case *keelpb.Record_RemoveAcl:
		return applyRemoveACL(img, rec, ctx)
	}
	return errors.New("unknown record type")
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
	creates := 0
	for _, rec := range batch.Records {
		if _, ok := rec.GetRecord().(*keelpb.Record_Partition); ok {
			creates++
		}
	}
	ctx := newApplyContext(index, term, false, creates)
	for i, rec := range batch.Records {
		if err := applyRecord(next, rec, ctx); err != nil {
			return img, &RecordError{Position: i, Type: RecordType(rec), Err: err}
		}
	}
	ctx.finish()
	next.Offset, next.Term = index, term
	return next, nil
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
