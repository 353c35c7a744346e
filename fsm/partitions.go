package fsm

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/keel-dev/keel/proto/keelpb"
)

// MaxTopicNameLen is Kafka's limit on topic names.
const MaxTopicNameLen = 249

func applyTopic(img *Image, rec *keelpb.Record, ctx *applyContext) error {
	r := rec.GetTopic()
	id, err := topicIDFromBytes(r.GetTopicId())
	if err != nil {
		return err
	}
	if id == (TopicID{}) {
		return errors.New("topic_id is zero")
	}
	if r.GetName() == "" || len(r.GetName()) > MaxTopicNameLen {
		return fmt.Errorf("topic name %q is empty or longer than %d", r.GetName(), MaxTopicNameLen)
	}
	if _, ok := ctx.topicsByName(img).Get([]byte(r.GetName())); ok {
		return fmt.Errorf("topic %q already exists", r.GetName())
	}
	if _, ok := ctx.topicsByID(img).Get(id[:]); ok {
		return fmt.Errorf("topic id %s already exists", id)
	}
	t := &Topic{Name: r.GetName(), ID: id, Configs: maps.Clone(r.GetConfigs())}
	ctx.topicsByName(img).Insert([]byte(t.Name), t)
	ctx.topicsByID(img).Insert(id[:], t)
	return nil
}

// setTopic replaces a topic in both indexes.
func setTopic(img *Image, ctx *applyContext, t *Topic) {
	ctx.topicsByName(img).Insert([]byte(t.Name), t)
	ctx.topicsByID(img).Insert(t.ID[:], t)
}

// checkReplicas validates a partition's replica sets against each other.
func checkReplicas(p *Partition) error {
	if len(p.Replicas) == 0 {
		return errors.New("replicas is empty")
	}
	if hasDuplicates(p.Replicas) {
		return fmt.Errorf("replicas %v has a duplicate", p.Replicas)
	}
	if len(p.ISR) == 0 {
		return errors.New("isr is empty")
	}
	if hasDuplicates(p.ISR) {
		return fmt.Errorf("isr %v has a duplicate", p.ISR)
	}
	if !subset(p.ISR, p.Replicas) {
		return fmt.Errorf("isr %v is not a subset of replicas %v", p.ISR, p.Replicas)
	}
	if p.Leader != NoLeader && !slices.Contains(p.ISR, p.Leader) {
		return fmt.Errorf("leader %d is not in the isr %v", p.Leader, p.ISR)
	}
	if !subset(p.AddingReplicas, p.Replicas) || !subset(p.RemovingReplicas, p.Replicas) {
		return fmt.Errorf("adding %v and removing %v must be among replicas %v", p.AddingReplicas, p.RemovingReplicas, p.Replicas)
	}
	for _, id := range p.AddingReplicas {
		if slices.Contains(p.RemovingReplicas, id) {
			return fmt.Errorf("replica %d is both being added and removed", id)
		}
	}
	return nil
}

func applyPartition(img *Image, rec *keelpb.Record, ctx *applyContext) error {
	r := rec.GetPartition()
	id, err := topicIDFromBytes(r.GetTopicId())
	if err != nil {
		return err
	}
	t, ok := ctx.topicsByID(img).Get(id[:])
	if !ok {
		return fmt.Errorf("topic %s does not exist", id)
	}
	// Partitions are numbered densely, in order.
	if r.GetPartition() != t.Partitions {
		return fmt.Errorf("partition %d of topic %q: the next partition is %d", r.GetPartition(), t.Name, t.Partitions)
	}
	p := &Partition{
		TopicID:          id,
		Partition:        r.GetPartition(),
		Replicas:         slices.Clone(r.GetReplicas()),
		ISR:              slices.Clone(r.GetIsr()),
		Leader:           r.GetLeader(),
		AddingReplicas:   slices.Clone(r.GetAddingReplicas()),
		RemovingReplicas: slices.Clone(r.GetRemovingReplicas()),
	}
	if ctx.restoring {
		p.LeaderEpoch, p.PartitionEpoch = r.GetLeaderEpoch(), r.GetPartitionEpoch()
	} else if r.GetLeaderEpoch() != 0 || r.GetPartitionEpoch() != 0 {
		return errors.New("a new partition starts at leader and partition epoch 0")
	}
	if err := checkReplicas(p); err != nil {
		return err
	}
	ctx.partitions(img).Insert(partitionKey(id, p.Partition), p)
	indexReplicas(img, ctx, p, nil)
	next := *t
	next.Partitions++
	setTopic(img, ctx, &next)
	return nil
}

