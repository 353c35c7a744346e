package reassign

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/fsm"
)

// State is a partition as the controllers describe it.
type State struct {
	Topic     string
	Partition int32
	Leader    int32
	Replicas  []int32 // during a move: the target, then the replicas being removed
	ISR       []int32
	Adding    []int32
	Removing  []int32
}

// Name is the partition as Kafka's tools print it, "orders-0".
func (s State) Name() string { return fmt.Sprintf("%s-%d", s.Topic, s.Partition) }

// Reassigning reports whether the partition is being moved.
func (s State) Reassigning() bool { return len(s.Adding)+len(s.Removing) > 0 }

// Target is where the partition is going: its replicas less those being
// removed (all of them when it is not being moved).
func (s State) Target() []int32 {
	return slices.DeleteFunc(slices.Clone(s.Replicas), func(b int32) bool { return slices.Contains(s.Removing, b) })
}

func sortStates(parts []State) []State {
	out := slices.Clone(parts)
	slices.SortFunc(out, func(a, b State) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}

// Current is the plan that puts parts back where they are going now (their
// Target): what Kafka's tools print "for rollback" before a change.
func Current(parts []State) Plan {
	entries := make([]Partition, len(parts))
	for i, s := range parts {
		entries[i] = Partition{Topic: s.Topic, Partition: s.Partition, Replicas: s.Target()}
	}
	return NewPlan(entries)
}

// active reports whether a broker may take new replicas and lead:
// registered, unfenced and not shutting down.
func active(b *fsm.Broker) bool { return b.Eligible() }

// Generate proposes a new assignment of parts over the brokers named by
// ids, each partition keeping its replication factor, as topic creation
// places replicas (controller.PlaceReplicas): racks interleaved so that a
// partition's replicas sit in different racks, preferred leaders
// round-robin across every partition of every topic so that leadership is
// even, fenced brokers only to make up a replication factor. It is
// refused when ids is empty, names a broker twice, one not registered or
// one shutting down, or when a partition has more replicas than ids names
// brokers.
func Generate(brokers []*fsm.Broker, ids []int32, parts []State) (Plan, error) {
	if len(ids) == 0 {
		return Plan{}, errors.New("no brokers to place replicas on")
	}
	byID := map[int32]*fsm.Broker{}
	for _, b := range brokers {
		byID[b.ID] = b
	}
	chosen := make([]*fsm.Broker, 0, len(ids))
	for i, id := range ids {
		b, ok := byID[id]
		switch {
		case slices.Contains(ids[:i], id):
			return Plan{}, fmt.Errorf("broker %d is named twice", id)
		case !ok:
			return Plan{}, fmt.Errorf("broker %d is not registered", id)
		case b.ShuttingDown:
			return Plan{}, fmt.Errorf("broker %d is shutting down: it can take no replicas", id)
		}
		chosen = append(chosen, b)
	}
	if !slices.ContainsFunc(chosen, active) {
		return Plan{}, fmt.Errorf("none of brokers %s is active: the replicas would have no leader", FormatIDs(ids))
	}
	var out []Partition
	for k, s := range sortStates(parts) {
		rf := len(s.Target())
		if rf > len(chosen) {
			return Plan{}, fmt.Errorf("partition %s has %d replicas, more than the %d brokers given (%s)", s.Name(), rf, len(chosen), FormatIDs(ids))
		}
		r := controller.PlaceReplicas(chosen, 0, 1, int32(rf), k)[0]
		out = append(out, Partition{Topic: s.Topic, Partition: s.Partition, Replicas: r})
	}
	return NewPlan(out), nil
}

// load counts, per broker, the replicas it holds and those it is the
// preferred leader (first replica) of, by the partitions' targets.
type load struct {
	replicas, preferred map[int32]int
}

func loadOf(parts []State) load {
	l := load{replicas: map[int32]int{}, preferred: map[int32]int{}}
	for _, s := range parts {
		t := s.Target()
		for i, b := range t {
			l.replicas[b]++
			if i == 0 {
				l.preferred[b]++
			}
		}
	}
	return l
}

// Drain plans moving every replica off broker id: in each partition whose
// target holds it, id is replaced, in its place in the list, by an active
// broker the partition does not use yet. The one chosen is, in order: in a
// rack the partition's other replicas do not use (where brokers have
// racks); for id's place as preferred leader, the one preferred for the
// fewest partitions; the one holding the fewest replicas; the lowest id.
// Where id was the preferred leader, the active broker of the new list
// preferred for the fewest partitions goes first (the new one, or one that
// stays). Loads count the moves planned so far, so replicas and preferred
// leaderships spread evenly.
// Once a move completes, leadership leaves id with it (the controller
// elects a leader from the target). A partition already being moved off
// id needs nothing. The plan is refused whole when id is not registered,
// or when a partition has no active broker to take id's place (fewer
// active brokers besides id than its replicas).
func Drain(brokers []*fsm.Broker, parts []State, id int32) (Plan, error) {
	var candidates []*fsm.Broker
	racks := map[int32]string{}
	known, hasRacks := false, false
	for _, b := range brokers {
		racks[b.ID] = b.Rack
		hasRacks = hasRacks || b.Rack != ""
		if b.ID == id {
			known = true
			continue
		}
		if active(b) {
			candidates = append(candidates, b)
		}
	}
	if !known {
		return Plan{}, fmt.Errorf("broker %d is not registered", id)
	}
	l := loadOf(parts)
	var out []Partition
	for _, s := range sortStates(parts) {
		target := s.Target()
		at := slices.Index(target, id)
		if at < 0 {
			continue
		}
		rest := slices.Delete(slices.Clone(target), at, at+1)
		usedRack := func(b *fsm.Broker) bool {
			return hasRacks && slices.ContainsFunc(rest, func(r int32) bool { return racks[r] == b.Rack })
		}
		var best *fsm.Broker
		better := func(a, b *fsm.Broker) bool { // a before b
			if ua, ub := usedRack(a), usedRack(b); ua != ub {
				return !ua
			}
			if at == 0 && l.preferred[a.ID] != l.preferred[b.ID] {
				return l.preferred[a.ID] < l.preferred[b.ID]
			}
			if l.replicas[a.ID] != l.replicas[b.ID] {
				return l.replicas[a.ID] < l.replicas[b.ID]
			}
			return a.ID < b.ID
		}
		for _, c := range candidates {
			if !slices.Contains(rest, c.ID) && (best == nil || better(c, best)) {
				best = c
			}
		}
		if best == nil {
			return Plan{}, fmt.Errorf("cannot drain broker %d: partition %s has replicas %s, and no other active broker can take broker %d's place (active besides it: %s); add a broker, or lower the partition's replication factor with a plan first",
				id, s.Name(), FormatIDs(target), id, formatBrokers(candidates))
		}
		target[at] = best.ID
		l.replicas[id]--
		l.replicas[best.ID]++
		if at == 0 {
			// The preferred leader goes to whichever active broker of the
			// new list is preferred for the fewest partitions: the one
			// just added, or one that stays, moved to the front.
			lead := 0
			for i, b := range target {
				if l.preferred[b] < l.preferred[target[lead]] && slices.ContainsFunc(candidates, func(c *fsm.Broker) bool { return c.ID == b }) {
					lead = i
				}
			}
			target[0], target[lead] = target[lead], target[0]
			l.preferred[id]--
			l.preferred[target[0]]++
		}
		out = append(out, Partition{Topic: s.Topic, Partition: s.Partition, Replicas: target})
	}
	return NewPlan(out), nil
}

func formatBrokers(bs []*fsm.Broker) string {
	if len(bs) == 0 {
		return "none"
	}
	ids := make([]int32, len(bs))
	for i, b := range bs {
		ids[i] = b.ID
	}
	return FormatIDs(ids)
}

// Progress states of a plan's partition, as Verify reports them.
const (
	Complete   = "complete"    // its replicas are the target, no move ongoing
	InProgress = "in_progress" // being moved to the target
	Differs    = "differs"     // neither: not moved there, or moved elsewhere
	Missing    = "missing"     // no such topic or partition
)

// Status is one plan entry against its partition.
type Status struct {
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	State     string  `json:"state"`
	Target    []int32 `json:"target"`
	Replicas  []int32 `json:"replicas"` // the partition's replicas now; empty when missing
	// MovingTo is the target of the partition's ongoing move, if any.
	MovingTo []int32 `json:"moving_to,omitempty"`
}

// Name is the partition as Kafka's tools print it, "orders-0".
func (s Status) Name() string { return fmt.Sprintf("%s-%d", s.Topic, s.Partition) }

// Message is the status in the words of Kafka's --verify.
func (s Status) Message() string {
	switch s.State {
	case Complete:
		return fmt.Sprintf("Reassignment of partition %s is completed.", s.Name())
	case InProgress:
		return fmt.Sprintf("Reassignment of partition %s is still in progress.", s.Name())
	case Missing:
		return fmt.Sprintf("Partition %s does not exist.", s.Name())
	}
	if len(s.MovingTo) > 0 {
		return fmt.Sprintf("Partition %s is being moved to %s rather than %s.", s.Name(), FormatIDs(s.MovingTo), FormatIDs(s.Target))
	}
	return fmt.Sprintf("There is no active reassignment of partition %s, but replica set is %s rather than %s.",
		s.Name(), FormatIDs(s.Replicas), FormatIDs(s.Target))
}

// Verify compares each entry of plan with its partition in parts: complete
// when the partition's replicas are the target in the same order and no
// move is ongoing; in progress while it is being moved to the target;
// differs otherwise (a move elsewhere, or a move that never started or was
// cancelled); missing when parts has no such partition.
func Verify(plan Plan, parts []State) []Status {
	byName := make(map[string]State, len(parts))
	for _, s := range parts {
		byName[s.Name()] = s
	}
	out := make([]Status, 0, len(plan.Partitions))
	for _, p := range plan.Partitions {
		st := Status{Topic: p.Topic, Partition: p.Partition, Target: p.Replicas, Replicas: []int32{}}
		s, ok := byName[p.Name()]
		switch {
		case !ok:
			st.State = Missing
		case !s.Reassigning() && slices.Equal(s.Replicas, p.Replicas):
			st.State, st.Replicas = Complete, s.Replicas
		case s.Reassigning() && slices.Equal(s.Target(), p.Replicas):
			st.State, st.Replicas = InProgress, s.Replicas
		default:
			st.State, st.Replicas = Differs, s.Replicas
			if s.Reassigning() {
				st.MovingTo = s.Target()
			}
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b Status) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}
