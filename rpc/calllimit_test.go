package rpc

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/tlsauth"
)

// TestCallLimiter: each identity has its own count; a call over its
// identity's bound is refused with ResourceExhausted and counts nothing;
// a call's slot comes back when its stream's context ends, or earlier
// when its one message is in, and only once.
func TestCallLimiter(t *testing.T) {
	type step struct {
		op       string // "admit", "end", "first" (the call's one message in)
		call     int    // the i-th admitted call, for end and first
		who      string
		wantCode codes.Code
		inFlight map[string]int
	}
	tests := []struct {
		name  string
		max   int
		steps []step
	}{
		{name: "up to the bound, then refused", max: 2, steps: []step{
			{op: "admit", who: "broker-1", inFlight: map[string]int{"broker-1": 1}},
			{op: "admit", who: "broker-1", inFlight: map[string]int{"broker-1": 2}},
			{op: "admit", who: "broker-1", wantCode: codes.ResourceExhausted, inFlight: map[string]int{"broker-1": 2}},
		}},
		{name: "identities are counted apart", max: 1, steps: []step{
			{op: "admit", who: "broker-1", inFlight: map[string]int{"broker-1": 1}},
			{op: "admit", who: "admin", inFlight: map[string]int{"broker-1": 1, "admin": 1}},
			{op: "admit", who: "broker-1", wantCode: codes.ResourceExhausted, inFlight: map[string]int{"broker-1": 1, "admin": 1}},
		}},
		{name: "a call that ends gives its slot back", max: 1, steps: []step{
			{op: "admit", who: "broker-1", inFlight: map[string]int{"broker-1": 1}},
			{op: "end", call: 0, inFlight: map[string]int{"broker-1": 0}},
			{op: "admit", who: "broker-1", inFlight: map[string]int{"broker-1": 1}},
		}},
		{name: "a listening call gives its slot back once its message is in, once", max: 2, steps: []step{
			{op: "admit", who: "broker-1", inFlight: map[string]int{"broker-1": 1}},
			{op: "admit", who: "broker-1", inFlight: map[string]int{"broker-1": 2}},
			{op: "first", call: 0, inFlight: map[string]int{"broker-1": 1}},
			{op: "end", call: 0, inFlight: map[string]int{"broker-1": 1}},
			{op: "end", call: 1, inFlight: map[string]int{"broker-1": 0}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newCallLimiter(tt.max)
			var ends []context.CancelFunc
			var slots []*callSlot
			defer func() {
				for _, end := range ends {
					end()
				}
			}()
			for i, st := range tt.steps {
				switch st.op {
				case "admit":
					ctx, end := context.WithCancel(context.Background())
					got, err := l.admit(ctx, st.who, "/keel.v1.ControllerService/CreateTopic")
					if code := status.Code(err); code != st.wantCode {
						end()
						t.Fatalf("step %d: admit %s = %v, want %v", i, st.who, err, st.wantCode)
					}
					if err != nil {
						end()
						if !strings.Contains(err.Error(), fmt.Sprintf("%s already has %d calls in flight", st.who, tt.max)) {
							t.Errorf("step %d: refusal %q does not say who and the bound", i, err)
						}
						break
					}
					ends, slots = append(ends, end), append(slots, got.Value(callSlotKey{}).(*callSlot))
				case "end":
					ends[st.call]()
				case "first":
					slots[st.call].release()
				}
				for who, want := range st.inFlight {
					// A context's AfterFunc runs on a goroutine of its own.
					poll.UntilState(t, 5*time.Second, fmt.Sprintf("step %d: %s's calls", i, who), func() (bool, string) {
						got := l.inFlight(who)
						return got == want, fmt.Sprintf("%d in flight, want %d", got, want)
					})
				}
			}
		})
	}
}

// TestCallLimiter_OverTLS: with a bound of 2 calls per identity, a broker
// holding two calls open (their requests never sent) has its third
// refused before it is read, while an admin's call goes through; once one
// of the broker's calls ends, its next call is served.
func TestCallLimiter_OverTLS(t *testing.T) {
	certs, _ := testCerts(t)
	addr := serveWith(t, ServerOptions(WithTLS(certs["controller-1"]), WithServerLimits(ServerLimits{CallsPerIdentity: 2})), func(g *grpc.Server) {
		keelpb.RegisterControllerServiceServer(g, authFake{})
	})
	dial := func(cn string) *grpc.ClientConn {
		creds := credentials.NewTLS(certs[cn].Client(tlsauth.RoleController))
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	broker, admin := dial("broker-1"), dial("admin")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Two calls whose request never ends: each holds a slot.
	held := holdCalls(t, ctx, broker, 2, &[]byte{})
	describe := func(cc *grpc.ClientConn) error {
		var resp []byte
		return cc.Invoke(ctx, keelpb.ControllerService_DescribeQuorum_FullMethodName, &[]byte{}, &resp)
	}
	poll.UntilState(t, 10*time.Second, "the broker's third call refused", func() (bool, string) {
		err := describe(broker)
		return status.Code(err) == codes.ResourceExhausted, fmt.Sprint(err)
	})
	if err := describe(broker); !strings.Contains(status.Convert(err).Message(), "broker-1 already has 2 calls in flight") {
		t.Fatalf("the broker's third call: %v", err)
	}
	if err := describe(admin); status.Code(err) == codes.ResourceExhausted {
		t.Fatalf("an admin's call while the broker is at its bound: %v", err)
	}
	held[0]()
	poll.UntilState(t, 10*time.Second, "the broker's call served once one of its calls ended", func() (bool, string) {
		err := describe(broker)
		return status.Code(err) != codes.ResourceExhausted, fmt.Sprint(err)
	})
}

// TestServerLimits_StreamsPerConn: a grpc-go client whose connection is at
// the server's bound on calls in flight waits to start its next call until
// one ends (back-pressure), rather than being refused.
func TestServerLimits_StreamsPerConn(t *testing.T) {
	addr := serveWith(t, ServerOptions(WithServerLimits(ServerLimits{StreamsPerConn: 2})), func(g *grpc.Server) {
		keelpb.RegisterControllerServiceServer(g, authFake{})
	})
	cc, err := grpc.NewClient(addr, clientDialOptions(options{}, tlsauth.RoleController)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	held := holdCalls(t, ctx, cc, 2, &keelpb.CreateTopicRequest{})
	// The third call waits for a stream: its deadline passes first.
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = keelpb.NewControllerServiceClient(cc).DescribeQuorum(wctx, &keelpb.DescribeQuorumRequest{})
	wcancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a third call on a connection at its bound of 2: %v; want it to wait (DeadlineExceeded)", err)
	}
	held[0]()
	if _, err := keelpb.NewControllerServiceClient(cc).DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{}); err != nil {
		t.Fatalf("a call once one of the two ended: %v", err)
	}
}

// holdCalls starts n CreateTopic calls on cc, each sending msg and never
// ending its stream, so the server holds them; calling one of the
// returned functions ends its call, and all end with the test.
func holdCalls(t *testing.T, ctx context.Context, cc *grpc.ClientConn, n int, msg any) []context.CancelFunc {
	t.Helper()
	var held []context.CancelFunc
	for range n {
		hctx, hcancel := context.WithCancel(ctx)
		t.Cleanup(hcancel)
		held = append(held, hcancel)
		s, err := cc.NewStream(hctx, &grpc.StreamDesc{ClientStreams: true}, keelpb.ControllerService_CreateTopic_FullMethodName)
		if err != nil {
			t.Fatal(err)
		}
		// Headers go out with the first message.
		if err := s.SendMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	return held
}

// testCerts makes a throwaway CA and the configs of controller-1,
// broker-1 and admin.
func testCerts(t *testing.T) (map[string]*tlsauth.Config, *tlsauth.CA) {
	t.Helper()
	ca, err := tlsauth.NewCA("keel rpc test CA")
	if err != nil {
		t.Fatal(err)
	}
	certs := map[string]*tlsauth.Config{}
	for _, cn := range []string{"controller-1", "broker-1", "admin"} {
		if certs[cn], err = ca.Config(cn); err != nil {
			t.Fatal(err)
		}
	}
	return certs, ca
}
