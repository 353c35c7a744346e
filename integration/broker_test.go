package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/keeltest/keelproc"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

var threeBrokers = []int32{1, 2, 3}

// TestBroker_RegisterAndActive: three controllers and three brokers; every
// broker registers and is active, and what `keel broker list` says of each
// agrees with what the broker says of itself in `keel broker inspect`.
func TestBroker_RegisterAndActive(t *testing.T) {
	t.Parallel()
	c, leader, epoch := startBrokerCluster(t, 3, threeBrokers...)
	views, errs := c.Views(context.Background(), c.IDs())
	if len(errs) > 0 {
		t.Fatalf("controllers did not answer: %v", errs)
	}
	clusterID := views[leader].ClusterId

	rows := c.cliBrokerList(t)
	if len(rows) != 3 {
		t.Fatalf("keel broker list: %d brokers, want 3: %+v", len(rows), rows)
	}
	epochs := map[int64]int32{}
	for _, id := range threeBrokers {
		r, ok := rows[id]
		if !ok {
			t.Errorf("keel broker list: broker %d missing: %+v", id, rows)
			continue
		}
		if r.State != stateActive || r.Address != c.BrokerAddr(id) || r.Rack != "r"+strconv.Itoa(int(id)) || r.Epoch <= 0 {
			t.Errorf("keel broker list: broker %d = %+v; want active at %s, rack r%d, epoch > 0", id, r, c.BrokerAddr(id), id)
		}
		if other, dup := epochs[r.Epoch]; dup {
			t.Errorf("brokers %d and %d have the same epoch %d: an epoch is the raft index of a registration", other, id, r.Epoch)
		}
		epochs[r.Epoch] = id
	}

	// A last write: every broker applies the metadata up to it, and stops
	// there, as the controllers do.
	last := c.appendNoOp(t, 10*time.Second).Index
	c.WaitForBrokerOffsets(t, threeBrokers, last)
	c.WaitForApplied(t, c.IDs(), last)
	for _, id := range threeBrokers {
		v := c.cliInspect(t, id)
		want := brokerInspectFields{
			BrokerID: id, BrokerEpoch: rows[id].Epoch, ControllerID: leader, ControllerEpoch: epoch,
			MetadataOffset: last, ClusterID: clusterID, State: stateActive,
		}
		if v.brokerInspectFields != want {
			t.Errorf("keel broker inspect (broker %d) =\n  %+v\nwant\n  %+v", id, v.brokerInspectFields, want)
		}
		if v.Partitions == nil {
			t.Errorf("keel broker inspect (broker %d): partitions is null or missing, want a list", id)
		}
		if v.MetadataOffset < uint64(v.BrokerEpoch) {
			t.Errorf("broker %d is active at metadata offset %d, before its own registration (epoch %d)", id, v.MetadataOffset, v.BrokerEpoch)
		}
	}
}

