package controller

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// TestDecisions_EveryBatchApplies is the property behind "no decision
// proposes a batch the FSM refuses": on random clusters, random operations
// (brokers registering, fenced, unfenced, shutting down, unregistered;
// topics created, grown, deleted; reassignments started, replaced and
// cancelled; preferred, unclean and leaderless elections; rebalances; ISR
// changes, recovery confirmed or not; min.insync.replicas and unclean
// election altered on topics and the cluster defaults) are decided on the image, and every batch a decision returns is
// applied with the FSM's own Apply, cut into raft entries as the event loop
// cuts them (with a small entry size, so that cuts happen), each entry on
// its own. No decision but a cancel removes a replica from a partition
// unless every replica it keeps is in the ISR. Odd seeds run at
// fsm.EmptyISRMetadataVersion, where a broker registering after an unclean
// shutdown empties the ISRs it was the last member of; even seeds at level
// 1, where it keeps its place. Each seed is deterministic; a failure names it, and
// KEEL_PROPERTY_SEED=N runs that seed alone.
func TestDecisions_EveryBatchApplies(t *testing.T) {
	seeds, steps := uint64(400), 80
	if testing.Short() {
		seeds = 50
	}
	first := uint64(1)
	if s := os.Getenv("KEEL_PROPERTY_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("KEEL_PROPERTY_SEED=%q: %v", s, err)
		}
		first, seeds = n, 1
	}
	start := time.Now()
	var seen propertySeen
	for seed := first; seed < first+seeds; seed++ {
		if !runDecisionProperty(t, seed, steps, &seen) {
			return
		}
	}
	t.Logf("%d seeds × %d operations in %v; %d steps left a partition with eligible leader replicas, %d one recovering, %d one with an empty ISR",
		seeds, steps, time.Since(start).Round(time.Millisecond), seen.elr, seen.recovering, seen.emptyISR)
	// The ELR, recovery and empty ISR rules are exercised, not only allowed.
	if seeds > 1 && (seen.elr == 0 || seen.recovering == 0 || seen.emptyISR == 0) {
		t.Errorf("no step reached an ELR (%d), a recovering partition (%d) or an empty ISR (%d): the property does not cover them",
			seen.elr, seen.recovering, seen.emptyISR)
	}
}

// propertyRun is one seed's cluster.
type propertyRun struct {
	t     *testing.T
	seed  uint64
	rng   *rand.Rand
	img   *fsm.Image
	level uint32 // the cluster's metadata.version
	incs  int    // incarnations handed out
	ids   int    // topic ids handed out
	steps []string
	seen  *propertySeen
}

// propertySeen counts the steps that left the states a property must reach.
type propertySeen struct{ elr, recovering, emptyISR int }

const (
	propertyBrokers = 7 // broker ids 1..7; 8 and 9 are never registered
	propertyTopics  = 5 // topic names t0..t4
	propertyEntry   = 256
)

