package integration

// Consumer groups end to end (issue 30), with franz-go: members in child
// processes (groups_harness_test.go) on 3 controllers and 3 brokers, an
// idempotent acks=all producer streaming to every partition, and the
// group as its coordinator describes it (DescribeGroups). What a Kafka user relies
// on: the partitions are split between the members, a member that leaves
// or dies has its partitions moved to the others, every acknowledged
// record is read by the group at least once, and committed offsets never
// go backwards, through the kill -9 of the group's coordinator too.

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keel-dev/keel/internal/poll"
)

// groupPartitions is the partition count of the group tests' topics.
const groupPartitions = 6

// startGroupTest starts a cluster for a group test (startGroupCluster,
// brokers 1 to 3) with topic, of groupPartitions partitions led with a
// full ISR, and returns it with an admin client.
func startGroupTest(t *testing.T, topic string) (*Cluster, map[int32]string, *kgo.Client) {
	t.Helper()
	c, kafka := startGroupCluster(t, threeBrokers)
	createLedTopic(t, c, kafka, topic, groupPartitions)
	return c, kafka, kafkaClient(t, kafka)
}

// drainGroup stops the producer, then waits until the members ms together
// have read every record it had acknowledged (at least once) and the
// group has committed the high watermarks; it returns the records
// acknowledged. A record the producer gave up on fails the test.
func drainGroup(t *testing.T, kafka map[int32]string, adm *kgo.Client, producer *streamProducer, group, topic string, ms ...*groupMember) []ackedRecord {
	t.Helper()
	if !producer.stop(kafkaTimeout) {
		t.Fatal("the producer did not finish")
	}
	_, acked, failed := producer.results()
	if len(failed) > 0 {
		t.Fatalf("%d records failed to produce", len(failed))
	}
	waitAllRead(t, acked, ms...)
	waitForCommitted(t, adm, group, topic, highWatermarks(t, kafkaClient(t, kafka), topic, groupPartitions))
	return acked
}

// TestGroups_SecondMemberJoinsAndLeaves: one member takes the 6
// partitions of a topic; a second joins and the coordinator splits them,
// each member's own view (its assign and revoke callbacks) matching
// DescribeGroups, which shows each member's client (its id and host; the
// client id starts the member id, as in Kafka); the second leaves
// (SIGTERM: LeaveGroup) and the first has all 6 again well before a
// session would have run out; together they read every acknowledged
// record, and the group's committed offsets reach the high watermarks.
func TestGroups_SecondMemberJoinsAndLeaves(t *testing.T) {
	t.Parallel()
	const topic, group = "groups-split", "split"
	_, kafka, adm := startGroupTest(t, topic)
	producer := startProducer(t, kafka, topic, groupPartitions, "a")
	producer.waitAcked(300, "before the first member")

	// A long session: a move within it is the leave's doing, not the
	// session's.
	const session = 20 * time.Second
	a := startGroupMember(t, kafka, group, topic, "a", session)
	waitForGroup(t, adm, group, topic, "member a owns every partition", func(g groupAssignment) bool {
		return g.split(1, groupPartitions) && a.ownsAsDescribed(g)
	})
	b := startGroupMember(t, kafka, group, topic, "b", session)
	g := waitForGroup(t, adm, group, topic, "split between a and b, as each says", func(g groupAssignment) bool {
		return g.split(2, groupPartitions) && a.ownsAsDescribed(g) && b.ownsAsDescribed(g)
	})
	t.Logf("two members: %s", g)
	// franz-go's client id is "kgo".
	if bad := g.clientsAre("kgo"); len(bad) > 0 {
		t.Errorf("DescribeGroups: want each member's client kgo@/127.0.0.1 and its id kgo-...: %v", bad)
	}
	producer.waitAcked(300, "with two members")

	b.stop(kafkaTimeout)
	left := time.Now()
	waitForGroup(t, adm, group, topic, "member a owns every partition again", func(g groupAssignment) bool {
		return g.split(1, groupPartitions) && a.ownsAsDescribed(g)
	})
	if moved := time.Since(left); moved >= session {
		t.Errorf("b's partitions moved to a %s after b left: LeaveGroup should not wait for the session (%s)", moved, session)
	} else {
		t.Logf("b's partitions moved to a %s after b left", moved.Round(time.Millisecond))
	}
	producer.waitAcked(300, "after b left")
	acked := drainGroup(t, kafka, adm, producer, group, topic, a, b)
	_, na := a.reads()
	_, nb := b.reads()
	t.Logf("%d acknowledged records; a read %d, b read %d", len(acked), na, nb)
	a.stop(kafkaTimeout)
}

