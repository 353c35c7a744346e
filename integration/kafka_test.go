package integration

// The data plane end to end, through the Kafka protocol: real `keel
// broker` processes with Kafka listeners, franz-go as the client (an
// idempotent producer, a consumer without a group), and brokers killed
// with kill -9 or stopped with SIGTERM while records are being produced.
// The tests check what a Kafka user relies on: every record acknowledged
// with acks=all is read back exactly once at the offset it was
// acknowledged with, and what an unclean election loses is counted.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/internal/poll"
)

// kafkaTimeout bounds a wait on the Kafka clients: records acknowledged
// after a failover (a session to run out, a new leader, metadata to
// follow), a flush, a read up to the high watermark.
const kafkaTimeout = 45 * time.Second

// startKafkaCluster starts three controllers and the brokers ids, each
// with a Kafka listener on a free loopback port and the data plane's
// short test timings (a follower out of the ISR after 1 s behind, fetches
// every 100 ms when idle), and waits until every broker is active. It
// returns the cluster and the Kafka listener of each broker. opts add to
// the cluster's options (withTLS).
func startKafkaCluster(t *testing.T, ids []int32, opts ...clusterOption) (*Cluster, map[int32]string) {
	t.Helper()
	return startKafkaClusterWith(t, ids, nil, opts...)
}

// startKafkaClusterWith is startKafkaCluster with flags added to every
// broker's.
func startKafkaClusterWith(t *testing.T, ids []int32, flags []string, opts ...clusterOption) (*Cluster, map[int32]string) {
	t.Helper()
	c := startCluster(t, 3, append([]clusterOption{withSessionTimeout(testSessionTimeout), withLeaderImbalanceCheck(-time.Second)}, opts...)...)
	c.WaitForActive(t, activeTimeout)
	addrs := freeAddrs(t, len(ids))
	kafka := make(map[int32]string, len(ids))
	bopts := make([][]brokerOption, len(ids))
	for i, id := range ids {
		kafka[id] = addrs[i]
		bopts[i] = []brokerOption{withRack(fmt.Sprintf("r%d", id)), withBrokerFlags(append([]string{"--kafka-listen=" + addrs[i],
			"--replica-lag-time-max=1s", "--replica-fetch-interval=100ms"}, flags...)...)}
	}
	c.startBrokers(ids, bopts)
	c.WaitForBrokers(t, allActive(ids...))
	return c, kafka
}

// bootstrap is every Kafka listener of kafka, comma-free, for SeedBrokers.
func bootstrap(kafka map[int32]string) []string {
	var out []string
	for _, addr := range kafka {
		out = append(out, addr)
	}
	slices.Sort(out)
	return out
}

// kafkaClient is a franz-go client of the cluster, closed at the end of
// the test; metadata is refreshed quickly after an error, so that a
// failover costs the client little.
func kafkaClient(t *testing.T, kafka map[int32]string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(kafkaClientOpts(kafka), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// kafkaClientOpts are kafkaClient's options.
func kafkaClientOpts(kafka map[int32]string) []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(bootstrap(kafka)...), kgo.MetadataMinAge(100 * time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond })}
}

// ackedRecord is a record the producer's promise acknowledged.
type ackedRecord struct {
	partition int32
	tag       string // the producer's
	seq       int
	offset    int64
	value     string
	at        time.Time // when the promise fired
}

// streamProducer produces "p<partition>-<tag><seq>" to every partition of
// a topic, round robin, with an idempotent acks=all producer (franz-go's
// defaults: idempotent, retrying without limit), from a goroutine, until
// stop. It keeps every value it sent and every acknowledgement.
type streamProducer struct {
	t          *testing.T
	cl         *kgo.Client
	topic      string
	partitions int32
	tag        string

	stopOnce sync.Once
	stopCh   chan struct{}
	done     chan struct{}

	mu     sync.Mutex
	sent   map[string]bool // every value handed to the client
	acked  []ackedRecord   // in the order of the promises
	failed map[string]error
	seq    []int // the next sequence of each partition
}

