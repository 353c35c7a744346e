package broker

import (
	"bytes"
	"slices"

	"github.com/keel-dev/keel/fsm"
)

// TopicPartition names one partition.
type TopicPartition struct {
	TopicID   fsm.TopicID
	Partition int32
}

// StoppedReplica is a replica this broker must stop (see Handler.StopReplica).
type StoppedReplica struct {
	Topic     string // as the before image named it
	TopicID   fsm.TopicID
	Partition int32
	Delete    bool
}

// ReplicaChanges is what one applied batch or snapshot means for one
// broker's replicas: the seeds' StopReplica and LeaderAndIsr requests,
// derived instead of sent. Each list is in topic id, then partition order.
type ReplicaChanges struct {
	Stopped   []StoppedReplica
	Leaders   []PartitionState
	Followers []PartitionState
}

// Empty reports whether nothing changed for the broker's replicas.
func (c ReplicaChanges) Empty() bool {
	return len(c.Stopped) == 0 && len(c.Leaders) == 0 && len(c.Followers) == 0
}

// DiffReplicas compares broker's replicas in before and after. A replica
// (the broker is among the partition's replicas, including replicas being
// added) that is new, or whose leader or leader epoch changed, or whose role
// changed, becomes leader or follower; one that is no longer the broker's
// (its topic deleted, or reassigned away) is stopped and deleted. An ISR,
// replica-set or partition-epoch change alone changes no role. A topic
// deleted and created again under the same name is another topic id: the
// old replica is stopped, the new one started.
//
// It walks the broker's replicas in both images (fsm's per-broker index),
// so it costs O(replicas on this broker), whatever the cluster's size; an
// unchanged partition is the same pointer in both images and is passed over
// at the cost of a comparison.
func DiffReplicas(broker int32, before, after *fsm.Image) ReplicaChanges {
	var ch ReplicaChanges
	if before == after {
		return ch
	}
	var old []*fsm.Partition
	before.PartitionsOnBroker(broker, func(p *fsm.Partition) bool {
		old = append(old, p)
		return true
	})
	stop := func(p *fsm.Partition) {
		s := StoppedReplica{TopicID: p.TopicID, Partition: p.Partition, Delete: true}
		if t, ok := before.TopicByID(p.TopicID); ok {
			s.Topic = t.Name
		}
		ch.Stopped = append(ch.Stopped, s)
	}
	// Both walks are in (topic id, partition) order: merge them.
	i := 0
	after.PartitionsOnBroker(broker, func(p *fsm.Partition) bool {
		for i < len(old) && comparePartitions(old[i], p) < 0 {
			stop(old[i])
			i++
		}
		var prev *fsm.Partition
		if i < len(old) && comparePartitions(old[i], p) == 0 {
			prev = old[i]
			i++
		}
		if prev == p {
			return true
		}
		isLeader := p.Leader == broker
		switch {
		case prev != nil && prev.Leader == p.Leader && prev.LeaderEpoch == p.LeaderEpoch:
			// Same role, same leader, same epoch: ISR or assignment only.
		case isLeader:
			ch.Leaders = append(ch.Leaders, partitionState(topicName(after, p.TopicID), p))
		default:
			ch.Followers = append(ch.Followers, partitionState(topicName(after, p.TopicID), p))
		}
		return true
	})
	for ; i < len(old); i++ {
		stop(old[i])
	}
	return ch
}

func comparePartitions(a, b *fsm.Partition) int {
	if c := bytes.Compare(a.TopicID[:], b.TopicID[:]); c != 0 {
		return c
	}
	switch {
	case a.Partition < b.Partition:
		return -1
	case a.Partition > b.Partition:
		return 1
	}
	return 0
}

func topicName(img *fsm.Image, id fsm.TopicID) string {
	if t, ok := img.TopicByID(id); ok {
		return t.Name
	}
	return ""
}

// StrayReplicas returns those of held that img does not assign to broker:
// replicas of topics deleted, or moved off the broker, while it was not
// following the metadata (see Handler on restarts). Call it once img has
// caught up with the broker's registration; an earlier image may simply not
// have reached the topic's creation yet. It costs O(len(held)).
func StrayReplicas(img *fsm.Image, broker int32, held []TopicPartition) []TopicPartition {
	var out []TopicPartition
	for _, tp := range held {
		p, ok := img.Partition(tp.TopicID, tp.Partition)
		if !ok || !slices.Contains(p.Replicas, broker) {
			out = append(out, tp)
		}
	}
	return out
}
