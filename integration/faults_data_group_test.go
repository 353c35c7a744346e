package integration

// The data fault suite's consumer group (issue 30): a group of
// groupMembers franz-go consumers (kgo.ConsumerGroup) reads every data
// topic through the faults, and the nemesis kills (kill -9) and pauses
// (SIGSTOP) the group's coordinator, the leader of its __consumer_offsets
// partition, so that every run fails the coordinator over at least once
// (its first fault is one of these). The members commit explicitly after
// each poll, before they let a rebalance run (BlockRebalanceOnPoll): a
// record is committed only once it was recorded, which is the at-least-
// once contract the check below holds the cluster to, and each commit's
// answer is observed per partition; autocommit would commit in the
// background with no answer to check. A poller reads the group's committed
// offsets (OffsetFetch) all along. The checks:
//
//   - committed offsets never go backwards: a committed offset observed
//     (a commit the coordinator acknowledged, or an OffsetFetch answer)
//     is never below one observed before it began (commitRegressions);
//   - every acknowledged record is consumed by the group at least once,
//     at its offset, with its value (groupMissed): after the faults the
//     group catches up to the high watermarks and commits them.
//   - once the cluster is whole, FindCoordinator answers the broker that
//     the controllers say leads the group's __consumer_offsets partition.
//
// The run reports the records the group consumed, the duplicates (records
// read again after a rebalance or a failed commit), the commits and the
// rebalances.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/broker/group"
	"github.com/keel-dev/keel/internal/poll"
)

const (
	// groupMembers is how many consumers the group has: fewer than the
	// suite's partitions, so that each holds several and a rebalance
	// moves some.
	groupMembers = 3
	// groupCommitTimeout bounds a commit: past it the commit's outcome is
	// unknown, and the member polls again (its records are committed by
	// the next commit, or read again by the next owner).
	groupCommitTimeout = 5 * time.Second
	// groupFetchEvery is how often the poller reads the committed offsets.
	groupFetchEvery = 200 * time.Millisecond
)

// coordinatorFaultKinds are the nemesis's faults of the group's
// coordinator; the first fault of a run that has a group is one of them.
var coordinatorFaultKinds = []string{"kill-coordinator", "pause-coordinator"}

// commitObs is one observation of a partition's committed offset: a commit
// the coordinator acknowledged (the offset it sent), or an OffsetFetch's
// answer. call and ret bound when it took effect: the offset was committed
// at some instant between them.
type commitObs struct {
	topic     string
	partition int32
	offset    int64
	call, ret time.Duration // from the start of the faults
	source    string
}

// commitRegressions returns a message for each partition with an
// observation of a committed offset below one observed before it began
// (the first such, and how many more): once an offset is committed, and
// seen so, no later commit of the group and no later OffsetFetch may hold
// a lower one. Observations that overlap in time are not ordered, and so
// not compared.
func commitRegressions(obs []commitObs) []string {
	by := map[string]map[int32][]commitObs{}
	for _, o := range obs {
		if by[o.topic] == nil {
			by[o.topic] = map[int32][]commitObs{}
		}
		by[o.topic][o.partition] = append(by[o.topic][o.partition], o)
	}
	var bad []string
	for _, topic := range sortedKeys(by) {
		for _, p := range sortedKeys(by[topic]) {
			if msg := partitionRegression(topic, p, by[topic][p]); msg != "" {
				bad = append(bad, msg)
			}
		}
	}
	return bad
}