// startProducer starts a streamProducer on a new client of kafka, its
// values tagged with tag; it is stopped at the end of the test at the
// latest.
func startProducer(t *testing.T, kafka map[int32]string, topic string, partitions int32, tag string, opts ...kgo.Opt) *streamProducer {
	t.Helper()
	opts = append([]kgo.Opt{kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MaxBufferedRecords(64)}, opts...)
	p := &streamProducer{t: t, cl: kafkaClient(t, kafka, opts...), topic: topic, partitions: partitions, tag: tag,
		stopCh: make(chan struct{}), done: make(chan struct{}), sent: map[string]bool{}, failed: map[string]error{},
		seq: make([]int, partitions)}
	go p.run()
	t.Cleanup(func() { p.stop(5 * time.Second) })
	return p
}

func (p *streamProducer) run() {
	defer close(p.done)
	for part := int32(0); ; part = (part + 1) % p.partitions {
		select {
		case <-p.stopCh:
			return
		default:
		}
		p.mu.Lock()
		seq := p.seq[part]
		p.seq[part]++
		value := fmt.Sprintf("p%d-%s%d", part, p.tag, seq)
		p.sent[value] = true
		p.mu.Unlock()
		// Produce blocks while 64 records are buffered: the producer goes
		// at the pace the cluster acknowledges.
		p.cl.Produce(context.Background(), &kgo.Record{Partition: part, Value: []byte(value)}, func(r *kgo.Record, err error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			if err != nil {
				p.failed[value] = err
				return
			}
			p.acked = append(p.acked, ackedRecord{partition: r.Partition, tag: p.tag, seq: seq, offset: r.Offset, value: value, at: time.Now()})
		})
	}
}

// ackedCount returns how many records have been acknowledged so far.
func (p *streamProducer) ackedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acked)
}

// waitAcked waits until n more records than now are acknowledged; what
// says why, for the failure message.
func (p *streamProducer) waitAcked(n int, what string) {
	p.t.Helper()
	p.waitAckedWithin(n, kafkaTimeout, what)
}

// waitAckedWithin is waitAcked for at most limit.
func (p *streamProducer) waitAckedWithin(n int, limit time.Duration, what string) {
	p.t.Helper()
	target := p.ackedCount() + n
	poll.UntilState(p.t, limit, fmt.Sprintf("%d acknowledged records (%s)", target, what), func() (bool, string) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.acked) >= target, fmt.Sprintf("%d acknowledged, %d failed, %d sent", len(p.acked), len(p.failed), len(p.sent))
	})
}

// stop ends the stream and waits up to timeout for every record sent to
// be acknowledged or failed; it reports whether they all were.
func (p *streamProducer) stop(timeout time.Duration) bool {
	p.stopOnce.Do(func() { close(p.stopCh) })
	// Produce may block on a full buffer: it returns once a promise frees
	// a slot, or when the client is closed (at the end of the test).
	select {
	case <-p.done:
	case <-time.After(timeout):
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return p.cl.Flush(ctx) == nil
}

// results returns the producer's values sent, acknowledgements and failures.
func (p *streamProducer) results() (sent map[string]bool, acked []ackedRecord, failed map[string]error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent, slices.Clone(p.acked), p.failed
}

// producedLog is what producers run one after another sent and had
// acknowledged, for checkAckedRecords.
type producedLog struct {
	sent  map[string]bool
	acked []ackedRecord
}

// produce runs a streamProducer of values tagged tag until n more records
// are acknowledged (what says when, for the failure message), stops it,
// and adds what it sent and had acknowledged; a record it gave up on fails
// the test.
func (l *producedLog) produce(t *testing.T, kafka map[int32]string, topic, tag string, n int, what string) {
	t.Helper()
	p := startProducer(t, kafka, topic, 1, tag)
	p.waitAcked(n, what)
	if !p.stop(kafkaTimeout) {
		t.Fatalf("producer %s did not finish: records still in flight after %s", tag, kafkaTimeout)
	}
	s, a, failed := p.results()
	for v, err := range failed {
		t.Errorf("%q: the producer gave up: %v", v, err)
	}
	if l.sent == nil {
		l.sent = map[string]bool{}
	}
	for v := range s {
		l.sent[v] = true
	}
	l.acked = append(l.acked, a...)
}

// consumedRecord is a record the consumer read.
type consumedRecord struct {
	offset      int64
	leaderEpoch int32
	value       string
}

// highWatermarks asks the partitions' leaders, through ListOffsets
// (latest), for their high watermarks.
func highWatermarks(t *testing.T, cl *kgo.Client, topic string, partitions int32) map[int32]int64 {
	t.Helper()
	var hw map[int32]int64
	poll.UntilState(t, kafkaTimeout, fmt.Sprintf("the high watermarks of %s's %d partitions", topic, partitions), func() (bool, string) {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		for p := range partitions {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = p, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = []kmsg.ListOffsetsRequestTopic{rt}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return false, err.Error()
		}
		hw = map[int32]int64{}
		var errs []string
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					errs = append(errs, fmt.Sprintf("partition %d: %v", rp.Partition, err))
					continue
				}
				hw[rp.Partition] = rp.Offset
			}
		}
		return len(hw) == int(partitions), fmt.Sprintf("answered %v; %s", hw, strings.Join(errs, "; "))
	})
	return hw
}

