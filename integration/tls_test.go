package integration

// Mutual TLS: a quorum whose controllers, brokers and clients all hold
// certificates from one throwaway CA, and the clients that must be refused.

import (
	"context"
	"crypto/tls"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest/keelproc"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
	"github.com/keel-dev/keel/tlsauth"
)

// testPKI is a test's CA: it issues a certificate per common name on first
// use, into the test's temp dir (never into the repository).
type testPKI struct {
	t   testing.TB
	dir string
	ca  *tlsauth.CA

	mu    sync.Mutex
	files map[string]tlsauth.Files
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	ca, err := tlsauth.NewCA("keel integration CA")
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{t: t, dir: filepath.Join(t.TempDir(), "tls"), ca: ca, files: map[string]tlsauth.Files{}}
}

// flags are the --tls-* flags of cn's certificate.
func (p *testPKI) flags(cn string) []string { return p.certFiles(cn).Flags() }

func (p *testPKI) certFiles(cn string) tlsauth.Files {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if f, ok := p.files[cn]; ok {
		return f
	}
	f, err := p.ca.WriteFiles(p.dir, cn)
	if err != nil {
		p.t.Fatalf("issue a certificate for %s: %v", cn, err)
	}
	p.files[cn] = f
	return f
}

// config is cn's certificate as a client or server loads it.
func (p *testPKI) config(cn string) *tlsauth.Config {
	p.t.Helper()
	f := p.certFiles(cn)
	c, err := tlsauth.Load(f.Cert, f.Key, f.CA)
	if err != nil {
		p.t.Fatalf("load %s's certificate: %v", cn, err)
	}
	return c
}

// withTLS runs every controller (controller-<id>) and broker (broker-<id>)
// with its own certificate from pki, and the harness's clients and admin
// commands with an admin certificate.
func withTLS(pki *testPKI) clusterOption {
	return func(o *clusterOptions) { o.tls = pki }
}

// tlsFlags are the --tls-* flags for cn, or none without withTLS.
func (o clusterOptions) tlsFlags(cn string) []string {
	if o.tls == nil {
		return nil
	}
	return o.tls.flags(cn)
}

// rpcOptions are the harness clients' options: an admin's TLS, or none.
func (o clusterOptions) rpcOptions() []rpc.Option {
	if o.tls == nil {
		return nil
	}
	return []rpc.Option{rpc.WithTLS(o.tls.config("admin"))}
}

