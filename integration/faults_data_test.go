package integration

// The data fault suite: 3 controllers and 3 brokers with Kafka listeners,
// real processes on loopback; idempotent franz-go producers write unique
// values with acks=all to several RF-3 topics (min.insync.replicas=2,
// unclean election off) and consumers without a group read them, while a
// seeded nemesis kills (kill -9), pauses (SIGSTOP) and stops (SIGTERM, a
// broker's controlled shutdown) controllers and brokers, the active
// controller and partition leaders included, and starts them again; cuts
// a partition leader off from the quorum and its followers with fault
// proxies while producers still reach it; fills a broker's disk; and
// injects gray failures (faults_data_gray_test.go): power losses of
// brokers, one of them the ISR's last member while an ELR member holds the
// only clean copy, restores of a metadata snapshot saved at the start, and
// blips of a broker's links to the controllers; and hostile clients:
// poison batches a producer sends beside the good ones
// (faults_data_poison_test.go) and floods of strangers' connections to a
// partition leader's Kafka port (faults_data_flood_test.go). A consumer
// group reads the topics through the faults, and the nemesis kills and
// pauses its coordinator (faults_data_group_test.go). After
// the faults everything is healed, the ISRs fill again, every partition is
// read from its start to its high watermark and checked with the Kafka
// tests' check (ackedRecordViolations), and against what the consumers saw
// during the faults.
//
// The unclean mode (TestDataFaultsUnclean) allows unclean leader election
// and elects lagging followers; it measures and reports the loss instead of
// failing on it.
//
// It takes the fault suite's environment (faults_test.go): KEEL_FAULT_RUNS
// (default 1), KEEL_FAULT_DURATION (default 20s; 10s in the unclean mode),
// KEEL_FAULT_SEED; and KEEL_DATA_FAULTS, a comma-separated list of the
// fault kinds to inject (default: all of the mode's). `make test` runs
// each mode once; `make faults-data` and `make faults-data-unclean` run
// them longer.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keel-dev/keel/internal/faultproxy"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest/keelproc"
)

const (
	dataTopics     = 3
	dataPartitions = 3
	// dataFaultWindow is how far before a violation the faults it prints
	// begin: a record is lost, or written twice, by what happened while
	// it was in flight or since.
	dataFaultWindow = 10 * time.Second
)

// dataFaultKind is a fault the data nemesis injects, with its weight.
type dataFaultKind struct {
	name   string
	weight int
}

// dataFaultKinds are what the data nemesis injects, with their weights.
var dataFaultKinds = []dataFaultKind{
	{"kill-active-controller", 2},
	{"kill-controller", 1},
	{"pause-active-controller", 2},
	{"kill-partition-leader", 3},
	{"kill-broker", 1},
	{"pause-partition-leader", 2},
	{"sigterm-broker", 2},
	{"cut-partition-leader", 3},
	{"broker-disk-full", 1},
	{"power-loss-broker", 2},
	{"power-loss-last-isr-member", 1},
	{"restore-snapshot", 1},
	{"blip-broker-links", 3},
	{"poison-batch", 1},
	{"flood-kafka", 1},
	{"kill-coordinator", 2},
	{"pause-coordinator", 1},
}

// uncleanFaultKinds are what the unclean mode's nemesis injects: mostly
// a lagging follower left as the only live replica, which an unclean
// election then makes the leader.
var uncleanFaultKinds = []dataFaultKind{
	{"lagging-follower-elected", 4},
	{"kill-partition-leader", 1},
	{"pause-partition-leader", 1},
}

// dataMode is what a run of the suite does: the clean mode (unclean
// election off) fails on any loss; the unclean mode (unclean election on)
// measures the loss and reports it.
type dataMode struct {
	target  string // the make target that replays a seed
	unclean bool
	kinds   []dataFaultKind
}

func TestDataFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the data fault suite starts clusters and runs for a while")
	}
	cfg := faultConfig(t)
	if os.Getenv("KEEL_FAULT_DURATION") == "" {
		cfg.duration = 20 * time.Second
	}
	mode := dataMode{target: "faults-data", kinds: onlyDataFaults(t, dataFaultKinds)}
	runSeeded(t, cfg, "data fault suite", mode.target, newDataTally(), func(t *testing.T, seed int64, d time.Duration) *dataTally {
		return runDataFaults(t, mode, seed, d)
	})
}

