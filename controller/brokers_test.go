package controller_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

const testSession = 400 * time.Millisecond

// Two brokers' incarnation ids.
const (
	incA = "00000000-0000-0000-0000-00000000000a"
	incB = "00000000-0000-0000-0000-00000000000b"
)

func registerReq(id int32, inc string) *keelpb.RegisterBrokerRequest {
	return &keelpb.RegisterBrokerRequest{BrokerId: id, IncarnationId: inc, Address: "127.0.0.1:9201", MinMetadataVersion: fsm.MinMetadataVersion, MaxMetadataVersion: fsm.MaxMetadataVersion}
}

func brokerFenced(nd *member, id int32) bool {
	b, ok := nd.FSM().Image().Broker(id)
	return ok && b.Fenced
}

// registerActive registers broker id and heartbeats it into the active state.
func registerActive(t *testing.T, leader *member, id int32, inc string) int64 {
	t.Helper()
	ctx := context.Background()
	resp, err := leader.Controller().RegisterBroker(ctx, registerReq(id, inc))
	if err != nil {
		t.Fatalf("RegisterBroker(%d): %v", id, err)
	}
	hb, err := leader.Controller().BrokerHeartbeat(ctx, &keelpb.BrokerHeartbeatRequest{BrokerId: id, BrokerEpoch: resp.BrokerEpoch, MetadataOffset: uint64(resp.BrokerEpoch)})
	if err != nil || hb.IsFenced || !hb.IsCaughtUp {
		t.Fatalf("heartbeat after catching up = %+v, %v; want unfenced", hb, err)
	}
	return resp.BrokerEpoch
}

func TestBrokers_RegisterUnfenceAndFenceOnExpiry(t *testing.T) {
	clock := newClock()
	c := newCluster(t, 3, withSessionTimeout(testSession), withClock(clock.Now))
	leader := c.WaitForActive(5 * time.Second)
	ctx := context.Background()

	resp, err := leader.Controller().RegisterBroker(ctx, registerReq(1, incA))
	if err != nil {
		t.Fatal(err)
	}
	if !brokerFenced(leader, 1) {
		t.Fatal("a new broker is not fenced")
	}
	// Not yet caught up with its own registration: stays fenced.
	hb, err := leader.Controller().BrokerHeartbeat(ctx, &keelpb.BrokerHeartbeatRequest{BrokerId: 1, BrokerEpoch: resp.BrokerEpoch, MetadataOffset: uint64(resp.BrokerEpoch) - 1})
	if err != nil || !hb.IsFenced || hb.IsCaughtUp {
		t.Fatalf("heartbeat behind = %+v, %v", hb, err)
	}
	registerActiveAgain := func() {
		hb, err := leader.Controller().BrokerHeartbeat(ctx, &keelpb.BrokerHeartbeatRequest{BrokerId: 1, BrokerEpoch: resp.BrokerEpoch, MetadataOffset: uint64(resp.BrokerEpoch)})
		if err != nil || hb.IsFenced || hb.ControllerId != leader.ID() {
			t.Fatalf("heartbeat caught up = %+v, %v", hb, err)
		}
	}
	registerActiveAgain()
	c.WaitForApplied(leader.FSM().Image().Offset)
	for _, nd := range c.Nodes() {
		if brokerFenced(nd, 1) {
			t.Fatalf("node %d still sees broker 1 fenced", nd.ID())
		}
	}

	// Silence past the session timeout: the active controller fences it.
	clock.Advance(testSession + time.Millisecond)
	poll.Until(t, 5*time.Second, "broker 1 fenced after its session expired", func() bool { return brokerFenced(leader, 1) })
	// A heartbeat brings it back.
	registerActiveAgain()
}

