package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keel-dev/keel/internal/poll"
)

const (
	// DefaultGroupRecords is what consume-group writes, then consumes.
	DefaultGroupRecords = 100_000
	// groupMembers is the size of consume-group's group before a member
	// joins and leaves again.
	groupMembers = 3
	// groupHeartbeat is the members' heartbeat interval: well below
	// Kafka's 3 s, so that a rebalance times the coordinator and the
	// protocol rather than how long a member waits to hear of it.
	groupHeartbeat = 100 * time.Millisecond
	// groupRebalanceTimeout bounds the wait for a rebalance to finish.
	groupRebalanceTimeout = 2 * time.Minute
)

// consumeGroupRun is one run of consume-group.
type consumeGroupRun struct {
	records int64
	// ceiling is one consumer without a group; group is the group of
	// three. Each is timed from its first record to its last.
	ceiling, group consumed
	// firstRecord is from the group's clients' start to its first record:
	// the joins, the first assignment and the first fetch.
	firstRecord time.Duration
	duplicates  int64
	// join and leave: from a fourth member's start, or its Close, until
	// every partition is owned by exactly one member again (and, on a
	// join, some by the new one).
	join, leave time.Duration
	// use is the machine's during the join.
	use stepUse
}

// consumed is how fast one consumer or a group read a topic.
type consumed struct{ records, took float64 }

func (c consumed) recordsPerS() float64 { return c.records / c.took }

// consumeGroup: the data path through a consumer group. Each run writes
// Data.GroupRecords records (acks=all) to a topic of Data.Partitions
// partitions (RF 3), reads them with one franz-go consumer without a group
// (the ceiling), then with a group of three members that commit what they
// read (records/s from the first record to the last, and every record read
// exactly once, the commits at the log end); then a fourth member joins
// and leaves again. Its median_s and max_s are the join's rebalance: from
// the fourth member's start until every partition is assigned again.
func (r *runner) consumeGroup(ctx context.Context, dc *dataCluster) (Result, error) {
	d := r.cfg.Data
	if d.Partitions < groupMembers+1 {
		return Result{}, fmt.Errorf("--produce-partitions %d: at least %d, one for each member", d.Partitions, groupMembers+1)
	}
	var runs []consumeGroupRun
	for run := 1; run <= r.cfg.Runs; run++ {
		topic := fmt.Sprintf("bench-consume-group-%d", run)
		if err := dc.createTopic(ctx, topic, d.Partitions); err != nil {
			return Result{}, err
		}
		statusf(r.cfg.Status, "consume-group: run %d/%d: writing %d records to %d partitions", run, r.cfg.Runs, d.GroupRecords, d.Partitions)
		fill := load{seeds: dc.seeds(), topic: topic, producers: d.Producers, recordSize: d.RecordSize, allISR: true, records: d.GroupRecords}
		if _, err := fill.run(ctx); err != nil {
			return Result{}, fmt.Errorf("write %d records: %w", d.GroupRecords, err)
		}
		gr, err := r.consumeGroupRun(ctx, dc, topic, fmt.Sprintf("%s-group-%d", r.prefix, run))
		if err != nil {
			return Result{}, err
		}
		statusf(r.cfg.Status, "consume-group: run %d/%d: %d records, group of %d %.0f records/s (%.2f of one consumer's %.0f), first record after %v; join %v, leave %v",
			run, r.cfg.Runs, gr.records, groupMembers, gr.group.recordsPerS(), gr.group.recordsPerS()/gr.ceiling.recordsPerS(),
			gr.ceiling.recordsPerS(), gr.firstRecord.Round(time.Millisecond), gr.join.Round(time.Millisecond), gr.leave.Round(time.Millisecond))
		runs = append(runs, gr)
		if err := dc.deleteTopic(ctx, topic); err != nil {
			return Result{}, err
		}
	}
	return consumeGroupResult(d, runs), nil
}

