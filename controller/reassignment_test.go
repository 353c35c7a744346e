package controller

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// The reassignment rules, ported from Kafka's PartitionReassignmentReplicasTest,
// PartitionReassignmentRevertTest, PartitionChangeBuilderTest and
// ReplicationControlManagerTest. Where Keel orders a list differently from
// Kafka the case says so: Kafka sorts the replicas being added and removed,
// Keel keeps them in the target's and the current assignment's order.

// partSpec is a partition's state, for a test to start from.
type partSpec struct {
	replicas, isr, adding, removing []int32
	leader                          int32
}

func (s partSpec) String() string {
	return fmt.Sprintf("replicas %v isr %v leader %d adding %v removing %v", s.replicas, s.isr, s.leader, s.adding, s.removing)
}

func specOf(p *fsm.Partition) partSpec {
	return partSpec{replicas: p.Replicas, isr: p.ISR, leader: p.Leader, adding: p.AddingReplicas, removing: p.RemovingReplicas}
}

func (s partSpec) equal(o partSpec) bool {
	return slices.Equal(s.replicas, o.replicas) && slices.Equal(s.isr, o.isr) && s.leader == o.leader &&
		slices.Equal(s.adding, o.adding) && slices.Equal(s.removing, o.removing)
}

// specImage is an image with brokers active and fenced registered (the
// active ones unfenced), and topic "t" (id tid) whose partition 0 is s.
func specImage(t *testing.T, active, fenced []int32, unclean bool, s partSpec) *replicationCtx {
	t.Helper()
	c := newReplicationCtx(t)
	all := slices.Sorted(slices.Values(append(slices.Clone(active), fenced...)))
	c.registerBrokers(all...)
	c.unfenceBrokers(active...)
	configs := map[string]string{}
	if unclean {
		configs[fsm.UncleanLeaderElection] = "true"
	}
	c.replay([]*keelpb.Record{
		{Record: &keelpb.Record_Topic{Topic: &keelpb.TopicRecord{Name: "t", TopicId: bytes.Clone(tid[:]), Configs: configs}}},
		{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{TopicId: bytes.Clone(tid[:]), Partition: 0,
			Replicas: s.replicas, Isr: s.isr, Leader: s.leader, AddingReplicas: s.adding, RemovingReplicas: s.removing}}},
	})
	return c
}

func ids(v ...int32) []int32 { return v }

