package integration

// Issue 32: `keel produce` and `keel consume` name the cause of a failure
// and exit non-zero, and a Kafka client producing to a topic that does not
// exist has it created when the cluster's auto.create.topics.enable allows
// it, with the client's principal authorized as for CreateTopics.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runStdin runs exe with args, stdin as its input, and returns what it
// printed and how it exited; the process is killed if it outlives timeout.
func runStdin(exe, stdin string, timeout time.Duration, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("did not exit within %s: %w", timeout, err)
	}
	return out.String(), errOut.String(), err
}

// keelIn runs a keel subcommand with stdin to completion (at most
// timeout) and returns its stdout, stderr and exit code.
func keelIn(t *testing.T, stdin string, timeout time.Duration, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	stdout, stderr, err := runStdin(keelBin, stdin, timeout, args...)
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return stdout, stderr, exit.ExitCode()
	case err != nil:
		t.Fatalf("keel %s: %v", strings.Join(args, " "), err)
	}
	return stdout, stderr, 0
}

// topicExists says whether the cluster has topic, as the active
// controller answers `keel topic list`.
func (c *Cluster) topicExists(t *testing.T, topic string) bool {
	t.Helper()
	for _, l := range c.cliTopicList(t) {
		if l.Name == topic {
			return true
		}
	}
	return false
}

// TestCLI_KafkaCommandsNameTheirCause: against broker 1's Kafka
// listener, `keel consume` fails at once, exit status 1 and one line on
// stderr, when nothing listens at --bootstrap, the topic does not exist or
// the partition does not; with nothing to read before --timeout it says
// what the topic holds; `keel produce` creates a new topic on first use
// and says so, and once auto.create.topics.enable is false fails naming
// the config; with broker 2, a partition's only replica, killed, both name
// the partition without a leader. Before issue 32 consume printed only "0
// of 1 records before the timeout" in each case.
func TestCLI_KafkaCommandsNameTheirCause(t *testing.T) {
	t.Parallel()
	c, kafka := startKafkaCluster(t, []int32{1, 2})
	bootstrap := kafka[1]
	c.createTopic(t, "empty", "--partitions", "3", "--replication-factor", "1")
	c.WaitForTopic(t, "empty", "every partition led", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return p.Leader > 0 })
	})
	nobody := freeAddrs(t, 1)[0]

	fails := func(t *testing.T, stdin string, want string, args ...string) {
		t.Helper()
		stdout, stderr, code := keelIn(t, stdin, time.Minute, args...)
		line := strings.TrimSpace(stderr)
		if code != 1 || !strings.Contains(line, want) || strings.Contains(line, "\n") {
			t.Fatalf("keel %s: exit status %d, stderr %q; want status 1 and one line holding %q (stdout %q)",
				strings.Join(args, " "), code, line, want, stdout)
		}
		t.Logf("keel %s: %s", strings.Join(args, " "), line)
	}
	consume := func(topic string, extra ...string) []string {
		return append([]string{"consume", "--topic", topic, "--max", "1", "--timeout", "2s", "--bootstrap", bootstrap}, extra...)
	}

	t.Run("consume", func(t *testing.T) {
		fails(t, "", "nothing is listening at "+nobody+" (--bootstrap): connection refused",
			"consume", "--topic", "empty", "--max", "1", "--bootstrap", nobody)
		fails(t, "", "topic nosuch does not exist", consume("nosuch")...)
		fails(t, "", "topic empty has 3 partitions (0 to 2), no partition 7", consume("empty", "--partition", "7")...)
		fails(t, "", "0 of 1 record in 2s (--timeout): topic empty has 3 partitions, holding no records", consume("empty", "--from-beginning")...)
		if c.topicExists(t, "nosuch") {
			t.Fatal("keel consume created the topic it was asked to read")
		}
	})

	t.Run("produce", func(t *testing.T) {
		stdout, stderr, code := keelIn(t, "one\n", time.Minute, "produce", "--topic", "fresh", "--bootstrap", bootstrap)
		if code != 0 || strings.TrimSpace(stdout) != "produced 1 record to fresh" || !strings.Contains(stderr, "topic fresh did not exist: the cluster created it") {
			t.Fatalf("keel produce to a new topic: exit status %d\nstdout %q\nstderr %q", code, stdout, stderr)
		}
		if out, _, code := keelIn(t, "", time.Minute, consume("fresh", "--from-beginning")...); code != 0 || !strings.Contains(out, ": one") {
			t.Fatalf("keel consume of the created topic: exit status %d, %q", code, out)
		}
		fails(t, "", "0 of 1 record in 2s (--timeout): topic fresh has 1 partition, holding 1 record, all before the end where the consumer started",
			consume("fresh")...)

		if _, stderr, code := runKeel(t, time.Minute, c.adminArgs("config", "alter", "--config", "auto.create.topics.enable=false")...); code != 0 {
			t.Fatalf("keel config alter: %s", stderr)
		}
		fails(t, "one\n", "line 1 not acknowledged: topic fresher does not exist, and the cluster does not create topics on first use",
			"produce", "--topic", "fresher", "--timeout", "10s", "--bootstrap", bootstrap)
		fails(t, "one\n", "nothing is listening at "+nobody, "produce", "--topic", "fresh", "--bootstrap", nobody)
		// The other commands that speak Kafka say it too.
		for _, args := range [][]string{{"partition", "offsets", "fresh"}, {"partition", "log-dirs"}, {"group", "list"}} {
			fails(t, "", "nothing is listening at "+nobody+" (--bootstrap)", append(args, "--bootstrap", nobody)...)
		}
		if c.topicExists(t, "fresher") {
			t.Fatal("the topic was created with auto.create.topics.enable=false")
		}
	})

	t.Run("no leader", func(t *testing.T) {
		c.createTopic(t, "lonely", "--assignment", "0:2")
		c.KillBroker(2)
		c.WaitForTopic(t, "lonely", "without a leader", func(d topicJSON) bool {
			return d.every(func(p partitionJSON) bool { return p.Leader < 0 })
		})
		const want = "partition 0 of topic lonely has no leader: broker 2 is offline (replicas 2)"
		fails(t, "one\n", "line 1 not acknowledged: "+want, "produce", "--topic", "lonely", "--timeout", "3s", "--bootstrap", bootstrap)
		fails(t, "", "0 of 1 record in 2s (--timeout): "+want, consume("lonely", "--partition", "0")...)
	})
}