// partitionRegression is commitRegressions for one partition's
// observations: the first regression and how many more, or "".
func partitionRegression(topic string, p int32, part []commitObs) string {
	done := slices.Clone(part) // by the end of each observation
	slices.SortStableFunc(done, func(a, b commitObs) int { return cmp.Compare(a.ret, b.ret) })
	// highest[i] is the observation with the highest offset among
	// done[:i+1].
	highest := make([]int, len(done))
	for i := range done {
		highest[i] = i
		if i > 0 && done[highest[i-1]].offset >= done[i].offset {
			highest[i] = highest[i-1]
		}
	}
	part = slices.Clone(part)
	slices.SortStableFunc(part, func(a, b commitObs) int { return cmp.Compare(a.call, b.call) })
	var first string
	more := 0
	for _, o := range part {
		n := sort.Search(len(done), func(i int) bool { return done[i].ret >= o.call })
		if n == 0 {
			continue
		}
		h := done[highest[n-1]]
		switch {
		case o.offset >= h.offset:
		case first == "":
			ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
			first = fmt.Sprintf("%s partition %d: the committed offset went backwards: %d (%s, %v to %v) after %d (%s, %v to %v)",
				topic, p, o.offset, o.source, ms(o.call), ms(o.ret), h.offset, h.source, ms(h.call), ms(h.ret))
		default:
			more++
		}
	}
	if more > 0 {
		first += fmt.Sprintf("; and %d more observations below one before them", more)
	}
	return first
}

// groupMissed returns a message for every acknowledged record of topic
// that the group did not consume at its offset with its value; seen is
// what the group read of topic, by partition and offset.
func groupMissed(topic string, acked []ackedRecord, seen map[int32]map[int64]string) []string {
	var bad []string
	for _, a := range acked {
		v, ok := seen[a.partition][a.offset]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%s partition %d offset %d: %q was acknowledged, and the group never consumed it", topic, a.partition, a.offset, a.value))
		case v != a.value:
			bad = append(bad, fmt.Sprintf("%s partition %d offset %d: %q was acknowledged, and the group consumed %q there", topic, a.partition, a.offset, a.value, v))
		}
	}
	return bad
}

// groupTally counts what the group did, for the report.
type groupTally struct {
	runs                 int // runs with a group
	consumed, duplicates int
	commits              int // partitions' offsets the coordinator acknowledged
	fetches              int // committed offsets the poller read
	rebalances           int // generations the members joined
	lost                 int // times a member lost its partitions (session gone)
	commitErrs           map[string]int
	fetchErrs            map[string]int // the poller's
	pollErrs             map[string]int // the members' polls
	coordinatorMoves     int            // coordinator faults after which another broker coordinated
}

func (g *groupTally) add(o *groupTally) {
	g.runs += o.runs
	g.consumed += o.consumed
	g.duplicates += o.duplicates
	g.commits += o.commits
	g.fetches += o.fetches
	g.rebalances += o.rebalances
	g.lost += o.lost
	g.coordinatorMoves += o.coordinatorMoves
	g.commitErrs = addCounts(g.commitErrs, o.commitErrs)
	g.fetchErrs = addCounts(g.fetchErrs, o.fetchErrs)
	g.pollErrs = addCounts(g.pollErrs, o.pollErrs)
}

// addrs matches the addresses in an error, which errKey leaves out.
var addrs = regexp.MustCompile(`\d+\.\d+\.\d+\.\d+:\d+`)

// errKey is err's message with its addresses left out, to count errors of
// a kind together across brokers and runs.
func errKey(err error) string {
	return addrs.ReplaceAllString(err.Error(), "ADDR")
}

// addCounts adds src's counts to dst's, making dst if it is nil.
func addCounts(dst, src map[string]int) map[string]int {
	if dst == nil {
		dst = map[string]int{}
	}
	for k, v := range src {
		dst[k] += v
	}
	return dst
}

func (g *groupTally) write(b *strings.Builder) {
	if g.runs == 0 {
		return
	}
	fmt.Fprintf(b, "\nconsumer groups (%d members): %d records consumed, %d of them duplicates; %d offsets committed, %d committed offsets read back; %d rebalances, %d losses of a member's partitions; the coordinator moved after %d of its faults",
		groupMembers, g.consumed, g.duplicates, g.commits, g.fetches, g.rebalances, g.lost, g.coordinatorMoves)
	for _, m := range []struct {
		what string
		errs map[string]int
	}{{"commits failed", g.commitErrs}, {"offset fetches failed", g.fetchErrs}, {"members' polls failed", g.pollErrs}} {
		if len(m.errs) > 0 {
			fmt.Fprintf(b, "; %s:", m.what)
			for _, k := range sortedKeys(m.errs) {
				fmt.Fprintf(b, " %dx %s", m.errs[k], k)
			}
		}
	}
}