// TestPartitionReassignmentReplicas: what a reassignment of a partition
// that is not being moved writes (the target, then the replicas removed;
// what is added and removed), and when it completes.
func TestPartitionReassignmentReplicas(t *testing.T) {
	tests := []struct {
		name            string
		from, to        []int32
		isr             []int32 // the ISR before the target is set; default from
		wantReplicas    []int32
		wantAdding      []int32
		wantRemoving    []int32
		wantComplete    bool
		wantCompleteISR []int32
	}{
		{name: "testNoneAddedOrRemoved", from: ids(3, 2, 1), to: ids(3, 2, 1), wantReplicas: ids(3, 2, 1), wantComplete: true, wantCompleteISR: ids(3, 2, 1)},
		// Kafka: adding [5 6].
		{name: "testAdditions", from: ids(3, 2, 1), to: ids(3, 6, 2, 1, 5), wantReplicas: ids(3, 6, 2, 1, 5), wantAdding: ids(6, 5)},
		// Kafka: removing [0 2], replicas [3 1 0 2].
		{name: "testRemovals", from: ids(3, 2, 1, 0), to: ids(3, 1), wantReplicas: ids(3, 1, 2, 0), wantRemoving: ids(2, 0),
			wantComplete: true, wantCompleteISR: ids(3, 1)},
		// Kafka: replicas [7 3 1 9 0 2].
		{name: "testAdditionsAndRemovals", from: ids(3, 2, 1, 0), to: ids(7, 3, 1, 9), wantReplicas: ids(7, 3, 1, 9, 2, 0), wantAdding: ids(7, 9), wantRemoving: ids(2, 0)},
		{name: "testRearrangement", from: ids(3, 2, 1, 0), to: ids(0, 1, 3, 2), wantReplicas: ids(0, 1, 3, 2), wantComplete: true, wantCompleteISR: ids(3, 2, 1, 0)},
		{name: "testDoesNotCompleteReassignment", from: ids(0, 1, 2), to: ids(3, 4, 5), isr: ids(0, 1, 2, 3, 4),
			wantReplicas: ids(3, 4, 5, 0, 1, 2), wantAdding: ids(3, 4, 5), wantRemoving: ids(0, 1, 2)},
		{name: "testDoesCompleteReassignmentAllNewReplicas", from: ids(0, 1, 2), to: ids(3, 4, 5), isr: ids(0, 1, 2, 3, 4, 5),
			wantReplicas: ids(3, 4, 5, 0, 1, 2), wantAdding: ids(3, 4, 5), wantRemoving: ids(0, 1, 2), wantComplete: true, wantCompleteISR: ids(3, 4, 5)},
		{name: "testDoesCompleteReassignmentSomeNewReplicas", from: ids(0, 1, 2), to: ids(0, 1, 3), isr: ids(0, 1, 2, 3),
			wantReplicas: ids(0, 1, 3, 2), wantAdding: ids(3), wantRemoving: ids(2), wantComplete: true, wantCompleteISR: ids(0, 1, 3)},
		{name: "testDoesNotCompleteReassignmentIfIsrDoesNotHaveAllTargetReplicas", from: ids(0, 1, 2), to: ids(0, 1, 3), isr: ids(3),
			wantReplicas: ids(0, 1, 3, 2), wantAdding: ids(3), wantRemoving: ids(2)},
		// Keel's own: a removal whose target holds no ISR member waits.
		{name: "removal-only target with no ISR member", from: ids(1, 2, 3), to: ids(2, 3), isr: ids(1),
			wantReplicas: ids(2, 3, 1), wantRemoving: ids(1)},
		// The case: 3 is fenced (out of the ISR), so [2 3] is not safe yet.
		{name: "removal whose target is not all in the ISR", from: ids(1, 2, 3), to: ids(2, 3), isr: ids(1, 2),
			wantReplicas: ids(2, 3, 1), wantRemoving: ids(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fsm.Partition{Replicas: tt.from, ISR: tt.from}
			replicas, adding, removing := reassignmentReplicas(p, tt.to)
			if !slices.Equal(replicas, tt.wantReplicas) || !slices.Equal(adding, tt.wantAdding) || !slices.Equal(removing, tt.wantRemoving) {
				t.Fatalf("replicas %v adding %v removing %v; want %v, %v, %v", replicas, adding, removing, tt.wantReplicas, tt.wantAdding, tt.wantRemoving)
			}
			isr := tt.isr
			if isr == nil {
				isr = tt.from
			}
			tg := target{leader: fsm.NoLeader, replicas: replicas, isr: isr, addingReplicas: adding, removingRep: removing}
			completeReassignment(&tg, newView(fsm.Empty()), false)
			done := len(tg.addingReplicas)+len(tg.removingRep) == 0
			switch {
			case done != tt.wantComplete:
				t.Fatalf("complete = %v, want %v (%+v)", done, tt.wantComplete, tg)
			case done && (!slices.Equal(tg.replicas, tt.to) || !slices.Equal(tg.isr, tt.wantCompleteISR)):
				t.Fatalf("completed as replicas %v isr %v; want %v, %v", tg.replicas, tg.isr, tt.to, tt.wantCompleteISR)
			case !done && (!slices.Equal(tg.replicas, replicas) || !slices.Equal(tg.isr, isr)):
				t.Fatalf("an incomplete reassignment changed the partition: %+v", tg)
			}
		})
	}
}

