package integration

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/faultproxy"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/raftlog"
	"github.com/keel-dev/keel/server"
)

// TestControllerKill_CrashElection: a kill -9 of the active controller of
// real processes is elected away by the crash election: one survivor
// counts one election started (keel_raft_crash_elections_total), and a
// new active controller commits its epoch. With a 2 s heartbeat timeout,
// raft's own election would come seconds later and count none; the crash
// election waits its window (here two fifths of the heartbeat timeout,
// 0.8 s). With TLS the voters' questions to one another go over mutual
// TLS, controller certificates only.
func TestControllerKill_CrashElection(t *testing.T) {
	for _, tlsOn := range []bool{false, true} {
		t.Run(map[bool]string{false: "plaintext", true: "TLS"}[tlsOn], func(t *testing.T) {
			opts := []clusterOption{withControllerFlags(
				"--raft-heartbeat-timeout", "2s", "--raft-election-timeout", "2s", "--raft-leader-lease-timeout", "1s")}
			if tlsOn {
				opts = append(opts, withTLS(newTestPKI(t)))
			} else {
				opts = append(opts, withMetrics())
			}
			c := startCluster(t, 3, opts...)
			leader, epoch := c.WaitForActive(t, time.Minute)
			c.Kill(leader)
			killed := time.Now()
			next, nextEpoch := c.WaitForActive(t, 9*time.Second)
			took := time.Since(killed)
			if next == leader || nextEpoch <= epoch {
				t.Fatalf("active controller %d at epoch %d after killing %d at epoch %d", next, nextEpoch, leader, epoch)
			}
			// The fault suites count crash elections from the logs: one
			// line each.
			if n := c.crashElections(); n != 1 {
				t.Errorf("the controllers' logs show %d crash elections, want 1", n)
			}
			report := ""
			if !tlsOn {
				report = c.waitCrashElectionsCounted(t, otherThan(c.IDs(), leader), 1)
			}
			t.Logf("controller %d active (its epoch record committed) %v after the kill of %d, with a 2 s heartbeat timeout\n%s",
				next, took, leader, report)
		})
	}
}

// waitCrashElectionsCounted polls the metrics of ids until their crash
// elections add up to want, and returns what they said.
func (c *Cluster) waitCrashElectionsCounted(t *testing.T, ids []int32, want float64) string {
	t.Helper()
	var report string
	poll.Until(t, 10*time.Second, fmt.Sprintf("%v crash elections counted among nodes %v", want, ids), func() bool {
		var all map[int32]scrape
		all, report = scrapeAll(c.metricsAddrs(ids), server.MetricRaftCrashElections)
		total := 0.0
		for _, s := range all {
			total += s[server.MetricRaftCrashElections]
		}
		return len(all) == len(ids) && total == want
	})
	return report
}

func (c *Cluster) metricsAddrs(ids []int32) map[int32]string {
	addrs := map[int32]string{}
	for _, id := range ids {
		addrs[id] = c.node(id).MetricsAddr()
	}
	return addrs
}

// leadership is who leads, in which controller epoch, and each node's raft
// term: what a fault that must not depose the leader must leave alone.
type leadership struct {
	leader int32
	epoch  int64
	terms  map[int32]uint64
}

func (c *Cluster) leadership(t *testing.T) leadership {
	t.Helper()
	l := leadership{terms: map[int32]uint64{}}
	l.leader, l.epoch = c.WaitForActive(t, activeTimeout)
	views, errs := c.Views(context.Background(), c.IDs())
	if len(errs) > 0 {
		t.Fatalf("describe: %v", errs)
	}
	for id, v := range views {
		l.terms[id] = v.GetRaftTerm()
	}
	return l
}

// requireSameLeadership fails the test unless the leader, its epoch and
// every node's term are those of before, and no crash election started.
func (c *Cluster) requireSameLeadership(t *testing.T, before leadership, what string) {
	t.Helper()
	after := c.leadership(t)
	if after.leader != before.leader || after.epoch != before.epoch {
		t.Errorf("%s: the active controller went from %d (epoch %d) to %d (epoch %d)", what, before.leader, before.epoch, after.leader, after.epoch)
	}
	if !maps.Equal(after.terms, before.terms) {
		t.Errorf("%s: the raft terms went from %v to %v: an election ran", what, before.terms, after.terms)
	}
	if n := c.crashElections(); n != 0 {
		t.Errorf("%s: %d crash elections started, want none", what, n)
	}
}

