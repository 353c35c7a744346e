package rpc

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/proto/keelpb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeController answers AppendNoOp with whatever answer returns.
type fakeController struct {
	keelpb.UnimplementedControllerServiceServer
	calls  atomic.Int32
	answer func() (*keelpb.AppendNoOpResponse, error)
	view   *keelpb.DescribeQuorumResponse
}

func (f *fakeController) AppendNoOp(context.Context, *keelpb.AppendNoOpRequest) (*keelpb.AppendNoOpResponse, error) {
	f.calls.Add(1)
	return f.answer()
}

func (f *fakeController) DescribeQuorum(context.Context, *keelpb.DescribeQuorumRequest) (*keelpb.DescribeQuorumResponse, error) {
	return f.view, nil
}

func serve(t *testing.T, f *fakeController) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	keelpb.RegisterControllerServiceServer(g, f)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func TestClient_WriteFollowsLeaderHint(t *testing.T) {
	leader := &fakeController{answer: func() (*keelpb.AppendNoOpResponse, error) {
		return &keelpb.AppendNoOpResponse{Index: 7, ControllerEpoch: 3}, nil
	}}
	leaderAddr := serve(t, leader)
	follower := &fakeController{answer: func() (*keelpb.AppendNoOpResponse, error) {
		return nil, withHint(status.New(codes.FailedPrecondition, "not the leader"), 2, leaderAddr)
	}}
	followerAddr := serve(t, follower)

	c, _ := NewClient([]string{followerAddr})
	defer c.Close()
	resp, err := c.AppendNoOp(context.Background(), "r1")
	if err != nil || resp.Index != 7 {
		t.Fatalf("AppendNoOp = %v, %v", resp, err)
	}
	if follower.calls.Load() != 1 || leader.calls.Load() != 1 {
		t.Fatalf("calls: follower %d, leader %d", follower.calls.Load(), leader.calls.Load())
	}
	// The client remembers the leader: the next write goes straight there.
	if _, err := c.AppendNoOp(context.Background(), "r2"); err != nil {
		t.Fatal(err)
	}
	if follower.calls.Load() != 1 || leader.calls.Load() != 2 {
		t.Fatalf("second write: follower %d, leader %d calls", follower.calls.Load(), leader.calls.Load())
	}
}

func TestClient_WriteTriesOtherControllersWhenUnavailable(t *testing.T) {
	var fails atomic.Int32
	fails.Store(2)
	busy := &fakeController{answer: func() (*keelpb.AppendNoOpResponse, error) {
		if fails.Add(-1) >= 0 {
			return nil, status.Error(codes.Unavailable, "election in progress")
		}
		return &keelpb.AppendNoOpResponse{Index: 1}, nil
	}}
	c, _ := NewClient([]string{deadAddr(t), serve(t, busy)})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.AppendNoOp(ctx, ""); err != nil {
		t.Fatalf("AppendNoOp: %v", err)
	}
}

func TestClient_WriteGivesUpWithUnavailable(t *testing.T) {
	c, _ := NewClient([]string{deadAddr(t), deadAddr(t)})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.AppendNoOp(ctx, "")
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v, want Unavailable", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("gave up after %v, want about the 500ms deadline", d)
	}
}

func TestClient_WriteReturnsOtherErrorsAsTheyAre(t *testing.T) {
	bad := &fakeController{answer: func() (*keelpb.AppendNoOpResponse, error) {
		return nil, status.Error(codes.InvalidArgument, "request_id: too long")
	}}
	c, _ := NewClient([]string{serve(t, bad)})
	defer c.Close()
	_, err := c.AppendNoOp(context.Background(), "")
	if status.Code(err) != codes.InvalidArgument || bad.calls.Load() != 1 {
		t.Fatalf("err = %v after %d calls, want InvalidArgument after 1", err, bad.calls.Load())
	}
}

func TestClient_DescribeQuorumMarksSilentVoters(t *testing.T) {
	dead := deadAddr(t)
	node1 := &fakeController{}
	addr1 := serve(t, node1)
	voters := []*keelpb.QuorumMember{{Id: 1, Address: addr1}, {Id: 2, Address: dead}}
	node1.view = &keelpb.DescribeQuorumResponse{NodeId: 1, Active: true, State: "leader", Voters: voters}

	c, _ := NewClient([]string{addr1})
	defer c.Close()
	view, err := c.DescribeQuorum(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if view.Leader.NodeId != 1 || view.Nodes[1] == nil || view.Nodes[2] != nil || view.Errors[2] == nil {
		t.Fatalf("view = %+v", view)
	}
}

func TestNewClient_NeedsAnAddress(t *testing.T) {
	if _, err := NewClient(nil); err == nil {
		t.Fatal("NewClient(nil) succeeded")
	}
}

// A controller that stops answering is no longer where writes start.
func TestClient_ForgetsALeaderThatFails(t *testing.T) {
	var down atomic.Bool
	ctrl := &fakeController{answer: func() (*keelpb.AppendNoOpResponse, error) {
		if down.Load() {
			return nil, status.Error(codes.Unavailable, "gone")
		}
		return &keelpb.AppendNoOpResponse{Index: 1}, nil
	}}
	addr := serve(t, ctrl)
	c, _ := NewClient([]string{addr})
	defer c.Close()
	if _, err := c.AppendNoOp(context.Background(), ""); err != nil || c.leader != addr {
		t.Fatalf("first write: %v, leader %q", err, c.leader)
	}
	down.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := c.AppendNoOp(ctx, ""); err == nil {
		t.Fatal("write to a down controller succeeded")
	}
	if c.leader != "" {
		t.Fatalf("leader still %q after it failed", c.leader)
	}
}

// A leader that is still taking over (NOT_READY) is asked again, not left
// for another controller: it is active within milliseconds.
func TestClient_WriteWaitsForALeaderTakingOver(t *testing.T) {
	var notReady atomic.Int32
	notReady.Store(5)
	leader := &fakeController{answer: func() (*keelpb.AppendNoOpResponse, error) {
		if notReady.Add(-1) >= 0 {
			return nil, WithReason(codes.Unavailable, ReasonNotReady, "taking over")
		}
		return &keelpb.AppendNoOpResponse{Index: 7}, nil
	}}
	other := &fakeController{answer: func() (*keelpb.AppendNoOpResponse, error) {
		return nil, status.Error(codes.Unavailable, "no leader")
	}}
	c, _ := NewClient([]string{serve(t, leader), serve(t, other)})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.AppendNoOp(ctx, "")
	if err != nil || resp.Index != 7 {
		t.Fatalf("AppendNoOp = %v, %v", resp, err)
	}
	if got := leader.calls.Load(); got != 6 {
		t.Errorf("the leader taking over was asked %d times, want 6", got)
	}
	if got := other.calls.Load(); got != 0 {
		t.Errorf("another controller was asked %d times while the leader was taking over", got)
	}
}

// frozenAddr is a controller that is there and says nothing, as a stopped
// (SIGSTOP) process does: the kernel accepts the connection, nobody reads
// it. Its connections close when the test ends.
func frozenAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan net.Conn, 64)
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			held <- conn
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		for {
			select {
			case c := <-held:
				c.Close()
			default:
				return
			}
		}
	})
	return lis.Addr().String()
}

