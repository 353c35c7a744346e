package broker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/clock"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// fakeClock is a clock that moves only when told to.
type fakeClock = clock.Fake

func newFakeClock() *fakeClock { return clock.NewFake() }

// fakeController is the controllers as a data plane sees them through its
// Link: AlterPartition checked and committed as the controller does it, to
// an image that reaches the brokers only when the test publishes it, so a
// test decides whether the stream or the answer comes first.
type fakeController struct {
	t  *testing.T
	mu sync.Mutex
	// img is the committed image.
	img *fsm.Image
	// requests are the ISR changes received, by sender.
	requests []sentChange
	// answer, when set, answers a request instead of the checks and commit
	// (it may commit itself, with commitLocked).
	answer func(c *fakeController, from int32, ch ISRChange) (*keelpb.PartitionDescription, error)
	// published is, per broker, the image it was last given.
	published map[*ReplicaManager]*fsm.Image
}

type sentChange struct {
	from int32
	ISRChange
}

func (s sentChange) String() string {
	return fmt.Sprintf("broker %d: isr=%v epochs=%d/%d", s.from, s.ISR, s.LeaderEpoch, s.PartitionEpoch)
}

func newFakeController(t *testing.T, img *fsm.Image) *fakeController {
	return &fakeController{t: t, img: img, published: map[*ReplicaManager]*fsm.Image{}}
}

func (c *fakeController) link(id int32) Link { return ctlLink{c, id} }

type ctlLink struct {
	c  *fakeController
	id int32
}

func (l ctlLink) BrokerID() int32 { return l.id }
func (l ctlLink) BrokerEpoch() int64 {
	if b, ok := l.c.image().Broker(l.id); ok {
		return b.Epoch
	}
	return 0
}

func (l ctlLink) ReportReplicaLogs(context.Context, []ReplicaLog) error { return nil }

func (l ctlLink) AlterPartition(_ context.Context, ch ISRChange) (*keelpb.PartitionDescription, error) {
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests = append(c.requests, sentChange{l.id, ch})
	if c.answer != nil {
		return c.answer(c, l.id, ch)
	}
	return c.decideLocked(l.id, ch)
}

// decideLocked checks and commits an ISR change; the caller holds mu.
func (c *fakeController) decideLocked(from int32, ch ISRChange) (*keelpb.PartitionDescription, error) {
	p, ok := c.img.Partition(ch.TopicID, ch.Partition)
	switch {
	case !ok:
		return nil, status.Error(codes.NotFound, "no such partition")
	case p.LeaderEpoch != ch.LeaderEpoch:
		return nil, reasonErr(codes.FailedPrecondition, rpc.ReasonFencedLeaderEpoch, "stale leader epoch")
	case p.Leader != from:
		return nil, reasonErr(codes.InvalidArgument, rpc.ReasonInvalidRequest, "not the leader")
	case p.PartitionEpoch != ch.PartitionEpoch:
		return nil, reasonErr(codes.FailedPrecondition, rpc.ReasonInvalidUpdateVersion, "stale partition epoch")
	}
	for _, id := range ch.ISR {
		if b, ok := c.img.Broker(id); !ok || !b.Eligible() {
			return nil, reasonErr(codes.FailedPrecondition, rpc.ReasonIneligibleReplica, fmt.Sprintf("broker %d", id))
		}
	}
	rec := changeRec(ch.TopicID, ch.Partition, nil, ch.ISR, nil)
	if p.Recovering() { // every ISR change says RECOVERED, as the controller reads it
		recovered := keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERED
		rec.GetPartitionChange().LeaderRecoveryState = &recovered
	}
	c.commitLocked(rec)
	p, _ = c.img.Partition(ch.TopicID, ch.Partition)
	return &keelpb.PartitionDescription{Partition: p.Partition, Leader: p.Leader, LeaderEpoch: p.LeaderEpoch,
		PartitionEpoch: p.PartitionEpoch, Replicas: p.Replicas, Isr: p.ISR}, nil
}

// commit writes a controller decision of its own (a fence, a leader move).
func (c *fakeController) commit(records ...*keelpb.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.commitLocked(records...)
}

func (c *fakeController) commitLocked(records ...*keelpb.Record) {
	c.t.Helper()
	c.img = applyBatch(c.t, c.img, records...)
}

func (c *fakeController) image() *fsm.Image {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.img
}

func (c *fakeController) sent() []sentChange {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.requests)
}

