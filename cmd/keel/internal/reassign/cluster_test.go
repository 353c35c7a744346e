package reassign

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/keel-dev/keel/fsm"
)

// brokers builds registered brokers: "1:a" is broker 1 in rack a, "2" has
// no rack, "3:a:fenced" and "4::shutting" are not active.
func brokers(specs ...string) []*fsm.Broker {
	var out []*fsm.Broker
	for _, s := range specs {
		f := strings.Split(s, ":")
		var id int32
		fmt.Sscan(f[0], &id)
		b := &fsm.Broker{ID: id}
		if len(f) > 1 {
			b.Rack = f[1]
		}
		if len(f) > 2 {
			b.Fenced = f[2] == "fenced"
			b.ShuttingDown = f[2] == "shutting"
		}
		out = append(out, b)
	}
	return out
}

// topic is a topic's partitions, settled (no move), each led by its first
// replica with every replica in sync.
func topic(name string, assignment ...[]int32) []State {
	out := make([]State, len(assignment))
	for i, r := range assignment {
		out[i] = State{Topic: name, Partition: int32(i), Leader: r[0], Replicas: r, ISR: r}
	}
	return out
}

func ids(v ...int32) []int32 { return v }

// counts is, per broker, the replicas and preferred leaderships a plan gives.
func counts(p Plan) (replicas, preferred map[int32]int) {
	replicas, preferred = map[int32]int{}, map[int32]int{}
	for _, e := range p.Partitions {
		for i, b := range e.Replicas {
			replicas[b]++
			if i == 0 {
				preferred[b]++
			}
		}
	}
	return replicas, preferred
}

// spread is the largest minus the smallest count over ids.
func spread(m map[int32]int, ids []int32) int {
	lo, hi := m[ids[0]], m[ids[0]]
	for _, id := range ids {
		lo, hi = min(lo, m[id]), max(hi, m[id])
	}
	return hi - lo
}

func racksOf(bs []*fsm.Broker) map[int32]string {
	out := map[int32]string{}
	for _, b := range bs {
		out[b.ID] = b.Rack
	}
	return out
}

// distinctRacks reports whether every entry's replicas sit in different racks.
func distinctRacks(p Plan, racks map[int32]string) string {
	for _, e := range p.Partitions {
		seen := map[string]bool{}
		for _, b := range e.Replicas {
			if seen[racks[b]] {
				return fmt.Sprintf("%s: replicas %v share rack %s", e.Name(), e.Replicas, racks[b])
			}
			seen[racks[b]] = true
		}
	}
	return ""
}

