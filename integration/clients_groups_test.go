package integration

// Kafka's own clients consume through consumer groups (issue 30): kcat's
// balanced consumer (-G) and confluent-kafka's subscribe(), librdkafka
// 2.0.2 both, as members of a group on 3 controllers and 3 brokers. `make
// test-clients` runs these with KEEL_CLIENTS_REQUIRED=1 (clients_test.go).

import (
	"context"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
)

// produceForGroup produces records over every partition of topic, round
// robin, with an idempotent acks=all producer, tagged tag, until at least
// n are acknowledged, and returns them as acknowledged; a record that
// failed fails the test.
func produceForGroup(t *testing.T, kafka map[int32]string, topic string, partitions int32, tag string, n int) []ackedRecord {
	t.Helper()
	p := startProducer(t, kafka, topic, partitions, tag)
	p.waitAcked(n, "records for the group")
	if !p.stop(kafkaTimeout) {
		t.Fatalf("producer %s did not finish", tag)
	}
	_, acked, failed := p.results()
	for v, err := range failed {
		t.Errorf("%q: the producer gave up: %v", v, err)
	}
	return acked
}

// clientCloseLimit bounds a librdkafka consumer's close(): it leaves the
// group and waits for the rebalance callbacks; the issue saw it block 45 s
// on a broker that served no groups.
const clientCloseLimit = 10 * time.Second

// TestPythonClient_GroupSubscribe: confluent-kafka's Consumer.subscribe()
// (testdata/groups.py) in a group, on a topic of 4 partitions holding 400
// acknowledged records (at least): one member reads every record; its synchronous
// commit() is answered and committed() returns the high watermarks; a
// second member joins and the coordinator splits the partitions between
// them, as their on_assign callbacks say; 200 more records are read by the
// two, none of the first 400 again (they start at the commits); each
// close() returns within clientCloseLimit.
func TestPythonClient_GroupSubscribe(t *testing.T) {
	python := pythonWithConfluentKafka(t)
	t.Parallel()
	c, kafka := startGroupCluster(t, threeBrokers)
	const topic, group, partitions = "python-group", "python", 4
	createLedTopic(t, c, kafka, topic, partitions)
	adm := kafkaClient(t, kafka)
	first := produceForGroup(t, kafka, topic, partitions, "a", 400)

	a := startPyGroupMember(t, python, kafka, group, topic, "a")
	waitAllRead(t, first, a)
	hw := highWatermarks(t, kafkaClient(t, kafka), topic, partitions)
	committed := a.commit(t)
	for p, end := range hw {
		if committed[p] != end {
			t.Errorf("committed() after commit(): %v, want the high watermarks %v", committed, hw)
			break
		}
	}
	waitForCommitted(t, adm, group, topic, hw)

	b := startPyGroupMember(t, python, kafka, group, topic, "b")
	g := waitForGroup(t, adm, group, topic, "split between a and b, as their on_assign say", func(g groupAssignment) bool {
		return g.split(2, partitions) && sameAssignments(g, a, b)
	})
	t.Logf("two members: %s", g)
	second := produceForGroup(t, kafka, topic, partitions, "b", 200)
	waitAllRead(t, second, a, b)
	readB, _ := b.reads()
	for _, r := range first {
		if readB[r.value] > 0 {
			t.Errorf("b read %q, below the offsets a committed", r.value)
		}
	}
	for _, m := range []*groupMember{b, a} {
		m.stop(kafkaTimeout)
		if closing := m.closeTime(); closing > clientCloseLimit {
			t.Errorf("member %s: close() took %s", m.name, closing)
		}
	}
	_, na := a.reads()
	_, nb := b.reads()
	t.Logf("%d records; a read %d, b %d; close() took %s (a) and %s (b); errors reported: a %v, b %v",
		len(first)+len(second), na, nb, a.closeTime(), b.closeTime(), a.errorsSeen(), b.errorsSeen())
}

// startPyGroupMember runs testdata/groups.py as member name of group.
func startPyGroupMember(t *testing.T, python string, kafka map[int32]string, group, topic, name string) *groupMember {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*clientTimeout)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, python, "testdata/groups.py", strings.Join(bootstrap(kafka), ","), group, topic)
	cmd.WaitDelay = 5 * time.Second
	return startMemberProcess(t, name, cmd)
}