// publish gives each manager the committed image, as its agent would: the
// image first, then the role changes. Calls are serialised, as an agent's are.
func (c *fakeController) publish(rms ...*ReplicaManager) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rm := range rms {
		before := c.published[rm]
		if before == nil {
			before = fsm.Empty()
		}
		rm.MetadataChanged(before, c.img)
		deliver(rm, DiffReplicas(rm.self, before, c.img))
		c.published[rm] = c.img
	}
}

var topicT = fsm.TopicID{0x7}

// partitionT is topic "t", partition 0, replicas 1,2,3, led by 1.
func partitionT(isr ...int32) []*keelpb.Record {
	return []*keelpb.Record{topicRec("t", topicT), partitionRec(topicT, 0, []int32{1, 2, 3}, isr, 1)}
}

// isrEnv is broker 1 leading t-0 with its ISR management driven by hand:
// no sender or lag-check goroutines, so every step is synchronous.
type isrEnv struct {
	t   *testing.T
	clk *fakeClock
	ctl *fakeController
	rm  *ReplicaManager
}

func newISREnv(t *testing.T, isr ...int32) *isrEnv {
	t.Helper()
	clk := newFakeClock()
	ctl := newFakeController(t, applyBatch(t, clusterImage(t), partitionT(isr...)...))
	rm, err := NewReplicaManager(ReplicaManagerConfig{Logger: testLogger(t), clock: clk,
		dial: func(string) (fetchClient, error) { return nil, status.Error(codes.Unavailable, "no network here") }})
	if err != nil {
		t.Fatal(err)
	}
	if err := rm.attach(ctl.link(1)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rm.Close() })
	ctl.publish(rm)
	return &isrEnv{t: t, clk: clk, ctl: ctl, rm: rm}
}

// fetch is broker from fetching t-0 from offset 0 at the leader epoch
// broker 1 is at.
func (e *isrEnv) fetch(from int32) {
	e.t.Helper()
	if _, err := e.fetchAt(from, e.rm.Replicas()[0].LeaderEpoch, 0); err != nil {
		e.t.Fatalf("fetch from %d: %v", from, err)
	}
}

func (e *isrEnv) fetchAt(from, epoch int32, offset int64) (*keelpb.FetchResponse, error) {
	return e.rm.ReplicaFetch(context.Background(), &keelpb.FetchRequest{ReplicaId: from, TopicId: topicT.String(),
		Partition: 0, LeaderEpoch: epoch, FetchOffset: offset})
}

// send sends the queued ISR change and requires it to be want.
func (e *isrEnv) send(want string) {
	e.t.Helper()
	n := len(e.ctl.sent())
	if !e.rm.sendOne(context.Background()) {
		e.t.Fatalf("no ISR change queued, want %s", want)
	}
	sent := e.ctl.sent()
	if len(sent) != n+1 {
		e.t.Fatalf("nothing sent, want %s", want)
	}
	if got := sent[n].String(); got != want {
		e.t.Fatalf("sent %s\nwant %s", got, want)
	}
}

// noSend requires that no ISR change is due.
func (e *isrEnv) noSend() {
	e.t.Helper()
	n := len(e.ctl.sent())
	for e.rm.sendOne(context.Background()) {
	}
	if sent := e.ctl.sent(); len(sent) != n {
		e.t.Fatalf("sent %v, want nothing", sent[n:])
	}
}

// isr is the ISR as broker 1's data plane reports it.
func (e *isrEnv) isr() []int32 {
	for _, r := range e.rm.Replicas() {
		if r.TopicID == topicT && r.Partition == 0 {
			return r.ISR
		}
	}
	return nil
}