// consumeAll reads every partition of topic from its start up to its high
// watermark (hw) with a consumer without a group, and returns the records
// of each partition in the order read. opts add to the client's options.
func consumeAll(t *testing.T, kafka map[int32]string, topic string, hw map[int32]int64, opts ...kgo.Opt) map[int32][]consumedRecord {
	t.Helper()
	start := map[int32]kgo.Offset{}
	for p := range hw {
		start[p] = kgo.NewOffset().AtStart()
	}
	cl := kafkaClient(t, kafka, append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}))...)
	defer cl.Close()
	got := map[int32][]consumedRecord{}
	next := map[int32]int64{}
	poll.UntilState(t, kafkaTimeout, fmt.Sprintf("every partition of %s read up to its high watermark %v", topic, hw), func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fetches := cl.PollFetches(ctx)
		cancel()
		var errs []string
		fetches.EachError(func(topic string, p int32, err error) {
			if err != context.DeadlineExceeded {
				errs = append(errs, fmt.Sprintf("partition %d: %v", p, err))
			}
		})
		fetches.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], consumedRecord{offset: r.Offset, leaderEpoch: r.LeaderEpoch, value: string(r.Value)})
			next[r.Partition] = r.Offset + 1
		})
		done := true
		for p, end := range hw {
			done = done && next[p] >= end
		}
		return done, fmt.Sprintf("read up to %v; errors: %s", next, strings.Join(errs, "; "))
	})
	return got
}

// checkAckedRecords is the check of TestKafka_AckedRecordsSurviveLeaderKill
// (ackedRecordViolations), each violation a test error.
func checkAckedRecords(t *testing.T, sent map[string]bool, acked []ackedRecord, hw map[int32]int64, read map[int32][]consumedRecord,
	mayLose func(ackedRecord) bool) (lost, found, unacked int) {
	t.Helper()
	bad, lost, found, unacked := ackedRecordViolations(sent, acked, hw, read, mayLose)
	for _, v := range bad {
		t.Error(v.msg)
	}
	return lost, found, unacked
}

// logViolation is one broken rule of a partition's log, at an offset (-1
// when the rule is about the whole partition).
type logViolation struct {
	partition int32
	offset    int64
	msg       string
}