// TestDataFaultsUnclean is the data fault suite's unclean mode: the topics
// allow unclean leader election, and the nemesis mostly leaves a lagging
// follower as the only live replica of a partition. Acknowledged records
// may then be lost: the run measures and reports them (acknowledged, lost,
// duplicated, offsets that vanished after a consumer read them) instead of
// failing on them; it fails only when the cluster does not recover (a
// process that will not start, ISRs that do not fill again, consumers that
// cannot read to the end). `make test` runs it once, for 10 s; `make
// faults-data-unclean` runs it longer.
func TestDataFaultsUnclean(t *testing.T) {
	if testing.Short() {
		t.Skip("the data fault suite starts clusters and runs for a while")
	}
	cfg := faultConfig(t)
	if os.Getenv("KEEL_FAULT_DURATION") == "" {
		cfg.duration = 10 * time.Second
	}
	mode := dataMode{target: "faults-data-unclean", unclean: true, kinds: onlyDataFaults(t, uncleanFaultKinds)}
	runSeeded(t, cfg, "data fault suite (unclean mode)", mode.target, newDataTally(), func(t *testing.T, seed int64, d time.Duration) *dataTally {
		return runDataFaults(t, mode, seed, d)
	})
}

// onlyDataFaults returns the kinds that KEEL_DATA_FAULTS names (a comma
// separated list; all of them when it is unset), at their weights, to
// replay or try one kind of fault alone. It fails the test on a name that
// is not a kind of the mode.
func onlyDataFaults(t *testing.T, kinds []dataFaultKind) []dataFaultKind {
	env := os.Getenv("KEEL_DATA_FAULTS")
	if env == "" {
		return kinds
	}
	var out []dataFaultKind
	for _, name := range strings.Split(env, ",") {
		i := slices.IndexFunc(kinds, func(k dataFaultKind) bool { return k.name == strings.TrimSpace(name) })
		if i < 0 {
			t.Fatalf("KEEL_DATA_FAULTS=%q: %q is not one of this mode's faults", env, name)
		}
		out = append(out, kinds[i])
	}
	return out
}

// dataTally counts what a run did, for the report.
type dataTally struct {
	faults                      map[string]int
	sent, acked, failed         int
	seen                        int // records the consumers read during the faults
	final, found, lost, unacked int // the final read
	failures                    map[string]int
	// tolerated counts, by kind, what the unclean mode measured instead of
	// failing on (duplicates, gaps, records read that vanished).
	tolerated map[string]int
	// crashElections: controller elections started at once on finding
	// the raft leader's process gone.
	crashElections int
	gray           grayTally // the gray failures' own counts
	flood          floodTally
	group          groupTally // the consumer group's (faults_data_group_test.go)
}

func newDataTally() *dataTally {
	return &dataTally{faults: map[string]int{}, failures: map[string]int{}, tolerated: map[string]int{}}
}

func (d *dataTally) Add(o *dataTally) {
	for k, v := range o.faults {
		d.faults[k] += v
	}
	for k, v := range o.failures {
		d.failures[k] += v
	}
	for k, v := range o.tolerated {
		d.tolerated[k] += v
	}
	d.sent += o.sent
	d.acked += o.acked
	d.failed += o.failed
	d.seen += o.seen
	d.final += o.final
	d.found += o.found
	d.lost += o.lost
	d.unacked += o.unacked
	d.crashElections += o.crashElections
	d.gray.add(&o.gray)
	d.flood.add(&o.flood)
	d.group.add(&o.group)
}

func (d *dataTally) String() string {
	var b strings.Builder
	b.WriteString("faults injected:")
	n := 0
	for _, k := range sortedKeys(d.faults) {
		fmt.Fprintf(&b, " %s=%d", k, d.faults[k])
		n += d.faults[k]
	}
	fmt.Fprintf(&b, " (%d); controller crash elections started: %d\nrecords: %d sent, %d acknowledged, %d failed by the producer", n, d.crashElections, d.sent, d.acked, d.failed)
	for _, k := range sortedKeys(d.failures) {
		fmt.Fprintf(&b, "; %dx %s", d.failures[k], k)
	}
	d.gray.write(&b)
	d.flood.write(&b)
	d.group.write(&b)
	fmt.Fprintf(&b, "\nread during the faults: %d; read at the end: %d (acknowledged: %d found, %d lost; %d never acknowledged)",
		d.seen, d.final, d.found, d.lost, d.unacked)
	if len(d.tolerated) > 0 {
		b.WriteString("\nmeasured, not failed on (unclean mode):")
		for _, k := range sortedKeys(d.tolerated) {
			fmt.Fprintf(&b, " %s=%d", k, d.tolerated[k])
		}
	}
	return b.String()
}

// dataFault is one fault injected, from its start to its undoing.
type dataFault struct {
	from, to time.Time
	what     string
}

// seenRecord is a record a consumer read during the faults.
type seenRecord struct {
	value string
	at    time.Time
}

// dataRun is the state of one run shared by its goroutines.
type dataRun struct {
	c      *Cluster
	mode   dataMode
	net    *dataNet
	disks  disks // nil when the machine cannot make them (disksAvailable)
	kafka  map[int32]string
	topics []string
	start  time.Time

	brokers []int32
	prods   []*streamProducer // by topic
	// snapshot is a metadata snapshot saved before the faults, which
	// restore-snapshot restores.
	snapshot string
	// group is the consumer group that reads the topics (nil in the
	// unclean mode).
	group *groupRun

	mu        sync.Mutex
	faults    []dataFault
	seen      map[string]map[int32]map[int64]seenRecord // topic -> partition -> offset
	seenN     int
	seenBad   []string // what the consumers saw break the rules, as they saw it
	fetchErrs map[string]int
}

