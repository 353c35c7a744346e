package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/keel-dev/keel/internal/poll"
)

// create: P partitions over B brokers, created from scratch each run (the
// previous run's topics are deleted first; the last run's stay as the
// dataset of the scenarios after).
func (r *runner) create(ctx context.Context) (Result, error) {
	sizes := topicSizes(r.cfg.Partitions, r.cfg.PerTopic)
	var (
		applied, committed  []time.Duration
		partsPerS, recsPerS []float64
		prev                []string
		steps               []stepUse
	)
	for run := 1; run <= r.cfg.Runs; run++ {
		if prev != nil {
			statusf(r.cfg.Status, "create: deleting the %d topics of run %d", len(prev), run-1)
			if err := r.deleteTopics(ctx, prev); err != nil {
				return Result{}, err
			}
			r.dataset = nil
		}
		if _, err := r.barrier(ctx); err != nil {
			return Result{}, err
		}
		names := make([]string, len(sizes))
		for i := range names {
			names[i] = fmt.Sprintf("%s-c%d-%d", r.prefix, run, i)
		}
		statusf(r.cfg.Status, "create: run %d/%d: %d partitions in %d topics over %d brokers", run, r.cfg.Runs, r.cfg.Partitions, len(names), len(r.brokers))
		start := time.Now()
		mark := r.meters.begin()
		if err := r.createTopics(ctx, names, sizes, fmt.Sprintf("create run %d", run)); err != nil {
			return Result{}, err
		}
		commit := time.Since(start)
		r.dataset, prev = names, names
		// Every broker has the partitions once it has the last entry that
		// holds a topic of this run (a topic and its partitions are one
		// entry): the observer names those entries.
		end, err := r.barrierShown(ctx, "brokers applying the partitions")
		if err != nil {
			return Result{}, err
		}
		steps = append(steps, r.meters.end(mark))
		target := end
		want := map[string]bool{}
		for _, n := range names {
			want[n] = true
		}
		var last uint64
		for _, e := range r.observer(-1).Events(EventTopic) {
			if want[e.Name] {
				delete(want, e.Name)
				last = max(last, e.Offset)
			}
		}
		if len(want) == 0 {
			target = last
		}
		_, at, err := reached(r.brokers, target)
		if err != nil {
			return Result{}, err
		}
		committed = append(committed, commit)
		applied = append(applied, at.Sub(start))
		partsPerS = append(partsPerS, float64(r.cfg.Partitions)/commit.Seconds())
		recsPerS = append(recsPerS, float64(r.cfg.Partitions+len(names))/commit.Seconds())
	}
	c := seconds(committed...)
	extra := []Figure{
		{"commit_median_s", Median(c)},
		{"commit_max_s", Max(c)},
		{"partitions_per_s", Median(partsPerS)},
		{"records_per_s", Median(recsPerS)},
	}
	// The target is raw raft committing one entry at a time (a ratio of 1
	// or more). Raw raft pipelined is beside it for reference only: it
	// applies, decodes and pushes nothing, while here three controllers
	// and the simulated brokers share the machine.
	if r.ceiling.RecordsPerS > 0 {
		extra = append(extra, Figure{"raft_one_at_a_time_ratio", Median(recsPerS) / r.ceiling.RecordsPerS})
	}
	if r.ceiling.PipelinedRecordsPerS > 0 {
		extra = append(extra, Figure{"raft_pipelined_ratio", Median(recsPerS) / r.ceiling.PipelinedRecordsPerS})
	}
	extra = append(extra, Figure{"topics", float64(len(sizes))}, Figure{"full_brokers", float64(r.cfg.FullBrokers)})
	extra = append(extra, createCPUFigures(steps, r.cfg.Partitions)...)
	return newResult(ScenarioCreate, r.cfg.Partitions, len(r.brokers), applied, extra...), nil
}

// createCPUFigures are create's CPU figures: each role's seconds and
// gaps, and the CPU-µs per partition of the controllers and of the
// simulated brokers (the bench process: its admin client's share is small).
func createCPUFigures(steps []stepUse, partitions int) []Figure {
	out := useFigures(steps)
	if len(steps) == 0 || !steps[0].cpu.ok {
		return out
	}
	var ctrl, sim []float64
	for _, s := range steps {
		ctrl = append(ctrl, perUnit(s.cpu.controllers, float64(partitions))*1e6)
		sim = append(sim, perUnit(s.cpu.bench, float64(partitions))*1e6)
	}
	if steps[0].cpu.controllerProcs > 0 {
		out = append(out, Figure{"controllers_cpu_us_per_partition", Median(ctrl)})
	}
	return append(out, Figure{"sim_brokers_cpu_us_per_partition", Median(sim)})
}

