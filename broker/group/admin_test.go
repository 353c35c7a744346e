package group

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/internal/poll"
)

func TestDescribeGroup(t *testing.T) {
	h := newHarness(t, nil)
	for _, tc := range []struct {
		version int16
		code    int16
	}{{5, 0}, {6, kerr.GroupIDNotFound.Code}} {
		d := h.c.DescribeGroup(h.ctx, tc.version, "nobody")
		if d.ErrorCode != tc.code || d.State != "Dead" {
			t.Fatalf("v%d unknown group: %+v", tc.version, d)
		}
	}
	id, _ := h.stable("g")
	d := h.c.DescribeGroup(h.ctx, 5, "g")
	if d.ErrorCode != 0 || d.State != "Stable" || d.ProtocolType != "consumer" || d.Protocol != "range" ||
		len(d.Members) != 1 || d.Members[0].MemberID != id || string(d.Members[0].ProtocolMetadata) != "m" || string(d.Members[0].MemberAssignment) != "a" {
		t.Fatalf("stable group: %+v", d)
	}
	// In a rebalance the members are listed without metadata, as Kafka's
	// summaryNoMetadata.
	b := h.memberID("g")
	h.joinAsync(joinReq("g", b))
	h.awaitJoining("g", 1)
	d = h.c.DescribeGroup(h.ctx, 5, "g")
	if d.State != "PreparingRebalance" || d.Protocol != "" || len(d.Members) != 2 || d.Members[0].ProtocolMetadata != nil {
		t.Fatalf("rebalancing group: %+v", d)
	}
	h.c.Resign(0) // answers the waiting join
}

func TestListGroups(t *testing.T) {
	h := newHarness(t, nil)
	h.stable("stable")
	h.c.OffsetCommit(h.ctx, commitReq("empty", "", -1, "t", map[int32]int64{0: 1}))
	for _, tc := range []struct {
		states, types []string
		want          string
	}{
		{nil, nil, "empty:Empty: stable:Stable:consumer"},
		{[]string{"stable"}, nil, "stable:Stable:consumer"},
		{[]string{"Empty", "Dead"}, nil, "empty:Empty:"},
		{nil, []string{"Classic"}, "empty:Empty: stable:Stable:consumer"},
		{nil, []string{"consumer"}, ""},
	} {
		gs, code := h.c.ListGroups(h.ctx, tc.states, tc.types)
		var got []string
		for _, g := range gs {
			if g.GroupType != "classic" {
				t.Fatalf("type %q", g.GroupType)
			}
			got = append(got, g.Group+":"+g.GroupState+":"+g.ProtocolType)
		}
		if code != 0 || strings.Join(got, " ") != tc.want {
			t.Errorf("states %v types %v: %q code %d, want %q", tc.states, tc.types, strings.Join(got, " "), code, tc.want)
		}
	}
}

// testDeleteGroups…: an Empty group and its offsets are deleted once the
// tombstones are committed; a group with members is refused; a failed
// write deletes nothing.
func TestDeleteGroup(t *testing.T) {
	h := newHarness(t, nil)
	h.stable("busy")
	if code := h.c.DeleteGroup(h.ctx, "busy"); code != kerr.NonEmptyGroup.Code {
		t.Fatalf("non-empty: %d", code)
	}
	if code := h.c.DeleteGroup(h.ctx, "nobody"); code != kerr.GroupIDNotFound.Code {
		t.Fatalf("unknown: %d", code)
	}
	h.c.OffsetCommit(h.ctx, commitReq("g", "", -1, "t", map[int32]int64{0: 1, 1: 2}))
	h.log.failAppends(kerr.NotEnoughReplicas)
	if code := h.c.DeleteGroup(h.ctx, "g"); code != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("failed write: %d", code)
	}
	if got, _ := h.fetched("g", "t", 0); got[0] != 1 {
		t.Fatalf("offsets after a failed delete: %v", got)
	}
	h.log.failAppends(nil)
	if code := h.c.DeleteGroup(h.ctx, "g"); code != 0 {
		t.Fatalf("delete: %d", code)
	}
	if got, _ := h.fetched("g", "t", 0); got[0] != -1 {
		t.Fatalf("offsets after the delete: %v", got)
	}
	if code := h.c.DeleteGroup(h.ctx, "g"); code != kerr.GroupIDNotFound.Code {
		t.Fatalf("second delete: %d", code)
	}
	// The tombstones: the group's and each offset's.
	var tombstones int
	for _, r := range h.log.records(0) {
		if r.Value == nil {
			tombstones++
		}
	}
	if tombstones != 3 {
		t.Fatalf("%d tombstones, want 3", tombstones)
	}
}