func (r *dataRun) fault(from time.Time, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, dataFault{from: from, to: time.Now(), what: fmt.Sprintf(format, args...)})
}

func (r *dataRun) since(at time.Time) string {
	return fmt.Sprintf("%8v", at.Sub(r.start).Round(time.Millisecond))
}

func runDataFaults(t *testing.T, mode dataMode, seed int64, duration time.Duration) *dataTally {
	t.Logf("seed %d: replay with KEEL_FAULT_SEED=%d KEEL_FAULT_RUNS=1 make %s", seed, seed, mode.target)
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(seed)>>32|1))
	brokers := []int32{1, 2, 3}
	r := &dataRun{mode: mode, brokers: brokers, seen: map[string]map[int32]map[int64]seenRecord{}, fetchErrs: map[string]int{}}
	r.startCluster(t, brokers)
	c := r.c
	unclean := fmt.Sprint(mode.unclean)
	for i := range dataTopics {
		topic := fmt.Sprintf("data%d", i)
		r.topics = append(r.topics, topic)
		c.createTopic(t, topic, "--partitions", fmt.Sprint(dataPartitions), "--replication-factor", "3",
			"--config", "min.insync.replicas=2", "--config", "unclean.leader.election.enable="+unclean)
		r.seen[topic] = map[int32]map[int64]seenRecord{}
	}
	for _, topic := range r.topics {
		d := c.WaitForTopic(t, topic, "led with full ISRs", func(d topicJSON) bool {
			return d.every(func(p partitionJSON) bool { return p.Leader > 0 && len(p.ISR) == 3 })
		})
		if v := d.config(t, "unclean.leader.election.enable"); v.Value != unclean {
			t.Fatalf("%s: unclean.leader.election.enable: %+v; want %s", topic, v, unclean)
		}
	}
	groupName := fmt.Sprintf("data-faults-%d", seed)
	if !mode.unclean {
		r.createOffsetsTopic(t, groupName)
	}
	if slices.ContainsFunc(mode.kinds, func(k dataFaultKind) bool { return k.name == "restore-snapshot" }) {
		// Older than everything the faults will do: the topics, but none
		// of the leader changes, registrations or producer ids to come.
		r.snapshot, _ = c.saveSnapshot(t)
	}
	kafka := r.kafka
	tally := newDataTally()
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		var lines []string
		for _, f := range r.faults {
			lines = append(lines, r.since(f.from)+" "+f.what)
		}
		t.Logf("seed %d: faults injected (time from the start of the faults):\n%s", seed, strings.Join(lines, "\n"))
	})

	r.start = time.Now()
	prods := make([]*streamProducer, len(r.topics))
	for i, topic := range r.topics {
		prods[i] = startProducer(t, kafka, topic, dataPartitions, "")
	}
	r.prods = prods
	workCtx, stopWork := context.WithCancel(context.Background())
	defer stopWork()
	var wg sync.WaitGroup
	for _, topic := range r.topics {
		start := map[int32]kgo.Offset{}
		for p := range int32(dataPartitions) {
			start[p] = kgo.NewOffset().AtStart()
		}
		cl := kafkaClient(t, kafka, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}))
		wg.Add(1)
		go func() { defer wg.Done(); r.consume(workCtx, cl, topic) }()
	}
	for _, p := range prods {
		p.waitAcked(50, "before the faults")
	}
	if !mode.unclean {
		// Not in the unclean mode: it may lose records, which the group's
		// checks would fail on.
		r.group = startGroup(t, workCtx, kafka, groupName, r.topics, r.start)
	}

	r.nemesis(t, rng, duration, brokers, tally)
	// Registered after every restart, so it runs before the processes' own
	// cleanups: a broker's clean stop needs the controllers.
	t.Cleanup(func() {
		for _, id := range c.BrokerIDs() {
			if c.BrokerRunning(id) {
				c.StopBroker(id)
			}
		}
	})

	// Heal: every fault was undone by the nemesis; wait for the cluster to
	// be whole again, and for the producers to go on.
	c.WaitForActive(t, healTimeout)
	c.WaitForBrokers(t, allActive(brokers...))
	for _, topic := range r.topics {
		c.WaitForTopic(t, topic, "back to full ISRs", func(d topicJSON) bool {
			return d.every(func(p partitionJSON) bool { return p.Leader > 0 && len(p.ISR) == 3 })
		})
	}
	for _, p := range prods {
		p.waitAcked(50, "after the faults, with full ISRs")
	}
	for i, p := range prods {
		if !p.stop(kafkaTimeout) {
			t.Fatalf("the producer of %s did not finish: records still in flight after %s", r.topics[i], kafkaTimeout)
		}
	}
	// The consumers catch up with the producers' last records, then stop.
	reader := kafkaClient(t, kafka)
	hws := map[string]map[int32]int64{}
	for _, topic := range r.topics {
		hws[topic] = highWatermarks(t, reader, topic, dataPartitions)
	}
	r.waitConsumed(t, hws)
	if r.group != nil {
		r.group.waitCommitted(t, hws, "up to the high watermarks after the faults")
		r.waitCoordinatorAgrees(t)
	}
	stopWork()
	wg.Wait()
	if r.group != nil {
		r.group.stop()
		acked := map[string][]ackedRecord{}
		for i, topic := range r.topics {
			_, acked[topic], _ = prods[i].results()
		}
		tally.group = *r.group.judge(t, acked)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	tally.seen = r.seenN
	for i, msg := range r.seenBad {
		if mode.unclean {
			tally.tolerated["consumer saw data loss or a rewritten offset"]++
			if i < 3 {
				t.Logf("tolerated in unclean mode: %s", msg)
			}
			continue
		}
		t.Error(msg)
	}
	var mayLose func(ackedRecord) bool
	if mode.unclean {
		mayLose = func(ackedRecord) bool { return true }
	}
	for i, topic := range r.topics {
		sent, acked, failed := prods[i].results()
		tally.sent += len(sent)
		tally.acked += len(acked)
		tally.failed += len(failed)
		for _, err := range failed {
			tally.failures[err.Error()]++
		}
		hw := hws[topic]
		read := consumeAll(t, kafka, topic, hw)
		for _, recs := range read {
			tally.final += len(recs)
		}
		bad, lost, found, unacked := ackedRecordViolations(sent, acked, hw, read, mayLose)
		bad = append(bad, r.seenViolations(topic, read)...)
		tally.lost += lost
		tally.found += found
		tally.unacked += unacked
		if mode.unclean {
			// What an unclean election may do: measured, with the first
			// few shown, never failed on.
			for j, v := range bad {
				tally.tolerated[violationKind(v.msg)]++
				if j < 3 {
					t.Logf("%s (tolerated in unclean mode): %s", topic, v.msg)
				}
			}
			continue
		}
		for j, v := range bad {
			if j == 10 {
				t.Errorf("%s: ... and %d more violations", topic, len(bad)-j)
				break
			}
			t.Errorf("%s: %s\n%s", topic, v.msg, r.around(topic, v, acked, read))
		}
	}
	tally.crashElections = r.c.crashElections()
	t.Logf("seed %d:\n%s", seed, tally)
	return tally
}

