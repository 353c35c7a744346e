package controller

import (
	"errors"
	"slices"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// The AlterPartition cases of Kafka's ReplicationControlManagerTest, and
// Keel's own, as table tests: the manager decides, the FSM replays.

// TestAlterPartition_ShrinkAndExpandIsr is Kafka's testShrinkAndExpandIsr.
func TestAlterPartition_ShrinkAndExpandIsr(t *testing.T) {
	c := newLifecycleCtx(t)
	c.register(0, 1, 2)
	c.unfence(0, 1, 2)
	foo := c.createTopic("foo", []int32{0, 1, 2})
	for _, step := range []struct {
		name string
		isr  []isrMember
	}{
		{"shrink", defaultEpochs(0, 1)},
		{"expand", defaultEpochs(0, 1, 2)},
		{"shrink with the members' epochs", []isrMember{{0, c.epoch(0)}, {2, c.epoch(2)}}},
	} {
		before := c.partition(foo, 0)
		if err := c.alterPartition(foo, 0, 0, step.isr...); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		p := c.partition(foo, 0)
		want := make([]int32, len(step.isr))
		for i, m := range step.isr {
			want[i] = m.id
		}
		if !slices.Equal(p.ISR, want) || p.Leader != 0 || p.LeaderEpoch != before.LeaderEpoch || p.PartitionEpoch != before.PartitionEpoch+1 {
			t.Fatalf("%s: %+v; want ISR %v, leader 0 at leader epoch %d, partition epoch %d", step.name, p, want, before.LeaderEpoch, before.PartitionEpoch+1)
		}
	}
}

// TestAlterPartition_InvalidRequests is Kafka's
// testInvalidAlterPartitionRequests and
// testAlterPartitionHandleUnknownTopicIdOrName, with Keel's own cases: each
// refusal is the one Kafka gives, and changes nothing.
func TestAlterPartition_InvalidRequests(t *testing.T) {
	c := newLifecycleCtx(t)
	c.register(0, 1, 2, 3)
	c.unfence(0, 1, 2, 3)
	foo := c.createTopic("foo", []int32{0, 1, 2})
	p := c.partition(foo, 0) // leader 0, ISR [0 1 2], epochs 0 and 0
	req := func(mut func(r *keelpb.AlterPartitionRequest)) *keelpb.AlterPartitionRequest {
		r := &keelpb.AlterPartitionRequest{BrokerId: 0, BrokerEpoch: c.epoch(0), TopicId: foo.String(), Partition: 0,
			LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, NewIsrWithEpochs: withEpochs(defaultEpochs(0, 1)...)}
		mut(r)
		return r
	}
	isr := func(ids ...int32) func(r *keelpb.AlterPartitionRequest) {
		return func(r *keelpb.AlterPartitionRequest) { r.NewIsrWithEpochs = withEpochs(defaultEpochs(ids...)...) }
	}
	tests := []struct {
		name    string
		req     *keelpb.AlterPartitionRequest
		wantErr error
	}{
		{"invalid leader (a sender that is not the leader)", req(func(r *keelpb.AlterPartitionRequest) { r.BrokerId, r.BrokerEpoch = 1, c.epoch(1) }), ErrInvalidRequest},
		{"stale broker epoch", req(func(r *keelpb.AlterPartitionRequest) { r.BrokerEpoch-- }), ErrStaleBrokerEpoch},
		{"unknown sender", req(func(r *keelpb.AlterPartitionRequest) { r.BrokerId = 9 }), ErrStaleBrokerEpoch},
		{"leader epoch above the controller's", req(func(r *keelpb.AlterPartitionRequest) { r.LeaderEpoch = 500 }), ErrNotController},
		{"partition epoch above the controller's", req(func(r *keelpb.AlterPartitionRequest) { r.PartitionEpoch = 500 }), ErrNotController},
		{"invalid ISR (3 is not a replica)", req(isr(0, 1, 3)), ErrInvalidRequest},
		{"invalid ISR (does not hold the leader 0)", req(isr(1, 2)), ErrInvalidRequest},
		{"invalid ISR (a broker twice)", req(isr(0, 1, 0)), ErrInvalidRequest},
		{"invalid ISR (a negative broker id)", req(isr(0, -1)), ErrInvalidRequest},
		{"unknown topic id", req(func(r *keelpb.AlterPartitionRequest) { r.TopicId = fsm.TopicID{0xee}.String() }), ErrUnknownTopic},
		{"unknown partition", req(func(r *keelpb.AlterPartitionRequest) { r.Partition = 7 }), ErrUnknownTopic},
		// Kafka's order: the epochs before the sender, the sender before
		// the ISR.
		{"a non-leader at a future leader epoch: the controller is behind first",
			req(func(r *keelpb.AlterPartitionRequest) { r.BrokerId, r.BrokerEpoch, r.LeaderEpoch = 1, c.epoch(1), 3 }), ErrNotController},
		{"a non-leader with a bad ISR: the sender first",
			req(func(r *keelpb.AlterPartitionRequest) {
				r.BrokerId, r.BrokerEpoch, r.NewIsrWithEpochs = 1, c.epoch(1), withEpochs(defaultEpochs(7)...)
			}), ErrInvalidRequest},
		{"an ISR without the leader that holds a fenced broker: the ISR's shape first", req(isr(1, 9)), ErrInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, err := alterPartitionRecords(c.img, tt.req)
			if !errors.Is(err, tt.wantErr) || recs != nil {
				t.Fatalf("err = %v (records %v), want %v", err, recs, tt.wantErr)
			}
		})
	}
	if after := c.partition(foo, 0); after != p {
		t.Fatalf("the partition changed: %+v", after)
	}
}

