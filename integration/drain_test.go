package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

// drainJSON is what `keel broker drain -o json` prints.
type drainJSON struct {
	BrokerID int32           `json:"broker_id"`
	Current  json.RawMessage `json:"current"`
	Plan     struct {
		Partitions []struct {
			Topic     string  `json:"topic"`
			Partition int32   `json:"partition"`
			Replicas  []int32 `json:"replicas"`
		} `json:"partitions"`
	} `json:"plan"`
	Moved int  `json:"moved"`
	Total int  `json:"total"`
	Done  bool `json:"done"`
}

// isrWatch polls topics' descriptions in the background and notes every
// partition seen with a smaller ISR than it started with.
type isrWatch struct {
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once

	mu         sync.Mutex
	reads      int
	violations []string
}

func (c *Cluster) watchISRs(t testing.TB, start map[string]int) *isrWatch {
	t.Helper()
	w := &isrWatch{stop: make(chan struct{})}
	t.Cleanup(func() { w.stopWatch() })
	var topics []string
	for k := range start {
		topic, _, _ := strings.Cut(k, "/")
		if !slices.Contains(topics, topic) {
			topics = append(topics, topic)
		}
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			for _, topic := range topics {
				d, err := c.DescribeTopicE(context.Background(), topic)
				if err != nil {
					continue
				}
				w.mu.Lock()
				w.reads++
				for _, p := range d.Partitions {
					k := fmt.Sprintf("%s/%d", topic, p.Partition)
					if len(p.ISR) < start[k] && len(w.violations) < 10 {
						w.violations = append(w.violations, fmt.Sprintf("%s: %s (ISR had %d)", k, p, start[k]))
					}
				}
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *isrWatch) stopWatch() (reads int, violations []string) {
	w.once.Do(func() { close(w.stop) })
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reads, slices.Clone(w.violations)
}

// TestBroker_DrainMovesEveryReplicaAndLeadership: four brokers in four
// racks hold three topics (RF 3, 2 and 1). `keel broker drain --broker-id
// 4` moves every replica and leadership off broker 4 to brokers 1-3, in one
// plan, while a watcher reads the topics every few milliseconds: no
// partition's ISR is ever smaller than it was before the drain (each move
// completes only once its new replica is in the ISR). Then the rollback
// plan the drain printed, run with `keel partition reassign --plan`, puts
// the partitions back, and `--verify` exits 0 once it has.
func TestBroker_DrainMovesEveryReplicaAndLeadership(t *testing.T) {
	t.Parallel()
	brokers := []int32{1, 2, 3, 4}
	c := startPartitionCluster(t, brokers)
	topics := map[string][]string{
		"orders":   {"--partitions", "8", "--replication-factor", "3"},
		"payments": {"--partitions", "4", "--replication-factor", "2"},
		"audit":    {"--partitions", "4", "--replication-factor", "1"},
	}
	start := map[string]int{}
	before := map[string]topicJSON{}
	for name, args := range topics {
		c.createTopic(t, name, args...)
		d, _ := c.WaitForAgreement(t, name, brokers)
		before[name] = d
		for _, p := range d.Partitions {
			start[fmt.Sprintf("%s/%d", name, p.Partition)] = len(p.ISR)
		}
	}
	held := 0
	for _, d := range before {
		for _, p := range d.Partitions {
			if slices.Contains(p.Replicas, 4) {
				held++
			}
		}
	}
	if held == 0 {
		t.Fatal("placement put nothing on broker 4: nothing to drain")
	}

	watch := c.watchISRs(t, start)
	args := c.adminArgs("broker", "drain", "--broker-id", "4", "--poll-interval", "100ms", "--wait-timeout", partitionTimeout.String(), "-o", "json")
	stdout, stderr, code := runKeel(t, partitionTimeout+30*time.Second, args...)
	if code != 0 {
		t.Fatalf("keel broker drain: exit status %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	var v drainJSON
	if err := json.Unmarshal([]byte(stdout), &v); err != nil {
		t.Fatalf("keel broker drain -o json: %v\n%s", err, stdout)
	}
	if !v.Done || v.Total != held || v.Moved != held || len(v.Plan.Partitions) != held {
		t.Errorf("keel broker drain: done %v, moved %d/%d, %d moves; want all %d partitions on broker 4 moved", v.Done, v.Moved, v.Total, len(v.Plan.Partitions), held)
	}
	if want := fmt.Sprintf("moved %d/%d partitions off broker 4", held, held); !strings.Contains(stderr, want) {
		t.Errorf("keel broker drain's progress (stderr) lacks %q:\n%s", want, stderr)
	}
	reads, violations := watch.stopWatch()
	if reads == 0 || len(violations) > 0 {
		t.Errorf("during the drain (%d reads), ISRs smaller than before: %v", reads, violations)
	}

	for name := range topics {
		d := c.cliDescribe(t, name)
		for _, p := range d.Partitions {
			k := fmt.Sprintf("%s/%d", name, p.Partition)
			if slices.Contains(p.Replicas, 4) || slices.Contains(p.ISR, 4) || p.Leader == 4 || p.Leader == noLeader ||
				len(p.AddingReplicas)+len(p.RemovingReplicas) != 0 || len(p.ISR) < start[k] || len(p.Replicas) != start[k] {
				t.Errorf("after the drain, %s: %s; want it off broker 4, led, settled, with %d replicas all in the ISR", k, p, start[k])
			}
		}
	}
	c.WaitForInspect(t, []int32{4}, "rid of every replica (or holding them stopped)", func(v *keelpb.InspectResponse) bool {
		for _, r := range v.GetPartitions() {
			if r.GetRole() != roleStopped {
				return false
			}
		}
		return true
	})

	// The rollback plan puts every partition back; --verify says so.
	rollback := filepath.Join(t.TempDir(), "rollback.json")
	if err := os.WriteFile(rollback, v.Current, 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = runKeel(t, 30*time.Second, c.adminArgs("partition", "reassign", "--plan", rollback)...)
	if code != 0 || !strings.Contains(stdout, "Successfully started partition reassignments for ") {
		t.Fatalf("keel partition reassign --plan rollback.json: exit status %d\n%s%s", code, stdout, stderr)
	}
	poll.UntilState(t, partitionTimeout, "the rollback plan complete by --verify", func() (bool, string) {
		stdout, stderr, code := runKeel(t, 30*time.Second, c.adminArgs("partition", "reassign", "--verify", rollback)...)
		return code == 0 && strings.Count(stdout, "is completed.") == held, stdout + stderr
	})
	for name, was := range before {
		now := c.cliDescribe(t, name)
		for i, p := range now.Partitions {
			if !slices.Equal(p.Replicas, was.Partitions[i].Replicas) {
				t.Errorf("after the rollback, %s/%d: replicas %v; want %v, as before the drain", name, p.Partition, p.Replicas, was.Partitions[i].Replicas)
			}
		}
	}
}

// TestBroker_DrainRefusedWholeAndCancelled: with a partition on all four
// brokers, draining one is refused whole (nowhere to go) and nothing moves.
// Once that topic is gone, a drain whose target broker is hung cannot
// complete that move (the new replica cannot join the ISR): --no-wait
// returns at once, and --cancel puts the partition back on the drained
// broker.
func TestBroker_DrainRefusedWholeAndCancelled(t *testing.T) {
	t.Parallel()
	brokers := []int32{1, 2, 3, 4}
	c := startPartitionCluster(t, brokers)
	c.createTopic(t, "wide", "--assignment", "0:1,2,3,4")
	c.createTopic(t, "narrow", "--assignment", "0:4,1;1:1,4")
	c.WaitForAgreement(t, "narrow", brokers)

	expectRefused(t, "", c.adminArgs("broker", "drain", "--broker-id", "4"),
		"keel: cannot drain broker 4: partition wide-0 has replicas 1,2,3,4")
	if p := c.cliDescribe(t, "narrow").partition(t, 0); len(p.AddingReplicas)+len(p.RemovingReplicas) != 0 {
		t.Fatalf("a refused drain moved narrow/0: %s", p)
	}

	if _, stderr, code := runKeel(t, 30*time.Second, c.adminArgs("topic", "delete", "wide")...); code != 0 {
		t.Fatalf("keel topic delete wide: %s", stderr)
	}
	// Broker 3 paused: the drain sends narrow/0 to broker 2 and narrow/1
	// to broker 3 (the least loaded), and that move waits for broker 3,
	// which cannot join the ISR.
	c.PauseBroker(3)
	var v drainJSON
	c.keelJSON(t, &v, "broker", "drain", "--broker-id", "4", "--no-wait")
	if v.Done || v.Total != 2 || len(v.Plan.Partitions) != 2 {
		t.Fatalf("keel broker drain --no-wait: %+v; want 2 moves started, not done", v)
	}
	if r := v.Plan.Partitions[1].Replicas; !slices.Equal(r, []int32{1, 3}) {
		t.Fatalf("keel broker drain moves narrow/1 to %v; want [1 3]", r)
	}
	var cancelled struct {
		Cancelled []string `json:"cancelled"`
	}
	c.keelJSON(t, &cancelled, "broker", "drain", "--broker-id", "4", "--cancel")
	if !slices.Contains(cancelled.Cancelled, "narrow-1") {
		t.Fatalf("keel broker drain --cancel cancelled %v; want narrow-1 among them", cancelled.Cancelled)
	}
	c.ResumeBroker(3)
	c.WaitForTopic(t, "narrow", "narrow/1 back on [1 4], settled", func(d topicJSON) bool {
		p := d.Partitions[1]
		return slices.Equal(p.Replicas, []int32{1, 4}) && len(p.AddingReplicas)+len(p.RemovingReplicas) == 0
	})
}
