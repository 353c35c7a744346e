package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"time"
)

// produceRun is one run of the produce scenario.
type produceRun struct {
	ceiling DataCeiling
	// acks1 and acksAll are as fast as the cluster acknowledges; half is
	// acks=all paced at half of acksAll's records per second.
	acks1, acksAll, half loadResult
	// server is the brokers' produce request durations over the half
	// step (keel_kafka_request_duration_seconds{request="Produce"}).
	server histogram
}

// produce: the data path's throughput and latency, against the machine's
// own ceiling measured in the same run. Each run measures one partition
// log's append rate in this process and the loopback bandwidth to a child
// process, then produces RecordSize-byte records to a topic of
// Data.Partitions partitions (RF 3) from Data.Producers franz-go clients:
// as fast as acknowledged with acks=1, then with acks=all (idempotent),
// then with acks=all paced at half of that peak, timing each record from
// Produce to its acknowledgement. Its median_s and max_s are that latency's
// p99.
func (r *runner) produce(ctx context.Context, dc *dataCluster) (Result, error) {
	d := r.cfg.Data
	warmup := min(2*time.Second, max(d.Duration/5, 200*time.Millisecond))
	ceilFor := min(d.Duration, 2*time.Second)
	var runs []produceRun
	for run := 1; run <= r.cfg.Runs; run++ {
		var pr produceRun
		statusf(r.cfg.Status, "produce: run %d/%d: the ceilings (one partition log's appends, loopback between two processes)", run, r.cfg.Runs)
		var err error
		pr.ceiling.AppendBytesPerS, err = MeasureAppend(ctx, filepath.Join(r.dir, fmt.Sprintf("append-%d", run)), d.RecordSize, ceilFor, 4<<30)
		if err != nil {
			return Result{}, fmt.Errorf("append rate: %w", err)
		}
		if pr.ceiling.LoopbackBytesPerS, err = MeasureLoopback(ctx, r.cfg.Executable, r.cfg.Env, ceilFor); err != nil {
			return Result{}, fmt.Errorf("loopback bandwidth: %w", err)
		}
		// A topic of its own for each step, deleted after it: acks=1 leaves
		// the followers behind, and acks=all on the same partitions would
		// first wait for them to catch up.
		for i, step := range []struct {
			name   string
			allISR bool
			half   bool
			out    *loadResult
		}{
			{"acks=1", false, false, &pr.acks1},
			{"acks=all", true, false, &pr.acksAll},
			{"acks=all at half its peak", true, true, &pr.half},
		} {
			topic := fmt.Sprintf("bench-produce-%d-%d", run, i+1)
			if err := dc.createTopic(ctx, topic, d.Partitions); err != nil {
				return Result{}, err
			}
			l := load{seeds: dc.seeds(), topic: topic, producers: d.Producers, recordSize: d.RecordSize,
				allISR: step.allISR, warmup: warmup, window: d.Duration, meters: r.meters}
			if step.half {
				l.rate, l.latencies = pr.acksAll.recordsPerS()/2, true
			}
			statusf(r.cfg.Status, "produce: run %d/%d: %s, %d producers, %v", run, r.cfg.Runs, step.name, d.Producers, d.Duration)
			var before histogram
			if step.half {
				if before, err = dc.produceDurations(ctx); err != nil {
					return Result{}, err
				}
			}
			res, err := l.run(ctx)
			if err != nil {
				return Result{}, fmt.Errorf("%s: %w", step.name, err)
			}
			*step.out = res
			if step.half {
				after, err := dc.produceDurations(ctx)
				if err != nil {
					return Result{}, err
				}
				if pr.server, err = after.plus(before, -1); err != nil {
					return Result{}, err
				}
			}
			if err := dc.deleteTopic(ctx, topic); err != nil {
				return Result{}, err
			}
		}
		statusf(r.cfg.Status, "produce: run %d/%d: acks=1 %.1f MB/s, acks=all %.1f MB/s (%.2f of the ceiling %.1f MB/s), p99 %v at %.0f records/s (brokers' produce p99 %.1f ms)",
			run, r.cfg.Runs, pr.acks1.bytesPerS()/1e6, pr.acksAll.bytesPerS()/1e6, pr.ceiling.Ratio(pr.acksAll.bytesPerS()),
			pr.ceiling.RF3()/1e6, Percentile(pr.half.latencies, 0.99), pr.half.recordsPerS(), pr.server.quantile(0.99)*1000)
		runs = append(runs, pr)
	}
	var p99 []time.Duration
	for _, pr := range runs {
		p99 = append(p99, Percentile(pr.half.latencies, 0.99))
	}
	res := newResult(ScenarioProduce, d.Partitions, dataBrokers, p99, produceFigures(d, runs)...)
	return res, nil
}