// groupRun is the consumer group of one run.
type groupRun struct {
	name    string
	topics  []string
	start   time.Time
	members []*kgo.Client
	kafka   map[int32]string
	admin   *kadm.Client
	wg      sync.WaitGroup

	mu    sync.Mutex
	obs   []commitObs
	seen  map[string]map[int32]map[int64]string // topic -> partition -> offset -> value
	bad   []string                              // what the members saw break the rules
	gens  map[int32]bool
	tally groupTally
}

// requireGroups fails t unless every broker serves consumer groups
// (JoinGroup in its ApiVersions): a group that cannot join would otherwise
// fail the run only after kafkaTimeout, with less said.
func requireGroups(t *testing.T, kafka map[int32]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	vs, err := kadm.NewClient(kafkaClient(t, kafka)).ApiVersions(ctx)
	if err != nil {
		t.Fatalf("ApiVersions: %v", err)
	}
	vs.Each(func(v kadm.BrokerApiVersions) {
		if _, ok := v.KeyMaxVersion(kmsg.JoinGroup.Int16()); !ok || v.Err != nil {
			t.Fatalf("broker %d does not serve consumer groups (JoinGroup is not in its ApiVersions; %v)", v.NodeID, v.Err)
		}
	})
}

// startGroup starts the group's members and the poller of its committed
// offsets; they run until ctx ends. It returns once every member has been
// assigned partitions and every partition of topics has a committed
// offset, so that the faults find a group at work.
func startGroup(t *testing.T, ctx context.Context, kafka map[int32]string, name string, topics []string, start time.Time) *groupRun {
	t.Helper()
	g := &groupRun{name: name, topics: topics, start: start, seen: map[string]map[int32]map[int64]string{}, gens: map[int32]bool{},
		tally: groupTally{commitErrs: map[string]int{}, fetchErrs: map[string]int{}, pollErrs: map[string]int{}}}
	for _, topic := range topics {
		g.seen[topic] = map[int32]map[int64]string{}
	}
	g.kafka = kafka
	g.admin = kadm.NewClient(kafkaClient(t, kafka))
	for i := range groupMembers {
		member := i + 1
		cl := kafkaClient(t, kafka, kgo.ConsumerGroup(name), kgo.ConsumeTopics(topics...),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
			// Short enough that a member the faults cut off is replaced
			// within the run, above the coordinator's minimum (6 s).
			kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(500*time.Millisecond),
			kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, _ map[string][]int32) {
				_, gen := cl.GroupMetadata()
				g.mu.Lock()
				defer g.mu.Unlock()
				g.gens[gen] = true
			}),
			// A member that gives partitions up commits what it read of
			// them first, as Kafka's docs ask of manual commits.
			kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, _ map[string][]int32) {
				g.commit(ctx, cl, member, "on revoke")
			}),
			kgo.OnPartitionsLost(func(context.Context, *kgo.Client, map[string][]int32) {
				g.mu.Lock()
				defer g.mu.Unlock()
				g.tally.lost++
			}))
		g.members = append(g.members, cl)
		g.wg.Add(1)
		go func() { defer g.wg.Done(); g.consume(ctx, cl, member) }()
	}
	g.wg.Add(1)
	go func() { defer g.wg.Done(); g.pollCommitted(ctx) }()
	g.waitCommitted(t, nil, "before the faults")
	return g
}

// consume is a member's loop: poll, record, commit, then let a rebalance
// run.
func (g *groupRun) consume(ctx context.Context, cl *kgo.Client, member int) {
	for ctx.Err() == nil {
		fetches := cl.PollFetches(ctx)
		g.record(fetches)
		if ctx.Err() == nil {
			g.commit(ctx, cl, member, "after a poll")
		}
		cl.AllowRebalance()
	}
}

