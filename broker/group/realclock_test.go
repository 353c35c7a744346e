package group

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/internal/poll"
)

// On the wall clock's timers: a member joins with no initial delay, and
// once it stops heartbeating its session ends and the group empties. The
// session is short; the wait for it is long.
func TestRealClock_JoinAndSessionExpiry(t *testing.T) {
	log := newFakeLog()
	c, err := New(Config{Log: log, InitialRebalanceDelay: -1, MinSessionTimeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Elect(0, 1, 1)
	ctx := context.Background()
	var id string
	poll.Until(t, 10*time.Second, "the partition loaded", func() bool {
		r := joinReq("g", "")
		resp := c.JoinGroup(ctx, r)
		id = resp.MemberID
		return resp.ErrorCode == kerr.MemberIDRequired.Code
	})
	r := joinReq("g", id)
	r.SessionTimeoutMillis = 200
	join := c.JoinGroup(ctx, r)
	if join.ErrorCode != 0 || join.LeaderID != id {
		t.Fatalf("join: %+v", join)
	}
	if s := c.SyncGroup(ctx, syncReq("g", id, join.Generation, map[string]string{id: "a"})); s.ErrorCode != 0 {
		t.Fatalf("sync: %d", s.ErrorCode)
	}
	poll.Until(t, 10*time.Second, "the session ended", func() bool {
		return c.DescribeGroup(ctx, 5, "g").State == "Empty"
	})
}

// roundTrip encodes r and decodes it at its version.
func roundTrip[R kmsg.Response](t *testing.T, r R) R {
	t.Helper()
	back := kmsg.ResponseForKey(r.Key()).(R)
	back.SetVersion(r.GetVersion())
	if err := back.ReadFrom(r.AppendTo(nil)); err != nil {
		t.Fatalf("%T v%d does not decode: %v", r, r.GetVersion(), err)
	}
	return back
}

// Every answer the coordinator gives encodes at every version of its
// request, errors (nil strings and all) included.
func TestResponses_EncodeAtEveryVersion(t *testing.T) {
	h := newHarness(t, nil)
	id, gen := h.stable("g")
	h.c.OffsetCommit(h.ctx, commitReq("g", id, gen, "t", map[int32]int64{0: 1}))
	for v := int16(0); v <= 9; v++ {
		for _, member := range []string{id, "unknown"} {
			r := joinReq("g", member)
			r.Version = v
			resp := h.recvJoin(h.joinAsync(r))
			back := roundTrip(t, resp)
			if back.ErrorCode != resp.ErrorCode || back.MemberID != member || back.Generation != resp.Generation {
				t.Fatalf("v%d join of %q: %+v, sent %+v", v, member, back, resp)
			}
			if member == id {
				h.c.SyncGroup(h.ctx, syncReq("g", id, resp.Generation, nil)) // back to Stable
			}
		}
	}
	for v := int16(0); v <= 5; v++ {
		s := syncReq("g", "unknown", 1, nil)
		s.Version = v
		if back := roundTrip(t, h.c.SyncGroup(h.ctx, s)); back.ErrorCode != kerr.UnknownMemberID.Code {
			t.Fatalf("v%d sync: %d", v, back.ErrorCode)
		}
	}
	for v := int16(0); v <= 6; v++ {
		d := kmsg.NewPtrDescribeGroupsResponse()
		d.Version = v
		d.Groups = []kmsg.DescribeGroupsResponseGroup{h.c.DescribeGroup(h.ctx, v, "g"), h.c.DescribeGroup(h.ctx, v, "nobody")}
		if back := roundTrip(t, d); back.Groups[0].State != "Stable" || back.Groups[1].State != "Dead" {
			t.Fatalf("v%d describe: %+v", v, back.Groups)
		}
	}
	for v := int16(8); v <= 9; v++ {
		f := kmsg.NewPtrOffsetFetchResponse()
		f.Version = v
		f.Groups = []kmsg.OffsetFetchResponseGroup{h.c.OffsetFetch(h.ctx, v, "g", nil, false)}
		if back := roundTrip(t, f); back.Groups[0].Topics[0].Partitions[0].Offset != 1 {
			t.Fatalf("v%d fetch: %+v", v, back.Groups)
		}
	}
}