// TestBroker_KilledIsFencedAfterSessionTimeout: with crash detection off
// (--crash-grace 0), a broker killed with -9 is fenced once its session runs
// out, not before; restarted on its data dir it registers again with a
// higher epoch and is active. (With crash detection on, the default, see
// TestBroker_KilledIsFencedAfterCrashGrace.)
func TestBroker_KilledIsFencedAfterSessionTimeout(t *testing.T) {
	t.Parallel()
	c, leader, _ := startBrokerClusterWith(t, 3, []clusterOption{withCrashGrace(0)}, threeBrokers...)
	before := c.WaitForBrokers(t, allActive(threeBrokers...))
	const victim = 2
	survivors := otherThan(threeBrokers, victim)
	mark := c.brokerLogMark()

	c.KillBroker(victim)
	killed := time.Now()
	// Right after the kill, the active controller still holds its session.
	list, err := c.ListBrokersOn(context.Background(), leader)
	if read := time.Since(killed); read > testSessionTimeout/4 {
		t.Fatalf("reading the broker list right after the kill took %s: too slow to tell anything", read)
	}
	if err != nil {
		t.Fatalf("ListBrokers on the active controller %d: %v", leader, err)
	}
	if b := list[victim]; b == nil || b.State != stateActive {
		t.Fatalf("%s after kill -9, broker %d is already %v; want still active until its session (%s) runs out",
			time.Since(killed).Round(time.Millisecond), victim, b, testSessionTimeout)
	}

	fencedAt := c.waitBrokerState(t, victim, stateFenced, killed.Add(testSessionTimeout+5*time.Second))
	took := fencedAt.Sub(killed)
	t.Logf("broker %d fenced %s after kill -9 (session timeout %s)", victim, took.Round(time.Millisecond), testSessionTimeout)
	// Its last heartbeat came at most a few intervals before the kill.
	if earliest := testSessionTimeout - 4*testHeartbeat; took < earliest {
		t.Errorf("broker %d fenced %s after the kill; want no sooner than %s (session timeout %s)", victim, took, earliest, testSessionTimeout)
	}
	fenced := c.WaitForBrokers(t, map[int32]string{1: stateActive, 2: stateFenced, 3: stateActive})
	for _, id := range threeBrokers {
		if fenced[id].Epoch != before[id].Epoch {
			t.Errorf("broker %d: epoch %d, want %d (unchanged)", id, fenced[id].Epoch, before[id].Epoch)
		}
	}
	// The fence was pushed to the survivors, which replayed it.
	c.waitFenceLogged(t, mark, survivors, victim, before[victim].Epoch)
	c.checkNoFences(t, mark, "of a broker that was never killed", victim)

	c.RestartBroker(victim)
	after := c.WaitForReregistered(t, allActive(threeBrokers...), victim, before[victim].Epoch)
	if after[victim].Address != c.BrokerAddr(victim) {
		t.Errorf("restarted broker %d registered at %q, want %q", victim, after[victim].Address, c.BrokerAddr(victim))
	}
	for _, id := range survivors {
		if after[id].Epoch != before[id].Epoch {
			t.Errorf("broker %d: epoch %d, want %d (it was never restarted)", id, after[id].Epoch, before[id].Epoch)
		}
	}
	c.WaitForInspect(t, []int32{victim}, "active at its new epoch", func(v *keelpb.InspectResponse) bool {
		return v.State == stateActive && v.BrokerEpoch == after[victim].Epoch && v.MetadataOffset >= uint64(v.BrokerEpoch)
	})
	rows := c.cliBrokerList(t)
	if r := rows[victim]; r.State != stateActive || r.Epoch != after[victim].Epoch {
		t.Errorf("keel broker list: broker %d = %+v; want active at epoch %d", victim, r, after[victim].Epoch)
	}
}

