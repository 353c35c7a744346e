package integration

// Kafka's own clients against real keel processes (issue 18): kcat and the
// Python client of Debian's python3-confluent-kafka, both on librdkafka
// 2.0.2. Each creates a topic through the brokers, produces with acks=all
// and an idempotent producer, has the partition's leader killed with
// kill -9 under it, produces more, and consumes everything; the test
// checks what the client reported: every delivery it acknowledged is read
// back exactly once, at the offset it reported, from a gap-free log.
//
// `make test-clients` installs both with apt-get and runs these tests with
// KEEL_CLIENTS_REQUIRED=1, so that a missing client fails them; `make
// test` runs each where its client is installed and skips it otherwise.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/internal/poll"
)

// clientTimeout bounds one client run that spans a leader kill: a session
// timeout, an election, the client's metadata refresh and its retries.
const clientTimeout = 3 * time.Minute

// clientMissing skips the test for want (a client that is not installed:
// err says why), or fails it under KEEL_CLIENTS_REQUIRED; pkg is the
// Debian package that has it.
func clientMissing(t *testing.T, want, pkg string, err error) {
	t.Helper()
	if os.Getenv("KEEL_CLIENTS_REQUIRED") != "" {
		t.Fatalf("%s is not installed (%v), and KEEL_CLIENTS_REQUIRED is set: make test-clients installs it (apt-get install %s)", want, err, pkg)
	}
	t.Skipf("%s is not installed (%v): `make test-clients` installs it (apt-get install %s) and runs this test", want, err, pkg)
}

// pythonWithConfluentKafka finds a python3 that imports confluent_kafka:
// Debian's /usr/bin/python3 first (python3-confluent-kafka installs there,
// and a python3 earlier on PATH, pyenv's or a venv's, may not see it),
// then python3 on PATH.
func pythonWithConfluentKafka(t *testing.T) string {
	t.Helper()
	var tried []string
	candidates := []string{"/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil && p != candidates[0] {
		candidates = append(candidates, p)
	}
	for _, py := range candidates {
		out, err := exec.Command(py, "-c", "import confluent_kafka; print(confluent_kafka.version()[0], confluent_kafka.libversion()[0])").CombinedOutput()
		if err == nil {
			t.Logf("%s: confluent-kafka %s", py, strings.TrimSpace(string(out)))
			return py
		}
		tried = append(tried, fmt.Sprintf("%s: %v %s", py, err, lastLine(string(out))))
	}
	clientMissing(t, "Python's confluent_kafka", "python3-confluent-kafka", fmt.Errorf("%s", strings.Join(tried, "; ")))
	return ""
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// createTopicThroughBrokers creates topic with Kafka's CreateTopics, sent
// by franz-go to a broker's Kafka listener (which forwards it to the
// active controller), as a Kafka admin client does: kcat cannot create
// topics.
func createTopicThroughBrokers(t *testing.T, kafka map[int32]string, topic string, partitions int32, rf int16, configs map[string]string) {
	t.Helper()
	cl := kafkaClient(t, kafka)
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30000
	req.Topics = append(req.Topics, createTopicsTopic(topic, partitions, rf, configs))
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("CreateTopics %s: %v", topic, err)
	}
	if len(resp.Topics) != 1 {
		t.Fatalf("CreateTopics %s: %d topics answered", topic, len(resp.Topics))
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		msg := ""
		if m := resp.Topics[0].ErrorMessage; m != nil {
			msg = *m
		}
		t.Fatalf("CreateTopics %s: %v %s", topic, err, msg)
	}
}

// highWatermark asks partition 0's leader for its high watermark, once.
func highWatermark(cl *kgo.Client, topic string) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Timestamp = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return -1, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return -1, fmt.Errorf("ListOffsets answered %d topics", len(resp.Topics))
	}
	p := resp.Topics[0].Partitions[0]
	return p.Offset, kerr.ErrorForCode(p.ErrorCode)
}

// kcatDelivered is the delivery report kcat -P prints at verbosity 3
// (-v -v) for each message acknowledged.
var kcatDelivered = regexp.MustCompile(`(?m)^% Message delivered to partition (\d+) \(offset (-?\d+)\) on broker (-?\d+)$`)

// kcatProducer is one `kcat -P` run of n lines "p0-<tag><i>" to
// partition 0, acks=all, idempotent, with a delivery report per message
// (-v -v).
type kcatProducer struct {
	tag    string
	lines  []string
	stderr syncBuffer
	exited chan error
}

