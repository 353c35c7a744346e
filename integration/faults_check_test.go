package integration

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/keel-dev/keel/proto/keelpb"
)

// This file holds what the fault suite (faults_test.go) checks, as pure
// functions over what it recorded, so that each rule can be tested on
// histories built by hand (faults_check_unit_test.go).

// ---------------------------------------------------------------------------
// Admin history: a register of topics, checked with porcupine

// outcome is how the cluster answered an admin operation.
type outcome string

const (
	outOK       outcome = "ok"
	outExists   outcome = "exists"    // create: AlreadyExists
	outNotFound outcome = "not-found" // delete, describe: NotFound
	// outRefused: refused before anything was proposed (not the active
	// controller, taking over, queue full, bad request): it had no effect.
	outRefused outcome = "refused"
	// outUnknown: no answer, or one that says it may or may not have
	// committed. The operation may take effect at any time after its call,
	// or never.
	outUnknown outcome = "unknown"
)

// topicOp is one admin operation on one topic name.
type topicOp struct {
	Kind       string // "create", "delete" or "describe"
	Topic      string
	Partitions int32 // create: the count asked for
}

// topicResult is its answer; Partitions is what a describe saw.
type topicResult struct {
	Outcome    outcome
	Partitions int32
}

// topicModel is the sequential specification of topic admin: per name, the
// state is the topic's partition count, 0 when there is no topic. Names are
// independent, so porcupine checks each on its own.
var topicModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byTopic := make(map[string][]porcupine.Operation)
		var names []string
		for _, op := range history {
			name := op.Input.(topicOp).Topic
			if _, ok := byTopic[name]; !ok {
				names = append(names, name)
			}
			byTopic[name] = append(byTopic[name], op)
		}
		sort.Strings(names)
		parts := make([][]porcupine.Operation, 0, len(names))
		for _, n := range names {
			parts = append(parts, byTopic[n])
		}
		return parts
	},
	Init: func() any { return int32(0) },
	Step: func(state, input, output any) (bool, any) {
		return stepTopic(state.(int32), input.(topicOp), output.(topicResult))
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(topicOp), output.(topicResult)
		switch in.Kind {
		case "create":
			return fmt.Sprintf("create(%s, %d) -> %s", in.Topic, in.Partitions, out.Outcome)
		case "describe":
			if out.Outcome == outOK {
				return fmt.Sprintf("describe(%s) -> %d partitions", in.Topic, out.Partitions)
			}
		}
		return fmt.Sprintf("%s(%s) -> %s", in.Kind, in.Topic, out.Outcome)
	},
	DescribeState: func(state any) string {
		if state.(int32) == 0 {
			return "absent"
		}
		return fmt.Sprintf("%d partitions", state.(int32))
	},
}

// stepTopic is topicModel's step: whether the answer out is possible for in
// from state, and the state after.
func stepTopic(state int32, in topicOp, out topicResult) (bool, int32) {
	switch out.Outcome {
	case outRefused:
		return true, state
	case outUnknown:
		// Linearized here, it took effect here; an operation that never
		// took effect is linearized after every other one.
		switch in.Kind {
		case "create":
			if state == 0 {
				return true, in.Partitions
			}
			return true, state
		case "delete":
			return true, 0
		}
		return true, state
	}
	switch in.Kind {
	case "create":
		switch out.Outcome {
		case outOK:
			return state == 0, in.Partitions
		case outExists:
			return state != 0, state
		}
	case "delete":
		switch out.Outcome {
		case outOK:
			return state != 0, 0
		case outNotFound:
			return state == 0, state
		}
	case "describe":
		switch out.Outcome {
		case outOK:
			return state != 0 && out.Partitions == state, state
		case outNotFound:
			return state == 0, state
		}
	}
	return false, state
}

// recordedOp is one operation of the admin history as the suite's clients
// saw it, with call and return times since the run began.
type recordedOp struct {
	Client   int
	Op       topicOp
	Result   topicResult
	Call     time.Duration
	Return   time.Duration
	Operator string // which controller answered, for the report
}