// KIP-496: a consumer group's offsets of a topic a member subscribes to
// are kept (GROUP_SUBSCRIBED_TO_TOPIC); others are deleted.
func TestOffsetDelete(t *testing.T) {
	h := newHarness(t, nil)
	meta := kmsg.ConsumerMemberMetadata{Topics: []string{"sub"}}
	id := h.memberID("g")
	j := h.joinAll("g", joinReq("g", id, protocol{"range", meta.AppendTo(nil)}))[0]
	h.c.SyncGroup(h.ctx, syncReq("g", id, j.Generation, nil))
	h.c.OffsetCommit(h.ctx, commitReq("g", id, j.Generation, "sub", map[int32]int64{0: 1}))
	h.c.OffsetCommit(h.ctx, commitReq("g", id, j.Generation, "old", map[int32]int64{0: 2}))
	r := kmsg.NewPtrOffsetDeleteRequest()
	r.Group = "g"
	r.Topics = []kmsg.OffsetDeleteRequestTopic{
		{Topic: "sub", Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}},
		{Topic: "old", Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}},
	}
	resp := h.c.OffsetDelete(h.ctx, r)
	if resp.ErrorCode != 0 || resp.Topics[0].Partitions[0].ErrorCode != kerr.GroupSubscribedToTopic.Code || resp.Topics[1].Partitions[0].ErrorCode != 0 {
		t.Fatalf("offset delete: %+v", resp)
	}
	if got, _ := h.fetched("g", "sub", 0); got[0] != 1 {
		t.Fatalf("subscribed topic's offset: %v", got)
	}
	if got, _ := h.fetched("g", "old", 0); got[0] != -1 {
		t.Fatalf("deleted offset: %v", got)
	}
	r.Group = "nobody"
	if code := h.c.OffsetDelete(h.ctx, r).ErrorCode; code != kerr.GroupIDNotFound.Code {
		t.Fatalf("unknown group: %d", code)
	}
}

// testOffsetExpiration…: an Empty group's offsets expire a retention
// after it became Empty, and the group with them; a member-less group's
// each a retention after its commit; a live group's are kept.
func TestOffsetExpiry(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.OffsetsRetention = time.Hour })
	id, gen := h.stable("live")
	h.c.OffsetCommit(h.ctx, commitReq("live", id, gen, "t", map[int32]int64{0: 1}))
	h.c.OffsetCommit(h.ctx, commitReq("simple", "", -1, "t", map[int32]int64{0: 1}))
	h.clock.Advance(50 * time.Minute)
	h.c.OffsetCommit(h.ctx, commitReq("simple", "", -1, "t", map[int32]int64{1: 1}))
	for range 2 {
		h.heartbeat("live", id, gen)
		h.clock.Advance(5 * time.Minute)
	}
	h.heartbeat("live", id, gen)
	h.clock.Advance(retentionCheckInterval - 10*time.Minute) // an hour and ten minutes on: a sweep
	pollFetched := func(group string, p int32, want int64) {
		t.Helper()
		poll.Until(t, 10*time.Second, group+"'s offset after the sweep", func() bool {
			got, _ := h.fetched(group, "t", p)
			return got[p] == want
		})
	}
	pollFetched("simple", 0, -1)
	pollFetched("simple", 1, 1)
	pollFetched("live", 0, 1)
	if h.group("simple") == nil {
		t.Fatal("a group with offsets left was removed")
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	h := newHarness(t, func(c *Config) { c.Metrics = reg })
	id, gen := h.stable("g")
	h.c.OffsetCommit(h.ctx, commitReq("g", id, gen, "t", map[int32]int64{0: 1, 1: 2}))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]float64)
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			got[name] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	for name, want := range map[string]float64{
		"keel_group_groups/Stable":             1,
		"keel_group_groups/Empty":              0,
		"keel_group_groups/PreparingRebalance": 0,
		"keel_group_offset_commits_total":      2,
		"keel_group_rebalances_total":          1,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}

