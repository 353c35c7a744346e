package integration

// The metadata push is encoded once for every broker stream at the same
// position (controller/pushcache.go), and each broker still gets exactly
// the batches after its own offset: one that was stopped catches up from
// where it was, a new one starts from a snapshot.

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

// TestPush_EncodedOnceForBrokersAtOnePosition: three brokers at the head of
// the metadata log receive each batch in a push the active controller
// encoded once (keel_controller_push_encodes_total against
// keel_controller_pushes_sent_total); a broker stopped meanwhile and a new
// one then converge on the same offset with the replicas the controller
// describes.
func TestPush_EncodedOnceForBrokersAtOnePosition(t *testing.T) {
	t.Parallel()
	c, _, _ := startBrokerClusterWith(t, 3, []clusterOption{withMetrics()}, 1, 2, 3, 4)
	c.createTopic(t, "push-before", "--partitions", "6", "--replication-factor", "3")
	c.StopBroker(4)
	head := []int32{1, 2, 3}
	last := c.appendNoOp(t, 10*time.Second).Index
	c.WaitForBrokerOffsets(t, head, last)

	leader, _ := c.WaitForActive(t, activeTimeout)
	before := pushCounts(t, c, leader)
	const batches = 20
	for range batches {
		c.appendNoOp(t, 10*time.Second)
	}
	c.createTopic(t, "push-during", "--partitions", "6", "--replication-factor", "3")
	last = c.appendNoOp(t, 10*time.Second).Index
	c.WaitForBrokerOffsets(t, head, last)
	if l, _ := c.WaitForActive(t, activeTimeout); l != leader {
		t.Skipf("the active controller moved from %d to %d during the writes", leader, l)
	}
	after := pushCounts(t, c, leader)
	encodes, sent := int(after[0]-before[0]), int(after[1]-before[1])
	// Each batch went to the three streams; they may drift apart for a
	// batch or two (one woke after the next batch had come in), never
	// for most.
	if sent < 3*batches || 2*encodes > sent {
		t.Fatalf("%d pushes sent to 3 brokers for %d batches from %d encodings; want at least %d sent, each encoding shared by 2 or more",
			sent, batches+2, encodes, 3*batches)
	}
	t.Logf("%d pushes sent from %d encodings", sent, encodes)

	// The stopped broker resumes from its own offset, a new one starts
	// from a snapshot: both end at the head, with the replicas the
	// controller describes.
	c.RestartBroker(4)
	c.StartBroker(5)
	all := []int32{1, 2, 3, 4, 5}
	c.WaitForBrokers(t, allActive(all...))
	last = c.appendNoOp(t, 10*time.Second).Index
	c.WaitForBrokerOffsets(t, all, last)
	poll.UntilState(t, brokersTimeout, "every broker to hold the replicas the controller describes", func() (bool, string) {
		var bad []string
		for _, id := range all {
			v, err := c.InspectE(t.Context(), id)
			if err != nil {
				bad = append(bad, fmt.Sprintf("broker %d: %v", id, err))
				continue
			}
			for _, topic := range []string{"push-before", "push-during"} {
				if diff := replicasDiffer(c.cliDescribe(t, topic), id, v.GetPartitions()); diff != "" {
					bad = append(bad, fmt.Sprintf("broker %d: %s", id, diff))
				}
			}
		}
		return len(bad) == 0, strings.Join(bad, "\n")
	})
}

// pushCounts scrapes node id's push counters: encodes, then sent.
func pushCounts(t *testing.T, c *Cluster, id int32) [2]float64 {
	t.Helper()
	s, err := scrapeMetrics(c.node(id).MetricsAddr())
	if err != nil {
		t.Fatal(err)
	}
	const encodes, sent = "keel_controller_push_encodes_total", "keel_controller_pushes_sent_total"
	e, ok1 := s[encodes]
	n, ok2 := s[sent]
	if !ok1 || !ok2 {
		t.Fatalf("controller %d reports no %s or %s", id, encodes, sent)
	}
	return [2]float64{e, n}
}

// replicasDiffer says how broker id's replicas of d (from its inspect)
// differ from d's partitions that name it as a replica; "" if they do not.
func replicasDiffer(d topicJSON, id int32, held []*keelpb.ReplicaState) string {
	var diffs []string
	for _, p := range d.Partitions {
		i := slices.IndexFunc(held, func(r *keelpb.ReplicaState) bool {
			return r.GetTopic() == d.Name && r.GetPartition() == p.Partition
		})
		switch {
		case !slices.Contains(p.Replicas, id):
			if i >= 0 && held[i].GetRole() != "stopped" {
				diffs = append(diffs, fmt.Sprintf("%s-%d: holds a %s replica it is not assigned", d.Name, p.Partition, held[i].GetRole()))
			}
		case i < 0:
			diffs = append(diffs, fmt.Sprintf("%s-%d: no replica", d.Name, p.Partition))
		case held[i].GetLeader() != p.Leader || held[i].GetLeaderEpoch() != p.LeaderEpoch:
			diffs = append(diffs, fmt.Sprintf("%s-%d: leader %d epoch %d, the controller says %d epoch %d",
				d.Name, p.Partition, held[i].GetLeader(), held[i].GetLeaderEpoch(), p.Leader, p.LeaderEpoch))
		}
	}
	return strings.Join(diffs, "; ")
}
