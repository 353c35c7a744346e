package group

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/keel-dev/keel/internal/poll"
)

// TestMain fails the package if any test leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeLog is a Log in memory: every partition's records, appends that fail
// while appendErr is set, loads that fail with loadErrs first, and a gate
// that holds loads while it is open.
type fakeLog struct {
	mu        sync.Mutex
	parts     map[int32][]Record
	appendErr error
	loadErrs  []error
	gate      chan struct{} // when not nil, Load waits for it to close
	loads     int
	// appendGate, when not nil, holds appends until it closes or their
	// context ends.
	appendGate chan struct{}
}

func newFakeLog() *fakeLog { return &fakeLog{parts: make(map[int32][]Record)} }

func (l *fakeLog) Append(ctx context.Context, p int32, records []Record) error {
	l.mu.Lock()
	if l.appendErr != nil {
		defer l.mu.Unlock()
		return l.appendErr
	}
	gate := l.appendGate
	l.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	l.mu.Lock()
	l.parts[p] = append(l.parts[p], records...)
	l.mu.Unlock()
	// The commit's wait: other appends may be answered first, as the
	// data plane's acks=all waits are.
	time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
	return nil
}

func (l *fakeLog) Load(ctx context.Context, p int32, fn func(int64, Record) error) error {
	l.mu.Lock()
	l.loads++
	gate := l.gate
	var err error
	if len(l.loadErrs) > 0 {
		err, l.loadErrs = l.loadErrs[0], l.loadErrs[1:]
	}
	records := slices.Clone(l.parts[p])
	l.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err != nil {
		return err
	}
	for i, r := range records {
		if err := fn(int64(i), r); err != nil {
			return err
		}
	}
	return nil
}

func (l *fakeLog) records(p int32) []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.parts[p])
}

func (l *fakeLog) failAppends(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.appendErr = err
}