func TestReplicaManager_ISR(t *testing.T) {
	refuse := func(reason string, code codes.Code, records ...*keelpb.Record) func(c *fakeController, _ int32, _ ISRChange) (*keelpb.PartitionDescription, error) {
		return func(c *fakeController, _ int32, _ ISRChange) (*keelpb.PartitionDescription, error) {
			c.answer = nil // once
			if len(records) > 0 {
				c.commitLocked(records...)
			}
			return nil, reasonErr(code, reason, "refused by the test")
		}
	}
	tests := []struct {
		name string
		isr  []int32
		run  func(t *testing.T, e *isrEnv)
	}{
		{
			name: "a follower that fetches joins the ISR, once the last change shows in the image",
			isr:  []int32{1},
			run: func(t *testing.T, e *isrEnv) {
				e.fetch(2)
				e.send("broker 1: isr=[1 2] epochs=0/0")
				// Until the image shows partition epoch 1, nothing more.
				e.fetch(2)
				e.fetch(3)
				e.noSend()
				e.ctl.publish(e.rm)
				if got := e.isr(); !slices.Equal(got, []int32{1, 2}) {
					t.Fatalf("ISR = %v after the change", got)
				}
				e.send("broker 1: isr=[1 2 3] epochs=0/1")
			},
		},
		{
			name: "the answer may come after the image",
			isr:  []int32{1},
			run: func(t *testing.T, e *isrEnv) {
				e.ctl.answer = func(c *fakeController, from int32, ch ISRChange) (*keelpb.PartitionDescription, error) {
					c.answer = nil
					desc, err := c.decideLocked(from, ch)
					// Called holding mu, which publish takes.
					c.mu.Unlock()
					defer c.mu.Lock()
					c.publish(e.rm)
					return desc, err
				}
				e.fetch(2)
				e.send("broker 1: isr=[1 2] epochs=0/0")
				e.fetch(3)
				e.send("broker 1: isr=[1 2 3] epochs=0/1")
			},
		},
		{
			name: "only eligible brokers join: not fenced, not shutting down",
			isr:  []int32{1},
			run: func(t *testing.T, e *isrEnv) {
				e.ctl.commit(fenceRec(2, 3), shuttingDownRec(3, 4))
				e.ctl.publish(e.rm)
				e.fetch(2)
				e.fetch(3)
				e.noSend()
			},
		},
		{
			name: "a follower silent for longer than lag max leaves the ISR",
			isr:  []int32{1, 2, 3},
			run: func(t *testing.T, e *isrEnv) {
				e.clk.Advance(20 * time.Second)
				e.fetch(2)
				e.clk.Advance(10 * time.Second) // broker 3 silent for 30s: not yet
				e.rm.checkLag()
				e.noSend()
				e.clk.Advance(time.Second)
				e.rm.checkLag()
				e.send("broker 1: isr=[1 2] epochs=0/0")
			},
		},
		{
			name: "a fetch beyond the log end does not catch up",
			isr:  []int32{1},
			run: func(t *testing.T, e *isrEnv) {
				if _, err := e.fetchAt(2, 0, 5); status.Code(err) != codes.OutOfRange || rpc.ReasonOf(err) != ReasonOffsetOutOfRange {
					t.Fatalf("fetch past the end: %v", err)
				}
				e.noSend()
			},
		},
		{
			name: "stale partition epoch: wait for the newer state, then decide again on it",
			isr:  []int32{1},
			run: func(t *testing.T, e *isrEnv) {
				// The controller changed the partition (broker 3 joined by a
				// path this broker has not seen yet) before this request.
				e.ctl.answer = refuse(rpc.ReasonInvalidUpdateVersion, codes.FailedPrecondition,
					changeRec(topicT, 0, nil, []int32{1, 3}, nil))
				e.fetch(2)
				e.send("broker 1: isr=[1 2] epochs=0/0")
				e.fetch(2)
				e.rm.checkLag()
				e.noSend() // never the same epochs again
				e.ctl.publish(e.rm)
				e.send("broker 1: isr=[1 3 2] epochs=0/1")
			},
		},
		{
			name: "stale leader epoch: wait for the new leadership, which ends the change",
			isr:  []int32{1, 2},
			run: func(t *testing.T, e *isrEnv) {
				e.ctl.answer = refuse(rpc.ReasonFencedLeaderEpoch, codes.FailedPrecondition,
					changeRec(topicT, 0, leaderID(2), []int32{2, 1}, nil))
				e.fetch(2)
				e.fetch(3)
				e.send("broker 1: isr=[1 2 3] epochs=0/0")
				e.fetch(3)
				e.noSend()
				e.ctl.publish(e.rm)
				e.noSend()
				if r := e.rm.Replicas()[0]; r.Role != RoleFollower || r.Leader != 2 || r.LeaderEpoch != 1 {
					t.Fatalf("replica after the move = %+v", r)
				}
				if _, err := e.fetchAt(3, 1, 0); rpc.ReasonOf(err) != ReasonNotLeaderOrFollower {
					t.Fatalf("fetch from a former leader: %v", err)
				}
			},
		},
		{
			name: "an ineligible replica: wait for newer metadata, and do not ask again while it is ineligible",
			isr:  []int32{1},
			run: func(t *testing.T, e *isrEnv) {
				// The controller fenced broker 2 just before.
				e.ctl.answer = refuse(rpc.ReasonIneligibleReplica, codes.FailedPrecondition, fenceRec(2, 3))
				e.fetch(2)
				e.send("broker 1: isr=[1 2] epochs=0/0")
				e.fetch(2)
				e.noSend()
				e.ctl.publish(e.rm) // shows broker 2 fenced
				e.fetch(2)
				e.noSend()
				e.ctl.commit(unfenceRec(2, 3))
				e.ctl.publish(e.rm)
				e.fetch(2)
				e.send("broker 1: isr=[1 2] epochs=0/0")
			},
		},
		{
			name: "no answer: decide again after a pause",
			isr:  []int32{1},
			run: func(t *testing.T, e *isrEnv) {
				e.ctl.answer = func(c *fakeController, _ int32, _ ISRChange) (*keelpb.PartitionDescription, error) {
					c.answer = nil
					return nil, status.Error(codes.Unavailable, "no active controller")
				}
				e.fetch(2)
				e.send("broker 1: isr=[1 2] epochs=0/0")
				e.fetch(2)
				e.noSend()
				e.clk.Advance(AlterPartitionRetryBackoff)
				e.fetch(2)
				e.send("broker 1: isr=[1 2] epochs=0/0")
			},
		},
		{
			name: "a leader in controlled shutdown changes no ISR",
			isr:  []int32{1, 2, 3},
			run: func(t *testing.T, e *isrEnv) {
				e.ctl.commit(shuttingDownRec(1, 2))
				e.ctl.publish(e.rm)
				e.clk.Advance(time.Minute)
				e.rm.checkLag()
				e.noSend()
			},
		},
		{
			name: "a new leader gives the ISR lag max to find it",
			isr:  []int32{1, 2, 3},
			run: func(t *testing.T, e *isrEnv) {
				e.clk.Advance(time.Hour) // silent as follower of nobody
				e.ctl.commit(changeRec(topicT, 0, leaderID(2), []int32{2, 3, 1}, nil))
				e.ctl.publish(e.rm)
				e.ctl.commit(changeRec(topicT, 0, leaderID(1), nil, nil))
				e.ctl.publish(e.rm) // leader again, at epoch 2
				e.clk.Advance(29 * time.Second)
				e.fetch(2)
				e.rm.checkLag()
				e.noSend()
				e.clk.Advance(2 * time.Second)
				e.rm.checkLag()
				e.send("broker 1: isr=[2 1] epochs=2/2")
			},
		},
		{
			// KIP-704: the uncleanly elected leader confirms RECOVERED with
			// its ISR unchanged as soon as it leads, then never again.
			name: "a leader elected uncleanly confirms its recovery at once",
			isr:  []int32{1, 2},
			run: func(t *testing.T, e *isrEnv) {
				recovering := keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERING
				rec := changeRec(topicT, 0, leaderID(fsm.NoLeader), []int32{2}, nil)
				e.ctl.commit(rec)
				e.ctl.publish(e.rm)
				rec = changeRec(topicT, 0, leaderID(1), []int32{1}, nil)
				rec.GetPartitionChange().LeaderRecoveryState = &recovering
				e.ctl.commit(rec)
				e.ctl.publish(e.rm) // leader at epoch 2, recovering
				e.send("broker 1: isr=[1] epochs=2/2")
				if p, _ := e.ctl.image().Partition(topicT, 0); p.Recovering() || !slices.Equal(p.ISR, []int32{1}) {
					t.Fatalf("after the confirmation: %+v", p)
				}
				e.ctl.publish(e.rm)
				e.rm.checkLag()
				e.noSend()
			},
		},
		{
			name: "a recovered partition asks nothing while its ISR is right",
			isr:  []int32{1},
			run: func(t *testing.T, e *isrEnv) {
				e.rm.checkLag()
				e.noSend()
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.run(t, newISREnv(t, tt.isr...))
		})
	}
}

