package controller

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// The broker lifecycle cases of Kafka's ClusterControlManagerTest,
// BrokerHeartbeatManagerTest and ReplicationControlManagerTest, as table
// tests in Keel's terms.

// TestClusterControlManager_ReRegistrationAndBrokerEpoch is Kafka's
// testReRegistrationAndBrokerEpoch, in every state a broker can be
// registered in: the same incarnation again (a retried registration) keeps
// its epoch and state and writes nothing; a new incarnation gets a new
// epoch, fenced, once the old one no longer holds the id.
func TestClusterControlManager_ReRegistrationAndBrokerEpoch(t *testing.T) {
	states := []struct {
		name  string
		setup func(c *lifecycleCtx)
		state string
	}{
		{"fenced (registered, not caught up)", func(*lifecycleCtx) {}, fsm.BrokerFenced},
		{"active", func(c *lifecycleCtx) { c.unfence(1) }, fsm.BrokerActive},
		{"shutting down", func(c *lifecycleCtx) {
			c.unfence(1)
			c.createTopic("led", []int32{1, 2})
			c.heartbeat(1, false, true)
		}, fsm.BrokerShuttingDown},
	}
	for _, st := range states {
		for _, newIncarnation := range []bool{false, true} {
			name := st.name + "/same incarnation"
			if newIncarnation {
				name = st.name + "/new incarnation"
			}
			t.Run(name, func(t *testing.T) {
				c := newLifecycleCtx(t)
				c.register(1, 2)
				c.unfence(2)
				st.setup(c)
				before := c.broker(1)
				if before.State() != st.state {
					t.Fatalf("broker 1 is %s, want %s", before.State(), st.state)
				}
				inc := incarnation(1, 1)
				if newIncarnation {
					inc = incarnation(1, 2)
				}
				recs, err := registrationRecords(c.img, registration(1, inc), noHold)
				if err != nil {
					t.Fatal(err)
				}
				c.replay(recs)
				after := c.broker(1)
				switch {
				case !newIncarnation && (len(recs) != 0 || *after != *before):
					t.Fatalf("a retried registration wrote %d records; broker 1 %+v, want it unchanged: %+v", len(recs), after, before)
				case newIncarnation && (after.Epoch != int64(c.img.Offset) || !after.Fenced || after.ShuttingDown || after.IncarnationID != inc):
					t.Fatalf("a new incarnation: %+v; want epoch %d, fenced, incarnation %s", after, c.img.Offset, inc)
				}
			})
		}
	}
}

// A retried registration must say what the registration in force says: a
// broker whose address, rack or versions change is a new incarnation.
func TestClusterControlManager_RetryWithOtherDetails(t *testing.T) {
	c := newLifecycleCtx(t)
	c.register(1)
	for _, tt := range []struct {
		field string
		mut   func(r *keelpb.RegisterBrokerRequest)
	}{
		{"address", func(r *keelpb.RegisterBrokerRequest) { r.Address = "127.0.0.1:1" }},
		{"rack", func(r *keelpb.RegisterBrokerRequest) { r.Rack = "r9" }},
	} {
		req := registration(1, incarnation(1, 1))
		tt.mut(req)
		_, err := registrationRecords(c.img, req, noHold)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("%s changed: err = %v, want a refusal naming %s", tt.field, err, tt.field)
		}
	}
}

// TestClusterControlManager_DuplicateRegistration: a new incarnation is
// refused while the registered one holds the id (sessionTracker.holding):
// an active broker with a live session, or a fenced one heard from that
// wants to run.
func TestClusterControlManager_DuplicateRegistration(t *testing.T) {
	c := newLifecycleCtx(t)
	c.register(1)
	hold := func(*fsm.Broker) time.Duration { return time.Second }
	_, err := registrationRecords(c.img, registration(1, incarnation(1, 2)), hold)
	var dup *DuplicateRegistrationError
	if !errors.As(err, &dup) || dup.Epoch != c.epoch(1) || dup.Remaining != time.Second {
		t.Fatalf("err = %v, want a duplicate registration of epoch %d with 1s left", err, c.epoch(1))
	}
	// The same incarnation is never a duplicate of itself.
	if recs, err := registrationRecords(c.img, registration(1, incarnation(1, 1)), hold); err != nil || len(recs) != 0 {
		t.Fatalf("retry: %v, %v", recs, err)
	}
}

