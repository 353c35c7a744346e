package integration

// A broker's Kafka port had no bound on its connections: about 20,000 idle
// connections with no certificate took a broker to its open-files limit,
// its next segment roll failed ("too many open files") and it stopped.
// Here the broker's limit is lowered to 1,024 so that a flood of a few
// hundred connections proves the same.

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/tlsauth"
)

// withKeel runs every process of the cluster with exe instead of the keel
// binary.
func withKeel(exe string) clusterOption {
	return func(o *clusterOptions) { o.cfg.Keel = exe }
}

// limitedKeel is an executable that runs keel, with the open-files limit
// (soft and hard, so that Go cannot raise it) lowered to files for `keel
// broker`.
func limitedKeel(t *testing.T, files int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keel-limited")
	script := fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = broker ]; then ulimit -n %d || exit 1; fi\nexec '%s' \"$@\"\n", files, keelBin)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// connFlood keeps connections open to an address from loopback source
// addresses, sending nothing, as clients with no certificate would: each
// is dialed again once the server closes it.
type connFlood struct {
	dialed, refused atomic.Int64 // refused: closed within a second
	cancel          context.CancelFunc
	wg              sync.WaitGroup
	mu              sync.Mutex
	open            map[net.Conn]struct{}
}

// startFlood keeps n connections open to addr, spread over srcs (local
// addresses such as 127.0.0.2: Linux routes all of 127/8 to loopback),
// until stop or the end of the test.
func startFlood(t *testing.T, addr string, srcs []string, n int) *connFlood {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &connFlood{cancel: cancel, open: map[net.Conn]struct{}{}}
	t.Cleanup(f.stop)
	for i := range n {
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(srcs[i%len(srcs)])}}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for ctx.Err() == nil {
				c, err := d.DialContext(ctx, "tcp", addr)
				if err == nil {
					f.dialed.Add(1)
					f.hold(ctx, c)
				}
				// A flood redials at once; a pause keeps the test's own
				// goroutines from spinning on the two cores it shares.
				select {
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
	}
	return f
}

// hold keeps c open until the server closes it or the flood stops.
func (f *connFlood) hold(ctx context.Context, c net.Conn) {
	f.mu.Lock()
	if ctx.Err() != nil {
		f.mu.Unlock()
		c.Close()
		return
	}
	f.open[c] = struct{}{}
	f.mu.Unlock()
	opened := time.Now()
	_, _ = c.Read(make([]byte, 1)) // the server sends nothing before closing
	if time.Since(opened) < time.Second && ctx.Err() == nil {
		f.refused.Add(1)
	}
	f.mu.Lock()
	delete(f.open, c)
	f.mu.Unlock()
	c.Close()
}