// withoutTLSFlags drops the --tls-* flags and their values from args.
func withoutTLSFlags(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == tlsauth.FlagCert || args[i] == tlsauth.FlagKey || args[i] == tlsauth.FlagCA {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// TestTLS_Cluster runs three controllers and a broker over mutual TLS and
// checks who gets in: raft elects and commits over TLS, and fails over after
// a kill -9; an admin certificate creates a topic; a client without a
// certificate, a plaintext client and a plaintext controller are refused; a
// broker's certificate can neither create topics nor register as another
// broker, and `keel broker` with another broker's certificate is refused.
func TestTLS_Cluster(t *testing.T) {
	pki := newTestPKI(t)
	c := startCluster(t, 3, withTLS(pki), withSessionTimeout(testSessionTimeout))
	leader, _ := c.WaitForActive(t, activeTimeout)
	c.appendNoOp(t, 10*time.Second)
	c.StartBroker(1)
	c.WaitForBrokers(t, allActive(1))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clientWith := func(t *testing.T, opts ...rpc.Option) *rpc.Client {
		t.Helper()
		cl, err := rpc.NewClient(c.Addrs(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	wantCode := func(t *testing.T, err error, code codes.Code, msg string) {
		t.Helper()
		if status.Code(err) != code {
			t.Fatalf("error = %v, want code %v", err, code)
		}
		if msg != "" && !strings.Contains(status.Convert(err).Message(), msg) {
			t.Fatalf("message %q does not contain %q", status.Convert(err).Message(), msg)
		}
	}

	t.Run("an admin certificate creates a topic", func(t *testing.T) {
		_, stderr, code := runKeel(t, 30*time.Second, c.adminArgs("topic", "create", "secure", "--partitions", "2", "--replication-factor", "1")...)
		if code != 0 {
			t.Fatalf("keel topic create: exit status %d: %s", code, strings.TrimSpace(stderr))
		}
		resp, err := c.Client().DescribeTopic(ctx, "secure")
		if err != nil || len(resp.GetTopic().GetPartitions()) != 2 {
			t.Fatalf("DescribeTopic(secure) = %v, %v", resp, err)
		}
		// The broker holds its replicas: its own service answers over TLS.
		c.WaitForInspect(t, []int32{1}, "broker 1 to hold both partitions", func(r *keelpb.InspectResponse) bool { return len(r.GetPartitions()) == 2 })
	})

	t.Run("a client without a certificate is refused", func(t *testing.T) {
		cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pki.config("admin").Client().RootCAs}
		cc, err := grpc.NewClient(c.Addr(leader), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		_, err = keelpb.NewControllerServiceClient(cc).DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{})
		wantCode(t, err, codes.Unavailable, "")
	})

	t.Run("a plaintext client cannot reach the cluster", func(t *testing.T) {
		actx, acancel := context.WithTimeout(ctx, 3*time.Second)
		defer acancel()
		_, err := clientWith(t).ListBrokers(actx)
		wantCode(t, err, codes.Unavailable, "")
		_, stderr, code := runKeel(t, 30*time.Second, "quorum", "status", "--controllers", strings.Join(c.Addrs(), ","), "--timeout", "3s")
		if code == 0 || !strings.Contains(stderr, "Unavailable") {
			t.Fatalf("plaintext keel quorum status: exit status %d, stderr %q; want a failure with Unavailable", code, stderr)
		}
	})

	t.Run("a controller certificate cannot create topics", func(t *testing.T) {
		_, err := clientWith(t, rpc.WithTLS(pki.config("controller-1"))).CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: "not-yours", Partitions: 1, ReplicationFactor: 1})
		wantCode(t, err, codes.PermissionDenied, "CreateTopic needs an admin certificate; the caller's is controller-1")
		if _, err := c.Client().DescribeTopic(ctx, "not-yours"); status.Code(err) != codes.NotFound {
			t.Fatalf("DescribeTopic(not-yours) = %v, want NotFound", err)
		}
	})

	t.Run("a broker cannot register as another id", func(t *testing.T) {
		_, err := clientWith(t, rpc.WithTLS(pki.config("broker-1"))).RegisterBroker(ctx, &keelpb.RegisterBrokerRequest{
			BrokerId: 2, IncarnationId: uuid.NewString(), Address: "127.0.0.1:1",
			MinMetadataVersion: fsm.MinMetadataVersion, MaxMetadataVersion: fsm.MaxMetadataVersion,
		})
		wantCode(t, err, codes.PermissionDenied, "broker_id 2: certificate is for broker 1")
	})

	t.Run("keel broker with another broker's certificate is refused", func(t *testing.T) {
		args := keelproc.BrokerArgs{ID: 2, Listen: freeAddr(t), DataDir: filepath.Join(t.TempDir(), "b2"),
			Controllers: c.Addrs(), Flags: pki.flags("broker-1")}.Build()
		_, stderr, code := runKeel(t, 30*time.Second, args...)
		want := "broker_id 2: certificate is for broker 1"
		if code == 0 || !strings.Contains(stderr, want) {
			t.Fatalf("keel broker --broker-id 2 with broker-1's certificate: exit status %d, stderr ends:\n%s\nwant a failure naming %q",
				code, keelproc.LastLines(stderr, 5), want)
		}
		c.WaitForBrokers(t, allActive(1)) // and no broker 2
	})

	var killed int32
	t.Run("raft fails over over TLS after kill -9", func(t *testing.T) {
		killed = leader
		c.Kill(leader)
		next, _ := c.WaitForActive(t, activeTimeout)
		if next == leader {
			t.Fatalf("node %d still active after kill -9", next)
		}
		c.appendNoOp(t, 10*time.Second)
		c.WaitForBrokers(t, allActive(1))
	})

	t.Run("a plaintext controller cannot join", func(t *testing.T) {
		if killed == 0 {
			t.Skip("no node was killed")
		}
		nd := c.node(killed)
		tlsArgs := nd.Args()
		nd.SetArgs(withoutTLSFlags(tlsArgs))
		c.Start(killed)
		others := without(c.IDs(), killed)
		poll.UntilState(t, 20*time.Second, "the TLS controllers to refuse the plaintext one's raft connections", func() (bool, string) {
			for _, id := range others {
				if strings.Contains(c.node(id).Output(), "refused a raft connection") {
					return true, ""
				}
			}
			return false, "no controller has logged a refusal"
		})
		written := c.appendNoOp(t, 10*time.Second).GetIndex()
		plain, err := rpc.NewClient([]string{nd.Addr()})
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Close()
		cl, err := plain.Controller(nd.Addr())
		if err != nil {
			t.Fatal(err)
		}
		view, err := cl.DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{})
		if err != nil {
			t.Fatalf("DescribeQuorum on the plaintext node: %v", err)
		}
		if view.GetAppliedIndex() >= written || view.GetActive() {
			t.Fatalf("plaintext node: applied %d (the TLS quorum wrote %d), active %v; want it cut off", view.GetAppliedIndex(), written, view.GetActive())
		}

		// With its certificate again it rejoins and catches up.
		c.Stop(killed)
		nd.SetArgs(tlsArgs)
		c.Start(killed)
		c.WaitForConverged(t, c.IDs(), written)
	})
}