// An emptied consumer group's offsets expire a retention after it became
// Empty, and the group goes with them.
func TestOffsetExpiry_EmptiedGroupRemoved(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.OffsetsRetention = 15 * time.Minute })
	id, gen := h.stable("g")
	if codes := commitCodes(h.c.OffsetCommit(h.ctx, commitReq("g", id, gen, "t", map[int32]int64{0: 1}))); codes[0] != 0 {
		t.Fatalf("commit: %v", codes)
	}
	r := kmsg.NewPtrLeaveGroupRequest()
	r.Version = 1
	r.Group, r.MemberID = "g", id
	h.c.LeaveGroup(h.ctx, r)
	h.clock.Advance(retentionCheckInterval) // 10 minutes Empty: kept
	if got, _ := h.fetched("g", "t", 0); got[0] != 1 || h.group("g") == nil {
		t.Fatalf("offset 10 minutes after the group emptied: %v", got)
	}
	h.clock.Advance(retentionCheckInterval) // 20 minutes Empty: gone
	poll.Until(t, 10*time.Second, "the group removed", func() bool { return h.group("g") == nil })
	if got, _ := h.fetched("g", "t", 0); got[0] != -1 {
		t.Fatalf("offset after the expiry: %v", got)
	}
}

// A group that a refused join or a failed commit made is not listed.
func TestListGroups_NoGroupFromRefusals(t *testing.T) {
	h := newHarness(t, nil)
	r := joinReq("refused", "")
	r.ProtocolType = ""
	h.c.JoinGroup(h.ctx, r)
	h.log.failAppends(kerr.NotEnoughReplicas)
	h.c.OffsetCommit(h.ctx, commitReq("failed", "", -1, "t", map[int32]int64{0: 1}))
	h.log.failAppends(nil)
	h.c.JoinGroup(h.ctx, joinReq("pending", "")) // MEMBER_ID_REQUIRED: kept, its member id is given out
	gs, _ := h.c.ListGroups(h.ctx, nil, nil)
	if len(gs) != 1 || gs[0].Group != "pending" {
		t.Fatalf("groups %+v, want only pending", gs)
	}
}

// A deleted topic's offsets are removed from every group, committed as
// tombstones: a topic made again under its name starts with none.
func TestTopicsDeleted(t *testing.T) {
	h := newHarness(t, nil)
	h.c.OffsetCommit(h.ctx, commitReq("a", "", -1, "gone", map[int32]int64{0: 1, 1: 2}))
	h.c.OffsetCommit(h.ctx, commitReq("a", "", -1, "kept", map[int32]int64{0: 3}))
	h.c.OffsetCommit(h.ctx, commitReq("b", "", -1, "gone", map[int32]int64{0: 4}))
	h.c.TopicsDeleted([]string{"gone"})
	poll.Until(t, 10*time.Second, "the deleted topic's offsets removed", func() bool {
		a, _ := h.fetched("a", "gone", 0, 1)
		b, _ := h.fetched("b", "gone", 0)
		return a[0] == -1 && a[1] == -1 && b[0] == -1
	})
	if got, _ := h.fetched("a", "kept", 0); got[0] != 3 {
		t.Fatalf("another topic's offset: %v", got)
	}
	h2 := newHarnessOn(t, h.log, nil)
	if got, _ := h2.fetched("a", "gone", 0, 1); got[0] != -1 || got[1] != -1 {
		t.Fatalf("reloaded: %v", got)
	}
}