func runDecisionProperty(t *testing.T, seed uint64, steps int, seen *propertySeen) bool {
	r := &propertyRun{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x6b65656c)), img: fsm.Empty(), seen: seen, level: 1}
	if !r.apply("start", clusterStart()) {
		return false
	}
	if seed%2 == 1 {
		r.level = fsm.EmptyISRMetadataVersion
		if !r.apply("raise the level", []*keelpb.Record{levelRecord(r.level)}) {
			return false
		}
	}
	for id := int32(1); id <= int32(2+r.rng.IntN(propertyBrokers-1)); id++ {
		recs, err := r.register(id)
		if !r.decide("register", recs, err) {
			return false
		}
		if r.rng.IntN(5) > 0 {
			recs, err := r.heartbeat(id, false, false)
			if !r.decide("unfence", recs, err) {
				return false
			}
		}
	}
	ops := []struct {
		name   string
		weight int
		do     func() ([]*keelpb.Record, error)
	}{
		{"register", 2, func() ([]*keelpb.Record, error) { return r.register(r.brokerID()) }},
		{"unfence", 4, func() ([]*keelpb.Record, error) { return r.heartbeat(r.brokerID(), false, false) }},
		{"fence by heartbeat", 2, func() ([]*keelpb.Record, error) { return r.heartbeat(r.brokerID(), true, false) }},
		{"shut down", 2, func() ([]*keelpb.Record, error) { return r.heartbeat(r.brokerID(), false, true) }},
		{"fence expired", 3, r.fenceExpired},
		{"end a controlled shutdown", 2, r.shutdownDone},
		{"unregister", 1, r.unregister},
		{"create topic", 4, r.createTopic},
		{"add partitions", 2, r.addPartitions},
		{"delete topic", 1, r.deleteTopic},
		{"reassign", 6, r.reassign},
		{"cancel reassignment", 3, r.cancel},
		{"preferred election", 2, func() ([]*keelpb.Record, error) { return r.electAll(keelpb.ElectionType_ELECTION_TYPE_PREFERRED) }},
		{"unclean election", 1, func() ([]*keelpb.Record, error) { return r.electAll(keelpb.ElectionType_ELECTION_TYPE_UNCLEAN) }},
		{"leaderless elections", 1, func() ([]*keelpb.Record, error) { return leaderlessChanges(r.img), nil }},
		{"rebalance", 1, r.rebalance},
		{"alter ISR", 8, r.alterISR},
		{"alter topic configs", 2, r.alterTopicConfigs},
		{"alter cluster defaults", 1, r.alterClusterDefaults},
	}
	total := 0
	for _, op := range ops {
		total += op.weight
	}
	for range steps {
		n := r.rng.IntN(total)
		for _, op := range ops {
			if n -= op.weight; n < 0 {
				before := replicaSets(r.img)
				recs, err := op.do()
				if !r.decide(op.name, recs, err) {
					return false
				}
				if err == nil && op.name != "cancel reassignment" && !r.reassignmentsSafe(op.name, before) {
					return false
				}
				if err == nil && !r.eligibleSound(op.name) {
					return false
				}
				break
			}
		}
	}
	return true
}

// decide applies the records of a decision that succeeded, and notes a
// refusal.
func (r *propertyRun) decide(what string, recs []*keelpb.Record, err error) bool {
	if err != nil {
		r.steps = append(r.steps, what+": refused: "+err.Error())
		return true
	}
	return r.apply(what, recs)
}

// apply replays recs as the event loop would write them: cut into entries,
// each applied at the next index.
func (r *propertyRun) apply(what string, recs []*keelpb.Record) bool {
	r.t.Helper()
	if len(recs) == 0 {
		r.steps = append(r.steps, what+": nothing to do")
		return true
	}
	for i, part := range splitRecords(recs, propertyEntry) {
		next, err := fsm.Apply(r.img, r.img.Offset+1, 1, &keelpb.RecordBatch{Records: part})
		if err != nil {
			r.t.Errorf("seed %d (rerun with KEEL_PROPERTY_SEED=%d), step %d (%s): entry %d of the decision is refused by the FSM: %v\nrecords: %v\nsteps before:\n  %s",
				r.seed, r.seed, len(r.steps), what, i, err, part, joinSteps(r.steps))
			return false
		}
		r.img = next
	}
	r.steps = append(r.steps, fmt.Sprintf("%s: %d records", what, len(recs)))
	return true
}

func joinSteps(steps []string) string {
	if len(steps) > 30 {
		steps = steps[len(steps)-30:]
	}
	out := ""
	for i, s := range steps {
		if i > 0 {
			out += "\n  "
		}
		out += s
	}
	return out
}

type partKey struct {
	topic fsm.TopicID
	p     int32
}

// replicaSets is every partition's replicas.
func replicaSets(img *fsm.Image) map[partKey][]int32 {
	out := map[partKey][]int32{}
	img.EachPartition(func(p *fsm.Partition) bool {
		out[partKey{p.TopicID, p.Partition}] = p.Replicas
		return true
	})
	return out
}

