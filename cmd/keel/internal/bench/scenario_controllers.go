package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

// failover: kill -9 of the active controller, with the dataset loaded.
// Timed from the kill until a survivor reports itself active with the next
// controller epoch (its epoch record committed; raft_leader_median_s is
// until it reported itself raft leader), and until every broker
// has the new active controller's epoch entry, which only it can have sent
// them. Each run restarts the killed controller and waits until it has
// caught up.
func (r *runner) failover(ctx context.Context) (Result, error) {
	if err := r.ensureDataset(ctx); err != nil {
		return Result{}, err
	}
	var active, elected, streaming []time.Duration
	var steps []stepUse
	fenced, resent := 0, 0
	for run := 1; run <= r.cfg.Runs; run++ {
		if _, err := r.barrier(ctx); err != nil {
			return Result{}, err
		}
		if err := r.waitConverged(ctx); err != nil {
			return Result{}, err
		}
		leader, err := r.waitActive(ctx, r.timeout)
		if err != nil {
			return Result{}, err
		}
		id, epoch := leader.GetNodeId(), leader.GetControllerEpoch()
		var survivors []string
		for _, nd := range r.quorum.Controllers() {
			if nd.ID() != id {
				survivors = append(survivors, nd.Addr())
			}
		}
		statusf(r.cfg.Status, "failover: run %d/%d: kill -9 of controller %d (epoch %d)", run, r.cfg.Runs, id, epoch)
		mark := r.meters.begin()
		killed := time.Now()
		if err := r.kill(r.quorum.Controller(id)); err != nil {
			return Result{}, err
		}
		var (
			newEpoch int64
			raftAt   time.Time // a survivor is raft leader
		)
		err = poll.Wait(ctx, r.timeout, 2*time.Millisecond, "a new active controller", func() (bool, error) {
			for _, addr := range survivors {
				cl, err := r.admin.Controller(addr)
				if err != nil {
					return false, err
				}
				cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				resp, err := cl.DescribeQuorum(cctx, &keelpb.DescribeQuorumRequest{})
				cancel()
				if err != nil {
					continue
				}
				if raftAt.IsZero() && resp.GetState() == "leader" {
					raftAt = time.Now()
				}
				if resp.GetActive() && resp.GetControllerEpoch() > epoch {
					newEpoch = resp.GetControllerEpoch()
					return true, nil
				}
			}
			return false, nil
		})
		activeAt := time.Now()
		if err != nil {
			return Result{}, err
		}
		if raftAt.IsZero() {
			raftAt = activeAt
		}
		obs := r.observer(-1)
		var epochEntry uint64
		err = poll.Wait(ctx, r.timeout, 5*time.Millisecond, "the new controller epoch in the stream", func() (bool, error) {
			for _, e := range obs.Events(EventControllerEpoch) {
				if e.Epoch == newEpoch {
					epochEntry = e.Offset
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return Result{}, err
		}
		if err := r.waitOffset(ctx, r.brokers, epochEntry, "brokers streaming from the new controller"); err != nil {
			return Result{}, err
		}
		_, streamAt, err := reached(r.brokers, epochEntry)
		if err != nil {
			return Result{}, err
		}
		steps = append(steps, r.meters.end(mark))
		active = append(active, activeAt.Sub(killed))
		elected = append(elected, raftAt.Sub(killed))
		streaming = append(streaming, streamAt.Sub(killed))

		statusf(r.cfg.Status, "failover: restarting controller %d", id)
		if err := r.quorum.StartNodes(ctx, r.quorum.Controller(id)); err != nil {
			return Result{}, err
		}
		if err := r.waitConverged(ctx); err != nil {
			return Result{}, err
		}
		for _, e := range obs.Events(EventFence) {
			if !e.At.Before(killed) {
				fenced++
			}
		}
		for _, b := range r.brokers {
			resent += b.SnapshotsSince(killed)
		}
	}
	s := seconds(streaming...)
	return newResult(ScenarioFailover, r.partitions(), len(r.brokers), active, withUse(steps,
		Figure{"raft_leader_median_s", Median(seconds(elected...))},
		Figure{"streaming_median_s", Median(s)},
		Figure{"streaming_max_s", Max(s)},
		Figure{"fenced_brokers", float64(fenced)},
		Figure{"snapshot_resends", float64(resent)},
	)...), nil
}

// load: every controller killed (kill -9) once each has a raft snapshot of
// the dataset, then started again. Timed from the restart until a
// controller is active, every voter has applied the log up to the commit
// index before the kill, and the controllers list every partition; then
// the live heap (after a collection) and resident set of each controller,
// from its metrics: the figures are the largest of the three.
func (r *runner) load(ctx context.Context) (Result, error) {
	if err := r.ensureDataset(ctx); err != nil {
		return Result{}, err
	}
	var ready []time.Duration
	var heaps, rsses, perPartition []float64
	var steps []stepUse
	for run := 1; run <= r.cfg.Runs; run++ {
		idx, err := r.barrier(ctx)
		if err != nil {
			return Result{}, err
		}
		expected, err := r.totalPartitions(ctx)
		if err != nil {
			return Result{}, err
		}
		if err := r.ensureSnapshots(ctx, idx); err != nil {
			return Result{}, err
		}
		if err := r.waitConverged(ctx); err != nil {
			return Result{}, err
		}
		view, err := r.admin.DescribeQuorum(ctx)
		if err != nil {
			return Result{}, err
		}
		commit := view.Leader.GetCommitIndex()
		statusf(r.cfg.Status, "load: run %d/%d: kill -9 of every controller (snapshots at index %d or later, commit index %d), then a restart",
			run, r.cfg.Runs, idx, commit)
		ctrls := r.quorum.Controllers()
		mark := r.meters.begin()
		if err := r.kill(ctrls...); err != nil { // together: every signal before any wait
			return Result{}, err
		}
		start := time.Now()
		// All started before any is waited for: each says it has started
		// only once it has loaded its snapshot.
		if err := r.quorum.StartNodes(ctx, ctrls...); err != nil {
			return Result{}, err
		}
		bar := r.prog.start(-1, "controllers loading")
		err = poll.Wait(ctx, r.timeout, 20*time.Millisecond, fmt.Sprintf("the controllers to load %d partitions", expected), func() (bool, error) {
			v, err := r.activeQuorum(ctx)
			if v == nil || err != nil || !appliedBy(v, len(ctrls), commit) {
				return false, err
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			got, err := r.totalPartitions(cctx)
			return err == nil && got == expected, nil
		})
		bar.done()
		if err != nil {
			return Result{}, err
		}
		ready = append(ready, time.Since(start))
		steps = append(steps, r.meters.end(mark))
		var most, rss uint64
		for _, nd := range ctrls {
			hctx, cancel := context.WithTimeout(ctx, time.Minute)
			m, err := readMemory(hctx, nd.MetricsAddr())
			cancel()
			if err != nil {
				return Result{}, fmt.Errorf("memory of controller %d: %w", nd.ID(), err)
			}
			most, rss = max(most, m.heapLive), max(rss, m.rss)
		}
		heaps = append(heaps, float64(most))
		rsses = append(rsses, float64(rss))
		if expected > 0 {
			perPartition = append(perPartition, float64(most)/float64(expected))
		}
		// The brokers reconnect to the new active controller.
		if _, err := r.barrier(ctx); err != nil {
			return Result{}, err
		}
	}
	return newResult(ScenarioLoad, r.partitions(), len(r.brokers), ready, withUse(steps,
		Figure{"heap_live_bytes", Median(heaps)},
		Figure{"heap_bytes_per_partition", Median(perPartition)},
		Figure{"rss_bytes", Median(rsses)},
	)...), nil
}

// waitConverged waits until every voter has applied the active
// controller's commit index.
func (r *runner) waitConverged(ctx context.Context) error {
	return poll.Wait(ctx, r.timeout, 20*time.Millisecond, "every controller to catch up", func() (bool, error) {
		v, err := r.activeQuorum(ctx)
		if v == nil || err != nil {
			return false, err
		}
		return appliedBy(v, len(v.Leader.GetVoters()), v.Leader.GetCommitIndex()), nil
	})
}

// totalPartitions counts the partitions of every topic.
func (r *runner) totalPartitions(ctx context.Context) (int, error) {
	resp, err := r.admin.ListTopics(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range resp.GetTopics() {
		n += int(t.GetPartitions())
	}
	return n, nil
}

// snapshotPump is how many no-ops make every controller take a raft
// snapshot: more than the bench controllers' --snapshot-threshold.
const snapshotPump = 1100

// ensureSnapshots waits until every controller has a raft snapshot at
// index or later on disk, committing no-ops to reach the snapshot
// threshold if raft does not take one by itself.
func (r *runner) ensureSnapshots(ctx context.Context, index uint64) error {
	have := func() (bool, error) {
		for _, nd := range r.quorum.Controllers() {
			if snapshotIndexOnDisk(nd.DataDir()) < index {
				return false, nil
			}
		}
		return true, nil
	}
	if ok, _ := have(); ok {
		return nil
	}
	// Raft checks every second (--snapshot-interval 1s) whether the
	// threshold is reached.
	if err := poll.Wait(ctx, 3*time.Second, 100*time.Millisecond, "a raft snapshot", have); err == nil {
		return nil
	} else if ctx.Err() != nil {
		return ctx.Err()
	}
	statusf(r.cfg.Status, "load: committing %d no-ops so that every controller takes a raft snapshot", snapshotPump)
	bar := r.prog.start(snapshotPump, "no-ops")
	work := make(chan struct{})
	errc := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, err := r.admin.AppendNoOp(cctx, "")
				cancel()
				if err != nil {
					select {
					case errc <- err:
					default:
					}
					continue
				}
				bar.add(1)
			}
		}()
	}
	for range snapshotPump {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	bar.done()
	select {
	case err := <-errc:
		return fmt.Errorf("commit a no-op: %w", err)
	default:
	}
	sp := r.prog.start(-1, "waiting for raft snapshots")
	defer sp.done()
	return poll.Wait(ctx, r.timeout, 100*time.Millisecond, "every controller to take a raft snapshot", have)
}
