package server

import (
	"context"
	"errors"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// controllerService serves the ControllerService on one controller node:
// it turns each call into a call on the controller and its error into a
// status (toStatus). Requests arrive checked by rpc.Validate (the servers'
// interceptor, rpc.ServerOptions); authorization ran before that.
type controllerService struct {
	keelpb.UnimplementedControllerServiceServer
	ctrl         *controller.Controller
	node         *Node // the node's own state: readiness, indexes, replication
	version      string
	writeTimeout time.Duration
}

// newControllerService returns the service over ctrl. writeTimeout bounds
// every write: without a quorum it fails with Unavailable after at most that
// long.
func newControllerService(ctrl *controller.Controller, node *Node, version string, writeTimeout time.Duration) *controllerService {
	if writeTimeout <= 0 {
		writeTimeout = 10 * time.Second
	}
	return &controllerService{ctrl: ctrl, node: node, version: version, writeTimeout: writeTimeout}
}

// register adds the service to g.
func (s *controllerService) register(g *grpc.Server) { keelpb.RegisterControllerServiceServer(g, s) }

// DescribeQuorum answers from this node's own view, leader or not; the
// active controller adds each voter's replication.
func (s *controllerService) DescribeQuorum(context.Context, *keelpb.DescribeQuorumRequest) (*keelpb.DescribeQuorumResponse, error) {
	resp := s.ctrl.Describe(s.version)
	resp.AppliedIndex = max(resp.AppliedIndex, s.node.appliedIndex())
	resp.Replication = s.node.replication(resp.Voters)
	if err := s.node.Ready(); err != nil {
		resp.NotReadyReason = err.Error()
	} else {
		resp.Ready = true
	}
	return resp, nil
}

// AppendNoOp commits a no-op record through the active controller.
func (s *controllerService) AppendNoOp(ctx context.Context, req *keelpb.AppendNoOpRequest) (*keelpb.AppendNoOpResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	index, epoch, err := s.ctrl.AppendNoOp(ctx, req.GetRequestId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &keelpb.AppendNoOpResponse{Index: index, ControllerEpoch: epoch}, nil
}

// RegisterBroker validates the request and registers the broker.
func (s *controllerService) RegisterBroker(ctx context.Context, req *keelpb.RegisterBrokerRequest) (*keelpb.RegisterBrokerResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	resp, err := s.ctrl.RegisterBroker(ctx, req)
	return resp, toStatus(err)
}

// BrokerHeartbeat validates the request and renews the broker's session.
func (s *controllerService) BrokerHeartbeat(ctx context.Context, req *keelpb.BrokerHeartbeatRequest) (*keelpb.BrokerHeartbeatResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	resp, err := s.ctrl.BrokerHeartbeat(ctx, req)
	return resp, toStatus(err)
}

// UnregisterBroker validates the request and removes the broker, if it is
// fenced.
func (s *controllerService) UnregisterBroker(ctx context.Context, req *keelpb.UnregisterBrokerRequest) (*keelpb.UnregisterBrokerResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	epoch, err := s.ctrl.UnregisterBroker(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	return &keelpb.UnregisterBrokerResponse{BrokerEpoch: epoch}, nil
}

// AllocateProducerIds hands the broker a block of producer ids through the
// active controller.
func (s *controllerService) AllocateProducerIds(ctx context.Context, req *keelpb.AllocateProducerIdsRequest) (*keelpb.AllocateProducerIdsResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	block, err := s.ctrl.AllocateProducerIds(ctx, req.GetBrokerId(), req.GetBrokerEpoch())
	if err != nil {
		return nil, toStatus(err)
	}
	return &keelpb.AllocateProducerIdsResponse{ProducerIdStart: block.Start, ProducerIdLen: block.Len}, nil
}

// StreamMetadata pushes committed metadata to one broker until it goes away
// or this node stops being the active controller.
func (s *controllerService) StreamMetadata(req *keelpb.StreamMetadataRequest, stream grpc.ServerStreamingServer[keelpb.MetadataPush]) error {
	return toStatus(s.ctrl.StreamMetadata(withConnClosed(stream.Context(), s.node.stopping.Load), req, stream))
}

// ListBrokers answers from the active controller's committed image, or with
// stale from this node's (readImage).
func (s *controllerService) ListBrokers(ctx context.Context, req *keelpb.ListBrokersRequest) (*keelpb.ListBrokersResponse, error) {
	img, src, err := s.readImage(ctx, false, req.GetStale())
	if err != nil {
		return nil, err
	}
	resp := keelpb.ListBrokersResponse{Source: src}
	for _, b := range img.Brokers() {
		resp.Brokers = append(resp.Brokers, &keelpb.BrokerInfo{
			Id: b.ID, Epoch: b.Epoch, Address: b.Address, Rack: b.Rack, State: b.State(), IncarnationId: b.IncarnationID,
			KafkaAddress: b.KafkaAddress,
		})
	}
	return &resp, nil
}

// FetchSnapshot streams a snapshot of the committed image in 1 MiB chunks,
// the last one marked. Only the active controller answers.
func (s *controllerService) FetchSnapshot(_ *keelpb.FetchSnapshotRequest, stream grpc.ServerStreamingServer[keelpb.SnapshotChunk]) error {
	return toStatus(s.ctrl.SendSnapshot(stream.Context(), stream.Send))
}

// maxRestoreBytes bounds a snapshot upload.
const maxRestoreBytes = 16 << 30

// RestoreSnapshot receives a snapshot upload into a temporary file, then has
// the active controller restore from it. The file is verified before raft
// sees it; any refusal leaves the cluster as it was.
func (s *controllerService) RestoreSnapshot(stream grpc.ClientStreamingServer[keelpb.RestoreSnapshotRequest, keelpb.RestoreSnapshotResponse]) error {
	if active, _ := s.ctrl.Active(); !active {
		return toStatus(s.ctrl.NotActiveError())
	}
	tmp, err := os.CreateTemp("", "keel-upload-*")
	if err != nil {
		return status.Errorf(codes.Internal, "temporary file for the upload: %v", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	var size int64
	force := false
	for first := true; ; first = false {
		req, err := stream.Recv()
		if err == io.EOF {
			// The client closed its side without marking a chunk last.
			return rpc.InvalidArgument("last", "the upload ended with no chunk marked last")
		}
		if err != nil {
			return status.Errorf(codes.Canceled, "upload ended before its last chunk: %v", err)
		}
		if first {
			force = req.GetForceClusterId()
		}
		if size += int64(len(req.GetData())); size > maxRestoreBytes {
			return rpc.InvalidArgument("data", "the snapshot exceeds %d bytes", int64(maxRestoreBytes))
		}
		if _, err := tmp.Write(req.GetData()); err != nil {
			return status.Errorf(codes.Internal, "write the upload: %v", err)
		}
		if req.GetLast() {
			break
		}
	}
	if err := tmp.Sync(); err != nil {
		return status.Errorf(codes.Internal, "sync the upload: %v", err)
	}
	res, err := s.ctrl.RestoreSnapshot(stream.Context(), tmp.Name(), force)
	if errors.Is(err, fsm.ErrCorruptSnapshot) {
		return rpc.InvalidArgument("data", "%v", err)
	}
	if err != nil {
		return toStatus(err)
	}
	img := s.ctrl.Image()
	return stream.SendAndClose(&keelpb.RestoreSnapshotResponse{
		ClusterId: img.ClusterID, ControllerEpoch: res.Epoch, SnapshotIndex: res.Info.Index,
		Brokers: int32(res.Info.Brokers), Topics: int32(res.Info.Topics), Partitions: int32(res.Info.Partitions),
	})
}