// TestFailover_NoBrokerFenced: kill -9 of the active controller fences no
// broker, and every broker follows the new one: its epoch, its id, and the
// metadata it commits.
func TestFailover_NoBrokerFenced(t *testing.T) {
	t.Parallel()
	c, leader, epoch := startBrokerCluster(t, 3, threeBrokers...)
	before := c.WaitForBrokers(t, allActive(threeBrokers...))
	pre := c.WaitForBrokerOffsets(t, threeBrokers, 1)
	preOffset := pre[1].MetadataOffset
	for id, v := range pre {
		if v.ControllerEpoch != epoch || v.ControllerId != leader {
			t.Fatalf("before the failover broker %d follows controller %d epoch %d; want %d, %d", id, v.ControllerId, v.ControllerEpoch, leader, epoch)
		}
	}
	epochs := make(map[int32]int64)
	for id, b := range before {
		epochs[id] = b.Epoch
	}
	mark := c.brokerLogMark()
	w := c.watchBrokersActive(t, epochs)

	c.Kill(leader)
	killed := time.Now()
	newLeader, newEpoch := c.WaitForActive(t, activeTimeout)
	active := time.Now()
	if newLeader == leader || newEpoch != epoch+1 {
		t.Fatalf("after kill -9 of node %d: active %d epoch %d; want another node, epoch %d", leader, newLeader, newEpoch, epoch+1)
	}
	t.Logf("node %d active in epoch %d, %s after the kill", newLeader, newEpoch, active.Sub(killed).Round(time.Millisecond))
	// Two sessions of the new controller: long enough for it to fence any
	// broker it did not give a fresh session, or that could not reach it.
	reads, bad := c.watchUntil(t, w, active.Add(2*testSessionTimeout+testSessionTimeout/2), threeBrokers)
	if len(bad) > 0 {
		t.Errorf("during the failover a controller listed a broker not active at its epoch (brokers at epochs %v):\n  %s",
			epochs, strings.Join(bad, "\n  "))
	}
	if reads < 20 {
		t.Errorf("the watch read the broker list only %d times", reads)
	}

	views := c.WaitForInspect(t, threeBrokers, "following the new controller", func(v *keelpb.InspectResponse) bool {
		return v.ControllerEpoch == newEpoch && v.ControllerId == newLeader
	})
	for id, v := range views {
		if v.State != stateActive || v.BrokerEpoch != epochs[id] {
			t.Errorf("broker %d after the failover: state %s epoch %d; want active at epoch %d", id, v.State, v.BrokerEpoch, epochs[id])
		}
	}

	// A write through the new controller reaches every broker: each one
	// stops exactly at its offset, where the controllers' image is.
	stdout, stderr, code := runKeel(t, 30*time.Second, "quorum", "verify", "--controllers", strings.Join(c.Addrs(), ","), "-o", "json")
	if code != 0 {
		t.Fatalf("keel quorum verify: exit %d: %s", code, stderr)
	}
	var vr struct {
		Index           uint64 `json:"index"`
		ControllerEpoch int64  `json:"controller_epoch"`
	}
	if err := json.Unmarshal([]byte(stdout), &vr); err != nil {
		t.Fatalf("keel quorum verify: bad JSON: %v\n%s", err, stdout)
	}
	if vr.ControllerEpoch != newEpoch || vr.Index <= preOffset {
		t.Fatalf("quorum verify = %+v; want epoch %d, index > %d", vr, newEpoch, preOffset)
	}
	c.WaitForBrokerOffsets(t, threeBrokers, vr.Index)
	// Having replayed a write made after the watch, the brokers' logs hold
	// every fence committed during it.
	c.checkNoFences(t, mark, "during the failover")
	qviews := c.WaitForApplied(t, c.Live(), vr.Index)
	for _, id := range threeBrokers {
		v := c.cliInspect(t, id)
		if v.MetadataOffset != vr.Index || v.ControllerEpoch != newEpoch || v.ControllerID != newLeader ||
			v.BrokerEpoch != epochs[id] || v.State != stateActive {
			t.Errorf("keel broker inspect (broker %d) = %+v; want metadata offset %d (the verify write, the last one), controller %d epoch %d, broker epoch %d, active",
				id, v, vr.Index, newLeader, newEpoch, epochs[id])
		}
		for nid, q := range qviews {
			if q.AppliedIndex < v.MetadataOffset {
				t.Errorf("broker %d is at offset %d, ahead of node %d's applied index %d", id, v.MetadataOffset, nid, q.AppliedIndex)
			}
		}
	}
	for id, r := range c.cliBrokerList(t) {
		if r.State != stateActive || r.Epoch != epochs[id] {
			t.Errorf("keel broker list after the failover: broker %d = %+v; want active at epoch %d", id, r, epochs[id])
		}
	}
}

// TestFailover_BrokerKilledWithLeaderIsFenced: a broker that dies at the same
// moment as the active controller is fenced by the new one, one session
// after it took over (KAFKA-18138): not at once, and not never.
func TestFailover_BrokerKilledWithLeaderIsFenced(t *testing.T) {
	t.Parallel()
	c, leader, epoch := startBrokerCluster(t, 3, threeBrokers...)
	before := c.WaitForBrokers(t, allActive(threeBrokers...))
	const victim = 3
	survivors := otherThan(threeBrokers, victim)
	mark := c.brokerLogMark()

	c.KillTogether([]int32{leader}, []int32{victim})
	killed := time.Now()
	newLeader, newEpoch := c.WaitForActive(t, activeTimeout)
	active := time.Now()
	if newLeader == leader || newEpoch != epoch+1 {
		t.Fatalf("after kill -9 of node %d: active %d epoch %d; want another node, epoch %d", leader, newLeader, newEpoch, epoch+1)
	}
	t.Logf("node %d active in epoch %d, %s after the kill", newLeader, newEpoch, active.Sub(killed).Round(time.Millisecond))
	// The new controller starts with a fresh session for every broker,
	// the dead one included.
	list, err := c.ListBrokersOn(context.Background(), newLeader)
	if err != nil {
		t.Fatalf("ListBrokers on the new active controller %d: %v", newLeader, err)
	}
	if b := list[victim]; b == nil || b.State != stateActive {
		t.Fatalf("%s after the new controller took over, broker %d is %v; want still active (a fresh session of %s)",
			time.Since(active).Round(time.Millisecond), victim, b, testSessionTimeout)
	}

	fencedAt := c.waitBrokerState(t, victim, stateFenced, active.Add(testSessionTimeout+5*time.Second))
	took := fencedAt.Sub(active)
	t.Logf("broker %d fenced %s after the new controller was seen active (session timeout %s)", victim, took.Round(time.Millisecond), testSessionTimeout)
	if earliest := testSessionTimeout - 400*time.Millisecond; took < earliest {
		t.Errorf("broker %d fenced %s after the new controller took over; want about one session (%s) later, no sooner than %s",
			victim, took, testSessionTimeout, earliest)
	}
	after := c.WaitForBrokers(t, map[int32]string{1: stateActive, 2: stateActive, 3: stateFenced})
	for _, id := range threeBrokers {
		if after[id].Epoch != before[id].Epoch {
			t.Errorf("broker %d: epoch %d, want %d (unchanged)", id, after[id].Epoch, before[id].Epoch)
		}
	}
	c.waitFenceLogged(t, mark, survivors, victim, before[victim].Epoch)
	c.checkNoFences(t, mark, "of a live broker", victim)
	c.WaitForInspect(t, survivors, "active, following the new controller", func(v *keelpb.InspectResponse) bool {
		return v.State == stateActive && v.ControllerEpoch == newEpoch && v.ControllerId == newLeader
	})
}