// record adds what a poll returned to what the group has read.
func (g *groupRun) record(fetches kgo.Fetches) {
	now := time.Since(g.start).Round(time.Millisecond)
	g.mu.Lock()
	defer g.mu.Unlock()
	fetches.EachError(func(topic string, p int32, err error) {
		var loss *kgo.ErrDataLoss
		switch {
		case errors.Is(err, context.Canceled), errors.Is(err, kgo.ErrClientClosed):
		case errors.As(err, &loss):
			g.bad = append(g.bad, fmt.Sprintf("%s partition %d, at %v: a group member was told of data loss: it had read to offset %d, the leader's log ends at %d",
				topic, p, now, loss.ConsumedTo, loss.ResetTo))
		default:
			g.tally.pollErrs[errKey(err)]++
		}
	})
	fetches.EachRecord(func(rec *kgo.Record) {
		g.tally.consumed++
		seen := g.seen[rec.Topic][rec.Partition]
		if seen == nil {
			seen = map[int64]string{}
			g.seen[rec.Topic][rec.Partition] = seen
		}
		prev, ok := seen[rec.Offset]
		switch {
		case !ok:
			seen[rec.Offset] = string(rec.Value)
		case prev != string(rec.Value):
			g.bad = append(g.bad, fmt.Sprintf("%s partition %d offset %d: the group read %q there, then %q at %v",
				rec.Topic, rec.Partition, rec.Offset, prev, rec.Value, now))
		default:
			g.tally.duplicates++
		}
	})
}

// commit commits what member cl has read and not committed, and observes
// each partition the coordinator acknowledged.
func (g *groupRun) commit(ctx context.Context, cl *kgo.Client, member int, when string) {
	offsets := cl.UncommittedOffsets()
	if len(offsets) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, groupCommitTimeout)
	defer cancel()
	call := time.Since(g.start)
	cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		ret := time.Since(g.start)
		g.mu.Lock()
		defer g.mu.Unlock()
		if err != nil {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, kgo.ErrClientClosed) {
				g.tally.commitErrs[errKey(err)]++
			}
			return
		}
		sent := map[string]map[int32]int64{}
		for _, rt := range req.Topics {
			sent[rt.Topic] = map[int32]int64{}
			for _, rp := range rt.Partitions {
				sent[rt.Topic][rp.Partition] = rp.Offset
			}
		}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					g.tally.commitErrs[errKey(err)]++
					continue
				}
				off, ok := sent[rt.Topic][rp.Partition]
				if !ok {
					continue
				}
				g.tally.commits++
				g.obs = append(g.obs, commitObs{topic: rt.Topic, partition: rp.Partition, offset: off, call: call, ret: ret,
					source: fmt.Sprintf("member %d's commit %s in generation %d", member, when, req.Generation)})
			}
		}
	})
}

// pollCommitted reads the group's committed offsets every groupFetchEvery
// until ctx ends.
func (g *groupRun) pollCommitted(ctx context.Context) {
	tick := time.NewTicker(groupFetchEvery)
	defer tick.Stop()
	f := &offsetFetcher{kafka: g.kafka}
	defer f.close()
	for {
		g.fetchCommitted(ctx, f)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// offsetFetcher reads a group's committed offsets with a client of its
// own, made again after an error that is not one of Kafka's codes:
// franz-go's OffsetFetch (sharded by group) keeps the coordinator it found
// while dialing it fails (a broker killed, or not yet listening after its
// start), so a client kept for the run would read nothing for seconds
// after each coordinator fault.
type offsetFetcher struct {
	kafka map[int32]string
	cl    *kgo.Client
}

func (f *offsetFetcher) fetch(ctx context.Context, group string) (kadm.OffsetResponses, error) {
	if f.cl == nil {
		cl, err := kgo.NewClient(kafkaClientOpts(f.kafka)...)
		if err != nil {
			return nil, err
		}
		f.cl = cl
	}
	resp, err := kadm.NewClient(f.cl).FetchOffsets(ctx, group)
	if ke := (*kerr.Error)(nil); err != nil && !errors.As(err, &ke) {
		f.close()
	}
	return resp, err
}

func (f *offsetFetcher) close() {
	if f.cl != nil {
		f.cl.Close()
		f.cl = nil
	}
}

// fetchCommitted reads the group's committed offsets once with f,
// observes them, and returns them (nil on an error).
func (g *groupRun) fetchCommitted(ctx context.Context, f *offsetFetcher) map[string]map[int32]int64 {
	fctx, cancel := context.WithTimeout(ctx, groupCommitTimeout)
	defer cancel()
	call := time.Since(g.start)
	resp, err := f.fetch(fctx, g.name)
	ret := time.Since(g.start)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			g.tally.fetchErrs[errKey(err)]++
		}
		return nil
	}
	out := map[string]map[int32]int64{}
	// A partition the answer leaves out has no committed offset: -1, below
	// any the group committed before.
	for _, topic := range g.topics {
		for p := range int32(dataPartitions) {
			if _, ok := resp.Lookup(topic, p); !ok {
				g.obs = append(g.obs, commitObs{topic: topic, partition: p, offset: -1, call: call, ret: ret, source: "OffsetFetch, no offset committed"})
			}
		}
	}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Err != nil {
			g.tally.fetchErrs[errKey(o.Err)]++
			return
		}
		if !slices.Contains(g.topics, o.Topic) {
			return
		}
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]int64{}
		}
		out[o.Topic][o.Partition] = o.At
		g.tally.fetches++
		g.obs = append(g.obs, commitObs{topic: o.Topic, partition: o.Partition, offset: o.At, call: call, ret: ret, source: "OffsetFetch"})
	})
	return out
}

