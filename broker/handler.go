package broker

import (
	"log/slog"

	"github.com/keel-dev/keel/fsm"
)

// Handler is what a broker built on this package implements to act on the
// metadata it receives: the seeds' UpdateMetadata (MetadataChanged),
// LeaderAndIsr (BecomeLeader, BecomeFollower) and StopReplica, derived by the
// agent from each applied batch instead of being sent by the controller. A
// broker has up to two: its DataPlane, told first, and Config.Handler.
//
// The agent calls a handler after every batch it applies and after every
// snapshot it installs, in offset order, one call at a time (never
// concurrently), before the new image becomes Agent.Image and before the
// agent reports the new offset in a heartbeat. So once the controller learns
// that a broker has applied offset N, that broker's handler has seen N: this
// is what lets a controlled shutdown finish only once every broker has acted
// on the leadership moves it caused.
//
// For one batch the calls are: MetadataChanged(before, after) first, so the
// handler can look brokers and topics up in after; then StopReplica for every
// replica of this broker that left it; then BecomeLeader, then
// BecomeFollower, for this broker's replicas whose role, leader or leader
// epoch changed (the order KRaft's brokers apply a metadata delta in). A
// change of ISR, replica set or partition epoch alone calls no role method:
// read it from the after image. The role calls cost O(replicas on this
// broker) per batch, never O(partitions in the cluster); DiffReplicas is the
// comparison.
//
// A handler that blocks holds up the broker's metadata: the broker falls
// behind (and stays fenced, and a controlled shutdown waits for it) but
// nothing else breaks.
//
// Restarts: the agent's image starts empty in every process, so a replica
// whose topic was deleted, or which was moved off this broker, while the
// broker was down gets no StopReplica: the agent never saw it. A broker that
// keeps replicas across restarts (a real log on disk) must reconcile them
// itself: once its image has reached its own registration (after.Offset >=
// the broker epoch of Agent.Status, the same point at which the controllers
// unfence it), every replica it holds that the image does not assign to it is
// stray and must be deleted. StrayReplicas is that comparison; the reference
// broker's data plane (broker/replication) deletes the logs it names.
//
// Embed NopHandler in a handler so that it keeps compiling, and keeps doing
// nothing for methods it does not implement, when methods are added.
type Handler interface {
	// MetadataChanged is called with the image before and after one applied
	// batch, or around an installed snapshot. Both images are immutable and
	// may be kept. after.Offset > before.Offset, except that a snapshot
	// installed to repair a divergence may go back.
	MetadataChanged(before, after *fsm.Image)
	// BecomeLeader: this broker leads the partition, newly or at a new
	// leader epoch. A leader serves its followers' fetches at exactly
	// p.LeaderEpoch and owns the partition's ISR changes (AlterPartition).
	BecomeLeader(p PartitionState)
	// BecomeFollower: this broker is a replica but not the leader, newly, or
	// the leader or leader epoch changed. p.Leader is fsm.NoLeader when the
	// partition has none; the follower then has no one to fetch from until
	// the next BecomeFollower.
	BecomeFollower(p PartitionState)
	// StopReplica: this broker must stop replicating the partition. delete
	// is true when the replica is gone for good (its topic was deleted, or
	// it was reassigned off this broker): drop its data. delete is false
	// only when the broker itself is stopping (Agent.Shutdown, after its
	// controlled shutdown): keep the data for the next start.
	StopReplica(topicID fsm.TopicID, partition int32, delete bool)
}

// PartitionState is one partition as a role change hands it to a Handler.
// Its slices belong to the image they came from: do not modify them.
type PartitionState struct {
	Topic          string
	TopicID        fsm.TopicID
	Partition      int32
	Leader         int32 // fsm.NoLeader when none
	LeaderEpoch    int32
	PartitionEpoch int32
	Replicas, ISR  []int32
}

func partitionState(topic string, p *fsm.Partition) PartitionState {
	return PartitionState{
		Topic:          topic,
		TopicID:        p.TopicID,
		Partition:      p.Partition,
		Leader:         p.Leader,
		LeaderEpoch:    p.LeaderEpoch,
		PartitionEpoch: p.PartitionEpoch,
		Replicas:       p.Replicas,
		ISR:            p.ISR,
	}
}

// NopHandler does nothing. Embed it in a Handler to implement only some
// methods.
type NopHandler struct{}

// MetadataChanged does nothing.
func (NopHandler) MetadataChanged(before, after *fsm.Image) {}

// BecomeLeader does nothing.
func (NopHandler) BecomeLeader(PartitionState) {}

// BecomeFollower does nothing.
func (NopHandler) BecomeFollower(PartitionState) {}

// StopReplica does nothing.
func (NopHandler) StopReplica(fsm.TopicID, int32, bool) {}

// deliver hands one batch's replica changes to h, in the documented order.
func deliver(h Handler, ch ReplicaChanges) {
	for _, s := range ch.Stopped {
		h.StopReplica(s.TopicID, s.Partition, s.Delete)
	}
	for _, p := range ch.Leaders {
		h.BecomeLeader(p)
	}
	for _, p := range ch.Followers {
		h.BecomeFollower(p)
	}
}

// LoggingHandler logs what changed for the brokers of the cluster and for
// this broker's replicas: the reference broker's observer, and a starting
// point for writing a handler.
type LoggingHandler struct {
	NopHandler
	Logger *slog.Logger
}

func (h LoggingHandler) log() *slog.Logger {
	if h.Logger == nil {
		return slog.Default()
	}
	return h.Logger
}

// MetadataChanged logs each broker registered, fenced, unfenced or gone, and
// every batch at debug level.
func (h LoggingHandler) MetadataChanged(before, after *fsm.Image) {
	log := h.log()
	log.Debug("metadata applied", "offset", after.Offset, "term", after.Term, "controller_epoch", after.ControllerEpoch)
	for _, b := range after.Brokers() {
		old, ok := before.Broker(b.ID)
		switch {
		case !ok || old.Epoch != b.Epoch:
			log.Info("broker registered", "id", b.ID, "epoch", b.Epoch, "address", b.Address, "rack", b.Rack, "state", b.State())
		case old.Fenced != b.Fenced || old.ShuttingDown != b.ShuttingDown:
			log.Info("broker "+b.State(), "id", b.ID, "epoch", b.Epoch)
		}
	}
	for _, b := range before.Brokers() {
		if _, ok := after.Broker(b.ID); !ok {
			log.Info("broker unregistered", "id", b.ID, "epoch", b.Epoch)
		}
	}
}

// BecomeLeader logs the new leadership.
func (h LoggingHandler) BecomeLeader(p PartitionState) {
	h.log().Info("become leader", "topic", p.Topic, "partition", p.Partition,
		"leader_epoch", p.LeaderEpoch, "partition_epoch", p.PartitionEpoch, "isr", p.ISR)
}

// BecomeFollower logs the leader to follow.
func (h LoggingHandler) BecomeFollower(p PartitionState) {
	h.log().Info("become follower", "topic", p.Topic, "partition", p.Partition, "leader", p.Leader,
		"leader_epoch", p.LeaderEpoch, "partition_epoch", p.PartitionEpoch, "isr", p.ISR)
}

// StopReplica logs the stop.
func (h LoggingHandler) StopReplica(topicID fsm.TopicID, partition int32, delete bool) {
	h.log().Info("stop replica", "topic_id", topicID.String(), "partition", partition, "delete", delete)
}
