package integration

import (
	"bufio"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// alteredJSON is `keel topic alter -o json` and `keel config alter -o json`.
type alteredJSON struct {
	Topic        string         `json:"topic"`
	ValidateOnly bool           `json:"validate_only"`
	Configs      []configJSON   `json:"configs"`
	Elections    []electionJSON `json:"elections"`
}

// configIn returns the config name in configs, or a zero one.
func configIn(configs []configJSON, name string) configJSON {
	for _, c := range configs {
		if c.Name == name {
			return c
		}
	}
	return configJSON{}
}

// TestConfigs_AlterSurvivesControllerFailover: `keel topic alter` sets a
// topic's min.insync.replicas (and a boolean written TRUE), `keel config
// alter` a cluster default, and a validate-only change and a bad value
// change nothing. After kill -9 of the active controller the new one
// describes every config in effect with its source; a deleted topic config
// falls back to the cluster default, and the cluster default to the
// built-in one.
func TestConfigs_AlterSurvivesControllerFailover(t *testing.T) {
	t.Parallel()
	c := startPartitionCluster(t, threeBrokers)
	const topic = "orders"
	c.createTopic(t, topic, "--partitions", "2", "--replication-factor", "3")

	var a alteredJSON
	c.keelJSON(t, &a, "topic", "alter", topic, "--config", "min.insync.replicas=2", "--config", "unclean.leader.election.enable=TRUE")
	if got := configIn(a.Configs, "min.insync.replicas"); got != (configJSON{"min.insync.replicas", "2", sourceTopic}) || a.Topic != topic {
		t.Errorf("keel topic alter: %+v; want min.insync.replicas 2 from the topic", a)
	}
	if got := configIn(a.Configs, "unclean.leader.election.enable"); got.Value != "true" {
		t.Errorf("keel topic alter unclean.leader.election.enable=TRUE: %+v; want it stored as true", got)
	}
	c.keelJSON(t, &a, "config", "alter", "--config", "retention.ms=3600000")
	if got := configIn(a.Configs, "retention.ms"); got != (configJSON{"retention.ms", "3600000", sourceClusterDefault}) {
		t.Errorf("keel config alter: %+v; want retention.ms 3600000 as the cluster default", got)
	}
	c.keelJSON(t, &a, "topic", "alter", topic, "--config", "retention.ms=1", "--validate-only")
	if got := configIn(a.Configs, "retention.ms"); !a.ValidateOnly || got.Value != "1" {
		t.Errorf("keel topic alter --validate-only: %+v; want the change as it would be", a)
	}
	expectRefused(t, "", c.adminArgs("topic", "alter", topic, "--config", "min.insync.replicas=0"),
		"keel: --config: min.insync.replicas: 0 is outside")
	expectRefused(t, "", c.adminArgs("topic", "alter", "nope", "--config", "retention.ms=1"), "keel: NotFound: ", `"nope"`)

	leader, _ := c.WaitForActive(t, activeTimeout)
	c.Kill(leader)
	newLeader, _ := c.WaitForActive(t, activeTimeout)
	if newLeader == leader {
		t.Fatalf("node %d is still active after kill -9", leader)
	}
	d := c.cliDescribe(t, topic)
	for _, want := range []configJSON{
		{"min.insync.replicas", "2", sourceTopic},
		{"unclean.leader.election.enable", "true", sourceTopic},
		{"retention.ms", "3600000", sourceClusterDefault},
		{"segment.bytes", "1073741824", sourceDefault},
	} {
		if got := d.config(t, want.Name); got != want {
			t.Errorf("after the controller failover, topic %s: %+v; want %+v", topic, got, want)
		}
	}
	if len(d.Configs) != 2 || d.Configs["min.insync.replicas"] != "2" {
		t.Errorf("after the controller failover, the topic's own configs: %v; want min.insync.replicas and unclean.leader.election.enable", d.Configs)
	}

	// Deleting falls back one source down, on the new active controller.
	c.keelJSON(t, &a, "topic", "alter", topic, "--delete-config", "unclean.leader.election.enable")
	c.keelJSON(t, &a, "config", "alter", "--delete-config", "retention.ms")
	var defaults []configJSON
	c.keelJSON(t, &defaults, "config", "describe", "--linearizable")
	if got := configIn(defaults, "retention.ms"); got != (configJSON{"retention.ms", "604800000", sourceDefault}) {
		t.Errorf("keel config describe after the delete: %+v; want the built-in 604800000", got)
	}
	d = c.cliDescribe(t, topic)
	if got := d.config(t, "unclean.leader.election.enable"); got != (configJSON{"unclean.leader.election.enable", "false", sourceDefault}) {
		t.Errorf("after deleting the topic's unclean.leader.election.enable: %+v; want false by default", got)
	}
	// The restarted controller replays the same configs.
	c.Restart(leader)
	c.WaitForConverged(t, c.IDs(), c.appendNoOp(t, 10*time.Second).GetIndex())
	c.Stop(leader)
	if n := dumpTypes(t, c.DataDir(leader), "config"); n != 5 {
		t.Errorf("the log of node %d holds %d config records; want 5 (two topic sets, a default set, two deletes)", leader, n)
	}
}

// dumpTypes counts the records of type typ in a stopped controller's log
// and snapshot (`keel metadata dump`).
func dumpTypes(t *testing.T, dataDir, typ string) int {
	t.Helper()
	return len(dumpRecords(t, dataDir, typ))
}

// dumpRecords returns the records of type typ in a stopped controller's
// data dir, in log order, as `keel metadata dump -o json` prints them.
func dumpRecords(t *testing.T, dataDir, typ string) []json.RawMessage {
	t.Helper()
	stdout, stderr, code := runKeel(t, 30*time.Second, "metadata", "dump", "--data-dir", dataDir, "--type", typ, "-o", "json")
	if code != 0 {
		t.Fatalf("keel metadata dump --data-dir %s: exit %d: %s", dataDir, code, stderr)
	}
	var out []json.RawMessage
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct {
			Record json.RawMessage `json:"record"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("dump of %s: bad line %q: %v", dataDir, sc.Text(), err)
		}
		out = append(out, line.Record)
	}
	return out
}

// TestPartition_LeaderFromELRWhenTheISRMemberDies: two topics on brokers
// 1, 2, 3, one with min.insync.replicas=2. Broker 3 dies (ISR [1 2], at the
// minimum), then broker 2: the ISR [1] is below the minimum, so broker 2,
// which left it while the high watermark could not move, holds every
// committed record and becomes an eligible leader replica (KIP-966). (It
// stops cleanly, with SIGTERM: a broker killed with kill -9 may have lost
// unflushed records, and leaves every ELR when it registers again, as
// TestPartition_UncleanShutdownLeavesELR shows.)
// Then broker 1, the last ISR member, dies: no leader, broker 1 the last
// known one. When broker 2 returns it leads the min ISR topic, cleanly (not
// recovering), and broker 1 is eligible in its turn; the other topic, with
// no ELR, waits for broker 1 as before.
func TestPartition_LeaderFromELRWhenTheISRMemberDies(t *testing.T) {
	t.Parallel()
	c := startPartitionCluster(t, threeBrokers)
	const strict, loose = "strict", "loose"
	c.createTopic(t, strict, "--assignment", "0:1,2,3")
	c.createTopic(t, loose, "--assignment", "0:1,2,3")
	var a alteredJSON
	c.keelJSON(t, &a, "topic", "alter", strict, "--config", "min.insync.replicas=2")
	for _, topic := range []string{strict, loose} {
		c.WaitForAgreement(t, topic, threeBrokers)
	}

	c.KillBroker(3)
	for _, topic := range []string{strict, loose} {
		c.WaitForTopic(t, topic, "ISR [1 2], no ELR", func(d topicJSON) bool {
			p := d.Partitions[0]
			return p.Leader == 1 && slices.Equal(p.ISR, []int32{1, 2}) && len(p.ELR) == 0
		})
	}
	c.StopBroker(2)
	c.WaitForTopic(t, strict, "ISR [1], ELR [2]", func(d topicJSON) bool {
		p := d.Partitions[0]
		return p.Leader == 1 && slices.Equal(p.ISR, []int32{1}) && slices.Equal(p.ELR, []int32{2})
	})
	c.WaitForTopic(t, loose, "ISR [1], no ELR (min.insync.replicas 1)", func(d topicJSON) bool {
		p := d.Partitions[0]
		return p.Leader == 1 && slices.Equal(p.ISR, []int32{1}) && len(p.ELR) == 0
	})
	if p := c.cliDescribe(t, strict).partition(t, 0); !slices.Equal(p.ELR, []int32{2}) {
		t.Errorf("keel topic describe %s: %s; want eligible_leader_replicas [2]", strict, p)
	}

	c.KillBroker(1)
	down := c.WaitForTopic(t, strict, "without a leader, ELR [2], last known leader 1", func(d topicJSON) bool {
		p := d.Partitions[0]
		return p.Leader == noLeader && slices.Equal(p.ELR, []int32{2}) && slices.Equal(p.LastKnownELR, []int32{1})
	}).partition(t, 0)
	c.WaitForTopic(t, loose, "without a leader", func(d topicJSON) bool { return d.Partitions[0].Leader == noLeader })

	c.RestartBroker(2)
	up := c.WaitForTopic(t, strict, "led by broker 2, from the ELR", func(d topicJSON) bool {
		return d.Partitions[0].Leader == 2
	}).partition(t, 0)
	if !slices.Equal(up.ISR, []int32{2}) || !slices.Equal(up.ELR, []int32{1}) || len(up.LastKnownELR) != 0 || up.RecoveryState != stateRecovered ||
		up.LeaderEpoch != down.LeaderEpoch+1 {
		t.Errorf("broker 2 back: %s; want leader 2 at leader epoch %d, ISR [2], ELR [1], no last known leader, recovered (a clean election)",
			up, down.LeaderEpoch+1)
	}
	c.WaitForBrokers(t, map[int32]string{1: stateFenced, 2: stateActive, 3: stateFenced})
	if p := c.cliDescribe(t, loose).partition(t, 0); p.Leader != noLeader {
		t.Errorf("topic %s (no ELR) with broker 2 back: %s; want no leader: broker 2 is not in its ISR", loose, p)
	}
	c.WaitForAgreement(t, strict, []int32{2})
}

// TestPartition_UncleanShutdownLeavesELR (KIP-966): as above, but broker 2
// is killed with kill -9 and so leaves no clean-shutdown marker. The ELR
// holds it while it is down; when it starts again it reports the unclean
// shutdown at registration and leaves the ELR in the same decision: it may
// have lost records it had not flushed, so it may not lead cleanly, and the
// partition stays without a leader, broker 1 its last known one.
func TestPartition_UncleanShutdownLeavesELR(t *testing.T) {
	t.Parallel()
	c := startPartitionCluster(t, threeBrokers)
	const strict = "strict"
	c.createTopic(t, strict, "--assignment", "0:1,2,3", "--config", "min.insync.replicas=2")
	c.WaitForAgreement(t, strict, threeBrokers)
	c.KillBroker(3)
	c.WaitForTopic(t, strict, "ISR [1 2]", func(d topicJSON) bool { return slices.Equal(d.Partitions[0].ISR, []int32{1, 2}) })
	c.KillBroker(2)
	c.WaitForTopic(t, strict, "ISR [1], ELR [2]", func(d topicJSON) bool {
		p := d.Partitions[0]
		return p.Leader == 1 && slices.Equal(p.ISR, []int32{1}) && slices.Equal(p.ELR, []int32{2})
	})
	c.KillBroker(1)
	c.WaitForTopic(t, strict, "without a leader, ELR [2], last known leader 1", func(d topicJSON) bool {
		p := d.Partitions[0]
		return p.Leader == noLeader && slices.Equal(p.ELR, []int32{2}) && slices.Equal(p.LastKnownELR, []int32{1})
	})
	c.RestartBroker(2)
	c.WaitForBrokers(t, map[int32]string{1: stateFenced, 2: stateActive, 3: stateFenced})
	p := c.cliDescribe(t, strict).partition(t, 0)
	if p.Leader != noLeader || len(p.ELR) != 0 || !slices.Equal(p.ISR, []int32{1}) || !slices.Equal(p.LastKnownELR, []int32{1}) {
		t.Errorf("broker 2 back after kill -9: %s; want no leader, ISR [1], no ELR, last known leader 1", p)
	}
}

// TestPartition_UncleanEnableElectsLeaderless: a partition on brokers 2
// and 3 loses both (ISR [2], no leader); broker 3 returns, outside the ISR,
// and the partition stays leaderless. `keel topic alter --config
// unclean.leader.election.enable=true` elects broker 3 in the same
// decision and says so; the partition is RECOVERING (KIP-704) until its
// new leader confirms, which it does at once: the metadata log holds both
// states in order. Broker 2 then rejoins the ISR.
func TestPartition_UncleanEnableElectsLeaderless(t *testing.T) {
	t.Parallel()
	c := startPartitionCluster(t, threeBrokers)
	const topic = "lost"
	c.createTopic(t, topic, "--assignment", "0:2,3")
	c.WaitForAgreement(t, topic, threeBrokers)

	c.KillBroker(3)
	c.WaitForTopic(t, topic, "led by broker 2, ISR [2]", func(d topicJSON) bool {
		p := d.Partitions[0]
		return p.Leader == 2 && slices.Equal(p.ISR, []int32{2})
	})
	c.KillBroker(2)
	c.WaitForTopic(t, topic, "without a leader", func(d topicJSON) bool { return d.Partitions[0].Leader == noLeader })
	c.RestartBroker(3)
	c.WaitForBrokers(t, map[int32]string{1: stateActive, 2: stateFenced, 3: stateActive})
	still := c.cliDescribe(t, topic).partition(t, 0)
	if still.Leader != noLeader {
		t.Fatalf("with broker 3 back outside the ISR: %s; want no leader until unclean election is allowed", still)
	}

	var a alteredJSON
	c.keelJSON(t, &a, "topic", "alter", topic, "--config", "unclean.leader.election.enable=true")
	if want := []electionJSON{{Topic: topic, Partition: 0, Leader: 3}}; !slices.Equal(a.Elections, want) {
		t.Errorf("keel topic alter unclean.leader.election.enable=true: elections %+v; want %+v", a.Elections, want)
	}
	led := c.WaitForTopic(t, topic, "led by broker 3, recovered", func(d topicJSON) bool {
		p := d.Partitions[0]
		return p.Leader == 3 && p.RecoveryState == stateRecovered
	}).partition(t, 0)
	if led.LeaderEpoch != still.LeaderEpoch+1 || !slices.Equal(led.ISR, []int32{3}) {
		t.Errorf("after the unclean election: %s; want leader 3 at leader epoch %d, ISR [3]", led, still.LeaderEpoch+1)
	}
	c.RestartBroker(2)
	c.WaitForTopic(t, topic, "ISR [3 2]", func(d topicJSON) bool {
		return sameSet(d.Partitions[0].ISR, []int32{2, 3})
	})
	c.WaitForAgreement(t, topic, threeBrokers)

	// The log: the election set RECOVERING, broker 3's AlterPartition
	// RECOVERED, in that order, and nothing else touched the state.
	c.checkRecoveredInLog(t)
}

// checkRecoveredInLog reads the metadata log of a stopped follower
// controller (after every node has applied a write made now) and checks
// that the partition change records set the leader recovery state exactly
// twice: RECOVERING (the unclean election), then RECOVERED (the leader's
// AlterPartition).
func (c *Cluster) checkRecoveredInLog(t *testing.T) {
	t.Helper()
	leader, _ := c.WaitForActive(t, activeTimeout)
	follower := otherThan(c.IDs(), leader)[0]
	c.WaitForConverged(t, c.IDs(), c.appendNoOp(t, 10*time.Second).GetIndex())
	c.Stop(follower)
	var states []string
	for _, raw := range dumpRecords(t, c.DataDir(follower), "partition_change") {
		var r struct {
			State *string `json:"leader_recovery_state"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		if r.State != nil {
			states = append(states, *r.State)
		}
	}
	if want := []string{"LEADER_RECOVERY_STATE_RECOVERING", "LEADER_RECOVERY_STATE_RECOVERED"}; !slices.Equal(states, want) {
		t.Errorf("the recovery states in node %d's log: %v; want %v", follower, states, want)
	}
}