// TestPartitionReassignmentRevert: what cancelling a reassignment leaves:
// the original replicas (less what was being added), the ISR less what
// was being added; and, when that ISR would be empty, a refusal unless the
// topic allows unclean election.
func TestPartitionReassignmentRevert(t *testing.T) {
	tests := []struct {
		name    string
		active  []int32
		unclean bool
		from    partSpec
		want    partSpec
		wantErr error
	}{
		{name: "testNoneAddedOrRemoved", active: ids(1, 2, 3),
			from: partSpec{replicas: ids(3, 2, 1), isr: ids(3, 2), leader: 3}, wantErr: ErrNoReassignment},
		{name: "testSomeRemoving", active: ids(1, 2, 3),
			from: partSpec{replicas: ids(3, 2, 1), isr: ids(3, 2), leader: 3, removing: ids(2, 1)},
			want: partSpec{replicas: ids(3, 2, 1), isr: ids(3, 2), leader: 3}},
		{name: "testSomeAdding", active: ids(1, 2, 3, 4, 5),
			from: partSpec{replicas: ids(4, 5, 3, 2, 1), isr: ids(4, 5, 2), leader: 4, adding: ids(4, 5)},
			want: partSpec{replicas: ids(3, 2, 1), isr: ids(2), leader: 2}},
		{name: "testSomeRemovingAndAdding", active: ids(1, 2, 3, 4, 5),
			from: partSpec{replicas: ids(4, 5, 3, 2, 1), isr: ids(4, 5, 2), leader: 4, removing: ids(2), adding: ids(4, 5)},
			want: partSpec{replicas: ids(3, 2, 1), isr: ids(2), leader: 2}},
		// The case: this answered "Internal: batch refused by the state machine".
		{name: "testIsrSpecialCase without unclean election is refused", active: ids(1, 2, 3, 4, 5),
			from:    partSpec{replicas: ids(4, 5, 3, 2, 1), isr: ids(4, 5), leader: 4, removing: ids(2), adding: ids(4, 5)},
			wantErr: ErrInvalidReplicaAssignment},
		{name: "testIsrSpecialCase with unclean election", active: ids(1, 2, 3, 4, 5), unclean: true,
			from: partSpec{replicas: ids(4, 5, 3, 2, 1), isr: ids(4, 5), leader: 4, removing: ids(2), adding: ids(4, 5)},
			want: partSpec{replicas: ids(3, 2, 1), isr: ids(3), leader: 3}},
		{name: "testIsrSpecialCase with unclean election, first replica down", active: ids(1, 2, 4, 5), unclean: true,
			from: partSpec{replicas: ids(4, 5, 3, 2, 1), isr: ids(4, 5), leader: 4, removing: ids(2), adding: ids(4, 5)},
			want: partSpec{replicas: ids(3, 2, 1), isr: ids(2), leader: 2}},
		{name: "testIsrSpecialCase with unclean election, every kept replica down", active: ids(4, 5), unclean: true,
			from: partSpec{replicas: ids(4, 5, 3, 2, 1), isr: ids(4, 5), leader: 4, removing: ids(2), adding: ids(4, 5)},
			want: partSpec{replicas: ids(3, 2, 1), isr: ids(3), leader: fsm.NoLeader}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fenced []int32
			for _, b := range tt.from.replicas {
				if !slices.Contains(tt.active, b) {
					fenced = append(fenced, b)
				}
			}
			c := specImage(t, tt.active, fenced, tt.unclean, tt.from)
			before := c.partition("t", 0)
			recs, err := cancelReassignmentRecords(c.img, "t", 0)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			c.must(recs, err)
			after := c.partition("t", 0)
			if got := specOf(after); !got.equal(tt.want) {
				t.Fatalf("after the cancel: %v; want %v", got, tt.want)
			}
			// KRaft's epochs: the leader epoch moves when a replica leaves or
			// the leader changes.
			wantEpoch := before.LeaderEpoch
			if len(after.Replicas) < len(before.Replicas) || after.Leader != before.Leader {
				wantEpoch++
			}
			if after.LeaderEpoch != wantEpoch || after.PartitionEpoch != before.PartitionEpoch+1 {
				t.Fatalf("epochs %d/%d, want %d/%d", after.LeaderEpoch, after.PartitionEpoch, wantEpoch, before.PartitionEpoch+1)
			}
		})
	}
}

