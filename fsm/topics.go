package fsm

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"

	iradix "github.com/hashicorp/go-immutable-radix/v2"
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

// Partition is one partition's assignment and leadership.
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

// partitionKey orders partitions by topic id, then partition number.
func partitionKey(id TopicID, partition int32) []byte {
	k := make([]byte, 20)
	copy(k, id[:])
	binary.BigEndian.PutUint32(k[16:], uint32(partition))
	return k
}

// replicaKey indexes a partition under one of its brokers.
func replicaKey(broker int32, id TopicID, partition int32) []byte {
	k := make([]byte, 24)
	binary.BigEndian.PutUint32(k, uint32(broker))
	copy(k[4:], id[:])
	binary.BigEndian.PutUint32(k[20:], uint32(partition))
	return k
}

func brokerPrefix(broker int32) []byte {
	return binary.BigEndian.AppendUint32(nil, uint32(broker))
}

// Topic returns the topic named name.
func (img *Image) Topic(name string) (*Topic, bool) {
	if img.topicsByName == nil {
		return nil, false
	}
	return img.topicsByName.Get([]byte(name))
}

// TopicByID returns the topic with id.
func (img *Image) TopicByID(id TopicID) (*Topic, bool) {
	if img.topicsByID == nil {
		return nil, false
	}
	return img.topicsByID.Get(id[:])
}

// Topics returns every topic, in name order.
func (img *Image) Topics() []*Topic {
	var out []*Topic
	if img.topicsByName != nil {
		img.topicsByName.Root().Walk(func(_ []byte, t *Topic) bool {
			out = append(out, t)
			return false
		})
	}
	return out
}

// TopicCount is the number of topics.
func (img *Image) TopicCount() int {
	if img.topicsByName == nil {
		return 0
	}
	return img.topicsByName.Len()
}

// PartitionCount is the number of partitions of every topic.
func (img *Image) PartitionCount() int {
	if img.partitions == nil {
		return 0
	}
	return img.partitions.Len()
}

// Partition returns one partition.
func (img *Image) Partition(id TopicID, partition int32) (*Partition, bool) {
	if img.partitions == nil {
		return nil, false
	}
	return img.partitions.Get(partitionKey(id, partition))
}

// Partitions returns the partitions of a topic, in order.
func (img *Image) Partitions(id TopicID) []*Partition {
	var out []*Partition
	if img.partitions != nil {
		img.partitions.Root().WalkPrefix(id[:], func(_ []byte, p *Partition) bool {
			out = append(out, p)
			return false
		})
	}
	return out
}

// EachPartition calls fn for every partition, in topic-id then partition
// order, until fn returns false.
func (img *Image) EachPartition(fn func(*Partition) bool) {
	if img.partitions != nil {
		img.partitions.Root().Walk(func(_ []byte, p *Partition) bool { return !fn(p) })
	}
}

// PartitionsOnBroker calls fn for every partition that has broker id among
// its replicas (or replicas being added), until fn returns false. It costs
// O(partitions on the broker), not O(all partitions).
func (img *Image) PartitionsOnBroker(id int32, fn func(*Partition) bool) {
	if img.replicaIndex == nil {
		return
	}
	img.replicaIndex.Root().WalkPrefix(brokerPrefix(id), func(k []byte, _ struct{}) bool {
		tid, _ := topicIDFromBytes(k[4:20])
		p, ok := img.Partition(tid, int32(binary.BigEndian.Uint32(k[20:])))
		return ok && !fn(p)
	})
}

// treeOr returns t, or a new empty tree when t is nil (an image built as a
// literal in a test, say).
func treeOr[T any](t *iradix.Tree[T]) *iradix.Tree[T] {
	if t == nil {
		return iradix.New[T]()
	}
	return t
}