// crashVetoes sums, over ids, the looks at the leader that started no
// election, by reason.
func (c *Cluster) crashVetoes(t *testing.T, ids []int32) map[string]float64 {
	t.Helper()
	all, report := scrapeAll(c.metricsAddrs(ids))
	if len(all) != len(ids) {
		t.Fatalf("scrape the metrics of %v:\n%s", ids, report)
	}
	out := map[string]float64{}
	for _, s := range all {
		for _, reason := range raftlog.CrashVetoReasons {
			out[reason] += s[fmt.Sprintf("%s{reason=%q}", server.MetricRaftCrashElectionVetoes, reason)]
		}
	}
	return out
}

func vetoTotal(v map[string]float64) float64 {
	total := 0.0
	for _, n := range v {
		total += n
	}
	return total
}

// TestCrashElection_LeaderPortBlipsDoNotFire: the active controller's links
// all refuse for 100 ms every second (a proxy or sidecar restart in front
// of it; the process untouched), ten times. Its followers see its
// connections end and its port refuse, but each blip ends with a probe
// accepted inside the confirmation window (200 ms): no election, no new
// term, the same leader and epoch. (The crash election before this change
// deposed the leader in 19 of 19 such blips.)
func TestCrashElection_LeaderPortBlipsDoNotFire(t *testing.T) {
	c := startCluster(t, 3, withFaultNet(), withMetrics())
	before := c.leadership(t)
	followers := otherThan(c.IDs(), before.leader)
	const blips = 10
	var longest time.Duration // as this process held them: a loaded machine stretches a sleep
	for i := range blips {
		start := time.Now()
		c.net.Isolate(before.leader, faultproxy.Drop)
		time.Sleep(100 * time.Millisecond)
		c.net.Heal()
		longest = max(longest, time.Since(start))
		if i < blips-1 {
			time.Sleep(900 * time.Millisecond)
		}
	}
	c.appendNoOp(t, 10*time.Second)
	c.requireSameLeadership(t, before, fmt.Sprintf("%d blips of 100 ms (the longest held %v) of every link of leader %d", blips, longest, before.leader))
	// The followers did look, and said why they started nothing.
	vetoes := c.crashVetoes(t, followers)
	if vetoTotal(vetoes) == 0 {
		t.Errorf("no crash look vetoed on the followers %v: the blips ended no connection of the leader's", followers)
	}
	t.Logf("crash looks vetoed on the followers, by reason: %v", vetoes)
}

// TestCrashElection_OneLinkResetsDoNotFire: the link between the active
// controller and one follower goes down both ways, refusing, for 20 ms to
// 1 s at a time, and is reset at once in between. That follower sees the
// leader's connections end and its port refuse for as long as each lasts,
// but the other follower still hears the leader: no election, whatever the
// length. (Before, a refusal longer than three probes deposed the leader.)
func TestCrashElection_OneLinkResetsDoNotFire(t *testing.T) {
	c := startCluster(t, 3, withFaultNet(), withMetrics())
	before := c.leadership(t)
	cut := otherThan(c.IDs(), before.leader)[0]
	set := func(m faultproxy.Mode) {
		c.net.Link(before.leader, cut).Set(m)
		c.net.Link(cut, before.leader).Set(m)
	}
	for _, d := range []time.Duration{100 * time.Millisecond, 0, 20 * time.Millisecond, 250 * time.Millisecond, 0,
		400 * time.Millisecond, 700 * time.Millisecond, 0, time.Second} {
		set(faultproxy.Drop) // closes the link's connections: a reset
		time.Sleep(d)
		set(faultproxy.Up)
		time.Sleep(300 * time.Millisecond)
	}
	c.appendNoOp(t, 10*time.Second)
	c.requireSameLeadership(t, before, fmt.Sprintf("resets and refusals of up to 1 s on the link between %d and %d", before.leader, cut))
	vetoes := c.crashVetoes(t, []int32{cut})
	if vetoes["others_hear"] == 0 {
		t.Errorf("node %d never found the other voter still hearing the leader; its vetoes: %v", cut, vetoes)
	}
	t.Logf("crash looks vetoed on node %d, by reason: %v", cut, vetoes)
}

// TestCrashElection_PausedLeaderDoesNotFire: SIGSTOP of the active
// controller for 150 ms (shorter than the confirmation window and the
// heartbeat timeout), five times: its connections stay open and its port
// accepts, so no look even starts, and nothing changes.
func TestCrashElection_PausedLeaderDoesNotFire(t *testing.T) {
	c := startCluster(t, 3)
	before := c.leadership(t)
	for range 5 {
		c.Pause(before.leader)
		time.Sleep(150 * time.Millisecond)
		c.Resume(before.leader)
		time.Sleep(time.Second)
	}
	c.appendNoOp(t, 10*time.Second)
	c.requireSameLeadership(t, before, fmt.Sprintf("five pauses of 150 ms of leader %d", before.leader))
}