func TestGenerate(t *testing.T) {
	twoTopics := append(topic("a", ids(1, 2, 3), ids(1, 2, 3), ids(1, 2, 3), ids(1, 2, 3), ids(1, 2, 3), ids(1, 2, 3)),
		topic("b", ids(1, 2, 3), ids(1, 2, 3), ids(1, 2, 3), ids(1, 2, 3), ids(1, 2, 3), ids(1, 2, 3))...)
	tests := []struct {
		name    string
		brokers []*fsm.Broker
		ids     []int32
		parts   []State
		wantErr string
		check   func(t *testing.T, p Plan)
	}{
		{name: "balanced over the brokers given, leaders even across topics",
			brokers: brokers("1", "2", "3", "4", "5", "6"), ids: ids(3, 4, 5, 6), parts: twoTopics,
			check: func(t *testing.T, p Plan) {
				replicas, preferred := counts(p)
				if len(p.Partitions) != 12 || spread(replicas, ids(3, 4, 5, 6)) != 0 || spread(preferred, ids(3, 4, 5, 6)) != 0 {
					t.Errorf("12 partitions of RF 3 over 4 brokers: replicas %v, preferred %v; want 9 and 3 each", replicas, preferred)
				}
				if replicas[1]+replicas[2] != 0 {
					t.Errorf("replicas on brokers not given: %v", replicas)
				}
			}},
		{name: "rack-aware: every partition spans three racks",
			brokers: brokers("1:r1", "2:r1", "3:r2", "4:r2", "5:r3", "6:r3"), ids: ids(1, 2, 3, 4, 5, 6), parts: twoTopics,
			check: func(t *testing.T, p Plan) {
				if msg := distinctRacks(p, racksOf(brokers("1:r1", "2:r1", "3:r2", "4:r2", "5:r3", "6:r3"))); msg != "" {
					t.Error(msg)
				}
				replicas, preferred := counts(p)
				if spread(replicas, ids(1, 2, 3, 4, 5, 6)) != 0 || spread(preferred, ids(1, 2, 3, 4, 5, 6)) != 0 {
					t.Errorf("replicas %v, preferred %v; want 6 and 2 each", replicas, preferred)
				}
			}},
		{name: "each partition keeps its replication factor",
			brokers: brokers("1", "2", "3"), ids: ids(1, 2, 3),
			parts: append(topic("one", ids(1), ids(2)), State{Topic: "two", Partition: 0, Replicas: ids(1, 2, 3), Removing: ids(3)}),
			check: func(t *testing.T, p Plan) {
				for _, e := range p.Partitions {
					want := map[string]int{"one": 1, "two": 2}[e.Topic]
					if len(e.Replicas) != want {
						t.Errorf("%s: %v; want %d replicas", e.Name(), e.Replicas, want)
					}
				}
			}},
		{name: "a fenced broker is never a preferred leader",
			brokers: brokers("1", "2", "3:r:fenced"), ids: ids(1, 2, 3), parts: topic("t", ids(1, 2, 3), ids(1, 2, 3), ids(1, 2, 3)),
			check: func(t *testing.T, p Plan) {
				if _, preferred := counts(p); preferred[3] != 0 {
					t.Errorf("preferred %v: the fenced broker 3 leads", preferred)
				}
			}},
		{name: "more replicas than brokers", brokers: brokers("1", "2", "3"), ids: ids(1, 2), parts: topic("t", ids(1, 2, 3)),
			wantErr: "partition t-0 has 3 replicas, more than the 2 brokers given (1,2)"},
		{name: "an unregistered broker", brokers: brokers("1", "2"), ids: ids(1, 7), parts: topic("t", ids(1)), wantErr: "broker 7 is not registered"},
		{name: "a broker twice", brokers: brokers("1", "2"), ids: ids(1, 2, 1), parts: topic("t", ids(1)), wantErr: "broker 1 is named twice"},
		{name: "a broker shutting down", brokers: brokers("1", "2::shutting"), ids: ids(1, 2), parts: topic("t", ids(1)), wantErr: "broker 2 is shutting down"},
		{name: "no active broker", brokers: brokers("1::fenced"), ids: ids(1), parts: topic("t", ids(1)), wantErr: "none of brokers 1 is active"},
		{name: "no brokers", brokers: brokers("1"), parts: topic("t", ids(1)), wantErr: "no brokers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Generate(tt.brokers, tt.ids, tt.parts)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Generate = %v, %v; want an error containing %q", p, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if len(p.Partitions) != len(tt.parts) {
				t.Fatalf("Generate: %d entries for %d partitions", len(p.Partitions), len(tt.parts))
			}
			tt.check(t, p)
		})
	}
}

