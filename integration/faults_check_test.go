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

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// This file holds what the fault suite (faults_test.go) checks, as pure
// functions over what it recorded, so that each rule can be tested on
// histories built by hand (faults_check_unit_test.go).

// ---------------------------------------------------------------------------
// Admin history: topics and their configs, checked with porcupine

// outcome is how the cluster answered an admin operation.
type outcome string

const (
	outOK       outcome = "ok"
	outExists   outcome = "exists"    // create: AlreadyExists
	outNotFound outcome = "not-found" // delete, alter, describe: NotFound
	// outRefused: refused before anything was proposed (not the active
	// controller, taking over, queue full, bad request, a connection
	// refused): it had no effect.
	outRefused outcome = "refused"
	// outUnknown: no answer, or one that says it may or may not have
	// committed. The operation may take effect at any time after its call,
	// or never.
	outUnknown outcome = "unknown"
)

// kvConfigs are the topic configs the workload sets, each to one of two
// values (kvConfigValues), so that a set often asks for the value the
// config already has: a write that decides no records.
var kvConfigs = [...]string{fsm.RetentionMs, fsm.MaxMessageBytes}

var kvConfigValues = map[string][2]string{
	fsm.RetentionMs:     {"3600000", "7200000"},
	fsm.MaxMessageBytes: {"100000", "200000"},
}

// topicConfigs are a topic's own values of kvConfigs, by index; "" where
// the topic has none (the cluster's or the built-in default applies).
type topicConfigs [len(kvConfigs)]string

// topicOp is one admin operation on one topic name.
type topicOp struct {
	// Kind is "create", "delete", "alter" (IncrementalAlterConfigs),
	// "describe" (DescribeTopic) or "describe-configs" (DescribeConfigs);
	// reads are linearizable.
	Kind       string
	Topic      string
	Partitions int32 // create: the count asked for
	// alter: sets kvConfigs[Config] to Value, or deletes the topic's own
	// value when Value is "".
	Config int
	Value  string
}

// topicResult is its answer; a read's also what it saw.
type topicResult struct {
	Outcome    outcome
	Partitions int32        // describe
	Configs    topicConfigs // describe, describe-configs
}

// topicState is the model's state of one topic name: Partitions is 0 when
// there is no topic (and then Configs is empty).
type topicState struct {
	Partitions int32
	Configs    topicConfigs
}

// topicModel is the sequential specification of topic admin, the FSM's
// rules: per name, whether there is a topic, its partition count, and per
// config of kvConfigs a register. A create (which carries no configs)
// starts a topic with none of its own; a delete removes the topic with its
// configs; a config change needs the topic. Names are independent, so
// porcupine checks each on its own.
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
	Init: func() any { return topicState{} },
	Step: func(state, input, output any) (bool, any) {
		return stepTopic(state.(topicState), input.(topicOp), output.(topicResult))
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(topicOp), output.(topicResult)
		switch in.Kind {
		case "create":
			return fmt.Sprintf("create(%s, %d) -> %s", in.Topic, in.Partitions, out.Outcome)
		case "alter":
			return fmt.Sprintf("alter(%s, %s=%q) -> %s", in.Topic, kvConfigs[in.Config], in.Value, out.Outcome)
		case "describe":
			if out.Outcome == outOK {
				return fmt.Sprintf("describe(%s) -> %d partitions, %s", in.Topic, out.Partitions, out.Configs)
			}
		case "describe-configs":
			if out.Outcome == outOK {
				return fmt.Sprintf("describe-configs(%s) -> %s", in.Topic, out.Configs)
			}
		}
		return fmt.Sprintf("%s(%s) -> %s", in.Kind, in.Topic, out.Outcome)
	},
	DescribeState: func(state any) string {
		s := state.(topicState)
		if s.Partitions == 0 {
			return "absent"
		}
		return fmt.Sprintf("%d partitions, %s", s.Partitions, s.Configs)
	},
	DescribeOperationMetadata: func(info any) string { return info.(opMeta).Operator },
}