func TestReplicaManager_FetchRefusals(t *testing.T) {
	tests := []struct {
		name       string
		req        *keelpb.FetchRequest
		wantCode   codes.Code
		wantReason string
	}{
		{"a stale leader epoch", &keelpb.FetchRequest{ReplicaId: 2, TopicId: topicT.String(), LeaderEpoch: 0}, codes.FailedPrecondition, rpc.ReasonFencedLeaderEpoch},
		{"a leader epoch not applied yet", &keelpb.FetchRequest{ReplicaId: 2, TopicId: topicT.String(), LeaderEpoch: 2}, codes.FailedPrecondition, ReasonUnknownLeaderEpoch},
		{"not a replica", &keelpb.FetchRequest{ReplicaId: 4, TopicId: topicT.String(), LeaderEpoch: 1}, codes.FailedPrecondition, ReasonNotLeaderOrFollower},
		{"from the leader itself", &keelpb.FetchRequest{ReplicaId: 1, TopicId: topicT.String(), LeaderEpoch: 1}, codes.FailedPrecondition, ReasonNotLeaderOrFollower},
		{"an unknown partition", &keelpb.FetchRequest{ReplicaId: 2, TopicId: topicT.String(), Partition: 1, LeaderEpoch: 1}, codes.NotFound, rpc.ReasonUnknownTopicOrPartition},
		{"an unknown topic", &keelpb.FetchRequest{ReplicaId: 2, TopicId: topicA.String(), LeaderEpoch: 1}, codes.NotFound, rpc.ReasonUnknownTopicOrPartition},
		{"a bad topic id", &keelpb.FetchRequest{ReplicaId: 2, TopicId: "t", LeaderEpoch: 1}, codes.InvalidArgument, ""},
		{"a negative offset", &keelpb.FetchRequest{ReplicaId: 2, TopicId: topicT.String(), LeaderEpoch: 1, FetchOffset: -1}, codes.InvalidArgument, ""},
		{"past the log end", &keelpb.FetchRequest{ReplicaId: 2, TopicId: topicT.String(), LeaderEpoch: 1, FetchOffset: 1}, codes.OutOfRange, ReasonOffsetOutOfRange},
	}
	e := newISREnv(t, 1, 2, 3)
	// Leader epoch 1: broker 3 left the replicas.
	e.ctl.commit(changeRec(topicT, 0, nil, []int32{1, 2}, []int32{1, 2}))
	e.ctl.publish(e.rm)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.rm.ReplicaFetch(context.Background(), tt.req)
			if status.Code(err) != tt.wantCode || rpc.ReasonOf(err) != tt.wantReason {
				t.Fatalf("Fetch = %v, want %v %q", err, tt.wantCode, tt.wantReason)
			}
		})
	}
	e.noSend()
	if _, err := e.fetchAt(2, 1, 0); err != nil {
		t.Fatalf("a good fetch: %v", err)
	}

	// A follower serves no fetches.
	f := newISREnv(t, 1, 2, 3)
	f.ctl.commit(changeRec(topicT, 0, leaderID(2), nil, nil))
	f.ctl.publish(f.rm)
	if _, err := f.fetchAt(3, 1, 0); status.Code(err) != codes.FailedPrecondition || rpc.ReasonOf(err) != ReasonNotLeaderOrFollower {
		t.Fatalf("fetch from a follower: %v", err)
	}
}