// TestBroker_DuplicateIDRefused: a second broker process with the id of a
// live one is refused: it exits non-zero naming the duplicate registration,
// and the first broker keeps its registration and stays active.
func TestBroker_DuplicateIDRefused(t *testing.T) {
	t.Parallel()
	c, _, _ := startBrokerCluster(t, 3, threeBrokers...)
	before := c.WaitForBrokers(t, allActive(threeBrokers...))
	const id = 1

	// Long enough for a broker that first retries for a session (in case
	// the other incarnation is its own dead predecessor) to give up.
	const exitWithin = testSessionTimeout + 10*time.Second
	dir := t.TempDir()
	outPath, errPath := filepath.Join(dir, "stdout"), filepath.Join(dir, "stderr")
	outF, errF := mustCreate(t, outPath), mustCreate(t, errPath)
	args := brokerArgs(id, freeAddr(t), filepath.Join(dir, "data"), c.Addrs())
	dup, err := keelproc.StartProc(keelBin, nil, outF, errF, args...)
	outF.Close()
	errF.Close()
	if err != nil {
		t.Fatalf("start keel %s: %v", strings.Join(args, " "), err)
	}
	t.Cleanup(func() { dup.Stop(10 * time.Second) })
	exited := dup.Wait(exitWithin)
	stdout, _ := os.ReadFile(outPath)
	stderr, _ := os.ReadFile(errPath)
	if !exited {
		dup.Stop(5 * time.Second)
		t.Errorf("a second `keel broker --broker-id %d` (pid %d) is still running %s after it started, while broker %d is alive: "+
			"want it to exit non-zero naming the duplicate registration; its output ends:\n%s",
			id, dup.Pid(), exitWithin, id, keelproc.LastLines(string(stderr), 5))
	} else {
		last := keelproc.LastLines(string(stderr), 1)
		if dup.ExitCode() == 0 || !strings.HasPrefix(last, "keel: ") ||
			!strings.Contains(strings.ToLower(last), "duplicate") || !strings.Contains(last, "broker "+strconv.Itoa(id)) {
			t.Errorf("second broker %d: exit status %d, last line of stderr %q; want non-zero and one line \"keel: ...\" naming the duplicate registration of broker %d",
				id, dup.ExitCode(), last, id)
		}
		if len(stdout) > 0 {
			t.Errorf("second broker %d wrote to stdout: %q", id, stdout)
		}
	}

	// The first one is untouched.
	after := c.WaitForBrokers(t, allActive(threeBrokers...))
	for _, bid := range threeBrokers {
		if !sameBrokerInfo(after[bid], before[bid]) {
			t.Errorf("broker %d: %v after the duplicate, want %v", bid, after[bid], before[bid])
		}
	}
	if v := c.Inspect(t, id); v.State != stateActive || v.BrokerEpoch != before[id].Epoch {
		t.Errorf("first broker %d: state %s epoch %d; want active at epoch %d", id, v.State, v.BrokerEpoch, before[id].Epoch)
	}
}