// fakeClock is the coordinator's clock in tests: its timers fire only when
// Advance moves it past them, in the order they are due.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c     *fakeClock
	at    time.Time
	f     func()
	fired bool
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.fired
	t.fired = true
	return was
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) stopper {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the clock on by d, firing the timers due one by one (a
// timer a fired one starts fires too if it is due).
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		c.timers = slices.DeleteFunc(c.timers, func(t *fakeTimer) bool { return t.fired })
		var next *fakeTimer
		for _, t := range c.timers {
			if !t.at.After(end) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		if next == nil {
			c.now = end
			c.mu.Unlock()
			return
		}
		next.fired = true
		if next.at.After(c.now) {
			c.now = next.at
		}
		c.mu.Unlock()
		next.f()
	}
}

// harness is a Coordinator over a fakeLog and a fakeClock, leading
// partition 0 of one, so that every group is its.
type harness struct {
	t     *testing.T
	c     *Coordinator
	log   *fakeLog
	clock *fakeClock
	ctx   context.Context
}

const (
	testSession   = 10 * time.Second
	testRebalance = 30 * time.Second
)

func newHarness(t *testing.T, mod func(*Config)) *harness {
	t.Helper()
	return newHarnessOn(t, newFakeLog(), mod)
}

func newHarnessOn(t *testing.T, log *fakeLog, mod func(*Config)) *harness {
	t.Helper()
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	cfg := Config{Log: log, InitialRebalanceDelay: -1, now: clock.Now, afterFunc: clock.AfterFunc}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	h := &harness{t: t, c: c, log: log, clock: clock, ctx: WithClient(context.Background(), Client{ID: "client", Host: "/127.0.0.1"})}
	h.c.Elect(0, 1, 1)
	h.awaitLoaded(0)
	return h
}

func (h *harness) awaitLoaded(p int32) {
	h.t.Helper()
	poll.Until(h.t, 10*time.Second, "partition loaded", func() bool {
		h.c.mu.Lock()
		defer h.c.mu.Unlock()
		return h.c.parts[p] != nil && h.c.parts[p].loaded
	})
}

// group is the group's state, for assertions: nil when not known.
func (h *harness) group(id string) *group {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	for _, part := range h.c.parts {
		if g := part.groups[id]; g != nil {
			return g
		}
	}
	return nil
}

func (h *harness) state(id string) state {
	g := h.group(id)
	if g == nil {
		return stateDead
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state
}

// awaitJoining waits until n of the group's members have a JoinGroup
// waiting.
func (h *harness) awaitJoining(id string, n int) {
	h.t.Helper()
	h.awaitJoins(id, n, false)
}

// awaitJoiningOrDone waits as awaitJoining, or until the join phase is
// over (a join that completes it is answered at once).
func (h *harness) awaitJoiningOrDone(id string, n int) {
	h.t.Helper()
	h.awaitJoins(id, n, true)
}

func (h *harness) awaitJoins(id string, n int, orDone bool) {
	h.t.Helper()
	poll.Until(h.t, 10*time.Second, "joins waiting", func() bool {
		g := h.group(id)
		if g == nil {
			return false
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if orDone && g.state == stateCompletingRebalance {
			return true
		}
		k := 0
		for _, m := range g.members {
			if m.join != nil {
				k++
			}
		}
		return k == n
	})
}

// awaitSyncing waits until n of the group's members have a SyncGroup
// waiting.
func (h *harness) awaitSyncing(id string, n int) {
	h.t.Helper()
	poll.Until(h.t, 10*time.Second, "syncs waiting", func() bool {
		g := h.group(id)
		if g == nil {
			return false
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		k := 0
		for _, m := range g.members {
			if m.sync != nil {
				k++
			}
		}
		return k == n
	})
}

type protocol struct {
	name string
	meta []byte
}

func joinReq(group, member string, protocols ...protocol) *kmsg.JoinGroupRequest {
	r := kmsg.NewPtrJoinGroupRequest()
	r.Version = 9
	r.Group = group
	r.MemberID = member
	r.SessionTimeoutMillis = int32(testSession.Milliseconds())
	r.RebalanceTimeoutMillis = int32(testRebalance.Milliseconds())
	r.ProtocolType = "consumer"
	if len(protocols) == 0 {
		protocols = []protocol{{"range", []byte("m")}}
	}
	for _, p := range protocols {
		r.Protocols = append(r.Protocols, kmsg.JoinGroupRequestProtocol{Name: p.name, Metadata: p.meta})
	}
	return r
}

// async runs f and returns where its answer will come.
func async[T any](f func() T) <-chan T {
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	return ch
}

// recv is ch's answer, which must come.
func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		var zero T
		t.Fatalf("no %T answer", zero)
		return zero
	}
}

// joinAsync sends r and returns where its answer will come.
func (h *harness) joinAsync(r *kmsg.JoinGroupRequest) <-chan *kmsg.JoinGroupResponse {
	return async(func() *kmsg.JoinGroupResponse { return h.c.JoinGroup(h.ctx, r) })
}

func (h *harness) recvJoin(ch <-chan *kmsg.JoinGroupResponse) *kmsg.JoinGroupResponse {
	h.t.Helper()
	return recv(h.t, ch)
}

// memberID gets a new member id for group (KIP-394's first join).
func (h *harness) memberID(group string) string {
	h.t.Helper()
	resp := h.c.JoinGroup(h.ctx, joinReq(group, ""))
	if resp.ErrorCode != kerr.MemberIDRequired.Code || resp.MemberID == "" {
		h.t.Fatalf("first join: code %d member %q, want MEMBER_ID_REQUIRED and an id", resp.ErrorCode, resp.MemberID)
	}
	return resp.MemberID
}

// joinAll joins the requests together (their members known or new) and
// completes the join phase: the answers, by request.
func (h *harness) joinAll(group string, rs ...*kmsg.JoinGroupRequest) []*kmsg.JoinGroupResponse {
	h.t.Helper()
	var chs []<-chan *kmsg.JoinGroupResponse
	for i, r := range rs {
		chs = append(chs, h.joinAsync(r))
		h.awaitJoiningOrDone(group, i+1)
	}
	h.clock.Advance(0) // an initial delay of none
	var out []*kmsg.JoinGroupResponse
	for _, ch := range chs {
		out = append(out, h.recvJoin(ch))
	}
	return out
}

func syncReq(group, member string, generation int32, assignments map[string]string) *kmsg.SyncGroupRequest {
	r := kmsg.NewPtrSyncGroupRequest()
	r.Version = 5
	r.Group = group
	r.MemberID = member
	r.Generation = generation
	for id, a := range assignments {
		r.GroupAssignment = append(r.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: []byte(a)})
	}
	slices.SortFunc(r.GroupAssignment, func(a, b kmsg.SyncGroupRequestGroupAssignment) int {
		if a.MemberID < b.MemberID {
			return -1
		}
		return 1
	})
	return r
}

func (h *harness) syncAsync(r *kmsg.SyncGroupRequest) <-chan *kmsg.SyncGroupResponse {
	return async(func() *kmsg.SyncGroupResponse { return h.c.SyncGroup(h.ctx, r) })
}

func (h *harness) recvSync(ch <-chan *kmsg.SyncGroupResponse) *kmsg.SyncGroupResponse {
	h.t.Helper()
	return recv(h.t, ch)
}

func (h *harness) heartbeat(group, member string, generation int32) int16 {
	r := kmsg.NewPtrHeartbeatRequest()
	r.Version = 4
	r.Group, r.MemberID, r.Generation = group, member, generation
	return h.c.Heartbeat(h.ctx, r).ErrorCode
}

// stable makes a group of one member, Stable in generation 1: its id.
func (h *harness) stable(group string) (string, int32) {
	h.t.Helper()
	id := h.memberID(group)
	join := h.joinAll(group, joinReq(group, id))[0]
	if join.ErrorCode != 0 {
		h.t.Fatalf("join: code %d", join.ErrorCode)
	}
	sync := h.c.SyncGroup(h.ctx, syncReq(group, id, join.Generation, map[string]string{id: "a"}))
	if sync.ErrorCode != 0 {
		h.t.Fatalf("sync: code %d", sync.ErrorCode)
	}
	return id, join.Generation
}

func commitReq(group, member string, generation int32, topic string, offsets map[int32]int64) *kmsg.OffsetCommitRequest {
	r := kmsg.NewPtrOffsetCommitRequest()
	r.Version = 9
	r.Group, r.MemberID, r.Generation = group, member, generation
	t := kmsg.OffsetCommitRequestTopic{Topic: topic}
	for p, o := range offsets {
		pp := kmsg.NewOffsetCommitRequestTopicPartition()
		pp.Partition, pp.Offset, pp.LeaderEpoch = p, o, 7
		pp.Metadata = kmsg.StringPtr("m")
		t.Partitions = append(t.Partitions, pp)
	}
	slices.SortFunc(t.Partitions, func(a, b kmsg.OffsetCommitRequestTopicPartition) int { return int(a.Partition - b.Partition) })
	r.Topics = []kmsg.OffsetCommitRequestTopic{t}
	return r
}

// commitCodes are a commit's codes by partition.
func commitCodes(resp *kmsg.OffsetCommitResponse) map[int32]int16 {
	out := make(map[int32]int16)
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out[p.Partition] = p.ErrorCode
		}
	}
	return out
}

// fetched are a group's committed offsets of topic by partition (all of
// its offsets when topic is ""), -1 for none.
func (h *harness) fetched(group, topic string, partitions ...int32) (map[int32]int64, int16) {
	var topics []kmsg.OffsetFetchRequestGroupTopic
	if topic != "" {
		topics = []kmsg.OffsetFetchRequestGroupTopic{{Topic: topic, Partitions: partitions}}
	}
	resp := h.c.OffsetFetch(h.ctx, 9, group, topics, false)
	out := make(map[int32]int64)
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out[p.Partition] = p.Offset
		}
	}
	return out, resp.ErrorCode
}

// secondJoining makes a Stable group of one member (a, in gen) and has a
// second member (b) join it, waiting on chB.
func (h *harness) secondJoining(group string) (a string, gen int32, b string, chB <-chan *kmsg.JoinGroupResponse) {
	h.t.Helper()
	a, gen = h.stable(group)
	b = h.memberID(group)
	chB = h.joinAsync(joinReq(group, b))
	h.awaitJoining(group, 1)
	return a, gen, b, chB
}