// heartbeats: the latency of every thin broker's heartbeats, at the
// default interval, over a window per run.
func (r *runner) heartbeats(ctx context.Context) (Result, error) {
	var p50s, p99s, maxes []float64
	var p99 []time.Duration
	samples, failures := 0, 0
	var steps []stepUse
	for run := 1; run <= r.cfg.Runs; run++ {
		if _, err := r.barrier(ctx); err != nil {
			return Result{}, err
		}
		statusf(r.cfg.Status, "heartbeats: run %d/%d: %d brokers every %v, measured for %v", run, r.cfg.Runs, len(r.brokers), r.cfg.HeartbeatInterval, r.cfg.HeartbeatWindow)
		bar := r.prog.start(int64(r.cfg.HeartbeatWindow/time.Second), fmt.Sprintf("heartbeats run %d (s)", run))
		r.hb.start()
		mark := r.meters.begin()
		start := time.Now()
		tick := time.NewTicker(time.Second)
		end := time.NewTimer(r.cfg.HeartbeatWindow)
	window:
		for {
			select {
			case <-ctx.Done():
				break window
			case <-end.C:
				break window
			case <-tick.C:
				bar.set(int(time.Since(start) / time.Second))
			}
		}
		tick.Stop()
		end.Stop()
		lat, failed := r.hb.stop()
		steps = append(steps, r.meters.end(mark))
		bar.done()
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		if len(lat) == 0 {
			return Result{}, fmt.Errorf("no heartbeat succeeded in %v", r.cfg.HeartbeatWindow)
		}
		samples += len(lat)
		failures += failed
		p99 = append(p99, Percentile(lat, 0.99))
		p50s = append(p50s, Percentile(lat, 0.50).Seconds()*1000)
		p99s = append(p99s, Percentile(lat, 0.99).Seconds()*1000)
		maxes = append(maxes, Percentile(lat, 1).Seconds()*1000)
	}
	extra := []Figure{
		{"p50_ms", Median(p50s)},
		{"p99_ms", Median(p99s)},
		{"max_ms", Max(maxes)},
		{"interval_s", r.cfg.HeartbeatInterval.Seconds()},
		{"measured_brokers", float64(len(r.thin(-1)))},
		{"samples", float64(samples)},
		{"failures", float64(failures)},
	}
	return newResult(ScenarioHeartbeats, r.partitions(), len(r.brokers), p99, withUse(steps, extra...)...), nil
}

// waitFenced waits, polling every interval, until the observer has the
// FenceBroker entry of broker id at epoch, and returns it.
func (r *runner) waitFenced(ctx context.Context, obs *thinBroker, id int32, epoch int64, interval time.Duration) (Event, error) {
	var fence Event
	bar := r.prog.start(-1, "waiting for the fencing")
	defer bar.done()
	err := poll.Wait(ctx, r.timeout, interval, fmt.Sprintf("broker %d to be fenced", id), func() (bool, error) {
		for _, e := range obs.Events(EventFence) {
			if e.Broker == id && e.Epoch == epoch {
				fence = e
				return true, nil
			}
		}
		return false, nil
	})
	return fence, err
}

// brokerFailure: the thin broker leading the most partitions falls silent
// (no heartbeats, no stream, its connections left open: a paused process
// or a network cut, to the controller; a closed connection would be a
// crash, brokerCrash); its session runs out and the controller fences it,
// moving its leaderships in the same decision. Timed from the FenceBroker entry's
// arrival at the first broker to have it: until the last partition it led
// has a new leader (in the observer's stream) and until every live broker
// has that. A new incarnation of the broker then registers again (it is in
// no ISR any more, so the next run stops another broker).
func (r *runner) brokerFailure(ctx context.Context) (Result, error) {
	if err := r.ensureDataset(ctx); err != nil {
		return Result{}, err
	}
	var spread, newLeaders, detection []time.Duration
	var led, leaderless []float64
	var steps []stepUse
	for run := 1; run <= r.cfg.Runs; run++ {
		l, err := r.loseBroker(ctx, func(id int32, parts int) {
			statusf(r.cfg.Status, "broker-failure: run %d/%d: stopping broker %d, which leads %d partitions; waiting for its session to run out",
				run, r.cfg.Runs, id, parts)
		}, (*thinBroker).Silence, 5*time.Millisecond)
		if err != nil {
			return Result{}, err
		}
		spread = append(spread, l.allAt.Sub(l.fencedAt))
		newLeaders = append(newLeaders, max(0, l.doneAt.Sub(l.fencedAt)))
		detection = append(detection, l.fencedAt.Sub(l.stopped))
		led = append(led, float64(l.led))
		leaderless = append(leaderless, float64(l.left))
		steps = append(steps, l.use)
	}
	nl := seconds(newLeaders...)
	return newResult(ScenarioBrokerFailure, r.partitions(), len(r.brokers), spread, withUse(steps,
		Figure{"new_leaders_median_s", Median(nl)},
		Figure{"new_leaders_max_s", Max(nl)},
		Figure{"led_partitions", Median(led)},
		Figure{"leaderless_partitions", Max(leaderless)},
		Figure{"kill_to_fence_median_s", Median(seconds(detection...))},
	)...), nil
}

