package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keel-dev/keel/internal/poll"
)

// The operators' tools beside Kafka's (issue 32), against real keel
// processes: `keel partition offsets` (kafka-get-offsets), `keel partition
// log-dirs` (kafka-log-dirs), `keel partition dump` (kafka-dump-log) of a
// broker's real segment and of damaged copies, `keel metadata shell
// --controllers` on a running cluster, and `keel topic describe` with a
// filter printing only the partitions asked for.

// offsetsJSON is one row of `keel partition offsets -o json`.
type offsetsJSON struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Earliest  int64  `json:"earliest"`
	Latest    int64  `json:"latest"`
	Offset    *int64 `json:"offset"`
	Timestamp *int64 `json:"timestamp"`
	Error     string `json:"error"`
}

// logDirJSON is one entry of `keel partition log-dirs -o json`.
type logDirJSON struct {
	Broker      int32  `json:"broker"`
	Dir         string `json:"dir"`
	SizeBytes   int64  `json:"size_bytes"`
	TotalBytes  int64  `json:"total_bytes"`
	UsableBytes int64  `json:"usable_bytes"`
	Replicas    []struct {
		Topic     string `json:"topic"`
		Partition int32  `json:"partition"`
		SizeBytes int64  `json:"size_bytes"`
		OffsetLag int64  `json:"offset_lag"`
	} `json:"replicas"`
}