// porcupineHistory converts ops. An operation with an unknown outcome never
// returns: it may take effect at any point after its call.
func porcupineHistory(ops []recordedOp) []porcupine.Operation {
	h := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		ret := int64(op.Return)
		if op.Result.Outcome == outUnknown {
			ret = math.MaxInt64
		}
		h = append(h, porcupine.Operation{
			ClientId: op.Client,
			Input:    op.Op,
			Call:     int64(op.Call),
			Output:   op.Result,
			Return:   ret,
			Metadata: op.Operator,
		})
	}
	return h
}

// ---------------------------------------------------------------------------
// Acknowledged writes

// ackViolations checks creates of names used once each: every create
// acknowledged must be present at the end, every create refused absent.
func ackViolations(creates map[string]outcome, final map[string]bool) []string {
	var bad []string
	for _, name := range sortedKeys(creates) {
		switch out := creates[name]; {
		case out == outOK && !final[name]:
			bad = append(bad, fmt.Sprintf("topic %s: create was acknowledged, but the topic is missing", name))
		case out == outRefused && final[name]:
			bad = append(bad, fmt.Sprintf("topic %s: create was refused, but the topic exists", name))
		}
	}
	return bad
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ---------------------------------------------------------------------------
// Controllers

// controllerObs is one controller's own view (DescribeQuorum), seen by the
// observer. Incarnation counts the node's restarts: a restarted node replays
// its log from its last snapshot, so its view may start behind the old one.
type controllerObs struct {
	At          time.Duration
	Node        int32
	Incarnation int
	ActiveEpoch int64 // the epoch the node is active in; 0 when not active
	Epoch       int64 // the controller epoch in the node's image
	EpochLeader int32 // the node that epoch belongs to, per the image
}

// activeViolations checks that no two controllers were ever active in the
// same epoch, that the nodes agree which node each epoch belongs to, and
// that a node is active only in an epoch of its own.
func activeViolations(obs []controllerObs) []string {
	var bad []string
	owner := epochOwners(obs)
	seen := make(map[int64]int32)
	for _, o := range obs {
		if o.Epoch > 0 && owner[o.Epoch] != o.EpochLeader {
			bad = append(bad, fmt.Sprintf("epoch %d belongs to node %d in node %d's view at %v, to node %d in another",
				o.Epoch, o.EpochLeader, o.Node, o.At.Round(time.Millisecond), owner[o.Epoch]))
		}
		if o.ActiveEpoch == 0 {
			continue
		}
		if n, ok := owner[o.ActiveEpoch]; ok && n != o.Node {
			bad = append(bad, fmt.Sprintf("node %d was active in epoch %d, which belongs to node %d (at %v)",
				o.Node, o.ActiveEpoch, n, o.At.Round(time.Millisecond)))
		}
		if n, ok := seen[o.ActiveEpoch]; ok && n != o.Node {
			bad = append(bad, fmt.Sprintf("epoch %d had two active controllers: nodes %d and %d (at %v)",
				o.ActiveEpoch, n, o.Node, o.At.Round(time.Millisecond)))
		}
		seen[o.ActiveEpoch] = o.Node
	}
	return bad
}

// epochRegressions checks that each controller incarnation's epoch never
// went back.
func epochRegressions(obs []controllerObs) []string {
	type key struct {
		node int32
		inc  int
	}
	last := make(map[key]controllerObs)
	var bad []string
	for _, o := range obs {
		k := key{o.Node, o.Incarnation}
		if prev, ok := last[k]; ok && o.Epoch < prev.Epoch {
			bad = append(bad, fmt.Sprintf("node %d's epoch went from %d (at %v) back to %d (at %v)",
				o.Node, prev.Epoch, prev.At.Round(time.Millisecond), o.Epoch, o.At.Round(time.Millisecond)))
		}
		last[k] = o
	}
	return bad
}

// ---------------------------------------------------------------------------
// Brokers

// brokerObs is one broker's own view (Inspect), seen by the observer.
type brokerObs struct {
	At              time.Duration
	Broker          int32
	Incarnation     int
	ControllerID    int32
	ControllerEpoch int64
	Offset          uint64
	Replicas        []*keelpb.ReplicaState
}

// brokerViolations checks each broker incarnation's view over time: the
// metadata offset and the controller epoch it follows never go back, each
// partition's leader epoch never goes back, and a controller epoch is always
// pushed by the controller that owns it (owners: epoch -> node, from the
// controllers' views; epochs missing from it are not judged).
func brokerViolations(obs []brokerObs, owners map[int64]int32) []string {
	type key struct {
		broker int32
		inc    int
	}
	type pkey struct {
		key
		topic string
		part  int32
	}
	last := make(map[key]brokerObs)
	leaderEpoch := make(map[pkey]int32)
	var bad []string
	for _, o := range obs {
		k := key{o.Broker, o.Incarnation}
		if prev, ok := last[k]; ok {
			if o.Offset < prev.Offset {
				bad = append(bad, fmt.Sprintf("broker %d's metadata offset went from %d back to %d (at %v)", o.Broker, prev.Offset, o.Offset, o.At.Round(time.Millisecond)))
			}
			if o.ControllerEpoch < prev.ControllerEpoch {
				bad = append(bad, fmt.Sprintf("broker %d's controller epoch went from %d back to %d (at %v)", o.Broker, prev.ControllerEpoch, o.ControllerEpoch, o.At.Round(time.Millisecond)))
			}
		}
		last[k] = o
		if owner, ok := owners[o.ControllerEpoch]; ok && o.ControllerID > 0 && owner != o.ControllerID {
			bad = append(bad, fmt.Sprintf("broker %d followed node %d in epoch %d, which belongs to node %d (at %v)",
				o.Broker, o.ControllerID, o.ControllerEpoch, owner, o.At.Round(time.Millisecond)))
		}
		for _, r := range o.Replicas {
			pk := pkey{k, r.GetTopic(), r.GetPartition()}
			if prev, ok := leaderEpoch[pk]; ok && r.GetLeaderEpoch() < prev {
				bad = append(bad, fmt.Sprintf("broker %d saw %s-%d's leader epoch go from %d back to %d (at %v)",
					o.Broker, r.GetTopic(), r.GetPartition(), prev, r.GetLeaderEpoch(), o.At.Round(time.Millisecond)))
			}
			leaderEpoch[pk] = r.GetLeaderEpoch()
		}
	}
	return bad
}

// epochOwners is epoch -> node from the controllers' views: the first view
// of each epoch names it (activeViolations reports views that disagree).
func epochOwners(obs []controllerObs) map[int64]int32 {
	m := make(map[int64]int32)
	for _, o := range obs {
		if _, ok := m[o.Epoch]; !ok && o.Epoch > 0 {
			m[o.Epoch] = o.EpochLeader
		}
	}
	return m
}

// ---------------------------------------------------------------------------
// Partitions

// partitionViolations checks leader ∈ ISR ⊆ replicas for every partition of
// a topic (no unclean election is ever asked for), with no replica twice.
func partitionViolations(topic string, parts []*keelpb.PartitionDescription) []string {
	var bad []string
	for _, p := range parts {
		name := fmt.Sprintf("%s-%d", topic, p.GetPartition())
		replicas := make(map[int32]bool, len(p.GetReplicas()))
		for _, r := range p.GetReplicas() {
			if replicas[r] {
				bad = append(bad, fmt.Sprintf("%s: replica %d listed twice in %v", name, r, p.GetReplicas()))
			}
			replicas[r] = true
		}
		for _, r := range p.GetIsr() {
			if !replicas[r] {
				bad = append(bad, fmt.Sprintf("%s: ISR %v is not within replicas %v", name, p.GetIsr(), p.GetReplicas()))
				break
			}
		}
		if l := p.GetLeader(); l >= 0 && !slices.Contains(p.GetIsr(), l) {
			bad = append(bad, fmt.Sprintf("%s: leader %d is not in ISR %v", name, l, p.GetIsr()))
		}
	}
	return bad
}

// ---------------------------------------------------------------------------

// summarize keeps a report readable: the first n lines, and how many more.
func summarize(lines []string, n int) string {
	if len(lines) <= n {
		return strings.Join(lines, "\n")
	}
	return strings.Join(lines[:n], "\n") + fmt.Sprintf("\n... and %d more", len(lines)-n)
}
