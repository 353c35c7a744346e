package controller

import (
	"fmt"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// replicationCtx is a controller's image driven by its own decisions, with
// no raft: Kafka's ReplicationControlTestContext in Keel's words. Each step
// decides on the image, replays the records through the FSM (failing the
// test if they do not apply) and keeps the result.
type replicationCtx struct {
	t      testing.TB
	img    *fsm.Image
	topics int // topics created: the next topic id
}

func newReplicationCtx(t testing.TB) *replicationCtx {
	t.Helper()
	c := &replicationCtx{t: t, img: fsm.Empty()}
	c.replay(clusterStart())
	return c
}

// replay applies recs as the next raft entry; none is nothing.
func (c *replicationCtx) replay(recs []*keelpb.Record) {
	c.t.Helper()
	if len(recs) == 0 {
		return
	}
	next, err := fsm.Apply(c.img, c.img.Offset+1, 1, &keelpb.RecordBatch{Records: recs})
	if err != nil {
		c.t.Fatalf("records do not apply: %v\n%v", err, recs)
	}
	c.img = next
}

// must replays the records of a decision that must succeed.
func (c *replicationCtx) must(recs []*keelpb.Record, err error) {
	c.t.Helper()
	if err != nil {
		c.t.Fatal(err)
	}
	c.replay(recs)
}

// registerBrokers registers ids, each in its own entry, fenced; rack "r<id>".
func (c *replicationCtx) registerBrokers(ids ...int32) {
	c.t.Helper()
	for _, id := range ids {
		rec := regRecord(id, incA)
		rec.GetBrokerRegistration().Rack = fmt.Sprintf("r%d", id)
		c.replay([]*keelpb.Record{rec})
	}
}

func (c *replicationCtx) broker(id int32) *fsm.Broker {
	c.t.Helper()
	b, ok := c.img.Broker(id)
	if !ok {
		c.t.Fatalf("broker %d is not registered", id)
	}
	return b
}

// unfenceBrokers unfences ids as their caught-up heartbeats would.
func (c *replicationCtx) unfenceBrokers(ids ...int32) {
	c.t.Helper()
	for _, id := range ids {
		b := c.broker(id)
		c.must(heartbeatRecords(c.img, heartbeat(id, b.Epoch, uint64(b.Epoch), false, false)))
	}
}

// fenceBrokers fences ids as their expired sessions would.
func (c *replicationCtx) fenceBrokers(ids ...int32) {
	c.t.Helper()
	var bs []*fsm.Broker
	for _, id := range ids {
		bs = append(bs, c.broker(id))
	}
	c.replay(fenceRecords(c.img, bs))
}

// createTopic creates a topic with explicit assignments and returns its id.
func (c *replicationCtx) createTopic(name string, unclean bool, assignments ...[]int32) fsm.TopicID {
	c.t.Helper()
	c.topics++
	id := fsm.TopicID{0xc, byte(c.topics >> 8), byte(c.topics)}
	req := &keelpb.CreateTopicRequest{Name: name}
	if unclean {
		req.Configs = map[string]string{fsm.UncleanLeaderElection: "true"}
	}
	for _, a := range assignments {
		req.Assignments = append(req.Assignments, &keelpb.PartitionAssignment{Replicas: a})
	}
	c.must(createTopicRecords(c.img, req, id, 0))
	return id
}

func (c *replicationCtx) partition(topic string, p int32) *fsm.Partition {
	c.t.Helper()
	_, part, err := partitionOf(c.img, topic, p)
	if err != nil {
		c.t.Fatal(err)
	}
	return part
}

// alterPartition decides the partition leader's AlterPartition to isr,
// at the partition's current epochs.
func (c *replicationCtx) alterPartition(topic string, p int32, isr ...int32) ([]*keelpb.Record, error) {
	c.t.Helper()
	part := c.partition(topic, p)
	return alterPartitionRecords(c.img, &keelpb.AlterPartitionRequest{
		BrokerId: part.Leader, BrokerEpoch: c.broker(part.Leader).Epoch, TopicId: part.TopicID.String(), Partition: p,
		LeaderEpoch: part.LeaderEpoch, PartitionEpoch: part.PartitionEpoch, NewIsr: isr,
	})
}