// reassignmentsSafe checks that no partition lost a replica in the last
// step (a reassignment completing) unless every replica it kept is in its
// ISR.
func (r *propertyRun) reassignmentsSafe(what string, before map[partKey][]int32) bool {
	ok := true
	r.img.EachPartition(func(p *fsm.Partition) bool {
		was, found := before[partKey{p.TopicID, p.Partition}]
		if found && !subsetOf(was, p.Replicas) && !subsetOf(p.Replicas, p.ISR) {
			r.t.Errorf("seed %d (rerun with KEEL_PROPERTY_SEED=%d), step %d (%s): %s/%d went from replicas %v to %v with ISR %v: a replica left before the ones kept were in sync\nsteps before:\n  %s",
				r.seed, r.seed, len(r.steps), what, p.TopicID, p.Partition, was, p.Replicas, p.ISR, joinSteps(r.steps))
			ok = false
		}
		return ok
	})
	return ok
}

func subsetOf(a, b []int32) bool {
	return !slices.ContainsFunc(a, func(x int32) bool { return !slices.Contains(b, x) })
}

// eligibleSound checks every partition's eligible leader replicas and
// recovery state after a step: the ELR holds replicas only, none of them in
// the ISR (KIP-966), and a partition recovering from an unclean election
// has an ISR of at most its one replica (KIP-704).
func (r *propertyRun) eligibleSound(what string) bool {
	ok := true
	var elrs, recovering, emptyISR bool
	defer func() {
		if elrs {
			r.seen.elr++
		}
		if recovering {
			r.seen.recovering++
		}
		if emptyISR {
			r.seen.emptyISR++
		}
	}()
	r.img.EachPartition(func(p *fsm.Partition) bool {
		elr := p.ELR()
		elrs = elrs || len(elr) > 0
		recovering = recovering || p.Recovering()
		emptyISR = emptyISR || len(p.ISR) == 0
		switch {
		case len(p.ISR) == 0 && r.level < fsm.EmptyISRMetadataVersion:
			r.t.Errorf("seed %d, step %d (%s): %s/%d has an empty ISR at metadata.version %d", r.seed, len(r.steps), what, p.TopicID, p.Partition, r.level)
			ok = false
		case !subsetOf(elr, p.Replicas):
			r.t.Errorf("seed %d, step %d (%s): %s/%d has ELR %v outside its replicas %v", r.seed, len(r.steps), what, p.TopicID, p.Partition, elr, p.Replicas)
			ok = false
		case slices.ContainsFunc(elr, p.InISR):
			r.t.Errorf("seed %d, step %d (%s): %s/%d has ELR %v overlapping its ISR %v", r.seed, len(r.steps), what, p.TopicID, p.Partition, elr, p.ISR)
			ok = false
		case p.Recovering() && len(p.ISR) > 1:
			r.t.Errorf("seed %d, step %d (%s): %s/%d is recovering with ISR %v", r.seed, len(r.steps), what, p.TopicID, p.Partition, p.ISR)
			ok = false
		}
		if !ok {
			r.t.Logf("rerun with KEEL_PROPERTY_SEED=%d; steps before:\n  %s", r.seed, joinSteps(r.steps))
		}
		return ok
	})
	return ok
}

// configChange is a random IncrementalAlterConfigs of the two configs
// partition decisions follow: min.insync.replicas (sometimes above the
// replication factor) and unclean.leader.election.enable, set or deleted.
func (r *propertyRun) configChange(resource *keelpb.ConfigResource) *keelpb.IncrementalAlterConfigsRequest {
	req := &keelpb.IncrementalAlterConfigsRequest{Resource: resource}
	if r.rng.IntN(4) > 0 {
		op := &keelpb.AlterableConfig{Name: fsm.MinInsyncReplicas, Op: keelpb.AlterConfigOp_ALTER_CONFIG_OP_SET, Value: strconv.Itoa(1 + r.rng.IntN(4))}
		if r.rng.IntN(4) == 0 {
			op.Op, op.Value = keelpb.AlterConfigOp_ALTER_CONFIG_OP_DELETE, ""
		}
		req.Configs = append(req.Configs, op)
	}
	if r.rng.IntN(2) == 0 {
		op := &keelpb.AlterableConfig{Name: fsm.UncleanLeaderElection, Op: keelpb.AlterConfigOp_ALTER_CONFIG_OP_SET, Value: strconv.FormatBool(r.rng.IntN(2) == 0)}
		if r.rng.IntN(4) == 0 {
			op.Op, op.Value = keelpb.AlterConfigOp_ALTER_CONFIG_OP_DELETE, ""
		}
		req.Configs = append(req.Configs, op)
	}
	return req
}