// TestGroups_KilledMemberPartitionsMove: two members split a topic's 6
// partitions while a producer streams; one is killed with kill -9 (no
// LeaveGroup); once its session (6 s) runs out, the coordinator gives all
// 6 to the survivor, which reads from the dead member's last commit: the
// two together read every acknowledged record at least once.
func TestGroups_KilledMemberPartitionsMove(t *testing.T) {
	t.Parallel()
	const topic, group = "groups-kill", "kill"
	_, kafka, adm := startGroupTest(t, topic)
	producer := startProducer(t, kafka, topic, groupPartitions, "a")

	a := startGroupMember(t, kafka, group, topic, "a", groupSession)
	b := startGroupMember(t, kafka, group, topic, "b", groupSession)
	g := waitForGroup(t, adm, group, topic, "split between a and b, as each says", func(g groupAssignment) bool {
		return g.split(2, groupPartitions) && a.ownsAsDescribed(g) && b.ownsAsDescribed(g)
	})
	aID, aParts := a.partitions()
	producer.waitAcked(500, "with two members")
	poll.UntilState(t, groupTimeout, "member a reading", func() (bool, string) {
		_, n := a.reads()
		return n > 50, fmt.Sprintf("a read %d", n)
	})

	a.kill()
	killed := time.Now()
	waitForGroup(t, adm, group, topic, "member b owns every partition after a's kill -9", func(g groupAssignment) bool {
		_, dead := g.members[aID]
		return !dead && g.split(1, groupPartitions) && b.ownsAsDescribed(g)
	})
	moved := time.Since(killed)
	t.Logf("two members (%s); a (%s, partitions %v) killed; its partitions moved to b %s later (session %s)",
		g, aID, aParts, moved.Round(time.Millisecond), groupSession)
	// A killed member sends nothing: only its session running out moves
	// its partitions (its last heartbeat was at most groupHeartbeat
	// before the kill).
	if moved < groupSession-groupHeartbeat-500*time.Millisecond {
		t.Errorf("a's partitions moved %s after its kill -9, before its session (%s) could run out", moved, groupSession)
	}

	producer.waitAcked(500, "after a's kill -9")
	acked := drainGroup(t, kafka, adm, producer, group, topic, a, b)
	readA, na := a.reads()
	readB, nb := b.reads()
	again := 0
	for v := range readA {
		again += readB[v]
	}
	t.Logf("%d acknowledged records, each read at least once: a read %d before its kill, b %d (%d of them read by a too: after a's last commit)",
		len(acked), na, nb, again)
	b.stop(kafkaTimeout)
}

