package controller

import (
	"errors"
	"slices"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// TestStripedReplicaPlacer ports the cases of Kafka's StripedReplicaPlacerTest
// that concern which brokers get replicas (Kafka's exact lists follow its
// random offsets; Keel's placement is its own round-robin, so the cases
// check the rules rather than the lists): active brokers first, a fenced
// broker never first (the preferred leader), and fenced brokers only when
// there are fewer active brokers than the replication factor. Kafka ranks
// racks above fencing (a fenced broker in an unused rack beats an active
// one in a used rack); Keel ranks fencing first, since a replica on a
// fenced broker is in no ISR and adds no safety until the broker returns.
func TestStripedReplicaPlacer(t *testing.T) {
	type broker struct {
		id     int32
		rack   string
		fenced bool
	}
	tests := []struct {
		name       string
		brokers    []broker
		partitions int32
		rf         int32
		// Every partition holds exactly the brokers of one of these
		// sets, plus, if fill > 0, fill brokers of fillFrom.
		from     []int32
		fill     int
		fillFrom []int32
		// Leaders are spread evenly over from: no broker leads two more
		// than another.
		racks int // each partition spans this many racks (0: not checked)
	}{
		{name: "testAvoidFencedReplicaIfPossibleOnSingleRack", partitions: 5, rf: 4,
			brokers: []broker{{3, "", false}, {1, "", true}, {0, "", false}, {4, "", false}, {2, "", false}},
			from:    ids(0, 2, 3, 4)},
		{name: "testMultiPartitionTopicPlacementOnSingleUnfencedBroker", partitions: 3, rf: 1,
			brokers: []broker{{0, "", false}, {1, "", true}},
			from:    ids(0)},
		{name: "testPlacementOnFencedReplicaOnSingleRack", partitions: 4, rf: 3,
			brokers: []broker{{3, "", false}, {1, "", true}, {2, "", false}},
			from:    ids(2, 3), fill: 1, fillFrom: ids(1)},
		// Kafka: [21 30 10 20] (20 fenced, for rack 2).
		{name: "testRackListWithMultipleRacks", partitions: 30, rf: 4,
			brokers: []broker{{11, "1", false}, {10, "1", false}, {30, "3", false}, {31, "3", false}, {21, "2", false}, {20, "2", true}},
			from:    ids(10, 11, 21, 30, 31), racks: 3},
		// Kafka: [41 11 21 30] (21 and 30 fenced, for racks 2 and 3).
		{name: "testRackListWithInvalidRacks", partitions: 30, rf: 4,
			brokers: []broker{{11, "1", false}, {10, "1", false}, {30, "3", true}, {31, "3", true}, {20, "2", true}, {21, "2", true}, {41, "4", false}, {40, "4", true}},
			from:    ids(10, 11, 41), fill: 1, fillFrom: ids(20, 21, 30, 31, 40), racks: 3},
		{name: "testSuccessfulPlacement", partitions: 5, rf: 3,
			brokers: []broker{{0, "", false}, {3, "", false}, {2, "", false}, {1, "", false}},
			from:    ids(0, 1, 2, 3)},
		{name: "testEvenDistribution", partitions: 200, rf: 2,
			brokers: []broker{{0, "", false}, {1, "", false}, {2, "", false}, {3, "", false}},
			from:    ids(0, 1, 2, 3)},
		// The cases: a fenced broker took 9 of 12 partitions, 3 as
		// preferred leader; with one active broker an RF-1 topic was refused.
		{name: "a fenced broker gets nothing while enough are active", partitions: 12, rf: 3,
			brokers: []broker{{1, "r1", false}, {2, "r2", false}, {3, "r3", false}, {4, "r4", true}},
			from:    ids(1, 2, 3), racks: 3},
		{name: "one active broker holds an RF-1 topic", partitions: 6, rf: 1,
			brokers: []broker{{1, "r1", true}, {2, "r2", false}, {3, "r3", true}},
			from:    ids(2)},
		{name: "fenced brokers make up the count, spread", partitions: 12, rf: 3,
			brokers: []broker{{1, "r1", false}, {2, "r2", true}, {3, "r3", true}, {4, "r4", true}},
			from:    ids(1), fill: 2, fillFrom: ids(2, 3, 4)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var bs []*fsm.Broker
			rack := map[int32]string{}
			for _, b := range tt.brokers {
				bs = append(bs, &fsm.Broker{ID: b.id, Rack: b.rack, Fenced: b.fenced})
				rack[b.id] = b.rack
			}
			slices.SortFunc(bs, func(a, b *fsm.Broker) int { return int(a.ID - b.ID) }) // as img.Brokers()
			for start := range 7 {
				placed := placeReplicas(bs, 0, tt.partitions, tt.rf, start)
				leads, holds, fillHolds := map[int32]int{}, map[int32]int{}, map[int32]int{}
				for i, rs := range placed {
					active := min(int(tt.rf), len(tt.from))
					if len(rs) != int(tt.rf) || len(slices.Compact(slices.Sorted(slices.Values(rs)))) != len(rs) ||
						!subsetOf(rs[:active], tt.from) || !subsetOf(rs[active:], tt.fillFrom) || len(rs)-active != tt.fill {
						t.Fatalf("start %d, partition %d: %v; want %d distinct replicas, %d of %v first, then %d of %v",
							start, i, rs, tt.rf, active, tt.from, tt.fill, tt.fillFrom)
					}
					if tt.racks > 0 {
						racks := map[string]bool{}
						for _, b := range rs {
							racks[rack[b]] = true
						}
						if len(racks) != tt.racks {
							t.Fatalf("start %d, partition %d: %v spans racks %v, want %d racks", start, i, rs, racks, tt.racks)
						}
					}
					leads[rs[0]]++
					for _, b := range rs[:active] {
						holds[b]++
					}
					for _, b := range rs[active:] {
						fillHolds[b]++
					}
				}
				// spread: no broker of over has more than slack above another.
				spread := func(what string, count map[int32]int, over []int32, slack int) {
					lo, hi := int(tt.partitions)*int(tt.rf), 0
					for _, b := range over {
						lo, hi = min(lo, count[b]), max(hi, count[b])
					}
					if hi-lo > slack {
						t.Fatalf("start %d: %s per broker %v; want them spread evenly over %v", start, what, count, over)
					}
				}
				spread("preferred leaderships", leads, tt.from, 1)
				// Followers are spread too, less strictly, and only where
				// racks do not come first (a rack of one broker takes a
				// replica of every partition, as in Kafka).
				if tt.racks == 0 {
					total := int(tt.partitions) * int(tt.rf)
					spread("replicas", holds, tt.from, max(2, total/len(tt.brokers)/10))
					if tt.fill > 0 {
						spread("fenced replicas", fillHolds, tt.fillFrom, max(2, total/len(tt.brokers)/10))
					}
				}
			}
		})
	}
}