func (r *propertyRun) alterTopicConfigs() ([]*keelpb.Record, error) {
	t, ok := r.topic()
	if !ok {
		return nil, nil
	}
	recs, _, _, err := alterConfigsRecords(r.img, r.configChange(&keelpb.ConfigResource{Type: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC, Name: t.Name}))
	return recs, err
}

func (r *propertyRun) alterClusterDefaults() ([]*keelpb.Record, error) {
	recs, _, _, err := alterConfigsRecords(r.img, r.configChange(&keelpb.ConfigResource{Type: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER}))
	return recs, err
}

// brokerID is a broker id, usually of a registered broker.
func (r *propertyRun) brokerID() int32 {
	if bs := r.img.Brokers(); len(bs) > 0 && r.rng.IntN(8) > 0 {
		return bs[r.rng.IntN(len(bs))].ID
	}
	return int32(1 + r.rng.IntN(propertyBrokers+2))
}

func (r *propertyRun) register(id int32) ([]*keelpb.Record, error) {
	inc := fmt.Sprintf("00000000-0000-0000-0000-%012d", r.incs)
	if b, ok := r.img.Broker(id); ok && r.rng.IntN(4) == 0 {
		inc = b.IncarnationID // a retried registration
	} else {
		r.incs++
	}
	// Half the time the old incarnation's session is still running.
	live := r.rng.IntN(2) == 0
	holding := func(*fsm.Broker) time.Duration {
		if live {
			return time.Second
		}
		return 0
	}
	req := &keelpb.RegisterBrokerRequest{
		BrokerId: id, IncarnationId: inc, Address: "127.0.0.1:9200", Rack: fmt.Sprintf("r%d", r.rng.IntN(3)),
		MinMetadataVersion: 1, MaxMetadataVersion: r.level,
	}
	// A clean shutdown of the registered epoch, an unclean one (-1), or
	// nothing reported (0: a broker without logs).
	switch b, ok := r.img.Broker(id); {
	case ok && r.rng.IntN(3) == 0:
		req.PreviousBrokerEpoch = b.Epoch
	case r.rng.IntN(2) == 0:
		req.PreviousBrokerEpoch = -1
	}
	if b, ok := r.img.Broker(id); ok && b.IncarnationID == inc && r.rng.IntN(4) > 0 {
		req.Rack = b.Rack // a retry that says what the registration says
	}
	return registrationRecords(r.img, req, holding)
}

func (r *propertyRun) heartbeat(id int32, fence, shutdown bool) ([]*keelpb.Record, error) {
	epoch := int64(1)
	if b, ok := r.img.Broker(id); ok {
		epoch = b.Epoch
	}
	offset := uint64(epoch)
	if r.rng.IntN(6) == 0 {
		offset = 0 // not caught up yet
	}
	return heartbeatRecords(r.img, heartbeat(id, epoch, offset, fence, shutdown))
}

// shutdownDone ends a controlled shutdown: the broker leading nothing any
// more is fenced.
func (r *propertyRun) shutdownDone() ([]*keelpb.Record, error) {
	id := r.brokerID()
	epoch := int64(1)
	if b, ok := r.img.Broker(id); ok {
		epoch = b.Epoch
	}
	return shutdownRecords(r.img, id, epoch)
}