// fetchNet routes fetches between in-process replica managers by the
// addresses the image registers (127.0.0.1:9200+id), and counts them.
type fetchNet struct {
	mu      sync.Mutex
	brokers map[string]*ReplicaManager
	fetches map[string]int // "from->to@epoch"
	down    map[string]bool
}

func newFetchNet() *fetchNet {
	return &fetchNet{brokers: map[string]*ReplicaManager{}, fetches: map[string]int{}, down: map[string]bool{}}
}

func (n *fetchNet) add(id int32, rm *ReplicaManager) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.brokers[fmt.Sprintf("127.0.0.1:%d", 9200+id)] = rm
}

func (n *fetchNet) dial(addr string) (fetchClient, error) { return netConn{n, addr}, nil }

func (n *fetchNet) count(from, to, epoch int32) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.fetches[fmt.Sprintf("%d->%d@%d", from, to, epoch)]
}

type netConn struct {
	n    *fetchNet
	addr string
}

func (c netConn) Fetch(ctx context.Context, req *keelpb.FetchRequest) (*keelpb.FetchResponse, error) {
	c.n.mu.Lock()
	rm, down := c.n.brokers[c.addr], c.n.down[c.addr]
	c.n.mu.Unlock()
	if rm == nil || down {
		return nil, status.Error(codes.Unavailable, "connection refused")
	}
	resp, err := rm.ReplicaFetch(ctx, req)
	if err == nil {
		c.n.mu.Lock()
		c.n.fetches[fmt.Sprintf("%d->%d@%d", req.ReplicaId, rm.self, req.LeaderEpoch)]++
		c.n.mu.Unlock()
	}
	return resp, err
}