// violationKind names the rule a violation message of
// ackedRecordViolations or seenViolations breaks, for the unclean mode's
// counts.
func violationKind(msg string) string {
	for _, k := range []struct{ contains, kind string }{
		{"read twice", "duplicate"},
		{"a gap or a reordering", "gap"},
		{"records read from the start", "short read"},
		{"below the high watermark", "read record vanished"},
		{"order is not kept", "producer order"},
		{"but is read at", "acknowledged record moved"},
	} {
		if strings.Contains(msg, k.contains) {
			return k.kind
		}
	}
	return "other"
}

// consume reads every partition of topic with cl until ctx ends,
// recording what it saw: each record must be below the high watermark
// of the fetch that returned it, and an offset read twice must hold the
// same record.
func (r *dataRun) consume(ctx context.Context, cl *kgo.Client, topic string) {
	for ctx.Err() == nil {
		fetches := cl.PollFetches(ctx)
		now := time.Now()
		r.mu.Lock()
		fetches.EachError(func(_ string, p int32, err error) {
			var loss *kgo.ErrDataLoss
			switch {
			case errors.Is(err, context.Canceled), errors.Is(err, kgo.ErrClientClosed):
			case errors.As(err, &loss):
				r.seenBad = append(r.seenBad, fmt.Sprintf("%s partition %d, at %s: the consumer was told of data loss: it had read to offset %d, the leader's log ends at %d",
					topic, p, r.since(now), loss.ConsumedTo, loss.ResetTo))
			default:
				r.fetchErrs[err.Error()]++
			}
		})
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			seen := r.seen[topic][fp.Partition]
			if seen == nil {
				seen = map[int64]seenRecord{}
				r.seen[topic][fp.Partition] = seen
			}
			for _, rec := range fp.Records {
				r.seenN++
				if rec.Offset >= fp.HighWatermark {
					r.seenBad = append(r.seenBad, fmt.Sprintf("%s partition %d offset %d, at %s: %q fetched at or above the fetch's high watermark %d",
						topic, fp.Partition, rec.Offset, r.since(now), rec.Value, fp.HighWatermark))
				}
				if prev, ok := seen[rec.Offset]; ok && prev.value != string(rec.Value) {
					r.seenBad = append(r.seenBad, fmt.Sprintf("%s partition %d offset %d: read as %q at %s, then as %q at %s",
						topic, fp.Partition, rec.Offset, prev.value, r.since(prev.at), rec.Value, r.since(now)))
					continue
				}
				if _, ok := seen[rec.Offset]; !ok {
					seen[rec.Offset] = seenRecord{value: string(rec.Value), at: now}
				}
			}
		})
		r.mu.Unlock()
	}
}