// consumeGroupRun reads topic with one consumer, then with group, and
// times a fourth member's join and leave.
func (r *runner) consumeGroupRun(ctx context.Context, dc *dataCluster, topic, group string) (consumeGroupRun, error) {
	var gr consumeGroupRun
	ends, err := endOffsets(ctx, dc.seeds(), topic)
	if err != nil {
		return gr, err
	}
	for _, e := range ends {
		gr.records += e
	}
	statusf(r.cfg.Status, "consume-group: one consumer without a group reads the %d records", gr.records)
	if gr.ceiling, err = consumeAlone(ctx, dc.seeds(), topic, gr.records); err != nil {
		return gr, fmt.Errorf("one consumer: %w", err)
	}
	statusf(r.cfg.Status, "consume-group: a group of %d reads them", groupMembers)
	g := newBenchGroup(dc.seeds(), topic, group, ends)
	defer g.close()
	start := time.Now()
	for range groupMembers {
		if err := g.add(ctx); err != nil {
			return gr, err
		}
	}
	if err := g.waitConsumed(ctx, gr.records); err != nil {
		return gr, err
	}
	first, last := g.span()
	gr.firstRecord = first.Sub(start)
	gr.group = consumed{records: float64(gr.records), took: last.Sub(first).Seconds()}
	gr.duplicates = g.duplicates()
	if err := g.checkCommitted(ctx); err != nil {
		return gr, err
	}
	statusf(r.cfg.Status, "consume-group: a fourth member joins, then leaves")
	mark := r.meters.begin()
	start = time.Now()
	if err := g.add(ctx); err != nil {
		return gr, err
	}
	if err := g.waitBalanced(ctx, "the fourth member's join", true); err != nil {
		return gr, err
	}
	gr.join = time.Since(start)
	gr.use = r.meters.end(mark)
	leaving := len(g.members) - 1
	g.stopPolling(leaving)
	start = time.Now()
	g.leave(leaving)
	if err := g.waitBalanced(ctx, "the fourth member's leave", false); err != nil {
		return gr, err
	}
	gr.leave = time.Since(start)
	return gr, nil
}

// endOffsets are topic's partitions' log end offsets.
func endOffsets(ctx context.Context, seeds []string, topic string) (map[int32]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	listed, err := kadm.NewClient(cl).ListEndOffsets(lctx, topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("the end offsets of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out, nil
}

// consumeAlone reads records records of topic from its start with one
// consumer without a group, timed from the first record to the last.
func consumeAlone(ctx context.Context, seeds []string, topic string, records int64) (consumed, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return consumed{}, err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var n int64
	var first time.Time
	for n < records {
		fs := cl.PollFetches(cctx)
		if err := cctx.Err(); err != nil {
			return consumed{}, fmt.Errorf("%d of %d records read: %w", n, records, err)
		}
		if first.IsZero() && fs.NumRecords() > 0 {
			first = time.Now()
		}
		n += int64(fs.NumRecords())
	}
	return consumed{records: float64(n), took: time.Since(first).Seconds()}, nil
}

// benchGroup is consume-group's group: its members, which partitions each
// owns (from kgo's OnPartitions callbacks), and which records were read.
type benchGroup struct {
	seeds        []string
	topic, group string
	partitions   int

	mu      sync.Mutex
	members []*benchMember
	// seen counts each record's reads, by partition and offset.
	seen        map[int32][]uint8
	read        int64
	first, last time.Time
	failure     error // the first error a member's poll returned
}

// benchMember is one member: its client, the partitions it owns, and the
// poll loop's stop.
type benchMember struct {
	cl    *kgo.Client
	owned map[int32]bool // under benchGroup.mu
	stop  context.CancelFunc
	done  chan struct{}
	// closed: the member left (close leaves the others).
	closed bool
}

func newBenchGroup(seeds []string, topic, group string, ends map[int32]int64) *benchGroup {
	g := &benchGroup{seeds: seeds, topic: topic, group: group, partitions: len(ends), seen: map[int32][]uint8{}}
	for p, e := range ends {
		g.seen[p] = make([]uint8, e)
	}
	return g
}

// add starts a member and its poll loop. It commits what it read before
// it gives up a partition, and blocks rebalances while it counts a poll,
// so that no record is read twice.
func (g *benchGroup) add(ctx context.Context) error {
	m := &benchMember{owned: map[int32]bool{}, done: make(chan struct{})}
	g.mu.Lock()
	id := len(g.members)
	g.mu.Unlock()
	own := func(ps map[string][]int32, owned bool) {
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, p := range ps[g.topic] {
			if owned {
				m.owned[p] = true
			} else {
				delete(m.owned, p)
			}
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(g.seeds...), kgo.ClientID(fmt.Sprintf("bench-member-%d", id+1)),
		kgo.ConsumerGroup(g.group), kgo.ConsumeTopics(g.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.HeartbeatInterval(groupHeartbeat), kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { own(ps, true) }),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, ps map[string][]int32) {
			// What was read is committed before another member may
			// read the partition from the committed offset.
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				g.fail(fmt.Errorf("commit before a revoke: %w", err))
			}
			own(ps, false)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { own(ps, false) }))
	if err != nil {
		return err
	}
	m.cl = cl
	pctx, stop := context.WithCancel(ctx)
	m.stop = stop
	g.mu.Lock()
	g.members = append(g.members, m)
	g.mu.Unlock()
	go func() {
		defer close(m.done)
		for {
			fs := cl.PollFetches(pctx)
			if pctx.Err() != nil || fs.IsClientClosed() {
				cl.AllowRebalance()
				return
			}
			fs.EachError(func(_ string, _ int32, err error) { g.fail(err) })
			now := time.Now()
			fs.EachRecord(func(rec *kgo.Record) { g.note(rec, now) })
			cl.AllowRebalance()
		}
	}()
	return nil
}

// note counts a read of rec.
func (g *benchGroup) note(rec *kgo.Record, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := g.seen[rec.Partition]
	if rec.Offset < 0 || rec.Offset >= int64(len(seen)) {
		return // past what the bench wrote: nothing else writes here
	}
	if seen[rec.Offset] == 0 {
		g.read++
	}
	if seen[rec.Offset] < 255 {
		seen[rec.Offset]++
	}
	if g.first.IsZero() {
		g.first = at
	}
	g.last = at
}

func (g *benchGroup) fail(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failure == nil && !errors.Is(err, context.Canceled) {
		g.failure = err
	}
}

// waitConsumed waits until every one of records was read.
func (g *benchGroup) waitConsumed(ctx context.Context, records int64) error {
	return poll.Wait(ctx, 10*time.Minute, time.Millisecond, fmt.Sprintf("the group reading all %d records", records), func() (bool, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.read >= records, g.failure
	})
}

// span is the time of the first record read and of the last.
func (g *benchGroup) span() (first, last time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.first, g.last
}

// duplicates is how many reads were of a record read before.
func (g *benchGroup) duplicates() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var n int64
	for _, seen := range g.seen {
		for _, c := range seen {
			if c > 1 {
				n += int64(c) - 1
			}
		}
	}
	return n
}