// waitCommitted waits until the group has committed an offset for every
// partition of its topics, at least hws's when hws is not nil: the group
// is at work, or has caught up.
func (g *groupRun) waitCommitted(t *testing.T, hws map[string]map[int32]int64, what string) {
	t.Helper()
	var state string
	deadline := time.Now().Add(kafkaTimeout)
	f := &offsetFetcher{kafka: g.kafka}
	defer f.close()
	for {
		committed := g.fetchCommitted(context.Background(), f)
		var behind []string
		for _, topic := range g.topics {
			for p := range int32(dataPartitions) {
				c, ok := committed[topic][p]
				switch hw := hws[topic][p]; {
				case hws == nil && (!ok || c < 0):
					behind = append(behind, fmt.Sprintf("%s-%d (nothing committed)", topic, p))
				case hws != nil && hw > 0 && (!ok || c < hw):
					behind = append(behind, fmt.Sprintf("%s-%d (committed %d, of %d)", topic, p, c, hw))
				}
			}
		}
		if len(behind) == 0 {
			return
		}
		state = strings.Join(behind, ", ")
		if time.Now().After(deadline) {
			g.mu.Lock()
			t.Fatalf("the consumer group %s did not commit every partition %s within %v: behind on %s; commit errors %v, fetch errors %v",
				g.name, what, kafkaTimeout, state, g.tally.commitErrs, g.tally.fetchErrs)
			g.mu.Unlock()
		}
		time.Sleep(100 * time.Millisecond) // the poll's interval
	}
}

// stop leaves the group and closes its clients, while the cluster is
// whole (a member's Close waits for its LeaveGroup), and waits for the
// loops ended by their context.
func (g *groupRun) stop() {
	var wg sync.WaitGroup
	for _, cl := range g.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), groupCommitTimeout)
			defer cancel()
			_ = cl.LeaveGroupContext(ctx) // the group is judged already
			cl.Close()
		}()
	}
	wg.Wait()
	g.wg.Wait()
}

// judge fails t on every rule the group broke and returns its tally.
func (g *groupRun) judge(t *testing.T, acked map[string][]ackedRecord) *groupTally {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	bad := slices.Clone(g.bad)
	bad = append(bad, commitRegressions(g.obs)...)
	for _, topic := range g.topics {
		bad = append(bad, groupMissed(topic, acked[topic], g.seen[topic])...)
	}
	for i, msg := range bad {
		if i == 10 {
			t.Errorf("consumer group %s: ... and %d more violations", g.name, len(bad)-i)
			break
		}
		t.Errorf("consumer group %s: %s", g.name, msg)
	}
	out := g.tally
	out.runs = 1
	out.rebalances = len(g.gens)
	return &out
}

// coordinator returns the leader of group's __consumer_offsets partition
// as the controllers see it, or 0 when the topic or its leader is unknown.
func (r *dataRun) coordinator(name string) (int32, int32) {
	d, err := r.c.DescribeTopicE(context.Background(), group.OffsetsTopic)
	if err != nil || len(d.Partitions) == 0 {
		return 0, -1
	}
	p := group.PartitionFor(name, int32(len(d.Partitions)))
	return max(d.Partitions[p].Leader, 0), p
}