// brokerLoss is one run of brokerFailure or brokerCrash.
type brokerLoss struct {
	stopped  time.Time // when the victim was stopped
	fencedAt time.Time // when the first live broker had its fencing
	allAt    time.Time // when every live broker had the new leaders
	doneAt   time.Time // when the observer had every new leader there was
	led      int       // partitions the victim led
	left     int       // of them, left without a leader
	use      stepUse   // from the stop until every live broker had the new leaders
}

// loseBroker stops, with stop, the thin broker leading the most partitions
// (say names it first), waits (polling every interval) for its fencing and
// then for every live broker to apply the new leaders, and registers a new
// incarnation of it for the next run.
func (r *runner) loseBroker(ctx context.Context, say func(id int32, parts int), stop func(*thinBroker), interval time.Duration) (brokerLoss, error) {
	if _, err := r.barrier(ctx); err != nil {
		return brokerLoss{}, err
	}
	leaders, err := r.leaders(ctx)
	if err != nil {
		return brokerLoss{}, err
	}
	victim, parts := r.busiestThin(leaders)
	id, epoch := victim.ID(), victim.Epoch()
	obs := r.observer(id)
	w := newLeaderWatch(id, parts)
	obs.setWatch(w)
	say(id, len(parts))
	mark := r.meters.begin()
	l := brokerLoss{stopped: time.Now(), led: len(parts)}
	stop(victim)
	fence, err := r.waitFenced(ctx, obs, id, epoch, interval)
	victim.Kill() // fenced (or given up on): its connections may close now
	if err != nil {
		obs.setWatch(nil)
		return brokerLoss{}, err
	}
	live := r.live(id)
	// The leadership moves are committed with the fencing or before it
	// (fenceRecords), so once the observer has the FenceBroker entry the
	// watch has seen every new leader there will be.
	left, doneAt, movedAt := w.state()
	obs.setWatch(nil)
	target := max(fence.Offset, movedAt)
	if err := r.waitOffset(ctx, live, target, "brokers applying the new leaders"); err != nil {
		return brokerLoss{}, err
	}
	l.use = r.meters.end(mark)
	if l.fencedAt, _, err = reached(live, fence.Offset); err != nil {
		return brokerLoss{}, err
	}
	if _, l.allAt, err = reached(live, target); err != nil {
		return brokerLoss{}, err
	}
	if left > 0 {
		// Some partitions were left without a leader (no other ISR
		// member): the time is until the observer had the rest.
		doneAt, _ = obs.ReachedAt(target)
	}
	l.doneAt, l.left = doneAt, left
	return l, r.replace(ctx, id)
}

// controlledShutdown: the thin broker leading the most partitions shuts
// down cleanly, as broker.Agent does on SIGTERM; timed from its first
// heartbeat asking to shut down until the controller answers that it may
// exit (it leads nothing and every active broker has applied the moves).
func (r *runner) controlledShutdown(ctx context.Context) (Result, error) {
	if err := r.ensureDataset(ctx); err != nil {
		return Result{}, err
	}
	var took []time.Duration
	var led []float64
	var steps []stepUse
	for run := 1; run <= r.cfg.Runs; run++ {
		if _, err := r.barrier(ctx); err != nil {
			return Result{}, err
		}
		leaders, err := r.leaders(ctx)
		if err != nil {
			return Result{}, err
		}
		victim, parts := r.busiestThin(leaders)
		statusf(r.cfg.Status, "controlled-shutdown: run %d/%d: broker %d, which leads %d partitions", run, r.cfg.Runs, victim.ID(), len(parts))
		sctx, cancel := context.WithTimeout(ctx, r.timeout)
		bar := r.prog.start(-1, "controlled shutdown")
		mark := r.meters.begin()
		d, err := victim.Shutdown(sctx)
		steps = append(steps, r.meters.end(mark))
		bar.done()
		cancel()
		if err != nil {
			return Result{}, err
		}
		took = append(took, d)
		led = append(led, float64(len(parts)))
		if err := r.replace(ctx, victim.ID()); err != nil {
			return Result{}, err
		}
	}
	return newResult(ScenarioControlledShutdown, r.partitions(), len(r.brokers), took, withUse(steps,
		Figure{"led_partitions", Median(led)},
	)...), nil
}
