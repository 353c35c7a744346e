package controller

import (
	"context"
	"fmt"

	"math/rand/v2"

	"github.com/google/uuid"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// Image returns this node's committed metadata image (leader or not).
func (c *Controller) Image() *fsm.Image { return c.fsm.Image() }

// CreateTopic creates a topic and returns its id. Placement is decided on the event loop
// from the committed image.
func (c *Controller) CreateTopic(ctx context.Context, req *keelpb.CreateTopicRequest) (fsm.TopicID, error) {
	id := fsm.TopicID(uuid.New())
	start := rand.IntN(1 << 20) // where round-robin placement begins
	_, err := c.decide(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		return createTopicRecords(img, req, id, start)
	})
	if err == nil {
		c.log.Info("topic created", "topic", req.Name, "topic_id", id.String(), "partitions", req.Partitions)
	}
	return id, err
}

// PreviewTopic answers a validate-only CreateTopic: it decides the topic as
// a create would, on the active controller's committed image, confirmed as
// a linearizable read's (ReadImage: a refusal, such as a topic that exists,
// is then no deposed leader's), and applies the records to a private copy
// of it, so the answer shows the placement without writing anything. It
// returns that copy and the topic in it.
func (c *Controller) PreviewTopic(ctx context.Context, req *keelpb.CreateTopicRequest) (*fsm.Image, *fsm.Topic, error) {
	return c.preview(ctx, req.Name, func(img *fsm.Image) ([]*keelpb.Record, error) {
		return createTopicRecords(img, req, fsm.TopicID(uuid.New()), rand.IntN(1<<20))
	})
}

// preview is the body of PreviewTopic and PreviewPartitions: it decides on
// the confirmed committed image (ReadImage), applies the records to a
// private copy of it, and returns that copy and the named topic in it.
func (c *Controller) preview(ctx context.Context, topic string, decide func(*fsm.Image) ([]*keelpb.Record, error)) (*fsm.Image, *fsm.Topic, error) {
	img, err := c.ReadImage(ctx)
	if err != nil {
		return nil, nil, err
	}
	recs, err := decide(img)
	if err != nil {
		return nil, nil, err
	}
	preview, err := fsm.Apply(img, img.Offset+1, img.Term, &keelpb.RecordBatch{Records: recs})
	if err != nil {
		return nil, nil, fmt.Errorf("%w; nothing was written: %w", ErrRefused, err)
	}
	t, _ := preview.Topic(topic)
	return preview, t, nil
}

// CreatePartitions adds partitions to a topic. With ValidateOnly it writes
// nothing and answers as PreviewPartitions does.
func (c *Controller) CreatePartitions(ctx context.Context, req *keelpb.CreatePartitionsRequest) error {
	if req.ValidateOnly {
		_, _, err := c.PreviewPartitions(ctx, req)
		return err
	}
	start := rand.IntN(1 << 20)
	_, err := c.decide(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		return createPartitionsRecords(img, req, start)
	})
	return err
}

// PreviewPartitions answers a validate-only CreatePartitions as
// PreviewTopic answers a create: decided as the write would be, then
// applied to a private copy of the confirmed committed image, so a refusal
// shows here too and the answer holds the new partitions' placement. It
// returns that copy and the topic in it.
func (c *Controller) PreviewPartitions(ctx context.Context, req *keelpb.CreatePartitionsRequest) (*fsm.Image, *fsm.Topic, error) {
	return c.preview(ctx, req.Topic, func(img *fsm.Image) ([]*keelpb.Record, error) {
		return createPartitionsRecords(img, req, rand.IntN(1<<20))
	})
}

// DeleteTopic removes a topic.
func (c *Controller) DeleteTopic(ctx context.Context, name string) error {
	_, err := c.decide(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		return deleteTopicRecords(img, name)
	})
	if err == nil {
		c.log.Info("topic deleted", "topic", name)
	}
	return err
}

// AlterPartition applies a partition leader's ISR change and returns the
// partition as it is afterwards.
func (c *Controller) AlterPartition(ctx context.Context, req *keelpb.AlterPartitionRequest) (*fsm.Partition, error) {
	if _, err := c.decide(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		return alterPartitionRecords(img, req)
	}); err != nil {
		return nil, err
	}
	id, _ := fsm.ParseTopicID(req.TopicId)
	p, _ := c.fsm.Image().Partition(id, req.Partition)
	return p, nil
}

// Election is the outcome of one partition's election.
type Election struct {
	Topic     string
	Partition int32
	Leader    int32
	Err       error // why no election happened; nil on success
}

// ElectLeaders runs a preferred or unclean election on the given partitions
// (all partitions when all is set), in one batch.
func (c *Controller) ElectLeaders(ctx context.Context, typ keelpb.ElectionType, parts []*keelpb.TopicPartition, all bool) ([]Election, error) {
	var results []Election
	_, err := c.decide(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		results = results[:0]
		var recs []*keelpb.Record
		elect := func(topic string, p *fsm.Partition) {
			rec, leader, err := electionRecord(img, p, typ)
			if rec != nil {
				recs = append(recs, rec)
			}
			results = append(results, Election{Topic: topic, Partition: p.Partition, Leader: leader, Err: err})
		}
		if all {
			for _, t := range img.Topics() {
				for _, p := range img.Partitions(t.ID) {
					elect(t.Name, p)
				}
			}
			return recs, nil
		}
		for _, tp := range parts {
			_, p, err := partitionOf(img, tp.Topic, tp.Partition)
			if err != nil {
				results = append(results, Election{Topic: tp.Topic, Partition: tp.Partition, Leader: fsm.NoLeader, Err: err})
				continue
			}
			elect(tp.Topic, p)
		}
		return recs, nil
	})
	return results, err
}

// Reassign starts moving a partition to replicas; CancelReassignment reverts
// an ongoing move.
func (c *Controller) Reassign(ctx context.Context, topic string, partition int32, replicas []int32) error {
	_, err := c.decide(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		return reassignRecords(img, topic, partition, replicas)
	})
	return err
}

// CancelReassignment reverts an ongoing reassignment.
func (c *Controller) CancelReassignment(ctx context.Context, topic string, partition int32) error {
	_, err := c.decide(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		return cancelReassignmentRecords(img, topic, partition)
	})
	return err
}

// ReassignPlan starts or cancels the reassignments of many partitions in one
// decision (planRecords): every one is accepted, or none is and the error
// names the first refused entry.
func (c *Controller) ReassignPlan(ctx context.Context, plan []ReassignmentTarget) error {
	_, err := c.decide(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		return planRecords(img, plan)
	})
	if err == nil {
		c.log.Info("reassignment plan accepted", "partitions", len(plan))
	}
	return err
}

// rebalanceLeaders is the automatic leader rebalance: every check interval,
// a preferred election for the partitions of each broker whose share of
// partitions it should lead but does not exceeds the imbalance ratio.
func (l *leadership) rebalanceLeaders() {
	n := 0
	_, err := l.decide(l.ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		var recs []*keelpb.Record
		for _, p := range imbalancedPartitions(img, l.c.cfg.LeaderImbalanceRatio) {
			if rec, _, err := electionRecord(img, p, keelpb.ElectionType_ELECTION_TYPE_PREFERRED); err == nil && rec != nil {
				recs = append(recs, rec)
			}
		}
		n = len(recs)
		return recs, nil
	})
	switch {
	case err != nil && l.ctx.Err() == nil:
		l.log.Warn("leader rebalance failed", "err", err)
	case n > 0:
		l.log.Info("leader rebalance: preferred leaders restored", "partitions", n)
	}
}