// ackedRecordViolations checks what was read of one topic: read holds
// each partition's records up to its high watermark hw. Every
// acknowledged record is there exactly once, at the offset it was
// acknowledged with; offsets have no gaps; every record read was sent by
// the test, none twice; per partition the acknowledged order of each
// producer is kept. mayLose, unless nil, says which acknowledged records
// may be missing (an unclean election): those are counted, not reported.
// It returns what broke the rules, how many acknowledged records are not
// where they were acknowledged (lost), how many are (found), and how many
// records read were sent but never acknowledged. It is shared by the Kafka
// tests and the data fault suite (faults_data_test.go).
func ackedRecordViolations(sent map[string]bool, acked []ackedRecord, hw map[int32]int64, read map[int32][]consumedRecord,
	mayLose func(ackedRecord) bool) (bad []logViolation, lost, found, unacked int) {
	errorf := func(p int32, off int64, format string, args ...any) {
		bad = append(bad, logViolation{partition: p, offset: off, msg: fmt.Sprintf(format, args...)})
	}
	at := map[int32]map[int64]consumedRecord{}
	seen := map[string]string{} // value -> where it was first read
	ackedValues := map[string]bool{}
	for _, a := range acked {
		ackedValues[a.value] = true
	}
	for _, p := range sortedKeys(read) {
		recs := read[p]
		at[p] = map[int64]consumedRecord{}
		for i, r := range recs {
			where := fmt.Sprintf("partition %d offset %d (leader epoch %d)", p, r.offset, r.leaderEpoch)
			if want := int64(i); r.offset != want {
				errorf(p, want, "%s: read as record %d from the start; want offset %d: a gap or a reordering (offsets read: %v)", where, i, want, offsetsOf(recs))
				break
			}
			if r.offset >= hw[p] {
				errorf(p, r.offset, "%s: at or past the high watermark %d", where, hw[p])
			}
			if !sent[r.value] {
				errorf(p, r.offset, "%s: %q was never produced by the test", where, r.value)
			}
			if !strings.HasPrefix(r.value, fmt.Sprintf("p%d-", p)) {
				errorf(p, r.offset, "%s: %q was produced to another partition", where, r.value)
			}
			if first, dup := seen[r.value]; dup {
				errorf(p, r.offset, "%s: %q read twice, first at %s", where, r.value, first)
			}
			seen[r.value] = where
			at[p][r.offset] = r
			if !ackedValues[r.value] {
				unacked++
			}
		}
		if n := int64(len(recs)); n != hw[p] {
			errorf(p, -1, "partition %d: %d records read from the start; want %d, the high watermark", p, n, hw[p])
		}
	}
	type stream struct {
		partition int32
		tag       string
	}
	last := map[stream]ackedRecord{}
	for _, a := range acked {
		r, ok := at[a.partition][a.offset]
		readAt, elsewhere := seen[a.value]
		switch {
		case ok && r.value == a.value:
			found++
		case elsewhere:
			lost++
			errorf(a.partition, a.offset, "partition %d offset %d: %q was acknowledged there, but is read at %s", a.partition, a.offset, a.value, readAt)
		case mayLose != nil && mayLose(a):
			lost++
		case !ok:
			lost++
			errorf(a.partition, a.offset, "partition %d offset %d: %q was acknowledged there, but nothing is there (high watermark %d)", a.partition, a.offset, a.value, hw[a.partition])
		default:
			lost++
			errorf(a.partition, a.offset, "partition %d offset %d: %q was acknowledged there, but %q is there, and %q is nowhere", a.partition, a.offset, a.value, r.value, a.value)
		}
		key := stream{a.partition, a.tag}
		if prev, ok := last[key]; ok && (a.seq <= prev.seq || a.offset <= prev.offset) {
			errorf(a.partition, a.offset, "partition %d: %q acknowledged at offset %d after %q at offset %d: the producer's order is not kept", a.partition, a.value, a.offset, prev.value, prev.offset)
		}
		last[key] = a
	}
	return bad, lost, found, unacked
}

func offsetsOf(recs []consumedRecord) []int64 {
	out := make([]int64, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.offset)
	}
	if len(out) > 40 {
		out = out[:40]
	}
	return out
}

