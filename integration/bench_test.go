package integration

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
)

const (
	// trialLimit is how long one failover may take before the run fails.
	trialLimit = 10 * time.Second
	// failoverPoll is how often the survivors are asked for their views.
	failoverPoll = 2 * time.Millisecond
	// idleCheck is how long the quorum must keep one epoch under light writes.
	idleCheck = 5 * time.Second
)

// TestBenchFailover kills -9 the active controller of a real 3-node quorum
// (default timings) KEEL_BENCH_FAILOVER times and reports how long the
// survivors took to have a new active controller. Run it with
// `make bench-failover`.
func TestBenchFailover(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("KEEL_BENCH_FAILOVER"))
	if n <= 0 {
		t.Skip("set KEEL_BENCH_FAILOVER=N to kill the leader N times")
	}
	c := startCluster(t, 3)
	leader, epoch := c.WaitForActive(t, activeTimeout)

	// No spurious leader change while idle under a light write load.
	writes, last := steadyWrites(t, c, idleCheck, 50*time.Millisecond, leader, epoch)
	c.WaitForConverged(t, c.IDs(), last)
	if l, ep := c.WaitForActive(t, activeTimeout); l != leader || ep != epoch {
		t.Fatalf("after %s of writes: active %d epoch %d, want %d, %d (spurious leader change)", idleCheck, l, ep, leader, epoch)
	}
	t.Logf("idle check: %d no-ops committed over %s, epoch stayed %d (leader %d)", writes, idleCheck, epoch, leader)

	var times []time.Duration
	for i := 1; i <= n; i++ {
		took, ok := failoverTrial(t, c)
		if !ok {
			t.Fatalf("trial %d: no new active controller within %s", i, trialLimit)
		}
		times = append(times, took)
		t.Logf("trial %d: failover in %.1fms", i, ms(took))
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	median := times[len(times)/2]
	if len(times)%2 == 0 {
		median = (times[len(times)/2-1] + times[len(times)/2]) / 2
	}
	t.Logf("failover: n=%d median=%.1fms max=%.1fms min=%.1fms", n, ms(median), ms(times[len(times)-1]), ms(times[0]))
}

// failoverTrial waits for a caught-up quorum, writes a few no-ops, kills the
// leader and times how long the survivors take to report an active
// controller with the next epoch. It then restarts the killed node and waits
// until it has caught up. ok is false if the failover took over trialLimit.
func failoverTrial(t *testing.T, c *Cluster) (took time.Duration, ok bool) {
	t.Helper()
	leader, epoch := c.WaitForActive(t, activeTimeout)
	var last uint64
	for range 3 {
		last = c.appendNoOp(t, 10*time.Second).Index
	}
	c.WaitForConverged(t, c.IDs(), last)

	survivors := otherThan(c.IDs(), leader)
	start := time.Now()
	c.Kill(leader)
	took, ok = pollForEpoch(c, survivors, epoch+1, start)
	if !ok {
		return took, false
	}

	c.Restart(leader)
	c.WaitForActive(t, activeTimeout)
	c.WaitForConverged(t, c.IDs(), last)
	return took, true
}

// pollForEpoch asks the survivors for their own views every failoverPoll
// until one reports itself active with epoch, and returns the time since start.
func pollForEpoch(c *Cluster, survivors []int32, epoch int64, start time.Time) (time.Duration, bool) {
	var took time.Duration
	err := poll.Wait(context.Background(), trialLimit-time.Since(start), failoverPoll, "an active survivor", func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		views, _ := c.Views(ctx, survivors)
		cancel()
		took = time.Since(start)
		for _, v := range views {
			if v.Active && v.ControllerEpoch == epoch {
				return true, nil
			}
		}
		return false, nil
	})
	return took, err == nil
}

// steadyWrites commits a no-op every interval for d and fails the test if
// any write fails or commits in an epoch other than epoch, or if any node
// reports another leader or epoch meanwhile. It returns how many writes
// committed and the last index.
func steadyWrites(t *testing.T, c *Cluster, d, interval time.Duration, leader int32, epoch int64) (int, uint64) {
	t.Helper()
	var (
		mu     sync.Mutex
		count  int
		last   uint64
		errs   []string
		wg     sync.WaitGroup
		stopCh = make(chan struct{})
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-stopCh:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := c.Client().AppendNoOp(ctx, newRequestID())
			cancel()
			mu.Lock()
			switch {
			case err != nil:
				errs = append(errs, err.Error())
			case resp.ControllerEpoch != epoch:
				errs = append(errs, fmt.Sprintf("write at index %d committed in epoch %d, want %d", resp.Index, resp.ControllerEpoch, epoch))
			default:
				count++
				last = resp.Index
			}
			mu.Unlock()
		}
	}()

	// Sample every node's own view while the writer runs.
	sample := time.NewTicker(50 * time.Millisecond)
	defer sample.Stop()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); <-sample.C {
		views, _ := c.Views(context.Background(), c.IDs())
		for id, v := range views {
			if v.LeaderId != leader || v.ControllerEpoch != epoch || v.Active != (id == leader) {
				mu.Lock()
				errs = append(errs, fmt.Sprintf("node %d: leader %d epoch %d active %v", id, v.LeaderId, v.ControllerEpoch, v.Active))
				mu.Unlock()
			}
		}
	}
	close(stopCh)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("while idle with steady writes (leader %d, epoch %d): %d problems, first: %s", leader, epoch, len(errs), errs[0])
	}
	if count == 0 {
		t.Fatalf("no write committed in %s", d)
	}
	return count, last
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