// fenceExpired fences one expired broker, as the active controller does,
// or (as a decision may) several at once.
func (r *propertyRun) fenceExpired() ([]*keelpb.Record, error) {
	if r.rng.IntN(2) == 0 {
		var active []*fsm.Broker
		for _, b := range r.img.Brokers() {
			if !b.Fenced {
				active = append(active, b)
			}
		}
		if len(active) == 0 {
			return nil, nil
		}
		return fenceRecords(r.img, active[r.rng.IntN(len(active)):][:1]), nil
	}
	var expired []*fsm.Broker
	for _, b := range r.img.Brokers() {
		if !b.Fenced && r.rng.IntN(3) == 0 {
			expired = append(expired, b)
		}
	}
	if len(expired) == 0 {
		return nil, nil
	}
	return fenceRecords(r.img, expired), nil
}

func (r *propertyRun) unregister() ([]*keelpb.Record, error) {
	id := r.brokerID()
	epoch := int64(1)
	if b, ok := r.img.Broker(id); ok {
		epoch = b.Epoch
	}
	if r.rng.IntN(3) == 0 {
		epoch = 0 // whichever incarnation is registered
	}
	return unregisterRecords(r.img, id, epoch)
}

// replicaSet is n distinct broker ids, mostly registered ones.
func (r *propertyRun) replicaSet(n int) []int32 {
	pool := make([]int32, 0, propertyBrokers+2)
	for id := int32(1); id <= propertyBrokers+2; id++ {
		if _, ok := r.img.Broker(id); ok || r.rng.IntN(10) == 0 {
			pool = append(pool, id)
		}
	}
	r.rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	return pool[:min(n, len(pool))]
}

func (r *propertyRun) assignments(count, rf int) []*keelpb.PartitionAssignment {
	out := make([]*keelpb.PartitionAssignment, count)
	for i := range out {
		out[i] = &keelpb.PartitionAssignment{Replicas: r.replicaSet(rf)}
	}
	return out
}

func (r *propertyRun) createTopic() ([]*keelpb.Record, error) {
	r.ids++
	req := &keelpb.CreateTopicRequest{Name: fmt.Sprintf("t%d", r.rng.IntN(propertyTopics)), Partitions: int32(1 + r.rng.IntN(6)), ReplicationFactor: int32(1 + r.rng.IntN(4))}
	if r.rng.IntN(3) == 0 {
		req.Partitions, req.Assignments = 0, r.assignments(1+r.rng.IntN(4), int(req.ReplicationFactor))
	}
	if r.rng.IntN(4) == 0 {
		req.Configs = map[string]string{fsm.UncleanLeaderElection: "true"}
	}
	return createTopicRecords(r.img, req, fsm.TopicID{0xd, byte(r.ids >> 8), byte(r.ids)}, r.rng.IntN(1<<20))
}

// topic is a random topic, if there is one.
func (r *propertyRun) topic() (*fsm.Topic, bool) {
	ts := r.img.Topics()
	if len(ts) == 0 {
		return nil, false
	}
	return ts[r.rng.IntN(len(ts))], true
}

// partition is a random partition, if there is one.
func (r *propertyRun) partition() (*fsm.Topic, *fsm.Partition, bool) {
	t, ok := r.topic()
	if !ok {
		return nil, nil, false
	}
	ps := r.img.Partitions(t.ID)
	return t, ps[r.rng.IntN(len(ps))], true
}

func (r *propertyRun) addPartitions() ([]*keelpb.Record, error) {
	t, ok := r.topic()
	if !ok {
		return nil, nil
	}
	req := &keelpb.CreatePartitionsRequest{Topic: t.Name, Count: t.Partitions + int32(r.rng.IntN(3))}
	if add := int(req.Count - t.Partitions); add > 0 && r.rng.IntN(3) == 0 {
		p0 := r.img.Partitions(t.ID)[0]
		req.Assignments = r.assignments(add, len(p0.Replicas)-len(p0.RemovingReplicas))
	}
	return createPartitionsRecords(r.img, req, r.rng.IntN(1<<20))
}

