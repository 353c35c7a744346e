package group

import (
	"context"
	"time"
)

// Kafka's offsets.retention.minutes (7 days) and
// offsets.retention.check.interval.ms (10 minutes).
const (
	defaultOffsetsRetention = 7 * 24 * time.Hour
	retentionCheckInterval  = 10 * time.Minute
)

// armExpiry schedules the next sweep of expired offsets.
func (c *Coordinator) armExpiry() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.expiry = c.cfg.afterFunc(retentionCheckInterval, func() {
		c.background(c.expireOffsets)
		c.armExpiry()
	})
}

// expireOffsets removes the offsets past their retention from every group
// loaded here, and the Empty groups left with none, as Kafka's
// GroupMetadataManager.cleanupGroupMetadata.
func (c *Coordinator) expireOffsets() {
	for _, g := range c.loadedGroups() {
		if g.expire() {
			c.forget(g)
		}
	}
}

// expire writes tombstones for g's expired offsets, and for g itself when
// it is Empty and has none left: true when g is gone. Kafka's
// removeExpiredOffsets: an Empty group's offsets expire a retention after
// it became Empty; a group that never had members (offsets committed
// without one) expires each offset a retention after its commit; a Stable
// consumer group, the offsets of topics no member subscribes to (KIP-496).
func (g *group) expire() bool {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	g.mu.Lock()
	now := g.c.cfg.now()
	retention := g.c.cfg.OffsetsRetention
	var subscribed map[string]bool
	switch {
	case g.state == stateEmpty:
	case g.state == stateStable && g.protocolType == "consumer":
		if subscribed = g.subscribedTopics(); subscribed == nil {
			g.mu.Unlock()
			return false
		}
	default:
		g.mu.Unlock()
		return false
	}
	var records []Record
	var expired []topicPartition
	for _, tp := range sortedPartitions(g.offsets) {
		o := g.offsets[tp]
		base := time.UnixMilli(o.commitMillis)
		if g.state == stateEmpty && g.protocolType != "" {
			base = g.stateTime
		}
		if subscribed[tp.topic] || now.Sub(base) < retention {
			continue
		}
		records = append(records, Record{Key: offsetKey(g.id, tp.topic, tp.partition)})
		expired = append(expired, tp)
	}
	gone := g.state == stateEmpty && len(expired) == len(g.offsets)
	if gone {
		records = append(records, Record{Key: groupKey(g.id)})
		g.stopTimers()
		g.transition(stateDead)
	}
	g.mu.Unlock()
	if len(records) == 0 {
		return false
	}
	code := g.appendRecords(context.Background(), records, true)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.resigned {
		return false
	}
	if code != 0 {
		if gone {
			g.transition(stateEmpty)
		}
		return false
	}
	for _, tp := range expired {
		delete(g.offsets, tp)
	}
	if len(expired) > 0 {
		g.c.log.Info("group offsets expired", "group", g.id, "partitions", len(expired), "group_removed", gone)
	}
	return gone
}

// TopicsDeleted removes the committed offsets of deleted topics from the
// groups loaded here, as Kafka's handleDeletedPartitions, so that a topic
// made again under the same name is not read from its predecessor's
// offsets. The listener calls it when the image loses topics; the
// tombstones are written in the background, each group's in one batch.
func (c *Coordinator) TopicsDeleted(topics []string) {
	if len(topics) == 0 {
		return
	}
	deleted := make(map[string]bool, len(topics))
	for _, t := range topics {
		deleted[t] = true
	}
	c.background(func() {
		for _, g := range c.loadedGroups() {
			g.removeOffsets(func(tp topicPartition) bool { return deleted[tp.topic] })
		}
	})
}

// loadedGroups are the groups of the partitions loaded here.
func (c *Coordinator) loadedGroups() []*group {
	var gs []*group
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, part := range c.parts {
		if part.loaded {
			for _, g := range part.groups {
				gs = append(gs, g)
			}
		}
	}
	return gs
}

// removeOffsets writes tombstones for g's offsets that match, and removes
// them once committed.
func (g *group) removeOffsets(match func(topicPartition) bool) {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	g.mu.Lock()
	var records []Record
	var gone []topicPartition
	for _, tp := range sortedPartitions(g.offsets) {
		if match(tp) {
			records = append(records, Record{Key: offsetKey(g.id, tp.topic, tp.partition)})
			gone = append(gone, tp)
		}
	}
	dead := g.state == stateDead
	g.mu.Unlock()
	if len(records) == 0 || dead {
		return
	}
	if code := g.appendRecords(context.Background(), records, true); code != 0 {
		return // logged; the offsets stay, as in the log
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, tp := range gone {
		delete(g.offsets, tp)
	}
}
