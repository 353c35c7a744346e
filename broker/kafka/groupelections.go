package kafka

import (
	"sync"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/broker/group"
	"github.com/keel-dev/keel/fsm"
)

// GroupElections tells the group coordinator which __consumer_offsets
// partitions this broker leads (Groups.Elect and Resign). It is a
// broker.Handler: the agent calls it after the data plane (which it tells
// first) has made the local replica the leader, or a follower, or stopped
// it, so that a coordinator that loads its partition reads a replica that
// already leads. Calls made before the listener's coordinator exists (the
// agent replays its metadata before the listener starts) are remembered
// and made once it is attached.
type GroupElections struct {
	broker.NopHandler
	next broker.Handler

	mu     sync.Mutex
	groups Groups // nil until attached, and after detach
	// topic is __consumer_offsets as the last image had it (its id is how
	// StopReplica names it, its partition count how Elect's groups are
	// placed); led: the partitions this broker leads, by leader epoch.
	topicID    fsm.TopicID
	partitions int32
	led        map[int32]int32
}

// NewGroupElections returns a handler that calls next (may be nil) first,
// then acts on __consumer_offsets' leaderships.
func NewGroupElections(next broker.Handler) *GroupElections {
	if next == nil {
		next = broker.NopHandler{}
	}
	return &GroupElections{next: next, led: map[int32]int32{}}
}

var _ broker.Handler = (*GroupElections)(nil)

// topicsDeleter is a coordinator that drops the committed offsets of
// deleted topics (broker/group's Coordinator.TopicsDeleted), so that a
// topic made again under the same name is not read from its
// predecessor's offsets, as Kafka's handleDeletedPartitions.
type topicsDeleter interface{ TopicsDeleted(topics []string) }

// MetadataChanged remembers __consumer_offsets' id and partition count,
// and tells the coordinator of topics deleted.
func (e *GroupElections) MetadataChanged(before, after *fsm.Image) {
	e.next.MetadataChanged(before, after)
	e.mu.Lock()
	if t, ok := after.Topic(group.OffsetsTopic); ok {
		e.topicID, e.partitions = t.ID, t.Partitions
	}
	d, _ := e.groups.(topicsDeleter)
	e.mu.Unlock()
	if d != nil {
		if gone := deletedTopics(before, after); len(gone) > 0 {
			d.TopicsDeleted(gone)
		}
	}
}

// deletedTopics are the topics of before that after does not have (or
// has under another id). A deletion is a batch of its own, which lowers
// the count: only then are the topics walked, so that the batches of a
// cluster of many topics cost nothing here.
func deletedTopics(before, after *fsm.Image) []string {
	if after.TopicCount() >= before.TopicCount() {
		return nil
	}
	var gone []string
	for _, t := range before.Topics() {
		if now, ok := after.Topic(t.Name); !ok || now.ID != t.ID {
			gone = append(gone, t.Name)
		}
	}
	return gone
}

// BecomeLeader elects the coordinator of a partition this broker now
// leads, or leads in a new epoch (which reloads it).
func (e *GroupElections) BecomeLeader(p broker.PartitionState) {
	e.next.BecomeLeader(p)
	if p.Topic != group.OffsetsTopic {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.led[p.Partition] = p.LeaderEpoch
	if e.groups != nil {
		e.groups.Elect(p.Partition, p.LeaderEpoch, e.partitions)
	}
}

// BecomeFollower resigns a partition another broker leads now (or none).
func (e *GroupElections) BecomeFollower(p broker.PartitionState) {
	e.next.BecomeFollower(p)
	if p.Topic == group.OffsetsTopic {
		e.resign(p.Partition)
	}
}

// StopReplica resigns a partition whose replica here stops: its topic
// deleted, the replica moved away, or the broker stopping.
func (e *GroupElections) StopReplica(topicID fsm.TopicID, partition int32, delete bool) {
	e.next.StopReplica(topicID, partition, delete)
	e.mu.Lock()
	ours := topicID == e.topicID
	e.mu.Unlock()
	if ours {
		e.resign(partition)
	}
}

func (e *GroupElections) resign(partition int32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.led[partition]; !ok {
		return
	}
	delete(e.led, partition)
	if e.groups != nil {
		e.groups.Resign(partition)
	}
}

// attach hands the leaderships to g from now on, and elects it for those
// this broker holds already.
func (e *GroupElections) attach(g Groups) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.groups = g
	for p, epoch := range e.led {
		g.Elect(p, epoch, e.partitions)
	}
}

// detach stops handing leaderships to the coordinator (the listener
// closes).
func (e *GroupElections) detach() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.groups = nil
}
