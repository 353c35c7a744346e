package rpc

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/proto/keelpb"
)

// brokerFacingController answers the calls brokers make.
type brokerFacingController struct {
	keelpb.UnimplementedControllerServiceServer
	hint      string // when set, refuse writes with a leader hint to it
	lists     atomic.Int32
	registers atomic.Int32
	brokers   []*keelpb.BrokerInfo
}

func (f *brokerFacingController) RegisterBroker(_ context.Context, req *keelpb.RegisterBrokerRequest) (*keelpb.RegisterBrokerResponse, error) {
	f.registers.Add(1)
	if f.hint != "" {
		return nil, withHint(status.New(codes.FailedPrecondition, "not the leader"), 1, f.hint)
	}
	return &keelpb.RegisterBrokerResponse{BrokerEpoch: 9, ClusterId: "c"}, nil
}

func (f *brokerFacingController) BrokerHeartbeat(_ context.Context, req *keelpb.BrokerHeartbeatRequest) (*keelpb.BrokerHeartbeatResponse, error) {
	if req.BrokerEpoch != 9 {
		return nil, WithReason(codes.FailedPrecondition, ReasonStaleBrokerEpoch, "stale")
	}
	return &keelpb.BrokerHeartbeatResponse{IsCaughtUp: true, ControllerEpoch: 2, ControllerId: 1}, nil
}

func (f *brokerFacingController) ListBrokers(context.Context, *keelpb.ListBrokersRequest) (*keelpb.ListBrokersResponse, error) {
	f.lists.Add(1)
	return &keelpb.ListBrokersResponse{Brokers: f.brokers}, nil
}

type inspectOnly struct {
	keelpb.UnimplementedBrokerServiceServer
}

func (inspectOnly) Inspect(context.Context, *keelpb.InspectRequest) (*keelpb.InspectResponse, error) {
	return &keelpb.InspectResponse{BrokerId: 4, State: "active"}, nil
}

// serveBrokerTestServices serves register's services on loopback until the test ends.
func serveBrokerTestServices(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	return serveWith(t, nil, register)
}

// serveWith serves register's services with opts on loopback until the
// test ends.
func serveWith(t *testing.T, opts []grpc.ServerOption, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

func serveBrokerFacing(t *testing.T, f *brokerFacingController) string {
	return serveBrokerTestServices(t, func(g *grpc.Server) { keelpb.RegisterControllerServiceServer(g, f) })
}

// unusedLoopbackAddr is a loopback address nothing listens on.
func unusedLoopbackAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

func TestClient_RegisterAndHeartbeatFollowTheLeader(t *testing.T) {
	leader := &brokerFacingController{}
	leaderAddr := serveBrokerFacing(t, leader)
	follower := &brokerFacingController{hint: leaderAddr}
	c, _ := NewClient([]string{serveBrokerFacing(t, follower)})
	defer c.Close()
	if c.Leader() != "" {
		t.Fatalf("Leader() = %q before any write", c.Leader())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.RegisterBroker(ctx, &keelpb.RegisterBrokerRequest{BrokerId: 1})
	if err != nil || resp.BrokerEpoch != 9 {
		t.Fatalf("RegisterBroker = %v, %v", resp, err)
	}
	if c.Leader() != leaderAddr || follower.registers.Load() != 1 || leader.registers.Load() != 1 {
		t.Fatalf("leader %q; registers: follower %d, leader %d", c.Leader(), follower.registers.Load(), leader.registers.Load())
	}
	if _, err := c.BrokerHeartbeat(ctx, &keelpb.BrokerHeartbeatRequest{BrokerId: 1, BrokerEpoch: 9}); err != nil {
		t.Fatal(err)
	}
	_, err = c.BrokerHeartbeat(ctx, &keelpb.BrokerHeartbeatRequest{BrokerId: 1, BrokerEpoch: 8})
	if status.Code(err) != codes.FailedPrecondition || ReasonOf(err) != ReasonStaleBrokerEpoch {
		t.Fatalf("stale heartbeat: %v (reason %q)", err, ReasonOf(err))
	}
}

func TestClient_ListBrokers(t *testing.T) {
	tests := []struct {
		name     string
		addrs    func(t *testing.T, live string) []string
		wantErr  codes.Code
		wantList bool
	}{
		{"from the first controller", func(t *testing.T, live string) []string { return []string{live} }, codes.OK, true},
		{"past a dead controller", func(t *testing.T, live string) []string { return []string{unusedLoopbackAddr(t), live} }, codes.OK, true},
		{"none answers", func(t *testing.T, _ string) []string { return []string{unusedLoopbackAddr(t), unusedLoopbackAddr(t)} }, codes.Unavailable, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &brokerFacingController{brokers: []*keelpb.BrokerInfo{{Id: 1, Epoch: 3, State: "active"}}}
			c, _ := NewClient(tt.addrs(t, serveBrokerFacing(t, f)))
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := c.ListBrokers(ctx)
			if status.Code(err) != tt.wantErr {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if tt.wantList && (len(resp.GetBrokers()) != 1 || resp.Brokers[0].Epoch != 3) {
				t.Fatalf("ListBrokers = %v", resp)
			}
		})
	}
}

func TestBrokerClient_Inspect(t *testing.T) {
	addr := serveBrokerTestServices(t, func(g *grpc.Server) { keelpb.RegisterBrokerServiceServer(g, inspectOnly{}) })
	bc, err := DialBroker(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	resp, err := bc.Inspect(context.Background())
	if err != nil || resp.BrokerId != 4 || resp.State != "active" {
		t.Fatalf("Inspect = %v, %v", resp, err)
	}

	dead, err := DialBroker(unusedLoopbackAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	if _, err := dead.Inspect(context.Background()); status.Code(err) != codes.Unavailable {
		t.Fatalf("Inspect of a dead broker: %v, want Unavailable", err)
	}
}
