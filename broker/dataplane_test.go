package broker_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/broker/replication"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
	"github.com/keel-dev/keel/tlsauth"
)

// startReplicatingAgents starts brokers 1 and 2 against c, each with the
// reference broker's data plane (broker/replication) in its data dir, as
// `keel broker` runs them: a follower drops out of the ISR after 300ms
// without catching up. certs, when set, holds each broker's certificate by
// name (broker-<id>).
func startReplicatingAgents(t *testing.T, c *broker.FakeCluster, certs map[string]*tlsauth.Config) map[int32]*broker.Agent {
	t.Helper()
	agents := map[int32]*broker.Agent{}
	for _, id := range []int32{1, 2} {
		agents[id] = broker.StartAgent(t, c, func(cfg *broker.Config) {
			cfg.BrokerID = id
			cfg.TLS = certs[fmt.Sprintf("broker-%d", id)]
			m, err := replication.New(replication.Config{DataDir: cfg.DataDir, ReplicaLagTimeMax: 300 * time.Millisecond,
				FetchMaxWait: 10 * time.Millisecond, FetchBackoff: 10 * time.Millisecond,
				Logger: broker.TestLogger(t).With("broker", id), TLS: cfg.TLS})
			if err != nil {
				t.Fatal(err)
			}
			cfg.DataPlane = m
		})
	}
	for id, a := range agents {
		poll.Until(t, broker.WaitTimeout, fmt.Sprintf("broker %d to be active", id), broker.InSync(a, c))
	}
	return agents
}

func isrIs(c *broker.FakeCluster, isr ...int32) func() bool {
	return func() bool {
		p, ok := c.Image().Partition(broker.TopicT, 0)
		return ok && slices.Equal(p.ISR, isr)
	}
}

// TestAgent_ReplicatesThroughTheControllers runs two brokers with the
// reference data plane over gRPC: the follower's fetches reach the leader,
// whose AlterPartition reaches the controllers, and a follower that stops
// is dropped from the ISR.
func TestAgent_ReplicatesThroughTheControllers(t *testing.T) {
	c := broker.NewFakeCluster(t, 1)
	agents := startReplicatingAgents(t, c, nil)
	c.Append(broker.TopicRec("t", broker.TopicT), broker.PartitionRec(broker.TopicT, 0, []int32{1, 2}, []int32{1}, 1))
	poll.Until(t, broker.WaitTimeout, "broker 2 to join the ISR", isrIs(c, 1, 2))
	alters := c.AlterCalls()
	if r := alters[0]; r.BrokerId != 1 || r.BrokerEpoch != agents[1].Status().BrokerEpoch || r.TopicId != broker.TopicT.String() ||
		r.Partition != 0 || r.LeaderEpoch != 0 || r.PartitionEpoch != 0 || !slices.Equal(r.NewIsr, []int32{1, 2}) {
		t.Fatalf("AlterPartition = %v", r)
	}
	// KIP-903: each member with its broker epoch.
	if m := alters[0].NewIsrWithEpochs; len(m) != 2 ||
		m[0].BrokerId != 1 || m[0].BrokerEpoch != agents[1].Status().BrokerEpoch ||
		m[1].BrokerId != 2 || m[1].BrokerEpoch != agents[2].Status().BrokerEpoch {
		t.Fatalf("AlterPartition new_isr_with_epochs = %v; want brokers 1 and 2 at epochs %d and %d",
			m, agents[1].Status().BrokerEpoch, agents[2].Status().BrokerEpoch)
	}

	want := map[int32]string{
		1: "t-0 leader leader=1 epoch=0 isr=[1 2]",
		2: "t-0 follower leader=1 epoch=0 isr=[1 2]",
	}
	for id, a := range agents {
		poll.Until(t, broker.WaitTimeout, fmt.Sprintf("broker %d to apply the ISR change", id), broker.InSync(a, c))
		if got := broker.DescribeReplicas(broker.Inspect(t, a).Partitions); got != want[id] {
			t.Fatalf("broker %d inspect: %s, want %s", id, got, want[id])
		}
	}

	// Broker 2 stops without a word: broker 1 drops it after lag max.
	if err := agents[2].Close(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, broker.WaitTimeout, "broker 1 to drop broker 2 from the ISR", isrIs(c, 1))
}

// TestAgent_ReplicatesOverTLS is TestAgent_ReplicatesThroughTheControllers
// with mutual TLS everywhere: registration, heartbeats and the stream to the
// controller, the follower's fetches to its leader, and the leader's
// AlterPartition; each broker holds its own certificate.
func TestAgent_ReplicatesOverTLS(t *testing.T) {
	certs := broker.TLSConfigs(t, "controller-1", "broker-1", "broker-2", "admin")
	c := broker.NewFakeClusterWith(t, 1, rpc.ServerOptions(rpc.WithTLS(certs["controller-1"]))...)
	agents := startReplicatingAgents(t, c, certs)
	c.Append(broker.TopicRec("t", broker.TopicT), broker.PartitionRec(broker.TopicT, 0, []int32{1, 2}, []int32{1}, 1))
	poll.Until(t, broker.WaitTimeout, "broker 2 to join the ISR (its fetches and broker 1's AlterPartition over TLS)", isrIs(c, 1, 2))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// An admin inspects a broker over TLS; a plaintext client cannot.
	bc, err := rpc.DialBroker(agents[1].Addr(), rpc.WithTLS(certs["admin"]))
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	if resp, err := bc.Inspect(ctx); err != nil || resp.GetBrokerId() != 1 {
		t.Fatalf("admin Inspect = %v, %v", resp, err)
	}
	plain, err := rpc.DialBroker(agents[1].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Inspect(ctx); status.Code(err) != codes.Unavailable {
		t.Fatalf("plaintext Inspect = %v, want Unavailable", err)
	}
	// Broker 2 may fetch as itself only.
	cl, err := broker.DialLeader(agents[1].Addr(), credentials.NewTLS(certs["broker-2"].Client(tlsauth.RoleBroker)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_, err = cl.Fetch(ctx, &keelpb.FetchRequest{ReplicaId: 3, TopicId: broker.TopicT.String()})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "replica_id 3: certificate is for broker 2") {
		t.Fatalf("Fetch as replica 3 with broker-2's certificate = %v, want PermissionDenied naming replica_id", err)
	}
	// Nor may an admin fetch as broker 2: its fetches would move broker 2
	// into the ISR while it holds nothing.
	ac, err := broker.DialLeader(agents[1].Addr(), credentials.NewTLS(certs["admin"].Client(tlsauth.RoleBroker)))
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	_, err = ac.Fetch(ctx, &keelpb.FetchRequest{ReplicaId: 2, TopicId: broker.TopicT.String()})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "the caller's is admin") {
		t.Fatalf("Fetch as replica 2 with an admin's certificate = %v, want PermissionDenied", err)
	}
}
