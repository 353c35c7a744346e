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
	var steps []stepUse
	for run := 1; run <= r.cfg.Runs; run++ {
		l, err := r.loseBroker(ctx, func(id int32, parts int) {
			statusf(r.cfg.Status, "broker-crash: run %d/%d: killing broker %d, which leads %d partitions", run, r.cfg.Runs, id, parts)
		}, (*thinBroker).Kill, 2*time.Millisecond)
		if err != nil {
			return Result{}, err
		}
		total = append(total, l.allAt.Sub(l.stopped))
		detection = append(detection, l.fencedAt.Sub(l.stopped))
		spread = append(spread, l.allAt.Sub(l.fencedAt))
		led = append(led, float64(l.led))
		leaderless = append(leaderless, float64(l.left))
		steps = append(steps, l.use)
	}
	d, s := seconds(detection...), seconds(spread...)
	return newResult(ScenarioBrokerCrash, r.partitions(), len(r.brokers), total, withUse(steps,
		Figure{"kill_to_fence_median_s", Median(d)},
		Figure{"kill_to_fence_max_s", Max(d)},
		Figure{"fence_to_all_brokers_median_s", Median(s)},
		Figure{"led_partitions", Median(led)},
		Figure{"leaderless_partitions", Max(leaderless)},
	)...), nil
}
