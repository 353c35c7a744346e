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
	var gs []*group
	c.mu.Lock()
	for _, part := range c.parts {
		if part.loaded {
			for _, g := range part.groups {
				gs = append(gs, g)
			}
		}
	}
	c.mu.Unlock()
	for _, g := range gs {
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