// TestClusterControlManager_Unregister is Kafka's testUnregister, with
// Keel's rule that only a fenced broker may be unregistered.
func TestClusterControlManager_Unregister(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(c *lifecycleCtx)
		epoch   func(c *lifecycleCtx) int64
		wantErr error
	}{
		{name: "fenced, at its epoch", setup: func(c *lifecycleCtx) { c.unfence(1); c.fence(1) }, epoch: func(c *lifecycleCtx) int64 { return c.epoch(1) }},
		{name: "fenced, any epoch (0)", setup: func(c *lifecycleCtx) {}, epoch: func(*lifecycleCtx) int64 { return 0 }},
		{name: "fenced at the end of its controlled shutdown", setup: func(c *lifecycleCtx) {
			c.unfence(1)
			c.heartbeat(1, false, true) // it leads nothing: fenced at once
		}, epoch: func(*lifecycleCtx) int64 { return 0 }},
		{name: "active", setup: func(c *lifecycleCtx) { c.unfence(1) }, epoch: func(*lifecycleCtx) int64 { return 0 }, wantErr: ErrBrokerNotFenced},
		{name: "shutting down", setup: func(c *lifecycleCtx) {
			c.unfence(1)
			c.createTopic("led", []int32{1, 2})
			c.heartbeat(1, false, true)
		}, epoch: func(*lifecycleCtx) int64 { return 0 }, wantErr: ErrBrokerNotFenced},
		{name: "a stale epoch", setup: func(*lifecycleCtx) {}, epoch: func(c *lifecycleCtx) int64 { return c.epoch(1) - 1 }, wantErr: ErrStaleBrokerEpoch},
		{name: "an unknown broker", setup: func(c *lifecycleCtx) {
			recs, err := unregisterRecords(c.img, 1, 0)
			if err != nil {
				c.t.Fatal(err)
			}
			c.replay(recs)
		}, epoch: func(*lifecycleCtx) int64 { return 0 }, wantErr: ErrBrokerNotRegistered},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newLifecycleCtx(t)
			c.register(1, 2)
			c.unfence(2)
			tt.setup(c)
			recs, err := unregisterRecords(c.img, 1, tt.epoch(c))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.replay(recs)
			if _, ok := c.img.Broker(1); ok {
				t.Fatal("broker 1 still registered")
			}
		})
	}
}

// TestBrokerHeartbeatManager_HasValidSession is Kafka's
// testHasValidSession, as holding: how long a registration holds its id
// against a new incarnation. As in Kafka, an unfenced broker holds it while
// its session lives, and a fenced one does not, whatever fenced it (its
// own request, want_fence, included); Keel's one exception is a fenced
// broker heard from that wants to run (catching up).
func TestBrokerHeartbeatManager_HasValidSession(t *testing.T) {
	const timeout = 10 * time.Second
	t0 := time.Unix(1_700_000_000, 0)
	// Broker 1 is active, broker 2 fenced (registered, never caught up).
	type hb struct {
		at               time.Duration
		shutdown, fence  bool // the heartbeat's want_shutdown, want_fence
		register, forget bool // a registration instead; the session dropped
		takeover         bool // a new active controller started every session
	}
	for _, tt := range []struct {
		name  string
		id    int32
		heard []hb
		at    time.Duration
		want  bool
	}{
		{name: "never heard of", id: 1, at: time.Second, want: false},
		{name: "active, within its session", id: 1, heard: []hb{{at: 5 * time.Second}}, at: 11 * time.Second, want: true},
		{name: "active, its session over", id: 1, heard: []hb{{}}, at: 11 * time.Second, want: false},
		{name: "active, asking to be fenced: holds until it is", id: 1, heard: []hb{{at: 5 * time.Second, fence: true}}, at: 6 * time.Second, want: true},
		{name: "active, session started by a takeover", id: 1, heard: []hb{{at: 5 * time.Second, takeover: true}}, at: 6 * time.Second, want: true},
		{name: "active, session forgotten", id: 1, heard: []hb{{at: 5 * time.Second}, {forget: true}}, at: 6 * time.Second, want: false},
		{name: "fenced, catching up after registering", id: 2, heard: []hb{{at: 5 * time.Second, register: true}}, at: 6 * time.Second, want: true},
		{name: "fenced, catching up, its session over", id: 2, heard: []hb{{at: 5 * time.Second, register: true}}, at: 16 * time.Second, want: false},
		{name: "fenced, heartbeating to come back", id: 2, heard: []hb{{at: 5 * time.Second}}, at: 6 * time.Second, want: true},
		{name: "fenced at its own request (want_fence)", id: 2, heard: []hb{{at: 5 * time.Second, fence: true}}, at: 6 * time.Second, want: false},
		{name: "fenced, asking to stay fenced after registering", id: 2, heard: []hb{{at: 5 * time.Second, register: true}, {at: 6 * time.Second, fence: true}}, at: 7 * time.Second, want: false},
		{name: "fenced, asking to shut down", id: 2, heard: []hb{{at: 5 * time.Second, shutdown: true}}, at: 6 * time.Second, want: false},
		{name: "fenced, asked to be fenced, then to come back", id: 2, heard: []hb{{at: 5 * time.Second, fence: true}, {at: 6 * time.Second}}, at: 7 * time.Second, want: true},
		{name: "fenced, session started by a takeover", id: 2, heard: []hb{{at: 5 * time.Second, takeover: true}}, at: 6 * time.Second, want: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newLifecycleCtx(t)
			c.register(1, 2)
			c.unfence(1)
			s := newSessionTracker(timeout)
			for _, h := range tt.heard {
				switch now := t0.Add(h.at); {
				case h.takeover:
					s.reset(c.img.Brokers(), now)
				case h.forget:
					s.forget(tt.id)
				case h.register:
					s.registered(tt.id, c.epoch(tt.id), now)
				default:
					s.touch(tt.id, c.epoch(tt.id), now, 0, h.shutdown || h.fence)
				}
			}
			if got := s.holding(c.broker(tt.id), t0.Add(tt.at)) > 0; got != tt.want {
				t.Errorf("broker %d (fenced: %v) at +%v holds its id: %v, want %v", tt.id, c.broker(tt.id).Fenced, tt.at, got, tt.want)
			}
		})
	}
}