func TestDrain(t *testing.T) {
	// 12 partitions of RF 3 over brokers 1-4, placed round-robin: each
	// broker holds 9 and is preferred for 3.
	var even [][]int32
	for i := range int32(12) {
		even = append(even, ids(1+i%4, 1+(i+1)%4, 1+(i+2)%4))
	}
	var rf2 [][]int32
	for i := range int32(12) {
		rf2 = append(rf2, ids(1+i%4, 1+(i+1)%4))
	}
	tests := []struct {
		name    string
		brokers []*fsm.Broker
		parts   []State
		drain   int32
		wantErr string
		check   func(t *testing.T, parts []State, p Plan)
	}{
		{name: "to the least loaded broker, in the drained broker's place",
			brokers: brokers("1", "2", "3", "4", "5"), parts: topic("t", even...), drain: 4,
			check: func(t *testing.T, parts []State, p Plan) {
				if len(p.Partitions) != 9 {
					t.Fatalf("%d moves; want the 9 partitions on broker 4", len(p.Partitions))
				}
				after := applyPlan(parts, p)
				replicas, preferred := counts(Current(after))
				if replicas[4] != 0 || preferred[4] != 0 {
					t.Fatalf("after the drain broker 4 holds %d replicas, preferred for %d", replicas[4], preferred[4])
				}
				// 36 replicas over 4 brokers: 9 each; 12 preferred: 3 each.
				if spread(replicas, ids(1, 2, 3, 5)) != 0 || spread(preferred, ids(1, 2, 3, 5)) != 0 {
					t.Errorf("replicas %v, preferred %v; want 9 and 3 each on 1, 2, 3, 5", replicas, preferred)
				}
				for i, e := range p.Partitions {
					before := parts[e.Partition].Replicas
					at := slices.Index(before, 4)
					if e.Replicas[at] != 5 || !slices.Equal(slices.Delete(slices.Clone(e.Replicas), at, at+1), slices.Delete(slices.Clone(before), at, at+1)) {
						t.Errorf("move %d: %v → %v; want broker 4 replaced by 5, the least loaded, in its place", i, before, e.Replicas)
					}
				}
			}},
		{name: "spread over the brokers left",
			brokers: brokers("1", "2", "3", "4"), parts: topic("t", rf2...), drain: 4,
			check: func(t *testing.T, parts []State, p Plan) {
				replicas, preferred := counts(Current(applyPlan(parts, p)))
				// 24 replicas over 3 brokers: 8 each; 12 preferred: 4 each.
				if replicas[4] != 0 || spread(replicas, ids(1, 2, 3)) != 0 || spread(preferred, ids(1, 2, 3)) != 0 {
					t.Errorf("replicas %v, preferred %v; want 8 and 4 each on 1, 2, 3, none on 4", replicas, preferred)
				}
			}},
		{name: "rack-aware: the replacement is in a rack the partition does not use",
			brokers: brokers("1:a", "2:b", "3:c", "4:c", "5:a"), parts: topic("t", ids(1, 2, 3), ids(2, 3, 1), ids(3, 1, 2)), drain: 3,
			check: func(t *testing.T, parts []State, p Plan) {
				for _, e := range p.Partitions {
					if !slices.Contains(e.Replicas, 4) {
						t.Errorf("%s: %v; want broker 4, the only active one in rack c besides 3", e.Name(), e.Replicas)
					}
				}
				if msg := distinctRacks(p, racksOf(brokers("1:a", "2:b", "3:c", "4:c", "5:a"))); msg != "" {
					t.Error(msg)
				}
			}},
		{name: "without a free rack, the least loaded broker",
			brokers: brokers("1:a", "2:b", "3:c", "5:a", "6:b"), parts: topic("t", ids(1, 2, 3), ids(2, 3, 1)), drain: 3,
			check: func(t *testing.T, parts []State, p Plan) {
				got := []int32{p.Partitions[0].Replicas[2], p.Partitions[1].Replicas[1]}
				if !sameIDs(got, ids(5, 6)) {
					t.Errorf("replacements %v; want brokers 5 and 6, one each", got)
				}
			}},
		{name: "fenced and shutting-down brokers take nothing",
			brokers: brokers("1", "2", "3", "4:r:fenced", "5::shutting", "6"), parts: topic("t", ids(3, 1), ids(1, 3)), drain: 3,
			check: func(t *testing.T, parts []State, p Plan) {
				for _, e := range p.Partitions {
					if slices.ContainsFunc(e.Replicas, func(b int32) bool { return b == 4 || b == 5 }) {
						t.Errorf("%s: %v; want no fenced or shutting-down broker", e.Name(), e.Replicas)
					}
				}
			}},
		{name: "a partition already moving off the broker needs nothing",
			brokers: brokers("1", "2", "3"), drain: 3,
			parts: []State{{Topic: "t", Partition: 0, Leader: 3, Replicas: ids(1, 2, 3), ISR: ids(3), Adding: ids(1, 2), Removing: ids(3)}},
			check: func(t *testing.T, parts []State, p Plan) {
				if len(p.Partitions) != 0 {
					t.Errorf("plan %v; want none", p)
				}
			}},
		{name: "a drained broker may be fenced", brokers: brokers("1", "2", "3:r:fenced"), parts: topic("t", ids(3, 1)), drain: 3,
			check: func(t *testing.T, parts []State, p Plan) {
				if len(p.Partitions) != 1 || !slices.Equal(p.Partitions[0].Replicas, ids(2, 1)) {
					t.Errorf("plan %v; want t-0 to [2 1]", p)
				}
			}},
		{name: "no broker to take its place", brokers: brokers("1", "2", "3", "4::fenced"), parts: topic("t", ids(1, 2), ids(1, 2, 3)), drain: 3,
			wantErr: "cannot drain broker 3: partition t-1 has replicas 1,2,3, and no other active broker can take broker 3's place (active besides it: 1,2)"},
		{name: "an unregistered broker", brokers: brokers("1", "2"), parts: topic("t", ids(1)), drain: 9, wantErr: "broker 9 is not registered"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Drain(tt.brokers, tt.parts, tt.drain)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Drain = %v, %v; want an error containing %q", p, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Drain: %v", err)
			}
			tt.check(t, tt.parts, p)
		})
	}
}