// TestStripedReplicaPlacer_Refusals: placements that cannot be made are
// refused with the field at fault (Kafka's testAllBrokersFenced,
// testNotEnoughBrokers, testNonPositiveReplicationFactor and their
// RackList twins); a fenced broker is never the first replica, so a
// single active broker can take an RF-1 topic (placed) even when the
// others are fenced.
func TestStripedReplicaPlacer_Refusals(t *testing.T) {
	tests := []struct {
		name      string
		active    []int32
		fenced    []int32
		rf        int32
		wantField string
	}{
		{name: "testAllBrokersFenced", fenced: ids(10, 11), rf: 1, wantField: "replication_factor"},
		{name: "testNotEnoughBrokers", active: ids(10, 11), rf: 3, wantField: "replication_factor"},
		{name: "testNonPositiveReplicationFactor", active: ids(10, 11), rf: 0, wantField: "replication_factor"},
		{name: "testRackListNonPositiveReplicationFactor", active: ids(10, 11), rf: -1, wantField: "replication_factor"},
		{name: "one active broker, RF 1", active: ids(2), fenced: ids(1, 3), rf: 1},
		{name: "one active broker, RF 3", active: ids(2), fenced: ids(1, 3), rf: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newReplicationCtx(t)
			c.registerBrokers(slices.Sorted(slices.Values(append(slices.Clone(tt.active), tt.fenced...)))...)
			c.unfenceBrokers(tt.active...)
			recs, err := createTopicRecords(c.img, &keelpb.CreateTopicRequest{Name: "x", Partitions: 6, ReplicationFactor: tt.rf}, fsm.TopicID{0xe}, 0)
			if tt.wantField != "" {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != tt.wantField {
					t.Fatalf("err = %v, want one naming %s", err, tt.wantField)
				}
				return
			}
			c.must(recs, err)
			for _, p := range c.img.Partitions(fsm.TopicID{0xe}) {
				if !slices.Contains(tt.active, p.Replicas[0]) || p.Leader != p.Replicas[0] || !slices.Equal(p.ISR, []int32{p.Replicas[0]}) {
					t.Fatalf("partition %d: %v; want it led by its first replica, an active broker, alone in the ISR", p.Partition, specOf(p))
				}
			}
		})
	}
}

// TestStripedReplicaPlacer_ShuttingDownGetsNothing: a broker in controlled
// shutdown gets no replica, even to make up the count.
func TestStripedReplicaPlacer_ShuttingDownGetsNothing(t *testing.T) {
	c := newReplicationCtx(t)
	c.registerBrokers(1, 2, 3, 4)
	c.unfenceBrokers(1, 2, 3, 4)
	// Broker 4 leads a partition, so its controlled shutdown does not end
	// at once (one that leads nothing is fenced at once).
	c.must(createTopicRecords(c.img, &keelpb.CreateTopicRequest{Name: "led", Assignments: []*keelpb.PartitionAssignment{{Replicas: []int32{4, 1}}}}, fsm.TopicID{0xd}, 0))
	c.must(heartbeatRecords(c.img, heartbeat(4, c.broker(4).Epoch, 0, false, true)))
	if b := c.broker(4); !b.ShuttingDown || b.Fenced {
		t.Fatalf("broker 4 after asking to shut down: %+v; want it in controlled shutdown", b)
	}
	recs, err := createTopicRecords(c.img, &keelpb.CreateTopicRequest{Name: "x", Partitions: 8, ReplicationFactor: 3}, fsm.TopicID{0xe}, 0)
	c.must(recs, err)
	for _, p := range c.img.Partitions(fsm.TopicID{0xe}) {
		if slices.Contains(p.Replicas, 4) {
			t.Fatalf("partition %d: %v holds broker 4, which is shutting down", p.Partition, p.Replicas)
		}
	}
	if _, err := createTopicRecords(c.img, &keelpb.CreateTopicRequest{Name: "y", Partitions: 1, ReplicationFactor: 4}, fsm.TopicID{0xf}, 0); err == nil {
		t.Fatal("RF 4 with one of 4 brokers shutting down was placed")
	}
}