// String renders a topic's own configs as name=value, those it has.
func (c topicConfigs) String() string {
	var parts []string
	for i, v := range c {
		if v != "" {
			parts = append(parts, kvConfigs[i]+"="+v)
		}
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// stepTopic is topicModel's step: whether the answer out is possible for in
// from state, and the state after.
func stepTopic(state topicState, in topicOp, out topicResult) (bool, topicState) {
	exists := state.Partitions != 0
	// effect is what in does to state when it takes effect.
	effect := func() topicState {
		switch in.Kind {
		case "create":
			if !exists {
				return topicState{Partitions: in.Partitions}
			}
		case "delete":
			return topicState{}
		case "alter":
			if exists {
				next := state
				next.Configs[in.Config] = in.Value
				return next
			}
		}
		return state
	}
	switch out.Outcome {
	case outRefused:
		return true, state
	case outUnknown:
		// Linearized here, it took effect here; an operation that never
		// took effect is linearized after every other one.
		return true, effect()
	}
	switch in.Kind {
	case "create":
		switch out.Outcome {
		case outOK:
			return !exists, effect()
		case outExists:
			return exists, state
		}
	case "delete", "alter":
		switch out.Outcome {
		case outOK:
			return exists, effect()
		case outNotFound:
			return !exists, state
		}
	case "describe":
		switch out.Outcome {
		case outOK:
			return exists && out.Partitions == state.Partitions && out.Configs == state.Configs, state
		case outNotFound:
			return !exists, state
		}
	case "describe-configs":
		switch out.Outcome {
		case outOK:
			return exists && out.Configs == state.Configs, state
		case outNotFound:
			return !exists, state
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

// opMeta is what porcupine carries beside an operation: which controller
// answered, and where the operation is in the recorded history.
type opMeta struct {
	Operator string
	Index    int
}

// porcupineHistory converts ops. An operation with an unknown outcome never
// returns: it may take effect at any point after its call.
func porcupineHistory(ops []recordedOp) []porcupine.Operation {
	h := make([]porcupine.Operation, 0, len(ops))
	for i, op := range ops {
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
			Metadata: opMeta{Operator: op.Operator, Index: i},
		})
	}
	return h
}

// firstUnexplained names, for a history porcupine found not linearizable,
// the first answer no order explains: the operation whose return ends the
// shortest prefix of the history that is already not linearizable. A
// prefix up to time t holds the operations called by t; those that
// answered later are pending in it, free to take effect or not, as
// operations of unknown outcome are. (Such prefixes only get less
// linearizable as t grows, so the shortest is found by bisection.) Of the
// topic names whose history is not linearizable, it names the earliest.
func firstUnexplained(ops []recordedOp, timeout time.Duration) (recordedOp, bool) {
	byTopic := make(map[string][]recordedOp)
	for _, op := range ops {
		byTopic[op.Op.Topic] = append(byTopic[op.Op.Topic], op)
	}
	linearizable := func(h []recordedOp) bool {
		return porcupine.CheckOperationsTimeout(topicModel, porcupineHistory(h), timeout) != porcupine.Illegal
	}
	var first recordedOp
	found := false
	for _, name := range sortedKeys(byTopic) {
		h := byTopic[name]
		if linearizable(h) {
			continue
		}
		var answered []recordedOp // in the order they answered
		for _, op := range h {
			if op.Result.Outcome != outUnknown {
				answered = append(answered, op)
			}
		}
		slices.SortFunc(answered, func(a, b recordedOp) int { return cmp.Compare(a.Return, b.Return) })
		i := sort.Search(len(answered), func(i int) bool { return !linearizable(prefixAt(h, answered[i].Return)) })
		if i < len(answered) && (!found || answered[i].Return < first.Return) {
			first, found = answered[i], true
		}
	}
	return first, found
}

// withoutUnknown is ops without those of unknown outcome: the history if
// none of them took effect. Where firstUnexplained finds an answer in it
// and another in ops, an operation of unknown outcome explains the former
// away (it may or may not really have taken effect).
func withoutUnknown(ops []recordedOp) []recordedOp {
	var out []recordedOp
	for _, op := range ops {
		if op.Result.Outcome != outUnknown {
			out = append(out, op)
		}
	}
	return out
}

// prefixAt is the history h as it stood at time t: the operations called
// by then, those that had not answered yet pending (of unknown outcome).
func prefixAt(h []recordedOp, t time.Duration) []recordedOp {
	var out []recordedOp
	for _, op := range h {
		switch {
		case op.Call > t:
		case op.Return > t:
			op.Result = topicResult{Outcome: outUnknown}
			out = append(out, op)
		default:
			out = append(out, op)
		}
	}
	return out
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
// Gray faults: blips, short pauses, and kills of a healthy leader

// The rules gray faults are judged by (issue 26): no leader change for a
// blip of one of the leader's raft links or of its public address, nor for
// a pause shorter than the election timeout, nor for a blip of every link
// of the leader's shorter than leaderBlipNoChangeBelow, nor for a blip of a
// broker's links; no fence of a broker for a blip of its links shorter
// than brokerBlipNoFenceBelow; and a crash election on every kill -9 of the
// leader of a healthy quorum.
const (
	// leaderBlipNoChangeBelow: a blip of every link of the leader's shorter
	// than this must not change the leader. A crash election must confirm a
	// death over a window about this long before it acts (a reset or a
	// momentary refusal is not a death); raft's own timeouts are further
	// off (250 ms lease, 300 ms heartbeat timeout, heartbeats every 30-60
	// ms and 10-20 ms back-off after a failed one).
	leaderBlipNoChangeBelow = 100 * time.Millisecond
	// stallLimit: a fault during which the test process went unscheduled
	// this long, or longer, is not judged. Such a stall is the whole
	// machine's (eight suites share two cores; steal time), and added to a
	// blip it can use up the leader's lease as a longer blip would.
	stallLimit = 50 * time.Millisecond
	// crashElectionWithin: how long after a kill -9 of the leader of a
	// healthy quorum a crash election must have started. It should take
	// milliseconds plus the confirmation window; this is several times the
	// target failover (a median under 0.5 s), so that load cannot fail it.
	crashElectionWithin = 2 * time.Second
	// faultCrashGrace is the controllers' --crash-grace in the fault
	// suite: a broker whose stream's connection closed and that is not
	// seen again within it is fenced for a crash if its port refuses a
	// dial.
	faultCrashGrace = 500 * time.Millisecond
	// brokerBlipNoFenceBelow: a blip of a live broker's links to the
	// controllers shorter than this must not fence it. Shorter than the
	// crash grace, it is back (a stream or a heartbeat) before the grace
	// ends; if not, or if the blip is longer than the grace, the active
	// controller's dial at the end of the grace finds its port listening
	// (its process lives) and leaves it to its session (testSessionTimeout,
	// 2 s), which it keeps: it heartbeats every 200 ms, and again within
	// an interval of its links' return. Half a session leaves a second
	// for that.
	brokerBlipNoFenceBelow = testSessionTimeout / 2
)

// grayFault is one gray fault as the nemesis injected and watched it.
type grayFault struct {
	Kind   string        // a faultKinds name
	What   string        // which link or node, and how: for the report
	At     time.Duration // since the run began
	Len    time.Duration // how long it was held, as measured
	Leader int32         // the active controller it hit
	// Unhealthy says why the quorum was not healthy before the fault
	// (healthyQuorum); "" when it was.
	Unhealthy string
	// Stall is the longest the test process went unscheduled during the
	// fault and its watch.
	Stall time.Duration
	// EpochBefore is the controller epoch before the fault; EpochAfter the
	// highest any controller held by the end of its watch, led by
	// ActiveAfter.
	EpochBefore, EpochAfter int64
	ActiveAfter             int32
	// CrashBefore and CrashAfter count the crash elections the controllers
	// had logged before a kill and by the end of its watch.
	CrashBefore, CrashAfter int
	// Broker is the broker whose links a blip-broker cut (0 for the other
	// kinds). Fences counts its fences that the brokers replayed from the
	// fault's start to the end of its watch (the most any one broker
	// replayed); Listening the controllers' dials of its port, at the end
	// of the crash grace, that found it listening, or -1 if a controller's
	// metrics did not answer.
	Broker    int32
	Fences    int
	Listening int
}

// judged reports whether the rules apply to f, and if not, why not.
func (f grayFault) judged() (bool, string) {
	switch {
	case f.Unhealthy != "":
		return false, "the quorum was not healthy before it: " + f.Unhealthy
	case f.Stall >= stallLimit:
		return false, fmt.Sprintf("the machine stalled for %v during it", f.Stall.Round(time.Millisecond))
	}
	return true, ""
}

// leaderChanged reports whether the controller epoch moved.
func (f grayFault) leaderChanged() bool { return f.EpochAfter > f.EpochBefore }

// mustKeepLeader reports whether a correct cluster keeps its leader
// through f.
func (f grayFault) mustKeepLeader() bool {
	switch f.Kind {
	case "blip-link", "blip-public", "pause-leader-short", "blip-broker":
		return true
	case "blip-leader":
		return f.Len < leaderBlipNoChangeBelow
	}
	return false
}

func (f grayFault) String() string {
	return fmt.Sprintf("%s at %v (%s, held %v, node %d leading in epoch %d)",
		f.Kind, f.At.Round(time.Millisecond), f.What, f.Len.Round(time.Millisecond), f.Leader, f.EpochBefore)
}

// grayViolations judges each gray fault by the rules above.
func grayViolations(fs []grayFault) []string {
	var bad []string
	for _, f := range fs {
		if ok, _ := f.judged(); !ok {
			continue
		}
		switch {
		case f.mustKeepLeader() && f.leaderChanged():
			bad = append(bad, fmt.Sprintf("%s: the leader changed: the controller epoch went from %d to %d (node %d active)",
				f, f.EpochBefore, f.EpochAfter, f.ActiveAfter))
		case f.Kind == "kill-leader" && f.CrashAfter <= f.CrashBefore:
			bad = append(bad, fmt.Sprintf("%s: no crash election within %v of kill -9 of the leader of a healthy quorum (epoch %d, node %d active, by then)",
				f, crashElectionWithin, f.EpochAfter, f.ActiveAfter))
		}
		if f.Kind == "blip-broker" && f.Len < brokerBlipNoFenceBelow && f.Fences > 0 {
			why := fmt.Sprintf("shorter than the crash grace (%v)", faultCrashGrace)
			if f.Len >= faultCrashGrace {
				why = fmt.Sprintf("longer than the crash grace (%v), its process listening, within its session (%v)", faultCrashGrace, testSessionTimeout)
			}
			bad = append(bad, fmt.Sprintf("%s: broker %d was fenced (%d fences replayed) by a blip of its links %s", f, f.Broker, f.Fences, why))
		}
	}
	return bad
}

// blipBucket is the length class a gray fault of kind is reported in: for
// a broker's blip, shorter or longer than the crash grace.
func blipBucket(kind string, d time.Duration) string {
	switch {
	case kind == "blip-broker" && d < faultCrashGrace:
		return fmt.Sprintf("<%v", faultCrashGrace)
	case kind == "blip-broker":
		return fmt.Sprintf(">=%v", faultCrashGrace)
	case d < leaderBlipNoChangeBelow:
		return fmt.Sprintf("<%v", leaderBlipNoChangeBelow)
	case d < 300*time.Millisecond:
		return fmt.Sprintf("%v-300ms", leaderBlipNoChangeBelow)
	}
	return ">=300ms"
}

// summarizeGray counts gray faults for the report: per kind and length,
// how many, how many judged, and the leader changes they were followed
// by; per kill of a leader, the crash elections it got; per blip of a
// broker's links, the blips that fenced it and those whose broker a
// controller's dial found listening at the end of the crash grace.
func summarizeGray(fs []grayFault) string {
	type count struct{ n, judged, changed, crash, crashElections, fenced, listened int }
	counts := make(map[string]*count)
	for _, f := range fs {
		key := f.Kind
		if f.Kind != "kill-leader" {
			key += " " + blipBucket(f.Kind, f.Len)
		}
		c := counts[key]
		if c == nil {
			c = &count{}
			counts[key] = c
		}
		c.n++
		if ok, _ := f.judged(); ok {
			c.judged++
		}
		if f.leaderChanged() {
			c.changed++
		}
		if f.CrashAfter > f.CrashBefore {
			c.crash++
			c.crashElections += f.CrashAfter - f.CrashBefore
		}
		if f.Fences > 0 {
			c.fenced++
		}
		if f.Listening > 0 {
			c.listened++
		}
	}
	var lines []string
	for _, k := range sortedKeys(counts) {
		c := counts[k]
		switch {
		case strings.HasPrefix(k, "kill-leader"):
			lines = append(lines, fmt.Sprintf("  %s: %d (%d judged), %d with a crash election (%d started)", k, c.n, c.judged, c.crash, c.crashElections))
		case strings.HasPrefix(k, "blip-broker"):
			lines = append(lines, fmt.Sprintf("  %s: %d (%d judged), %d followed by a leader change, %d fenced the broker, %d found it listening at the end of the grace",
				k, c.n, c.judged, c.changed, c.fenced, c.listened))
		default:
			lines = append(lines, fmt.Sprintf("  %s: %d (%d judged), %d followed by a leader change", k, c.n, c.judged, c.changed))
		}
	}
	return strings.Join(lines, "\n")
}

// healthyQuorum reports the active controller and its epoch if the quorum
// of ids is healthy: every node answers and is ready, exactly one is
// active and every one agrees on it and its epoch, all are in one raft
// term, and the active one has heard from each within healthyContact.
// Otherwise it says why not.
func healthyQuorum(ids []int32, views map[int32]*keelpb.DescribeQuorumResponse) (int32, int64, string) {
	for _, id := range ids {
		v, ok := views[id]
		switch {
		case !ok:
			return 0, 0, fmt.Sprintf("node %d does not answer", id)
		case !v.GetReady():
			return 0, 0, fmt.Sprintf("node %d is not ready: %s", id, v.GetNotReadyReason())
		}
	}
	leader, epoch, ok := activeAgreed(ids, views)
	if !ok {
		return 0, 0, "no active controller that every node agrees on"
	}
	term := views[leader].GetRaftTerm()
	for _, id := range ids {
		if t := views[id].GetRaftTerm(); t != term {
			return 0, 0, fmt.Sprintf("node %d is in raft term %d, the leader in %d", id, t, term)
		}
	}
	heard := make(map[int32]int64)
	for _, r := range views[leader].GetReplication() {
		heard[r.GetId()] = r.GetLastContactMs()
	}
	for _, id := range ids {
		switch ms, ok := heard[id]; {
		case !ok || ms < 0:
			return 0, 0, fmt.Sprintf("the leader, node %d, has not heard from node %d in this term", leader, id)
		case time.Duration(ms)*time.Millisecond > healthyContact:
			return 0, 0, fmt.Sprintf("the leader, node %d, last heard from node %d %dms ago", leader, id, ms)
		}
	}
	return leader, epoch, ""
}

// healthyContact: how recently the leader must have heard from every voter
// for the quorum to count as healthy: a few heartbeats (every 30-60 ms).
const healthyContact = 200 * time.Millisecond

// healthyBrokers reports why brokers are not healthy for a blip of one's
// links, or "" if they are: every controller of ctrls answers (lists, by
// controller) and lists each of them active at one epoch, and each (views,
// its own Inspect) is active and was last pushed metadata by the active
// controller leader in its epoch, so that its stream is there for a blip
// to end.
func healthyBrokers(ctrls, brokers []int32, lists map[int32]map[int32]*keelpb.BrokerInfo, views map[int32]*keelpb.InspectResponse, leader int32, epoch int64) string {
	for _, ctrl := range ctrls {
		if _, ok := lists[ctrl]; !ok {
			return fmt.Sprintf("node %d does not list the brokers", ctrl)
		}
	}
	for _, id := range brokers {
		var first *keelpb.BrokerInfo
		for _, ctrl := range ctrls {
			b, ok := lists[ctrl][id]
			switch {
			case !ok:
				return fmt.Sprintf("node %d does not list broker %d", ctrl, id)
			case b.GetState() != stateActive:
				return fmt.Sprintf("node %d lists broker %d %s", ctrl, id, b.GetState())
			case first != nil && b.GetEpoch() != first.GetEpoch():
				return fmt.Sprintf("the controllers list broker %d at epochs %d and %d", id, first.GetEpoch(), b.GetEpoch())
			}
			first = b
		}
		v, ok := views[id]
		switch {
		case !ok:
			return fmt.Sprintf("broker %d does not answer", id)
		case v.GetState() != stateActive:
			return fmt.Sprintf("broker %d is %s", id, v.GetState())
		case v.GetControllerId() != leader || v.GetControllerEpoch() != epoch:
			return fmt.Sprintf("broker %d follows node %d in epoch %d, not node %d in epoch %d",
				id, v.GetControllerId(), v.GetControllerEpoch(), leader, epoch)
		}
	}
	return ""
}

// ---------------------------------------------------------------------------

// summarize keeps a report readable: the first n lines, and how many more.
func summarize(lines []string, n int) string {
	if len(lines) <= n {
		return strings.Join(lines, "\n")
	}
	return strings.Join(lines[:n], "\n") + fmt.Sprintf("\n... and %d more", len(lines)-n)
}
