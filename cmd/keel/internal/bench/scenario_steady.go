package bench

import (
	"context"
	"fmt"
	"time"
)

// steady: the cluster under steady load for SteadyDuration (10 minutes by
// default): every broker heartbeating at its interval, and one writer
// committing a no-op every SteadyWriteInterval through the active
// controller. It passes when the active controller and its epoch never
// change: with the default raft timings (300 ms heartbeat and election
// timeouts, 250 ms lease, pre-vote) no GC pause, fsync or load spike may
// look like a dead leader. It reports the leader changes seen, the writes
// and their latency; its median_s and max_s are the write latency p99 and
// max.
func (r *runner) steady(ctx context.Context) (Result, error) {
	if err := r.ensureDataset(ctx); err != nil {
		return Result{}, err
	}
	var p99 []time.Duration
	changes, writes, failures, fenced := 0, 0, 0, 0
	var worst time.Duration
	var steps []stepUse
	for run := 1; run <= r.cfg.Runs; run++ {
		start, err := r.waitActive(ctx, time.Minute)
		if err != nil {
			return Result{}, err
		}
		statusf(r.cfg.Status, "steady: run %d/%d: %v of heartbeats and a write every %v; active controller %d at epoch %d",
			run, r.cfg.Runs, r.cfg.SteadyDuration, r.cfg.SteadyWriteInterval, start.NodeId, start.ControllerEpoch)
		bar := r.prog.start(int64(r.cfg.SteadyDuration/time.Second), fmt.Sprintf("steady run %d (s)", run))
		var lat []time.Duration
		leader, epoch := start.NodeId, start.ControllerEpoch
		tick := time.NewTicker(r.cfg.SteadyWriteInterval)
		mark := r.meters.begin()
		began := time.Now()
		for time.Since(began) < r.cfg.SteadyDuration {
			select {
			case <-ctx.Done():
				tick.Stop()
				bar.done()
				return Result{}, ctx.Err()
			case <-tick.C:
			}
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			t0 := time.Now()
			resp, err := r.admin.AppendNoOp(wctx, fmt.Sprintf("bench-steady-%d-%d", run, writes))
			cancel()
			if err != nil {
				failures++
				continue
			}
			writes++
			lat = append(lat, time.Since(t0))
			if resp.GetControllerEpoch() != epoch {
				changes++
				r.cfg.Logger.Warn("the active controller changed under steady load", "from_epoch", epoch, "to_epoch", resp.GetControllerEpoch())
				epoch = resp.GetControllerEpoch()
			}
			bar.set(int(time.Since(began) / time.Second))
		}
		tick.Stop()
		steps = append(steps, r.meters.end(mark))
		bar.done()
		end, err := r.waitActive(ctx, time.Minute)
		if err != nil {
			return Result{}, err
		}
		if end.NodeId != leader && end.ControllerEpoch == epoch {
			changes++ // cannot happen: a new leader writes a new epoch
		}
		if len(lat) == 0 {
			return Result{}, fmt.Errorf("steady: no write succeeded in %v", r.cfg.SteadyDuration)
		}
		// No broker stops: any fence (a session that expired, a stream
		// connection that broke for longer than the crash grace) is one
		// too many.
		for _, e := range r.observer(-1).Events(EventFence) {
			if !e.At.Before(began) {
				fenced++
			}
		}
		p99 = append(p99, Percentile(lat, 0.99))
		worst = max(worst, Percentile(lat, 1))
	}
	return newResult(ScenarioSteady, r.partitions(), len(r.brokers), p99, withUse(steps,
		Figure{"leader_changes", float64(changes)},
		Figure{"duration_s", r.cfg.SteadyDuration.Seconds()},
		Figure{"writes", float64(writes)},
		Figure{"write_failures", float64(failures)},
		Figure{"write_max_ms", worst.Seconds() * 1000},
		Figure{"fenced_brokers", float64(fenced)},
	)...), nil
}
