package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/keel-dev/keel/proto/keelpb"
)

// catchUpRun is one run of catch-up.
type catchUpRun struct {
	took   time.Duration // from the restart until back in every ISR
	filled loadResult    // the writes while the follower was down
	use    stepUse       // the machine's over took
}

// catchUp: a broker stops (SIGTERM: its controlled shutdown takes it out
// of every ISR at once), Data.CatchUpBytes of records are written with
// acks=all to a topic of Data.Partitions partitions (RF 3, so the stopped
// broker holds a replica of each) by Data.Producers clients, and the broker
// starts again. Its median_s and max_s are the time from the restart (the
// process started, not yet registered) until the controller has it in the
// ISR of every partition again: its replicas have fetched what they missed
// from the leaders. Each run stops another broker.
func (r *runner) catchUp(ctx context.Context, dc *dataCluster) (Result, error) {
	d := r.cfg.Data
	var runs []catchUpRun
	for run := 1; run <= r.cfg.Runs; run++ {
		topic := fmt.Sprintf("bench-catch-up-%d", run)
		if err := dc.createTopic(ctx, topic, d.Partitions); err != nil {
			return Result{}, err
		}
		victim := dc.ids[(run-1)%len(dc.ids)]
		node := dc.q.Broker(victim)
		statusf(r.cfg.Status, "catch-up: run %d/%d: broker %d stops; %d MiB written without it", run, r.cfg.Runs, victim, d.CatchUpBytes>>20)
		if err := dc.q.Stop(node); err != nil {
			return Result{}, fmt.Errorf("stop broker %d: %w", victim, err)
		}
		out := func(p *keelpb.PartitionDescription) bool {
			return p.GetLeader() >= 0 && p.GetLeader() != victim && !slices.Contains(p.GetIsr(), victim)
		}
		if err := dc.waitISR(ctx, topic, 2*time.Minute+d.SessionTimeout, out); err != nil {
			return Result{}, fmt.Errorf("broker %d out of every ISR: %w", victim, err)
		}
		fill := load{seeds: dc.seeds(), topic: topic, producers: d.Producers, recordSize: d.RecordSize, allISR: true,
			records: max(1, d.CatchUpBytes/int64(d.RecordSize))}
		var cr catchUpRun
		var err error
		if cr.filled, err = fill.run(ctx); err != nil {
			return Result{}, fmt.Errorf("write %d bytes: %w", d.CatchUpBytes, err)
		}
		mark := r.meters.begin()
		start := time.Now()
		if err := dc.q.StartNodes(ctx, node); err != nil {
			return Result{}, fmt.Errorf("restart broker %d: %w", victim, err)
		}
		back := func(p *keelpb.PartitionDescription) bool { return slices.Contains(p.GetIsr(), victim) }
		if err := dc.waitISR(ctx, topic, 10*time.Minute, back); err != nil {
			return Result{}, fmt.Errorf("broker %d back in every ISR: %w", victim, err)
		}
		cr.took = time.Since(start)
		cr.use = r.meters.end(mark)
		statusf(r.cfg.Status, "catch-up: run %d/%d: %d MiB written at %.1f MB/s; broker %d back in every ISR %v after its restart",
			run, r.cfg.Runs, cr.filled.bytes>>20, cr.filled.bytesPerS()/1e6, victim, cr.took.Round(time.Millisecond))
		runs = append(runs, cr)
		if err := dc.deleteTopic(ctx, topic); err != nil {
			return Result{}, err
		}
	}
	return catchUpResult(d, runs), nil
}

// catchUpResult sums up catch-up's runs. MB are 10^6 bytes of record
// values.
func catchUpResult(d DataConfig, runs []catchUpRun) Result {
	var took []time.Duration
	var rate, fill []float64
	var failed float64
	var steps []stepUse
	for _, cr := range runs {
		steps = append(steps, cr.use)
		took = append(took, cr.took)
		rate = append(rate, float64(cr.filled.bytes)/cr.took.Seconds()/1e6)
		fill = append(fill, cr.filled.bytesPerS()/1e6)
		failed += float64(cr.filled.failed)
	}
	return newResult(ScenarioCatchUp, d.Partitions, dataBrokers, took, withUse(steps,
		Figure{"catch_up_bytes", float64(d.CatchUpBytes)},
		Figure{"catch_up_mb_per_s", Median(rate)},
		Figure{"write_mb_per_s", Median(fill)},
		Figure{"failed_writes", failed},
	)...)
}