// TestAlterPartition_StalePartitionEpoch: a partition epoch below the
// controller's is INVALID_UPDATE_VERSION, even with the ISR unchanged.
func TestAlterPartition_StalePartitionEpoch(t *testing.T) {
	c := newLifecycleCtx(t)
	c.register(0, 1, 2)
	c.unfence(0, 1, 2)
	foo := c.createTopic("foo", []int32{0, 1, 2})
	stale := c.partition(foo, 0)
	if err := c.alterPartition(foo, 0, 0, defaultEpochs(0, 1)...); err != nil {
		t.Fatal(err)
	}
	if err := c.alterPartition(foo, 0, 0, defaultEpochs(0, 1, 2)...); err != nil {
		t.Fatal(err)
	}
	err := c.alter(&keelpb.AlterPartitionRequest{BrokerId: 0, BrokerEpoch: c.epoch(0), TopicId: foo.String(),
		LeaderEpoch: stale.LeaderEpoch, PartitionEpoch: stale.PartitionEpoch, NewIsr: []int32{0, 1, 2}})
	if !errors.Is(err, ErrInvalidUpdateVersion) {
		t.Fatalf("err = %v, want %v", err, ErrInvalidUpdateVersion)
	}
}

// TestAlterPartition_ShouldRejectIneligibleBrokers is Kafka's
// testAlterPartitionShouldRejectFencedBrokers,
// testAlterPartitionShouldRejectShuttingDownBrokers and
// testAlterPartitionShouldRejectBrokersWithStaleEpoch (KIP-903): a member
// fenced, shutting down, unregistered, or registered again since its leader
// saw it is INELIGIBLE_REPLICA; once the member is back and its leader
// knows its new epoch, the same ISR is accepted.
func TestAlterPartition_ShouldRejectIneligibleBrokers(t *testing.T) {
	tests := []struct {
		name string
		// setup acts on broker 3 (a follower in partition 0, replicas
		// [1 2 3 4], leader 1), then returns the ISR the leader sends.
		setup func(c *lifecycleCtx) []isrMember
		// cure makes broker 3 eligible again; nil: nothing can.
		cure func(c *lifecycleCtx) []isrMember
	}{
		{
			name: "fenced broker",
			setup: func(c *lifecycleCtx) []isrMember {
				c.fence(3)
				return defaultEpochs(1, 2, 3, 4)
			},
			cure: func(c *lifecycleCtx) []isrMember {
				c.unfence(3)
				return defaultEpochs(1, 2, 3, 4)
			},
		},
		{
			name: "shutting-down broker",
			setup: func(c *lifecycleCtx) []isrMember {
				// Broker 3 leads topic bar, so it enters controlled
				// shutdown rather than being fenced at once.
				c.createTopic("bar", []int32{3, 1})
				c.heartbeat(3, false, true)
				if !c.broker(3).ShuttingDown {
					c.t.Fatalf("broker 3: %+v; want shutting down", c.broker(3))
				}
				return defaultEpochs(1, 2, 3, 4)
			},
		},
		{
			name: "broker with a stale epoch (it restarted since its leader saw it)",
			setup: func(c *lifecycleCtx) []isrMember {
				old := c.epoch(3)
				// Broker 3 fails silently and registers again, a new
				// incarnation, and is unfenced; its leader still knows it
				// at the old epoch.
				recs, err := registrationRecords(c.img, registration(3, incarnation(3, 2)), noHold)
				if err != nil {
					c.t.Fatal(err)
				}
				c.replay(recs)
				c.unfence(3)
				return []isrMember{{1, c.epoch(1)}, {2, c.epoch(2)}, {3, old}, {4, c.epoch(4)}}
			},
			cure: func(c *lifecycleCtx) []isrMember {
				return []isrMember{{1, c.epoch(1)}, {2, c.epoch(2)}, {3, c.epoch(3)}, {4, c.epoch(4)}}
			},
		},
		{
			name: "unregistered broker",
			setup: func(c *lifecycleCtx) []isrMember {
				c.fence(3)
				recs, err := unregisterRecords(c.img, 3, 0)
				if err != nil {
					c.t.Fatal(err)
				}
				c.replay(recs)
				return defaultEpochs(1, 2, 3, 4)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newLifecycleCtx(t)
			c.register(0, 1, 2, 3, 4)
			c.unfence(0, 1, 2, 3, 4)
			foo := c.createTopic("foo", []int32{1, 2, 3, 4})
			if err := c.alterPartition(foo, 0, 1, defaultEpochs(1, 2, 4)...); err != nil {
				t.Fatal(err)
			}
			isr := tt.setup(c)
			before := c.partition(foo, 0)
			if err := c.alterPartition(foo, 0, 1, isr...); !errors.Is(err, ErrIneligibleReplica) {
				t.Fatalf("err = %v, want %v", err, ErrIneligibleReplica)
			}
			if c.partition(foo, 0) != before {
				t.Fatalf("the partition changed: %+v", c.partition(foo, 0))
			}
			if tt.cure == nil {
				return
			}
			if err := c.alterPartition(foo, 0, 1, tt.cure(c)...); err != nil {
				t.Fatalf("once broker 3 is back: %v", err)
			}
			if p := c.partition(foo, 0); !slices.Equal(p.ISR, []int32{1, 2, 3, 4}) || p.Leader != 1 {
				t.Fatalf("once broker 3 is back: %+v; want ISR [1 2 3 4], leader 1", p)
			}
		})
	}
}

