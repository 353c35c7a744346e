package server_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/keeltest"
	"github.com/keel-dev/keel/proto/keelpb"
)

// BenchmarkNoOpAnswer is the latency of a write that changes nothing (the
// create of a topic that exists, answered ErrTopicExists) on the active
// controller of a three-node quorum over loopback, at production raft
// timings and without fault proxies, beside a write that writes (a no-op
// record) for scale: one caller at a time, and 16 callers at once. It
// reports each call's median and 99th percentile (p50_ms, p99_ms).
func BenchmarkNoOpAnswer(b *testing.B) {
	_, leader := startCluster(b, 3, keeltest.WithDirectRaft())
	ctrl := leader.Controller()
	ctx := context.Background()
	resp, err := ctrl.RegisterBroker(ctx, &keelpb.RegisterBrokerRequest{BrokerId: 1, IncarnationId: "00000000-0000-0000-0000-00000000000a",
		Address: "127.0.0.1:9201", MinMetadataVersion: fsm.MinMetadataVersion, MaxMetadataVersion: fsm.MaxMetadataVersion})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := ctrl.BrokerHeartbeat(ctx, &keelpb.BrokerHeartbeatRequest{BrokerId: 1, BrokerEpoch: resp.BrokerEpoch, MetadataOffset: uint64(resp.BrokerEpoch)}); err != nil {
		b.Fatal(err)
	}
	create := &keelpb.CreateTopicRequest{Name: "exists", Assignments: []*keelpb.PartitionAssignment{{Replicas: []int32{1}}}}
	if _, err := ctrl.CreateTopic(ctx, create); err != nil {
		b.Fatal(err)
	}
	calls := map[string]func() error{
		"create_existing": func() error {
			if _, err := ctrl.CreateTopic(ctx, create); !errors.Is(err, controller.ErrTopicExists) {
				return err
			}
			return nil
		},
		"write": func() error {
			_, err := ctrl.Propose(ctx, noOps(1)...)
			return err
		},
	}
	for _, name := range []string{"create_existing", "write"} {
		call := calls[name]
		for _, callers := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/callers=%d", name, callers), func(b *testing.B) {
				var (
					mu   sync.Mutex
					took []time.Duration
					wg   sync.WaitGroup
					errs = make(chan error, callers)
				)
				b.ResetTimer()
				for w := range callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var mine []time.Duration
						for i := w; i < b.N; i += callers {
							start := time.Now()
							if err := call(); err != nil {
								errs <- err
								return
							}
							mine = append(mine, time.Since(start))
						}
						mu.Lock()
						took = append(took, mine...)
						mu.Unlock()
					}()
				}
				wg.Wait()
				b.StopTimer()
				close(errs)
				if err := <-errs; err != nil {
					b.Fatal(err)
				}
				slices.Sort(took)
				b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50_ms")
				b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99_ms")
			})
		}
	}
}