// waitConsumed waits until the consumers have read every partition up to
// hws, so that they saw the faults' records and the final ones.
func (r *dataRun) waitConsumed(t *testing.T, hws map[string]map[int32]int64) {
	t.Helper()
	deadline := time.Now().Add(kafkaTimeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var behind []string
		r.mu.Lock()
		for _, topic := range r.topics {
			for p, hw := range hws[topic] {
				if _, ok := r.seen[topic][p][hw-1]; hw > 0 && !ok {
					behind = append(behind, fmt.Sprintf("%s-%d (to %d)", topic, p, hw))
				}
			}
		}
		r.mu.Unlock()
		if len(behind) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumers did not read up to the high watermarks within %v: behind on %v; fetch errors: %v", kafkaTimeout, behind, r.fetchErrs)
		}
		<-tick.C
	}
}

// seenViolations returns every record a consumer read during the faults
// that is no longer at its offset in the final read: a record read below
// the high watermark must never disappear.
func (r *dataRun) seenViolations(topic string, read map[int32][]consumedRecord) []logViolation {
	var bad []logViolation
	for _, p := range sortedKeys(r.seen[topic]) {
		seen := r.seen[topic][p]
		for _, off := range sortedKeys(seen) {
			s := seen[off]
			switch recs := read[p]; {
			case off >= int64(len(recs)) || recs[off].offset != off:
				bad = append(bad, logViolation{partition: p, offset: off, msg: fmt.Sprintf(
					"partition %d offset %d: %q was read there at %s, below the high watermark; it is gone (%d records at the end)", p, off, s.value, r.since(s.at), len(recs))})
			case recs[off].value != s.value:
				bad = append(bad, logViolation{partition: p, offset: off, msg: fmt.Sprintf(
					"partition %d offset %d: %q was read there at %s, below the high watermark; %q is there now", p, off, s.value, r.since(s.at), recs[off].value)})
			}
		}
	}
	return bad
}

// around is the smallest slice of history that shows v: partition v's
// records around its offset as acknowledged, read during the faults and
// read at the end, and the faults injected from dataFaultWindow before
// the records there were acknowledged or read until just after.
func (r *dataRun) around(topic string, v logViolation, acked []ackedRecord, read map[int32][]consumedRecord) string {
	var b strings.Builder
	lo, hi := v.offset-3, v.offset+3
	if v.offset < 0 {
		lo, hi = int64(len(read[v.partition]))-3, int64(len(read[v.partition]))+3
	}
	ackedAt := map[int64][]ackedRecord{}
	var when []time.Time
	for _, a := range acked {
		if a.partition == v.partition && a.offset >= lo && a.offset <= hi {
			ackedAt[a.offset] = append(ackedAt[a.offset], a)
			when = append(when, a.at)
		}
	}
	seen := r.seen[topic][v.partition]
	fmt.Fprintf(&b, "  partition %d, offsets %d to %d:\n", v.partition, max(lo, 0), hi)
	for off := max(lo, 0); off <= hi; off++ {
		var parts []string
		for _, a := range ackedAt[off] {
			parts = append(parts, fmt.Sprintf("acknowledged %q at %s", a.value, r.since(a.at)))
		}
		if s, ok := seen[off]; ok {
			parts = append(parts, fmt.Sprintf("read during the faults as %q at %s", s.value, r.since(s.at)))
			when = append(when, s.at)
		}
		if recs := read[v.partition]; off < int64(len(recs)) {
			parts = append(parts, fmt.Sprintf("at the end %q (leader epoch %d)", recs[off].value, recs[off].leaderEpoch))
		}
		if len(parts) > 0 {
			fmt.Fprintf(&b, "    %d: %s\n", off, strings.Join(parts, "; "))
		}
	}
	from, to := r.start, time.Now()
	if len(when) > 0 {
		from, to = slices.MinFunc(when, time.Time.Compare).Add(-dataFaultWindow), slices.MaxFunc(when, time.Time.Compare).Add(2*time.Second)
	}
	fmt.Fprintf(&b, "  faults from %s to %s:\n", r.since(from), r.since(to))
	for _, f := range r.faults {
		if f.to.After(from) && f.from.Before(to) {
			fmt.Fprintf(&b, "    %s to %s %s\n", r.since(f.from), r.since(f.to), f.what)
		}
	}
	return b.String()
}

// ---------------------------------------------------------------------------
// Nemesis