// TestBrokerHeartbeatManager_FindOneStaleBroker is Kafka's
// testFindOneStaleBroker: the broker silent the longest is fenced first,
// then the next.
func TestBrokerHeartbeatManager_FindOneStaleBroker(t *testing.T) {
	const timeout = 10 * time.Second
	t0 := time.Unix(1_700_000_000, 0)
	c := newLifecycleCtx(t)
	c.register(0, 1, 2)
	c.unfence(0, 1, 2)
	s := newSessionTracker(timeout)
	s.touch(0, c.epoch(0), t0, 0, false)
	s.touch(1, c.epoch(1), t0.Add(5*time.Second), 0, false)
	s.touch(2, c.epoch(2), t0.Add(6*time.Second), 0, false)
	stale := func(at time.Duration) int32 {
		b, ok := s.oldestExpired(c.img, t0.Add(at))
		if !ok {
			return -1
		}
		return b.ID
	}
	if got := stale(6 * time.Second); got != -1 {
		t.Fatalf("at +6s: %d is stale, want none", got)
	}
	if got := stale(11 * time.Second); got != 0 {
		t.Fatalf("at +11s: %d is stale, want 0", got)
	}
	c.fence(0)
	if got := stale(11 * time.Second); got != -1 {
		t.Fatalf("at +11s, 0 fenced: %d is stale, want none", got)
	}
	for _, want := range []int32{1, 2} {
		if got := stale(31 * time.Second); got != want {
			t.Fatalf("at +31s: %d is stale, want %d", got, want)
		}
		c.fence(want)
	}
	if got := stale(31 * time.Second); got != -1 {
		t.Fatalf("everyone fenced: %d is stale", got)
	}
	// A broker that never had a session (registered before a takeover
	// lost its track) is silent since forever: first.
	c.unfence(1, 2)
	s.touch(2, c.epoch(2), t0.Add(40*time.Second), 0, false)
	s.forget(1)
	if got := stale(41 * time.Second); got != 1 {
		t.Fatalf("broker 1 with no session: %d is stale first, want 1", got)
	}
}

// TestReplicationControlManager_FenceMultipleBrokers is Kafka's
// testFenceMultipleBrokers: two brokers fenced, one after the other.
func TestReplicationControlManager_FenceMultipleBrokers(t *testing.T) {
	c := newLifecycleCtx(t)
	c.register(0, 1, 2, 3, 4)
	c.unfence(0, 1, 2, 3, 4)
	foo := c.createTopic("foo", []int32{1, 2, 3}, []int32{2, 3, 4}, []int32{0, 2, 1})
	c.fence(2, 3)
	for _, want := range []struct {
		p        int32
		replicas []int32
		isr      []int32
		leader   int32
	}{
		{0, []int32{1, 2, 3}, []int32{1}, 1},
		{1, []int32{2, 3, 4}, []int32{4}, 4},
		{2, []int32{0, 2, 1}, []int32{0, 1}, 0},
	} {
		p := c.partition(foo, want.p)
		if !slices.Equal(p.Replicas, want.replicas) || !slices.Equal(p.ISR, want.isr) || p.Leader != want.leader {
			t.Errorf("partition %d: %+v; want replicas %v, ISR %v, leader %d", want.p, p, want.replicas, want.isr, want.leader)
		}
	}
}