// TestPartitionChangeBuilder_Reassignment ports PartitionChangeBuilderTest's
// reassignment cases: a change to partition 0 of a partition FOO (replicas
// [2 1 3], ISR [2 1 3], leader 1) or BAR (moving from [1 2 3] to [2 3 4]:
// replicas [1 2 3 4], ISR [1 2 3], leader 1, removing [1], adding [4]).
func TestPartitionChangeBuilder_Reassignment(t *testing.T) {
	foo := partSpec{replicas: ids(2, 1, 3), isr: ids(2, 1, 3), leader: 1}
	bar := partSpec{replicas: ids(1, 2, 3, 4), isr: ids(1, 2, 3), leader: 1, removing: ids(1), adding: ids(4)}
	reassign := func(to ...int32) func(c *replicationCtx) ([]*keelpb.Record, error) {
		return func(c *replicationCtx) ([]*keelpb.Record, error) { return reassignRecords(c.img, "t", 0, to) }
	}
	alterISR := func(isr ...int32) func(c *replicationCtx) ([]*keelpb.Record, error) {
		return func(c *replicationCtx) ([]*keelpb.Record, error) { return c.alterPartition("t", 0, isr...) }
	}
	cancel := func(c *replicationCtx) ([]*keelpb.Record, error) { return cancelReassignmentRecords(c.img, "t", 0) }
	tests := []struct {
		name   string
		active []int32
		from   partSpec
		do     func(c *replicationCtx) ([]*keelpb.Record, error)
		want   partSpec
	}{
		{name: "testReassignmentRearrangesReplicas", active: ids(1, 2, 3), from: foo, do: reassign(3, 2, 1),
			want: partSpec{replicas: ids(3, 2, 1), isr: ids(2, 1, 3), leader: 1}},
		{name: "testIsrEnlargementCompletesReassignment", active: ids(1, 2, 3, 4), from: bar, do: alterISR(1, 2, 3, 4),
			want: partSpec{replicas: ids(2, 3, 4), isr: ids(2, 3, 4), leader: 2}},
		{name: "testRevertReassignment", active: ids(1, 2, 3, 4), from: bar, do: cancel,
			want: partSpec{replicas: ids(1, 2, 3), isr: ids(1, 2, 3), leader: 1}},
		{name: "testRemovingReplicaReassignment", active: ids(1, 2, 3), from: foo, do: reassign(1, 2),
			want: partSpec{replicas: ids(1, 2), isr: ids(2, 1), leader: 1}},
		{name: "testAddingReplicaReassignment", active: ids(1, 2, 3, 4), from: foo, do: reassign(1, 2, 3, 4),
			want: partSpec{replicas: ids(1, 2, 3, 4), isr: ids(2, 1, 3), leader: 1, adding: ids(4)}},
		// Kafka's case with broker ids from 1: a move from [1 2] to [3 4]
		// completes while neither 3 nor 4 can lead; the leader being removed
		// must not stay.
		{name: "testStoppedLeaderIsDemotedAfterReassignmentCompletesEvenIfNoNewEligibleLeaders", active: ids(1, 2, 3, 4),
			from: partSpec{replicas: ids(3, 4, 1, 2), isr: ids(1, 2), leader: 1, removing: ids(1, 2), adding: ids(3, 4)},
			do: func(c *replicationCtx) ([]*keelpb.Record, error) {
				p := c.partition("t", 0)
				tg := targetOf(p)
				tg.isr = ids(1, 2, 3, 4)
				completeReassignment(&tg, newView(c.img, 3, 4), false) // 3 and 4 cannot lead
				return []*keelpb.Record{changeRecord(p, tg)}, nil
			},
			want: partSpec{replicas: ids(3, 4), isr: ids(3, 4), leader: fsm.NoLeader}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := specImage(t, tt.active, nil, false, tt.from)
			c.must(tt.do(c))
			if got := specOf(c.partition("t", 0)); !got.equal(tt.want) {
				t.Fatalf("got %v; want %v", got, tt.want)
			}
		})
	}
}