// TestAutoCreate_FranzGo: franz-go's producer with AllowAutoTopicCreation
// (a Metadata request that allows it, as Kafka's producers send) has a new
// topic created with the cluster's num.partitions and
// default.replication.factor and produces to it; with
// auto.create.topics.enable=false it fails with UNKNOWN_TOPIC_OR_PARTITION
// and nothing is created.
func TestAutoCreate_FranzGo(t *testing.T) {
	t.Parallel()
	c, kafka := startKafkaCluster(t, threeBrokers)
	if _, stderr, code := runKeel(t, time.Minute, c.adminArgs("config", "alter",
		"--config", "num.partitions=4", "--config", "default.replication.factor=3")...); code != 0 {
		t.Fatalf("keel config alter: %s", stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()

	cl := kafkaClient(t, kafka, kgo.AllowAutoTopicCreation(), kgo.RecordDeliveryTimeout(30*time.Second))
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "made", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatalf("produce to a new topic with auto.create.topics.enable on: %v", err)
	}
	made := c.cliDescribe(t, "made")
	if len(made.Partitions) != 4 || len(made.Partitions[0].Replicas) != 3 {
		t.Fatalf("the auto-created topic has %d partitions of %d replicas; want num.partitions 4, default.replication.factor 3",
			len(made.Partitions), len(made.Partitions[0].Replicas))
	}

	if _, stderr, code := runKeel(t, time.Minute, c.adminArgs("config", "alter", "--config", "auto.create.topics.enable=false")...); code != 0 {
		t.Fatalf("keel config alter: %s", stderr)
	}
	// Every broker replays the change: a fresh client for each topic, so
	// that none is remembered.
	for _, topic := range []string{"unmade-1", "unmade-2", "unmade-3"} {
		off := kafkaClient(t, kafka, kgo.AllowAutoTopicCreation(), kgo.RecordDeliveryTimeout(30*time.Second))
		err := off.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("v")}).FirstErr()
		if !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Fatalf("produce to %s with auto.create.topics.enable=false: %v; want UNKNOWN_TOPIC_OR_PARTITION", topic, err)
		}
		if c.topicExists(t, topic) {
			t.Fatalf("%s was created with auto.create.topics.enable=false", topic)
		}
	}
}

