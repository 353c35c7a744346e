package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/raftlog"
	"github.com/keel-dev/keel/server"
)

// TestPartitionScale measures, against a real 3-node quorum with real broker
// agents in this process (each replaying the whole metadata like a real
// broker): the rate of creating P partitions (RF 3) over B brokers, and the
// time from fencing a broker that leads about P/B partitions until every
// live broker has applied the resulting records. It runs only when
// KEEL_BENCH_PARTITIONS is set (make bench-partitions): a measurement, not a
// test. KEEL_BENCH_BROKERS sets B (default 10).
func TestPartitionScale(t *testing.T) {
	total, _ := strconv.Atoi(os.Getenv("KEEL_BENCH_PARTITIONS"))
	if total <= 0 {
		t.Skip("set KEEL_BENCH_PARTITIONS=100000 to measure")
	}
	brokers := 10
	if b, err := strconv.Atoi(os.Getenv("KEEL_BENCH_BROKERS")); err == nil && b >= 3 {
		brokers = b
	}
	const session = time.Second
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	opts := []keeltest.Option{keeltest.WithSessionTimeout(session)}
	if f := os.Getenv("KEEL_BENCH_LOG"); f != "" {
		w, err := os.Create(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		opts = append(opts, keeltest.WithLogger(slog.New(slog.NewTextHandler(w, nil))))
	}
	q := startScaleCluster(t, 3, opts...)
	agents := make([]*broker.Agent, brokers)
	for i := range agents {
		a, err := broker.Start(broker.Config{
			BrokerID: int32(i + 1), Listen: "127.0.0.1:0", DataDir: t.TempDir(), Controllers: q.Addrs(),
			HeartbeatInterval: 100 * time.Millisecond, Logger: quiet,
		})
		if err != nil {
			t.Fatal(err)
		}
		agents[i] = a
		t.Cleanup(func() { a.Close() })
	}
	active := q.WaitForActive(10 * time.Second)
	poll.Until(t, 30*time.Second, "every broker active", func() bool {
		img := active.FSM().Image()
		for i := range agents {
			if b, ok := img.Broker(int32(i + 1)); !ok || b.Fenced {
				return false
			}
		}
		return true
	})

	// Create: topics of at most 10,000 partitions each, one request each,
	// through the client every tool uses (it follows leadership).
	const perTopic = 10_000
	client := q.Client()
	ctx := context.Background()
	start := time.Now()
	for n, i := 0, 0; n < total; i++ {
		p := min(perTopic, total-n)
		name := fmt.Sprintf("t%d", i)
		_, err := client.CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: name, Partitions: int32(p), ReplicationFactor: 3})
		if status.Code(err) == codes.AlreadyExists {
			// A retry after a leadership change whose first try committed.
			err = nil
		}
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		n += p
	}
	committed := time.Since(start)
	active = q.WaitForActive(10 * time.Second)
	created := active.FSM().Image().Offset
	if got := active.FSM().Image().PartitionCount(); got != total {
		t.Fatalf("%d partitions committed, want %d", got, total)
	}
	measureUntil(t, 5*time.Minute, "every broker to apply the topics", func() bool { return allApplied(agents, nil, created) })
	applied := time.Since(start)
	t.Logf("create: partitions=%d brokers=%d committed=%v (%.0f partitions/s) applied_by_all_brokers=%v",
		total, brokers, committed.Round(time.Millisecond), float64(total)/committed.Seconds(), applied.Round(time.Millisecond))

	// Fence the broker that leads the most partitions: stop it without a
	// word and let its session run out.
	img := active.FSM().Image()
	victim, led := int32(0), 0
	for i := range agents {
		n := 0
		img.PartitionsOnBroker(int32(i+1), func(p *fsm.Partition) bool {
			if p.Leader == int32(i+1) {
				n++
			}
			return true
		})
		if n > led {
			victim, led = int32(i+1), n
		}
	}
	agents[victim-1].Close()
	var fencedAt time.Time
	var fenceOffset uint64
	measureUntil(t, 30*time.Second, "the victim fenced", func() bool {
		active := q.Active()
		if active == nil {
			return false
		}
		img := active.FSM().Image()
		b, _ := img.Broker(victim)
		if b.Fenced {
			fencedAt, fenceOffset = time.Now(), img.Offset
			return true
		}
		return false
	})
	measureUntil(t, time.Minute, "every live broker to apply the fencing", func() bool { return allApplied(agents, &victim, fenceOffset) })
	spread := time.Since(fencedAt)
	img = q.WaitForActive(10 * time.Second).FSM().Image()
	leaderless := 0
	img.PartitionsOnBroker(victim, func(p *fsm.Partition) bool {
		if p.Leader == victim {
			t.Fatalf("partition %d still led by the fenced broker", p.Partition)
		}
		if !p.HasLeader() {
			leaderless++
		}
		return true
	})
	t.Logf("broker-failure: led_partitions=%d fenced_to_applied_by_all_live_brokers=%v leaderless_after=%d",
		led, spread.Round(time.Millisecond), leaderless)
}

func allApplied(agents []*broker.Agent, except *int32, offset uint64) bool {
	for i, a := range agents {
		if except != nil && int32(i+1) == *except {
			continue
		}
		if a.Image().Offset < offset {
			return false
		}
	}
	return true
}

// measureUntil polls cond every millisecond until it holds, failing t at
// timeout: poll.Until with the finer interval a measurement needs, so that
// the time taken when cond first holds is right to the millisecond.
func measureUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := poll.Wait(context.Background(), timeout, time.Millisecond, what, func() (bool, error) { return cond(), nil }); err != nil {
		t.Fatal(err)
	}
}

// startScaleCluster starts a cluster for a measurement: production
// timings, raft dialling directly (no fault proxies) and no automatic
// leader rebalance.
func startScaleCluster(t *testing.T, n int, opts ...keeltest.Option) *keeltest.Cluster {
	t.Helper()
	opts = append([]keeltest.Option{
		keeltest.WithTiming(raftlog.DefaultTiming()),
		keeltest.WithDirectRaft(),
		keeltest.WithTune(func(c *server.NodeConfig) { c.LeaderImbalanceCheckInterval = -1 }),
	}, opts...)
	return keeltest.NewCluster(t, n, opts...)
}
