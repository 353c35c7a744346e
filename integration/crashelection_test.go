package integration

import (
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/server"
)

// TestControllerKill_CrashElection: a kill -9 of the active controller of
// real processes is elected away by the crash election: one survivor
// counts one election started at once (keel_raft_crash_elections_total),
// and a new active controller commits its epoch. With a 2 s heartbeat
// timeout, raft's own election would come seconds later and count none.
func TestControllerKill_CrashElection(t *testing.T) {
	c := startCluster(t, 3, withMetrics(), withControllerFlags(
		"--raft-heartbeat-timeout", "2s", "--raft-election-timeout", "2s", "--raft-leader-lease-timeout", "1s"))
	leader, epoch := c.WaitForActive(t, time.Minute)
	metrics := map[int32]string{}
	for _, id := range c.IDs() {
		if id != leader {
			metrics[id] = c.node(id).MetricsAddr()
		}
	}
	c.Kill(leader)
	killed := time.Now()
	next, nextEpoch := c.WaitForActive(t, 9*time.Second)
	took := time.Since(killed)
	if next == leader || nextEpoch <= epoch {
		t.Fatalf("active controller %d at epoch %d after killing %d at epoch %d", next, nextEpoch, leader, epoch)
	}
	var report string
	poll.Until(t, 10*time.Second, "one crash election counted among the survivors", func() bool {
		var all map[int32]scrape
		all, report = scrapeAll(metrics, server.MetricRaftCrashElections)
		total := 0.0
		for _, s := range all {
			total += s[server.MetricRaftCrashElections]
		}
		return len(all) == len(metrics) && total == 1
	})
	// The fault suites count crash elections from the logs: one line each.
	if n := c.crashElections(); n != 1 {
		t.Errorf("the controllers' logs show %d crash elections, want 1", n)
	}
	t.Logf("controller %d active (its epoch record committed) %v after the kill of %d, with a 2 s heartbeat timeout; crash elections:\n%s",
		next, took, leader, report)
}