// TestKafka_AckedRecordsSurviveLeaderKill: three brokers with Kafka
// listeners, an RF-3 topic of three partitions with min.insync.replicas=2
// (unclean election off, the default). An idempotent franz-go producer
// writes acks=all, all the time, while the broker leading partition 0 is
// killed with kill -9 (or stopped with SIGTERM: a controlled shutdown) and
// then started again, rejoining every ISR. A consumer then reads every
// partition from its start to its high watermark: every acknowledged
// record is there exactly once, at the offset its promise gave; offsets
// have no gaps; every record read was produced by the test; per partition
// the acknowledged order is kept.
func TestKafka_AckedRecordsSurviveLeaderKill(t *testing.T) {
	t.Parallel()
	for _, fault := range []string{"kill-9", "sigterm"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			c, kafka := startKafkaCluster(t, threeBrokers)
			const topic, partitions = "orders", 3
			c.createTopic(t, topic, "--partitions", "3", "--replication-factor", "3", "--config", "min.insync.replicas=2")
			d := c.WaitForTopic(t, topic, "led with full ISRs", func(d topicJSON) bool {
				return d.every(func(p partitionJSON) bool { return p.Leader > 0 && len(p.ISR) == 3 })
			})
			if v := d.config(t, "unclean.leader.election.enable"); v.Value != "false" {
				t.Fatalf("unclean.leader.election.enable: %+v; want false", v)
			}

			prod := startProducer(t, kafka, topic, partitions, "")
			prod.waitAcked(300, "before the fault")
			victim := d.partition(t, 0).Leader
			led := c.cliDescribe(t, topic).ledBy(victim)
			switch fault {
			case "kill-9":
				c.KillBroker(victim)
			case "sigterm":
				c.StopBroker(victim)
			}
			c.WaitForTopic(t, topic, fmt.Sprintf("led without broker %d", victim), func(d topicJSON) bool {
				return d.every(func(p partitionJSON) bool { return p.Leader > 0 && p.Leader != victim })
			})
			prod.waitAcked(300, fmt.Sprintf("with broker %d down", victim))
			c.RestartBroker(victim)
			c.WaitForTopic(t, topic, "back to full ISRs", func(d topicJSON) bool {
				return d.every(func(p partitionJSON) bool { return len(p.ISR) == 3 })
			})
			prod.waitAcked(300, fmt.Sprintf("with broker %d back in every ISR", victim))
			if !prod.stop(kafkaTimeout) {
				t.Fatalf("the producer did not finish: records still in flight after %s", kafkaTimeout)
			}
			sent, acked, failed := prod.results()
			for v, err := range failed {
				t.Errorf("%q: the producer gave up: %v", v, err)
			}

			reader := kafkaClient(t, kafka)
			hw := highWatermarks(t, reader, topic, partitions)
			read := consumeAll(t, kafka, topic, hw)
			lost, found, unacked := checkAckedRecords(t, sent, acked, hw, read, nil)
			t.Logf("%s of broker %d (leading partitions %v): %d records sent, %d acknowledged, %d failed; read up to the high watermarks %v: %d acknowledged found, %d acknowledged lost, %d never acknowledged",
				fault, victim, led, len(sent), len(acked), len(failed), hw, found, lost, unacked)
		})
	}
}

// TestKafka_UncleanElectionLossIsCounted documents what an unclean election
// loses, end to end: an RF-2 partition on brokers 1 and 2 with
// unclean.leader.election.enable=true and min.insync.replicas=1. Producer
// a writes acks=all with both in the ISR; broker 2 stops (SIGTERM) and
// producer b writes acks=all to broker 1 alone (the ISR [1] meets the
// minimum); broker 1 is killed with kill -9, leaving no live replica.
// Broker 2 comes back, stale, and is elected uncleanly (RECOVERING, then
// RECOVERED once it confirms); producer c writes to it; broker 1 comes
// back, truncates to broker 2's log and rejoins the ISR. A consumer reads
// the partition to its high watermark. What is guaranteed, and checked:
// the partition is led again, the log read is gap-free and holds only
// records the test produced, each at most once; every record acknowledged
// by a and c is at its offset; only records of b may be lost, and the loss
// counted is what was acknowledged minus what was found. The loss itself
// is expected (it is what unclean election means) and only logged.
func TestKafka_UncleanElectionLossIsCounted(t *testing.T) {
	t.Parallel()
	c, kafka := startKafkaCluster(t, threeBrokers)
	const topic = "unclean"
	c.createTopic(t, topic, "--assignment", "0:1,2",
		"--config", "unclean.leader.election.enable=true", "--config", "min.insync.replicas=1")
	c.WaitForTopic(t, topic, "led by broker 1, ISR [1 2]", func(d topicJSON) bool {
		p := d.Partitions[0]
		return p.Leader == 1 && sameSet(p.ISR, []int32{1, 2})
	})

	var produced producedLog
	produce := func(tag string, n int, what string) { t.Helper(); produced.produce(t, kafka, topic, tag, n, what) }

	produce("a", 200, "ISR [1 2]")
	ackedA := len(produced.acked)
	c.StopBroker(2)
	c.WaitForTopic(t, topic, "led by broker 1, ISR [1]", func(d topicJSON) bool {
		p := d.Partitions[0]
		return p.Leader == 1 && slices.Equal(p.ISR, []int32{1})
	})
	produce("b", 200, "ISR [1], broker 2 stopped")
	ackedB := len(produced.acked) - ackedA
	c.KillBroker(1)
	down := c.WaitForTopic(t, topic, "without a leader", func(d topicJSON) bool { return d.Partitions[0].Leader == noLeader }).partition(t, 0)

	c.RestartBroker(2)
	up := c.WaitForTopic(t, topic, "led by broker 2 (unclean), recovered", func(d topicJSON) bool {
		p := d.Partitions[0]
		return p.Leader == 2 && p.RecoveryState == stateRecovered
	}).partition(t, 0)
	if up.LeaderEpoch <= down.LeaderEpoch || !slices.Equal(up.ISR, []int32{2}) {
		t.Errorf("after the unclean election: %s; want leader 2 at a leader epoch above %d, ISR [2]", up, down.LeaderEpoch)
	}
	produce("c", 200, "broker 2 leading after the unclean election")
	ackedC := len(produced.acked) - ackedA - ackedB
	c.RestartBroker(1)
	c.WaitForTopic(t, topic, "ISR [1 2] again", func(d topicJSON) bool {
		p := d.Partitions[0]
		return p.Leader == 2 && sameSet(p.ISR, []int32{1, 2})
	})

	reader := kafkaClient(t, kafka)
	hw := highWatermarks(t, reader, topic, 1)
	read := consumeAll(t, kafka, topic, hw)
	lost, found, unacked := checkAckedRecords(t, produced.sent, produced.acked, hw, read, func(a ackedRecord) bool { return a.tag == "b" })
	if lost != len(produced.acked)-found {
		t.Errorf("%d acknowledged records counted lost; want %d acknowledged - %d found = %d", lost, len(produced.acked), found, len(produced.acked)-found)
	}
	t.Logf("unclean election of broker 2 (leader epoch %d -> %d): acknowledged a=%d (ISR [1 2]), b=%d (ISR [1]), c=%d (after the election); "+
		"read %d records up to the high watermark %d: %d acknowledged found, %d acknowledged lost (all of b: %v), %d never acknowledged",
		down.LeaderEpoch, up.LeaderEpoch, ackedA, ackedB, ackedC, len(read[0]), hw[0], found, lost, lost == ackedB, unacked)

	// The metadata log: the election set RECOVERING, broker 2's
	// AlterPartition RECOVERED, in that order.
	c.checkRecoveredInLog(t)
}

