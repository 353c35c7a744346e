package controller

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// The topic manager: pure functions from the committed image and a request
// to records (Kafka's ReplicationControlManager.createTopics and friends).

// validateTopicName applies Kafka's rules: fsm.CheckTopicName, and no collision
// with an existing topic when '.' and '_' are taken as equal (they map to
// the same metric names in Kafka).
func validateTopicName(img *fsm.Image, name string) error {
	if err := fsm.CheckTopicName(name); err != nil {
		return fieldError("name", "%v", err)
	}
	if _, ok := img.Topic(name); ok {
		return fmt.Errorf("%w: %q", ErrTopicExists, name)
	}
	norm := strings.ReplaceAll(name, ".", "_")
	for _, t := range img.Topics() {
		if strings.ReplaceAll(t.Name, ".", "_") == norm {
			return fieldError("name", "%q collides with existing topic %q ('.' and '_' are equal in topic names)", name, t.Name)
		}
	}
	return nil
}

// validateConfigs checks a new topic's configs by fsm.CheckTopicConfig and
// returns them in canonical form (nil for none).
func validateConfigs(configs map[string]string) (map[string]string, error) {
	if len(configs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(configs))
	for _, k := range slices.Sorted(maps.Keys(configs)) {
		v, err := fsm.CheckTopicConfig(k, configs[k])
		if err != nil {
			return nil, fieldError("configs", "%v", err)
		}
		out[k] = v
	}
	return out, nil
}

// placementBrokers are the brokers new replicas may go to: every registered
// broker not shutting down. placeReplicas prefers the active ones.
func placementBrokers(img *fsm.Image) []*fsm.Broker {
	return slices.DeleteFunc(img.Brokers(), func(b *fsm.Broker) bool { return b.ShuttingDown })
}

// rackOrder interleaves brokers across racks (rack by rack, id order within
// a rack) so that consecutive brokers sit in different racks.
func rackOrder(brokers []*fsm.Broker) []*fsm.Broker {
	byRack := map[string][]*fsm.Broker{}
	for _, b := range brokers {
		byRack[b.Rack] = append(byRack[b.Rack], b)
	}
	racks := slices.Sorted(maps.Keys(byRack))
	var out []*fsm.Broker
	for i := 0; len(out) < len(brokers); i++ {
		for _, r := range racks {
			if i < len(byRack[r]) {
				out = append(out, byRack[r][i])
			}
		}
	}
	return out
}

// placementTier is a set of brokers placement takes replicas from, in rack
// order, with each broker's rack as a small number (so that checking "rack
// already used" is a scan of at most rf ints rather than a map per
// partition).
type placementTier struct {
	ids     []int32
	rackNo  []int
	oneRack bool
}

// newTier orders brokers by rack, numbering racks in racks (shared between
// tiers, so that a rack used by one tier counts as used for the other).
func newTier(brokers []*fsm.Broker, racks map[string]int) placementTier {
	order := rackOrder(brokers)
	t := placementTier{ids: make([]int32, len(order)), rackNo: make([]int, len(order)), oneRack: true}
	for i, b := range order {
		if _, ok := racks[b.Rack]; !ok {
			racks[b.Rack] = len(racks)
		}
		t.ids[i], t.rackNo[i] = b.ID, racks[b.Rack]
		if t.rackNo[i] != t.rackNo[0] {
			t.oneRack = false
		}
	}
	return t
}

// take appends to the partition being placed (out[from:]) up to want more
// of the tier's brokers not in it yet, going round from index at, brokers
// in racks not used yet first; used holds the racks the partition uses.
func (t placementTier) take(out []int32, from int, used []int, at, want int) ([]int32, []int) {
	n := len(t.ids)
	end := len(out) + want
	// Pass 0 takes brokers in racks not used yet; with a single rack it
	// would take the same brokers as pass 1, in the same order, after
	// scanning every broker: skip it.
	firstPass := 0
	if t.oneRack {
		firstPass = 1
	}
	for pass := firstPass; pass < 2 && len(out) < end; pass++ {
		for j := 0; j < n && len(out) < end; j++ {
			i := (at + j) % n
			if slices.Contains(out[from:], t.ids[i]) || (pass == 0 && slices.Contains(used, t.rackNo[i])) {
				continue
			}
			out = append(out, t.ids[i])
			used = append(used, t.rackNo[i])
		}
	}
	return out, used
}