// produceFigures are the produce scenario's own figures over its runs:
// medians, and the max where a bad run shows in it. MB are 10^6 bytes of
// record values.
func produceFigures(d DataConfig, runs []produceRun) []Figure {
	med := func(f func(produceRun) float64) float64 {
		xs := make([]float64, len(runs))
		for i, pr := range runs {
			xs[i] = f(pr)
		}
		return Median(xs)
	}
	most := func(f func(produceRun) float64) float64 {
		xs := make([]float64, len(runs))
		for i, pr := range runs {
			xs[i] = f(pr)
		}
		return Max(xs)
	}
	ms := func(ds []time.Duration, q float64) float64 { return Percentile(ds, q).Seconds() * 1000 }
	failed := 0.0
	for _, pr := range runs {
		failed += float64(pr.acks1.failed + pr.acksAll.failed + pr.half.failed)
	}
	figs := []Figure{
		{"record_size", float64(d.RecordSize)}, // bytes; _bytes would print as MiB,
		{"producers", float64(d.Producers)},
		{"duration_s", d.Duration.Seconds()},
		{"acks_1_mb_per_s", med(func(p produceRun) float64 { return p.acks1.bytesPerS() / 1e6 })},
		{"acks_1_records_per_s", med(func(p produceRun) float64 { return p.acks1.recordsPerS() })},
		{"acks_1_ceiling_ratio", med(func(p produceRun) float64 { return p.ceiling.Ratio(p.acks1.bytesPerS()) })},
		{"acks_all_mb_per_s", med(func(p produceRun) float64 { return p.acksAll.bytesPerS() / 1e6 })},
		{"acks_all_max_mb_per_s", most(func(p produceRun) float64 { return p.acksAll.bytesPerS() / 1e6 })},
		{"acks_all_records_per_s", med(func(p produceRun) float64 { return p.acksAll.recordsPerS() })},
		{"acks_all_ceiling_ratio", med(func(p produceRun) float64 { return p.ceiling.Ratio(p.acksAll.bytesPerS()) })},
		{"append_mb_per_s", med(func(p produceRun) float64 { return p.ceiling.AppendBytesPerS / 1e6 })},
		{"loopback_mb_per_s", med(func(p produceRun) float64 { return p.ceiling.LoopbackBytesPerS / 1e6 })},
		{"rf3_ceiling_mb_per_s", med(func(p produceRun) float64 { return p.ceiling.RF3() / 1e6 })},
		{"half_rate_records_per_s", med(func(p produceRun) float64 { return p.half.recordsPerS() })},
		{"latency_p50_ms", med(func(p produceRun) float64 { return ms(p.half.latencies, 0.5) })},
		{"latency_p99_ms", med(func(p produceRun) float64 { return ms(p.half.latencies, 0.99) })},
		{"latency_max_ms", most(func(p produceRun) float64 { return ms(p.half.latencies, 1) })},
		{"broker_produce_p50_ms", med(func(p produceRun) float64 { return p.server.quantile(0.5) * 1000 })},
		{"broker_produce_p99_ms", med(func(p produceRun) float64 { return p.server.quantile(0.99) * 1000 })},
		{"failed_writes", failed},
	}
	return append(figs, produceUseFigures(runs)...)
}

// produceUseFigures are produce's figures of the machine: each role's CPU
// seconds in the acks=all window, the CPU seconds per GB (10^9 bytes of
// record values) acknowledged of the brokers and of the clients (the
// bench process) with acks=1 and acks=all, and the scheduling gaps of the
// step at half the peak, whose latency the scenario reports.
func produceUseFigures(runs []produceRun) []Figure {
	var all, half []stepUse
	for _, pr := range runs {
		all = append(all, pr.acksAll.use)
		half = append(half, pr.half.use)
	}
	out := cpuFigures(all)
	if out != nil {
		perGB := func(cpu func(cpuUse) time.Duration, res func(produceRun) loadResult) float64 {
			xs := make([]float64, len(runs))
			for i, pr := range runs {
				xs[i] = perUnit(cpu(res(pr).use.cpu), float64(res(pr).bytes)/1e9)
			}
			return Median(xs)
		}
		brokers := func(u cpuUse) time.Duration { return u.brokers }
		clients := func(u cpuUse) time.Duration { return u.bench }
		acks1 := func(p produceRun) loadResult { return p.acks1 }
		acksAll := func(p produceRun) loadResult { return p.acksAll }
		out = append(out,
			Figure{"brokers_cpu_s_per_gb_acks_1", perGB(brokers, acks1)},
			Figure{"brokers_cpu_s_per_gb_acks_all", perGB(brokers, acksAll)},
			Figure{"clients_cpu_s_per_gb_acks_1", perGB(clients, acks1)},
			Figure{"clients_cpu_s_per_gb_acks_all", perGB(clients, acksAll)})
	}
	return append(out, gapFigures(half)...)
}