// TestClient_WriteDoesNotWaitOnAFrozenController: with the first address
// frozen, a write with a 2 s deadline still reaches the active controller,
// and soon: the client asks every controller at once which one is active
// instead of trying them in order (it used to spend the whole deadline on
// the frozen one).
func TestClient_WriteDoesNotWaitOnAFrozenController(t *testing.T) {
	leader := &fakeController{answer: func() (*keelpb.AppendNoOpResponse, error) {
		return &keelpb.AppendNoOpResponse{Index: 7}, nil
	}}
	leader.view = &keelpb.DescribeQuorumResponse{NodeId: 2, Active: true, LeaderId: 2}
	follower := &fakeController{answer: func() (*keelpb.AppendNoOpResponse, error) {
		return nil, status.Error(codes.FailedPrecondition, "not the leader")
	}}
	leaderAddr := serve(t, leader)
	follower.view = &keelpb.DescribeQuorumResponse{NodeId: 3, LeaderId: 2, LeaderAddress: leaderAddr}
	c, _ := NewClient([]string{frozenAddr(t), serve(t, follower), leaderAddr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	resp, err := c.AppendNoOp(ctx, "r1")
	if err != nil || resp.GetIndex() != 7 {
		t.Fatalf("AppendNoOp with the first controller frozen = %v, %v", resp, err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the write took %v: it waited on the frozen controller", took)
	}
}

func TestNewClient_RefusesAnAddressWithoutPort(t *testing.T) {
	for _, addr := range []string{"garbage", "garbage:", ":9091"} {
		_, err := NewClient([]string{"127.0.0.1:9091", addr})
		if err == nil || !strings.Contains(err.Error(), "--controllers: bad address") || !strings.Contains(err.Error(), "want host:port") {
			t.Errorf("NewClient(%q) = %v, want a bad address error asking for host:port", addr, err)
		}
	}
}

func TestClient_FailFastWriteToNothingListening(t *testing.T) {
	dead := deadAddr(t)
	c, _ := NewClient([]string{deadAddr(t), dead, deadAddr(t), dead}, FailFast()) // one given twice
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.AppendNoOp(ctx, "")
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no controller is listening") {
		t.Fatalf("err = %v, want Unavailable: no controller is listening", err)
	}
	// A read gives up in milliseconds; the write must too, not at the 10s deadline.
	if d := time.Since(start); d > time.Second {
		t.Fatalf("gave up after %v, want at once", d)
	}
}

func TestClient_FailFastStillFindsTheLiveController(t *testing.T) {
	live := &fakeController{answer: func() (*keelpb.AppendNoOpResponse, error) {
		return &keelpb.AppendNoOpResponse{Index: 1}, nil
	}}
	c, _ := NewClient([]string{deadAddr(t), deadAddr(t), serve(t, live)}, FailFast())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.AppendNoOp(ctx, ""); err != nil {
		t.Fatalf("AppendNoOp: %v", err)
	}
}

// fakeBroker is a broker's gRPC service: no controller service.
type fakeBroker struct {
	keelpb.UnimplementedBrokerServiceServer
}

func (fakeBroker) Inspect(context.Context, *keelpb.InspectRequest) (*keelpb.InspectResponse, error) {
	return &keelpb.InspectResponse{BrokerId: 7}, nil
}

func TestClient_SaysABrokerIsNotAController(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	keelpb.RegisterBrokerServiceServer(g, fakeBroker{})
	go g.Serve(lis)
	defer g.Stop()
	addr := lis.Addr().String()
	c, _ := NewClient([]string{addr}, FailFast())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	want := addr + " is broker 7, not a controller"
	if _, err := c.AppendNoOp(ctx, ""); !strings.Contains(err.Error(), want) {
		t.Errorf("write: err = %v, want %q", err, want)
	}
	if _, err := c.ListTopics(ctx); !strings.Contains(err.Error(), want) {
		t.Errorf("read: err = %v, want %q", err, want)
	}
	if _, err := c.DescribeQuorum(ctx); !strings.Contains(err.Error(), want) {
		t.Errorf("describe quorum: err = %v, want %q", err, want)
	}
}