// indexReplicas moves a partition's replica index entries from old's
// brokers to p's (old nil: a new partition; p nil: a removed one).
func indexReplicas(img *Image, ctx *applyContext, p, old *Partition) {
	brokers := func(q *Partition) []int32 {
		if q == nil {
			return nil
		}
		return append(slices.Clone(q.Replicas), q.AddingReplicas...)
	}
	idx := ctx.replicaIndex(img)
	now := brokers(p)
	for _, b := range brokers(old) {
		if !slices.Contains(now, b) {
			idx.Delete(replicaKey(b, old.TopicID, old.Partition))
		}
	}
	for _, b := range now {
		idx.Insert(replicaKey(b, p.TopicID, p.Partition), struct{}{})
	}
}

func applyPartitionChange(img *Image, rec *keelpb.Record, ctx *applyContext) error {
	r := rec.GetPartitionChange()
	id, err := topicIDFromBytes(r.GetTopicId())
	if err != nil {
		return err
	}
	old, ok := ctx.partitions(img).Get(partitionKey(id, r.GetPartition()))
	if !ok {
		return fmt.Errorf("partition %s/%d does not exist", id, r.GetPartition())
	}
	p := *old
	if r.Leader != nil {
		p.Leader = r.GetLeader()
	}
	if r.Isr != nil {
		p.ISR = slices.Clone(r.GetIsr().GetValues())
	}
	if r.Replicas != nil {
		p.Replicas = slices.Clone(r.GetReplicas().GetValues())
	}
	if r.AddingReplicas != nil {
		p.AddingReplicas = slices.Clone(r.GetAddingReplicas().GetValues())
	}
	if r.RemovingReplicas != nil {
		p.RemovingReplicas = slices.Clone(r.GetRemovingReplicas().GetValues())
	}
	if err := checkReplicas(&p); err != nil {
		return err
	}
	leaderChanged := p.Leader != old.Leader
	replicaRemoved := !subset(old.Replicas, p.Replicas)
	if !leaderChanged && !replicaRemoved && slices.Equal(p.ISR, old.ISR) && slices.Equal(p.Replicas, old.Replicas) &&
		slices.Equal(p.AddingReplicas, old.AddingReplicas) && slices.Equal(p.RemovingReplicas, old.RemovingReplicas) {
		return errors.New("the change changes nothing")
	}
	// KRaft's epochs: the leader epoch moves when leadership moves or a
	// replica leaves (so a removed replica's fetches are fenced); an ISR
	// change alone keeps it. The partition epoch moves on every change.
	if leaderChanged || replicaRemoved {
		p.LeaderEpoch++
	}
	p.PartitionEpoch++
	ctx.partitions(img).Insert(partitionKey(id, p.Partition), &p)
	indexReplicas(img, ctx, &p, old)
	return nil
}

func applyRemoveTopic(img *Image, rec *keelpb.Record, ctx *applyContext) error {
	id, err := topicIDFromBytes(rec.GetRemoveTopic().GetTopicId())
	if err != nil {
		return err
	}
	t, ok := ctx.topicsByID(img).Get(id[:])
	if !ok {
		return fmt.Errorf("topic %s does not exist", id)
	}
	parts := ctx.partitions(img)
	for i := int32(0); i < t.Partitions; i++ {
		if p, ok := parts.Delete(partitionKey(id, i)); ok {
			indexReplicas(img, ctx, nil, p)
		}
	}
	ctx.topicsByName(img).Delete([]byte(t.Name))
	ctx.topicsByID(img).Delete(id[:])
	return nil
}

func applyBrokerShuttingDown(img *Image, rec *keelpb.Record, ctx *applyContext) error {
	r := rec.GetBrokerShuttingDown()
	b, err := currentBroker(img, r.GetBrokerId(), r.GetBrokerEpoch())
	if err != nil {
		return err
	}
	if b.Fenced || b.ShuttingDown {
		return fmt.Errorf("broker %d is %s, not active", b.ID, b.State())
	}
	next := *b
	next.ShuttingDown = true
	ctx.mutBrokers(img)[b.ID] = &next
	return nil
}

func hasDuplicates(ids []int32) bool {
	for i, a := range ids {
		if slices.Contains(ids[i+1:], a) {
			return true
		}
	}
	return false
}

// subset reports whether every id of a is in b.
func subset(a, b []int32) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}
