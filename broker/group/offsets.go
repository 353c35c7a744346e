package group

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetCommit commits offsets, as Kafka's handleCommitOffsets: a member's
// commit is checked against its generation; a commit of generation -1 with
// no member (an admin's or a group-less consumer's) is taken only while
// the group is Empty or unknown. The offsets are answered only once the
// log has committed them, and only then does OffsetFetch see them: a
// failed write changes nothing.
func (c *Coordinator) OffsetCommit(ctx context.Context, r *kmsg.OffsetCommitRequest) *kmsg.OffsetCommitResponse {
	resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
	codes := make([][]int16, len(r.Topics)) // per request partition; 0 until a write decides
	set := func(code int16) {
		for i, t := range r.Topics {
			codes[i] = make([]int16, len(t.Partitions))
			for j := range codes[i] {
				codes[i][j] = code
			}
		}
	}
	set(0)
	g, code := c.lookup(r.Group, r.Generation < 0)
	if code == 0 && g == nil {
		code = kerr.IllegalGeneration.Code // a member's commit to a group not known
	}
	if code == 0 {
		code = c.commit(ctx, g, r, codes)
		c.dropIfUnused(g) // when nothing was committed to a group the commit made
	}
	if code != 0 {
		set(code)
	}
	for i, t := range r.Topics {
		rt := kmsg.OffsetCommitResponseTopic{Topic: t.Topic, TopicID: t.TopicID}
		for j, p := range t.Partitions {
			rt.Partitions = append(rt.Partitions, kmsg.OffsetCommitResponseTopicPartition{Partition: p.Partition, ErrorCode: codes[i][j]})
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// commit checks and writes r's offsets to g: a group-wide code, or 0 with
// codes set for the partitions that were refused.
func (c *Coordinator) commit(ctx context.Context, g *group, r *kmsg.OffsetCommitRequest, codes [][]int16) int16 {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	g.mu.Lock()
	switch {
	case g.state == stateDead:
		g.mu.Unlock()
		return g.notAlive()
	case g.fenced(r.InstanceID, r.MemberID):
		g.mu.Unlock()
		return kerr.FencedInstanceID.Code
	case r.Generation < 0 && g.state == stateEmpty:
	case g.members[r.MemberID] == nil:
		g.mu.Unlock()
		return kerr.UnknownMemberID.Code
	case r.Generation != g.generation:
		g.mu.Unlock()
		return kerr.IllegalGeneration.Code
	case g.state == stateCompletingRebalance:
		// The member has its generation, not yet its assignment.
		g.mu.Unlock()
		return kerr.RebalanceInProgress.Code
	default:
		g.armSession(g.members[r.MemberID])
	}
	g.mu.Unlock()

	now := c.cfg.now().UnixMilli()
	var records []Record
	commits := make(map[topicPartition]offset)
	for i, t := range r.Topics {
		for j, p := range t.Partitions {
			meta := ""
			if p.Metadata != nil {
				meta = *p.Metadata
			}
			if len(meta) > c.cfg.OffsetMetadataMaxBytes {
				codes[i][j] = kerr.OffsetMetadataTooLarge.Code
				continue
			}
			epoch := p.LeaderEpoch
			if r.Version < 6 {
				epoch = -1
			}
			o := offset{offset: p.Offset, leaderEpoch: epoch, metadata: meta, commitMillis: now}
			tp := topicPartition{t.Topic, p.Partition}
			commits[tp] = o
			records = append(records, Record{Key: offsetKey(g.id, tp.topic, tp.partition), Value: offsetValue(o)})
		}
	}
	if len(records) == 0 {
		return 0
	}
	if code := g.appendRecords(ctx, records, true); code != 0 {
		for i, t := range r.Topics {
			for j := range t.Partitions {
				if codes[i][j] == 0 {
					codes[i][j] = code
				}
			}
		}
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != stateDead {
		for tp, o := range commits {
			g.offsets[tp] = o
		}
	}
	c.metrics.commits.Add(float64(len(records)))
	return 0
}

// OffsetFetch answers a group's committed offsets: those of topics, or
// all of them when topics is nil. A group or partition with none gets
// offset -1 and no error, as Kafka answers it.
func (c *Coordinator) OffsetFetch(ctx context.Context, version int16, groupID string, topics []kmsg.OffsetFetchRequestGroupTopic, requireStable bool) kmsg.OffsetFetchResponseGroup {
	resp := kmsg.NewOffsetFetchResponseGroup()
	resp.Group = groupID
	g, code := c.lookup(groupID, false)
	if code != 0 {
		resp.ErrorCode = code
		return resp
	}
	var offsets map[topicPartition]offset
	if g != nil {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.state == stateDead {
			resp.ErrorCode = g.notAlive()
			return resp
		}
		offsets = g.offsets
	}
	answer := func(tp topicPartition) kmsg.OffsetFetchResponseGroupTopicPartition {
		p := kmsg.NewOffsetFetchResponseGroupTopicPartition()
		p.Partition = tp.partition
		p.Offset = -1
		p.Metadata = kmsg.StringPtr("")
		if o, ok := offsets[tp]; ok {
			p.Offset = o.offset
			p.Metadata = kmsg.StringPtr(o.metadata)
			if version >= 5 {
				p.LeaderEpoch = o.leaderEpoch
			}
		}
		return p
	}
	if topics != nil {
		for _, t := range topics {
			rt := kmsg.OffsetFetchResponseGroupTopic{Topic: t.Topic, TopicID: t.TopicID}
			for _, p := range t.Partitions {
				rt.Partitions = append(rt.Partitions, answer(topicPartition{t.Topic, p}))
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	tps := sortedPartitions(offsets)
	for _, tp := range tps {
		if n := len(resp.Topics); n == 0 || resp.Topics[n-1].Topic != tp.topic {
			resp.Topics = append(resp.Topics, kmsg.OffsetFetchResponseGroupTopic{Topic: tp.topic})
		}
		last := &resp.Topics[len(resp.Topics)-1]
		last.Partitions = append(last.Partitions, answer(tp))
	}
	return resp
}
