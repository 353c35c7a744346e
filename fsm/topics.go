package fsm

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/keel-dev/keel/proto/keelpb"
)

// TopicID is a topic's 16-byte id (a UUID), chosen by the controller.
type TopicID [16]byte

// String formats the id as a UUID.
func (id TopicID) String() string {
	var buf [36]byte
	hex.Encode(buf[0:8], id[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], id[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], id[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], id[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:], id[10:])
	return string(buf[:])
}

// ParseTopicID reads a UUID-formatted or raw 16-byte topic id.
func ParseTopicID(s string) (TopicID, error) {
	var id TopicID
	if len(s) == 16 {
		copy(id[:], s)
		return id, nil
	}
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return id, fmt.Errorf("topic id %q is not a UUID", s)
	}
	raw := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:]
	if _, err := hex.Decode(id[:], []byte(raw)); err != nil {
		return id, fmt.Errorf("topic id %q is not a UUID", s)
	}
	return id, nil
}

func topicIDFromBytes(b []byte) (TopicID, error) {
	var id TopicID
	if len(b) != len(id) {
		return id, fmt.Errorf("topic_id has %d bytes, want 16", len(b))
	}
	copy(id[:], b)
	return id, nil
}

// Topic is one topic. Immutable once published, like every image value.
type Topic struct {
	Name string
	ID   TopicID
	// Configs are the topic's own configs (configs.go), each one that
	// CheckConfig accepts. The map is never modified once published: a
	// ConfigRecord gives the topic a new one.
	Configs    map[string]string
	Partitions int32 // number of partitions, numbered 0..Partitions-1
}

// NoLeader is the leader of a partition without one.
const NoLeader int32 = -1

// Partition is one partition's assignment and leadership. Like every image
// value it is never modified once published; its slices may share arrays
// with each other (an ISR equal to the replicas is the replicas' array) and
// with other versions of the partition, so copy before changing one.
type Partition struct {
	TopicID   TopicID
	Partition int32
	// Replicas is the assignment, preferred leader first.
	Replicas []int32
	ISR      []int32
	Leader   int32
	// LeaderEpoch grows when the leader changes or a replica is removed;
	// PartitionEpoch on every change.
	LeaderEpoch    int32
	PartitionEpoch int32
	// LeaderRecoveryState is RECOVERING after an unclean election, until
	// the leader confirms through AlterPartition (KIP-704).
	LeaderRecoveryState keelpb.LeaderRecoveryState
	// An ongoing reassignment.
	AddingReplicas, RemovingReplicas []int32
	// eligible holds the eligible leader replicas and the last known
	// leader: nil for a partition with neither, which is nearly all of
	// them, so that they cost a healthy partition one pointer.
	eligible *eligibleReplicas
}

// eligibleReplicas are a degraded partition's KIP-966 fields.
type eligibleReplicas struct {
	elr, lastKnown []int32
}

// ELR returns the eligible leader replicas (KIP-966): replicas that left
// the ISR while it was below min.insync.replicas, so that they hold every
// committed record and may lead when no ISR member can. They are never in
// the ISR. Do not modify the slice.
func (p *Partition) ELR() []int32 {
	if p.eligible == nil {
		return nil
	}
	return p.eligible.elr
}

// LastKnownELR returns the last known leader (KRaft's LastKnownElr, in
// its last-known-leader mode): set when the partition loses its leader and
// no replica can take over, cleared when it has a leader again. Do not
// modify the slice.
func (p *Partition) LastKnownELR() []int32 {
	if p.eligible == nil {
		return nil
	}
	return p.eligible.lastKnown
}

// Recovering reports whether the partition's leader is recovering from an
// unclean election.
func (p *Partition) Recovering() bool {
	return p.LeaderRecoveryState == keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERING
}

// WithEligible returns a copy of p with the given eligible leader replicas
// and last known leader, for tests and tools that build partitions by
// hand. The image's own partitions change only through records.
func (p Partition) WithEligible(elr, lastKnown []int32) *Partition {
	p.setEligible(slices.Clone(elr), slices.Clone(lastKnown))
	return &p
}

func (p *Partition) setEligible(elr, lastKnown []int32) {
	if len(elr) == 0 && len(lastKnown) == 0 {
		p.eligible = nil
		return
	}
	p.eligible = &eligibleReplicas{elr: elr, lastKnown: lastKnown}
}

// HasLeader reports whether the partition has a leader.
func (p *Partition) HasLeader() bool { return p.Leader != NoLeader }

// InISR reports whether broker id is in the ISR.
func (p *Partition) InISR(id int32) bool { return slices.Contains(p.ISR, id) }

// Reassigning reports whether a reassignment is in progress.
func (p *Partition) Reassigning() bool {
	return len(p.AddingReplicas) > 0 || len(p.RemovingReplicas) > 0
}

// topicName orders topics by name, byte by byte.
type topicName string

func (a topicName) compare(b topicName) int { return strings.Compare(string(a), string(b)) }

// compare orders topic ids byte by byte, as EachPartition and snapshots
// walk them.
func (id TopicID) compare(o TopicID) int { return bytes.Compare(id[:], o[:]) }

// topicEntry is a topic and its partitions, a vector of topic.Partitions
// elements (partvec.go).
type topicEntry struct {
	topic *Topic
	parts *vnode
	// owner is the batch that made topic; only that batch may edit it.
	owner *owner
}

// Topic returns the topic named name.
func (img *Image) Topic(name string) (*Topic, bool) {
	return img.topicsByName.get(topicName(name))
}

// TopicByID returns the topic with id.
func (img *Image) TopicByID(id TopicID) (*Topic, bool) {
	e, ok := img.topicsByID.get(id)
	return e.topic, ok
}

// Topics returns every topic, in name order.
func (img *Image) Topics() []*Topic {
	var out []*Topic
	if n := img.topicsByName.Len(); n > 0 {
		out = make([]*Topic, 0, n)
	}
	img.topicsByName.each(func(_ topicName, t *Topic) bool {
		out = append(out, t)
		return true
	})
	return out
}

// TopicCount is the number of topics.
func (img *Image) TopicCount() int { return img.topicsByName.Len() }

// PartitionCount is the number of partitions of every topic.
func (img *Image) PartitionCount() int { return img.partitions }

// Reassignments is the number of partitions with a reassignment in
// progress.
func (img *Image) Reassignments() int { return img.reassigning }

// Partition returns one partition.
func (img *Image) Partition(id TopicID, partition int32) (*Partition, bool) {
	e, ok := img.topicsByID.get(id)
	if !ok || partition < 0 || partition >= e.topic.Partitions {
		return nil, false
	}
	return vecGet(e.parts, int(e.topic.Partitions), int(partition)), true
}

// Partitions returns the partitions of a topic, in order.
func (img *Image) Partitions(id TopicID) []*Partition {
	e, ok := img.topicsByID.get(id)
	if !ok || e.topic.Partitions == 0 {
		return nil
	}
	out := make([]*Partition, 0, e.topic.Partitions)
	vecEach(e.parts, int(e.topic.Partitions), func(p *Partition) bool {
		out = append(out, p)
		return true
	})
	return out
}

// EachPartition calls fn for every partition, in topic-id then partition
// order, until fn returns false.
func (img *Image) EachPartition(fn func(*Partition) bool) {
	img.topicsByID.each(func(_ TopicID, e topicEntry) bool {
		return vecEach(e.parts, int(e.topic.Partitions), fn)
	})
}
