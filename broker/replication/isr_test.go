package replication

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/keel-dev/keel/proto/keelpb"
)

func shuttingDownRec(id int32, epoch int64) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_BrokerShuttingDown{BrokerShuttingDown: &keelpb.BrokerShuttingDownRecord{BrokerId: id, BrokerEpoch: epoch}}}
}

// TestPartition_DesiredIsr: the leader's shrink and expand rules (Kafka's
// maybeShrinkIsr and maybeExpandIsr), on what it knows of its followers
// from their fetches at this epoch. Broker 1 leads t-0 (replicas 1,2,3,
// broker epochs 2-4); its high watermark is 10 and its epoch started at 8;
// it has led for 30 s; the lag time is testLag (10 s).
func TestPartition_DesiredIsr(t *testing.T) {
	const hw, epochStart = 10, 8
	// A follower that fetched at this epoch: its log end as it fetched,
	// how long ago it last caught up, its broker epoch.
	type fetched struct {
		leo         int64
		caughtUp    time.Duration
		brokerEpoch int64
	}
	tests := []struct {
		name      string
		isr       []int32
		records   []*keelpb.Record
		followers map[int32]fetched
		led       time.Duration // how long broker 1 has led; 30 s if 0
		start     int64         // where its epoch started; epochStart if 0
		want      []int32       // nil: no change
	}{
		// Shrinking.
		{name: "members caught up within the lag time stay (testMaybeShrinkIsr)", isr: []int32{1, 2, 3},
			followers: map[int32]fetched{2: {hw, time.Second, 3}, 3: {hw, testLag, 4}}},
		{name: "a member not caught up for the lag time leaves (testMaybeShrinkIsr)", isr: []int32{1, 2, 3},
			followers: map[int32]fetched{2: {hw, time.Second, 3}, 3: {5, testLag + time.Millisecond, 4}}, want: []int32{1, 2}},
		{name: "a member at the log end that stopped fetching leaves, unlike Kafka", isr: []int32{1, 2, 3},
			followers: map[int32]fetched{2: {hw, time.Second, 3}, 3: {hw, testLag + time.Millisecond, 4}}, want: []int32{1, 2}},
		{name: "members not heard from count as caught up when the epoch started", isr: []int32{1, 2, 3}, led: testLag},
		{name: "members not heard from for the lag time since the epoch started leave", isr: []int32{1, 2, 3}, led: testLag + time.Millisecond,
			want: []int32{1}},
		{name: "a fenced member leaves", isr: []int32{1, 2, 3}, records: []*keelpb.Record{fenceRec(2, 3)},
			followers: map[int32]fetched{2: {hw, 0, 3}, 3: {hw, 0, 4}}, want: []int32{1, 3}},
		{name: "a member in controlled shutdown leaves", isr: []int32{1, 2, 3}, records: []*keelpb.Record{shuttingDownRec(3, 4)},
			followers: map[int32]fetched{2: {hw, 0, 3}, 3: {hw, 0, 4}}, want: []int32{1, 2}},
		// Expanding.
		{name: "a follower caught up to the high watermark joins (testIsrExpansion)", isr: []int32{1, 2},
			followers: map[int32]fetched{2: {hw, 0, 3}, 3: {hw, time.Second, 4}}, want: []int32{1, 2, 3}},
		{name: "one that caught up as long ago as the lag time joins", isr: []int32{1, 2},
			followers: map[int32]fetched{2: {hw, 0, 3}, 3: {hw, testLag, 4}}, want: []int32{1, 2, 3}},
		{name: "not on fetches older than the lag time, which would drop it again (issue 26)", isr: []int32{1, 2},
			followers: map[int32]fetched{2: {hw, 0, 3}, 3: {hw, testLag + time.Millisecond, 4}}},
		{name: "not on fetches older than the lag time, several leaving together", isr: []int32{1},
			followers: map[int32]fetched{2: {hw, testLag + time.Second, 3}, 3: {hw, 2 * testLag, 4}}},
		{name: "not without a fetch at this epoch", isr: []int32{1, 2},
			followers: map[int32]fetched{2: {hw, 0, 3}}},
		{name: "not below the high watermark", isr: []int32{1, 2},
			followers: map[int32]fetched{2: {hw, 0, 3}, 3: {hw - 1, 0, 4}}},
		{name: "not below the epoch's start (testFollowerDoesNotJoinISRUntilCaughtUpToOffsetWithinCurrentLeaderEpoch)", isr: []int32{1},
			start: hw + 2, followers: map[int32]fetched{3: {hw + 1, 0, 4}}},
		{name: "at the epoch's start above the high watermark", isr: []int32{1},
			start: hw + 2, followers: map[int32]fetched{3: {hw + 2, 0, 4}}, want: []int32{1, 3}},
		{name: "not while fenced (testIsrNotExpandedIfReplicaIsFencedOrShutdown)", isr: []int32{1, 2}, records: []*keelpb.Record{fenceRec(3, 4)},
			followers: map[int32]fetched{2: {hw, 0, 3}, 3: {hw, 0, 4}}},
		{name: "not in controlled shutdown (testIsrNotExpandedIfReplicaIsInControlledShutdown)", isr: []int32{1, 2}, records: []*keelpb.Record{shuttingDownRec(3, 4)},
			followers: map[int32]fetched{2: {hw, 0, 3}, 3: {hw, 0, 4}}},
		{name: "not at a broker epoch the metadata does not show (KIP-903)", isr: []int32{1, 2},
			followers: map[int32]fetched{2: {hw, 0, 3}, 3: {hw, 0, 99}}},
		{name: "at the broker epoch the metadata shows (testIsrCanExpandedIfBrokerEpochsMatchWithKraftMetadataCache)", isr: []int32{1, 2},
			followers: map[int32]fetched{2: {hw, 0, 3}, 3: {hw, 0, 4}}, want: []int32{1, 2, 3}},
		// Both, and neither.
		{name: "one leaves and one joins in one change", isr: []int32{1, 2},
			followers: map[int32]fetched{2: {hw, testLag + time.Second, 3}, 3: {hw, 0, 4}}, want: []int32{1, 3}},
		{name: "nothing while the leader itself is fenced", isr: []int32{1, 2, 3}, records: []*keelpb.Record{fenceRec(1, 2)},
			led: 2 * testLag},
		{name: "nothing while the leader itself is in controlled shutdown", isr: []int32{1, 2, 3}, records: []*keelpb.Record{shuttingDownRec(1, 2)},
			led: 2 * testLag},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := clusterImage(t, nil, tt.isr...)
			if len(tt.records) > 0 {
				img = applyBatch(t, img, tt.records...)
			}
			p, _ := img.Partition(topicT, 0)
			now := time.Unix(1_000_000, 0)
			led := tt.led
			if led == 0 {
				led = 3 * testLag
			}
			start := tt.start
			if start == 0 {
				start = epochStart
			}
			r := &replica{role: "leader", leaderEpoch: p.LeaderEpoch, hw: hw, epochStart: start, since: now.Add(-led),
				followers: map[int32]*follower{}}
			for _, id := range []int32{2, 3} {
				// As BecomeLeader leaves them: ISR members caught up
				// when the epoch started.
				f := &follower{leo: -1, lastFetchLeaderLEO: -1}
				if slices.Contains(tt.isr, id) {
					f.lastCaughtUp = r.since
				}
				if s, ok := tt.followers[id]; ok {
					f.fetched, f.leo, f.brokerEpoch = true, s.leo, s.brokerEpoch
					f.lastCaughtUp = now.Add(-s.caughtUp)
				}
				r.followers[id] = f
			}
			m := &Manager{cfg: Config{ReplicaLagTimeMax: testLag}, self: 1}
			got, epochs := m.desiredISR(p, r, img, now)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("desired ISR %v, want %v (ISR %v)", got, tt.want, p.ISR)
			}
			for i, id := range got {
				if b, _ := img.Broker(id); epochs[i] != b.Epoch {
					t.Errorf("member %d at broker epoch %d, want %d", id, epochs[i], b.Epoch)
				}
			}
		})
	}
}

