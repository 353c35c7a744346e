package kafka

import (
	"context"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/broker/group"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// Kafka's defaults for the internal topic of groups.
const (
	// DefaultOffsetsTopicPartitions is offsets.topic.num.partitions.
	DefaultOffsetsTopicPartitions = 50
	// DefaultOffsetsTopicReplicationFactor is
	// offsets.topic.replication.factor.
	DefaultOffsetsTopicReplicationFactor = 3
)

// The coordinator key types of FindCoordinator.
const (
	coordinatorGroup       = 0
	coordinatorTransaction = 1
)

// noTransactions is the answer to what only a transaction coordinator
// serves.
const noTransactions = "Keel does not serve transactions"

// offsetsTopic asks the controller for __consumer_offsets, once at a time,
// and remembers why it could not be made, for the clients that ask for a
// coordinator meanwhile.
type offsetsTopic struct {
	mu       sync.Mutex
	creating bool
	problem  string
}

// findCoordinator answers each key: the live leader of the group's
// __consumer_offsets partition, or COORDINATOR_NOT_AVAILABLE until it has
// one (the topic is created on the first request that finds it absent, as
// Kafka's auto topic creation does).
func (s *Server) findCoordinator(c *conn, r *kmsg.FindCoordinatorRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
	keys := r.CoordinatorKeys
	if r.Version < 4 {
		keys = []string{r.CoordinatorKey}
	}
	img := s.cfg.Image.Image()
	for _, key := range keys {
		co := s.coordinator(c, img, r.CoordinatorType, key)
		if r.Version >= 4 {
			resp.Coordinators = append(resp.Coordinators, co)
			continue
		}
		resp.ErrorCode, resp.NodeID, resp.Host, resp.Port = co.ErrorCode, co.NodeID, co.Host, co.Port
		if r.Version >= 1 {
			resp.ErrorMessage = co.ErrorMessage
		}
	}
	return resp
}

func (s *Server) coordinator(c *conn, img *fsm.Image, typ int8, key string) kmsg.FindCoordinatorResponseCoordinator {
	co := kmsg.NewFindCoordinatorResponseCoordinator()
	co.Key, co.NodeID, co.Port = key, -1, -1
	fail := func(ke *kerr.Error, msg string) kmsg.FindCoordinatorResponseCoordinator {
		co.ErrorCode = ke.Code
		if msg != "" {
			co.ErrorMessage = &msg
		}
		return co
	}
	switch {
	case typ == coordinatorTransaction:
		return fail(kerr.UnsupportedVersion, noTransactions)
	case typ != coordinatorGroup:
		return fail(kerr.InvalidRequest, fmt.Sprintf("coordinator type %d: Keel serves group coordinators (0) only", typ))
	case !s.allowed(c, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeGroup, key):
		return fail(kerr.GroupAuthorizationFailed, "")
	}
	t, ok := img.Topic(group.OffsetsTopic)
	if !ok {
		return fail(kerr.CoordinatorNotAvailable, s.createOffsetsTopic(img))
	}
	p, ok := img.Partition(t.ID, group.PartitionFor(key, t.Partitions))
	if !ok || p.Leader == fsm.NoLeader {
		return fail(kerr.CoordinatorNotAvailable, "the group's __consumer_offsets partition has no leader")
	}
	for _, b := range liveBrokers(img) {
		if b.id == p.Leader {
			co.NodeID, co.Host, co.Port = b.id, b.host, b.port
			return co
		}
	}
	return fail(kerr.CoordinatorNotAvailable, "the leader of the group's __consumer_offsets partition is not live")
}

// createOffsetsTopic asks the controller for __consumer_offsets in the
// background, as this broker's own request (CreateTopicRequest.internal:
// the controller gives it its configs), unless a request is under way, and
// returns what to tell the client meanwhile. A cluster with fewer live
// brokers than the replication factor is not asked: Kafka answers
// COORDINATOR_NOT_AVAILABLE then, and the message names the flag.
func (s *Server) createOffsetsTopic(img *fsm.Image) string {
	rf := s.cfg.OffsetsTopicReplicationFactor
	if live := len(liveBrokers(img)); live < int(rf) {
		return fmt.Sprintf("%s needs %d live brokers for its replication factor (--offsets-topic-replication-factor); the cluster has %d",
			group.OffsetsTopic, rf, live)
	}
	o := &s.offsets
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.creating {
		return "creating " + group.OffsetsTopic
	}
	o.creating = true
	problem := o.problem
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.ctx, defaultAdminTimeout)
		defer cancel()
		_, err := s.cfg.Controller.CreateTopic(ctx, &keelpb.CreateTopicRequest{
			Name: group.OffsetsTopic, Partitions: s.cfg.OffsetsTopicPartitions, ReplicationFactor: int32(rf), Internal: true,
		})
		o.mu.Lock()
		defer o.mu.Unlock()
		o.creating = false
		switch {
		case err == nil:
			o.problem = ""
			s.log.Info("created the internal topic of groups", "topic", group.OffsetsTopic, "partitions", s.cfg.OffsetsTopicPartitions, "replication_factor", rf)
		case status.Code(err) == codes.AlreadyExists:
			o.problem = ""
		default:
			problem := fmt.Sprintf("creating %s: %s", group.OffsetsTopic, status.Convert(err).Message())
			if problem != o.problem {
				// Once per reason: clients ask again every few hundred ms.
				s.log.Warn("could not create the internal topic of groups", "topic", group.OffsetsTopic, "err", err)
			}
			o.problem = problem
		}
	}()
	if problem != "" {
		return problem
	}
	return "creating " + group.OffsetsTopic
}