// nemesis injects one fault at a time, chosen by rng from the mode's
// kinds, until duration has passed; each is held for a while, then undone.
// It runs on the test's goroutine, because the harness fails the test from
// it.
func (r *dataRun) nemesis(t *testing.T, rng *rand.Rand, duration time.Duration, brokers []int32, tally *dataTally) {
	c := r.c
	deadline := time.Now().Add(duration)
	var kinds []dataFaultKind
	for _, k := range r.mode.kinds {
		if k.name == "broker-disk-full" && r.disks == nil {
			continue // disksAvailable said why, at the start
		}
		kinds = append(kinds, k)
	}
	totalWeight := 0
	for _, k := range kinds {
		totalWeight += k.weight
	}
	hold := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	// The first fault is one of the coordinator's (when the mode has
	// them), so that every run fails the group's coordinator over.
	var first []string
	for _, k := range kinds {
		if slices.Contains(coordinatorFaultKinds, k.name) {
			first = append(first, k.name)
		}
	}
	for time.Now().Before(deadline) {
		n := rng.IntN(totalWeight)
		var kind string
		for _, k := range kinds {
			if n < k.weight {
				kind = k.name
				break
			}
			n -= k.weight
		}
		// Every choice is drawn from rng whether it is used or not, so
		// that a seed replays the same schedule of kinds and holds.
		anyCtrl := c.IDs()[rng.IntN(len(c.IDs()))]
		anyBroker := brokers[rng.IntN(len(brokers))]
		topic := r.topics[rng.IntN(len(r.topics))]
		part := int32(rng.IntN(dataPartitions))
		if len(first) > 0 {
			kind, first = first[rng.IntN(len(first))], nil
		}
		linkMode := faultproxy.Drop
		if rng.IntN(2) == 0 {
			linkMode = faultproxy.Blackhole
		}
		from := time.Now()
		outcome := grayInjected
		// leaderOr is the leader of topic-part, or anyBroker when the
		// controllers do not say.
		leaderOr := func() (int32, string) {
			if l := r.partitionLeader(topic, part); l > 0 {
				return l, fmt.Sprintf("broker (leader of %s-%d)", topic, part)
			}
			return anyBroker, "broker"
		}
		switch kind {
		case "kill-active-controller", "kill-controller", "pause-active-controller":
			id, how := anyCtrl, "controller"
			if kind != "kill-controller" {
				if a := r.activeController(); a > 0 {
					id, how = a, "the active controller"
				}
			}
			if kind == "pause-active-controller" {
				// Past the election timeout: the others elect a new
				// leader while this one is frozen.
				d := hold(600*time.Millisecond, 2*time.Second)
				c.Pause(id)
				time.Sleep(d) // the fault's length, not synchronisation
				c.Resume(id)
				r.fault(from, "%s: SIGSTOP %s %d for %v", kind, how, id, d)
				break
			}
			d := hold(200*time.Millisecond, 2*time.Second)
			c.Kill(id)
			time.Sleep(d)
			c.Restart(id)
			r.fault(from, "%s: kill -9 %s %d for %v", kind, how, id, d)
		case "kill-partition-leader", "kill-broker", "pause-partition-leader":
			id, how := anyBroker, "broker"
			if kind != "kill-broker" {
				id, how = leaderOr()
			}
			if kind == "pause-partition-leader" {
				d := hold(300*time.Millisecond, 2500*time.Millisecond)
				c.PauseBroker(id)
				time.Sleep(d)
				c.ResumeBroker(id)
				r.fault(from, "%s: SIGSTOP %s %d for %v", kind, how, id, d)
				break
			}
			d := hold(200*time.Millisecond, 3*time.Second)
			c.KillBroker(id)
			time.Sleep(d)
			r.restartBroker(id)
			r.fault(from, "%s: kill -9 %s %d for %v", kind, how, id, d)
		case "sigterm-broker":
			// A rolling restart's step: a controlled shutdown, then a start.
			d := hold(200*time.Millisecond, 2*time.Second)
			c.StopBroker(anyBroker) // fails the test unless it exits 0
			time.Sleep(d)
			r.restartBroker(anyBroker)
			r.fault(from, "%s: SIGTERM broker %d, started again after %v", kind, anyBroker, d)
		case "cut-partition-leader":
			// The leader loses the controllers and its followers, while
			// producers still reach its Kafka listener: it must not
			// acknowledge what it cannot replicate. Held past the session
			// timeout, so that it is fenced and its partitions get new
			// leaders; healed, it truncates what it wrote alone.
			id, how := leaderOr()
			d := hold(testSessionTimeout+500*time.Millisecond, testSessionTimeout+4*time.Second)
			r.net.cut(id, linkMode)
			time.Sleep(d)
			// The quorum fenced it and moved the partition (when it led
			// one: a leader that was unknown is not checked).
			moved := how == "broker" || r.waitPartition(topic, part, func(p partitionJSON) bool { return p.Leader != id })
			r.net.heal(id)
			r.fault(from, "%s: cut %s %d off from the controllers and its followers (%s) for %v", kind, how, id, linkMode, d)
			if !moved {
				t.Errorf("%s: %s %d, cut off from the controllers for %v, still leads %s-%d: the controllers did not fence it", kind, how, id, d, topic, part)
			}
		case "broker-disk-full":
			id, how := leaderOr()
			d := hold(time.Second, 3*time.Second)
			what := r.diskFull(t, id, d)
			r.fault(from, "%s: %s %d's disk full for %v: %s", kind, how, id, d, what)
		case "lagging-follower-elected":
			r.laggingFollowerElected(t, from, kind, topic, part, hold)
		case "poison-batch":
			r.poisonBatch(t, from, kind, topic, part, leaderOr)
		case "flood-kafka":
			outcome = r.floodKafka(t, from, kind, topic, part, leaderOr, hold(2*time.Second, 4*time.Second), &tally.flood)
		case "kill-coordinator", "pause-coordinator":
			r.coordinatorFault(from, kind, anyBroker, hold)
		case "power-loss-broker", "power-loss-last-isr-member", "restore-snapshot", "blip-broker-links":
			outcome = r.grayFault(t, rng, kind, from, topic, part, leaderOr, hold, tally)
		}
		switch outcome {
		case grayStop:
			return
		case grayInjected:
			tally.faults[kind]++
		}
		time.Sleep(hold(100*time.Millisecond, 800*time.Millisecond))
	}
}