// startKcatProducer starts kcat -P with all its input at once: kcat 1.7
// sends nothing before its input ends (it produces at the flush that
// follows EOF, whatever is written before), so a run is one phase of the
// test, and a run may be started just before a kill to have messages in
// flight when the leader dies.
func startKcatProducer(t *testing.T, kcat, seeds, topic, tag string, n int, extra ...string) *kcatProducer {
	t.Helper()
	p := &kcatProducer{tag: tag, exited: make(chan error, 1)}
	var in strings.Builder
	for i := range n {
		v := fmt.Sprintf("p0-%s%d", tag, i)
		p.lines = append(p.lines, v)
		in.WriteString(v + "\n")
	}
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	args := append([]string{"-P", "-b", seeds, "-t", topic, "-p", "0",
		"-X", "acks=all", "-X", "enable.idempotence=true", "-X", "message.timeout.ms=120000", "-v", "-v"}, extra...)
	cmd := exec.CommandContext(ctx, kcat, args...)
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdin = strings.NewReader(in.String())
	cmd.Stderr = &p.stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		p.exited <- cmd.Wait()
		cancel()
	}()
	t.Cleanup(func() {
		cancel()
		err := <-p.exited
		p.exited <- err
	})
	return p
}

// wait waits for kcat to exit 0 having reported a delivery for each line,
// and returns them: one partition, an idempotent producer, so reports
// come in the order of the lines (the order check of checkAckedRecords
// holds kcat to it).
func (p *kcatProducer) wait(t *testing.T) (acked []ackedRecord, byBroker map[string]int) {
	t.Helper()
	err := <-p.exited
	p.exited <- err
	report := p.stderr.String()
	if err != nil {
		t.Fatalf("kcat -P (%s): %v\nstderr:\n%s", p.tag, err, report)
	}
	byBroker = map[string]int{}
	for i, m := range kcatDelivered.FindAllStringSubmatch(report, -1) {
		off, _ := strconv.ParseInt(m[2], 10, 64)
		if i >= len(p.lines) || m[1] != "0" {
			t.Fatalf("kcat -P (%s) reported delivery %d (%q) of %d lines", p.tag, i, m[0], len(p.lines))
		}
		acked = append(acked, ackedRecord{partition: 0, tag: p.tag, seq: i, offset: off, value: p.lines[i]})
		byBroker[m[3]]++
	}
	if len(acked) != len(p.lines) || strings.Contains(report, "Delivery failed") {
		t.Fatalf("kcat -P (%s) exited 0 but reported %d deliveries of %d lines\nstderr:\n%s", p.tag, len(acked), len(p.lines), report)
	}
	return acked, byBroker
}

// TestKcat_ProduceThroughLeaderKill: issue 18 with kcat. A topic of one
// partition, 3 replicas and min.insync.replicas=2 is created with Kafka's
// CreateTopics through a broker's listener (franz-go's request, kmsg's
// CreateTopicsRequest: kcat cannot create topics). `kcat -P -X acks=all -X
// enable.idempotence=true -v -v` writes 50 lines; a second run writes 500
// in requests of 10 messages, and the partition's leader is killed with
// kill -9 once the first of them are committed (the rest are in flight or
// queued); a third run writes 50 more to the new leader. Each run
// must exit 0 having reported a delivery ("Message delivered to partition
// 0 (offset N)") for each of its lines; `kcat -C -e` then reads each line
// exactly once, at the offset kcat reported for it, from a gap-free log.
func TestKcat_ProduceThroughLeaderKill(t *testing.T) {
	kcat := kcatPath(t)
	t.Parallel()
	c, kafka := startKafkaCluster(t, threeBrokers)
	seeds := strings.Join(bootstrap(kafka), ",")
	const topic = "kcat-kill"
	createTopicThroughBrokers(t, kafka, topic, 1, 3, map[string]string{"min.insync.replicas": "2"})
	d := c.WaitForTopic(t, topic, "led with a full ISR", func(d topicJSON) bool {
		return d.Partitions[0].Leader > 0 && len(d.Partitions[0].ISR) == 3
	})
	victim := d.Partitions[0].Leader

	sent := map[string]bool{}
	var acked []ackedRecord
	byBroker := map[string]int{}
	run := func(p *kcatProducer) {
		t.Helper()
		for _, v := range p.lines {
			sent[v] = true
		}
		a, by := p.wait(t)
		acked = append(acked, a...)
		for b, n := range by {
			byBroker[p.tag+"@"+b] += n
		}
	}
	run(startKcatProducer(t, kcat, seeds, topic, "a", 50))
	// 500 lines in requests of 10 messages, 5 in flight at most: the
	// leader is killed once the first are committed, mid-run.
	inFlight := startKcatProducer(t, kcat, seeds, topic, "b", 500, "-X", "batch.num.messages=10")
	reader := kafkaClient(t, kafka)
	poll.UntilState(t, kafkaTimeout, "the second kcat run's first records committed", func() (bool, string) {
		hw, err := highWatermark(reader, topic)
		return hw > 50, fmt.Sprintf("high watermark %d, %v", hw, err)
	})
	c.KillBroker(victim)
	run(inFlight)
	run(startKcatProducer(t, kcat, seeds, topic, "c", 50))

	out := mustKcat(t, kcat, "", "-C", "-b", seeds, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q", "-f", `%o %s\n`)
	var read []consumedRecord
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		off, value, ok := strings.Cut(line, " ")
		n, err := strconv.ParseInt(off, 10, 64)
		if !ok || err != nil {
			t.Fatalf("kcat -C printed %q", line)
		}
		read = append(read, consumedRecord{offset: n, value: value})
	}
	hw := highWatermarks(t, reader, topic, 1)
	lost, found, unacked := checkAckedRecords(t, sent, acked, hw, map[int32][]consumedRecord{0: read}, nil)
	if lost != 0 || found != len(sent) {
		t.Errorf("%d of %d deliveries kcat reported found where it reported them, %d lost", found, len(sent), lost)
	}
	t.Logf("kcat -P before, across and after the kill -9 of broker %d (the leader): %d lines, %d deliveries reported (run@broker: %v); kcat -C read %d records up to the high watermark %d, %d never acknowledged",
		victim, len(sent), len(acked), byBroker, len(read), hw[0], unacked)
}