// TestGroups_CoordinatorKill: one member reads a topic's 6 partitions
// while a producer streams and a watcher fetches the group's committed
// offsets every 100 ms; the group's coordinator (the leader of its
// __consumer_offsets partition) is killed with kill -9. Another broker
// becomes the coordinator, loads the group, and the member carries on in
// it: it reads every acknowledged record, its commits reach the high
// watermarks, and no committed offset the watcher was answered ever goes
// backwards.
func TestGroups_CoordinatorKill(t *testing.T) {
	t.Parallel()
	const topic, group = "groups-coordinator", "coordinator"
	c, kafka, adm := startGroupTest(t, topic)
	producer := startProducer(t, kafka, topic, groupPartitions, "a")

	a := startGroupMember(t, kafka, group, topic, "a", groupSession)
	waitForGroup(t, adm, group, topic, "member a owns every partition", func(g groupAssignment) bool {
		return g.split(1, groupPartitions) && a.ownsAsDescribed(g)
	})
	w := watchCommitted(t, adm, group, topic)
	producer.waitAcked(500, "before the coordinator's kill")
	poll.UntilState(t, groupTimeout, "offsets committed", func() (bool, string) {
		n := w.answers()
		return n > 5, fmt.Sprintf("%d answers", n)
	})

	var victim int32
	poll.UntilState(t, groupTimeout, "the group's coordinator", func() (bool, string) {
		id, err := groupCoordinator(adm, group)
		victim = id
		return err == nil && id > 0, fmt.Sprintf("%d, %v", id, err)
	})
	c.KillBroker(victim)
	killed := time.Now()
	var successor int32
	poll.UntilState(t, groupTimeout, "another coordinator", func() (bool, string) {
		id, err := groupCoordinator(adm, group)
		successor = id
		return err == nil && id > 0 && id != victim, fmt.Sprintf("%d, %v", id, err)
	})
	g := waitForGroup(t, adm, group, topic, "member a owns every partition, on the new coordinator", func(g groupAssignment) bool {
		return g.split(1, groupPartitions) && a.ownsAsDescribed(g)
	})
	t.Logf("coordinator %d killed; %d coordinates %s after %s", victim, successor, g, time.Since(killed).Round(time.Millisecond))
	// Answers from the new coordinator, compared with the old one's.
	before := w.answers()
	producer.waitAcked(500, "after the coordinator's kill")
	poll.UntilState(t, groupTimeout, "committed offsets answered by the new coordinator", func() (bool, string) {
		n := w.answers()
		return n >= before+10, fmt.Sprintf("%d answers since the kill", n-before)
	})

	acked := drainGroup(t, kafka, adm, producer, group, topic, a)
	backwards, answers := w.stop()
	for _, b := range backwards {
		t.Error(b)
	}
	_, n := a.reads()
	t.Logf("%d acknowledged records, %d read; %d committed-offset answers, %d went backwards", len(acked), n, answers, len(backwards))
	a.stop(kafkaTimeout)
}

// committedWatcher fetches a group's committed offsets every 100 ms and
// keeps every answer that went below an earlier one.
type committedWatcher struct {
	stopCh chan struct{}
	done   chan struct{}

	mu        sync.Mutex
	highest   map[int32]int64
	n         int
	backwards []string
}

func watchCommitted(t *testing.T, adm *kgo.Client, group, topic string) *committedWatcher {
	w := &committedWatcher{stopCh: make(chan struct{}), done: make(chan struct{}), highest: map[int32]int64{}}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stopCh:
				return
			case <-tick.C:
			}
			// An error (no coordinator yet, a load in progress) is no
			// answer; only answers are compared.
			got, err := fetchCommitted(adm, group, topic)
			if err != nil || len(got) == 0 {
				continue
			}
			w.mu.Lock()
			w.n++
			for _, p := range slices.Sorted(maps.Keys(got)) {
				if got[p] < w.highest[p] {
					w.backwards = append(w.backwards, fmt.Sprintf("partition %d: committed offset %d answered at %s, after %d",
						p, got[p], time.Now().Format("15:04:05.000"), w.highest[p]))
				}
				w.highest[p] = max(w.highest[p], got[p])
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.stop() })
	return w
}

func (w *committedWatcher) answers() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// stop ends the watch and returns what went backwards and how many
// answers there were.
func (w *committedWatcher) stop() ([]string, int) {
	select {
	case <-w.stopCh:
	default:
		close(w.stopCh)
	}
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.backwards), w.n
}
