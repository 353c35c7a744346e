package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/acl"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// autoCreateBudget bounds the auto-creation one Metadata request waits
// for, controller and image both: a client's Metadata has no timeout of
// its own, and its connection's is some seconds. What is not created in
// it is LEADER_NOT_AVAILABLE, and the client's next Metadata asks again.
const autoCreateBudget = 5 * time.Second

// mayCreate says whether the client on c may create topic: Kafka's rule
// for CreateTopics and auto-creation alike, CREATE on the cluster or on
// the topic.
func (s *Server) mayCreate(c *conn, topic string) bool {
	return s.allowed(c, kmsg.ACLOperationCreate, kmsg.ACLResourceTypeCluster, acl.ClusterName) ||
		s.allowed(c, kmsg.ACLOperationCreate, kmsg.ACLResourceTypeTopic, topic)
}

// autoCreates says whether a Metadata request r for a topic that does not
// exist creates it (Kafka's handleTopicMetadataRequest): the client
// allows it (v4+; below v4 every request does) and the cluster's
// auto.create.topics.enable is on.
func autoCreates(img *fsm.Image, r *kmsg.MetadataRequest) bool {
	return (r.Version < 4 || r.AllowAutoTopicCreation) && img.AutoCreate().Enabled
}

// autoCreate creates topic, which a Metadata request named and the image
// lacks, through the active controller with the client's principal (as a
// forwarded CreateTopics, so the controller authorizes it too), with the
// cluster's num.partitions and default.replication.factor, as Kafka's
// AutoTopicCreationManager does. It returns the topic's metadata once
// this broker's image has it, and otherwise the error Kafka answers:
// TOPIC_AUTHORIZATION_FAILED for a client that may not create it (and
// nothing is asked), LEADER_NOT_AVAILABLE while the creation is under
// way, or why the controller refused it (INVALID_TOPIC_EXCEPTION,
// INVALID_REPLICATION_FACTOR, ...). An internal topic is never
// auto-created: its owner creates it with its own settings.
func (s *Server) autoCreate(ctx context.Context, c *conn, topic string, alive map[int32]bool) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	mt.Topic = &topic
	fail := func(ke *kerr.Error) kmsg.MetadataResponseTopic {
		mt.ErrorCode = ke.Code
		return mt
	}
	if fsm.IsInternalTopic(topic) {
		return fail(kerr.UnknownTopicOrPartition)
	}
	if !s.mayCreate(c, topic) {
		return fail(kerr.TopicAuthorizationFailed)
	}
	if ctx.Err() != nil {
		return fail(kerr.LeaderNotAvailable) // the request's budget is spent
	}
	ac := s.cfg.Image.Image().AutoCreate()
	req := &keelpb.CreateTopicRequest{Name: topic, Partitions: ac.Partitions, ReplicationFactor: ac.ReplicationFactor, Principal: c.principal}
	err := rpc.Validate(req)
	if err == nil {
		_, err = s.cfg.Controller.CreateTopic(ctx, req)
	}
	switch code := status.Code(err); {
	case err == nil:
		s.log.Info("created a topic a client asked for (auto.create.topics.enable)", "topic", topic, "partitions", ac.Partitions,
			"replication_factor", ac.ReplicationFactor, "principal", c.principal)
	case code == codes.AlreadyExists:
		// Another client's Metadata, or an admin, created it first.
	case code == codes.Unavailable || code == codes.DeadlineExceeded || code == codes.Canceled || code == codes.ResourceExhausted:
		s.log.Debug("auto-creating a topic: the controller did not answer; the client asks again", "topic", topic, "err", err)
		return fail(kerr.LeaderNotAvailable)
	default:
		// Said to the client, which stops: a replication factor above the
		// live brokers, a name Kafka refuses.
		s.log.Debug("auto-creating a topic was refused", "topic", topic, "err", err)
		ke, _ := topicAdminError(err)
		return fail(ke)
	}
	s.awaitTopic(ctx, topic, true)
	img := s.cfg.Image.Image()
	t, ok := img.Topic(topic)
	if !ok {
		return fail(kerr.LeaderNotAvailable)
	}
	return topicMetadata(img, t, alive)
}