// pyMsg is one JSON line of testdata/clients.py.
type pyMsg struct {
	Op            string   `json:"op"`
	Topic         string   `json:"topic"`
	Value         string   `json:"value"`
	Partition     int32    `json:"partition"`
	Offset        int64    `json:"offset"`
	Error         *string  `json:"error"`
	Count         int      `json:"count"`
	Remaining     int      `json:"remaining"`
	HighWatermark int64    `json:"high_watermark"`
	NextOffset    int64    `json:"next_offset"`
	Errors        []string `json:"errors"`
}

// pyClient runs testdata/clients.py: commands on its stdin, JSON lines
// from its stdout, delivery reports and records kept as they come.
type pyClient struct {
	t         *testing.T
	stdin     io.WriteCloser
	lines     chan pyMsg
	stderr    syncBuffer
	exited    chan error
	delivered []pyMsg
	records   []pyMsg
}

func startPyClient(t *testing.T, python, bootstrap string) *pyClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*clientTimeout)
	cmd := exec.CommandContext(ctx, python, "testdata/clients.py", bootstrap)
	cmd.WaitDelay = 5 * time.Second
	p := &pyClient{t: t, lines: make(chan pyMsg, 1024), exited: make(chan error, 1)}
	cmd.Stderr = &p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m pyMsg
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = pyMsg{Op: "unparsed", Value: sc.Text()}
			}
			p.lines <- m
		}
	}()
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		err := <-p.exited
		if t.Failed() {
			t.Logf("clients.py exited: %v\nstderr:\n%s", err, p.stderr.String())
		}
	})
	p.await("ready", clientTimeout)
	return p
}

// send writes one command line.
func (p *pyClient) send(format string, args ...any) {
	p.t.Helper()
	if _, err := fmt.Fprintf(p.stdin, format+"\n", args...); err != nil {
		p.t.Fatalf("clients.py: %v\nstderr:\n%s", err, p.stderr.String())
	}
}

// await reads lines until one of op, keeping delivery reports and records
// on the way; within is the limit.
func (p *pyClient) await(op string, within time.Duration) pyMsg {
	p.t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		select {
		case m, ok := <-p.lines:
			if !ok {
				p.t.Fatalf("clients.py ended before %q\nstderr:\n%s", op, p.stderr.String())
			}
			switch m.Op {
			case "delivered":
				p.delivered = append(p.delivered, m)
			case "record":
				p.records = append(p.records, m)
			case "unparsed", "error":
				p.t.Fatalf("clients.py: %+v\nstderr:\n%s", m, p.stderr.String())
			}
			if m.Op == op {
				return m
			}
		case <-deadline.C:
			p.t.Fatalf("clients.py: no %q within %s (%d deliveries so far)\nstderr:\n%s", op, within, len(p.delivered), p.stderr.String())
		}
	}
}

// awaitDelivered waits until n delivery reports in all have come.
func (p *pyClient) awaitDelivered(n int) {
	p.t.Helper()
	deadline := time.Now().Add(clientTimeout)
	for len(p.delivered) < n {
		left := time.Until(deadline)
		if left <= 0 {
			p.t.Fatalf("clients.py: %d of %d delivery reports within %s\nstderr:\n%s", len(p.delivered), n, clientTimeout, p.stderr.String())
		}
		p.await("delivered", left)
	}
}