// coordinatorFault kills (kill -9) or pauses (SIGSTOP) the group's
// coordinator for a while, then starts or resumes it; a pause is held from
// well within the brokers' session to past it, so that the coordinator
// sometimes keeps its partition and sometimes loses it while frozen.
func (r *dataRun) coordinatorFault(from time.Time, kind string, anyBroker int32, hold func(lo, hi time.Duration) time.Duration) {
	c := r.c
	name := ""
	if r.group != nil {
		name = r.group.name
	}
	id, part := r.coordinator(name)
	how := fmt.Sprintf("coordinator of %s (leader of %s-%d)", name, group.OffsetsTopic, part)
	if id == 0 {
		id, how = anyBroker, "broker (no coordinator known)"
	}
	var did string
	switch kind {
	case "pause-coordinator":
		d := hold(300*time.Millisecond, testSessionTimeout+2*time.Second)
		c.PauseBroker(id)
		time.Sleep(d) // the fault's length, not synchronisation
		c.ResumeBroker(id)
		did = fmt.Sprintf("SIGSTOP %s %d for %v", how, id, d)
	default:
		d := hold(200*time.Millisecond, 3*time.Second)
		c.KillBroker(id)
		time.Sleep(d)
		r.restartBroker(id)
		did = fmt.Sprintf("kill -9 %s %d for %v", how, id, d)
	}
	after, _ := r.coordinator(name)
	switch {
	case after == 0:
		did += "; no coordinator known after it"
	case after != id && part >= 0:
		did += fmt.Sprintf("; broker %d coordinates it now", after)
		if r.group != nil {
			r.group.mu.Lock()
			r.group.tally.coordinatorMoves++
			r.group.mu.Unlock()
		}
	}
	r.fault(from, "%s: %s", kind, did)
}

// waitCoordinatorAgrees waits until FindCoordinator answers, for the
// group, the broker the controllers say leads its __consumer_offsets
// partition: once the cluster is whole, the listener finds the
// coordinator the image names.
func (r *dataRun) waitCoordinatorAgrees(t *testing.T) {
	t.Helper()
	g := r.group
	poll.UntilState(t, kafkaTimeout, fmt.Sprintf("FindCoordinator(%s) to answer the leader of its %s partition", g.name, group.OffsetsTopic), func() (bool, string) {
		leader, p := r.coordinator(g.name)
		ctx, cancel := context.WithTimeout(context.Background(), groupCommitTimeout)
		defer cancel()
		found := g.admin.FindGroupCoordinators(ctx, g.name)[g.name]
		if found.Err != nil {
			return false, fmt.Sprintf("FindCoordinator: %v (%s); the controllers: broker %d leads %s-%d", found.Err, found.ErrMessage, leader, group.OffsetsTopic, p)
		}
		return leader > 0 && found.NodeID == leader, fmt.Sprintf("FindCoordinator answers broker %d; the controllers: broker %d leads %s-%d", found.NodeID, leader, group.OffsetsTopic, p)
	})
}

// createOffsetsTopic has the brokers create __consumer_offsets, as a
// group's first FindCoordinator does, and waits until every partition of
// it is led with a full ISR: before the snapshot that restore-snapshot
// restores, which would otherwise delete the topic with every offset the
// group committed.
func (r *dataRun) createOffsetsTopic(t *testing.T, name string) {
	t.Helper()
	requireGroups(t, r.kafka)
	admin := kadm.NewClient(kafkaClient(t, r.kafka))
	poll.UntilState(t, kafkaTimeout, fmt.Sprintf("FindCoordinator(%s) to answer a coordinator", name), func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), groupCommitTimeout)
		defer cancel()
		found := admin.FindGroupCoordinators(ctx, name)[name]
		return found.Err == nil, fmt.Sprintf("%v (%s)", found.Err, found.ErrMessage)
	})
	r.c.WaitForTopic(t, group.OffsetsTopic, "led with full ISRs", func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool { return p.Leader > 0 && len(p.ISR) == 3 })
	})
}