// TestPartition_IsrStaysShrunkWhileFollowerCannotFetch (issue 26): a
// follower of an idle partition that stops fetching, at the log end, leaves
// the ISR once, and does not come back on its old fetches however often the
// leader looks (lag checks, new metadata), which made the ISR flip at every
// commit for as long as it could not fetch; it comes back at its next fetch.
func TestPartition_IsrStaysShrunkWhileFollowerCannotFetch(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2, 3))
	e.produce(1, 3)
	e.catchUp(2)
	e.catchUp(3)
	e.fetch(2)
	e.fetch(3) // both at the log end, the high watermark 3
	if hw := e.hw(1); hw != 3 {
		t.Fatalf("high watermark %d, want 3", hw)
	}
	e.clock.Advance(testLag / 2)
	e.fetch(2) // 3 stops fetching
	e.clock.Advance(testLag/2 + time.Millisecond)
	e.fetch(2)
	e.ms[1].checkLag()
	if !e.send(1) || !slices.Equal(e.isr(), []int32{1, 2}) {
		t.Fatalf("ISR %v, want [1 2] once 3 stopped fetching for the lag time", e.isr())
	}
	for i := range 6 {
		e.clock.Advance(testLag / 2)
		e.fetch(2)
		e.ms[1].checkLag()
		e.ms[1].MetadataChanged(e.ctl.image(), e.ctl.image())
		if e.send(1) {
			t.Fatalf("round %d: ISR changed to %v with follower 3 not fetching", i, e.isr())
		}
	}
	if n := len(e.ctl.requests); n != 1 {
		t.Fatalf("%d AlterPartitions, want the one shrink", n)
	}
	e.fetch(3)
	if !e.send(1) || !slices.Equal(e.isr(), []int32{1, 2, 3}) {
		t.Fatalf("ISR %v, want [1 2 3] once 3 fetched at the log end again", e.isr())
	}
}