// TestPythonClient_ProduceThroughLeaderKill: issue 18 with the Python
// client of Debian's python3-confluent-kafka 1.7 (librdkafka 2.0.2), run
// by testdata/clients.py. AdminClient.create_topics makes a topic of one
// partition, 3 replicas and min.insync.replicas=2 through the brokers; one
// Producer (enable.idempotence, acks=all, requests of 10 messages) writes
// 100 values, every delivery reported; 500 more, and the partition's
// leader is killed with kill -9 once 10 of them are delivered (the rest
// are in flight or queued); 100 more, then flush. A
// Consumer with assign() (no group: Keel serves none) reads from the
// beginning to the high watermark. Every delivery the client reported
// without an error is read exactly once at the offset it reported, the
// log is gap-free, and every delivery of a producer that flushed cleanly
// succeeded.
func TestPythonClient_ProduceThroughLeaderKill(t *testing.T) {
	python := pythonWithConfluentKafka(t)
	t.Parallel()
	c, kafka := startKafkaCluster(t, threeBrokers)
	py := startPyClient(t, python, strings.Join(bootstrap(kafka), ","))
	const topic = "python-kill"
	py.send("create %s 1 3 min.insync.replicas=2", topic)
	if m := py.await("created", clientTimeout); m.Error != nil {
		t.Fatalf("AdminClient.create_topics: %s", *m.Error)
	}
	d := c.WaitForTopic(t, topic, "led with a full ISR", func(d topicJSON) bool {
		return d.Partitions[0].Leader > 0 && len(d.Partitions[0].ISR) == 3
	})
	victim := d.Partitions[0].Leader

	py.send("produce %s 0 p0-a 0 100", topic)
	py.awaitDelivered(100)
	py.send("produce %s 0 p0-b 0 500", topic)
	py.awaitDelivered(110) // the kill lands mid-stream
	c.KillBroker(victim)
	py.send("produce %s 0 p0-c 0 100", topic)
	py.send("flush %d", int(clientTimeout.Seconds()))
	if m := py.await("flushed", clientTimeout+30*time.Second); m.Remaining != 0 {
		t.Fatalf("flush: %d messages still undelivered", m.Remaining)
	}

	sent := map[string]bool{}
	for _, tag := range []struct {
		name string
		n    int
	}{{"a", 100}, {"b", 500}, {"c", 100}} {
		for i := range tag.n {
			sent[fmt.Sprintf("p0-%s%d", tag.name, i)] = true
		}
	}
	var acked []ackedRecord
	var failed []string
	for _, m := range py.delivered {
		if m.Error != nil {
			failed = append(failed, fmt.Sprintf("%s: %s", m.Value, *m.Error))
			continue
		}
		tag := strings.TrimRight(strings.TrimPrefix(m.Value, "p0-"), "0123456789")
		seq, _ := strconv.Atoi(strings.TrimPrefix(m.Value, "p0-"+tag))
		acked = append(acked, ackedRecord{partition: m.Partition, tag: tag, seq: seq, offset: m.Offset, value: m.Value})
	}
	if len(py.delivered) != len(sent) || len(failed) > 0 {
		t.Errorf("%d delivery reports for %d values; failed: %v", len(py.delivered), len(sent), failed)
	}

	py.send("consume %s 0", topic)
	done := py.await("consumed", clientTimeout)
	if len(done.Errors) > 0 || done.NextOffset != done.HighWatermark {
		t.Errorf("the consumer read up to %d of the high watermark %d; errors: %v", done.NextOffset, done.HighWatermark, done.Errors)
	}
	py.send("quit")
	var read []consumedRecord
	for _, r := range py.records {
		read = append(read, consumedRecord{offset: r.Offset, value: r.Value})
	}
	hw := highWatermarks(t, kafkaClient(t, kafka), topic, 1)
	if done.HighWatermark != hw[0] {
		t.Errorf("the Python consumer saw the high watermark %d, franz-go %d", done.HighWatermark, hw[0])
	}
	lost, found, unacked := checkAckedRecords(t, sent, acked, hw, map[int32][]consumedRecord{0: read}, nil)
	if lost != 0 || found != len(sent) {
		t.Errorf("%d of %d deliveries found where the client reported them, %d lost", found, len(sent), lost)
	}
	t.Logf("confluent-kafka across the kill -9 of broker %d (the leader): %d values, %d delivered, %d failed; read %d records up to the high watermark %d, %d never acknowledged",
		victim, len(sent), len(acked), len(failed), len(read), hw[0], unacked)
}