// TestKcat_Group: kcat's balanced consumer (`kcat -G GROUP TOPIC`) on a
// topic of 4 partitions holding 400 acknowledged records: a first member
// takes every partition, a second joins and the coordinator splits them;
// 200 more records are produced, and the two together read all 600. Both
// stopped (SIGTERM: they commit and leave), the group's committed offsets
// are the high watermarks; 10 more records are produced, and a third run
// in the group (-e: to the end; from the earliest offset where nothing is
// committed) reads exactly those, nothing older.
func TestKcat_Group(t *testing.T) {
	kcat := kcatPath(t)
	t.Parallel()
	c, kafka := startGroupCluster(t, threeBrokers)
	seeds := strings.Join(bootstrap(kafka), ",")
	const topic, group, partitions = "kcat-group", "kcat", 4
	createLedTopic(t, c, kafka, topic, partitions)
	adm := kafkaClient(t, kafka)
	acked := produceForGroup(t, kafka, topic, partitions, "a", 400)

	a := startKcatMember(t, kcat, seeds, group, topic, "a")
	waitForGroup(t, adm, group, topic, "kcat a owns every partition", func(g groupAssignment) bool { return g.split(1, partitions) })
	b := startKcatMember(t, kcat, seeds, group, topic, "b")
	g := waitForGroup(t, adm, group, topic, "split between kcat a and b", func(g groupAssignment) bool { return g.split(2, partitions) })
	t.Logf("two members: %s", g)
	if bad := g.clientsAre("rdkafka"); len(bad) > 0 {
		t.Errorf("DescribeGroups: want each kcat member's client rdkafka@/127.0.0.1 and its id rdkafka-...: %v", bad)
	}
	acked = append(acked, produceForGroup(t, kafka, topic, partitions, "b", 200)...)
	waitAllRead(t, acked, a, b)
	a.stop(kafkaTimeout)
	b.stop(kafkaTimeout)
	waitForCommitted(t, adm, group, topic, highWatermarks(t, kafkaClient(t, kafka), topic, partitions))
	_, na := a.reads()
	_, nb := b.reads()
	t.Logf("%d records; kcat a read %d, b %d; a's rebalances:\n%s\nb's:\n%s", len(acked), na, nb, kcatRebalances(a), kcatRebalances(b))

	last := produceForGroup(t, kafka, topic, partitions, "c", 10)
	out := mustKcat(t, kcat, "", "-G", group, "-b", seeds, "-e", "-q", "-f", `%s\n`,
		"-X", "heartbeat.interval.ms=500", "-X", "auto.offset.reset=earliest", topic)
	got := strings.Fields(out)
	var want []string
	for _, r := range last {
		want = append(want, r.value)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("a third kcat -G run read %v, want only the %d records produced since the commits: %v", got, len(want), want)
	}
}

// startKcatMember runs `kcat -G group topic` printing each record as JSON
// (-J) as it reads it (-u: unbuffered, else records wait in stdio's
// buffer of the pipe); it commits what it read (librdkafka's auto commit)
// and leaves the group when stopped.
func startKcatMember(t *testing.T, kcat, seeds, group, topic, name string) *groupMember {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*clientTimeout)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, kcat, "-G", group, "-b", seeds, "-J", "-u",
		"-X", "auto.offset.reset=earliest", "-X", "heartbeat.interval.ms=500", "-X", "auto.commit.interval.ms=500", topic)
	cmd.WaitDelay = 5 * time.Second
	return startMemberProcess(t, name, cmd)
}

// kcatRebalances is what kcat said of its group's rebalances.
func kcatRebalances(m *groupMember) string {
	var out []string
	for l := range strings.Lines(m.stderr.String()) {
		if strings.Contains(l, "rebalanced") {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return strings.Join(out, "\n")
}

// commit has the member (testdata/groups.py) commit what it read, and
// returns what its committed() then answered.
func (m *groupMember) commit(t *testing.T) map[int32]int64 {
	t.Helper()
	var got map[int32]int64
	m.mu.Lock()
	seen := len(m.commits)
	m.mu.Unlock()
	m.send("commit")
	poll.UntilState(t, clientTimeout, "committed() answered", func() (bool, string) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if len(m.commits) > seen {
			got = m.commits[seen]
			return true, ""
		}
		return false, "errors: " + strconv.Quote(strings.Join(m.errors, "; "))
	})
	return got
}

func (m *groupMember) closeTime() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closing
}

func (m *groupMember) errorsSeen() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.errors)
}
