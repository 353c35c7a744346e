package controller

import (
	"errors"
	"strings"
	"testing"
)

// TestReassignPlan: a plan is each partition's reassignment or cancel, as
// the single form decides it, in one batch; one refused entry refuses the
// whole plan, naming the entry, and writes nothing.
func TestReassignPlan(t *testing.T) {
	setup := func(t *testing.T) *replicationCtx {
		c := newReplicationCtx(t)
		c.registerBrokers(1, 2, 3, 4)
		c.unfenceBrokers(1, 2, 3, 4)
		c.createTopic("a", false, ids(1, 2), ids(2, 3), ids(3, 1))
		c.createTopic("b", false, ids(1, 2))
		// b/0 is being moved to [3 4]: 3 and 4 are not in the ISR yet.
		c.must(reassignRecords(c.img, "b", 0, ids(3, 4)))
		return c
	}
	tests := []struct {
		name    string
		plan    []ReassignmentTarget
		wantErr string                         // empty: accepted
		is      error                          // the refusal's kind, if any
		check   func(c *replicationCtx) string // what is wrong after replay, "" if nothing
	}{
		{name: "moves and a cancel",
			plan: []ReassignmentTarget{
				{Topic: "a", Partition: 0, Replicas: ids(2, 1)},  // a new order: completes at once
				{Topic: "a", Partition: 1, Replicas: ids(2, 4)},  // adds 4, removes 3
				{Topic: "b", Partition: 0},                       // cancels the move to [3 4]
				{Topic: "a", Partition: 2, Replicas: ids(3, 1)}}, // already there: no record
			check: func(c *replicationCtx) string {
				for _, w := range []struct {
					topic string
					p     int32
					want  partSpec
				}{
					{"a", 0, partSpec{replicas: ids(2, 1), isr: ids(1, 2), leader: 1}},
					{"a", 1, partSpec{replicas: ids(2, 4, 3), isr: ids(2, 3), leader: 2, adding: ids(4), removing: ids(3)}},
					{"a", 2, partSpec{replicas: ids(3, 1), isr: ids(3, 1), leader: 3}},
					{"b", 0, partSpec{replicas: ids(1, 2), isr: ids(1, 2), leader: 1}},
				} {
					if got := specOf(c.partition(w.topic, w.p)); !got.equal(w.want) {
						return w.topic + ": " + got.String() + "; want " + w.want.String()
					}
				}
				return ""
			}},
		{name: "an unregistered broker refuses the plan",
			plan:    []ReassignmentTarget{{Topic: "a", Partition: 0, Replicas: ids(2, 1)}, {Topic: "a", Partition: 1, Replicas: ids(2, 9)}},
			wantErr: "partitions[1].replicas: a/1: ", is: nil},
		{name: "an unknown partition refuses the plan",
			plan:    []ReassignmentTarget{{Topic: "a", Partition: 0, Replicas: ids(2, 1)}, {Topic: "a", Partition: 7, Replicas: ids(1, 2)}},
			wantErr: "partitions[1] (a/7): ", is: ErrUnknownTopic},
		{name: "a cancel with nothing to cancel refuses the plan",
			plan:    []ReassignmentTarget{{Topic: "b", Partition: 0}, {Topic: "a", Partition: 0}},
			wantErr: "partitions[1] (a/0): ", is: ErrNoReassignment},
		{name: "a partition twice",
			plan:    []ReassignmentTarget{{Topic: "a", Partition: 0, Replicas: ids(2, 1)}, {Topic: "a", Partition: 0, Replicas: ids(1, 2)}},
			wantErr: "partitions[1]: a/0 is named twice (also partitions[0])"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := setup(t)
			recs, err := planRecords(c.img, tt.plan)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || len(recs) != 0 {
					t.Fatalf("planRecords = %d records, %v; want none and an error containing %q", len(recs), err, tt.wantErr)
				}
				if tt.is != nil && !errors.Is(err, tt.is) {
					t.Fatalf("planRecords: %v; want it to be %v", err, tt.is)
				}
				var fe *FieldError
				if tt.is == nil && !errors.As(err, &fe) {
					t.Fatalf("planRecords: %v (%T); want a field error", err, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("planRecords: %v", err)
			}
			c.replay(recs)
			if msg := tt.check(c); msg != "" {
				t.Error(msg)
			}
		})
	}
}

// TestReassignPlan_IsOneBatchTheFSMApplies: a plan's records, from one
// image, apply as one batch, and leave the partitions as the single form,
// one after the other, would.
func TestReassignPlan_IsOneBatchTheFSMApplies(t *testing.T) {
	one, many := newReplicationCtx(t), newReplicationCtx(t)
	for _, c := range []*replicationCtx{one, many} {
		c.registerBrokers(1, 2, 3, 4, 5)
		c.unfenceBrokers(1, 2, 3, 4, 5)
		c.createTopic("t", false, ids(1, 2, 3), ids(2, 3, 4), ids(3, 4, 5), ids(4, 5, 1))
	}
	plan := []ReassignmentTarget{
		{Topic: "t", Partition: 0, Replicas: ids(2, 3, 4)},
		{Topic: "t", Partition: 1, Replicas: ids(5, 3, 2)},
		{Topic: "t", Partition: 2, Replicas: ids(1, 2)},
		{Topic: "t", Partition: 3, Replicas: ids(5, 1, 4)},
	}
	many.must(planRecords(many.img, plan))
	for _, e := range plan {
		one.must(reassignRecords(one.img, e.Topic, e.Partition, e.Replicas))
	}
	for p := range int32(4) {
		if a, b := specOf(one.partition("t", p)), specOf(many.partition("t", p)); !a.equal(b) {
			t.Errorf("t/%d: planned %v; one by one %v", p, b, a)
		}
	}
}