// TestAlterPartition_NewIsrWithoutEpochs: a sender that predates
// new_isr_with_epochs sends new_isr; its members' epochs are not checked
// (Kafka's AlterPartition versions before 3), their states are.
func TestAlterPartition_NewIsrWithoutEpochs(t *testing.T) {
	c := newLifecycleCtx(t)
	c.register(1, 2, 3)
	c.unfence(1, 2, 3)
	foo := c.createTopic("foo", []int32{1, 2, 3})
	p := c.partition(foo, 0)
	req := &keelpb.AlterPartitionRequest{BrokerId: 1, BrokerEpoch: c.epoch(1), TopicId: foo.String(),
		LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, NewIsr: []int32{1, 3}}
	if err := c.alter(req); err != nil {
		t.Fatal(err)
	}
	if got := c.partition(foo, 0).ISR; !slices.Equal(got, []int32{1, 3}) {
		t.Fatalf("ISR %v, want [1 3]", got)
	}
	c.fence(3)
	p = c.partition(foo, 0)
	req = &keelpb.AlterPartitionRequest{BrokerId: 1, BrokerEpoch: c.epoch(1), TopicId: foo.String(),
		LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, NewIsr: []int32{1, 3}}
	if err := c.alter(req); !errors.Is(err, ErrIneligibleReplica) {
		t.Fatalf("with broker 3 fenced: err = %v, want %v", err, ErrIneligibleReplica)
	}
}

// TestAlterPartition_CompletesReassignment: an ISR that holds every target
// replica completes a reassignment in the same record, and the leader,
// being removed, hands over.
func TestAlterPartition_CompletesReassignment(t *testing.T) {
	img := fixture(t, false)
	recs, err := reassignRecords(img, "t", 0, []int32{2, 3, 4})
	if err != nil {
		t.Fatal(err)
	}
	img = apply(t, img, recs)
	img = apply(t, img, []*keelpb.Record{{Record: &keelpb.Record_UnfenceBroker{UnfenceBroker: &keelpb.UnfenceBrokerRecord{BrokerId: 4, BrokerEpoch: 5}}}})
	p, _ := img.Partition(tid, 0)
	recs, err = alterPartitionRecords(img, &keelpb.AlterPartitionRequest{BrokerId: 1, BrokerEpoch: 2, TopicId: tid.String(), Partition: 0,
		LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch,
		NewIsrWithEpochs: withEpochs(isrMember{1, 2}, isrMember{2, 3}, isrMember{3, 4}, isrMember{4, 5})})
	if err != nil {
		t.Fatal(err)
	}
	img = apply(t, img, recs)
	p, _ = img.Partition(tid, 0)
	if !slices.Equal(p.Replicas, []int32{2, 3, 4}) || !slices.Equal(p.ISR, []int32{2, 3, 4}) || p.Leader != 2 || p.Reassigning() {
		t.Fatalf("after completion: %+v", p)
	}
}

// TestAlterPartition_UnchangedISRWritesNothing: at the current epochs, an
// ISR that is the current one is accepted and writes nothing.
func TestAlterPartition_UnchangedISRWritesNothing(t *testing.T) {
	img := fixture(t, false)
	recs, err := alterPartitionRecords(img, &keelpb.AlterPartitionRequest{BrokerId: 2, BrokerEpoch: 3, TopicId: tid.String(), Partition: 1,
		NewIsrWithEpochs: withEpochs(isrMember{2, 3}, isrMember{3, 4})})
	if err != nil || len(recs) != 0 {
		t.Fatalf("records %v, err %v; want none, nil", recs, err)
	}
}
