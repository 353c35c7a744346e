package integration

// The topic and partition side of the harness: a cluster set up for
// partition tests, the keel topic and partition commands, polling a topic's
// description on the controllers until it reaches a state, comparing it with
// what the brokers say of their own replicas (`broker inspect`), and
// watching the partitions' leaders in the background.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest/keelproc"
	"github.com/keel-dev/keel/proto/keelpb"
)

const (
	// partitionTimeout bounds a wait for the partitions to reach a state,
	// which may need a broker's session (testSessionTimeout) to run out and
	// a follower to fetch and be added to the ISR first.
	partitionTimeout = brokersTimeout

	// noLeader is a partition's leader when it has none.
	noLeader = -1

	// The replica roles of `keel broker inspect` (DESIGN.md).
	roleLeader   = "leader"
	roleFollower = "follower"
	roleStopped  = "stopped"
)

// withLeaderImbalanceCheck passes --leader-imbalance-check-interval to every
// controller: how often it restores preferred leaders (negative: never).
func withLeaderImbalanceCheck(d time.Duration) clusterOption {
	return withControllerFlags("--leader-imbalance-check-interval=" + d.String())
}

// startPartitionCluster starts three controllers with sessions of
// testSessionTimeout and no automatic leader rebalance (unless opts set an
// interval: the last flag given wins), then the brokers ids, each with rack
// "r<id>", and waits until every broker is active on every controller.
func startPartitionCluster(t *testing.T, brokers []int32, opts ...clusterOption) *Cluster {
	t.Helper()
	return startPartitionClusterWith(t, brokers, nil, nil, opts...)
}

// startPartitionClusterWith is startPartitionCluster with the racks of
// racks (by broker id; "r<id>" for a broker not in it) and brokerFlags
// given to every broker.
func startPartitionClusterWith(t *testing.T, brokers []int32, racks map[int32]string, brokerFlags []string, opts ...clusterOption) *Cluster {
	t.Helper()
	opts = append([]clusterOption{withSessionTimeout(testSessionTimeout), withLeaderImbalanceCheck(-time.Second)}, opts...)
	c := startCluster(t, 3, opts...)
	c.WaitForActive(t, activeTimeout)
	bopts := make([][]brokerOption, len(brokers))
	for i, id := range brokers {
		rack, ok := racks[id]
		if !ok {
			rack = fmt.Sprintf("r%d", id)
		}
		bopts[i] = []brokerOption{withRack(rack), withBrokerFlags(brokerFlags...)}
	}
	c.startBrokers(brokers, bopts)
	c.WaitForBrokers(t, allActive(brokers...))
	return c
}

// PauseBroker sends SIGSTOP to broker id: it keeps its connections and its
// port but answers nothing, fetches nothing and stops heartbeating, as a
// hung broker would. ResumeBroker (or the end of the test, before the
// process is stopped) sends SIGCONT.
func (c *Cluster) PauseBroker(id int32) {
	c.t.Helper()
	if err := c.h.Pause(c.broker(id)); err != nil {
		c.t.Fatal(err)
	}
}

// ResumeBroker sends SIGCONT to broker id, paused by PauseBroker.
func (c *Cluster) ResumeBroker(id int32) {
	c.t.Helper()
	if err := c.h.Resume(c.broker(id)); err != nil {
		c.t.Fatal(err)
	}
}

// ---------------------------------------------------------------------------
// The keel topic and partition commands

// topicJSON is `keel topic describe -o json` (and what topic create prints).
type topicJSON struct {
	Name             string            `json:"name"`
	ID               string            `json:"id"`
	Configs          map[string]string `json:"configs"`
	EffectiveConfigs []configJSON      `json:"effective_configs"`
	Partitions       []partitionJSON   `json:"partitions"`
}

// configJSON is one config in effect, as `keel topic describe`, `keel topic
// alter` and `keel config describe|alter` print it.
type configJSON struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source string `json:"source"`
}

// Where a config in effect comes from, and the recovery states, as the CLI
// prints them.
const (
	sourceTopic          = "topic"
	sourceClusterDefault = "cluster_default"
	sourceDefault        = "default"
	stateRecovered       = "recovered"
	stateRecovering      = "recovering"
)

