package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest/keelproc"
	"github.com/keel-dev/keel/proto/keelpb"
)

// The crash fences counted by the active controller.
const (
	crashFences   = `keel_controller_fenced_brokers_total{cause="crash"}`
	sessionFences = `keel_controller_fenced_brokers_total{cause="session_expired"}`
)

// TestBroker_KilledIsFencedAfterCrashGrace: kill -9 of a broker closes its
// connections, and the active controller fences it once the crash grace has
// passed, long before its session (30s here) would run out: the partitions
// it led get new leaders from their ISRs, the fence is counted as a crash,
// and the broker restarted on its data dir registers again at once (the
// dead incarnation no longer holds its id). Then a kill -9 of the active
// controller, the brokers attached, fences nobody: the streams that ended
// there were the controller's doing.
func TestBroker_KilledIsFencedAfterCrashGrace(t *testing.T) {
	t.Parallel()
	const (
		session = 30 * time.Second
		grace   = 500 * time.Millisecond
	)
	c := startPartitionCluster(t, threeBrokers, withSessionTimeout(session), withCrashGrace(grace), withMetrics())
	const topic = "orders"
	c.createTopic(t, topic, "--partitions", "6", "--replication-factor", "3")
	before, _ := c.WaitForAgreement(t, topic, threeBrokers)
	registered := c.WaitForBrokers(t, allActive(threeBrokers...))
	victim := threeBrokers[0]
	for _, id := range threeBrokers {
		if len(before.ledBy(id)) > len(before.ledBy(victim)) {
			victim = id
		}
	}
	survivors := otherThan(threeBrokers, victim)
	leader, _ := c.WaitForActive(t, activeTimeout)
	mark := c.brokerLogMark()
	t.Logf("killing broker %d, which leads partitions %v", victim, before.ledBy(victim))

	c.KillBroker(victim)
	killed := time.Now()
	c.WaitForTopic(t, topic, fmt.Sprintf("led by live brokers only, with broker %d in no ISR", victim), func(d topicJSON) bool {
		return d.every(func(p partitionJSON) bool {
			return p.Leader != victim && p.Leader != noLeader && !slices.Contains(p.ISR, victim)
		})
	})
	took := time.Since(killed)
	t.Logf("partitions moved off broker %d %s after kill -9 (crash grace %s, session timeout %s)", victim, took.Round(time.Millisecond), grace, session)
	if took >= session/2 {
		t.Fatalf("partitions moved %s after the kill; want well within the session timeout (%s): the crash was not seen", took, session)
	}
	c.waitBrokerState(t, victim, stateFenced, killed.Add(session/2))
	c.waitFenceLogged(t, mark, survivors, victim, registered[victim].Epoch)
	c.checkNoFences(t, mark, "of a broker that was never killed", victim)
	// Counted as a crash by the active controller, not as a session expiry.
	addr := map[int32]string{leader: c.node(leader).MetricsAddr()}
	poll.UntilState(t, brokersTimeout, "the active controller to count one crash fence", func() (bool, string) {
		s, desc := scrapeAll(addr, crashFences, sessionFences)
		return s[leader][crashFences] == 1 && s[leader][sessionFences] == 0, desc
	})

	restarted := time.Now()
	c.RestartBroker(victim)
	after := c.WaitForReregistered(t, allActive(threeBrokers...), victim, registered[victim].Epoch)
	t.Logf("broker %d registered again %s after its restart", victim, time.Since(restarted).Round(time.Millisecond))
	if out := c.broker(victim).Output(); strings.Contains(out, "another incarnation of this broker is still registered") {
		t.Errorf("restarted broker %d was refused as a duplicate of its crashed incarnation; its output ends:\n%s", victim, keelproc.LastLines(out, 10))
	}
	for _, id := range survivors {
		if after[id].Epoch != registered[id].Epoch {
			t.Errorf("broker %d: epoch %d, want %d (it was never restarted)", id, after[id].Epoch, registered[id].Epoch)
		}
	}

	// A failover: every broker's stream to the killed controller ends with
	// its connection; none of that is a broker's crash.
	epochs := map[int32]int64{}
	for id, b := range after {
		epochs[id] = b.Epoch
	}
	c.WaitForInspect(t, threeBrokers, "active at their epochs", func(v *keelpb.InspectResponse) bool {
		return v.State == stateActive && v.BrokerEpoch == epochs[v.BrokerId]
	})
	w := c.watchBrokersActive(t, epochs)
	c.Kill(leader)
	newLeader, newEpoch := c.WaitForActive(t, activeTimeout)
	active := time.Now()
	// Eight crash graces after the takeover: time for a wrong crash fence
	// to show.
	reads, bad := c.watchUntil(t, w, active.Add(8*grace), threeBrokers)
	if len(bad) > 0 {
		t.Errorf("during the failover a controller listed a broker not active at its epoch (brokers at epochs %v):\n  %s",
			epochs, strings.Join(bad, "\n  "))
	}
	if reads < 10 {
		t.Errorf("the watch read the broker list only %d times", reads)
	}
	c.WaitForInspect(t, threeBrokers, "following the new controller", func(v *keelpb.InspectResponse) bool {
		return v.ControllerEpoch == newEpoch && v.ControllerId == newLeader && v.State == stateActive
	})
	s, desc := scrapeAll(map[int32]string{newLeader: c.node(newLeader).MetricsAddr()}, crashFences, sessionFences)
	if s[newLeader][crashFences] != 0 || s[newLeader][sessionFences] != 0 {
		t.Errorf("the new active controller fenced brokers after the failover:\n%s", desc)
	}
}
