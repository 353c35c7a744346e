package fsm

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
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
	Name       string
	ID         TopicID
	Configs    map[string]string // never modified after creation
	Partitions int32             // number of partitions, numbered 0..Partitions-1
}

// UncleanLeaderElection is the topic config that lets a replica outside the
// ISR become leader when no ISR member is alive (Kafka's
// unclean.leader.election.enable, default false).
const UncleanLeaderElection = "unclean.leader.election.enable"

// Unclean reports whether the topic allows unclean leader election.
func (t *Topic) Unclean() bool { return t.Configs[UncleanLeaderElection] == "true" }

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
	// An ongoing reassignment.
	AddingReplicas, RemovingReplicas []int32
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