// partitionJSON is one partition of topicJSON.
type partitionJSON struct {
	Partition        int32   `json:"partition"`
	Leader           int32   `json:"leader"`
	LeaderEpoch      int32   `json:"leader_epoch"`
	PartitionEpoch   int32   `json:"partition_epoch"`
	Replicas         []int32 `json:"replicas"`
	ISR              []int32 `json:"isr"`
	AddingReplicas   []int32 `json:"adding_replicas"`
	RemovingReplicas []int32 `json:"removing_replicas"`
	// KIP-966's eligible leader replicas and last known leader, KIP-704's
	// leader recovery state.
	ELR           []int32 `json:"eligible_leader_replicas"`
	LastKnownELR  []int32 `json:"last_known_elr"`
	RecoveryState string  `json:"leader_recovery_state"`
	// Why it has no leader (none when it has one).
	NoLeaderReason string `json:"no_leader_reason"`
}

// topicListJSON is one row of `keel topic list -o json`.
type topicListJSON struct {
	Name              string `json:"name"`
	ID                string `json:"id"`
	Partitions        int32  `json:"partitions"`
	ReplicationFactor int32  `json:"replication_factor"`
}

// electionJSON is one row of `keel partition elect -o json`.
type electionJSON struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Leader    int32  `json:"leader"`
	Error     string `json:"error"`
}

// reassignJSON is `keel partition reassign -o json`: the partition once the
// request is accepted.
type reassignJSON struct {
	Topic string `json:"topic"`
	partitionJSON
}

// reassignmentJSON is one row of `keel partition reassignments -o json`.
type reassignmentJSON struct {
	Topic            string  `json:"topic"`
	Partition        int32   `json:"partition"`
	Replicas         []int32 `json:"replicas"`
	AddingReplicas   []int32 `json:"adding_replicas"`
	RemovingReplicas []int32 `json:"removing_replicas"`
}

// replicaJSON is one partition of `keel broker inspect -o json`.
type replicaJSON struct {
	Topic       string  `json:"topic"`
	Partition   int32   `json:"partition"`
	Role        string  `json:"role"`
	Leader      int32   `json:"leader"`
	LeaderEpoch int32   `json:"leader_epoch"`
	ISR         []int32 `json:"isr"`
}

// adminArgs is args with --controllers naming every controller.
func (c *Cluster) adminArgs(args ...string) []string {
	args = append(slices.Clone(args), c.opts.tlsFlags("admin")...)
	return append(args, "--controllers", strings.Join(c.Addrs(), ","))
}

// keelJSON runs the admin command args with -o json against every
// controller, fails the test unless it exits 0, and decodes its stdout into
// v.
func (c *Cluster) keelJSON(t testing.TB, v any, args ...string) {
	t.Helper()
	args = c.adminArgs(append(slices.Clone(args), "-o", "json")...)
	stdout, stderr, code := runKeel(t, 30*time.Second, args...)
	if code != 0 {
		t.Fatalf("keel %s: exit status %d: %s", strings.Join(args[:len(args)-2], " "), code, strings.TrimSpace(stderr))
	}
	if err := json.Unmarshal([]byte(stdout), v); err != nil {
		t.Fatalf("keel %s: bad JSON: %v\n%s", strings.Join(args[:len(args)-2], " "), err, stdout)
	}
}

// createTopic runs `keel topic create NAME ARGS... -o json` and returns
// what it prints: the topic as created.
func (c *Cluster) createTopic(t testing.TB, name string, args ...string) topicJSON {
	t.Helper()
	var v topicJSON
	c.keelJSON(t, &v, append([]string{"topic", "create", name}, args...)...)
	if v.Name != name || len(v.Partitions) == 0 {
		t.Fatalf("keel topic create %s: printed %+v; want the topic %s with its partitions", name, v, name)
	}
	return v
}

// cliDescribe runs `keel topic describe NAME -o json`.
func (c *Cluster) cliDescribe(t testing.TB, name string) topicJSON {
	t.Helper()
	var v topicJSON
	c.keelJSON(t, &v, "topic", "describe", name)
	return v
}

// cliTopicList runs `keel topic list -o json`.
func (c *Cluster) cliTopicList(t testing.TB) []topicListJSON {
	t.Helper()
	var rows []topicListJSON
	c.keelJSON(t, &rows, "topic", "list")
	return rows
}

