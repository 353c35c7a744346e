package replication

import (
	"slices"
	"testing"
	"time"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// Kafka's PartitionTest cases: the leader's high watermark and its ISR
// changes, on broker 1 leading t-0 (replicas 1,2,3), followers 2 and 3.

// TestPartition_UpdateFollowerFetchState (testUpdateFollowerFetchState and
// the high watermark cases): the high watermark is the smallest log end of
// the leader and the ISR, as fetched at this epoch; a member not heard from
// holds it back, and it never moves back.
func TestPartition_UpdateFollowerFetchState(t *testing.T) {
	tests := []struct {
		name   string
		isr    []int32
		fetch  []int32 // the followers that fetch (and catch up) after the produce
		wantHW int64
	}{
		{name: "leader alone in the ISR commits at once", isr: []int32{1}, wantHW: 5},
		{name: "an ISR member that has not fetched holds it back", isr: []int32{1, 2}, wantHW: 0},
		{name: "every ISR member caught up", isr: []int32{1, 2, 3}, fetch: []int32{2, 3}, wantHW: 5},
		{name: "one ISR member caught up, one not", isr: []int32{1, 2, 3}, fetch: []int32{2}, wantHW: 0},
		{name: "a follower outside the ISR does not hold it back", isr: []int32{1, 2}, fetch: []int32{2}, wantHW: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, clusterImage(t, nil, tt.isr...))
			e.produce(1, 5)
			for _, id := range tt.fetch {
				e.catchUp(id)
				e.fetch(id) // at the log end: reports it
			}
			if hw := e.hw(1); hw != tt.wantHW {
				t.Fatalf("leader high watermark = %d, want %d", hw, tt.wantHW)
			}
			for _, id := range tt.fetch {
				e.fetch(id)
				if hw := e.hw(id); hw != tt.wantHW {
					t.Fatalf("follower %d high watermark = %d, want the leader's %d", id, hw, tt.wantHW)
				}
			}
		})
	}
}

// TestPartition_HighWatermarkFrozenBelowMinIsr (KAFKA-15583): with the ISR
// below min.insync.replicas the high watermark does not move, even when
// every ISR member has everything, so that a replica leaving the ISR then
// holds every committed record (the controllers make it an ELR member).
func TestPartition_HighWatermarkFrozenBelowMinIsr(t *testing.T) {
	e := newEnv(t, clusterImage(t, map[string]string{fsm.MinInsyncReplicas: "2"}, 1))
	e.produce(1, 3)
	if hw := e.hw(1); hw != 0 {
		t.Fatalf("high watermark = %d with ISR [1] and min ISR 2, want 0", hw)
	}
	// Follower 2 catches up and joins: the ISR reaches the minimum.
	e.catchUp(2)
	e.fetch(2)
	if !e.send(1) || !slices.Equal(e.isr(), []int32{1, 2}) {
		t.Fatalf("ISR %v, want [1 2]", e.isr())
	}
	e.fetch(2)
	if hw := e.hw(1); hw != 3 {
		t.Fatalf("high watermark = %d with ISR [1 2], want 3", hw)
	}
}

// TestPartition_MaybeShrinkIsr (testMaybeShrinkIsr with a fake clock): an
// ISR member that has not caught up for replica.lag.time.max.ms leaves the
// ISR; one that has is kept.
func TestPartition_MaybeShrinkIsr(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2, 3))
	e.catchUp(2)
	e.catchUp(3)
	e.produce(1, 2)
	e.clock.Advance(testLag / 2)
	e.catchUp(2) // 2 keeps up, 3 is silent
	e.ms[1].checkLag()
	if e.send(1) {
		t.Fatalf("an ISR change at half the lag time: ISR %v", e.isr())
	}
	e.clock.Advance(testLag/2 + time.Millisecond)
	e.ms[1].checkLag()
	if !e.send(1) || !slices.Equal(e.isr(), []int32{1, 2}) {
		t.Fatalf("ISR %v, want [1 2] once 3 lagged for the lag time", e.isr())
	}
	// The high watermark no longer waits for 3.
	e.fetch(2)
	if hw := e.hw(1); hw != 2 {
		t.Fatalf("high watermark = %d, want 2", hw)
	}
}