func (r *propertyRun) deleteTopic() ([]*keelpb.Record, error) {
	t, ok := r.topic()
	if !ok {
		return nil, nil
	}
	return deleteTopicRecords(r.img, t.Name)
}

func (r *propertyRun) reassign() ([]*keelpb.Record, error) {
	t, p, ok := r.partition()
	if !ok {
		return nil, nil
	}
	target := r.replicaSet(1 + r.rng.IntN(4))
	switch r.rng.IntN(6) {
	case 0: // the current replicas
		target = slices.Clone(p.Replicas)
	case 1: // the current replicas, reordered
		target = slices.Clone(p.Replicas)
		r.rng.Shuffle(len(target), func(i, j int) { target[i], target[j] = target[j], target[i] })
	}
	return reassignRecords(r.img, t.Name, p.Partition, target)
}

func (r *propertyRun) cancel() ([]*keelpb.Record, error) {
	t, p, ok := r.partition()
	if !ok {
		return nil, nil
	}
	return cancelReassignmentRecords(r.img, t.Name, p.Partition)
}

// electAll is ElectLeaders with all set.
func (r *propertyRun) electAll(typ keelpb.ElectionType) ([]*keelpb.Record, error) {
	var recs []*keelpb.Record
	for _, t := range r.img.Topics() {
		for _, p := range r.img.Partitions(t.ID) {
			if rec, _, _ := electionRecord(r.img, p, typ); rec != nil {
				recs = append(recs, rec)
			}
		}
	}
	return recs, nil
}

func (r *propertyRun) rebalance() ([]*keelpb.Record, error) {
	var recs []*keelpb.Record
	for _, p := range imbalancedPartitions(r.img, 0.10) {
		if rec, _, err := electionRecord(r.img, p, keelpb.ElectionType_ELECTION_TYPE_PREFERRED); err == nil && rec != nil {
			recs = append(recs, rec)
		}
	}
	return recs, nil
}

// alterISR is a partition leader's AlterPartition: usually at the current
// epochs, with an ISR of the leader and some of the replicas (mostly the
// eligible ones, sometimes any).
func (r *propertyRun) alterISR() ([]*keelpb.Record, error) {
	_, p, ok := r.partition()
	if !ok || !p.HasLeader() {
		return nil, nil
	}
	b, ok := r.img.Broker(p.Leader)
	if !ok {
		return nil, nil
	}
	isr := []int32{p.Leader}
	for _, id := range p.Replicas {
		rb, registered := r.img.Broker(id)
		if id != p.Leader && r.rng.IntN(3) > 0 && (r.rng.IntN(10) == 0 || registered && rb.Eligible()) {
			isr = append(isr, id)
		}
	}
	r.rng.Shuffle(len(isr), func(i, j int) { isr[i], isr[j] = isr[j], isr[i] })
	req := &keelpb.AlterPartitionRequest{BrokerId: p.Leader, BrokerEpoch: b.Epoch, TopicId: p.TopicID.String(), Partition: p.Partition,
		LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, NewIsr: isr}
	if r.rng.IntN(10) == 0 {
		req.PartitionEpoch--
	}
	if p.Recovering() && r.rng.IntN(3) == 0 {
		req.LeaderRecoveryState = keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERING // not confirmed yet
	}
	if r.rng.IntN(2) == 0 {
		// KIP-903: the members' broker epochs, now and then a stale one.
		for _, id := range isr {
			epoch := NoBrokerEpoch
			if m, ok := r.img.Broker(id); ok && r.rng.IntN(4) > 0 {
				epoch = m.Epoch
				if r.rng.IntN(10) == 0 {
					epoch--
				}
			}
			req.NewIsrWithEpochs = append(req.NewIsrWithEpochs, &keelpb.BrokerState{BrokerId: id, BrokerEpoch: epoch})
		}
		if r.rng.IntN(2) == 0 {
			req.NewIsr = nil
		}
	}
	return alterPartitionRecords(r.img, req)
}