// cliElect runs `keel partition elect ARGS... -o json`.
func (c *Cluster) cliElect(t testing.TB, args ...string) []electionJSON {
	t.Helper()
	var rows []electionJSON
	c.keelJSON(t, &rows, append([]string{"partition", "elect"}, args...)...)
	return rows
}

// cliReplicas runs `keel broker inspect -o json` on broker id and returns
// its replicas.
func (c *Cluster) cliReplicas(t testing.TB, id int32) []replicaJSON {
	t.Helper()
	v := c.cliInspect(t, id)
	out := make([]replicaJSON, len(v.Partitions))
	for i, raw := range v.Partitions {
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			t.Fatalf("keel broker inspect (broker %d): partition %d: bad JSON: %v\n%s", id, i, err, raw)
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// Topic descriptions

// describeFrom converts a described topic to its JSON form, partitions in
// order.
func describeFrom(d *keelpb.TopicDescription) topicJSON {
	v := topicJSON{Name: d.GetName(), ID: d.GetId(), Configs: d.GetConfigs()}
	for _, c := range d.GetEffectiveConfigs() {
		v.EffectiveConfigs = append(v.EffectiveConfigs, configJSON{Name: c.GetName(), Value: c.GetValue(), Source: sourceName(c.GetSource())})
	}
	for _, p := range d.GetPartitions() {
		state := stateRecovered
		if p.GetLeaderRecoveryState() == keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERING {
			state = stateRecovering
		}
		v.Partitions = append(v.Partitions, partitionJSON{
			Partition: p.GetPartition(), Leader: p.GetLeader(), LeaderEpoch: p.GetLeaderEpoch(), PartitionEpoch: p.GetPartitionEpoch(),
			Replicas: p.GetReplicas(), ISR: p.GetIsr(), AddingReplicas: p.GetAddingReplicas(), RemovingReplicas: p.GetRemovingReplicas(),
			ELR: p.GetEligibleLeaderReplicas(), LastKnownELR: p.GetLastKnownElr(), RecoveryState: state,
			NoLeaderReason: p.GetNoLeaderReason(),
		})
	}
	slices.SortFunc(v.Partitions, func(a, b partitionJSON) int { return int(a.Partition - b.Partition) })
	return v
}

// DescribeTopicE reads topic name from the controllers (the active one
// first, see rpc.Client.Read).
func (c *Cluster) DescribeTopicE(ctx context.Context, name string) (topicJSON, error) {
	ctx, cancel := context.WithTimeout(ctx, describeLimit)
	defer cancel()
	resp, err := c.client.DescribeTopic(ctx, name)
	if err != nil {
		return topicJSON{}, err
	}
	if resp.GetTopic() == nil {
		return topicJSON{}, fmt.Errorf("topic %q: described as nothing", name)
	}
	return describeFrom(resp.GetTopic()), nil
}

// WaitForTopic polls the description of topic name until ok holds for it,
// and returns it. what says what is awaited, for the failure message.
func (c *Cluster) WaitForTopic(t testing.TB, name, what string, ok func(topicJSON) bool) topicJSON {
	t.Helper()
	var d topicJSON
	poll.UntilState(t, partitionTimeout, fmt.Sprintf("topic %s to be %s", name, what), func() (bool, string) {
		var err error
		if d, err = c.DescribeTopicE(context.Background(), name); err != nil {
			return false, err.Error()
		}
		return ok(d), formatTopic(d)
	})
	return d
}

// partition returns partition p of the topic, failing the test if there is
// none.
func (d topicJSON) partition(t testing.TB, p int32) partitionJSON {
	t.Helper()
	for _, pj := range d.Partitions {
		if pj.Partition == p {
			return pj
		}
	}
	t.Fatalf("topic %s has no partition %d:\n%s", d.Name, p, formatTopic(d))
	return partitionJSON{}
}

// ledBy returns the partitions that broker id leads.
func (d topicJSON) ledBy(id int32) []int32 {
	var out []int32
	for _, p := range d.Partitions {
		if p.Leader == id {
			out = append(out, p.Partition)
		}
	}
	return out
}

// every reports whether ok holds for every partition.
func (d topicJSON) every(ok func(partitionJSON) bool) bool {
	if len(d.Partitions) == 0 {
		return false
	}
	for _, p := range d.Partitions {
		if !ok(p) {
			return false
		}
	}
	return true
}

func (p partitionJSON) String() string {
	s := fmt.Sprintf("partition %d: leader %d leader_epoch %d partition_epoch %d replicas %v isr %v adding %v removing %v",
		p.Partition, p.Leader, p.LeaderEpoch, p.PartitionEpoch, p.Replicas, p.ISR, p.AddingReplicas, p.RemovingReplicas)
	if len(p.ELR) > 0 || len(p.LastKnownELR) > 0 {
		s += fmt.Sprintf(" elr %v last_known_leader %v", p.ELR, p.LastKnownELR)
	}
	if p.RecoveryState != stateRecovered {
		s += " " + p.RecoveryState
	}
	if p.NoLeaderReason != "" {
		s += " (" + p.NoLeaderReason + ")"
	}
	return s
}

// sourceName is a config's source as the CLI prints it.
func sourceName(s keelpb.ConfigSource) string {
	switch s {
	case keelpb.ConfigSource_CONFIG_SOURCE_TOPIC:
		return sourceTopic
	case keelpb.ConfigSource_CONFIG_SOURCE_CLUSTER_DEFAULT:
		return sourceClusterDefault
	case keelpb.ConfigSource_CONFIG_SOURCE_DEFAULT:
		return sourceDefault
	}
	return "unknown"
}

// config returns the config name in effect, failing the test if there is
// none.
func (d topicJSON) config(t testing.TB, name string) configJSON {
	t.Helper()
	for _, c := range d.EffectiveConfigs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("topic %s has no config %s in effect: %+v", d.Name, name, d.EffectiveConfigs)
	return configJSON{}
}

func formatTopic(d topicJSON) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  topic %s (id %s, configs %v)\n", d.Name, d.ID, d.Configs)
	for _, p := range d.Partitions {
		fmt.Fprintf(&b, "    %s\n", p)
	}
	return b.String()
}

// firstLiveISRMember is the leader KRaft elects when the leader is lost:
// the first replica, in assignment order, that is in isr and not in gone.
func firstLiveISRMember(replicas, isr []int32, gone ...int32) int32 {
	for _, r := range replicas {
		if slices.Contains(isr, r) && !slices.Contains(gone, r) {
			return r
		}
	}
	return noLeader
}

// without returns ids without the ones in gone, in order.
func without(ids []int32, gone ...int32) []int32 {
	return slices.DeleteFunc(slices.Clone(ids), func(id int32) bool { return slices.Contains(gone, id) })
}

// sameSet reports whether a and b hold the same ids, in any order.
func sameSet(a, b []int32) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// ---------------------------------------------------------------------------
// What the brokers say of their replicas

// replicasOf returns broker view v's replicas of topic, by partition, and a
// description of any partition it lists twice.
func replicasOf(v *keelpb.InspectResponse, topic string) (map[int32]*keelpb.ReplicaState, string) {
	out := map[int32]*keelpb.ReplicaState{}
	var dup string
	for _, r := range v.GetPartitions() {
		if r.GetTopic() != topic {
			continue
		}
		if _, ok := out[r.GetPartition()]; ok {
			dup = fmt.Sprintf("lists %s/%d twice", topic, r.GetPartition())
		}
		out[r.GetPartition()] = r
	}
	return out, dup
}

func formatReplica(r *keelpb.ReplicaState) string {
	return fmt.Sprintf("%s/%d role %s leader %d leader_epoch %d isr %v", r.GetTopic(), r.GetPartition(), r.GetRole(), r.GetLeader(), r.GetLeaderEpoch(), r.GetIsr())
}

// disagreement says how broker id's own view v differs from the topic as
// described, or returns "" if it agrees: the broker lists every partition
// it is a replica of, once, as leader where it leads and as follower
// elsewhere, with the described leader, leader epoch and ISR; and it lists
// no other partition of the topic.
func disagreement(id int32, v *keelpb.InspectResponse, d topicJSON) string {
	held, dup := replicasOf(v, d.Name)
	var diffs []string
	if dup != "" {
		diffs = append(diffs, dup)
	}
	for _, p := range d.Partitions {
		r, ok := held[p.Partition]
		delete(held, p.Partition)
		if !slices.Contains(p.Replicas, id) {
			if ok {
				diffs = append(diffs, fmt.Sprintf("lists %s, of which it is not a replica (%s)", formatReplica(r), p))
			}
			continue
		}
		role := roleFollower
		if p.Leader == id {
			role = roleLeader
		}
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("does not list %s/%d (%s)", d.Name, p.Partition, p))
		case r.GetRole() != role || r.GetLeader() != p.Leader || r.GetLeaderEpoch() != p.LeaderEpoch || !slices.Equal(r.GetIsr(), p.ISR):
			diffs = append(diffs, fmt.Sprintf("lists %s; want role %s (%s)", formatReplica(r), role, p))
		}
	}
	for _, r := range held {
		diffs = append(diffs, fmt.Sprintf("lists %s, which the topic does not have", formatReplica(r)))
	}
	slices.Sort(diffs)
	return strings.Join(diffs, "; ")
}

