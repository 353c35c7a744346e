// Package fsm holds Keel's metadata image and the deterministic state machine
// that applies metadata records to it.
//
// The same code runs on every controller (fed by raft) and on every broker (fed
// by the controller's push stream), so that an image at offset N is the same
// everywhere. Nothing here reads the clock, draws random numbers, does I/O
// beyond the reader or writer it is handed, or depends on map order: whatever a
// record needs (times, ids) travels inside the record.
package fsm

import (
	"maps"
	"slices"
)

// Broker is one registered broker incarnation. Like the image, a *Broker is
// never modified once published: a change makes a new one.
type Broker struct {
	ID            int32
	Epoch         int64 // raft index of its registration record
	IncarnationID string
	Address       string
	// KafkaAddress is the broker's Kafka listener as clients reach it;
	// empty when it has none.
	KafkaAddress string
	Rack         string
	// The metadata versions the broker can read.
	MinMetadataVersion, MaxMetadataVersion uint32
	Fenced                                 bool
	// ShuttingDown: in controlled shutdown; it gets no new leaderships.
	ShuttingDown bool
}

// Broker states as the CLI and APIs name them.
const (
	BrokerActive       = "active"
	BrokerFenced       = "fenced"
	BrokerShuttingDown = "shutting_down"
)

// State names the broker's state.
func (b *Broker) State() string {
	switch {
	case b.Fenced:
		return BrokerFenced
	case b.ShuttingDown:
		return BrokerShuttingDown
	}
	return BrokerActive
}

// Eligible reports whether the broker may lead partitions or join ISRs:
// active, and not shutting down.
func (b *Broker) Eligible() bool { return !b.Fenced && !b.ShuttingDown }

// Image is one immutable version of the cluster metadata. Apply never modifies
// an image it was given; it returns a new one, so readers may hold an *Image
// for as long as they like without locks, and a snapshot is a pointer copy.
type Image struct {
	// ClusterID is set once by the first active controller and never changes.
	ClusterID string
	// ControllerEpoch is the epoch of the latest active controller; it only grows.
	ControllerEpoch int64
	// ControllerLeaderID is the node that committed ControllerEpoch.
	ControllerLeaderID int32
	// MetadataVersion is the cluster's metadata.version feature level; 0
	// until the first active controller writes it (FinalizedMetadataVersion
	// is the level in force).
	MetadataVersion uint32
	// NextProducerID is the first producer id no broker has been given yet
	// (ProducerIdsRecord): the next block starts here.
	NextProducerID int64

	// clusterConfigs are the cluster-wide config defaults (configs.go).
	// Never modified once published: a change copies the map.
	clusterConfigs map[string]string
	// clientQuotas are the client quotas (quotas.go), by entity. Never
	// modified once published: a change copies the outer map and the
	// entity's own.
	clientQuotas map[QuotaEntity]map[string]float64

	// brokers by id. Shared between image versions until a batch changes a
	// broker; then that batch copies the map once (see applyContext).
	brokers map[int32]*Broker
	// controllers are the controller registrations (features.go), by node
	// id; a handful, copied whole on every change.
	controllers map[int32]*ControllerRegistration
	// scram holds the SCRAM credentials (scram.go); few, copied whole on
	// every change.
	scram map[ScramKey]*ScramCredential
	// acls are the ACLs (acls.go); nil before the first.
	acls *aclState

	// Topics, partitions and the replica index are persistent structures
	// (btree.go, partvec.go): a batch that changes k partitions copies
	// O(k) small nodes, never the image, and a snapshot is a pointer copy.
	topicsByName btree[topicName, *Topic]
	// topicsByID also holds each topic's partitions.
	topicsByID btree[TopicID, topicEntry]
	// replicas lists, per broker, the partitions it holds (replicaindex.go).
	replicas btree[replicaKey, *replicaList]
	// partitions counts every topic's partitions.
	partitions int
	// reassigning counts the partitions with a reassignment in progress.
	reassigning int

	// Offset and Term are the raft index and term of the last batch applied.
	Offset uint64
	Term   uint64
}

// Empty returns the image of a cluster before any record.
func Empty() *Image {
	return &Image{}
}

// Broker returns the registered broker with id, if any.
func (img *Image) Broker(id int32) (*Broker, bool) {
	b, ok := img.brokers[id]
	return b, ok
}

// Brokers returns every registered broker, in id order.
func (img *Image) Brokers() []*Broker {
	out := make([]*Broker, 0, len(img.brokers))
	for _, id := range slices.Sorted(maps.Keys(img.brokers)) {
		out = append(out, img.brokers[id])
	}
	return out
}

// BrokerCount is the number of registered brokers.
func (img *Image) BrokerCount() int { return len(img.brokers) }

// clone returns a shallow copy for a batch to edit. Every field is a value or
// a persistent structure, so this stays O(1) whatever the image size.
func (img *Image) clone() *Image {
	c := *img
	return &c
}

// WithIdentity returns a copy of img that belongs to clusterID, with the
// given controller epoch and leader: a snapshot restored into a running
// cluster keeps that cluster's identity and epoch.
func (img *Image) WithIdentity(clusterID string, epoch int64, leader int32) *Image {
	c := img.clone()
	c.ClusterID, c.ControllerEpoch, c.ControllerLeaderID = clusterID, epoch, leader
	return c
}
