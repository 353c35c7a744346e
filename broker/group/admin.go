package group

import (
	"context"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// classicType is the group type ListGroups answers (KIP-848's names).
const classicType = "classic"

// DescribeGroup describes a group as Kafka's GroupMetadata.summary: a
// Stable group's members with their metadata and assignment, other
// states' members without. A group not known is Dead, with
// GROUP_ID_NOT_FOUND from v6 (KIP-1043).
func (c *Coordinator) DescribeGroup(ctx context.Context, version int16, groupID string) kmsg.DescribeGroupsResponseGroup {
	resp := kmsg.NewDescribeGroupsResponseGroup()
	resp.Group = groupID
	g, code := c.lookup(groupID, false)
	if code != 0 {
		resp.ErrorCode = code
		return resp
	}
	dead := func() kmsg.DescribeGroupsResponseGroup {
		resp.State = stateDead.String()
		if version >= 6 {
			resp.ErrorCode = kerr.GroupIDNotFound.Code
			resp.ErrorMessage = kmsg.StringPtr("group " + groupID + " is not known")
		}
		return resp
	}
	if g == nil {
		return dead()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state == stateDead {
		if g.resigned {
			resp.ErrorCode = kerr.NotCoordinator.Code
			return resp
		}
		return dead()
	}
	resp.State = g.state.String()
	resp.ProtocolType = g.protocolType
	stable := g.state == stateStable
	if stable {
		resp.Protocol = g.protocol
	}
	for _, id := range g.memberIDs() {
		m := g.members[id]
		dm := kmsg.DescribeGroupsResponseGroupMember{MemberID: m.id, InstanceID: m.instanceID, ClientID: m.clientID, ClientHost: m.host}
		if stable {
			dm.ProtocolMetadata = m.metadata(g.protocol)
			dm.MemberAssignment = m.assignment
		}
		resp.Members = append(resp.Members, dm)
	}
	return resp
}

// ListGroups lists the groups of the partitions loaded here, filtered by
// state and type (case-insensitive, as Kafka); code is
// COORDINATOR_LOAD_IN_PROGRESS while a partition loads, with the groups
// loaded so far, as Kafka's handleListGroups.
func (c *Coordinator) ListGroups(ctx context.Context, states, types []string) ([]kmsg.ListGroupsResponseGroup, int16) {
	if len(types) > 0 && !slices.ContainsFunc(types, func(t string) bool { return strings.EqualFold(t, classicType) }) {
		return nil, 0
	}
	var code int16
	var gs []*group
	c.mu.Lock()
	for _, part := range c.parts {
		if !part.loaded {
			code = kerr.CoordinatorLoadInProgress.Code
		}
		for _, g := range part.groups {
			gs = append(gs, g)
		}
	}
	c.mu.Unlock()
	var out []kmsg.ListGroupsResponseGroup
	for _, g := range gs {
		g.mu.Lock()
		s, typ := g.state, g.protocolType
		g.mu.Unlock()
		if s == stateDead || len(states) > 0 && !slices.ContainsFunc(states, func(f string) bool { return strings.EqualFold(f, s.String()) }) {
			continue
		}
		out = append(out, kmsg.ListGroupsResponseGroup{Group: g.id, ProtocolType: typ, GroupState: s.String(), GroupType: classicType})
	}
	slices.SortFunc(out, func(a, b kmsg.ListGroupsResponseGroup) int { return strings.Compare(a.Group, b.Group) })
	return out, code
}

// DeleteGroup deletes an Empty group and its offsets: the tombstones are
// committed before the group is gone. Meanwhile the group is Dead, so that
// no member joins or commits into what is being deleted; a failed write
// gives it back as it was.
func (c *Coordinator) DeleteGroup(ctx context.Context, groupID string) int16 {
	g, code := c.existing(groupID, kerr.GroupIDNotFound.Code)
	if code != 0 {
		return code
	}
	g.wmu.Lock()
	defer g.wmu.Unlock()
	g.mu.Lock()
	switch g.state {
	case stateDead:
		g.mu.Unlock()
		if g.resigned {
			return kerr.NotCoordinator.Code
		}
		return kerr.GroupIDNotFound.Code
	case stateEmpty:
	default:
		g.mu.Unlock()
		return kerr.NonEmptyGroup.Code
	}
	records := []Record{{Key: groupKey(g.id)}}
	for _, tp := range sortedPartitions(g.offsets) {
		records = append(records, Record{Key: offsetKey(g.id, tp.topic, tp.partition)})
	}
	g.stopTimers()
	g.transition(stateDead)
	g.mu.Unlock()

	code = g.appendRecords(ctx, records, false)
	g.mu.Lock()
	switch {
	case g.resigned:
		code = kerr.NotCoordinator.Code
	case code != 0:
		g.transition(stateEmpty)
	default:
		g.offsets = make(map[topicPartition]offset)
	}
	g.mu.Unlock()
	if code != 0 {
		return code
	}
	c.forget(g) // after g's lock: mu comes first
	c.log.Info("group deleted", "group", g.id)
	return 0
}

// OffsetDelete deletes a group's offsets of partitions no member is
// subscribed to (KIP-496), as Kafka's handleDeleteOffsets: a consumer
// group's members' subscriptions refuse their topics'
// (GROUP_SUBSCRIBED_TO_TOPIC); a group of another protocol type must be
// Empty (NON_EMPTY_GROUP).
func (c *Coordinator) OffsetDelete(ctx context.Context, r *kmsg.OffsetDeleteRequest) *kmsg.OffsetDeleteResponse {
	resp := r.ResponseKind().(*kmsg.OffsetDeleteResponse)
	g, code := c.existing(r.Group, kerr.GroupIDNotFound.Code)
	if code != 0 {
		resp.ErrorCode = code
		return resp
	}
	g.wmu.Lock()
	defer g.wmu.Unlock()
	g.mu.Lock()
	if g.state == stateDead {
		g.mu.Unlock()
		resp.ErrorCode = kerr.GroupIDNotFound.Code
		if g.resigned {
			resp.ErrorCode = kerr.NotCoordinator.Code
		}
		return resp
	}
	var subscribed map[string]bool // nil: every topic, when a subscription does not parse
	if g.state != stateEmpty {
		if g.protocolType != "consumer" {
			g.mu.Unlock()
			resp.ErrorCode = kerr.NonEmptyGroup.Code
			return resp
		}
		subscribed = g.subscribedTopics()
	}
	codes := make([][]int16, len(r.Topics))
	var records []Record
	var deleted []topicPartition
	for i, t := range r.Topics {
		codes[i] = make([]int16, len(t.Partitions))
		for j, p := range t.Partitions {
			if g.state != stateEmpty && (subscribed == nil || subscribed[t.Topic]) {
				codes[i][j] = kerr.GroupSubscribedToTopic.Code
				continue
			}
			tp := topicPartition{t.Topic, p.Partition}
			if _, ok := g.offsets[tp]; ok {
				records = append(records, Record{Key: offsetKey(g.id, tp.topic, tp.partition)})
				deleted = append(deleted, tp)
			}
		}
	}
	g.mu.Unlock()
	if len(records) > 0 {
		if code := g.appendRecords(ctx, records, true); code != 0 {
			resp.ErrorCode = code
			return resp
		}
		g.mu.Lock()
		for _, tp := range deleted {
			delete(g.offsets, tp)
		}
		g.mu.Unlock()
	}
	for i, t := range r.Topics {
		rt := kmsg.OffsetDeleteResponseTopic{Topic: t.Topic}
		for j, p := range t.Partitions {
			rt.Partitions = append(rt.Partitions, kmsg.OffsetDeleteResponseTopicPartition{Partition: p.Partition, ErrorCode: codes[i][j]})
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// subscribedTopics are the topics a consumer group's members subscribe
// to, from their metadata of the group's protocol; nil when one does not
// parse, which Kafka takes as subscribed to every topic.
func (g *group) subscribedTopics() map[string]bool {
	topics := make(map[string]bool)
	for _, m := range g.members {
		var meta kmsg.ConsumerMemberMetadata
		if err := meta.ReadFrom(m.metadata(g.protocol)); err != nil {
			return nil
		}
		for _, t := range meta.Topics {
			topics[t] = true
		}
	}
	return topics
}

// sortedPartitions are offsets' partitions in order, for records and
// answers that do not depend on map order.
func sortedPartitions(offsets map[topicPartition]offset) []topicPartition {
	tps := make([]topicPartition, 0, len(offsets))
	for tp := range offsets {
		tps = append(tps, tp)
	}
	slices.SortFunc(tps, func(a, b topicPartition) int {
		if c := strings.Compare(a.topic, b.topic); c != 0 {
			return c
		}
		return int(a.partition - b.partition)
	})
	return tps
}