// TestAutoCreate_NeedsCreate: on a TLS cluster an application's
// certificate with WRITE and DESCRIBE on a topic that does not exist, but
// no CREATE, is refused its auto-creation with TOPIC_AUTHORIZATION_FAILED
// (Kafka's handleTopicMetadataRequest) and nothing is created; with CREATE
// on the topic its producer creates it and produces.
func TestAutoCreate_NeedsCreate(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	c, kafka := startKafkaCluster(t, []int32{1}, withTLS(pki))
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	const topic = "app-events"
	adm := kafkaAdmin(t, kafka, kafkaTLS(pki, "admin"))
	grant := func(ops ...kadm.ACLOperation) {
		t.Helper()
		res, err := adm.CreateACLs(ctx, kadm.NewACLs().Allow("User:app-orders").AllowHosts("*").Topics(topic).
			Operations(ops...).ResourcePatternType(kadm.ACLPatternLiteral))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatalf("CreateAcls %s: %v", r.Operation, r.Err)
			}
		}
	}
	grant(kadm.OpWrite, kadm.OpDescribe)

	app := kafkaClient(t, kafka, appTLS(t, pki, "app-orders"), kgo.AllowAutoTopicCreation(), kgo.RecordDeliveryTimeout(10*time.Second))
	if err := app.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("v")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("produce to a new topic without CREATE: %v; want TOPIC_AUTHORIZATION_FAILED", err)
	}
	if c.topicExists(t, topic) {
		t.Fatal("a client without CREATE had the topic created")
	}

	grant(kadm.OpCreate)
	app = kafkaClient(t, kafka, appTLS(t, pki, "app-orders"), kgo.AllowAutoTopicCreation(), kgo.RecordDeliveryTimeout(30*time.Second))
	if err := app.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatalf("produce to a new topic with CREATE on it: %v", err)
	}
	if !c.topicExists(t, topic) {
		t.Fatal("the topic is not listed after its auto-creation")
	}
}

// TestKcat_ProduceCreatesTopic: kcat -P to a topic that does not exist
// (librdkafka's producer allows auto-creation) has it created and its
// line acknowledged, where before issue 32 it waited with "1 message
// still in queue".
func TestKcat_ProduceCreatesTopic(t *testing.T) {
	kcat := kcatPath(t)
	t.Parallel()
	c, kafka := startKafkaCluster(t, []int32{1})
	const topic = "kcat-new"
	if _, stderr, err := runKcat(t, kcat, "hello\n", "-P", "-b", kafka[1], "-t", topic, "-X", "acks=all", "-X", "message.timeout.ms=30000"); err != nil ||
		strings.Contains(stderr, "still in queue") || strings.Contains(stderr, "ERROR") {
		t.Fatalf("kcat -P to a new topic: %v\nstderr:\n%s", err, stderr)
	}
	if out := mustKcat(t, kcat, "", "-C", "-b", kafka[1], "-t", topic, "-o", "beginning", "-e", "-c", "1"); strings.TrimSpace(out) != "hello" {
		t.Fatalf("kcat -C of the created topic: %q", out)
	}
	if !c.topicExists(t, topic) {
		t.Fatal("the topic is not listed after kcat created it")
	}
}

// TestCLI_SASLRequiredNamed: against a listener that requires a SASL
// login (--kafka-sasl required), which the CLI does not make, `keel
// consume` and `keel produce` fail at once saying so, where a client
// would retry until its timeout.
func TestCLI_SASLRequiredNamed(t *testing.T) {
	t.Parallel()
	_, kafka := startKafkaClusterWith(t, []int32{1}, []string{"--kafka-sasl=required"})
	const want = "keel produce and consume make no SASL login: a listener with --kafka-sasl required serves them nothing"
	for _, args := range [][]string{
		{"consume", "--topic", "events", "--max", "1", "--timeout", "20s", "--bootstrap", kafka[1]},
		{"produce", "--topic", "events", "--timeout", "20s", "--bootstrap", kafka[1]},
	} {
		start := time.Now()
		_, stderr, code := keelIn(t, "one\n", time.Minute, args...)
		if took := time.Since(start); code != 1 || !strings.Contains(stderr, want) || took > 10*time.Second {
			t.Fatalf("keel %s: exit status %d in %s, stderr %q; want status 1 before the timeout, naming SASL", args[0], code, took, stderr)
		}
	}
}
