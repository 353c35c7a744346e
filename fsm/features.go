package fsm

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/keel-dev/keel/proto/keelpb"
)

// Metadata versions (KIP-584's metadata.version): a small integer the log
// states in a FeatureLevelRecord. Every record type, and every field that
// changes what a record means, is tied to the level that introduced it; a
// node applies a log only if it supports the log's level, and the state
// machine refuses a record above the finalized level. Operators raise the
// level (`keel features upgrade`) once every node runs a binary that
// supports it.
const (
	// MinMetadataVersion and MaxMetadataVersion are the levels this binary
	// can read: a cluster's level must lie between them for a node to apply
	// its log.
	MinMetadataVersion uint32 = 1
	MaxMetadataVersion uint32 = 7
	// BootstrapMetadataVersion is the level of a log that states none (a
	// cluster from before FeatureLevel records, as KRaft's bootstrap
	// metadata.version): level 1, which covers every record such a log may
	// hold.
	BootstrapMetadataVersion uint32 = 1
	// MetadataVersionFeature is the feature name of the metadata version.
	MetadataVersionFeature = "metadata.version"
	// EmptyISRMetadataVersion is the level from which a partition's ISR
	// may be empty (KIP-966: its last member restarted after an unclean
	// shutdown, and the partition waits for an eligible leader replica).
	// A binary below it refuses an empty ISR, so the active controller
	// keeps such a broker as the ISR's last member below this level.
	EmptyISRMetadataVersion uint32 = 3
	// TopicConfigsMetadataVersion is the level from which a topic or the
	// cluster may set any of Kafka's topic configs, not only the first
	// seven (ConfigLevel): a binary below it refuses the others.
	TopicConfigsMetadataVersion uint32 = 4
	// ClientQuotaMetadataVersion is the level that adds client quotas
	// (ClientQuotaRecord).
	ClientQuotaMetadataVersion uint32 = 4
	// CompactionMetadataVersion is the level from which a topic or the
	// cluster may set cleanup.policy=compact and the cleaner's configs
	// (ConfigValueLevel): a binary below it has no log cleaner and refuses
	// them.
	CompactionMetadataVersion uint32 = 5
	// ThrottleMetadataVersion is the level from which the cluster may set
	// the replication throttles (leader.replication.throttled.rate,
	// follower.replication.throttled.rate): a binary below it refuses
	// their names.
	ThrottleMetadataVersion uint32 = 6
	// AutoCreateMetadataVersion is the level from which the cluster may
	// set auto.create.topics.enable, num.partitions and
	// default.replication.factor: a binary below it refuses their names.
	// Below it, brokers that know them take their defaults.
	AutoCreateMetadataVersion uint32 = 7
)

// MetadataVersionInfo describes one level: what it adds to the level below.
type MetadataVersionInfo struct {
	Level uint32
	// Records are the record types (their names in the Record oneof) the
	// level introduces.
	Records []string
	Adds    string
}

// MetadataVersions is the table of levels, lowest first (docs/features.md
// shows it; a test checks that every record type is in it).
//
// Level 1 is every record type Keel wrote before metadata versions gated
// anything: the first active controller of every cluster has written
// metadata.version 1 since the start, and such a log may hold configs,
// eligible leader replicas, leader recovery and producer id blocks, so
// these cannot be split into levels of their own after the fact.
var MetadataVersions = []MetadataVersionInfo{
	{Level: 1, Records: []string{
		"cluster_id", "controller_epoch", "no_op", "feature_level", "broker_registration", "fence_broker",
		"unfence_broker", "unregister_broker", "topic", "partition", "partition_change", "remove_topic",
		"broker_shutting_down", "config", "producer_ids",
	}, Adds: "brokers (registration, fencing, controlled shutdown), topics, partitions and their changes " +
		"(ISR, reassignment, eligible leader replicas, leader recovery), configs, producer id blocks"},
	{Level: 2, Records: []string{"controller_registration"},
		Adds: "controller registrations (KIP-919): each controller's supported metadata.version range in the log"},
	{Level: 3, Adds: "an empty ISR (KIP-966): a broker that restarts after an unclean shutdown leaves the ISR even as its " +
		"last member, and the partition waits for an eligible leader replica"},
	{Level: 4, Records: []string{"user_scram_credential", "remove_user_scram_credential", "client_quota", "acl", "remove_acl"},
		Adds: "SCRAM credentials (KIP-554): salted keys for SASL/SCRAM logins on the Kafka listener; " +
			"client quotas (KIP-546): producer and consumer byte rates and request percentages of users and client ids; " +
			"ACLs (KRaft's AccessControlEntryRecord): the authorizer's bindings in the metadata log; " +
			"every standard Kafka topic config in Config and Topic records, beyond cleanup.policy, " +
			"max.message.bytes, min.insync.replicas, retention.bytes, retention.ms, segment.bytes and unclean.leader.election.enable"},
	{Level: 5, Adds: "log compaction: cleanup.policy=compact, and delete.retention.ms, min.cleanable.dirty.ratio and " +
		"min.compaction.lag.ms off their defaults; __consumer_offsets is created compacted from this level"},
	{Level: 6, Adds: "replication throttles: leader.replication.throttled.rate and follower.replication.throttled.rate, " +
		"the bytes/s of the replicas a reassignment adds"},
	{Level: 7, Adds: "topic auto-creation: auto.create.topics.enable, num.partitions and default.replication.factor, " +
		"set cluster-wide"},
}