// PlaceReplicas is placement as topic creation decides it (placeReplicas),
// for tools that propose assignments rather than write them, such as
// `keel partition reassign --generate`: rf replicas for each of count
// partitions numbered from first, over brokers (at least one, none
// shutting down), preferred leaders round-robin from start. With fewer
// brokers than rf a partition gets them all.
func PlaceReplicas(brokers []*fsm.Broker, first, count, rf int32, start int) [][]int32 {
	return placeReplicas(brokers, first, count, rf, start)
}

// placeReplicas assigns rf replicas to each of count partitions, starting at
// partition number first, KRaft's way (the StripedReplicaPlacer's rules):
// active brokers first, fenced ones only when there are fewer active
// brokers than rf, and never as the first replica, the preferred leader.
// Preferred leaders go round-robin over the rack-ordered active brokers
// from start, so leadership is spread evenly; followers are taken from a
// shifting offset, racks not yet used first. A fenced broker holds no data
// yet and is in no ISR, so a replica there adds no safety until it
// returns: it only makes up the count.
func placeReplicas(brokers []*fsm.Broker, first, count, rf int32, start int) [][]int32 {
	var active, fenced []*fsm.Broker
	for _, b := range brokers {
		if b.Eligible() {
			active = append(active, b)
		} else {
			fenced = append(fenced, b)
		}
	}
	if len(active) == 0 { // the callers refuse this; place anyway
		active, fenced = fenced, nil
	}
	racks := map[string]int{}
	lead, rest := newTier(active, racks), newTier(fenced, racks)
	n := len(lead.ids)
	width := int(min(rf, int32(len(brokers))))
	backing := make([]int32, 0, int(count)*width) // one allocation for every assignment
	used := make([]int, 0, width)
	out := make([][]int32, count)
	for i := range count {
		k := start + int(first+i)
		at := k % n
		shift := 1
		if n > 1 {
			shift = 1 + (k/n)%(n-1)
		}
		from := len(backing)
		backing = append(backing, lead.ids[at])
		used = append(used[:0], lead.rackNo[at])
		backing, used = lead.take(backing, from, used, at+shift, width-1)
		if short := width - (len(backing) - from); short > 0 && len(rest.ids) > 0 {
			backing, used = rest.take(backing, from, used, k%len(rest.ids), short)
		}
		out[i] = backing[from:len(backing):len(backing)]
	}
	return out
}

// checkAssignments validates explicit replica assignments.
func checkAssignments(img *fsm.Image, assignments [][]int32) error {
	for i, a := range assignments {
		if len(a) == 0 {
			return fieldError("assignments", "partition %d has no replicas", i)
		}
		if len(a) != len(assignments[0]) {
			return fieldError("assignments", "partition %d has %d replicas, partition 0 has %d: the replication factor must be equal", i, len(a), len(assignments[0]))
		}
		for j, id := range a {
			if slices.Contains(a[:j], id) {
				return fieldError("assignments", "partition %d names broker %d twice", i, id)
			}
			if _, ok := img.Broker(id); !ok {
				return fieldError("assignments", "partition %d: broker %d is not registered", i, id)
			}
		}
	}
	return nil
}

