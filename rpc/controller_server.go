package rpc

import (
	"context"
	"time"

	"google.golang.org/grpc"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/proto/keelpb"
)

// maxRequestIDLen bounds a client-chosen request id.
const maxRequestIDLen = 128

// ControllerServer serves the ControllerService on one controller node.
type ControllerServer struct {
	keelpb.UnimplementedControllerServiceServer
	ctrl         *controller.Controller
	version      string
	writeTimeout time.Duration
}

// NewControllerServer returns a server over ctrl. writeTimeout bounds every
// write: without a quorum it fails with Unavailable after at most that long.
func NewControllerServer(ctrl *controller.Controller, version string, writeTimeout time.Duration) *ControllerServer {
	if writeTimeout <= 0 {
		writeTimeout = 10 * time.Second
	}
	return &ControllerServer{ctrl: ctrl, version: version, writeTimeout: writeTimeout}
}

// Register adds the service to g.
func (s *ControllerServer) Register(g *grpc.Server) { keelpb.RegisterControllerServiceServer(g, s) }

// DescribeQuorum answers from this node's own view, leader or not.
func (s *ControllerServer) DescribeQuorum(context.Context, *keelpb.DescribeQuorumRequest) (*keelpb.DescribeQuorumResponse, error) {
	return s.ctrl.Describe(s.version), nil
}

// AppendNoOp commits a no-op record through the active controller.
func (s *ControllerServer) AppendNoOp(ctx context.Context, req *keelpb.AppendNoOpRequest) (*keelpb.AppendNoOpResponse, error) {
	if len(req.GetRequestId()) > maxRequestIDLen {
		return nil, invalidArgument("request_id", "longer than %d bytes", maxRequestIDLen)
	}
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	index, err := s.ctrl.Propose(ctx, &keelpb.Record{Record: &keelpb.Record_NoOp{NoOp: &keelpb.NoOpRecord{RequestId: req.GetRequestId()}}})
	if err != nil {
		return nil, toStatus(err)
	}
	_, epoch := s.ctrl.Active()
	return &keelpb.AppendNoOpResponse{Index: index, ControllerEpoch: epoch}, nil
}