// restartBroker starts broker id again and points the proxy its followers
// dial at its port (the same one, unless it was taken meanwhile).
func (r *dataRun) restartBroker(id int32) {
	r.c.RestartBroker(id)
	r.net.in[id].SetTarget(r.c.BrokerAddr(id))
}

// diskFull fills broker id's file system under it while the producers
// write, holds it full for d, then empties it, and starts the broker again
// if it stopped; it returns what the broker did. A broker may refuse writes
// (KAFKA_STORAGE_ERROR) or stop; the final check finds any acknowledged
// record it did not store, or a log it broke.
func (r *dataRun) diskFull(t *testing.T, id int32, d time.Duration) string {
	t.Helper()
	dk := r.disks[id]
	if err := dk.fill(); err != nil {
		t.Fatalf("fill broker %d's disk: %v", id, err)
	}
	time.Sleep(d) // the fault's length, not synchronisation
	if err := dk.unfill(); err != nil {
		t.Fatalf("empty broker %d's disk: %v", id, err)
	}
	nd := r.c.broker(id)
	if strings.Contains(nd.Output(), "a log failed to write") {
		// It is stopping (a controlled shutdown, then exit 1): wait for
		// it, rather than take it for one that kept running.
		poll.UntilState(t, healTimeout, fmt.Sprintf("broker %d, whose log failed, to exit", id), func() (bool, string) {
			return !nd.Running(), "still running"
		})
	}
	if !nd.Running() {
		what := fmt.Sprintf("it stopped (status %d: %s); started again", nd.ExitCode(), keelproc.LastLines(strings.TrimSpace(nd.Output()), 1))
		r.restartBroker(id)
		return what
	}
	return "it kept running"
}

// laggingFollowerElected makes an unclean election likely to lose
// acknowledged records: once topic-part's ISR is full (or after a while),
// a follower of it is paused until it has left the ISR (it lags), then the
// two others are killed together and the follower resumed, the only live
// replica; the controllers elect it uncleanly. The two killed brokers
// start again once it leads (or after a while), and truncate to its log.
func (r *dataRun) laggingFollowerElected(t *testing.T, from time.Time, kind, topic string, part int32, hold func(lo, hi time.Duration) time.Duration) {
	c := r.c
	lag := hold(time.Second, 3*time.Second)
	// From a full ISR, so that what is lost is what the follower missed
	// while it lagged, not a backlog left by the fault before.
	full := r.waitPartition(topic, part, func(p partitionJSON) bool { return p.Leader > 0 && len(p.ISR) == len(p.Replicas) })
	d, err := c.DescribeTopicE(context.Background(), topic)
	if err != nil || int(part) >= len(d.Partitions) || d.Partitions[part].Leader <= 0 {
		r.fault(from, "%s: %s-%d has no leader to start from; nothing done", kind, topic, part)
		return
	}
	p := d.Partitions[part]
	var follower int32
	var others []int32
	for _, id := range p.Replicas {
		if id != p.Leader && follower == 0 {
			follower = id
			continue
		}
		others = append(others, id)
	}
	c.PauseBroker(follower)
	time.Sleep(lag) // how far it falls behind
	left := r.waitPartition(topic, part, func(p partitionJSON) bool { return !slices.Contains(p.ISR, follower) })
	c.KillTogether(nil, others)
	c.ResumeBroker(follower)
	elected := r.waitPartition(topic, part, func(p partitionJSON) bool { return p.Leader == follower })
	time.Sleep(hold(200*time.Millisecond, time.Second)) // the new leader takes writes alone
	for _, id := range others {
		r.restartBroker(id)
	}
	r.fault(from, "%s: from a full ISR (%v), paused follower %d of %s-%d for %v (left the ISR: %v), killed %v, resumed it (elected: %v), restarted %v",
		kind, full, follower, topic, part, lag, left, others, elected, others)
}