// WaitForAgreement polls the description of topic name and the own views
// of the brokers ids until every one of those brokers agrees with the
// description (see disagreement), and returns both.
func (c *Cluster) WaitForAgreement(t testing.TB, name string, ids []int32) (topicJSON, map[int32]*keelpb.InspectResponse) {
	t.Helper()
	var (
		d     topicJSON
		views map[int32]*keelpb.InspectResponse
	)
	poll.UntilState(t, partitionTimeout, fmt.Sprintf("brokers %v to agree with the controllers on topic %s", ids, name), func() (bool, string) {
		var derr error
		d, derr = c.DescribeTopicE(context.Background(), name)
		views = make(map[int32]*keelpb.InspectResponse, len(ids))
		diffs := map[int32]string{}
		for _, id := range ids {
			if nd := c.broker(id); !nd.Running() {
				t.Fatalf("waiting for broker %d to agree on topic %s, but it has exited (status %d); its output ends:\n%s",
					id, name, nd.ExitCode(), keelproc.LastLines(nd.Output(), 10))
			}
			v, err := c.InspectE(context.Background(), id)
			switch {
			case err != nil:
				diffs[id] = err.Error()
			case derr == nil:
				views[id] = v
				if s := disagreement(id, v, d); s != "" {
					diffs[id] = s
				}
			}
		}
		if derr != nil {
			return false, fmt.Sprintf("cannot describe topic %s: %v", name, derr)
		}
		var b strings.Builder
		for _, id := range ids {
			if s, ok := diffs[id]; ok {
				fmt.Fprintf(&b, "  broker %d %s\n", id, s)
			}
		}
		return len(diffs) == 0, fmt.Sprintf("the controllers say:\n%s%s", formatTopic(d), b.String())
	})
	return d, views
}