// ErrUnsupportedMetadataVersion is wrapped by the errors of a level a node
// does not support: a FeatureLevel record, a snapshot, or a registration
// outside the supported range.
var ErrUnsupportedMetadataVersion = errors.New("unsupported metadata.version")

// ErrAboveMetadataVersion is wrapped by the error of a record the
// finalized metadata.version does not allow yet.
var ErrAboveMetadataVersion = errors.New("record above the finalized metadata.version")

// ErrUnsafeDowngrade is wrapped by the error of a FeatureLevel record that
// would lower the level below what the metadata holds.
var ErrUnsafeDowngrade = errors.New("unsafe metadata.version downgrade")

// RecordLevel is the metadata.version that introduced rec's type.
func RecordLevel(rec *keelpb.Record) uint32 {
	switch rec.GetRecord().(type) {
	case *keelpb.Record_ControllerRegistration:
		return 2
	case *keelpb.Record_UserScramCredential, *keelpb.Record_RemoveUserScramCredential:
		return ScramCredentialsMetadataVersion
	case *keelpb.Record_ClientQuota:
		return ClientQuotaMetadataVersion
	case *keelpb.Record_Acl, *keelpb.Record_RemoveAcl:
		return ACLMetadataVersion
	}
	return 1
}

// FinalizedMetadataVersion is the level the image's records are held to:
// the one its log states, or BootstrapMetadataVersion for a log that states
// none.
func (img *Image) FinalizedMetadataVersion() uint32 {
	if img.MetadataVersion == 0 {
		return BootstrapMetadataVersion
	}
	return img.MetadataVersion
}

// ControllerRegistration is one controller's supported metadata.version
// range, as the log states it (ControllerRegistrationRecord).
type ControllerRegistration struct {
	NodeID                                 int32
	Address                                string
	MinMetadataVersion, MaxMetadataVersion uint32
}

// Controller returns controller id's registration, if any.
func (img *Image) Controller(id int32) (*ControllerRegistration, bool) {
	c, ok := img.controllers[id]
	return c, ok
}

// Controllers returns every controller registration, in id order.
func (img *Image) Controllers() []*ControllerRegistration {
	out := make([]*ControllerRegistration, 0, len(img.controllers))
	for _, id := range slices.Sorted(maps.Keys(img.controllers)) {
		out = append(out, img.controllers[id])
	}
	return out
}

// LevelBlockers names what in img stops the finalized level from becoming
// level: for a raise, the registered brokers and controllers whose range
// does not include it; for a lowering, what the metadata holds that the
// lower level cannot express (a downgrade that would drop it). None: the
// change is safe.
func LevelBlockers(img *Image, level uint32) []string {
	var out []string
	if level < MinMetadataVersion || level > MaxMetadataVersion {
		out = append(out, fmt.Sprintf("this binary supports metadata.version %d-%d", MinMetadataVersion, MaxMetadataVersion))
	}
	for _, b := range img.Brokers() {
		if level < b.MinMetadataVersion || level > b.MaxMetadataVersion {
			out = append(out, fmt.Sprintf("broker %d supports %d-%d", b.ID, b.MinMetadataVersion, b.MaxMetadataVersion))
		}
	}
	for _, c := range img.Controllers() {
		if level < c.MinMetadataVersion || level > c.MaxMetadataVersion {
			out = append(out, fmt.Sprintf("controller %d supports %d-%d", c.NodeID, c.MinMetadataVersion, c.MaxMetadataVersion))
		}
	}
	if level < ACLMetadataVersion && img.ACLCount() > 0 {
		out = append(out, fmt.Sprintf("%d ACLs (metadata.version %d) would be dropped", img.ACLCount(), ACLMetadataVersion))
	}
	if level < 2 && len(img.controllers) > 0 {
		out = append(out, fmt.Sprintf("%d controller registrations (metadata.version 2) would be dropped", len(img.controllers)))
	}
	if level < ScramCredentialsMetadataVersion && len(img.scram) > 0 {
		out = append(out, fmt.Sprintf("%d SCRAM credentials (metadata.version %d) would be dropped", len(img.scram), ScramCredentialsMetadataVersion))
	}
	if level < ClientQuotaMetadataVersion && len(img.clientQuotas) > 0 {
		out = append(out, fmt.Sprintf("%d client quota entities (metadata.version %d) would be dropped; remove them first",
			len(img.clientQuotas), ClientQuotaMetadataVersion))
	}
	// Only a level that allows them can hold empty ISRs: the walk is for a
	// lowering from such a level, a rare act.
	if level < EmptyISRMetadataVersion && img.FinalizedMetadataVersion() >= EmptyISRMetadataVersion {
		if n := img.emptyISRs(); n > 0 {
			out = append(out, fmt.Sprintf("%d partitions with an empty ISR (metadata.version %d) could not be expressed; "+
				"wait until each has a leader again", n, EmptyISRMetadataVersion))
		}
	}
	for _, gated := range []uint32{TopicConfigsMetadataVersion, CompactionMetadataVersion, ThrottleMetadataVersion, AutoCreateMetadataVersion} {
		if level < gated && img.FinalizedMetadataVersion() >= gated {
			if n := img.levelConfigs(gated); n > 0 {
				out = append(out, fmt.Sprintf("%d topics or cluster defaults set configs of metadata.version %d; delete them first",
					n, gated))
			}
		}
	}
	return out
}

