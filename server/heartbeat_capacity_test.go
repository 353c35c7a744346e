package server_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/keeltest"
	"github.com/keel-dev/keel/proto/keelpb"
)

// TestHeartbeatCapacity measures heartbeat latency at the active controller
// for growing numbers of simulated brokers, each on its own schedule at the
// default 2 s interval, over real gRPC against a real 3-node quorum. It runs
// only when KEEL_BENCH_HEARTBEATS lists broker counts (make bench-heartbeats):
// timing on a shared machine is a measurement, not a test.
func TestHeartbeatCapacity(t *testing.T) {
	spec := os.Getenv("KEEL_BENCH_HEARTBEATS")
	if spec == "" {
		t.Skip("set KEEL_BENCH_HEARTBEATS=100,1000,... to measure heartbeat capacity")
	}
	const interval = 2 * time.Second
	rounds := 4
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			t.Fatalf("KEEL_BENCH_HEARTBEATS: bad count %q", f)
		}
		t.Run(fmt.Sprintf("brokers=%d", n), func(t *testing.T) {
			_, active := startCluster(t, 3, keeltest.WithDirectRaft())
			lat := measureHeartbeats(t, active.Addr(), n, interval, rounds)
			slices.Sort(lat)
			p := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))] }
			t.Logf("heartbeats: brokers=%d interval=%v samples=%d p50=%v p99=%v max=%v",
				n, interval, len(lat), p(0.50).Round(10*time.Microsecond), p(0.99).Round(10*time.Microsecond), lat[len(lat)-1].Round(10*time.Microsecond))
		})
	}
}

// measureHeartbeats registers n brokers, each of which starts heartbeating
// every interval (from its own phase) as soon as it is registered, as a real
// broker does; once all are registered and a full interval has passed, it
// records the latency of every heartbeat for rounds intervals.
func measureHeartbeats(t *testing.T, addr string, n int, interval time.Duration, rounds int) []time.Duration {
	t.Helper()
	const brokersPerConn = 50
	var conns []*grpc.ClientConn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	clients := make([]keelpb.ControllerServiceClient, n)
	for i := range clients {
		if i%brokersPerConn == 0 {
			cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, cc)
		}
		clients[i] = keelpb.NewControllerServiceClient(conns[len(conns)-1])
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var (
		mu        sync.Mutex
		lat       []time.Duration
		measuring atomic.Bool
		failures  atomic.Int64
		wg        sync.WaitGroup
	)
	heartbeat := func(i int, epoch int64, offset uint64) {
		defer wg.Done()
		phase := time.Duration(i) * interval / time.Duration(n)
		next := time.Now().Truncate(interval).Add(phase)
		for ctx.Err() == nil {
			next = next.Add(interval)
			time.Sleep(time.Until(next))
			t0 := time.Now()
			resp, err := clients[i].BrokerHeartbeat(ctx, &keelpb.BrokerHeartbeatRequest{BrokerId: int32(i + 1), BrokerEpoch: epoch, MetadataOffset: offset})
			d := time.Since(t0)
			if ctx.Err() != nil {
				return
			}
			if err != nil || resp.IsFenced {
				failures.Add(1)
				continue
			}
			if measuring.Load() {
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		}
	}
	for i := range n {
		resp, err := clients[i].RegisterBroker(ctx, &keelpb.RegisterBrokerRequest{
			BrokerId: int32(i + 1), IncarnationId: uuid.NewString(), Address: fmt.Sprintf("127.0.0.1:%d", 10000+i),
			MinMetadataVersion: fsm.MinMetadataVersion, MaxMetadataVersion: fsm.MaxMetadataVersion})
		if err != nil {
			t.Fatalf("register broker %d: %v", i+1, err)
		}
		if _, err := clients[i].BrokerHeartbeat(ctx, &keelpb.BrokerHeartbeatRequest{
			BrokerId: int32(i + 1), BrokerEpoch: resp.BrokerEpoch, MetadataOffset: uint64(resp.BrokerEpoch)}); err != nil {
			t.Fatalf("unfence broker %d: %v", i+1, err)
		}
		wg.Add(1)
		go heartbeat(i, resp.BrokerEpoch, uint64(resp.BrokerEpoch))
	}
	time.Sleep(interval) // let every broker settle into its schedule
	failures.Store(0)
	measuring.Store(true)
	time.Sleep(time.Duration(rounds) * interval)
	measuring.Store(false)
	stop()
	wg.Wait()
	if f := failures.Load(); f > 0 {
		t.Errorf("%d heartbeats failed or found their broker fenced while measuring", f)
	}
	if len(lat) == 0 {
		t.Fatal("no heartbeat succeeded")
	}
	return lat
}