// applyPlan is parts once every move of p has completed.
func applyPlan(parts []State, p Plan) []State {
	out := slices.Clone(parts)
	for _, e := range p.Partitions {
		for i := range out {
			if out[i].Topic == e.Topic && out[i].Partition == e.Partition {
				out[i] = State{Topic: e.Topic, Partition: e.Partition, Leader: e.Replicas[0], Replicas: e.Replicas, ISR: e.Replicas}
			}
		}
	}
	return out
}

func sameIDs(a, b []int32) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

func TestVerify(t *testing.T) {
	parts := []State{
		{Topic: "t", Partition: 0, Leader: 1, Replicas: ids(1, 2), ISR: ids(1, 2)},
		{Topic: "t", Partition: 1, Leader: 1, Replicas: ids(3, 4, 1), ISR: ids(1, 3), Adding: ids(3, 4), Removing: ids(1)},
		{Topic: "t", Partition: 2, Leader: 1, Replicas: ids(1, 2), ISR: ids(1, 2)},
		{Topic: "t", Partition: 3, Leader: 1, Replicas: ids(5, 1), ISR: ids(1), Adding: ids(5), Removing: ids(1)},
		{Topic: "t", Partition: 4, Leader: 2, Replicas: ids(2, 1), ISR: ids(1, 2)},
	}
	plan := NewPlan([]Partition{
		{Topic: "t", Partition: 0, Replicas: ids(1, 2)},
		{Topic: "t", Partition: 1, Replicas: ids(3, 4)},
		{Topic: "t", Partition: 2, Replicas: ids(2, 3)},
		{Topic: "t", Partition: 3, Replicas: ids(4, 1)},
		{Topic: "t", Partition: 4, Replicas: ids(1, 2)},
		{Topic: "u", Partition: 0, Replicas: ids(1)},
	})
	want := map[string]string{
		"t-0": "complete: Reassignment of partition t-0 is completed.",
		"t-1": "in_progress: Reassignment of partition t-1 is still in progress.",
		"t-2": "differs: There is no active reassignment of partition t-2, but replica set is 1,2 rather than 2,3.",
		"t-3": "differs: Partition t-3 is being moved to 5 rather than 4,1.",
		"t-4": "differs: There is no active reassignment of partition t-4, but replica set is 2,1 rather than 1,2.", // order counts
		"u-0": "missing: Partition u-0 does not exist.",
	}
	got := map[string]string{}
	for _, s := range Verify(plan, parts) {
		got[s.Name()] = s.State + ": " + s.Message()
	}
	if !maps.Equal(got, want) {
		for _, k := range slices.Sorted(maps.Keys(want)) {
			if got[k] != want[k] {
				t.Errorf("%s: %q; want %q", k, got[k], want[k])
			}
		}
	}
}
