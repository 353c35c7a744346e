package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/server"
)

// dialNode is a raw ControllerService client of one node, closed when the
// test ends.
func dialNode(t *testing.T, n *server.Node) keelpb.ControllerServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return keelpb.NewControllerServiceClient(cc)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestControllerService_ChecksEveryRequest: a node's gRPC server runs the
// wire contract's checks (rpc.Validate) on every request before the
// controller sees it: a registration with an incarnation id that is no UUID
// is refused naming the field, and writes nothing; a malformed stream
// request is refused too.
func TestControllerService_ChecksEveryRequest(t *testing.T) {
	_, active := startCluster(t, 1)
	cl := dialNode(t, active)
	ctx := testCtx(t)
	before := active.FSM().Image().Offset

	_, err := cl.RegisterBroker(ctx, &keelpb.RegisterBrokerRequest{BrokerId: 1, IncarnationId: "broker-1",
		Address: "127.0.0.1:9092", MinMetadataVersion: fsm.MinMetadataVersion, MaxMetadataVersion: fsm.MaxMetadataVersion})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "incarnation_id:") {
		t.Fatalf("RegisterBroker with incarnation id broker-1: err = %v, want InvalidArgument naming incarnation_id", err)
	}
	stream, err := cl.StreamMetadata(ctx, &keelpb.StreamMetadataRequest{BrokerId: -1, BrokerEpoch: 1})
	if err == nil {
		_, err = stream.Recv()
	}
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "broker_id:") {
		t.Fatalf("StreamMetadata broker -1: err = %v, want InvalidArgument naming broker_id", err)
	}
	if after := active.FSM().Image().Offset; after != before {
		t.Fatalf("the refused requests moved the image from offset %d to %d", before, after)
	}
}

// TestControllerService_RefusesBadUploads: a snapshot upload is checked by
// the active controller as it reads it: bytes that are no snapshot, an
// empty upload and one whose last chunk never came are refused, naming the
// field, and the cluster keeps its image.
func TestControllerService_RefusesBadUploads(t *testing.T) {
	_, active := startCluster(t, 1)
	cl := dialNode(t, active)
	tests := []struct {
		name  string
		reqs  []*keelpb.RestoreSnapshotRequest
		field string
	}{
		{name: "bytes that are no snapshot", reqs: []*keelpb.RestoreSnapshotRequest{{Data: []byte("not a snapshot"), Last: true}}, field: "data"},
		{name: "an empty upload", reqs: []*keelpb.RestoreSnapshotRequest{{Last: true}}, field: "data"},
		{name: "no chunk marked last", reqs: []*keelpb.RestoreSnapshotRequest{{Data: []byte("x")}}, field: "last"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := active.FSM().Image()
			up, err := cl.RestoreSnapshot(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range tt.reqs {
				if err := up.Send(r); err != nil {
					break // the server answered early; CloseAndRecv has it
				}
			}
			_, err = up.CloseAndRecv()
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tt.field+":") {
				t.Fatalf("err = %v; want InvalidArgument naming %s", err, tt.field)
			}
			if after := active.FSM().Image(); after.ControllerEpoch != before.ControllerEpoch || after.ClusterID != before.ClusterID {
				t.Fatalf("a refused upload changed the image: epoch %d → %d", before.ControllerEpoch, after.ControllerEpoch)
			}
		})
	}
}

// TestControllerService_RefusesOversizedRequests: over a real connection, a
// request above the servers' bound, unary or one chunk of an upload, is
// refused with ResourceExhausted, and the server goes on answering.
func TestControllerService_RefusesOversizedRequests(t *testing.T) {
	const tooBig = 4<<20 + 1
	_, active := startCluster(t, 1)
	cl := dialNode(t, active)
	ctx := testCtx(t)

	_, err := cl.AppendNoOp(ctx, &keelpb.AppendNoOpRequest{RequestId: strings.Repeat("x", tooBig)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("AppendNoOp of %d bytes: err = %v, want ResourceExhausted", tooBig, err)
	}
	up, err := cl.RestoreSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Send may see the server's early answer as io.EOF; CloseAndRecv has it.
	_ = up.Send(&keelpb.RestoreSnapshotRequest{Data: make([]byte, tooBig), Last: true})
	if _, err := up.CloseAndRecv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("RestoreSnapshot chunk of %d bytes: err = %v, want ResourceExhausted", tooBig, err)
	}

	resp, err := cl.AppendNoOp(ctx, &keelpb.AppendNoOpRequest{RequestId: "after"})
	if err != nil || resp.GetIndex() == 0 {
		t.Fatalf("AppendNoOp after the refusals = %v, %v", resp, err)
	}
	if q, err := cl.DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{}); err != nil || !q.GetActive() {
		t.Fatalf("DescribeQuorum after the refusals = %v, %v", q, err)
	}
}