// waitPartition polls the controllers until topic-part satisfies ok, for
// at most healTimeout/4; it reports whether it did.
func (r *dataRun) waitPartition(topic string, part int32, ok func(partitionJSON) bool) bool {
	return poll.Wait(context.Background(), healTimeout/4, 50*time.Millisecond, "", func() (bool, error) {
		d, err := r.c.DescribeTopicE(context.Background(), topic)
		return err == nil && int(part) < len(d.Partitions) && ok(d.Partitions[part]), nil
	}) == nil
}

// ---------------------------------------------------------------------------
// Network and disks

// startCluster starts the run's cluster: 3 controllers (with metrics, for
// the fence counts) and brokers with Kafka listeners, each broker's data
// dir on a disk of its own when the machine can make them (for
// broker-disk-full), and each broker behind proxies of its own (dataNet).
func (r *dataRun) startCluster(t *testing.T, brokers []int32) {
	t.Helper()
	opts := []clusterOption{withSessionTimeout(testSessionTimeout), withLeaderImbalanceCheck(-time.Second), withMetrics(), withBrokerLinks()}
	if why, _ := disksAvailable(); why == "" {
		// Made before the cluster starts, so unmounted after it stops.
		r.disks = newDisks(t, "broker", brokers...)
		opts = append(opts, withBrokerDataDirs(r.disks.dataDir))
	} else if slices.ContainsFunc(r.mode.kinds, func(k dataFaultKind) bool { return k.name == "broker-disk-full" }) {
		t.Logf("broker-disk-full is skipped: %s", why)
	}
	// Closed after the processes have stopped: a broker's followers fetch
	// through them.
	r.net = &dataNet{in: map[int32]*faultproxy.Proxy{}}
	t.Cleanup(r.net.close)
	c := startCluster(t, 3, opts...)
	c.WaitForActive(t, activeTimeout)
	r.c = c
	r.net.build(t, c, brokers)
	addrs := freeAddrs(t, len(brokers))
	r.kafka = make(map[int32]string, len(brokers))
	bopts := make([][]brokerOption, len(brokers))
	for i, id := range brokers {
		r.kafka[id] = addrs[i]
		bopts[i] = []brokerOption{withRack(fmt.Sprintf("r%d", id)), withBrokerFlags("--kafka-listen="+addrs[i],
			"--replica-lag-time-max=1s", "--replica-fetch-interval=100ms", "--advertise="+r.net.in[id].Addr()),
			withBrokerMetrics(), withBrokerFlags(dataKafkaBounds...), // for flood-kafka
			withBrokerFlags("--group-initial-rebalance-delay=0s")} // the group's members join at once
	}
	c.startBrokers(brokers, bopts)
	for _, id := range brokers {
		r.net.in[id].SetTarget(c.BrokerAddr(id))
	}
	c.WaitForBrokers(t, allActive(brokers...))
}

// dataNet is the fault proxies of the data suite's brokers: each broker
// dials each controller through links of its own (keelproc's
// Config.ProxyBrokers: --test-dial-via, leader hints included), and
// advertises (--advertise) a proxy in front of its gRPC service, through
// which its followers fetch from it and the active controller dials it
// before a crash fence. Cutting both cuts a leader off from the quorum and
// from its followers, while its Kafka listener, which is not proxied,
// still takes produce requests.
type dataNet struct {
	c  *Cluster
	in map[int32]*faultproxy.Proxy // by broker: its followers' fetches
}

func (n *dataNet) build(t *testing.T, c *Cluster, brokers []int32) {
	t.Helper()
	n.c = c
	for _, b := range brokers {
		// Its target is set once the broker has a port (startCluster).
		p, err := faultproxy.New(fmt.Sprintf("to-broker-%d", b), "127.0.0.1:1")
		if err != nil {
			t.Fatal(err)
		}
		n.in[b] = p
	}
}

// cut cuts broker id off from the controllers and from its followers.
func (n *dataNet) cut(id int32, m faultproxy.Mode) {
	n.c.setBrokerLinks(id, m)
	n.in[id].Set(m)
}

// heal restores what cut cut.
func (n *dataNet) heal(id int32) { n.cut(id, faultproxy.Up) }

func (n *dataNet) close() {
	for _, p := range n.in {
		p.Close()
	}
}

// activeController returns the controller that every live one agrees is
// active, or 0 if they do not agree now.
func (r *dataRun) activeController() int32 {
	ctx, cancel := context.WithTimeout(context.Background(), describeLimit)
	defer cancel()
	live := r.c.Live()
	views, _ := r.c.Views(ctx, live)
	id, _, _ := activeAgreed(live, views)
	return id
}

// partitionLeader returns the leader of topic-partition as the controllers
// see it, or 0 if they do not answer or it has none.
func (r *dataRun) partitionLeader(topic string, partition int32) int32 {
	d, err := r.c.DescribeTopicE(context.Background(), topic)
	if err != nil || int(partition) >= len(d.Partitions) {
		return 0
	}
	return max(d.Partitions[partition].Leader, 0)
}
