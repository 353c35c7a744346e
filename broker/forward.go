package broker

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/proto/keelpb"
)

// What a broker's Kafka listener asks of the controllers, sent through the
// agent's own controller client (which finds the active controller and
// follows its hints), as a KRaft broker forwards CreateTopics and asks for
// producer id blocks over its controller channel.

// AllocateProducerIds asks the active controller for a block of producer
// ids, stamped with this broker's id and current epoch: ids start up to
// start+count, exclusive, are this broker's to hand to idempotent
// producers. Before the broker has registered it fails with Unavailable;
// a stale epoch with reason STALE_BROKER_EPOCH (the broker is registering
// again: ask again later).
func (a *Agent) AllocateProducerIds(ctx context.Context) (start int64, count int32, err error) {
	epoch := a.currentEpoch()
	if epoch == 0 {
		return 0, 0, status.Errorf(codes.Unavailable, "broker %d has not registered yet", a.cfg.BrokerID)
	}
	resp, err := a.client.AllocateProducerIds(ctx, &keelpb.AllocateProducerIdsRequest{BrokerId: a.cfg.BrokerID, BrokerEpoch: epoch})
	if err != nil {
		return 0, 0, err
	}
	return resp.GetProducerIdStart(), resp.GetProducerIdLen(), nil
}

// CreateTopic forwards a topic creation to the active controller, which
// authorizes the principal of the client in req (KIP-590's envelope), not
// this broker. Errors are the controller's gRPC statuses.
func (a *Agent) CreateTopic(ctx context.Context, req *keelpb.CreateTopicRequest) (*keelpb.CreateTopicResponse, error) {
	return a.client.CreateTopic(ctx, req)
}

// CreatePartitions forwards an increase of a topic's partitions to the
// active controller.
func (a *Agent) CreatePartitions(ctx context.Context, req *keelpb.CreatePartitionsRequest) (*keelpb.CreatePartitionsResponse, error) {
	return a.client.CreatePartitions(ctx, req)
}

// AlterClientQuotas forwards a change of client quotas to the active
// controller.
func (a *Agent) AlterClientQuotas(ctx context.Context, req *keelpb.AlterClientQuotasRequest) (*keelpb.AlterClientQuotasResponse, error) {
	return a.client.AlterClientQuotas(ctx, req)
}

// CreateAcls forwards ACL creations to the active controller.
func (a *Agent) CreateAcls(ctx context.Context, req *keelpb.CreateAclsRequest) (*keelpb.CreateAclsResponse, error) {
	return a.client.CreateACLs(ctx, req)
}

// DeleteAcls forwards ACL deletions to the active controller.
func (a *Agent) DeleteAcls(ctx context.Context, req *keelpb.DeleteAclsRequest) (*keelpb.DeleteAclsResponse, error) {
	return a.client.DeleteACLs(ctx, req)
}

// DeleteTopic forwards a topic deletion to the active controller.
func (a *Agent) DeleteTopic(ctx context.Context, req *keelpb.DeleteTopicRequest) error {
	return a.client.DeleteTopicRequest(ctx, req)
}

// AlterConfigs forwards a change of a topic's or the cluster defaults'
// configs (Kafka's IncrementalAlterConfigs and AlterConfigs) to the active
// controller, which authorizes the client's principal in req.
func (a *Agent) AlterConfigs(ctx context.Context, req *keelpb.IncrementalAlterConfigsRequest) (*keelpb.IncrementalAlterConfigsResponse, error) {
	return a.client.IncrementalAlterConfigs(ctx, req)
}

// AlterUserScramCredentials forwards a change of SCRAM credentials to the
// active controller, which authorizes the client's principal in req.
func (a *Agent) AlterUserScramCredentials(ctx context.Context, req *keelpb.AlterUserScramCredentialsRequest) (*keelpb.AlterUserScramCredentialsResponse, error) {
	return a.client.AlterUserScramCredentials(ctx, req)
}