// TestCrashElection_StrangersOnLeaderPortDoNotFire: 1,100 connections that
// send nothing hold the active controller's port at its bound on
// unauthenticated connections (1,024), so it accepts a new connection and
// closes it at once, as a proxy in front of a dead process would. While
// it does, the leader's link to each follower in turn goes down for
// 400 ms, so that the follower probes the port, and finds it refusing, for
// its whole window. The other follower still hears the leader: no
// election. (Before, the first such look deposed the leader.)
func TestCrashElection_StrangersOnLeaderPortDoNotFire(t *testing.T) {
	c := startCluster(t, 3, withFaultNet(), withMetrics())
	before := c.leadership(t)
	followers := otherThan(c.IDs(), before.leader)
	// The port holds a silent stranger for 5 s (firstByteTimeout): flood it
	// again before each fault.
	for round := range 2 {
		for _, f := range followers {
			start := time.Now()
			flood(t, c.Addr(before.leader), 1100, map[string][]byte{"nothing": nil})
			if d := time.Since(start); d > 2*time.Second {
				t.Logf("round %d: the flood took %v to open (the port holds a stranger 5 s)", round, d)
			}
			// Only the leader's dials to f go down: f's probes of the
			// leader's port still reach it, and find it full.
			c.net.Link(before.leader, f).Set(faultproxy.Drop)
			time.Sleep(400 * time.Millisecond)
			c.net.Link(before.leader, f).Set(faultproxy.Up)
			time.Sleep(300 * time.Millisecond)
		}
	}
	c.appendNoOp(t, 10*time.Second)
	c.requireSameLeadership(t, before, fmt.Sprintf("leader %d's port full of strangers", before.leader))
	vetoes := c.crashVetoes(t, followers)
	if vetoes["others_hear"] == 0 {
		t.Errorf("no follower found the other still hearing the leader; their vetoes: %v", vetoes)
	}
	t.Logf("crash looks vetoed on the followers, by reason: %v", vetoes)
	if out := c.node(before.leader).Output(); !strings.Contains(out, "too many connections whose peer has not yet authenticated") {
		t.Error("the leader logged no refusal of strangers: its port was never full")
	}
}

// TestCrashElection_KillAfterHarmlessReset: a reset of the leader's link
// to each follower ends a connection that the followers look at and find
// harmless; a kill -9 of the leader in the same term then still gets its
// crash election. (Before, a harmless look switched the crash election
// off for the rest of the term: raft's timeouts elected instead.)
func TestCrashElection_KillAfterHarmlessReset(t *testing.T) {
	c := startCluster(t, 3, withFaultNet(), withMetrics())
	before := c.leadership(t)
	followers := otherThan(c.IDs(), before.leader)
	for _, f := range followers {
		c.net.Link(before.leader, f).Set(faultproxy.Drop)
		c.net.Link(before.leader, f).Set(faultproxy.Up)
	}
	poll.UntilState(t, 10*time.Second, "both followers to look at the reset and veto", func() (bool, string) {
		done := true
		var b strings.Builder
		for _, f := range followers {
			v := c.crashVetoes(t, []int32{f})
			done = done && vetoTotal(v) > 0
			fmt.Fprintf(&b, "node %d: %v; ", f, v)
		}
		return done, b.String()
	})
	c.requireSameLeadership(t, before, "a reset of the leader's links")
	c.Kill(before.leader)
	killed := time.Now()
	next, epoch := c.WaitForActive(t, 10*time.Second)
	took := time.Since(killed)
	if next == before.leader || epoch <= before.epoch {
		t.Fatalf("active controller %d at epoch %d after killing %d at epoch %d", next, epoch, before.leader, before.epoch)
	}
	if n := c.crashElections(); n != 1 {
		t.Errorf("the controllers' logs show %d crash elections after the kill, want 1", n)
	}
	t.Logf("controller %d active %v after the kill of %d (a reset of its links before, in its term)", next, took, before.leader)
}

// TestCrashElection_FollowerKillsDoNotFire: a follower killed with
// SIGKILL and restarted, three times, on a plaintext quorum. In plaintext
// nothing names the peer of a raft connection, so the other follower takes
// any such connection's end as possibly the leader's and looks; the
// leader's port accepts, and other voters still hear it: no election, no
// new term, the same leader and epoch.
func TestCrashElection_FollowerKillsDoNotFire(t *testing.T) {
	c := startCluster(t, 3, withMetrics())
	before := c.leadership(t)
	victim := otherThan(c.IDs(), before.leader)[0]
	for range 3 {
		c.Kill(victim)
		c.Restart(victim)
		c.WaitForApplied(t, c.IDs(), c.appendNoOp(t, 10*time.Second).Index)
	}
	c.requireSameLeadership(t, before, fmt.Sprintf("three kills and restarts of follower %d", victim))
	t.Logf("crash looks vetoed, by reason: %v", c.crashVetoes(t, otherThan(c.IDs(), victim)))
}
