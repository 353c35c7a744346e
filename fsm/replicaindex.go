package fsm

import (
	"cmp"
	"math"
	"slices"
)

// The replica index answers "which partitions are on broker b" without a
// scan: per (broker, topic) a sorted list of partition numbers, 4 bytes a
// replica. Only replica-set changes touch it (creating a partition, a
// reassignment, deleting a topic); leader and ISR changes, the common ones,
// do not.
//
// A topic's list on a broker is cut into buckets of 8192 partition numbers,
// so that a change to one replica of a huge topic copies at most one
// bucket's list, not every partition the broker holds of that topic.
const bucketBits = 13

// replicaKey orders the index by broker, then topic id, then bucket: a
// broker's walk meets partitions in (topic id, partition) order.
type replicaKey struct {
	broker int32
	bucket int32
	topic  TopicID
}

func (a replicaKey) compare(b replicaKey) int {
	if c := cmp.Compare(a.broker, b.broker); c != 0 {
		return c
	}
	if c := a.topic.compare(b.topic); c != 0 {
		return c
	}
	return cmp.Compare(a.bucket, b.bucket)
}

func replicaKeyOf(broker int32, topic TopicID, partition int32) replicaKey {
	return replicaKey{broker: broker, bucket: partition >> bucketBits, topic: topic}
}

// replicaList is never modified once published; a batch edits its own
// copy.
type replicaList struct {
	owner *owner
	parts []int32 // partition numbers, ascending
}

// listCacheSize slots, one per broker id modulo the size, remember the
// list each broker's replicas last went to. Creating a topic (or restoring
// one) adds a partition's replicas to the same lists over and over, so the
// cache saves a tree lookup per replica.
const listCacheSize = 256

type listCache [listCacheSize]cachedList

type cachedList struct {
	key  replicaKey
	list *replicaList
}

// slot is k's place in the cache.
func (c *listCache) slot(k replicaKey) *cachedList { return &c[uint32(k.broker)%listCacheSize] }

// PartitionsOnBroker calls fn for every partition that has broker id among
// its replicas (or replicas being added), until fn returns false. It costs
// O(partitions on the broker), not O(all partitions).
func (img *Image) PartitionsOnBroker(id int32, fn func(*Partition) bool) {
	var e topicEntry
	img.replicas.ascendFrom(replicaKey{broker: id, bucket: math.MinInt32}, func(k replicaKey, l *replicaList) bool {
		if k.broker != id {
			return false
		}
		if e.topic == nil || e.topic.ID != k.topic {
			var ok bool
			if e, ok = img.topicsByID.get(k.topic); !ok {
				return true // cannot happen: a topic's removal clears its lists
			}
		}
		n := int(e.topic.Partitions)
		for _, i := range l.parts {
			if !fn(vecGet(e.parts, n, int(i))) {
				return false
			}
		}
		return true
	})
}

// ownedList returns the batch's own list for k, copying the published one
// on first use; if there is none, a new empty list when create is set, else
// nil.
func (ctx *applyContext) ownedList(img *Image, k replicaKey, create bool) *replicaList {
	if ctx.lists == nil {
		ctx.lists = new(listCache)
	}
	slot := ctx.lists.slot(k)
	if slot.list != nil && slot.key == k {
		return slot.list
	}
	l, ok := img.replicas.get(k)
	switch {
	case ok && l.owner == ctx.own:
	case ok:
		l = &replicaList{owner: ctx.own, parts: slices.Clone(l.parts)}
		img.replicas.set(ctx.own, k, l)
		ctx.built = append(ctx.built, l)
	case create:
		l = &replicaList{owner: ctx.own}
		img.replicas.set(ctx.own, k, l)
		ctx.built = append(ctx.built, l)
	default:
		return nil
	}
	slot.key, slot.list = k, l
	return l
}

// dropList removes k's list from the index.
func (ctx *applyContext) dropList(img *Image, k replicaKey) {
	img.replicas.delete(ctx.own, k)
	if ctx.lists != nil {
		if slot := ctx.lists.slot(k); slot.key == k {
			slot.list = nil
		}
	}
}

// addReplica indexes partition of topic under broker.
func (ctx *applyContext) addReplica(img *Image, broker int32, topic TopicID, partition int32) {
	l := ctx.ownedList(img, replicaKeyOf(broker, topic, partition), true)
	// Partitions are created in order, so appending is the common case.
	if n := len(l.parts); n == 0 || l.parts[n-1] < partition {
		l.parts = append(l.parts, partition)
		return
	}
	if i, found := slices.BinarySearch(l.parts, partition); !found {
		l.parts = slices.Insert(l.parts, i, partition)
	}
}

// removeReplica drops partition of topic from broker's index.
func (ctx *applyContext) removeReplica(img *Image, broker int32, topic TopicID, partition int32) {
	k := replicaKeyOf(broker, topic, partition)
	l := ctx.ownedList(img, k, false)
	if l == nil {
		return
	}
	if i, found := slices.BinarySearch(l.parts, partition); found {
		l.parts = slices.Delete(l.parts, i, i+1)
	}
	if len(l.parts) == 0 {
		ctx.dropList(img, k)
	}
}

// dropTopicReplicas removes every index entry of the topic e, whose
// partitions are about to go.
func (ctx *applyContext) dropTopicReplicas(img *Image, e topicEntry) {
	gone := map[replicaKey]bool{}
	vecEach(e.parts, int(e.topic.Partitions), func(p *Partition) bool {
		for _, b := range p.Replicas {
			k := replicaKeyOf(b, p.TopicID, p.Partition)
			if !gone[k] {
				gone[k] = true
				ctx.dropList(img, k)
			}
		}
		return true
	})
}

// trimLists gives back the spare capacity appends left in the lists this
// batch built, before they are published and frozen.
func (ctx *applyContext) trimLists() {
	for _, l := range ctx.built {
		if cap(l.parts)-len(l.parts) > len(l.parts)/8+4 {
			l.parts = slices.Clone(l.parts)
		}
	}
}
