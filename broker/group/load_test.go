package group

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/internal/poll"
)

// A coordinator loaded from another's log answers the same offsets and
// group: a Stable group with its members, generation and assignments,
// whose members go on heartbeating (testLoadGroupAndOffsets…).
func TestLoad_SameGroupsAndOffsets(t *testing.T) {
	h := newHarness(t, nil)
	id, gen := h.stable("g")
	h.c.OffsetCommit(h.ctx, commitReq("g", id, gen, "t", map[int32]int64{0: 5, 1: 6}))
	h.c.OffsetCommit(h.ctx, commitReq("g", id, gen, "t", map[int32]int64{0: 8}))
	h.c.OffsetCommit(h.ctx, commitReq("simple", "", -1, "u", map[int32]int64{3: 30}))
	h.c.OffsetCommit(h.ctx, commitReq("gone", "", -1, "u", map[int32]int64{3: 30}))
	if code := h.c.DeleteGroup(h.ctx, "gone"); code != 0 {
		t.Fatalf("delete: %d", code)
	}
	before := h.c.DescribeGroup(h.ctx, 5, "g")

	h2 := newHarnessOn(t, h.log, nil)
	if got, _ := h2.fetched("g", "t", 0, 1); got[0] != 8 || got[1] != 6 {
		t.Fatalf("reloaded offsets %v", got)
	}
	if got, _ := h2.fetched("simple", "u", 3); got[3] != 30 {
		t.Fatalf("reloaded simple offsets %v", got)
	}
	if got, _ := h2.fetched("gone", "u", 3); got[3] != -1 {
		t.Fatalf("a deleted group's offsets came back: %v", got)
	}
	after := h2.c.DescribeGroup(h2.ctx, 5, "g")
	if after.State != "Stable" || after.Protocol != before.Protocol || after.ProtocolType != before.ProtocolType ||
		len(after.Members) != 1 || after.Members[0].MemberID != id || string(after.Members[0].MemberAssignment) != "a" ||
		after.Members[0].ClientID != "client" || after.Members[0].ClientHost != "/127.0.0.1" {
		t.Fatalf("reloaded group %+v, was %+v", after, before)
	}
	if code := h2.heartbeat("g", id, gen); code != 0 {
		t.Fatalf("heartbeat after the reload: %d", code)
	}
	sync := h2.c.SyncGroup(h2.ctx, syncReq("g", id, gen, nil))
	if sync.ErrorCode != 0 || string(sync.MemberAssignment) != "a" {
		t.Fatalf("sync after the reload: %d %q", sync.ErrorCode, sync.MemberAssignment)
	}
	// The loaded member's session starts afresh, and ends.
	h2.clock.Advance(testSession + time.Second)
	if s := h2.state("g"); s != stateEmpty {
		t.Fatalf("state after the loaded member's session: %v", s)
	}
}

// While a partition loads, its groups get COORDINATOR_LOAD_IN_PROGRESS;
// a failed load is retried; an Elect of a new epoch loads again.
func TestLoad_InProgressRetryAndNewEpoch(t *testing.T) {
	h := newHarness(t, nil)
	h.c.OffsetCommit(h.ctx, commitReq("g", "", -1, "t", map[int32]int64{0: 5}))

	gate := make(chan struct{})
	h.log.mu.Lock()
	h.log.gate = gate
	h.log.loadErrs = []error{kerr.RequestTimedOut}
	loads := h.log.loads
	h.log.mu.Unlock()
	h.c.Elect(0, 1, 1) // the same epoch: nothing to do
	h.c.Elect(0, 2, 1)
	if _, code := h.fetched("g", "t", 0); code != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("fetch while loading: code %d", code)
	}
	if code := h.c.JoinGroup(h.ctx, joinReq("g", "")).ErrorCode; code != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("join while loading: code %d", code)
	}
	if _, code := h.c.ListGroups(h.ctx, nil, nil); code != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("list while loading: code %d", code)
	}
	// As Kafka: a heartbeat is answered blindly, a sync with
	// REBALANCE_IN_PROGRESS (the rebalance's state is lost).
	if code := h.heartbeat("g", "m", 1); code != 0 {
		t.Fatalf("heartbeat while loading: code %d", code)
	}
	if code := h.c.SyncGroup(h.ctx, syncReq("g", "m", 1, nil)).ErrorCode; code != kerr.RebalanceInProgress.Code {
		t.Fatalf("sync while loading: code %d", code)
	}
	close(gate)
	h.awaitLoaded(0)
	h.log.mu.Lock()
	n := h.log.loads - loads
	h.log.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d loads, want 2 (one failed, retried)", n)
	}
	if got, code := h.fetched("g", "t", 0); code != 0 || got[0] != 5 {
		t.Fatalf("fetch after the load: %v code %d", got, code)
	}
}

