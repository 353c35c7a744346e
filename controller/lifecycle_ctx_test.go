package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// lifecycleCtx is Kafka's ReplicationControlTestContext in Keel's terms:
// it calls the managers (the decision functions), replays what they decide
// into an image with the FSM, as the controllers and brokers would, and
// fails the test if a decision does not apply.
type lifecycleCtx struct {
	t   *testing.T
	img *fsm.Image
}

func newLifecycleCtx(t *testing.T) *lifecycleCtx {
	t.Helper()
	return &lifecycleCtx{t: t, img: imageWith(t, clusterStart())}
}

// incarnation is broker id's incarnation id number n.
func incarnation(id int32, n int) string {
	return fmt.Sprintf("00000000-0000-%04d-0000-%012d", n, id)
}

func registration(id int32, inc string) *keelpb.RegisterBrokerRequest {
	return &keelpb.RegisterBrokerRequest{BrokerId: id, IncarnationId: inc, Address: fmt.Sprintf("127.0.0.1:%d", 9200+id),
		MinMetadataVersion: 1, MaxMetadataVersion: 1, ClusterId: "c1"}
}

// noHold: no registered incarnation holds its id (every session is over).
func noHold(*fsm.Broker) time.Duration { return 0 }

// replay applies recs as the next raft entry.
func (c *lifecycleCtx) replay(recs []*keelpb.Record) {
	c.t.Helper()
	c.img = apply(c.t, c.img, recs)
}

// register registers each broker's first incarnation.
func (c *lifecycleCtx) register(ids ...int32) {
	c.t.Helper()
	for _, id := range ids {
		recs, err := registrationRecords(c.img, registration(id, incarnation(id, 1)), noHold)
		if err != nil {
			c.t.Fatalf("register %d: %v", id, err)
		}
		c.replay(recs)
	}
}

// heartbeat decides and replays one heartbeat of broker id at its epoch,
// reporting the image's offset.
func (c *lifecycleCtx) heartbeat(id int32, fence, shutdown bool) {
	c.t.Helper()
	recs, err := heartbeatRecords(c.img, &keelpb.BrokerHeartbeatRequest{BrokerId: id, BrokerEpoch: c.epoch(id),
		MetadataOffset: c.img.Offset, WantFence: fence, WantShutdown: shutdown})
	if err != nil {
		c.t.Fatalf("heartbeat %d: %v", id, err)
	}
	c.replay(recs)
}

// unfence unfences each broker: a heartbeat caught up with its registration.
func (c *lifecycleCtx) unfence(ids ...int32) {
	c.t.Helper()
	for _, id := range ids {
		c.heartbeat(id, false, false)
		if b := c.broker(id); b.Fenced {
			c.t.Fatalf("broker %d still fenced", id)
		}
	}
}

// fence fences each broker, one decision after another, as the session
// fencer does.
func (c *lifecycleCtx) fence(ids ...int32) {
	c.t.Helper()
	for _, id := range ids {
		c.replay(fenceRecords(c.img, []*fsm.Broker{c.broker(id)}))
	}
}

func (c *lifecycleCtx) broker(id int32) *fsm.Broker {
	c.t.Helper()
	b, ok := c.img.Broker(id)
	if !ok {
		c.t.Fatalf("broker %d is not registered", id)
	}
	return b
}

func (c *lifecycleCtx) epoch(id int32) int64 { return c.broker(id).Epoch }

// createTopic creates a topic with the given replica assignments.
func (c *lifecycleCtx) createTopic(name string, assignments ...[]int32) fsm.TopicID {
	c.t.Helper()
	req := &keelpb.CreateTopicRequest{Name: name}
	for _, a := range assignments {
		req.Assignments = append(req.Assignments, &keelpb.PartitionAssignment{Replicas: a})
	}
	id := fsm.TopicID{byte(len(name)), name[0]}
	recs, err := createTopicRecords(c.img, req, id, 0)
	if err != nil {
		c.t.Fatalf("create topic %s: %v", name, err)
	}
	c.replay(recs)
	return id
}

func (c *lifecycleCtx) topicID(name string) fsm.TopicID {
	c.t.Helper()
	t, ok := c.img.Topic(name)
	if !ok {
		c.t.Fatalf("no topic %s", name)
	}
	return t.ID
}

func (c *lifecycleCtx) partition(topic fsm.TopicID, p int32) *fsm.Partition {
	c.t.Helper()
	part, ok := c.img.Partition(topic, p)
	if !ok {
		c.t.Fatalf("no partition %d of %s", p, topic)
	}
	return part
}

// alterPartition decides a leader's AlterPartition at the partition's
// current epochs, with the members' given epochs, and replays it if it is
// accepted.
func (c *lifecycleCtx) alterPartition(topic fsm.TopicID, p, leader int32, isr ...isrMember) error {
	c.t.Helper()
	part := c.partition(topic, p)
	return c.alter(&keelpb.AlterPartitionRequest{BrokerId: leader, BrokerEpoch: c.epoch(leader), TopicId: topic.String(), Partition: p,
		LeaderEpoch: part.LeaderEpoch, PartitionEpoch: part.PartitionEpoch, NewIsrWithEpochs: withEpochs(isr...)})
}

func (c *lifecycleCtx) alter(req *keelpb.AlterPartitionRequest) error {
	c.t.Helper()
	recs, err := alterPartitionRecords(c.img, req)
	if err == nil {
		c.replay(recs)
	}
	return err
}

func withEpochs(isr ...isrMember) []*keelpb.BrokerState {
	out := make([]*keelpb.BrokerState, len(isr))
	for i, m := range isr {
		out[i] = &keelpb.BrokerState{BrokerId: m.id, BrokerEpoch: m.epoch}
	}
	return out
}

// defaultEpochs is Kafka's isrWithDefaultEpoch: members whose broker epoch
// is not checked.
func defaultEpochs(ids ...int32) []isrMember {
	out := make([]isrMember, len(ids))
	for i, id := range ids {
		out[i] = isrMember{id, NoBrokerEpoch}
	}
	return out
}
