package node_test

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/broker/kafka"
	"github.com/keel-dev/keel/broker/node"
	"github.com/keel-dev/keel/broker/replication"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest"
	"github.com/keel-dev/keel/keeltest/keelproc"
	"github.com/keel-dev/keel/proto/keelpb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitTimeout bounds the waits for the broker and the quorum: far above
// what they take on a loaded machine under -race.
const waitTimeout = 15 * time.Second

func agentConfig(controllers []string, dir string, reg prometheus.Registerer) broker.Config {
	return broker.Config{BrokerID: 1, Listen: "127.0.0.1:0", DataDir: dir, Controllers: controllers,
		HeartbeatInterval: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), Metrics: reg}
}

// brokerInfo is broker 1 as the controllers list it; nil while it is not
// registered.
func brokerInfo(t *testing.T, c *keeltest.Cluster) *keelpb.BrokerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Client().ListBrokers(ctx)
	if err != nil {
		return nil
	}
	for _, b := range resp.GetBrokers() {
		if b.GetId() == 1 {
			return b
		}
	}
	return nil
}

// checkPortsClosed fails t if n's gRPC or Kafka port still accepts
// connections once stop (Shutdown, Close) has returned.
func checkPortsClosed(t *testing.T, n *node.Node, stop string) {
	t.Helper()
	for _, addr := range []string{n.Addr(), n.KafkaAddr()} {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			t.Errorf("%s still accepts connections after %s", addr, stop)
		}
	}
}

func gathered(t *testing.T, reg *prometheus.Registry) map[string]bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	return names
}

// TestNode_StartServeShutdown: a node registers its broker with the
// controllers under the Kafka address it bound, serves Kafka clients from
// the agent's image, puts the metrics of all three parts on one registry,
// and a controlled shutdown fences the broker and frees both its ports.
func TestNode_StartServeShutdown(t *testing.T) {
	c := keeltest.NewCluster(t, 1)
	c.WaitForActive(waitTimeout)
	reg := prometheus.NewRegistry()
	n, err := node.Start(node.Config{
		Agent:       agentConfig(c.Addrs(), t.TempDir(), reg),
		Replication: replication.Config{ScrubBytesPerSecond: replication.DefaultScrubBytesPerSecond},
		KafkaListen: "127.0.0.1:0",
		Kafka:       kafka.Config{FetchMaxWait: 100 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close() // after a failure; Close after Shutdown does nothing
	if n.KafkaAddr() == "" || strings.HasSuffix(n.KafkaAddr(), ":0") {
		t.Fatalf("KafkaAddr() = %q, want the bound address", n.KafkaAddr())
	}
	poll.Until(t, waitTimeout, "the broker to be ready", func() bool { return n.Ready() == nil })
	b := brokerInfo(t, c)
	if b == nil || b.GetAddress() != n.Addr() || b.GetKafkaAddress() != n.KafkaAddr() || b.GetState() != "active" {
		t.Fatalf("registered %v, want broker 1 active at %s, kafka %s", b, n.Addr(), n.KafkaAddr())
	}

	// A Kafka client's Metadata answer comes from the agent's image.
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	cl.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Brokers) != 1 || resp.Brokers[0].NodeID != 1 || net.JoinHostPort(resp.Brokers[0].Host, strconv.Itoa(int(resp.Brokers[0].Port))) != n.KafkaAddr() {
		t.Fatalf("Metadata brokers = %+v, want broker 1 at %s", resp.Brokers, n.KafkaAddr())
	}

	got := gathered(t, reg)
	for _, name := range []string{broker.MetricBrokerEpoch, replication.MetricScrubBytes, kafka.MetricRequestDuration} {
		if !got[name] {
			t.Errorf("metric %s is not on the node's registry", name)
		}
	}

	sctx, scancel := context.WithTimeout(context.Background(), waitTimeout)
	defer scancel()
	if err := n.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	poll.Until(t, waitTimeout, "the broker fenced", func() bool {
		b := brokerInfo(t, c)
		return b != nil && b.GetState() == "fenced"
	})
	checkPortsClosed(t, n, "Shutdown")
}

// TestNode_Close: Close stops a broker as a crash would (no controlled
// shutdown), its Kafka listener included.
func TestNode_Close(t *testing.T) {
	c := keeltest.NewCluster(t, 1)
	c.WaitForActive(waitTimeout)
	n, err := node.Start(node.Config{Agent: agentConfig(c.Addrs(), t.TempDir(), nil), KafkaListen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitTimeout, "the broker to be ready", func() bool { return n.Ready() == nil })
	if err := n.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	checkPortsClosed(t, n, "Close")
}

// TestNode_NoKafkaListener: without KafkaListen the broker registers no
// Kafka address and serves none.
func TestNode_NoKafkaListener(t *testing.T) {
	c := keeltest.NewCluster(t, 1)
	c.WaitForActive(waitTimeout)
	n, err := node.Start(node.Config{Agent: agentConfig(c.Addrs(), t.TempDir(), nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	poll.Until(t, waitTimeout, "the broker to be ready", func() bool { return n.Ready() == nil })
	if b := brokerInfo(t, c); b == nil || b.GetKafkaAddress() != "" || n.KafkaAddr() != "" {
		t.Fatalf("registered %v, KafkaAddr() %q: want no Kafka address", b, n.KafkaAddr())
	}
}

// TestStart_Refusals: a start that fails says why in one line and leaves
// nothing running: the Kafka port it bound is free again (goleak checks
// the goroutines).
func TestStart_Refusals(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	frees, err := keelproc.FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	free := frees[0]
	controllers := []string{"127.0.0.1:1"} // never dialled: every start fails first
	tests := []struct {
		name string
		cfg  func(dir string) node.Config
		want string
	}{
		{"advertise without listen", func(dir string) node.Config {
			return node.Config{Agent: agentConfig(controllers, dir, nil), KafkaAdvertise: "127.0.0.1:9092"}
		}, "--kafka-advertise 127.0.0.1:9092 without --kafka-listen"},
		{"wildcard kafka listen", func(dir string) node.Config {
			return node.Config{Agent: agentConfig(controllers, dir, nil), KafkaListen: "0.0.0.0:0"}
		}, "is a wildcard address: give --kafka-advertise"},
		{"kafka port taken", func(dir string) node.Config {
			return node.Config{Agent: agentConfig(controllers, dir, nil), KafkaListen: taken.Addr().String()}
		}, "--kafka-listen " + taken.Addr().String()},
		{"agent port taken", func(dir string) node.Config {
			cfg := node.Config{Agent: agentConfig(controllers, dir, nil), KafkaListen: free}
			cfg.Agent.Listen = taken.Addr().String()
			return cfg
		}, "listen on " + taken.Addr().String()},
		{"bad replication config", func(dir string) node.Config {
			return node.Config{Agent: agentConfig(controllers, dir, nil), Replication: replication.Config{ScrubBytesPerSecond: -1}}
		}, "scrub rate -1 bytes per second is negative"},
		{"bad kafka config", func(dir string) node.Config {
			return node.Config{Agent: agentConfig(controllers, dir, nil), KafkaListen: free, Kafka: kafka.Config{FetchMaxWait: -1}}
		}, "kafka listener: negative limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := node.Start(tt.cfg(t.TempDir()))
			if err == nil {
				n.Close()
				t.Fatalf("Start succeeded, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Start: %q, want one line with %q", err, tt.want)
			}
			// The Kafka port a failed start bound is free again.
			lis, err := net.Listen("tcp", free)
			if err != nil {
				t.Fatalf("the Kafka port %s is still held: %v", free, err)
			}
			lis.Close()
		})
	}
}