// TestTools_PartitionsAndMetadata: three brokers with Kafka listeners, a
// topic of two partitions on all three, five records produced to
// partition 0 and three to partition 1, one batch each, acks=all.
//   - offsets: earliest 0 and latest 5 and 3; --time -3 the last record;
//     --time in the future the end; an unknown topic fails naming it.
//   - log-dirs: every replica of the topic on every broker, size > 0, and
//     each broker's volume sizes.
//   - dump: broker 1's segment of partition 0 prints five valid batches and
//     each record's key and value; a copy cut short prints the batches
//     before the cut and fails naming the file and the position; a copy
//     with a flipped byte prints isvalid: false and fails.
//   - metadata shell --controllers: a topic created just before is there.
//   - describe --under-replicated-partitions, broker 3 stopped: only the
//     under-replicated partitions, no configs; a topic that is whole says
//     so in one line.
func TestTools_PartitionsAndMetadata(t *testing.T) {
	ids := []int32{1, 2, 3}
	c, kafka := startKafkaCluster(t, ids)
	boot := strings.Join(bootstrap(kafka), ",")
	const topic = "tools"
	created := c.createTopic(t, topic, "--partitions", "2", "--replication-factor", "3")
	c.WaitForTopic(t, topic, "every partition led, ISR full", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return p.Leader > 0 && len(p.ISR) == 3 })
	})
	// A topic only on brokers 1 and 2, which stays whole when 3 stops, and
	// one only on broker 3, which then has no leader.
	c.createTopic(t, "whole", "--assignment", "0:1,2")
	c.createTopic(t, "lonely", "--assignment", "0:3")

	cl := kafkaClient(t, kafka, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	counts := map[int32]int{0: 5, 1: 3}
	// Each record a millisecond after the one before, so that the last one
	// has the largest timestamp (--time -3): two produced within one
	// millisecond would share it, and the first of them would be the answer.
	stamp := time.Now().Add(-time.Minute)
	for p, n := range counts {
		for i := range n {
			r := &kgo.Record{Topic: topic, Partition: p, Key: fmt.Appendf(nil, "key-%d-%d", p, i), Value: fmt.Appendf(nil, "value-%d-%d", p, i),
				Timestamp: stamp.Add(time.Duration(i) * time.Millisecond)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce to partition %d: %v", p, err)
			}
		}
	}

	t.Run("Offsets", func(t *testing.T) {
		offsets := func(args ...string) map[int32]offsetsJSON {
			t.Helper()
			var rows []offsetsJSON
			keelJSONAt(t, &rows, append([]string{"partition", "offsets", "--bootstrap", boot}, args...)...)
			out := map[int32]offsetsJSON{}
			for _, r := range rows {
				if r.Topic != topic || r.Error != "" {
					t.Errorf("keel partition offsets %s: row %+v", strings.Join(args, " "), r)
				}
				out[r.Partition] = r
			}
			return out
		}
		got := offsets(topic)
		for p, n := range counts {
			if r := got[p]; r.Earliest != 0 || r.Latest != int64(n) {
				t.Errorf("partition %d: earliest %d, latest %d; want 0 and %d", p, r.Earliest, r.Latest, n)
			}
		}
		got = offsets(topic+":0", "--time", "-3")
		if r, ok := got[0]; len(got) != 1 || !ok || r.Offset == nil || *r.Offset != 4 || *r.Timestamp <= 0 {
			t.Errorf("--time -3 of %s:0: %+v; want only partition 0, offset 4 with its timestamp", topic, got)
		}
		future := time.Now().Add(time.Hour).UnixMilli()
		got = offsets(topic+":1", "--time", fmt.Sprint(future))
		if r := got[1]; r.Offset == nil || *r.Offset != 3 {
			t.Errorf("--time an hour ahead of %s:1: %+v; want the end, 3", topic, got)
		}
		stdout, stderr, code := runKeel(t, 30*time.Second, "partition", "offsets", "nosuch", "--bootstrap", boot, "--timeout", "5s")
		if code == 0 || !strings.Contains(stderr, "nosuch does not exist") {
			t.Errorf("keel partition offsets nosuch: exit %d, want non-zero naming the topic\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		// The table, as a person reads it.
		stdout, _, _ = runKeel(t, 30*time.Second, "partition", "offsets", topic, "--bootstrap", boot)
		t.Logf("keel partition offsets %s:\n%s", topic, stdout)
	})

	t.Run("LogDirs", func(t *testing.T) {
		var dirs []logDirJSON
		poll.UntilState(t, 30*time.Second, "every replica of the topic on every broker, each with bytes", func() (bool, string) {
			dirs = nil
			stdout, stderr, code := runKeel(t, 30*time.Second, "partition", "log-dirs", topic, "--bootstrap", boot, "-o", "json")
			if code != 0 {
				return false, stderr
			}
			if err := json.Unmarshal([]byte(stdout), &dirs); err != nil {
				return false, stdout
			}
			held := 0
			for _, d := range dirs {
				if d.TotalBytes <= 0 || d.UsableBytes <= 0 || d.SizeBytes <= 0 {
					return false, stdout
				}
				for _, r := range d.Replicas {
					if r.Topic != topic || r.SizeBytes <= 0 {
						return false, stdout
					}
					held++
				}
			}
			return len(dirs) == 3 && held == 6, stdout
		})
		stdout, _, _ := runKeel(t, 30*time.Second, "partition", "log-dirs", "--bootstrap", boot)
		t.Logf("keel partition log-dirs:\n%s", stdout)
	})

	t.Run("Dump", func(t *testing.T) {
		segs, _ := filepath.Glob(filepath.Join(c.BrokerDataDir(1), "logs", created.ID+"-0", "*.log"))
		if len(segs) != 1 {
			t.Fatalf("broker 1's segments of %s-0: %v; want one", created.ID, segs)
		}
		stdout, stderr, code := runKeel(t, 30*time.Second, "partition", "dump", "--print-records", segs[0])
		if code != 0 || strings.Count(stdout, "isvalid: true") != 5 || strings.Contains(stdout, "isvalid: false") {
			t.Fatalf("keel partition dump %s: exit %d; want 5 valid batches\nstdout:\n%s\nstderr:\n%s", segs[0], code, stdout, stderr)
		}
		for i := range 5 {
			if want := fmt.Sprintf("| offset: %d CreateTime: ", i); !strings.Contains(stdout, want) {
				t.Errorf("dump: no record line %q", want)
			}
			if want := fmt.Sprintf("key: key-0-%d payload: value-0-%d\n", i, i); !strings.Contains(stdout, want) {
				t.Errorf("dump: no %q", want)
			}
		}
		t.Logf("keel partition dump --print-records %s:\n%s", segs[0], stdout)
		// Its index: entries every 4 KiB of batches, so none here, checked
		// against the log all the same.
		index := strings.TrimSuffix(segs[0], ".log") + ".index"
		stdout, stderr, code = runKeel(t, 30*time.Second, "partition", "dump", index)
		if code != 0 || !strings.Contains(stdout, "0 entries, each naming a batch of ") {
			t.Errorf("keel partition dump %s: exit %d\nstdout:\n%s\nstderr:\n%s", index, code, stdout, stderr)
		}
		data, err := os.ReadFile(segs[0])
		if err != nil {
			t.Fatal(err)
		}
		batch := len(data) / 5 // five batches of one record, each the same size

		// Cut inside the fourth batch: three printed, then the damage named.
		cut := filepath.Join(t.TempDir(), filepath.Base(segs[0]))
		if err := os.WriteFile(cut, data[:3*batch+batch/2], 0o644); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code = runKeel(t, 30*time.Second, "partition", "dump", cut)
		if code == 0 || strings.Count(stdout, "isvalid: true") != 3 || !strings.Contains(stderr, cut) ||
			!strings.Contains(stderr, fmt.Sprintf("position %d", 3*batch)) {
			t.Errorf("dump of a copy cut at %d: exit %d; want 3 batches, then an error naming %s and position %d\nstdout:\n%s\nstderr:\n%s",
				3*batch+batch/2, code, cut, 3*batch, stdout, stderr)
		}

		// A flipped byte in the second batch's records: printed invalid.
		flipped := filepath.Join(t.TempDir(), filepath.Base(segs[0]))
		bad := slices.Clone(data)
		bad[2*batch-3] ^= 0xff
		if err := os.WriteFile(flipped, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code = runKeel(t, 30*time.Second, "partition", "dump", "--print-records", flipped)
		if code == 0 || strings.Count(stdout, "isvalid: true") != 4 || !strings.Contains(stdout, fmt.Sprintf("position: %d CreateTime", batch)) ||
			!strings.Contains(stdout, "isvalid: false") || !strings.Contains(stderr, fmt.Sprintf("the batch at position %d is not valid", batch)) {
			t.Errorf("dump of a copy with a flipped byte: exit %d; want 4 valid batches and the second invalid, named\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
	})

	t.Run("MetadataShell", func(t *testing.T) {
		c.createTopic(t, "fresh", "--partitions", "1", "--replication-factor", "2")
		stdout, stderr, code := runKeel(t, 60*time.Second, "metadata", "shell", "--controllers", strings.Join(c.Addrs(), ","), "cat", "/topics/fresh/0")
		var p partitionJSON
		if code != 0 || json.Unmarshal([]byte(stdout), &p) != nil || p.Partition != 0 || len(p.Replicas) != 2 {
			t.Fatalf("keel metadata shell --controllers cat /topics/fresh/0: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		if !strings.Contains(stderr, "at index ") {
			t.Errorf("metadata shell --controllers: want the index it was taken at on stderr, got %q", stderr)
		}
		stdout, _, code = runKeel(t, 60*time.Second, "metadata", "shell", "--controllers", strings.Join(c.Addrs(), ","), "ls", "/topics")
		if code != 0 || !slices.Contains(strings.Fields(stdout), "fresh/") || !slices.Contains(strings.Fields(stdout), topic+"/") {
			t.Errorf("metadata shell --controllers ls /topics: exit %d; want fresh/ and %s/:\n%s", code, topic, stdout)
		}
	})

	t.Run("DescribeFilter", func(t *testing.T) {
		c.StopBroker(3)
		c.WaitForTopic(t, topic, "broker 3 out of every ISR", func(d topicJSON) bool {
			return d.every(func(p partitionJSON) bool { return len(p.ISR) == 2 && !slices.Contains(p.ISR, 3) })
		})
		stdout, stderr, code := runKeel(t, 30*time.Second, c.adminArgs("topic", "describe", "--under-replicated-partitions")...)
		if code != 0 || strings.Contains(stdout, "Configs") || strings.Contains(stdout, "min.insync.replicas") {
			t.Fatalf("keel topic describe --under-replicated-partitions: exit %d; want only partitions\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		var rows []string
		for _, line := range strings.Split(strings.TrimSpace(stdout), "\n")[1:] {
			f := strings.Fields(line)
			rows = append(rows, f[0]+"/"+f[1])
		}
		// fresh's replicas may or may not include broker 3: only tools' are
		// sure, and whole's never.
		if !slices.Contains(rows, topic+"/0") || !slices.Contains(rows, topic+"/1") || slices.Contains(rows, "whole/0") {
			t.Errorf("under-replicated partitions %v; want %s/0 and %s/1, not whole/0:\n%s", rows, topic, topic, stdout)
		}
		stdout, _, code = runKeel(t, 30*time.Second, c.adminArgs("topic", "describe", "whole", "--under-replicated-partitions")...)
		if code != 0 || stdout != "No partitions of whole are under-replicated.\n" {
			t.Errorf("keel topic describe whole --under-replicated-partitions: exit %d, %q", code, stdout)
		}

		// A partition without a leader does not hide the others' offsets:
		// it is shown with its error, and the command fails.
		began := time.Now()
		stdout, stderr, code = runKeel(t, 60*time.Second, "partition", "offsets", topic, "lonely", "--bootstrap", boot, "--timeout", "3s", "-o", "json")
		t.Logf("keel partition offsets %s lonely (%v), exit %d:\n%s%s", topic, time.Since(began).Round(time.Millisecond), code, stdout, stderr)
		var listed []offsetsJSON
		if err := json.Unmarshal([]byte(stdout), &listed); err != nil || code == 0 || len(listed) != 3 ||
			listed[0].Topic != "lonely" || listed[0].Error == "" || listed[1].Error != "" || listed[1].Latest != 5 || !strings.Contains(stderr, "1 of 3 partitions did not answer") {
			t.Errorf("keel partition offsets %s lonely, lonely without a leader: exit %d; want %s's offsets, lonely/0 with its error, exit 1\nstdout:\n%s\nstderr:\n%s",
				topic, code, topic, stdout, stderr)
		}
	})
}

// keelJSONAt runs keel with args and -o json, fails the test unless it
// exits 0, and decodes its stdout into v.
func keelJSONAt(t *testing.T, v any, args ...string) {
	t.Helper()
	args = append(args, "-o", "json")
	stdout, stderr, code := runKeel(t, 60*time.Second, args...)
	if code != 0 {
		t.Fatalf("keel %s: exit status %d: %s", strings.Join(args, " "), code, strings.TrimSpace(stderr))
	}
	if err := json.Unmarshal([]byte(stdout), v); err != nil {
		t.Fatalf("keel %s: bad JSON: %v\n%s", strings.Join(args, " "), err, stdout)
	}
}