// newPartitionRecords builds PartitionRecords for assignments, numbered from
// first: leader and ISR only from eligible brokers, in assignment order.
func newPartitionRecords(img *fsm.Image, id fsm.TopicID, first int32, assignments [][]int32) ([]*keelpb.Record, error) {
	v := newView(img)
	recs := make([]*keelpb.Record, 0, len(assignments))
	topicID := bytes.Clone(id[:]) // shared: records are only read once built
	// The records are made in three allocations rather than three per
	// partition: they live and die together, with the decision.
	var (
		outer = make([]keelpb.Record, len(assignments))
		oneof = make([]keelpb.Record_Partition, len(assignments))
		inner = make([]keelpb.PartitionRecord, len(assignments))
	)
	for i, replicas := range assignments {
		isr := replicas // the common case, every replica eligible, allocates nothing
		if slices.ContainsFunc(replicas, func(b int32) bool { return !v.eligible(b) }) {
			isr = slices.DeleteFunc(slices.Clone(replicas), func(b int32) bool { return !v.eligible(b) })
		}
		if len(isr) == 0 {
			return nil, fieldError("assignments", "partition %d: none of brokers %v is active, so it could have no leader", first+int32(i), replicas)
		}
		p := &inner[i]
		p.TopicId, p.Partition, p.Replicas, p.Isr, p.Leader = topicID, first+int32(i), replicas, isr, isr[0]
		oneof[i].Partition = p
		outer[i].Record = &oneof[i]
		recs = append(recs, &outer[i])
	}
	return recs, nil
}

// createTopicRecords decides a CreateTopic request. id is the new topic's id
// and start the placement's starting offset (random, chosen by the caller:
// the decision is recorded, so the randomness does not reach the FSM).
func createTopicRecords(img *fsm.Image, req *keelpb.CreateTopicRequest, id fsm.TopicID, start int) ([]*keelpb.Record, error) {
	if err := validateTopicName(img, req.Name); err != nil {
		return nil, err
	}
	if err := checkInternal(req.Name, req.Internal); err != nil {
		return nil, err
	}
	reqConfigs := req.Configs
	if req.Internal {
		// The internal topic's configs are the controller's, whatever the
		// broker that asked for it sends.
		reqConfigs = fsm.InternalTopicConfigs(img.FinalizedMetadataVersion(), req.ReplicationFactor)
	}
	configs, err := validateConfigs(reqConfigs)
	if err != nil {
		return nil, err
	}
	assignments, err := resolveAssignments(img, req.Assignments, 0, req.Partitions, req.ReplicationFactor, start)
	if err != nil {
		return nil, err
	}
	parts, err := newPartitionRecords(img, id, 0, assignments)
	if err != nil {
		return nil, err
	}
	topic := &keelpb.Record{Record: &keelpb.Record_Topic{Topic: &keelpb.TopicRecord{Name: req.Name, TopicId: bytes.Clone(id[:]), Configs: configs}}}
	return append([]*keelpb.Record{topic}, parts...), nil
}

// checkInternal refuses a user's create of an internal topic, and a
// broker's internal request for any other: an internal topic is created
// by the brokers, when they first need it, with the controller's configs.
func checkInternal(name string, internal bool) error {
	switch {
	case fsm.IsInternalTopic(name) && !internal:
		return fieldError("name", "%q is an internal topic: the brokers create it when a client first needs it", name)
	case internal && !fsm.IsInternalTopic(name):
		return fieldError("name", "%q is no internal topic", name)
	}
	return nil
}

// refuseInternal refuses deleting an internal topic or adding partitions
// to it: the groups it holds are found by their partition's number
// (group.PartitionFor), which a new count would change.
func refuseInternal(field, name, what string) error {
	if fsm.IsInternalTopic(name) {
		return fieldError(field, "%q is an internal topic: it cannot %s", name, what)
	}
	return nil
}