// TestPartition_ShouldNotShrinkIsrIfPreviousFetchIsCaughtUp: a follower
// that fetches up to where the leader's log ended at its previous fetch had
// caught up as of that fetch, so it stays in the ISR although it never
// fetched at the log end within the lag time.
func TestPartition_ShouldNotShrinkIsrIfPreviousFetchIsCaughtUp(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2))
	e.produce(1, 5)
	e.produce(1, 5)
	e.ms[2].cfg.FetchMaxBytes = 1 // one batch a fetch
	e.clock.Advance(testLag / 2)
	e.fetch(2) // reports 0, gets 0..4
	e.fetch(2) // reports 5 of the leader's 10, gets 5..9
	e.clock.Advance(testLag/2 + time.Millisecond)
	e.produce(1, 5)
	e.fetch(2) // reports 10, the leader's log end at the previous fetch
	e.ms[1].checkLag()
	if e.send(1) {
		t.Fatalf("ISR changed to %v with follower 2 caught up %v ago", e.isr(), testLag/2)
	}
	if hw := e.hw(1); hw != 10 {
		t.Fatalf("high watermark %d, want 10", hw)
	}
}

// TestPartition_SingleInFlightAlterIsr: while an ISR change is not yet in
// this broker's metadata, answered or not (Kafka's pending ISR state), no
// other is decided, however much a member lags meanwhile; once the
// metadata shows it, the next one is.
func TestPartition_SingleInFlightAlterIsr(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2))
	e.produce(1, 2)
	e.catchUp(2)
	e.catchUp(3)
	e.fetch(3) // 3 may join
	m := e.ms[1]
	if !m.sendOne(context.Background()) || len(e.ctl.requests) != 1 {
		t.Fatalf("%d AlterPartitions after 3 caught up, want 1", len(e.ctl.requests))
	}
	// Committed; this broker's metadata does not show it yet. Member 2
	// then lags.
	e.clock.Advance(testLag + time.Millisecond)
	e.fetch(3)
	m.checkLag()
	for m.sendOne(context.Background()) {
	}
	if n := len(e.ctl.requests); n != 1 {
		t.Fatalf("%d AlterPartitions before the first was in the metadata, want 1", n)
	}
	e.publish()
	if !e.send(1) || !slices.Equal(e.isr(), []int32{1, 3}) {
		t.Fatalf("ISR %v, want [1 3] once the expansion was in the metadata and 2 lagged", e.isr())
	}
	if p, _ := e.ctl.image().Partition(topicT, 0); p.PartitionEpoch != 2 {
		t.Fatalf("partition epoch %d, want 2: two changes", p.PartitionEpoch)
	}
}