func (netConn) Close() error { return nil }

// TestReplicaManager_FollowersAndLeaders runs brokers 1 and 2 with their
// fetchers, senders and lag checks on a fake clock: the follower's fetches
// bring it into the ISR, it follows leadership moves, and a follower that
// stops fetching is dropped after lag max.
func TestReplicaManager_FollowersAndLeaders(t *testing.T) {
	clk := newFakeClock()
	net := newFetchNet()
	ctl := newFakeController(t, applyBatch(t, clusterImage(t),
		topicRec("t", topicT), partitionRec(topicT, 0, []int32{1, 2}, []int32{1}, 1)))
	rms := map[int32]*ReplicaManager{}
	for _, id := range []int32{1, 2} {
		rm, err := NewReplicaManager(ReplicaManagerConfig{Logger: testLogger(t).With("broker", id), clock: clk, dial: net.dial})
		if err != nil {
			t.Fatal(err)
		}
		if err := rm.Start(ctl.link(id)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rm.Close() })
		net.add(id, rm)
		rms[id] = rm
	}
	publish := func() { ctl.publish(rms[1], rms[2]) }
	// step advances the fake clock by a fetch interval until cond holds.
	step := func(what string, cond func() bool) {
		t.Helper()
		poll.Until(t, waitTimeout, what, func() bool {
			if cond() {
				return true
			}
			clk.Advance(DefaultReplicaFetchInterval)
			return false
		})
	}
	partitionIs := func(leader int32, isr ...int32) func() bool {
		return func() bool {
			p, _ := ctl.image().Partition(topicT, 0)
			return p.Leader == leader && slices.Equal(p.ISR, isr)
		}
	}
	role := func(id int32) ReplicaStatus {
		rs := rms[id].Replicas()
		if len(rs) != 1 {
			t.Fatalf("broker %d holds %v", id, rs)
		}
		return rs[0]
	}

	publish()
	step("broker 2's fetches to bring it into the ISR", partitionIs(1, 1, 2))
	publish()
	if r := role(2); r.Role != RoleFollower || r.Leader != 1 || !slices.Equal(r.ISR, []int32{1, 2}) {
		t.Fatalf("broker 2's replica = %+v", r)
	}
	if n := len(ctl.sent()); n != 1 {
		t.Fatalf("%d ISR changes sent, want 1: %v", n, ctl.sent())
	}

	// Leadership moves to broker 2: broker 1 now fetches from it, at the new
	// epoch, and broker 2 stops fetching.
	ctl.commit(changeRec(topicT, 0, leaderID(2), []int32{2, 1}, nil))
	publish()
	step("broker 1 to fetch from broker 2", func() bool { return net.count(1, 2, 1) > 0 })
	if r := role(1); r.Role != RoleFollower || r.Leader != 2 || r.LeaderEpoch != 1 {
		t.Fatalf("broker 1's replica = %+v", r)
	}
	if r := role(2); r.Role != RoleLeader || r.LeaderEpoch != 1 {
		t.Fatalf("broker 2's replica = %+v", r)
	}
	rms[2].mu.Lock()
	fetchers := len(rms[2].fetchers)
	rms[2].mu.Unlock()
	if fetchers != 0 {
		t.Fatalf("the new leader still runs %d fetchers", fetchers)
	}

	// Broker 1 goes quiet: after lag max, broker 2 drops it.
	net.mu.Lock()
	net.down["127.0.0.1:9202"] = true
	net.mu.Unlock()
	start := clk.Now()
	step("broker 2 to drop the silent broker 1", partitionIs(2, 2))
	if waited := clk.Now().Sub(start); waited < DefaultReplicaLagTimeMax {
		t.Fatalf("dropped after %v, before lag max", waited)
	}
	publish()

	// The topic is deleted: both stop, and the fetchers end.
	ctl.commit(removeTopicRec(topicT))
	publish()
	for id, rm := range rms {
		if rs := rm.Replicas(); len(rs) != 0 {
			t.Fatalf("broker %d still holds %v", id, rs)
		}
		rm.mu.Lock()
		n := len(rm.fetchers)
		rm.mu.Unlock()
		if n != 0 {
			t.Fatalf("broker %d runs %d fetchers after the topic's deletion", id, n)
		}
	}
}
