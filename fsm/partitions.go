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
	if _, ok := img.topicsByName.get(topicName(r.GetName())); ok {
		return fmt.Errorf("topic %q already exists", r.GetName())
	}
	if _, ok := ctx.topic(img, id); ok {
		return fmt.Errorf("topic id %s already exists", id)
	}
	if err := checkConfigs(img, r.GetConfigs()); err != nil {
		return err
	}
	t := &Topic{Name: r.GetName(), ID: id, Configs: maps.Clone(r.GetConfigs())}
	img.topicsByName.set(ctx.own, topicName(t.Name), t)
	ctx.setTopic(img, topicEntry{topic: t, owner: ctx.own})
	return nil
}

// checkReplicas validates a partition's replica sets against each other,
// and an empty ISR against img's level (checkEmptyISR).
func checkReplicas(img *Image, p *Partition) error {
	if len(p.Replicas) == 0 {
		return errors.New("replicas is empty")
	}
	if err := checkEmptyISR(img, p); err != nil {
		return err
	}
	if hasDuplicates(p.Replicas) {
		return fmt.Errorf("replicas %v has a duplicate", p.Replicas)
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
	elr, lastKnown := p.ELR(), p.LastKnownELR()
	if hasDuplicates(elr) || !subset(elr, p.Replicas) {
		return fmt.Errorf("eligible leader replicas %v must be distinct replicas of %v", elr, p.Replicas)
	}
	for _, id := range elr {
		if slices.Contains(p.ISR, id) {
			return fmt.Errorf("replica %d is both in the isr %v and an eligible leader replica", id, p.ISR)
		}
	}
	if hasDuplicates(lastKnown) || !subset(lastKnown, p.Replicas) {
		return fmt.Errorf("last known elr %v must be distinct replicas of %v", lastKnown, p.Replicas)
	}
	if _, ok := keelpb.LeaderRecoveryState_name[int32(p.LeaderRecoveryState)]; !ok {
		return fmt.Errorf("leader recovery state %d is unknown", p.LeaderRecoveryState)
	}
	return nil
}

func applyPartition(img *Image, rec *keelpb.Record, ctx *applyContext) error {
	r := rec.GetPartition()
	id, err := topicIDFromBytes(r.GetTopicId())
	if err != nil {
		return err
	}
	e, ok := ctx.topic(img, id)
	if !ok {
		return fmt.Errorf("topic %s does not exist", id)
	}
	// Partitions are numbered densely, in order.
	if r.GetPartition() != e.topic.Partitions {
		return fmt.Errorf("partition %d of topic %q: the next partition is %d", r.GetPartition(), e.topic.Name, e.topic.Partitions)
	}
	p := ctx.slab.partition()
	*p = Partition{TopicID: id, Partition: r.GetPartition(), Leader: r.GetLeader()}
	p.Replicas = ctx.slab.int32s(r.GetReplicas())
	// The ISR is most often the whole assignment: share its array.
	if p.ISR = p.Replicas; !slices.Equal(r.GetIsr(), p.Replicas) {
		p.ISR = ctx.slab.int32s(r.GetIsr())
	}
	p.AddingReplicas = ctx.slab.int32s(r.GetAddingReplicas())
	p.RemovingReplicas = ctx.slab.int32s(r.GetRemovingReplicas())
	p.LeaderRecoveryState = r.GetLeaderRecoveryState()
	if len(r.GetEligibleLeaderReplicas()) > 0 || len(r.GetLastKnownElr()) > 0 {
		p.setEligible(ctx.slab.int32s(r.GetEligibleLeaderReplicas()), ctx.slab.int32s(r.GetLastKnownElr()))
	}
	if ctx.restoring {
		p.LeaderEpoch, p.PartitionEpoch = r.GetLeaderEpoch(), r.GetPartitionEpoch()
	} else if r.GetLeaderEpoch() != 0 || r.GetPartitionEpoch() != 0 {
		return errors.New("a new partition starts at leader and partition epoch 0")
	}
	if err := checkReplicas(img, p); err != nil {
		return err
	}
	was := e
	e = ctx.mutTopic(img, e)
	n := int(e.topic.Partitions)
	e.parts = vecSet(e.parts, n, n, p, ctx.own)
	// The count is in the topic this batch owns; the entry changes only
	// with the topic's first partition of the batch, or a new trie level.
	e.topic.Partitions++
	if e != was {
		ctx.setTopic(img, e)
	}
	img.partitions++
	if p.Reassigning() {
		img.reassigning++
	}
	// checkReplicas made AddingReplicas a subset of Replicas: indexing the
	// replicas indexes both.
	for _, b := range p.Replicas {
		ctx.addReplica(img, b, id, p.Partition)
	}
	return nil
}

// reuse returns vals, as one of the arrays in have that equals it when there
// is one (partitions share unchanged and equal replica sets), else a copy.
func reuse(vals []int32, have ...[]int32) []int32 {
	if len(vals) == 0 {
		return nil
	}
	for _, h := range have {
		if slices.Equal(vals, h) {
			return h
		}
	}
	return slices.Clone(vals)
}

func applyPartitionChange(img *Image, rec *keelpb.Record, ctx *applyContext) error {
	r := rec.GetPartitionChange()
	id, err := topicIDFromBytes(r.GetTopicId())
	if err != nil {
		return err
	}
	e, ok := ctx.topic(img, id)
	if !ok || r.GetPartition() < 0 || r.GetPartition() >= e.topic.Partitions {
		return fmt.Errorf("partition %s/%d does not exist", id, r.GetPartition())
	}
	n := int(e.topic.Partitions)
	old := vecGet(e.parts, n, int(r.GetPartition()))
	// Allocated alone, not from the slab: see slab.
	p := new(Partition)
	*p = *old
	if r.Leader != nil {
		p.Leader = r.GetLeader()
	}
	if r.Replicas != nil {
		p.Replicas = reuse(r.GetReplicas().GetValues(), old.Replicas)
	}
	if r.Isr != nil {
		p.ISR = reuse(r.GetIsr().GetValues(), p.Replicas, old.ISR)
	}
	if r.AddingReplicas != nil {
		p.AddingReplicas = reuse(r.GetAddingReplicas().GetValues(), old.AddingReplicas)
	}
	if r.RemovingReplicas != nil {
		p.RemovingReplicas = reuse(r.GetRemovingReplicas().GetValues(), old.RemovingReplicas)
	}
	if r.EligibleLeaderReplicas != nil || r.LastKnownElr != nil {
		elr, lastKnown := old.ELR(), old.LastKnownELR()
		if r.EligibleLeaderReplicas != nil {
			elr = reuse(r.GetEligibleLeaderReplicas().GetValues())
		}
		if r.LastKnownElr != nil {
			lastKnown = reuse(r.GetLastKnownElr().GetValues())
		}
		p.setEligible(elr, lastKnown)
	}
	if r.LeaderRecoveryState != nil {
		p.LeaderRecoveryState = r.GetLeaderRecoveryState()
	}
	if err := checkReplicas(img, p); err != nil {
		return err
	}
	switch was, is := old.Reassigning(), p.Reassigning(); {
	case is && !was:
		img.reassigning++
	case was && !is:
		img.reassigning--
	}
	leaderChanged := p.Leader != old.Leader
	replicaRemoved := !subset(old.Replicas, p.Replicas)
	replicasChanged := !slices.Equal(p.Replicas, old.Replicas)
	if !leaderChanged && !replicasChanged && slices.Equal(p.ISR, old.ISR) &&
		slices.Equal(p.AddingReplicas, old.AddingReplicas) && slices.Equal(p.RemovingReplicas, old.RemovingReplicas) &&
		slices.Equal(p.ELR(), old.ELR()) && slices.Equal(p.LastKnownELR(), old.LastKnownELR()) &&
		p.LeaderRecoveryState == old.LeaderRecoveryState {
		return errors.New("the change changes nothing")
	}
	// KRaft's epochs: the leader epoch moves when leadership moves or a
	// replica leaves (so a removed replica's fetches are fenced); an ISR,
	// ELR or recovery state change alone keeps it. The partition epoch
	// moves on every change.
	if leaderChanged || replicaRemoved {
		p.LeaderEpoch++
	}
	p.PartitionEpoch++
	// The first change to a topic in a batch copies the path to the
	// partition and stores the new root; later ones edit that path in place.
	if root := vecSet(e.parts, n, int(p.Partition), p, ctx.own); root != e.parts {
		e.parts = root
		ctx.setTopic(img, e)
	}
	// Leader and ISR changes, the common ones, leave the index alone.
	if replicasChanged {
		for _, b := range old.Replicas {
			if !slices.Contains(p.Replicas, b) {
				ctx.removeReplica(img, b, id, p.Partition)
			}
		}
		for _, b := range p.Replicas {
			if !slices.Contains(old.Replicas, b) {
				ctx.addReplica(img, b, id, p.Partition)
			}
		}
	}
	return nil
}

func applyRemoveTopic(img *Image, rec *keelpb.Record, ctx *applyContext) error {
	id, err := topicIDFromBytes(rec.GetRemoveTopic().GetTopicId())
	if err != nil {
		return err
	}
	e, ok := ctx.topic(img, id)
	if !ok {
		return fmt.Errorf("topic %s does not exist", id)
	}
	ctx.dropTopicReplicas(img, e)
	img.partitions -= int(e.topic.Partitions)
	if img.reassigning > 0 {
		vecEach(e.parts, int(e.topic.Partitions), func(p *Partition) bool {
			if p.Reassigning() {
				img.reassigning--
			}
			return true
		})
	}
	ctx.removeTopic(img, e)
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