// sameBrokerInfo compares the fields of a broker list entry.
func sameBrokerInfo(a, b *keelpb.BrokerInfo) bool {
	return a.GetId() == b.GetId() && a.GetEpoch() == b.GetEpoch() && a.GetAddress() == b.GetAddress() &&
		a.GetRack() == b.GetRack() && a.GetState() == b.GetState() && a.GetIncarnationId() == b.GetIncarnationId()
}

// TestBroker_SIGTERMLeavesItFencedThenActiveAgain: SIGTERM makes a
// broker's controlled shutdown, which ends, as KRaft's does, with the broker
// fenced and still registered: `keel broker list` shows it fenced at its
// epoch (it stays in placement and in the replica sets during a rolling
// restart), and the other brokers replay its fencing. Started again, its
// new incarnation registers at once, with no old session to wait out, and
// is active again.
func TestBroker_SIGTERMLeavesItFencedThenActiveAgain(t *testing.T) {
	t.Parallel()
	c, _, _ := startBrokerCluster(t, 3, threeBrokers...)
	before := c.WaitForBrokers(t, allActive(threeBrokers...))
	const id = 3
	mark := c.brokerLogMark()

	c.StopBroker(id) // fails the test unless it exits 0
	if out := c.broker(id).Output(); !strings.Contains(out, "controlled shutdown complete") || strings.Contains(out, "did not shut down cleanly") {
		t.Errorf("broker %d exited without completing its controlled shutdown; its output ends:\n%s", id, keelproc.LastLines(out, 10))
	}
	after := c.WaitForBrokers(t, map[int32]string{1: stateActive, 2: stateActive, id: stateFenced})
	for _, bid := range threeBrokers {
		if after[bid].Epoch != before[bid].Epoch || after[bid].Address != before[bid].Address {
			t.Errorf("broker %d: epoch %d at %s, want %d at %s", bid, after[bid].Epoch, after[bid].Address, before[bid].Epoch, before[bid].Address)
		}
	}
	rows := c.cliBrokerList(t)
	if r, ok := rows[id]; !ok || r.State != stateFenced || r.Epoch != before[id].Epoch || len(rows) != 3 {
		t.Errorf("keel broker list after broker %d stopped: %+v; want all three, broker %d fenced at epoch %d", id, rows, id, before[id].Epoch)
	}
	c.waitFenceLogged(t, mark, []int32{1, 2}, id, before[id].Epoch)
	c.checkNoFences(t, mark, "after broker 3's clean stop", id)

	c.RestartBroker(id)
	c.WaitForReregistered(t, allActive(threeBrokers...), id, before[id].Epoch)
	if out := c.broker(id).Output(); strings.Contains(out, "another incarnation of this broker is still registered") {
		t.Errorf("restarted broker %d waited for the session of the incarnation that had stopped cleanly; its output:\n%s", id, keelproc.LastLines(out, 10))
	}
}

// TestBroker_RetriedRegistrationKeepsEpoch: a registration retried by the
// incarnation already registered (as a broker whose answer was lost sends
// it again) is answered with the epoch it has; the broker stays active, at
// that epoch, and nothing is written.
func TestBroker_RetriedRegistrationKeepsEpoch(t *testing.T) {
	t.Parallel()
	c, _, _ := startBrokerCluster(t, 3, threeBrokers...)
	before := c.WaitForBrokers(t, allActive(threeBrokers...))
	const id = 2
	b := before[id]
	mark := c.brokerLogMark()
	leader, _ := c.WaitForActive(t, activeTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &keelpb.RegisterBrokerRequest{BrokerId: id, IncarnationId: b.IncarnationId, Address: b.Address, Rack: b.Rack,
		MinMetadataVersion: fsm.MinMetadataVersion, MaxMetadataVersion: fsm.MaxMetadataVersion, ClusterId: c.Inspect(t, id).ClusterId}
	for attempt := 1; attempt <= 2; attempt++ {
		resp, err := c.Client().RegisterBroker(ctx, req)
		if err != nil || resp.GetBrokerEpoch() != b.Epoch {
			t.Fatalf("registration retry %d of broker %d: %v, %v; want epoch %d", attempt, id, resp, err, b.Epoch)
		}
	}
	// Another address is another broker: refused, naming the field.
	req.Address = freeAddr(t)
	if _, err := c.Client().RegisterBroker(ctx, req); status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "address") {
		t.Errorf("a retry of incarnation %s with another address: %v; want InvalidArgument naming address", b.IncarnationId, err)
	}
	after := c.WaitForBrokers(t, allActive(threeBrokers...))
	if list, err := c.ListBrokersOn(ctx, leader); err != nil || !sameBrokerInfo(list[id], b) || !sameBrokerInfo(after[id], b) {
		t.Errorf("broker %d after the retried registrations: %v (%v), want %v", id, list[id], err, b)
	}
	if v := c.Inspect(t, id); v.State != stateActive || v.BrokerEpoch != b.Epoch {
		t.Errorf("broker %d's own view: %s at epoch %d; want active at %d", id, v.State, v.BrokerEpoch, b.Epoch)
	}
	c.checkNoFences(t, mark, "after a retried registration")
}