func (f *connFlood) stop() {
	f.cancel()
	f.mu.Lock()
	for c := range f.open {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// segmentFiles counts the segments (.log files) under dir.
func segmentFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".log") {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestKafkaFlood_StrangersLeaveTheBrokerServing: with its open-files limit
// at 1,024, a broker's Kafka port is flooded with 1,200 connections that
// never start TLS, from four source addresses, redialed as they are
// closed. An acks=all producer connected before keeps producing through
// it, its log rolling segment after segment; every record is read back;
// the broker never stops, never nears its limit, and counts the refusals.
// Before the port was bounded the broker ran out of descriptors and
// stopped at its next roll.
func TestKafkaFlood_StrangersLeaveTheBrokerServing(t *testing.T) {
	const (
		files     = 1024
		floodSize = 1200
		before    = 16  // records produced before the flood
		during    = 320 // and during it: 20 segments of 1 MiB
		valueSize = 64 << 10
		topic     = "flooded"
	)
	pki := newTestPKI(t)
	c := startCluster(t, 1, withTLS(pki), withSessionTimeout(testSessionTimeout), withKeel(limitedKeel(t, files)))
	c.WaitForActive(t, activeTimeout)
	kafka := map[int32]string{1: freeAddrs(t, 1)[0]}
	c.StartBroker(1, withBrokerMetrics(), withBrokerFlags("--kafka-listen="+kafka[1]))
	c.WaitForBrokers(t, allActive(1))
	c.createTopic(t, topic, "--partitions", "1", "--replication-factor", "1", "--config", "segment.bytes=1048576")
	pid := c.broker(1).Pid()

	admin := pki.config("admin")
	tlsOpt := kgo.DialTLSConfig(admin.Client(tlsauth.RoleBroker))
	// The producer keeps its connections for the whole test: it is
	// connected before the flood, as a broker's clients are.
	cl := kafkaClient(t, kafka, tlsOpt, kgo.DefaultProduceTopic(topic), kgo.ConnIdleTimeout(15*time.Minute),
		kgo.ProducerBatchCompression(kgo.NoCompression())) // every byte reaches the log

	value := strings.Repeat("v", valueSize)
	produce := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("%06d-%s", i, value))}).FirstErr()
			cancel()
			if err != nil {
				t.Fatalf("produce record %d: %v (the broker is running: %v)", i, err, c.BrokerRunning(1))
			}
		}
	}
	produce(0, before)

	srcs := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}
	start := time.Now()
	flood := startFlood(t, kafka[1], srcs, floodSize)
	poll.UntilState(t, 60*time.Second, fmt.Sprintf("%d connections dialed", floodSize), func() (bool, string) {
		return flood.dialed.Load() >= floodSize, fmt.Sprintf("%d dialed", flood.dialed.Load())
	})
	t.Logf("the flood dialed %d connections in %v", flood.dialed.Load(), time.Since(start).Round(time.Millisecond))

	segsBefore := segmentFiles(t, c.BrokerDataDir(1))
	peakFDs := 0
	for i := before; i < before+during; i += 32 {
		produce(i, i+32)
		peakFDs = max(peakFDs, openFDs(t, pid))
	}
	rolled := segmentFiles(t, c.BrokerDataDir(1)) - segsBefore
	t.Logf("during the flood (%d dialed, %d refused within a second): %d records produced, %d segments rolled, the broker's descriptors peaked at %d of %d",
		flood.dialed.Load(), flood.refused.Load(), during, rolled, peakFDs, files)
	if rolled < during*valueSize/(1<<20)/2 {
		t.Errorf("%d segments rolled during the flood; want about %d", rolled, during*valueSize/(1<<20))
	}
	if peakFDs > files*3/4 {
		t.Errorf("the broker held %d descriptors of its %d: the reserve for its logs was taken", peakFDs, files)
	}

	// The refusals are counted, by bound.
	https := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: admin.Client()}}
	defer https.CloseIdleConnections()
	url := "https://" + c.broker(1).MetricsAddr() + "/metrics"
	refused := func(s scrape, reason string) float64 {
		return s[fmt.Sprintf("keel_listener_connections_refused_total{listener=%q,reason=%q}", "kafka", reason)]
	}
	poll.UntilState(t, 20*time.Second, "the Kafka listener's refusals counted", func() (bool, string) {
		s, err := scrapeURL(https, url)
		if err != nil {
			return false, err.Error()
		}
		listener, source, unauth := refused(s, "listener"), refused(s, "source"), refused(s, "unauthenticated")
		open := s[`keel_listener_connections{listener="kafka"}`]
		return listener+source+unauth > 0, fmt.Sprintf("refused: %v over the listener's bound, %v over a source's, %v unauthenticated; %v open",
			listener, source, unauth, open)
	})
	flood.stop()

	if !c.BrokerRunning(1) {
		t.Fatal("the broker stopped during the flood")
	}
	hw := highWatermarks(t, cl, topic, 1)
	if hw[0] != before+during {
		t.Fatalf("high watermark %d; want %d, every record acknowledged", hw[0], before+during)
	}
	read := consumeAll(t, kafka, topic, hw, tlsOpt)[0]
	if len(read) != before+during {
		t.Fatalf("read %d records; want %d", len(read), before+during)
	}
	for i, r := range read {
		if r.offset != int64(i) || !strings.HasPrefix(r.value, fmt.Sprintf("%06d-", i)) {
			t.Fatalf("record %d: offset %d, value %.10q...; want offset %d, value %06d-...", i, r.offset, r.value, i, i)
		}
	}
}
