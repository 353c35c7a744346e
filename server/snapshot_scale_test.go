package server_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/keeltest"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/server"
)

// TestSnapshotScale measures, for P partitions (RF 3) over 100 brokers: the
// heap per partition of a controller, the size of a snapshot and the time to
// save it from the running quorum, and the time for a new quorum to start
// from it (--restore-from) until its active controller holds every
// partition. It runs only when KEEL_BENCH_SNAPSHOT is set (make
// bench-snapshot): a measurement, not a test.
func TestSnapshotScale(t *testing.T) {
	total, _ := strconv.Atoi(os.Getenv("KEEL_BENCH_SNAPSHOT"))
	if total <= 0 {
		t.Skip("set KEEL_BENCH_SNAPSHOT=1000000 to measure")
	}
	const brokers, perTopic = 100, 10_000
	// No broker heartbeats here: nobody is fenced.
	q := startScaleCluster(t, 3, keeltest.WithSessionTimeout(time.Hour))
	client := q.Client()
	ctx := context.Background()
	q.WaitForActive(10 * time.Second)
	for i := range brokers {
		id := int32(i + 1)
		resp, err := client.RegisterBroker(ctx, &keelpb.RegisterBrokerRequest{BrokerId: id, IncarnationId: uuid.NewString(),
			Address: fmt.Sprintf("127.0.0.1:%d", 20000+i), Rack: fmt.Sprintf("r%d", i%3), MinMetadataVersion: fsm.MinMetadataVersion, MaxMetadataVersion: fsm.MaxMetadataVersion})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.BrokerHeartbeat(ctx, &keelpb.BrokerHeartbeatRequest{BrokerId: id, BrokerEpoch: resp.BrokerEpoch, MetadataOffset: uint64(resp.BrokerEpoch)}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for n, i := 0, 0; n < total; i++ {
		p := min(perTopic, total-n)
		if _, err := client.CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: fmt.Sprintf("t%d", i), Partitions: int32(p), ReplicationFactor: 3}); err != nil {
			t.Fatalf("create t%d: %v", i, err)
		}
		n += p
	}
	t.Logf("created %d partitions over %d brokers in %v", total, brokers, time.Since(start).Round(time.Millisecond))
	heap := heapInUse()
	t.Logf("heap: %d MiB in use for 3 controllers = %.0f bytes per partition per controller", heap>>20, float64(heap)/3/float64(total))

	path := filepath.Join(t.TempDir(), "keel.snap")
	start = time.Now()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.FetchSnapshot(ctx, func() (io.Writer, error) {
		if err := f.Truncate(0); err != nil {
			return nil, err
		}
		_, err := f.Seek(0, io.SeekStart)
		return f, err
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	fetched := time.Since(start)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	info, err := fsm.VerifySnapshot(f)
	if err != nil {
		t.Fatal(err)
	}
	saved := time.Since(start)
	st, _ := f.Stat()
	f.Close()
	t.Logf("snapshot: partitions=%d size=%.1f MiB (%.0f bytes per partition) fetched=%v fetched+verified=%v",
		info.Partitions, float64(st.Size())/(1<<20), float64(st.Size())/float64(total), fetched.Round(time.Millisecond), saved.Round(time.Millisecond))
	q.Close() // its memory and CPU are not the new quorum's to share

	start = time.Now()
	q2 := startScaleCluster(t, 3, keeltest.WithSessionTimeout(time.Hour),
		keeltest.WithTune(func(c *server.NodeConfig) { c.RestoreFrom = path }))
	measureUntil(t, 5*time.Minute, "the new quorum to hold every partition", func() bool {
		a := q2.Active()
		return a != nil && a.FSM().Image().PartitionCount() == total
	})
	t.Logf("load: new quorum from the snapshot to an active controller holding %d partitions in %v", total, time.Since(start).Round(time.Millisecond))
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
