package replication

import (
	"bytes"
	"context"
	"math"
	"testing"
	"time"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

// TestQuota: the bucket holds at most one second's bytes, may run into
// debt, and its wait is the time until the debt is paid (Kafka's
// ReplicationQuotaManagerTest.shouldExceedQuotaThenReturnBackBelowBoundAsTimePasses,
// with a bucket for Kafka's sampled window).
func TestQuota(t *testing.T) {
	type step struct {
		at       time.Duration // since the start
		record   int
		wantWait time.Duration
	}
	tests := []struct {
		name  string
		rate  int64
		steps []step
	}{
		{"a fresh quota lets the first answer go", 1000, []step{{0, 0, 0}, {0, 500, time.Second / 2}}},
		{"the debt is paid as time passes", 1000, []step{{0, 2000, 2 * time.Second}, {time.Second, 0, time.Second}, {2 * time.Second, 0, 0}}},
		{"at most one second banked", 1000, []step{{0, 0, 0}, {time.Hour, 1500, time.Second / 2}}},
		{"a rate of 0 never refills", 0, []step{{0, 1, time.Hour}, {time.Hour, 0, time.Hour}}},
		{"small answers wait for their own bytes only", 1000, []step{{0, 100, 100 * time.Millisecond}, {100 * time.Millisecond, 100, 100 * time.Millisecond}, {300 * time.Millisecond, 0, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Unix(1000, 0)
			q := quota{}
			q.setRate(start, tt.rate)
			for i, s := range tt.steps {
				now := start.Add(s.at)
				if s.record > 0 {
					q.record(now, s.record)
				}
				if got := q.wait(now); got != s.wantWait {
					t.Fatalf("step %d: wait %v, want %v", i, got, s.wantWait)
				}
			}
		})
	}
}

// TestThrottledReplica: only a replica a reassignment adds, and not in
// the ISR, is throttled (Kafka's shouldLeaderThrottle and
// shouldFollowerThrottle skip in-sync replicas).
func TestThrottledReplica(t *testing.T) {
	tp := broker.TopicPartition{TopicID: topicT, Partition: 0}
	tests := []struct {
		name        string
		isr, adding []int32
		id          int32
		want        bool
	}{
		{"adding, not in sync", []int32{1, 2}, []int32{3}, 3, true},
		{"adding, in sync", []int32{1, 2, 3}, []int32{3}, 3, false},
		{"an old replica during a move", []int32{1, 2}, []int32{3}, 2, false},
		{"no move", []int32{1, 2}, nil, 3, false},
		{"another partition", []int32{1, 2}, []int32{3}, 3, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := moving(t, clusterImage(t, nil, 1, 2, 3), tt.isr, tt.adding)
			at := tp
			if tt.name == "another partition" {
				at.Partition = 1
			}
			if got := throttledReplica(img, at, tt.id); got != tt.want {
				t.Fatalf("throttled = %v, want %v", got, tt.want)
			}
		})
	}
}

// moving changes t-0 to the ISR isr with adding replicas adding.
func moving(t *testing.T, img *fsm.Image, isr, adding []int32) *fsm.Image {
	t.Helper()
	return applyBatch(t, img, &keelpb.Record{Record: &keelpb.Record_PartitionChange{PartitionChange: &keelpb.PartitionChangeRecord{
		TopicId: bytes.Clone(topicT[:]), Partition: 0, Isr: &keelpb.Int32List{Values: isr}, AddingReplicas: &keelpb.Int32List{Values: adding}}}})
}

func throttleRec(name string, rate string) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_Config{Config: &keelpb.ConfigRecord{
		ResourceType: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER, Name: name, Value: &rate}}}
}

// TestManager_Throttle: the leader's and the follower's quotas, as the
// fetch paths call them: a throttled replica is held back once its bytes
// exceed the rate, and let go as time pays for them; a replica in sync,
// and any replica without a rate set, never is.
func TestManager_Throttle(t *testing.T) {
	tp := broker.TopicPartition{TopicID: topicT, Partition: 0}
	img := moving(t, clusterImage(t, nil, 1, 2, 3), []int32{1, 2}, []int32{3})
	e := newEnv(t, img)
	leader, follower := e.ms[1], e.ms[3]

	// No rate: never throttled, whatever goes.
	leader.recordLeaderBytes(tp, 3, 10<<20)
	if d := leader.leaderThrottled(tp, 3); d != 0 {
		t.Fatalf("no rate set: leader throttled for %v", d)
	}

	e.ctl.commit(throttleRec(fsm.LeaderReplicationThrottledRate, "1000000"), throttleRec(fsm.FollowerReplicationThrottledRate, "500000"))
	e.publish()
	leader.recordLeaderBytes(tp, 3, 2_000_000)
	if d := leader.leaderThrottled(tp, 3); d != 2*time.Second {
		t.Fatalf("leader throttled for %v after 2 MB at 1 MB/s, want 2s", d)
	}
	if d := leader.leaderThrottled(tp, 2); d != 0 {
		t.Fatalf("an in-sync follower throttled for %v", d)
	}
	follower.recordFollowerBytes(tp, 1_000_000)
	if d := follower.followerThrottled(tp); d != 2*time.Second {
		t.Fatalf("follower throttled for %v after 1 MB at 0.5 MB/s, want 2s", d)
	}
	e.clock.Advance(time.Second)
	if d := leader.leaderThrottled(tp, 3); d != time.Second {
		t.Fatalf("leader throttled for %v a second later, want 1s", d)
	}
	e.clock.Advance(time.Second)
	if d := leader.leaderThrottled(tp, 3); d != 0 {
		t.Fatalf("leader throttled for %v once paid", d)
	}
	if got := counterValue(t, leader.throttle.bytes.WithLabelValues("leader")); got != 2_000_000 {
		t.Fatalf("%s{side=leader} = %v, want the 2 MB of the throttled replica only", MetricThrottleBytes, got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		follower.throttleWait(ctx, false, time.Second, time.Minute)
	}()
	poll.Until(t, 10*time.Second, "the follower waiting on the clock", func() bool {
		e.clock.Advance(100 * time.Millisecond)
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	cancel()
	if got := counterValue(t, follower.throttle.seconds.WithLabelValues("follower")); got < 1 {
		t.Fatalf("%s{side=follower} = %v, want the second held back", MetricThrottleSeconds, got)
	}
	// The rate lifted: nothing is held back, whatever the debt.
	e.ctl.commit(&keelpb.Record{Record: &keelpb.Record_Config{Config: &keelpb.ConfigRecord{
		ResourceType: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER, Name: fsm.FollowerReplicationThrottledRate}}})
	e.publish()
	if d := follower.followerThrottled(tp); d != 0 {
		t.Fatalf("follower throttled for %v with no rate", d)
	}
	if l, f := e.ctl.image().ReplicationThrottle(); l != 1000000 || f != math.MaxInt64 {
		t.Fatalf("rates %d, %d", l, f)
	}
}
