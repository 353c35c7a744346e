package broker

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

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
	"github.com/keel-dev/keel/tlsauth"
)

func tlsConfigs(t *testing.T, names ...string) map[string]*tlsauth.Config {
	t.Helper()
	ca, err := tlsauth.NewCA("keel broker test CA")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*tlsauth.Config{}
	for _, n := range names {
		if out[n], err = ca.Config(n); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestAgent_ReplicatesOverTLS is TestAgent_ReplicatesThroughTheControllers
// with mutual TLS everywhere: registration, heartbeats and the stream to the
// controller, the follower's fetches to its leader, and the leader's
// AlterPartition; each broker holds its own certificate.
func TestAgent_ReplicatesOverTLS(t *testing.T) {
	certs := tlsConfigs(t, "controller-1", "broker-1", "broker-2", "admin")
	c := newFakeClusterWith(t, 1, rpc.ServerOptions(rpc.WithTLS(certs["controller-1"]))...)
	agents := map[int32]*Agent{}
	for _, id := range []int32{1, 2} {
		cert := certs[fmt.Sprintf("broker-%d", id)]
		agents[id] = startAgent(t, c, func(cfg *Config) {
			cfg.BrokerID = id
			cfg.TLS = cert
			rm, err := NewReplicaManager(ReplicaManagerConfig{FetchInterval: 10 * time.Millisecond, LagTimeMax: 300 * time.Millisecond, Logger: testLogger(t), TLS: cert})
			if err != nil {
				t.Fatal(err)
			}
			cfg.DataPlane = rm
		})
	}
	for id, a := range agents {
		poll.Until(t, waitTimeout, fmt.Sprintf("broker %d to be active", id), inSync(a, c))
	}
	c.append(topicRec("t", topicT), partitionRec(topicT, 0, []int32{1, 2}, []int32{1}, 1))
	poll.Until(t, waitTimeout, "broker 2 to join the ISR (its fetches and broker 1's AlterPartition over TLS)", func() bool {
		p, ok := c.image().Partition(topicT, 0)
		return ok && slices.Equal(p.ISR, []int32{1, 2})
	})

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
	cl, err := DialLeader(agents[1].Addr(), credentials.NewTLS(certs["broker-2"].Client(tlsauth.RoleBroker)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_, err = cl.Fetch(ctx, &keelpb.FetchRequest{ReplicaId: 3, TopicId: topicT.String()})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "replica_id 3: certificate is for broker 2") {
		t.Fatalf("Fetch as replica 3 with broker-2's certificate = %v, want PermissionDenied naming replica_id", err)
	}
	// Nor may an admin fetch as broker 2: its fetches would move broker 2
	// into the ISR while it holds nothing.
	ac, err := DialLeader(agents[1].Addr(), credentials.NewTLS(certs["admin"].Client(tlsauth.RoleBroker)))
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	_, err = ac.Fetch(ctx, &keelpb.FetchRequest{ReplicaId: 2, TopicId: topicT.String()})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "the caller's is admin") {
		t.Fatalf("Fetch as replica 2 with an admin's certificate = %v, want PermissionDenied", err)
	}
}

// TestAgent_TLSCertificateOfAnotherBroker: a broker whose certificate is
// another broker's is refused by the controllers and stops, saying why.
func TestAgent_TLSCertificateOfAnotherBroker(t *testing.T) {
	certs := tlsConfigs(t, "controller-1", "broker-1")
	c := newFakeClusterWith(t, 1, rpc.ServerOptions(rpc.WithTLS(certs["controller-1"]))...)
	a := startAgent(t, c, func(cfg *Config) {
		cfg.BrokerID = 2
		cfg.TLS = certs["broker-1"]
	})
	select {
	case err := <-a.Fatal():
		want := "the controllers refused broker 2's registration: broker_id 2: certificate is for broker 1"
		if err.Error() != want {
			t.Fatalf("fatal error %q, want %q", err, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not stop")
	}
	if regs := c.registrationCalls(); len(regs) != 0 {
		t.Fatalf("the controller saw %d registrations, want none", len(regs))
	}
}