// emptyISRs counts the partitions whose ISR is empty.
func (img *Image) emptyISRs() int {
	n := 0
	img.EachPartition(func(p *Partition) bool {
		if len(p.ISR) == 0 {
			n++
		}
		return true
	})
	return n
}

// checkEmptyISR refuses an empty ISR below EmptyISRMetadataVersion, and
// one with a leader at any level (the leader is an ISR member).
func checkEmptyISR(img *Image, p *Partition) error {
	if len(p.ISR) > 0 {
		return nil
	}
	if have := img.FinalizedMetadataVersion(); have < EmptyISRMetadataVersion {
		return fmt.Errorf("%w: an empty isr needs %s %d; the cluster is at %d",
			ErrAboveMetadataVersion, MetadataVersionFeature, EmptyISRMetadataVersion, have)
	}
	if p.Leader != NoLeader {
		return fmt.Errorf("leader %d is not in the isr []", p.Leader)
	}
	return nil
}

func applyFeatureLevel(img *Image, rec *keelpb.Record, ctx *applyContext) error {
	r := rec.GetFeatureLevel()
	if r.GetName() != MetadataVersionFeature {
		return fmt.Errorf("unknown feature %q", r.GetName())
	}
	level := r.GetLevel()
	if level < MinMetadataVersion || level > MaxMetadataVersion {
		return fmt.Errorf("%w: %s %d is outside the range this binary supports, %d-%d",
			ErrUnsupportedMetadataVersion, MetadataVersionFeature, level, MinMetadataVersion, MaxMetadataVersion)
	}
	// A snapshot states its level before the registrations it holds, so
	// only the log's changes are checked against them.
	if !ctx.restoring && level != img.FinalizedMetadataVersion() {
		if blockers := LevelBlockers(img, level); len(blockers) > 0 {
			sentinel := ErrUnsupportedMetadataVersion
			if level < img.FinalizedMetadataVersion() {
				sentinel = ErrUnsafeDowngrade
			}
			return fmt.Errorf("%w: %s cannot move from %d to %d: %s", sentinel, MetadataVersionFeature,
				img.FinalizedMetadataVersion(), level, strings.Join(blockers, "; "))
		}
	}
	img.MetadataVersion = level
	return nil
}

func applyControllerRegistration(img *Image, rec *keelpb.Record, _ *applyContext) error {
	r := rec.GetControllerRegistration()
	lo, hi, level := r.GetMinMetadataVersion(), r.GetMaxMetadataVersion(), img.FinalizedMetadataVersion()
	switch {
	case r.GetNodeId() <= 0:
		return fmt.Errorf("node_id %d is not a node id", r.GetNodeId())
	case r.GetAddress() == "":
		return errors.New("address is empty")
	case lo < 1 || lo > hi:
		return fmt.Errorf("metadata version range %d-%d is empty", lo, hi)
	case level < lo || level > hi:
		return fmt.Errorf("%w: controller %d supports metadata versions %d-%d, the cluster is at %d",
			ErrUnsupportedMetadataVersion, r.GetNodeId(), lo, hi, level)
	}
	img.controllers = maps.Clone(img.controllers)
	if img.controllers == nil {
		img.controllers = map[int32]*ControllerRegistration{}
	}
	img.controllers[r.GetNodeId()] = &ControllerRegistration{NodeID: r.GetNodeId(), Address: r.GetAddress(), MinMetadataVersion: lo, MaxMetadataVersion: hi}
	return nil
}

// checkRecordLevel refuses a record the image's finalized level does not
// allow yet.
func checkRecordLevel(img *Image, rec *keelpb.Record) error {
	if need, have := RecordLevel(rec), img.FinalizedMetadataVersion(); need > have {
		return fmt.Errorf("%w: a %s record needs %s %d; the cluster is at %d",
			ErrAboveMetadataVersion, RecordType(rec), MetadataVersionFeature, need, have)
	}
	return nil
}

// controllerRecords lists the controller registrations as records, by id.
func controllerRecords(img *Image, emit func(*keelpb.Record) error) error {
	for _, c := range img.Controllers() {
		rec := &keelpb.ControllerRegistrationRecord{NodeId: c.NodeID, Address: c.Address,
			MinMetadataVersion: c.MinMetadataVersion, MaxMetadataVersion: c.MaxMetadataVersion}
		if err := emit(&keelpb.Record{Record: &keelpb.Record_ControllerRegistration{ControllerRegistration: rec}}); err != nil {
			return err
		}
	}
	return nil
}