// checkCommitted commits what every member read and checks that the
// group's committed offset of each partition is its log end: a member
// commits only what it read.
func (g *benchGroup) checkCommitted(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for i, m := range g.members {
		if err := m.cl.CommitUncommittedOffsets(cctx); err != nil {
			return fmt.Errorf("member %d's commit: %w", i+1, err)
		}
	}
	adm := kadm.NewClient(g.members[0].cl)
	committed, err := adm.FetchOffsets(cctx, g.group)
	if err == nil {
		err = committed.Error()
	}
	if err != nil {
		return fmt.Errorf("the group's committed offsets: %w", err)
	}
	for p, seen := range g.seen {
		c, ok := committed.Lookup(g.topic, p)
		if !ok || c.At != int64(len(seen)) {
			return fmt.Errorf("partition %d: committed offset %d (found %v), want its log end %d", p, c.At, ok, len(seen))
		}
	}
	return nil
}

// waitBalanced waits until every partition is owned by exactly one
// running member and, with newest, the newest member owns some.
func (g *benchGroup) waitBalanced(ctx context.Context, what string, newest bool) error {
	return poll.Wait(ctx, groupRebalanceTimeout, time.Millisecond, what, func() (bool, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		owners := map[int32]int{}
		for _, m := range g.members {
			for p := range m.owned {
				owners[p]++
			}
		}
		if newest && len(g.members[len(g.members)-1].owned) == 0 {
			return false, g.failure
		}
		for p := range g.seen {
			if owners[p] != 1 {
				return false, g.failure
			}
		}
		return true, g.failure
	})
}

// stopPolling stops member i's poll loop and waits for it.
func (g *benchGroup) stopPolling(i int) {
	m := g.members[i]
	m.stop()
	<-m.done
}

// leave closes member i's client, which leaves the group; it owns
// nothing from then on, whatever its callbacks were told.
func (g *benchGroup) leave(i int) {
	m := g.members[i]
	m.cl.Close()
	g.mu.Lock()
	defer g.mu.Unlock()
	m.owned, m.closed = map[int32]bool{}, true
}

// close stops every member: each leaves the group.
func (g *benchGroup) close() {
	for i, m := range g.members {
		g.stopPolling(i)
		if !m.closed {
			g.leave(i)
		}
	}
}

// consumeGroupResult sums up consume-group's runs.
func consumeGroupResult(d DataConfig, runs []consumeGroupRun) Result {
	var join []time.Duration
	var leave, group, ceiling, ratio, first []float64
	var dups float64
	var steps []stepUse
	for _, gr := range runs {
		steps = append(steps, gr.use)
		join = append(join, gr.join)
		leave = append(leave, gr.leave.Seconds())
		group = append(group, gr.group.recordsPerS())
		ceiling = append(ceiling, gr.ceiling.recordsPerS())
		ratio = append(ratio, gr.group.recordsPerS()/gr.ceiling.recordsPerS())
		first = append(first, gr.firstRecord.Seconds())
		dups += float64(gr.duplicates)
	}
	return newResult(ScenarioConsumeGroup, d.Partitions, dataBrokers, join, withUse(steps,
		Figure{"records", float64(d.GroupRecords)},
		Figure{"members", groupMembers},
		Figure{"group_records_per_s", Median(group)},
		Figure{"one_consumer_records_per_s", Median(ceiling)},
		Figure{"one_consumer_ratio", Median(ratio)},
		Figure{"first_record_s", Median(first)},
		Figure{"leave_rebalance_s", Median(leave)},
		Figure{"leave_rebalance_max_s", Max(leave)},
		Figure{"duplicates", dups},
	)...)
}