// ---------------------------------------------------------------------------
// Watching the leaders

// leaderWatch polls a topic's description in the background and records
// every answer in which a partition has no leader.
type leaderWatch struct {
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	started time.Time

	mu         sync.Mutex
	reads      int
	leaderless int      // answers with a leaderless partition
	samples    []string // the first few of them
}

// watchLeaders starts polling the description of topic every few
// milliseconds until stopWatch (or the end of the test).
func (c *Cluster) watchLeaders(t testing.TB, topic string) *leaderWatch {
	t.Helper()
	w := &leaderWatch{stop: make(chan struct{}), started: time.Now()}
	t.Cleanup(func() { w.stopWatch() })
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			d, err := c.DescribeTopicE(context.Background(), topic)
			if err == nil {
				w.record(d)
			}
			select {
			case <-w.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *leaderWatch) record(d topicJSON) {
	var none []string
	for _, p := range d.Partitions {
		if p.Leader == noLeader {
			none = append(none, p.String())
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reads++
	if len(none) == 0 {
		return
	}
	w.leaderless++
	if len(w.samples) < 5 {
		w.samples = append(w.samples, fmt.Sprintf("at +%s: %s", time.Since(w.started).Round(time.Millisecond), strings.Join(none, "; ")))
	}
}

// count returns how many descriptions the watch has read so far.
func (w *leaderWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reads
}

// stopWatch ends the watch and returns how many descriptions it read and
// how many of them had a leaderless partition, with the first few.
func (w *leaderWatch) stopWatch() (reads, leaderless int, samples []string) {
	w.once.Do(func() { close(w.stop) })
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reads, w.leaderless, slices.Clone(w.samples)
}

// isNotFound reports whether err is a gRPC NotFound.
func isNotFound(err error) bool { return status.Code(err) == codes.NotFound }
