package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/server"
)

// TestConnTracker_CrashIsAClosedConnection: through a node's gRPC server, a
// broker whose stream is cancelled on a connection that stays open is not
// fenced for a crash (a reconnect, a shutdown's end), and one whose
// connection closes under its stream is, once the grace has passed; its
// session (a minute) has not run out.
func TestConnTracker_CrashIsAClosedConnection(t *testing.T) {
	const grace = 200 * time.Millisecond
	_, active := startCluster(t, 1, keeltest.WithSessionTimeout(time.Minute),
		keeltest.WithTune(func(cfg *server.NodeConfig) { cfg.CrashGrace = grace }))
	cc, err := grpc.NewClient(active.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cl := keelpb.NewControllerServiceClient(cc)
	ctx := testCtx(t)
	reg, err := cl.RegisterBroker(ctx, &keelpb.RegisterBrokerRequest{BrokerId: 1, IncarnationId: "00000000-0000-0000-0000-00000000000a",
		Address: "127.0.0.1:9092", MinMetadataVersion: fsm.MinMetadataVersion, MaxMetadataVersion: fsm.MaxMetadataVersion})
	if err != nil {
		t.Fatal(err)
	}
	epoch := reg.GetBrokerEpoch()
	if hb, err := cl.BrokerHeartbeat(ctx, &keelpb.BrokerHeartbeatRequest{BrokerId: 1, BrokerEpoch: epoch, MetadataOffset: uint64(epoch)}); err != nil || hb.GetIsFenced() {
		t.Fatalf("heartbeat after catching up = %v, %v; want unfenced", hb, err)
	}
	fenced := func() bool {
		b, ok := active.FSM().Image().Broker(1)
		return ok && b.Fenced
	}
	// stream opens a stream and waits for its first push.
	stream := func() context.CancelFunc {
		sctx, cancel := context.WithCancel(ctx)
		s, err := cl.StreamMetadata(sctx, &keelpb.StreamMetadataRequest{BrokerId: 1, BrokerEpoch: epoch})
		if err == nil {
			_, err = s.Recv()
		}
		if err != nil {
			t.Fatalf("StreamMetadata: %v", err)
		}
		return cancel
	}

	stream()() // cancelled; the connection stays open
	deadline := time.Now().Add(4 * grace)
	for time.Now().Before(deadline) {
		if fenced() {
			t.Fatal("broker 1 fenced after cancelling its stream on an open connection")
		}
		time.Sleep(10 * time.Millisecond)
	}

	cancel := stream()
	defer cancel()
	cc.Close() // as a dead process's connection closes
	closed := time.Now()
	poll.Until(t, 10*time.Second, "broker 1 to be fenced for its crash", fenced)
	if took := time.Since(closed); took < grace {
		t.Fatalf("broker 1 fenced %v after its connection closed, before the grace (%v)", took, grace)
	}
}
