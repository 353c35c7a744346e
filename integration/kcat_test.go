package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
)

// kcat (librdkafka 2.0.2 on Debian bookworm) against real keel processes:
// what Kafka's C client sees of the Kafka listener. `make test-clients`
// installs kcat and runs these tests with KEEL_CLIENTS_REQUIRED=1; `make
// test` runs them only where kcat is installed (clients_test.go).

// kcatTimeout bounds one kcat run.
const kcatTimeout = 60 * time.Second

// kcatPath finds kcat. Without it the test is skipped, unless
// KEEL_CLIENTS_REQUIRED is set (make test-clients), where it fails.
func kcatPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("kcat")
	if err != nil {
		clientMissing(t, "kcat", "kcat", err)
	}
	return p
}

// runKcat runs kcat with args, stdin as its input, and returns what it
// printed; the process is killed if it outlives kcatTimeout.
func runKcat(t *testing.T, kcat, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runStdin(kcat, stdin, kcatTimeout, args...)
}

// mustKcat is runKcat that fails the test unless kcat exits 0.
func mustKcat(t *testing.T, kcat, stdin string, args ...string) string {
	t.Helper()
	stdout, stderr, err := runKcat(t, kcat, stdin, args...)
	if err != nil {
		t.Fatalf("kcat %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout, stderr)
	}
	return stdout
}

// kcatMetadata is what `kcat -L -J` prints.
type kcatMetadata struct {
	Originating struct {
		ID   int32  `json:"id"`
		Name string `json:"name"`
	} `json:"originating_broker"`
	ControllerID int32 `json:"controllerid"`
	Brokers      []struct {
		ID   int32  `json:"id"`
		Name string `json:"name"`
	} `json:"brokers"`
	Topics []struct {
		Topic      string `json:"topic"`
		Error      string `json:"error"`
		Partitions []struct {
			Partition int32          `json:"partition"`
			Leader    int32          `json:"leader"`
			Error     string         `json:"error"`
			Replicas  []kcatBrokerID `json:"replicas"`
			ISRs      []kcatBrokerID `json:"isrs"`
		} `json:"partitions"`
	} `json:"topics"`
}

type kcatBrokerID struct {
	ID int32 `json:"id"`
}

func kcatIDs(ids []kcatBrokerID) []int32 {
	out := make([]int32, len(ids))
	for i, b := range ids {
		out[i] = b.ID
	}
	return out
}

// kafkaAddrs waits until the active controller lists a Kafka address for
// each of ids, and returns them.
func (c *Cluster) kafkaAddrs(t *testing.T, ids ...int32) map[int32]string {
	t.Helper()
	leader, _ := c.WaitForActive(t, activeTimeout)
	var addrs map[int32]string
	poll.Until(t, 30*time.Second, "every broker's Kafka address listed", func() bool {
		bs, err := c.ListBrokersOn(context.Background(), leader)
		if err != nil {
			return false
		}
		addrs = map[int32]string{}
		for _, id := range ids {
			b, ok := bs[id]
			if !ok || b.GetKafkaAddress() == "" {
				return false
			}
			addrs[id] = b.GetKafkaAddress()
		}
		return true
	})
	return addrs
}

// TestKcat_MetadataProduceConsume: a 3-controller, 3-broker cluster of
// real processes, each broker with a Kafka listener, and a topic of 3
// partitions with 3 replicas. `kcat -L`, asked of each broker, lists the 3
// brokers at their Kafka addresses and each partition with the leader,
// replicas and ISR keel describes; `kcat -P` with acks=all and an
// idempotent producer writes keyed lines to each partition; `kcat -C -e`
// reads them back, every value at its offset, in order, with its key.
func TestKcat_MetadataProduceConsume(t *testing.T) {
	kcat := kcatPath(t)
	ids := []int32{1, 2, 3}
	c := startPartitionClusterWith(t, ids, nil, []string{"--kafka-listen", "127.0.0.1:0"})
	addrs := c.kafkaAddrs(t, ids...)
	var seeds []string
	for _, id := range ids {
		seeds = append(seeds, addrs[id])
	}
	const topic = "kcat"
	c.createTopic(t, topic, "--partitions", "3", "--replication-factor", "3")
	described := c.WaitForTopic(t, topic, "every partition led, ISR full", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return p.Leader > 0 && len(p.ISR) == 3 })
	})

	// Metadata, from each broker: its own answer, as its image has it.
	for _, id := range ids {
		var md kcatMetadata
		var last string
		poll.UntilState(t, 60*time.Second, fmt.Sprintf("kcat -L from broker %d to show the topic as keel describes it", id), func() (bool, string) {
			stdout, stderr, err := runKcat(t, kcat, "", "-L", "-J", "-b", addrs[id], "-t", topic, "-m", "10")
			last = stdout
			if err != nil {
				return false, fmt.Sprintf("kcat: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
			}
			// A fresh value each time: kcat leaves out an empty error,
			// which would otherwise keep an earlier poll's.
			md = kcatMetadata{}
			if err := json.Unmarshal([]byte(stdout), &md); err != nil {
				return false, fmt.Sprintf("kcat's JSON: %v\n%s", err, stdout)
			}
			return len(md.Topics) == 1 && len(md.Topics[0].Partitions) == 3 && md.Topics[0].Error == "", stdout
		})
		t.Logf("kcat -L -J -b %s -t %s:\n%s", addrs[id], topic, last)
		if md.Originating.ID != id {
			t.Errorf("broker %d: kcat says broker %d answered", id, md.Originating.ID)
		}
		var brokers []string
		for _, b := range md.Brokers {
			brokers = append(brokers, fmt.Sprintf("%d=%s", b.ID, b.Name))
		}
		slices.Sort(brokers)
		if want := []string{"1=" + addrs[1], "2=" + addrs[2], "3=" + addrs[3]}; !slices.Equal(brokers, want) {
			t.Errorf("broker %d: kcat lists brokers %v, want %v", id, brokers, want)
		}
		for _, p := range md.Topics[0].Partitions {
			want := described.partition(t, p.Partition)
			if p.Error != "" || p.Leader != want.Leader || !slices.Equal(kcatIDs(p.Replicas), want.Replicas) || !sameSet(kcatIDs(p.ISRs), want.ISR) {
				t.Errorf("broker %d: kcat shows partition %d led by %d, replicas %v, ISR %v (error %q); keel describes %s",
					id, p.Partition, p.Leader, kcatIDs(p.Replicas), kcatIDs(p.ISRs), p.Error, want)
			}
		}
	}
	// The plain listing, as a person reads it.
	t.Logf("kcat -L -b %s -t %s:\n%s", seeds[0], topic, mustKcat(t, kcat, "", "-L", "-b", seeds[0], "-t", topic))

	// Produce: 10 keyed lines to each partition, acks=all, idempotent.
	const perPartition = 10
	for p := range 3 {
		var in strings.Builder
		for i := range perPartition {
			fmt.Fprintf(&in, "key-%d-%d:value-%d-%d\n", p, i, p, i)
		}
		_, stderr, err := runKcat(t, kcat, in.String(), "-P", "-b", strings.Join(seeds, ","), "-t", topic,
			"-p", fmt.Sprint(p), "-K", ":", "-X", "acks=all", "-X", "enable.idempotence=true")
		if err != nil || strings.Contains(stderr, "fail") || strings.Contains(stderr, "ERROR") {
			t.Fatalf("kcat -P to partition %d: %v\nstderr:\n%s", p, err, stderr)
		}
	}

	// Consume each partition from the start to its end (-e: the high
	// watermark), then all three at once.
	format := `%t|%p|%o|%k|%s\n`
	for p := range 3 {
		out := mustKcat(t, kcat, "", "-C", "-b", strings.Join(seeds, ","), "-t", topic, "-p", fmt.Sprint(p),
			"-o", "beginning", "-e", "-q", "-f", format)
		t.Logf("kcat -C -p %d -o beginning -e -f '%s':\n%s", p, format, out)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != perPartition {
			t.Fatalf("partition %d: kcat printed %d lines, want %d", p, len(lines), perPartition)
		}
		for i, line := range lines {
			if want := fmt.Sprintf("%s|%d|%d|key-%d-%d|value-%d-%d", topic, p, i, p, i, p, i); line != want {
				t.Errorf("partition %d line %d: %q, want %q", p, i, line, want)
			}
		}
	}
	out := mustKcat(t, kcat, "", "-C", "-b", strings.Join(seeds, ","), "-t", topic, "-o", "beginning", "-e", "-q", "-f", format)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	next := map[string]int{}
	for _, line := range lines {
		f := strings.Split(line, "|")
		if len(f) != 5 {
			t.Fatalf("kcat -C printed %q", line)
		}
		p := f[1]
		i := next[p]
		if want := fmt.Sprintf("%s|%s|%d|key-%s-%d|value-%s-%d", topic, p, i, p, i, p, i); line != want {
			t.Errorf("all partitions: %q, want %q", line, want)
		}
		next[p]++
	}
	if len(lines) != 3*perPartition || len(next) != 3 {
		t.Fatalf("all partitions: kcat printed %d lines over %d partitions, want %d over 3:\n%s", len(lines), len(next), 3*perPartition, out)
	}
}