// TestFencing_OneAtATimeOldestFirst: when several members of an ISR expire
// together they are fenced one at a time, the one silent the longest
// first (BrokerHeartbeatManager's fencing loop), so that leadership, and
// the ISR's last place, go to the member heard from last: not to whichever
// one decision visits first.
func TestFencing_OneAtATimeOldestFirst(t *testing.T) {
	const timeout = 10 * time.Second
	t0 := time.Unix(1_700_000_000, 0)
	for _, tt := range []struct {
		name       string
		lastHeard  int32 // of brokers 1 and 2
		wantISR    []int32
		wantLeader int32
	}{
		{"broker 2 heard from last", 2, []int32{2}, fsm.NoLeader},
		{"broker 1 heard from last", 1, []int32{1}, fsm.NoLeader},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newLifecycleCtx(t)
			c.register(1, 2, 3)
			c.unfence(1, 2, 3)
			foo := c.createTopic("foo", []int32{1, 2, 3})
			c.fence(3) // ISR [1 2], leader 1
			first := 3 - tt.lastHeard
			s := newSessionTracker(timeout)
			s.touch(first, c.epoch(first), t0, 0, false)
			s.touch(tt.lastHeard, c.epoch(tt.lastHeard), t0.Add(time.Second), 0, false)
			// Both sessions have run out: the fencer fences them one
			// decision at a time.
			now := t0.Add(timeout + 2*time.Second)
			var order []int32
			for {
				b, ok := s.oldestExpired(c.img, now)
				if !ok {
					break
				}
				order = append(order, b.ID)
				c.replay(fenceRecords(c.img, []*fsm.Broker{b}))
			}
			if !slices.Equal(order, []int32{first, tt.lastHeard}) {
				t.Fatalf("fenced %v, want %v", order, []int32{first, tt.lastHeard})
			}
			if p := c.partition(foo, 0); !slices.Equal(p.ISR, tt.wantISR) || p.Leader != tt.wantLeader {
				t.Fatalf("partition 0: %+v; want ISR %v, leader %d", p, tt.wantISR, tt.wantLeader)
			}
			// The member heard from last leads again when it comes back.
			c.unfence(tt.lastHeard)
			if p := c.partition(foo, 0); p.Leader != tt.lastHeard {
				t.Fatalf("after broker %d came back: %+v", tt.lastHeard, p)
			}
		})
	}
}

