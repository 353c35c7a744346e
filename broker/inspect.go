package broker

import (
	"context"

	"github.com/keel-dev/keel/proto/keelpb"
)

// inspectServer serves BrokerService: the broker's own view, for
// `keel broker inspect` and for tests that compare it with the controllers'.
type inspectServer struct {
	keelpb.UnimplementedBrokerServiceServer
	a *Agent
}

func (s inspectServer) Inspect(context.Context, *keelpb.InspectRequest) (*keelpb.InspectResponse, error) {
	st := s.a.Status()
	return &keelpb.InspectResponse{
		BrokerId:        st.BrokerID,
		BrokerEpoch:     st.BrokerEpoch,
		ControllerId:    st.ControllerID,
		ControllerEpoch: st.ControllerEpoch,
		MetadataOffset:  st.MetadataOffset,
		ClusterId:       st.ClusterID,
		State:           st.State,
		// Replicas arrive with partitions (the next issue).
		Partitions: nil,
	}, nil
}