// TestBroker_UnregisterOnlyWhenFenced: `keel broker unregister` is refused,
// with the reason, while the broker runs; once it has stopped (SIGTERM:
// fenced) it is accepted, and the broker leaves the list. Started again,
// it registers anew.
func TestBroker_UnregisterOnlyWhenFenced(t *testing.T) {
	t.Parallel()
	c, _, _ := startBrokerCluster(t, 3, threeBrokers...)
	before := c.WaitForBrokers(t, allActive(threeBrokers...))
	const id = 1
	controllers := strings.Join(c.Addrs(), ",")
	_, stderr, code := runKeel(t, 30*time.Second, "broker", "unregister", "--broker-id", "1", "--controllers", controllers)
	if code == 0 || !strings.Contains(stderr, "FailedPrecondition") || !strings.Contains(stderr, "broker 1") || !strings.Contains(stderr, "is active") {
		t.Fatalf("keel broker unregister of an active broker: exit %d, %s; want a refusal saying it is active", code, stderr)
	}
	c.WaitForBrokers(t, allActive(threeBrokers...))

	c.StopBroker(id)
	c.WaitForBrokers(t, map[int32]string{id: stateFenced, 2: stateActive, 3: stateActive})
	stdout, stderr, code := runKeel(t, 30*time.Second, "broker", "unregister", "--broker-id", "1", "--controllers", controllers, "-o", "json")
	var got struct {
		BrokerID    int32 `json:"broker_id"`
		BrokerEpoch int64 `json:"broker_epoch"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &got) != nil || got.BrokerID != id || got.BrokerEpoch != before[id].Epoch {
		t.Fatalf("keel broker unregister of the stopped broker: exit %d, %s %s; want broker 1, epoch %d", code, stdout, stderr, before[id].Epoch)
	}
	c.WaitForBrokers(t, allActive(2, 3))
	if rows := c.cliBrokerList(t); len(rows) != 2 {
		t.Errorf("keel broker list after unregistering broker 1: %+v", rows)
	}

	c.RestartBroker(id)
	c.WaitForReregistered(t, allActive(threeBrokers...), id, before[id].Epoch)
}

// TestBroker_RefusesDataDirOfAnotherBroker: a data dir belongs to the broker
// id that first used it; another id is refused at start, and the dir is left
// to its owner.
func TestBroker_RefusesDataDirOfAnotherBroker(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1, withSessionTimeout(testSessionTimeout))
	c.WaitForActive(t, activeTimeout)
	c.StartBroker(1)
	first := c.WaitForBrokers(t, allActive(1))
	c.StopBroker(1)
	c.WaitForBrokers(t, map[int32]string{1: stateFenced}) // stopped: registered, fenced

	dir := c.BrokerDataDir(1)
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		t.Fatalf("broker 1's data dir %s: %v, %d entries; want what broker 1 left", dir, err, len(entries))
	}
	snapshot := readTree(t, dir)
	addr := freeAddr(t)
	expectRefused(t, addr, brokerArgs(2, addr, dir, c.Addrs()),
		dir, "broker 1", "not broker 2")
	if got := readTree(t, dir); !equalTrees(got, snapshot) {
		t.Errorf("the refused start changed %s", dir)
	}
	if l := c.WaitForBrokers(t, map[int32]string{1: stateFenced}); len(l) != 1 {
		t.Errorf("brokers listed after the refused start: %v; want broker 1 only, fenced", l)
	}

	c.RestartBroker(1)
	c.WaitForReregistered(t, allActive(1), 1, first[1].Epoch)
}

// readTree returns the regular files under dir by relative path.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out[rel] = b
		return nil
	})
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	return out
}

func equalTrees(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// TestBroker_StaleEpochHeartbeatRefused: a broker bounced by kill -9 and an
// immediate restart registers again (once its old session has run out) with
// a new epoch; a heartbeat that still carries the old epoch is refused with
// STALE_BROKER_EPOCH, so that whoever sent it registers again.
func TestBroker_StaleEpochHeartbeatRefused(t *testing.T) {
	t.Parallel()
	c, _, _ := startBrokerCluster(t, 3, threeBrokers...)
	before := c.WaitForBrokers(t, allActive(threeBrokers...))
	const id = 1
	old := before[id].Epoch

	c.KillBroker(id)
	c.RestartBroker(id) // within the old session: it must wait for it, not give up
	if !c.BrokerRunning(id) {
		t.Fatalf("broker %d exited right after its restart", id)
	}
	after := c.WaitForReregistered(t, allActive(threeBrokers...), id, old)
	leader, epoch := c.WaitForActive(t, activeTimeout)
	cl, err := c.Client().Controller(c.Addr(leader))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v := c.Inspect(t, id)

	_, err = cl.BrokerHeartbeat(ctx, &keelpb.BrokerHeartbeatRequest{BrokerId: id, BrokerEpoch: old, MetadataOffset: v.MetadataOffset})
	if code, reason := status.Code(err), rpc.ReasonOf(err); code != codes.FailedPrecondition || reason != rpc.ReasonStaleBrokerEpoch {
		t.Errorf("heartbeat of broker %d at its old epoch %d (current %d): %v (code %s, reason %q); want FailedPrecondition, reason %s",
			id, old, after[id].Epoch, err, code, reason, rpc.ReasonStaleBrokerEpoch)
	}
	// The same heartbeat at the current epoch is fine: it was the epoch.
	resp, err := cl.BrokerHeartbeat(ctx, &keelpb.BrokerHeartbeatRequest{BrokerId: id, BrokerEpoch: after[id].Epoch, MetadataOffset: v.MetadataOffset})
	if err != nil {
		t.Errorf("heartbeat of broker %d at its current epoch %d: %v", id, after[id].Epoch, err)
	} else if resp.IsFenced || resp.ControllerEpoch != epoch || resp.ControllerId != leader {
		t.Errorf("heartbeat of broker %d at its current epoch = %v; want not fenced, controller %d epoch %d", id, resp, leader, epoch)
	}

	// The refused heartbeat changed nothing.
	final := c.WaitForBrokers(t, allActive(threeBrokers...))
	if final[id].Epoch != after[id].Epoch {
		t.Errorf("broker %d: epoch %d after the stale heartbeat, want %d", id, final[id].Epoch, after[id].Epoch)
	}
	if v := c.Inspect(t, id); v.State != stateActive || v.BrokerEpoch != after[id].Epoch {
		t.Errorf("broker %d's own view: state %s epoch %d; want active at %d", id, v.State, v.BrokerEpoch, after[id].Epoch)
	}
}

// TestFailover_HungLeaderFencesNoBroker: the active controller hangs
// (SIGSTOP) instead of dying: its connections stay open, it answers nothing,
// as behind a network partition. The brokers must find the new active
// controller by themselves, for their heartbeats and for their metadata
// stream, and none may be fenced. When the old leader comes back it follows,
// and nothing changes for the brokers.
func TestFailover_HungLeaderFencesNoBroker(t *testing.T) {
	t.Parallel()
	c, leader, epoch := startBrokerCluster(t, 3, threeBrokers...)
	before := c.WaitForBrokers(t, allActive(threeBrokers...))
	epochs := make(map[int32]int64)
	for id, b := range before {
		epochs[id] = b.Epoch
	}
	mark := c.brokerLogMark()
	w := c.watchBrokersActive(t, epochs)

	c.Pause(leader)
	paused := time.Now()
	newLeader, newEpoch := c.WaitForActive(t, activeTimeout)
	active := time.Now()
	if newLeader == leader || newEpoch != epoch+1 {
		t.Fatalf("with node %d hung: active %d epoch %d; want another node, epoch %d", leader, newLeader, newEpoch, epoch+1)
	}
	t.Logf("node %d active in epoch %d, %s after node %d hung", newLeader, newEpoch, active.Sub(paused).Round(time.Millisecond), leader)
	reads, bad := c.watchUntil(t, w, active.Add(2*testSessionTimeout+testSessionTimeout/2), threeBrokers)
	if len(bad) > 0 {
		t.Errorf("with the old leader hung, a controller listed a broker not active at its epoch (brokers at epochs %v):\n  %s",
			epochs, strings.Join(bad, "\n  "))
	}
	if reads < 20 {
		t.Errorf("the watch read the broker list only %d times", reads)
	}
	c.WaitForInspect(t, threeBrokers, "following the new controller", func(v *keelpb.InspectResponse) bool {
		return v.State == stateActive && v.ControllerEpoch == newEpoch && v.ControllerId == newLeader
	})
	// Once the brokers have replayed a write made after the watch, their
	// logs hold every fence committed during it.
	resp := c.appendNoOp(t, 10*time.Second)
	c.WaitForBrokerOffsets(t, threeBrokers, resp.Index)
	c.checkNoFences(t, mark, "while the old leader hung")

	mark = c.brokerLogMark()
	c.Resume(leader)
	resp = c.appendNoOp(t, 10*time.Second)
	c.WaitForConverged(t, c.IDs(), resp.Index)
	if l, ep := c.WaitForActive(t, activeTimeout); l != newLeader || ep != newEpoch {
		t.Errorf("after node %d came back: active %d epoch %d, want %d, %d", leader, l, ep, newLeader, newEpoch)
	}
	views := c.WaitForBrokerOffsets(t, threeBrokers, resp.Index)
	for id, v := range views {
		if v.MetadataOffset != resp.Index || v.State != stateActive || v.BrokerEpoch != epochs[id] || v.ControllerEpoch != newEpoch {
			t.Errorf("broker %d after node %d came back: offset %d state %s epoch %d controller epoch %d; want %d, active, %d, %d",
				id, leader, v.MetadataOffset, v.State, v.BrokerEpoch, v.ControllerEpoch, resp.Index, epochs[id], newEpoch)
		}
	}
	c.WaitForBrokers(t, allActive(threeBrokers...))
	c.checkNoFences(t, mark, "after the old leader came back")
}

// TestBroker_FencedBrokerReplacedAtOnceAfterFailover: a broker killed with -9
// is fenced when its session expires. The active controller then fails over;
// the new one starts every registered broker's session afresh, the fenced
// one's included. Restarted, the broker's new incarnation registers at once:
// a fenced incarnation that nobody has heard from holds its id against no
// one (before, it was refused as a duplicate until that fresh session ran
// out).
func TestBroker_FencedBrokerReplacedAtOnceAfterFailover(t *testing.T) {
	t.Parallel()
	c, leader, _ := startBrokerCluster(t, 3, threeBrokers...)
	before := c.WaitForBrokers(t, allActive(threeBrokers...))
	const victim = 3
	c.KillBroker(victim)
	c.WaitForBrokers(t, map[int32]string{1: stateActive, 2: stateActive, victim: stateFenced})

	c.Kill(leader)
	next, _ := c.WaitForActive(t, activeTimeout)
	if next == leader {
		t.Fatalf("controller %d, killed, is still the active one", leader)
	}
	restarted := time.Now()
	c.RestartBroker(victim)
	after := c.WaitForReregistered(t, allActive(threeBrokers...), victim, before[victim].Epoch)
	t.Logf("broker %d registered again %s after its restart, the new active controller %d having started every session afresh (session timeout %s)",
		victim, time.Since(restarted).Round(time.Millisecond), next, testSessionTimeout)
	if out := c.broker(victim).Output(); strings.Contains(out, "another incarnation of this broker is still registered") {
		t.Errorf("restarted broker %d was refused as a duplicate of its fenced incarnation; its output ends:\n%s", victim, keelproc.LastLines(out, 10))
	}
	for _, id := range []int32{1, 2} {
		if after[id].Epoch != before[id].Epoch {
			t.Errorf("broker %d: epoch %d, want %d (no broker is fenced by a failover)", id, after[id].Epoch, before[id].Epoch)
		}
	}
	c.Restart(leader)
}