// TestPartition_ShouldNotShrinkIsrIfFollowerCaughtUpToLogEnd: a follower
// that keeps fetching at the leader's log end stays in the ISR however long
// ago the last produce was. Unlike Kafka, one at the log end that stops
// fetching leaves it (see lagging).
func TestPartition_ShouldNotShrinkIsrIfFollowerCaughtUpToLogEnd(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2, 3))
	e.produce(1, 1)
	e.catchUp(2)
	e.catchUp(3)
	for range 6 {
		e.clock.Advance(testLag / 2)
		e.fetch(2)
		e.fetch(3)
		e.ms[1].checkLag()
		if e.send(1) {
			t.Fatalf("ISR changed to %v with every follower fetching at the log end", e.isr())
		}
	}
	e.clock.Advance(testLag / 2)
	e.fetch(2) // 3 stops fetching, at the log end
	e.clock.Advance(testLag/2 + time.Millisecond)
	e.fetch(2)
	e.ms[1].checkLag()
	if !e.send(1) || !slices.Equal(e.isr(), []int32{1, 2}) {
		t.Fatalf("ISR %v, want [1 2] once 3 stopped fetching for the lag time", e.isr())
	}
}

// TestPartition_MaybeExpandIsr (testMaybeExpandIsr... and KAFKA-7128's
// rule): a follower outside the ISR joins once it has fetched up to the
// high watermark and the start of the leader's epoch, with the broker
// epoch it fetched at (KIP-903); a fenced follower does not.
func TestPartition_MaybeExpandIsr(t *testing.T) {
	t.Run("caught up to the high watermark", func(t *testing.T) {
		e := newEnv(t, clusterImage(t, nil, 1))
		e.produce(1, 4)
		e.catchUp(3)
		e.fetch(3)
		if !e.send(1) || !slices.Equal(e.isr(), []int32{1, 3}) {
			t.Fatalf("ISR %v, want [1 3]", e.isr())
		}
		req := e.ctl.requests[len(e.ctl.requests)-1]
		if !slices.Equal(req.BrokerEpochs, []int64{2, 4}) {
			t.Fatalf("AlterPartition broker epochs %v, want [2 4]", req.BrokerEpochs)
		}
	})
	t.Run("not before the leader epoch's start (KAFKA-7128)", func(t *testing.T) {
		// Broker 2 takes over with records past its high watermark: its
		// epoch starts at 4, its high watermark is 2. Follower 3 reaching
		// 2 is not in sync: were it to join and 2 to die, 3 could lead
		// without records that 2 may have committed.
		e := newEnv(t, clusterImage(t, nil, 1, 2))
		e.produce(1, 2)
		e.catchUp(2)
		e.produce(1, 2)
		e.fetch(2) // 2 has 0..4; it last heard the high watermark 2
		e.ctl.commit(changeRec(leaderID(2), []int32{2, 1}))
		e.publish()
		if hw := e.hw(2); hw != 2 {
			t.Fatalf("new leader's high watermark = %d, want the 2 it had", hw)
		}
		e.ms[3].cfg.FetchMaxBytes = 1 // one batch a fetch
		e.fetch(3)
		e.fetch(3) // reports 2: the high watermark, below the epoch start
		if e.send(2) {
			t.Fatalf("ISR changed to %v with follower 3 below the epoch start", e.isr())
		}
		e.fetch(3) // reports 4
		if !e.send(2) || !slices.Equal(e.isr(), []int32{2, 1, 3}) {
			t.Fatalf("ISR %v, want [2 1 3] once 3 reached the epoch start", e.isr())
		}
	})
	t.Run("a fenced follower does not join", func(t *testing.T) {
		e := newEnv(t, clusterImage(t, nil, 1))
		e.produce(1, 1)
		e.catchUp(3)
		e.ctl.commit(fenceRec(3, 4))
		e.publish()
		e.fetch(3)
		if e.send(1) {
			t.Fatalf("ISR changed to %v with broker 3 fenced", e.isr())
		}
	})
}

// TestPartition_LeaderRecoveryConfirmed (KIP-704): a leader elected
// uncleanly confirms RECOVERED at once, with its ISR as it is.
func TestPartition_LeaderRecoveryConfirmed(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1))
	recovering := changeRec(leaderID(2), []int32{2})
	st := keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERING
	recovering.GetPartitionChange().LeaderRecoveryState = &st
	e.ctl.commit(fenceRec(1, 2), recovering)
	e.publish()
	if p, _ := e.ctl.image().Partition(topicT, 0); !p.Recovering() {
		t.Fatal("the partition is not recovering")
	}
	if !e.send(2) {
		t.Fatal("the new leader sent no AlterPartition")
	}
	if p, _ := e.ctl.image().Partition(topicT, 0); p.Recovering() || !slices.Equal(p.ISR, []int32{2}) {
		t.Fatalf("partition recovering %v, ISR %v; want recovered, [2]", p.Recovering(), p.ISR)
	}
}