// TestBrokerHeartbeatManager_CalculateNextBrokerState is Kafka's
// testCalculateNextBrokerState: each heartbeat's transition, as the
// records it writes and the answer it gets. A broker in controlled
// shutdown is released (fenced) once it leads nothing and every active
// broker has applied its moves (allApplied, here given).
func TestBrokerHeartbeatManager_CalculateNextBrokerState(t *testing.T) {
	const (
		fenced            = "FENCED"
		unfenced          = "UNFENCED"
		controlledShutdwn = "CONTROLLED_SHUTDOWN"
		shutdownNow       = "SHUTDOWN_NOW"
	)
	// Broker 1: fenced, caught up at its registration or not; broker 2:
	// active, leads topic "led"; broker 3: active, leads nothing; broker
	// 4: in controlled shutdown (leading nothing, or still leading topic
	// "kept" when the test says so).
	type setup struct{ leadsInShutdown bool }
	build := func(t *testing.T, s setup) *lifecycleCtx {
		c := newLifecycleCtx(t)
		c.register(1, 2, 3, 4, 5)
		c.unfence(2, 3, 4, 5)
		c.createTopic("led", []int32{2, 5})
		c.createTopic("four", []int32{4, 5})
		c.heartbeat(4, false, true)
		if s.leadsInShutdown {
			// Not a state Keel's decisions leave (entering controlled
			// shutdown moves or drops every leadership), but one the rule
			// must still hold in: a broker leading a partition stays.
			b := c.broker(4)
			c.replay([]*keelpb.Record{{Record: &keelpb.Record_PartitionChange{PartitionChange: &keelpb.PartitionChangeRecord{
				TopicId: func() []byte { id := c.topicID("four"); return id[:] }(), Partition: 0, Leader: &b.ID,
				Isr: &keelpb.Int32List{Values: []int32{4, 5}}}}}})
		}
		return c
	}
	tests := []struct {
		name     string
		setup    setup
		id       int32
		offset   func(c *lifecycleCtx) uint64
		fence    bool
		shutdown bool
		released bool // every active broker has applied the shutdown's moves
		from, to string
	}{
		{name: "fenced, wants to shut down", id: 1, shutdown: true, from: fenced, to: shutdownNow},
		{name: "fenced, caught up", id: 1, from: fenced, to: unfenced},
		{name: "fenced, behind its registration", id: 1, offset: func(c *lifecycleCtx) uint64 { return uint64(c.epoch(1)) - 1 }, from: fenced, to: fenced},
		{name: "fenced, wants to stay fenced", id: 1, fence: true, from: fenced, to: fenced},
		{name: "active and leading, wants to shut down", id: 2, shutdown: true, from: unfenced, to: controlledShutdwn},
		{name: "active leading nothing, wants to shut down", id: 3, shutdown: true, from: unfenced, to: shutdownNow},
		{name: "active, nothing asked", id: 2, from: unfenced, to: unfenced},
		{name: "active, wants to be fenced", id: 2, fence: true, from: unfenced, to: fenced},
		{name: "active, wants to be fenced and to shut down", id: 2, fence: true, shutdown: true, from: unfenced, to: shutdownNow},
		{name: "in controlled shutdown, still leading", setup: setup{leadsInShutdown: true}, id: 4, shutdown: true, released: true,
			from: controlledShutdwn, to: controlledShutdwn},
		{name: "in controlled shutdown, moves not yet applied by all", id: 4, shutdown: true, from: controlledShutdwn, to: controlledShutdwn},
		{name: "in controlled shutdown, moves applied by all", id: 4, shutdown: true, released: true, from: controlledShutdwn, to: shutdownNow},
	}
	stateOf := func(b *fsm.Broker, shutdown bool) string {
		switch {
		case shutdown && b.Fenced:
			return shutdownNow
		case b.Fenced:
			return fenced
		case b.ShuttingDown:
			return controlledShutdwn
		}
		return unfenced
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := build(t, tt.setup)
			if got := stateOf(c.broker(tt.id), false); got != tt.from {
				t.Fatalf("broker %d starts %s, want %s", tt.id, got, tt.from)
			}
			offset := c.img.Offset
			if tt.offset != nil {
				offset = tt.offset(c)
			}
			req := &keelpb.BrokerHeartbeatRequest{BrokerId: tt.id, BrokerEpoch: c.epoch(tt.id), MetadataOffset: offset,
				WantFence: tt.fence, WantShutdown: tt.shutdown}
			recs, err := heartbeatRecords(c.img, req)
			if err != nil {
				t.Fatal(err)
			}
			c.replay(recs)
			// BrokerHeartbeat's second step, when the sessions say every
			// active broker has applied the moves.
			if tt.shutdown && tt.released && c.broker(tt.id).ShuttingDown {
				recs, err := shutdownRecords(c.img, tt.id, c.epoch(tt.id))
				if err != nil {
					t.Fatal(err)
				}
				c.replay(recs)
			}
			if got := stateOf(c.broker(tt.id), tt.shutdown); got != tt.to {
				t.Fatalf("broker %d: %s -> %s, want %s", tt.id, tt.from, got, tt.to)
			}
			if b := c.broker(tt.id); b.Fenced && leadsAny(c.img, b.ID) {
				t.Fatalf("broker %d fenced but still leads", tt.id)
			}
		})
	}
}

// TestReplicationControlManager_ProcessBrokerHeartbeatInControlledShutdown is
// Kafka's testProcessBrokerHeartbeatInControlledShutdown: entering
// controlled shutdown marks the broker and, in the same batch, moves its
// leadership to the next ISR member and takes it out of the ISR.
func TestReplicationControlManager_ProcessBrokerHeartbeatInControlledShutdown(t *testing.T) {
	c := newLifecycleCtx(t)
	c.register(0, 1, 2)
	c.unfence(0, 1, 2)
	foo := c.createTopic("foo", []int32{0, 1, 2})
	recs, err := heartbeatRecords(c.img, &keelpb.BrokerHeartbeatRequest{BrokerId: 0, BrokerEpoch: c.epoch(0), MetadataOffset: c.img.Offset, WantShutdown: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].GetPartitionChange() == nil || recs[1].GetBrokerShuttingDown().GetBrokerId() != 0 {
		t.Fatalf("records %v; want the partition's change, then broker 0 shutting down", recs)
	}
	ch := recs[0].GetPartitionChange()
	if ch.GetLeader() != 1 || !slices.Equal(ch.GetIsr().GetValues(), []int32{1, 2}) {
		t.Fatalf("change %v; want leader 1, ISR [1 2]", ch)
	}
	c.replay(recs)
	if p := c.partition(foo, 0); p.Leader != 1 || !slices.Equal(p.ISR, []int32{1, 2}) {
		t.Fatalf("partition: %+v", p)
	}
}