// TestKafka_RestartedBrokerServesOnceCaughtUp: a broker started again
// replays the metadata log from the controllers; until it has caught up its
// image has no topics. Its Kafka listener must not answer meanwhile, as a
// KRaft broker does not (it enables request processing after its initial
// catch-up): a Metadata answer saying UNKNOWN_TOPIC_OR_PARTITION makes
// franz-go give up on the topic's buffered records after a few retries (the
// data fault suite found it: thousands of records failed so). The first
// Metadata answer the restarted broker gives names the topic and its
// partitions.
func TestKafka_RestartedBrokerServesOnceCaughtUp(t *testing.T) {
	t.Parallel()
	c, kafka := startKafkaCluster(t, threeBrokers)
	const topic = "restart"
	c.createTopic(t, topic, "--partitions", "3", "--replication-factor", "3")
	c.WaitForTopic(t, topic, "led with full ISRs", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return p.Leader > 0 && len(p.ISR) == 3 })
	})
	const victim = 3
	c.StopBroker(victim)
	c.RestartBroker(victim)
	cl := kafkaClient(t, map[int32]string{victim: kafka[victim]})
	seed := cl.SeedBrokers()[0]
	var first *kmsg.MetadataResponse
	poll.UntilState(t, kafkaTimeout, fmt.Sprintf("a Metadata answer from the restarted broker %d", victim), func() (bool, string) {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = []kmsg.MetadataRequestTopic{rt}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := seed.Request(ctx, req)
		if err != nil {
			return false, err.Error()
		}
		first = resp.(*kmsg.MetadataResponse)
		return true, ""
	})
	if len(first.Topics) != 1 || first.Topics[0].ErrorCode != 0 || len(first.Topics[0].Partitions) != 3 {
		var got []string
		for _, mt := range first.Topics {
			name := "(no name)"
			if mt.Topic != nil {
				name = *mt.Topic
			}
			got = append(got, fmt.Sprintf("%s: error %v, %d partitions", name, kerr.ErrorForCode(mt.ErrorCode), len(mt.Partitions)))
		}
		t.Errorf("the restarted broker's first Metadata answer for %s: %v; want the topic with its 3 partitions", topic, got)
	}
}

