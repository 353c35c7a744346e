package broker

import (
	"cmp"
	"context"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// brokerService serves BrokerService: the broker's own view, for
// `keel broker inspect` and for tests that compare it with the controllers',
// and its followers' fetches, which the data plane answers.
type brokerService struct {
	keelpb.UnimplementedBrokerServiceServer
	a *Agent
}

func (s brokerService) Inspect(context.Context, *keelpb.InspectRequest) (*keelpb.InspectResponse, error) {
	st := s.a.Status()
	replicas := s.a.Replicas()
	parts := make([]*keelpb.ReplicaState, len(replicas))
	for i, r := range replicas {
		parts[i] = &keelpb.ReplicaState{Topic: r.Topic, Partition: r.Partition, Role: r.Role,
			Leader: r.Leader, LeaderEpoch: r.LeaderEpoch, Isr: r.ISR}
	}
	return &keelpb.InspectResponse{
		BrokerId:        st.BrokerID,
		BrokerEpoch:     st.BrokerEpoch,
		ControllerId:    st.ControllerID,
		ControllerEpoch: st.ControllerEpoch,
		MetadataOffset:  st.MetadataOffset,
		ClusterId:       st.ClusterID,
		State:           st.State,
		Partitions:      parts,
	}, nil
}

func (s brokerService) Fetch(ctx context.Context, req *keelpb.FetchRequest) (*keelpb.FetchResponse, error) {
	if err := rpc.ValidateFetch(req); err != nil {
		return nil, err
	}
	if s.a.cfg.DataPlane == nil {
		return nil, status.Errorf(codes.Unimplemented, "broker %d holds no replicas (it runs without a data plane)", s.a.cfg.BrokerID)
	}
	return s.a.cfg.DataPlane.ReplicaFetch(ctx, req)
}

func (s brokerService) FetchSession(stream keelpb.BrokerService_FetchSessionServer) error {
	dp, ok := s.a.cfg.DataPlane.(SessionDataPlane)
	if !ok {
		return status.Errorf(codes.Unimplemented, "broker %d serves no fetch sessions", s.a.cfg.BrokerID)
	}
	return dp.ReplicaFetchSession(validatedSession{stream})
}

// validatedSession refuses a session request that fails
// rpc.ValidateFetchSession before the data plane sees it.
type validatedSession struct {
	keelpb.BrokerService_FetchSessionServer
}

func (s validatedSession) Recv() (*keelpb.FetchSessionRequest, error) {
	req, err := s.BrokerService_FetchSessionServer.Recv()
	if err != nil {
		return nil, err
	}
	if err := rpc.ValidateFetchSession(req); err != nil {
		return nil, err
	}
	return req, nil
}

// Replicas lists this broker's replicas: as its data plane reports them,
// or, without one, as the image assigns them (leader or follower by the
// image's leader).
func (a *Agent) Replicas() []ReplicaStatus {
	if a.cfg.DataPlane != nil {
		return a.cfg.DataPlane.Replicas()
	}
	img := a.Image()
	var out []ReplicaStatus
	img.PartitionsOnBroker(a.cfg.BrokerID, func(p *fsm.Partition) bool {
		role := RoleFollower
		if p.Leader == a.cfg.BrokerID {
			role = RoleLeader
		}
		out = append(out, ReplicaStatus{Topic: topicName(img, p.TopicID), TopicID: p.TopicID, Partition: p.Partition,
			Role: role, Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch,
			Replicas: p.Replicas, ISR: p.ISR})
		return true
	})
	sortReplicas(out)
	return out
}

// sortReplicas puts rs in topic name then partition order, as
// DataPlane.Replicas reports them.
func sortReplicas(rs []ReplicaStatus) {
	slices.SortFunc(rs, func(a, b ReplicaStatus) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
}