// TestReplicationControlManager_ReassignPartitions ports testReassignPartitions:
// a reassignment that only reorders completes at once; one that adds and
// removes waits; a cancel of a partition not being moved, or unknown, is
// refused; a cancel reverts; and an ISR that completes the move elects a
// new leader when the old one leaves.
func TestReplicationControlManager_ReassignPartitions(t *testing.T) {
	c := newReplicationCtx(t)
	c.registerBrokers(0, 1, 2, 3)
	c.unfenceBrokers(0, 1, 2, 3)
	c.createTopic("foo", false, ids(1, 2, 3), ids(3, 2, 1))
	c.createTopic("bar", false, ids(1, 2, 3))

	c.must(reassignRecords(c.img, "foo", 0, ids(3, 2, 1)))
	if got := specOf(c.partition("foo", 0)); !got.equal(partSpec{replicas: ids(3, 2, 1), isr: ids(1, 2, 3), leader: 1}) {
		t.Fatalf("foo/0 reordered: %v", got)
	}
	c.must(reassignRecords(c.img, "foo", 1, ids(0, 2, 1)))
	if got := specOf(c.partition("foo", 1)); !got.equal(partSpec{replicas: ids(0, 2, 1, 3), isr: ids(3, 2, 1), leader: 3, adding: ids(0), removing: ids(3)}) {
		t.Fatalf("foo/1 moving: %v", got)
	}
	if _, err := reassignRecords(c.img, "foo", 2, ids(0, 2, 1)); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("foo/2: err = %v, want %v", err, ErrUnknownTopic)
	}
	for _, tp := range []struct {
		topic string
		p     int32
	}{{"foo", 0}, {"bar", 0}} {
		if _, err := cancelReassignmentRecords(c.img, tp.topic, tp.p); !errors.Is(err, ErrNoReassignment) {
			t.Fatalf("cancel %s/%d: err = %v, want %v", tp.topic, tp.p, err, ErrNoReassignment)
		}
	}
	if _, err := cancelReassignmentRecords(c.img, "foo", 2); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("cancel foo/2: err = %v, want %v", err, ErrUnknownTopic)
	}
	// Kafka checks the cancel's record without replaying it; so does this.
	recs, err := cancelReassignmentRecords(c.img, "foo", 1)
	if err != nil {
		t.Fatal(err)
	}
	if ch := recs[0].GetPartitionChange(); !slices.Equal(ch.GetReplicas().GetValues(), ids(2, 1, 3)) || ch.Isr != nil || ch.Leader != nil ||
		ch.AddingReplicas == nil || ch.RemovingReplicas == nil || len(ch.AddingReplicas.Values)+len(ch.RemovingReplicas.Values) != 0 {
		t.Fatalf("cancel foo/1: %v; want replicas [2 1 3], the moves cleared", ch)
	}
	// Broker 0 caught up: the move completes, and 3, the leader, leaves.
	c.must(c.alterPartition("foo", 1, 3, 0, 2, 1))
	p := c.partition("foo", 1)
	if got := specOf(p); !got.equal(partSpec{replicas: ids(0, 2, 1), isr: ids(0, 2, 1), leader: 0}) {
		t.Fatalf("foo/1 after the ISR completed the move: %v", got)
	}
	if p.LeaderEpoch != 1 {
		t.Fatalf("foo/1 leader epoch %d, want 1", p.LeaderEpoch)
	}
}