// resolveAssignments returns explicit assignments after checking them, or
// places count partitions (numbered from first) with rf replicas.
func resolveAssignments(img *fsm.Image, explicit []*keelpb.PartitionAssignment, first, count, rf int32, start int) ([][]int32, error) {
	if len(explicit) > 0 {
		if count != 0 && int(count) != len(explicit) {
			return nil, fieldError("partitions", "%d, but %d assignments are given", count, len(explicit))
		}
		out := make([][]int32, len(explicit))
		for i, a := range explicit {
			out[i] = slices.Clone(a.GetReplicas())
		}
		return out, checkAssignments(img, out)
	}
	if count < 1 {
		return nil, fieldError("partitions", "%d; at least 1", count)
	}
	if rf < 1 {
		return nil, fieldError("replication_factor", "%d; at least 1", rf)
	}
	brokers := placementBrokers(img)
	if int(rf) > len(brokers) {
		return nil, fieldError("replication_factor", "%d exceeds the %d registered brokers not shutting down", rf, len(brokers))
	}
	if !slices.ContainsFunc(brokers, (*fsm.Broker).Eligible) {
		return nil, fieldError("replication_factor", "no broker is active (all %d are fenced), so no partition could have a leader", len(brokers))
	}
	return placeReplicas(brokers, first, count, rf, start), nil
}

// createPartitionsRecords decides adding partitions to a topic, up to count.
func createPartitionsRecords(img *fsm.Image, req *keelpb.CreatePartitionsRequest, start int) ([]*keelpb.Record, error) {
	t, ok := img.Topic(req.Topic)
	if !ok {
		return nil, fmt.Errorf("%w: topic %q", ErrUnknownTopic, req.Topic)
	}
	if err := refuseInternal("topic", t.Name, "have partitions added"); err != nil {
		return nil, err
	}
	// An explicit assignment names the new partitions only, so it starts at
	// the current count; one that starts lower reads as a count too small.
	if n := int32(len(req.Assignments)); n > 0 && req.Count-n != t.Partitions {
		return nil, fieldError("assignments", "the new partitions start at %d, topic %q's current partition count, not at %d: give only the new ones (%d:...;...)",
			t.Partitions, t.Name, req.Count-n, t.Partitions)
	}
	if req.Count <= t.Partitions {
		return nil, fieldError("count", "%d; topic %q already has %d partitions", req.Count, t.Name, t.Partitions)
	}
	// The replication factor is partition 0's, as the topic will have it:
	// during a reassignment its replicas also hold the ones being removed.
	p0 := img.Partitions(t.ID)[0]
	rf := int32(len(p0.Replicas) - len(p0.RemovingReplicas))
	add := req.Count - t.Partitions
	if len(req.Assignments) > 0 && int32(len(req.Assignments)) != add {
		return nil, fieldError("assignments", "%d given for %d new partitions", len(req.Assignments), add)
	}
	assignments, err := resolveAssignments(img, req.Assignments, t.Partitions, add, rf, start)
	if err != nil {
		return nil, err
	}
	if len(assignments[0]) != int(rf) {
		return nil, fieldError("assignments", "%d replicas; the topic's replication factor is %d", len(assignments[0]), rf)
	}
	return newPartitionRecords(img, t.ID, t.Partitions, assignments)
}

// deleteTopicRecords decides deleting a topic.
func deleteTopicRecords(img *fsm.Image, name string) ([]*keelpb.Record, error) {
	t, ok := img.Topic(name)
	if !ok {
		return nil, fmt.Errorf("%w: topic %q", ErrUnknownTopic, name)
	}
	if err := refuseInternal("name", name, "be deleted"); err != nil {
		return nil, err
	}
	return []*keelpb.Record{{Record: &keelpb.Record_RemoveTopic{RemoveTopic: &keelpb.RemoveTopicRecord{TopicId: bytes.Clone(t.ID[:])}}}}, nil
}

// partitionOf finds a partition by topic name.
func partitionOf(img *fsm.Image, topic string, partition int32) (*fsm.Topic, *fsm.Partition, error) {
	t, ok := img.Topic(topic)
	if !ok {
		return nil, nil, fmt.Errorf("%w: topic %q", ErrUnknownTopic, topic)
	}
	p, ok := img.Partition(t.ID, partition)
	if !ok {
		return nil, nil, fmt.Errorf("%w: %s/%d", ErrUnknownTopic, topic, partition)
	}
	return t, p, nil
}