// A load that finds this broker not the leader leaves the partition
// unloaded until its Resign.
func TestLoad_NotLeaderLeavesUnloaded(t *testing.T) {
	h := newHarness(t, nil)
	h.log.mu.Lock()
	h.log.loadErrs = []error{kerr.NotLeaderForPartition}
	h.log.mu.Unlock()
	h.c.Elect(0, 2, 1)
	poll.Until(t, 10*time.Second, "the load gave up", func() bool {
		h.log.mu.Lock()
		defer h.log.mu.Unlock()
		return len(h.log.loadErrs) == 0
	})
	if _, code := h.fetched("g", "t", 0); code != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("fetch: code %d", code)
	}
	h.c.Resign(0)
	if _, code := h.fetched("g", "t", 0); code != kerr.NotCoordinator.Code {
		t.Fatalf("fetch after Resign: code %d", code)
	}
}

// The records are Kafka's: what the coordinator writes decodes with
// kmsg at the versions Kafka 3.x writes, tombstones included.
func TestRecords_KafkaFormat(t *testing.T) {
	k := offsetKey("g", "t", 3)
	var ok kmsg.OffsetCommitKey
	if err := ok.ReadFrom(k); err != nil || ok.Version != 1 || ok.Group != "g" || ok.Topic != "t" || ok.Partition != 3 {
		t.Fatalf("offset key %+v %v", ok, err)
	}
	var ov kmsg.OffsetCommitValue
	if err := ov.ReadFrom(offsetValue(offset{offset: 9, leaderEpoch: 2, metadata: "x", commitMillis: 77})); err != nil ||
		ov.Version != 3 || ov.Offset != 9 || ov.LeaderEpoch != 2 || ov.Metadata != "x" || ov.CommitTimestamp != 77 {
		t.Fatalf("offset value %+v %v", ov, err)
	}
	var gk kmsg.GroupMetadataKey
	if err := gk.ReadFrom(groupKey("g")); err != nil || gk.Version != 2 || gk.Group != "g" {
		t.Fatalf("group key %+v %v", gk, err)
	}
	for _, tc := range []struct {
		name string
		r    Record
		ok   bool
		err  bool
	}{
		{"offset tombstone", Record{Key: k}, true, false},
		{"group tombstone", Record{Key: groupKey("g")}, true, false},
		{"a newer record type", Record{Key: []byte{0, 5, 1, 2}}, false, false},
		{"short key", Record{Key: []byte{0}}, false, true},
		{"bad value", Record{Key: k, Value: []byte{0}}, false, true},
	} {
		_, gotOK, err := decodeRecord(tc.r)
		if gotOK != tc.ok || (err != nil) != tc.err {
			t.Errorf("%s: ok %v err %v", tc.name, gotOK, err)
		}
	}
}

func TestNew_Config(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		err  bool
	}{
		{"no log", Config{}, true},
		{"min above max", Config{Log: newFakeLog(), MinSessionTimeout: time.Minute, MaxSessionTimeout: time.Second}, true},
		{"negative size", Config{Log: newFakeLog(), MaxGroupSize: -1}, true},
		{"defaults", Config{Log: newFakeLog()}, false},
	} {
		c, err := New(tc.cfg)
		if (err != nil) != tc.err {
			t.Errorf("%s: err %v", tc.name, err)
		}
		if c != nil {
			if tc.name == "defaults" && (c.cfg.InitialRebalanceDelay != 3*time.Second || c.cfg.MinSessionTimeout != 6*time.Second ||
				c.cfg.MaxSessionTimeout != 30*time.Minute || c.cfg.OffsetMetadataMaxBytes != 4096) {
				t.Errorf("defaults: %+v", c.cfg)
			}
			c.Close()
		}
	}
	c, err := New(Config{Log: newFakeLog(), InitialRebalanceDelay: -1})
	if err != nil || c.cfg.InitialRebalanceDelay != 0 {
		t.Fatalf("a negative delay is none: %v %v", c.cfg.InitialRebalanceDelay, err)
	}
	c.Close()
}