// TestReplicationControlManager_CancelReassignPartitions ports
// testCancelReassignPartitions: with broker 3 fenced, a removal the ISR
// allows completes at once; a reorder completes at once; unregistered or
// empty targets are refused; an addition waits; and a cancel reverts it,
// keeping the leader.
func TestReplicationControlManager_CancelReassignPartitions(t *testing.T) {
	c := newReplicationCtx(t)
	c.registerBrokers(0, 1, 2, 3, 4)
	c.unfenceBrokers(0, 1, 2, 3, 4)
	c.createTopic("foo", false, ids(1, 2, 3, 4), ids(0, 1, 2, 3), ids(4, 3, 1, 0), ids(2, 3, 4, 1))
	c.createTopic("bar", false, ids(4, 3, 2))
	c.fenceBrokers(3)
	type epochs struct{ leader, partition int32 }
	check := func(what, topic string, p int32, want partSpec, wantEpochs epochs) {
		t.Helper()
		part := c.partition(topic, p)
		if got := specOf(part); !got.equal(want) || part.LeaderEpoch != wantEpochs.leader || part.PartitionEpoch != wantEpochs.partition {
			t.Fatalf("%s: %s/%d: %v, epochs %d/%d; want %v, epochs %d/%d", what, topic, p, got, part.LeaderEpoch, part.PartitionEpoch,
				want, wantEpochs.leader, wantEpochs.partition)
		}
	}
	check("fenced 3", "foo", 0, partSpec{replicas: ids(1, 2, 3, 4), isr: ids(1, 2, 4), leader: 1}, epochs{0, 1})

	c.must(reassignRecords(c.img, "foo", 0, ids(1, 2, 4)))
	c.must(reassignRecords(c.img, "foo", 1, ids(1, 2, 3, 0)))
	var fe *FieldError
	if _, err := reassignRecords(c.img, "foo", 2, ids(5, 6, 7)); !errors.As(err, &fe) || fe.Field != "replicas" {
		t.Fatalf("foo/2 to unregistered brokers: err = %v, want one naming replicas", err)
	}
	if _, err := reassignRecords(c.img, "foo", 3, nil); !errors.As(err, &fe) || fe.Field != "replicas" {
		t.Fatalf("foo/3 to no replicas: err = %v, want one naming replicas", err)
	}
	c.must(reassignRecords(c.img, "bar", 0, ids(1, 2, 3, 4, 0)))
	check("reassigned", "foo", 0, partSpec{replicas: ids(1, 2, 4), isr: ids(1, 2, 4), leader: 1}, epochs{1, 2})
	check("reassigned", "foo", 1, partSpec{replicas: ids(1, 2, 3, 0), isr: ids(0, 1, 2), leader: 0}, epochs{0, 2})
	// Kafka: adding [0 1].
	check("reassigned", "bar", 0, partSpec{replicas: ids(1, 2, 3, 4, 0), isr: ids(4, 2), leader: 4, adding: ids(1, 0)}, epochs{0, 2})

	// The ISR grows but 3, fenced, is not in it: still moving.
	recs, err := c.alterPartition("bar", 0, 4, 1, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	after, err := fsm.Apply(c.img, c.img.Offset+1, 1, &keelpb.RecordBatch{Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := partitionOfImage(after, "bar", 0); !p.Reassigning() || !slices.Equal(p.ISR, ids(4, 1, 2, 0)) {
		t.Fatalf("bar/0 with 3 out of the ISR: %v; want it still moving", specOf(p))
	}
	// Kafka cancels without replaying the ISR change; so does this.
	if _, err := cancelReassignmentRecords(c.img, "foo", 0); !errors.Is(err, ErrNoReassignment) {
		t.Fatalf("cancel foo/0: err = %v, want %v", err, ErrNoReassignment)
	}
	c.must(cancelReassignmentRecords(c.img, "bar", 0))
	check("cancelled", "bar", 0, partSpec{replicas: ids(2, 3, 4), isr: ids(4, 2), leader: 4}, epochs{1, 3})
}

func partitionOfImage(img *fsm.Image, topic string, p int32) (*fsm.Partition, error) {
	_, part, err := partitionOf(img, topic, p)
	return part, err
}

// TestReplicationControlManager_ReassignPartitionsHandlesNewReassignmentThatRemovesPreviouslyAddingReplicas
// ports the Kafka case of that name: [0 1] moving to [2 3], with 2 caught
// up and elected, is moved instead to [4 5]. The new move replaces the
// old: 2, leading, and 3 are now being removed and stay until 4 and 5 are
// in the ISR; then 4 leads.
func TestReplicationControlManager_ReassignPartitionsHandlesNewReassignmentThatRemovesPreviouslyAddingReplicas(t *testing.T) {
	c := newReplicationCtx(t)
	c.registerBrokers(0, 1, 2, 3, 4, 5)
	c.unfenceBrokers(0, 1, 2, 3, 4, 5)
	c.createTopic("topic-1", false, ids(0, 1))

	c.must(reassignRecords(c.img, "topic-1", 0, ids(2, 3)))
	if got := specOf(c.partition("topic-1", 0)); !got.equal(partSpec{replicas: ids(2, 3, 0, 1), isr: ids(0, 1), leader: 0, adding: ids(2, 3), removing: ids(0, 1)}) {
		t.Fatalf("moving to [2 3]: %v", got)
	}
	c.must(c.alterPartition("topic-1", 0, 0, 1, 2))
	rec, leader, err := electionRecord(c.img, c.partition("topic-1", 0), keelpb.ElectionType_ELECTION_TYPE_PREFERRED)
	if err != nil || leader != 2 {
		t.Fatalf("preferred election: leader %d, err %v; want 2", leader, err)
	}
	c.replay([]*keelpb.Record{rec})

	c.must(reassignRecords(c.img, "topic-1", 0, ids(4, 5)))
	// Kafka: replicas [4 5 0 1 2 3], removing [0 1 2 3].
	if got := specOf(c.partition("topic-1", 0)); !got.equal(partSpec{replicas: ids(4, 5, 2, 3, 0, 1), isr: ids(0, 1, 2), leader: 2, adding: ids(4, 5), removing: ids(2, 3, 0, 1)}) {
		t.Fatalf("moving to [4 5] instead: %v", got)
	}
	c.must(c.alterPartition("topic-1", 0, 0, 1, 2, 3, 4, 5))
	if got := specOf(c.partition("topic-1", 0)); !got.equal(partSpec{replicas: ids(4, 5), isr: ids(4, 5), leader: 4}) {
		t.Fatalf("after the move: %v", got)
	}
}

// TestReassignment_NeverDropsSafety: Keel's reassignment rules beyond the
// ported cases, each a sequence of decisions from brokers 1-5 active and
// topic "t" with partition 0 on [1 2 3], led by 1.
func TestReassignment_NeverDropsSafety(t *testing.T) {
	type step struct {
		do      func(c *replicationCtx) ([]*keelpb.Record, error)
		wantErr error
		want    *partSpec // nil: not checked
	}
	reassign := func(to ...int32) func(c *replicationCtx) ([]*keelpb.Record, error) {
		return func(c *replicationCtx) ([]*keelpb.Record, error) { return reassignRecords(c.img, "t", 0, to) }
	}
	alterISR := func(isr ...int32) func(c *replicationCtx) ([]*keelpb.Record, error) {
		return func(c *replicationCtx) ([]*keelpb.Record, error) { return c.alterPartition("t", 0, isr...) }
	}
	cancel := func(c *replicationCtx) ([]*keelpb.Record, error) { return cancelReassignmentRecords(c.img, "t", 0) }
	fence := func(bs ...int32) func(c *replicationCtx) ([]*keelpb.Record, error) {
		return func(c *replicationCtx) ([]*keelpb.Record, error) {
			var list []*fsm.Broker
			for _, b := range bs {
				list = append(list, c.broker(b))
			}
			return fenceRecords(c.img, list), nil
		}
	}
	unfence := func(b int32) func(c *replicationCtx) ([]*keelpb.Record, error) {
		return func(c *replicationCtx) ([]*keelpb.Record, error) {
			br := c.broker(b)
			return heartbeatRecords(c.img, heartbeat(b, br.Epoch, uint64(br.Epoch), false, false))
		}
	}
	spec := func(s partSpec) *partSpec { return &s }
	tests := []struct {
		name    string
		unclean bool
		steps   []step
	}{
		{name: "a move completes only once every target replica is in the ISR", steps: []step{
			{do: fence(3), want: spec(partSpec{replicas: ids(1, 2, 3), isr: ids(1, 2), leader: 1})},
			// Before: completed at once as R [2 3], ISR [2], L 2.
			{do: reassign(2, 3), want: spec(partSpec{replicas: ids(2, 3, 1), isr: ids(1, 2), leader: 1, removing: ids(1)})},
			{do: unfence(3)},
			{do: alterISR(1, 2, 3), want: spec(partSpec{replicas: ids(2, 3), isr: ids(2, 3), leader: 2})},
		}},
		{name: "a removal-only target with no ISR member stays pending", steps: []step{
			{do: fence(2, 3), want: spec(partSpec{replicas: ids(1, 2, 3), isr: ids(1), leader: 1})},
			{do: reassign(2, 3), want: spec(partSpec{replicas: ids(2, 3, 1), isr: ids(1), leader: 1, removing: ids(1)})},
			{do: cancel, want: spec(partSpec{replicas: ids(2, 3, 1), isr: ids(1), leader: 1})},
		}},
		{name: "reassigning to the current replicas is a no-op", steps: []step{
			{do: reassign(1, 2, 3), want: spec(partSpec{replicas: ids(1, 2, 3), isr: ids(1, 2, 3), leader: 1})},
		}},
		{name: "a new reassignment replaces an ongoing one", steps: []step{
			{do: fence(4)},
			{do: reassign(2, 3, 4), want: spec(partSpec{replicas: ids(2, 3, 4, 1), isr: ids(1, 2, 3), leader: 1, adding: ids(4), removing: ids(1)})},
			// Again: nothing to do.
			{do: reassign(2, 3, 4), want: spec(partSpec{replicas: ids(2, 3, 4, 1), isr: ids(1, 2, 3), leader: 1, adding: ids(4), removing: ids(1)})},
			// 4 is still being added; 5 too now; 1 is no longer removed.
			{do: reassign(1, 4, 5), want: spec(partSpec{replicas: ids(1, 4, 5, 2, 3), isr: ids(1, 2, 3), leader: 1, adding: ids(4, 5), removing: ids(2, 3)})},
			// Back to where it started: that completes at once.
			{do: reassign(1, 2, 3), want: spec(partSpec{replicas: ids(1, 2, 3), isr: ids(1, 2, 3), leader: 1})},
		}},
		{name: "a replaced move that drops a replica being added keeps it until the new one completes", steps: []step{
			{do: reassign(4, 5, 6), want: spec(partSpec{replicas: ids(4, 5, 6, 1, 2, 3), isr: ids(1, 2, 3), leader: 1, adding: ids(4, 5, 6), removing: ids(1, 2, 3)})},
			{do: alterISR(1, 2, 3, 4)},
			{do: reassign(1, 5), want: spec(partSpec{replicas: ids(1, 5, 4, 6, 2, 3), isr: ids(1, 2, 3, 4), leader: 1, adding: ids(5), removing: ids(4, 6, 2, 3)})},
			{do: alterISR(1, 2, 3, 4, 5), want: spec(partSpec{replicas: ids(1, 5), isr: ids(1, 5), leader: 1})},
		}},
		{name: "cancelling with only adding replicas in the ISR is refused", steps: []step{
			{do: reassign(4, 5, 6)},
			{do: alterISR(1, 2, 4, 5)},
			{do: fence(1, 2), want: spec(partSpec{replicas: ids(4, 5, 6, 1, 2, 3), isr: ids(4, 5), leader: 4, adding: ids(4, 5, 6), removing: ids(1, 2, 3)})},
			{do: cancel, wantErr: ErrInvalidReplicaAssignment},
			// The move itself can still go on, or be replaced: [4 5], being
			// in the ISR already, completes at once.
			{do: reassign(4, 5), want: spec(partSpec{replicas: ids(4, 5), isr: ids(4, 5), leader: 4})},
		}},
		{name: "cancelling with only adding replicas in the ISR, unclean election allowed", unclean: true, steps: []step{
			{do: reassign(4, 5, 6)},
			{do: alterISR(1, 2, 4, 5)},
			{do: fence(1, 2)},
			// 1, first of the replicas kept, is down: 3 leads, alone in the ISR.
			{do: cancel, want: spec(partSpec{replicas: ids(1, 2, 3), isr: ids(3), leader: 3})},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newReplicationCtx(t)
			c.registerBrokers(1, 2, 3, 4, 5, 6)
			c.unfenceBrokers(1, 2, 3, 4, 5, 6)
			c.createTopic("t", tt.unclean, ids(1, 2, 3))
			for i, s := range tt.steps {
				recs, err := s.do(c)
				if s.wantErr != nil {
					if !errors.Is(err, s.wantErr) {
						t.Fatalf("step %d: err = %v, want %v", i, err, s.wantErr)
					}
					continue
				}
				c.must(recs, err)
				if s.want != nil {
					if got := specOf(c.partition("t", 0)); !got.equal(*s.want) {
						t.Fatalf("step %d: %v; want %v", i, got, *s.want)
					}
				}
			}
		})
	}
}

// TestReassignment_AddPartitionsKeepsTheTargetFactor: partitions added to
// a topic whose partition 0 is being moved get the replication factor
// the move is going to, not the count of replicas it holds meanwhile.
func TestReassignment_AddPartitionsKeepsTheTargetFactor(t *testing.T) {
	c := newReplicationCtx(t)
	c.registerBrokers(1, 2, 3, 4, 5)
	c.unfenceBrokers(1, 2, 3, 4, 5)
	c.createTopic("t", false, ids(1, 2, 3))
	c.fenceBrokers(5)
	c.must(reassignRecords(c.img, "t", 0, ids(4, 5)))
	c.must(createPartitionsRecords(c.img, &keelpb.CreatePartitionsRequest{Topic: "t", Count: 2}, 0))
	if p := c.partition("t", 1); len(p.Replicas) != 2 {
		t.Fatalf("added partition: %v; want 2 replicas, the target's", specOf(p))
	}
}