// KAFKA-18138: a broker that dies while the controller fails over must still
// be fenced, one session after the new controller took over, and not before.
func TestFailover_BrokerDyingDuringFailoverIsFencedOneSessionLater(t *testing.T) {
	clock := newClock()
	c := newCluster(t, 3, withSessionTimeout(testSession), withClock(clock.Now))
	leader := c.WaitForActive(5 * time.Second)
	registerActive(t, leader, 1, incA)
	registerActive(t, leader, 2, incB)

	// Broker 1 and the leader die together; the clock has moved on most of a
	// session since broker 1's last heartbeat.
	clock.Advance(testSession * 3 / 4)
	c.Kill(leader.ID())
	next := c.WaitForActive(5 * time.Second)
	if got := next.Controller().ExpiredSessions(clock.Now()); len(got) != 0 {
		t.Fatalf("right after failover, expired = %v: the new controller must start fresh sessions", got)
	}
	// Broker 2 keeps heartbeating; broker 1 is silent.
	clock.Advance(testSession / 2)
	if brokerFenced(next, 1) {
		t.Fatal("broker 1 fenced before a full session passed under the new controller")
	}
	b2, _ := next.FSM().Image().Broker(2)
	if _, err := next.Controller().BrokerHeartbeat(context.Background(), &keelpb.BrokerHeartbeatRequest{BrokerId: 2, BrokerEpoch: b2.Epoch, MetadataOffset: next.FSM().Image().Offset}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(testSession / 2)
	// Should a loaded machine cost the new controller its leadership, the
	// next one starts fresh sessions too: give it a session more (broker 2
	// heartbeating), as a real clock would.
	poll.Until(t, 10*time.Second, "broker 1 fenced one session after the failover", func() bool {
		if brokerFenced(next, 1) {
			return true
		}
		if now := c.Active(); now != nil && now != next {
			next = now
			heartbeat2 := func() {
				b2, _ := next.FSM().Image().Broker(2)
				_, _ = next.Controller().BrokerHeartbeat(context.Background(), &keelpb.BrokerHeartbeatRequest{BrokerId: 2, BrokerEpoch: b2.Epoch, MetadataOffset: next.FSM().Image().Offset})
			}
			heartbeat2()
			clock.Advance(testSession / 2)
			heartbeat2()
			clock.Advance(testSession/2 + time.Millisecond)
		}
		return false
	})
	if brokerFenced(next, 2) {
		t.Fatal("broker 2, which kept heartbeating, was fenced")
	}
}

func TestBrokers_DuplicateRegistrationAndStaleEpoch(t *testing.T) {
	clock := newClock()
	c := newCluster(t, 3, withSessionTimeout(testSession), withClock(clock.Now))
	leader := c.WaitForActive(5 * time.Second)
	ctx := context.Background()
	first := registerActive(t, leader, 1, incA)

	if _, err := leader.Controller().RegisterBroker(ctx, registerReq(1, incB)); !errors.Is(err, controller.ErrDuplicateRegistration) {
		t.Fatalf("second process with the same id while the first lives: err = %v", err)
	}
	// Same incarnation retrying: accepted, keeping its epoch and state.
	retry, err := leader.Controller().RegisterBroker(ctx, registerReq(1, incA))
	if err != nil || retry.BrokerEpoch != first || brokerFenced(leader, 1) {
		t.Fatalf("retry = %+v, %v (fenced %v); want epoch %d, still active", retry, err, brokerFenced(leader, 1), first)
	}
	// Once the session has expired, another incarnation may take the id.
	clock.Advance(testSession + time.Millisecond)
	bounced, err := leader.Controller().RegisterBroker(ctx, registerReq(1, incB))
	if err != nil || bounced.BrokerEpoch <= retry.BrokerEpoch {
		t.Fatalf("bounced broker = %+v, %v", bounced, err)
	}
	// The old incarnation's heartbeat is refused, so it would re-register.
	_, err = leader.Controller().BrokerHeartbeat(ctx, &keelpb.BrokerHeartbeatRequest{BrokerId: 1, BrokerEpoch: first})
	if !errors.Is(err, controller.ErrStaleBrokerEpoch) {
		t.Fatalf("stale heartbeat: err = %v", err)
	}
	// The bounced incarnation is fenced until it catches up: an operator
	// may unregister it.
	if _, err := leader.Controller().UnregisterBroker(ctx, &keelpb.UnregisterBrokerRequest{BrokerId: 1, BrokerEpoch: bounced.BrokerEpoch}); err != nil {
		t.Fatal(err)
	}
	if _, ok := leader.FSM().Image().Broker(1); ok {
		t.Fatal("broker 1 still registered after unregistering")
	}
}

// collectStream runs StreamMetadata in the background, returning its pushes
// and, once it ends, its error.
func collectStream(ctx context.Context, nd *member, req *keelpb.StreamMetadataRequest) (<-chan *keelpb.MetadataPush, <-chan error) {
	pushes := make(chan *keelpb.MetadataPush, 1024)
	done := make(chan error, 1)
	go func() {
		done <- nd.Controller().StreamMetadata(ctx, req, controller.PushFunc(func(p *keelpb.MetadataPush) error {
			pushes <- p
			return nil
		}))
	}()
	return pushes, done
}

func nextPush(t *testing.T, pushes <-chan *keelpb.MetadataPush) *keelpb.MetadataPush {
	t.Helper()
	select {
	case p := <-pushes:
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("no push within 5s")
		return nil
	}
}

func TestStream_NewBrokerGetsSnapshotThenTail(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	epoch := registerActive(t, leader, 1, incA)
	ctx, cancel := context.WithCancel(context.Background())
	pushes, done := collectStream(ctx, leader, &keelpb.StreamMetadataRequest{BrokerId: 1, BrokerEpoch: epoch})

	var snap bytes.Buffer
	for {
		p := nextPush(t, pushes)
		_, ctrlEpoch := leader.Controller().Active()
		if p.ControllerEpoch != ctrlEpoch || p.ControllerId != leader.ID() {
			t.Fatalf("push stamped %d/%d, want %d/%d", p.ControllerEpoch, p.ControllerId, ctrlEpoch, leader.ID())
		}
		chunk := p.GetSnapshot()
		if chunk == nil {
			t.Fatalf("first pushes must be a snapshot, got %v", p)
		}
		snap.Write(chunk.Data)
		if chunk.Last {
			break
		}
	}
	img, err := fsm.ReadSnapshot(&snap)
	if err != nil {
		t.Fatalf("pushed snapshot: %v", err)
	}
	if b, ok := img.Broker(1); !ok || b.Fenced {
		t.Fatalf("snapshot image broker 1 = %+v", b)
	}

	index, err := leader.Controller().Propose(context.Background(), noOp())
	if err != nil {
		t.Fatal(err)
	}
	for img.Offset < index {
		p := nextPush(t, pushes)
		for _, e := range p.GetEntries().GetEntries() {
			if e.PrevOffset != img.Offset {
				t.Fatalf("entry %d follows %d, broker is at %d", e.Offset, e.PrevOffset, img.Offset)
			}
			batch, err := fsm.DecodeBatch(e.Data)
			if err != nil {
				t.Fatal(err)
			}
			if img, err = fsm.Apply(img, e.Offset, e.Term, batch); err != nil {
				t.Fatalf("replaying entry %d: %v", e.Offset, err)
			}
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("stream ended with %v", err)
	}
}

func TestStream_ResumesFromOffsetAndEndsOnLeadershipLoss(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	epoch := registerActive(t, leader, 1, incA)
	from := leader.FSM().Image().Offset
	index, err := leader.Controller().Propose(context.Background(), noOp())
	if err != nil {
		t.Fatal(err)
	}
	pushes, done := collectStream(context.Background(), leader, &keelpb.StreamMetadataRequest{BrokerId: 1, BrokerEpoch: epoch, FromOffset: from})
	p := nextPush(t, pushes)
	entries := p.GetEntries().GetEntries()
	if len(entries) != 1 || entries[0].PrevOffset != from || entries[0].Offset != index {
		t.Fatalf("resumed stream sent %v, want just entry %d after %d", p, index, from)
	}
	c.Kill(leader.ID())
	select {
	case err := <-done:
		if !errors.Is(err, controller.ErrNotLeader) && !errors.Is(err, controller.ErrNotReady) {
			t.Fatalf("stream ended with %v, want not-leader", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream outlived its controller's leadership")
	}
}

func TestStream_RefusesStaleEpochAndOtherCluster(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	epoch := registerActive(t, leader, 1, incA)
	send := controller.PushFunc(func(*keelpb.MetadataPush) error { return nil })
	ctx := context.Background()
	if err := leader.Controller().StreamMetadata(ctx, &keelpb.StreamMetadataRequest{BrokerId: 1, BrokerEpoch: epoch - 1}, send); !errors.Is(err, controller.ErrStaleBrokerEpoch) {
		t.Fatalf("stale epoch: %v", err)
	}
	if err := leader.Controller().StreamMetadata(ctx, &keelpb.StreamMetadataRequest{BrokerId: 1, BrokerEpoch: epoch, ClusterId: "other"}, send); !errors.Is(err, controller.ErrInconsistentClusterID) {
		t.Fatalf("other cluster: %v", err)
	}
}

// TestFailover_ProducerIdBlocksNeverOverlap: blocks handed out by one active
// controller and then by the next (after a kill, with the log replayed from
// a snapshot on a restarted node too) never share an id.
func TestFailover_ProducerIdBlocksNeverOverlap(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	ctx := context.Background()
	epoch := registerActive(t, leader, 1, incA)

	seen := map[int64]bool{}
	take := func(nd *member) {
		t.Helper()
		b, err := nd.Controller().AllocateProducerIds(ctx, 1, epoch)
		if err != nil {
			t.Fatal(err)
		}
		if b.Len != fsm.ProducerIDBlockSize {
			t.Fatalf("block %+v: want %d ids", b, fsm.ProducerIDBlockSize)
		}
		if seen[b.Start] {
			t.Fatalf("block starting at %d handed out twice", b.Start)
		}
		for s := range seen {
			if b.Start < s+int64(b.Len) && s < b.Start+int64(b.Len) {
				t.Fatalf("block %+v overlaps the block at %d", b, s)
			}
		}
		seen[b.Start] = true
	}
	take(leader)
	take(leader)
	if _, err := leader.Controller().AllocateProducerIds(ctx, 1, epoch+100); !errors.Is(err, controller.ErrStaleBrokerEpoch) {
		t.Fatalf("a stale broker epoch: err = %v", err)
	}
	old := leader.ID()
	c.Kill(old)
	next := c.WaitForActive(5 * time.Second)
	take(next)
	c.Restart(old)
	c.WaitForApplied(next.FSM().Image().Offset)
	if got := c.Node(old).FSM().Image().NextProducerID; got != 3*fsm.ProducerIDBlockSize {
		t.Fatalf("the restarted node's next producer id is %d, want %d", got, 3*fsm.ProducerIDBlockSize)
	}
	take(next)
}
