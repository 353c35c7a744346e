package bench

import (
	"context"
	"time"
)

// brokerCrash: the thin broker leading the most partitions dies as a kill -9
// leaves it: its heartbeats and streams stop and its connections to the
// controllers close. The active controller sees its metadata stream's
// connection close and fences it once the crash grace has passed (the
// controllers' --crash-grace), not a session timeout later. Timed from the
// kill until every live broker has the new leaders of every partition it
// led. A new incarnation of the broker then registers again.
func (r *runner) brokerCrash(ctx context.Context) (Result, error) {
	if err := r.ensureDataset(ctx); err != nil {
		return Result{}, err
	}
	var total, detection, spread []time.Duration
	var led, leaderless []float64
	for run := 1; run <= r.cfg.Runs; run++ {
		if _, err := r.barrier(ctx); err != nil {
			return Result{}, err
		}
		leaders, err := r.leaders(ctx)
		if err != nil {
			return Result{}, err
		}
		victim, parts := r.busiestThin(leaders)
		id, epoch := victim.ID(), victim.Epoch()
		obs := r.observer(id)
		w := newLeaderWatch(id, parts)
		obs.setWatch(w)
		statusf(r.cfg.Status, "broker-crash: run %d/%d: killing broker %d, which leads %d partitions", run, r.cfg.Runs, id, len(parts))
		killed := time.Now()
		victim.Kill()
		fence, err := r.waitFenced(ctx, obs, id, epoch, 2*time.Millisecond)
		if err != nil {
			obs.setWatch(nil)
			return Result{}, err
		}
		live := r.live(id)
		// The moves commit with the fencing or before it (fenceRecords).
		left, _, movedAt := w.state()
		obs.setWatch(nil)
		target := max(fence.Offset, movedAt)
		if err := r.waitOffset(ctx, live, target, "brokers applying the new leaders"); err != nil {
			return Result{}, err
		}
		fencedAt, _, err := reached(live, fence.Offset)
		if err != nil {
			return Result{}, err
		}
		_, allAt, err := reached(live, target)
		if err != nil {
			return Result{}, err
		}
		total = append(total, allAt.Sub(killed))
		detection = append(detection, fencedAt.Sub(killed))
		spread = append(spread, allAt.Sub(fencedAt))
		led = append(led, float64(len(parts)))
		leaderless = append(leaderless, float64(left))
		if err := r.replace(ctx, id); err != nil {
			return Result{}, err
		}
	}
	d, s := seconds(detection...), seconds(spread...)
	return newResult(ScenarioBrokerCrash, r.partitions(), len(r.brokers), total,
		Figure{"kill_to_fence_median_s", Median(d)},
		Figure{"kill_to_fence_max_s", Max(d)},
		Figure{"fence_to_all_brokers_median_s", Median(s)},
		Figure{"led_partitions", Median(led)},
		Figure{"leaderless_partitions", Max(leaderless)},
	), nil
}