// TestKafka_ConsumerResetsByTime: franz-go consumers that start by time
// (ConsumeResetOffset with AfterMilli, KIP-79's ListOffsets by timestamp;
// LookbackOffset, which asks for the newest record's timestamp, KIP-734's
// -3) against real brokers, after the leader that took the records was
// killed with kill -9: the new leader's replica answers, and each consumer
// starts at the first record stamped at or after its time, in offset
// order, and reads every record from there.
func TestKafka_ConsumerResetsByTime(t *testing.T) {
	t.Parallel()
	c, kafka := startKafkaCluster(t, threeBrokers)
	const topic = "bytime"
	c.createTopic(t, topic, "--partitions", "1", "--replication-factor", "3", "--config", "min.insync.replicas=2")
	d := c.WaitForTopic(t, topic, "led with a full ISR", func(d topicJSON) bool {
		return d.Partitions[0].Leader > 0 && len(d.Partitions[0].ISR) == 3
	})
	// 30 records a second apart, an hour ago, each in its own batch;
	// record 20 is stamped before record 10 (a client's clock may go back).
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	stamp := func(i int) time.Time {
		if i == 20 {
			return base.Add(5 * time.Second)
		}
		return base.Add(time.Duration(i) * time.Second)
	}
	producer := kafkaClient(t, kafka, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	for i := range 30 {
		r := &kgo.Record{Value: fmt.Appendf(nil, "r%d", i), Timestamp: stamp(i)}
		if err := producer.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if r.Offset != int64(i) {
			t.Fatalf("record %d acknowledged at offset %d", i, r.Offset)
		}
	}
	old := d.Partitions[0].Leader
	c.KillBroker(old)
	c.WaitForTopic(t, topic, fmt.Sprintf("led by another broker than %d", old), func(d topicJSON) bool {
		return d.Partitions[0].Leader > 0 && d.Partitions[0].Leader != old
	})

	for _, tc := range []struct {
		name  string
		reset kgo.Offset
		first int64
	}{
		{"before every record", kgo.NewOffset().AfterMilli(base.Add(-time.Minute).UnixMilli()), 0},
		{"a record's own time", kgo.NewOffset().AfterMilli(stamp(12).UnixMilli()), 12},
		{"between two records", kgo.NewOffset().AfterMilli(stamp(12).Add(500 * time.Millisecond).UnixMilli()), 13},
		{"an earlier offset before an earlier stamp", kgo.NewOffset().AfterMilli(stamp(5).UnixMilli()), 5},
		{"the newest record less 3 s", kgo.LookbackOffset(3 * time.Second), 26},
	} {
		cl := kafkaClient(t, kafka, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(tc.reset))
		var got []int64
		poll.UntilState(t, kafkaTimeout, fmt.Sprintf("%s: records from offset %d to 29", tc.name, tc.first), func() (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			fetches := cl.PollFetches(ctx)
			cancel()
			var errs []string
			fetches.EachError(func(_ string, _ int32, err error) {
				if err != context.DeadlineExceeded {
					errs = append(errs, err.Error())
				}
			})
			fetches.EachRecord(func(r *kgo.Record) { got = append(got, r.Offset) })
			return len(got) > 0 && got[len(got)-1] == 29, fmt.Sprintf("read offsets %v; errors: %s", got, strings.Join(errs, "; "))
		})
		cl.Close()
		if len(got) == 0 || got[0] != tc.first || int64(len(got)) != 30-tc.first {
			t.Errorf("%s: read offsets %v; want %d to 29", tc.name, got, tc.first)
		}
	}

	// A time after every record: the consumer starts at the end, and reads
	// what is produced next.
	cl := kafkaClient(t, kafka, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(time.Now().UnixMilli())))
	var next *kgo.Record
	poll.UntilState(t, kafkaTimeout, "the record produced after the consumer started", func() (bool, string) {
		if err := producer.ProduceSync(context.Background(), &kgo.Record{Value: []byte("later")}).FirstErr(); err != nil {
			return false, err.Error()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fetches := cl.PollFetches(ctx)
		cancel()
		if recs := fetches.Records(); len(recs) > 0 {
			next = recs[0]
			return true, ""
		}
		return false, "nothing read yet"
	})
	if next.Offset < 30 || string(next.Value) != "later" {
		t.Errorf("after every record: read %q at offset %d, want a later record at offset 30 or after", next.Value, next.Offset)
	}
}
