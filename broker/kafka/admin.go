package kafka

import (
	"context"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

const (
	// defaultAdminTimeout bounds a forwarded admin request whose client
	// gave no timeout.
	defaultAdminTimeout = 30 * time.Second
	// seenWait bounds how long a created topic is waited for in this
	// broker's own image, so that the client's next Metadata finds it.
	seenWait = 5 * time.Second
)

// adminError turns a controller's refusal into the Kafka error a client
// acts on, and its message.
func adminError(err error) (*kerr.Error, string) {
	st := status.Convert(err)
	msg := st.Message()
	field, _, _ := rpc.BadFieldOf(err)
	switch st.Code() {
	case codes.AlreadyExists:
		return kerr.TopicAlreadyExists, msg
	case codes.NotFound:
		return kerr.UnknownTopicOrPartition, msg
	case codes.PermissionDenied:
		return kerr.ClusterAuthorizationFailed, msg
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Canceled:
		return kerr.RequestTimedOut, msg
	case codes.InvalidArgument, codes.FailedPrecondition:
		if rpc.ReasonOf(err) == rpc.ReasonInvalidReplicaAssignment {
			return kerr.InvalidReplicaAssignment, msg
		}
		switch field {
		case "name", "topic":
			return kerr.InvalidTopicException, msg
		case "partitions", "count":
			return kerr.InvalidPartitions, msg
		case "replication_factor":
			return kerr.InvalidReplicationFactor, msg
		case "assignments", "replicas":
			return kerr.InvalidReplicaAssignment, msg
		case "configs":
			return kerr.InvalidConfig, msg
		}
		return kerr.InvalidRequest, msg
	}
	return kerr.UnknownServerError, msg
}

func adminTimeout(ms int32) time.Duration {
	if ms <= 0 {
		return defaultAdminTimeout
	}
	return time.Duration(ms) * time.Millisecond
}

// topicAdminError is adminError for a request on a topic: the controller
// refusing the forwarded principal is TOPIC_AUTHORIZATION_FAILED, as Kafka
// answers CreateTopics, DeleteTopics and CreatePartitions.
func topicAdminError(err error) (*kerr.Error, string) {
	if status.Code(err) == codes.PermissionDenied {
		return kerr.TopicAuthorizationFailed, status.Convert(err).Message()
	}
	return adminError(err)
}

// notAdmin is the refusal of an admin request from a client that is no
// super user and whose ACLs do not allow it.
const notAdmin = "not authorized: this needs a super user (an admin certificate) or an ACL allowing it"

func (s *Server) createTopics(ctx context.Context, c *conn, r *kmsg.CreateTopicsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
	ctx, cancel := context.WithTimeout(ctx, adminTimeout(r.TimeoutMillis))
	defer cancel()
	seen := map[string]bool{}
	for _, rt := range r.Topics {
		out := kmsg.NewCreateTopicsResponseTopic()
		out.Topic = rt.Topic
		fail := func(ke *kerr.Error, msg string) {
			out.ErrorCode = ke.Code
			out.ErrorMessage = &msg
			resp.Topics = append(resp.Topics, out)
		}
		switch {
		case !s.mayCreate(c, rt.Topic):
			fail(kerr.TopicAuthorizationFailed, notAdmin)
			continue
		case seen[rt.Topic]:
			// Kafka refuses a topic named twice in one request.
			fail(kerr.InvalidRequest, "the topic is named more than once in the request")
			continue
		}
		seen[rt.Topic] = true
		req := &keelpb.CreateTopicRequest{Name: rt.Topic, ValidateOnly: r.ValidateOnly, Principal: c.principal}
		if len(rt.ReplicaAssignment) > 0 {
			if rt.NumPartitions != -1 || rt.ReplicationFactor != -1 {
				fail(kerr.InvalidRequest, "give either replica assignments, or partitions and a replication factor")
				continue
			}
			as := append([]kmsg.CreateTopicsRequestTopicReplicaAssignment(nil), rt.ReplicaAssignment...)
			sort.Slice(as, func(i, j int) bool { return as[i].Partition < as[j].Partition })
			ok := true
			for i, a := range as {
				if a.Partition != int32(i) {
					ok = false
					break
				}
				req.Assignments = append(req.Assignments, &keelpb.PartitionAssignment{Replicas: a.Replicas})
			}
			if !ok {
				fail(kerr.InvalidReplicaAssignment, "replica assignments must number the partitions 0, 1, 2, ...")
				continue
			}
		} else {
			// -1 leaves them to the broker: the cluster's num.partitions
			// and default.replication.factor (Kafka's).
			req.Partitions, req.ReplicationFactor = rt.NumPartitions, int32(rt.ReplicationFactor)
			ac := s.cfg.Image.Image().AutoCreate()
			if req.Partitions == -1 {
				req.Partitions = ac.Partitions
			}
			if req.ReplicationFactor == -1 {
				req.ReplicationFactor = ac.ReplicationFactor
			}
		}
		if len(rt.Configs) > 0 {
			req.Configs = map[string]string{}
			for _, cfg := range rt.Configs {
				if cfg.Value != nil {
					req.Configs[cfg.Name] = *cfg.Value
				}
			}
		}
		if err := rpc.Validate(req); err != nil {
			fail(topicAdminError(err))
			continue
		}
		created, err := s.cfg.Controller.CreateTopic(ctx, req)
		if err != nil {
			fail(topicAdminError(err))
			continue
		}
		d := created.GetTopic()
		out.NumPartitions = int32(len(d.GetPartitions()))
		if len(d.GetPartitions()) > 0 {
			out.ReplicationFactor = int16(len(d.GetPartitions()[0].GetReplicas()))
		}
		if id, err := fsm.ParseTopicID(d.GetId()); err == nil {
			out.TopicID = [16]byte(id)
		}
		for _, cfg := range d.GetEffectiveConfigs() {
			v := cfg.GetValue()
			out.Configs = append(out.Configs, kmsg.CreateTopicsResponseTopicConfig{Name: cfg.GetName(), Value: &v, Source: configSource(cfg.GetSource())})
		}
		if !r.ValidateOnly {
			s.awaitTopic(ctx, rt.Topic, true)
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

// awaitOffset waits, briefly, for this broker's image to reach offset, so
// that a client that reads next here finds what it changed. A timeout is
// no error: what it changed is committed, and the image gets there.
func (s *Server) awaitOffset(ctx context.Context, offset uint64) {
	s.await(ctx, func(img *fsm.Image) bool { return img.Offset >= offset })
}

// awaitTopic waits, briefly, for this broker's image to show topic created
// (or gone), so that a client that asks for metadata next finds what it
// did. A timeout is no error: the client retries its metadata anyway.
func (s *Server) awaitTopic(ctx context.Context, topic string, present bool) {
	s.await(ctx, func(img *fsm.Image) bool {
		_, ok := img.Topic(topic)
		return ok == present
	})
}

// await polls this broker's image until done holds of it, for seenWait at
// most: what a client changed through the controller is seen here before
// it is answered, so that its next request here finds it.
func (s *Server) await(ctx context.Context, done func(*fsm.Image) bool) {
	ctx, cancel := context.WithTimeout(ctx, seenWait)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !done(s.cfg.Image.Image()) {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *Server) deleteTopics(ctx context.Context, c *conn, r *kmsg.DeleteTopicsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)
	ctx, cancel := context.WithTimeout(ctx, adminTimeout(r.TimeoutMillis))
	defer cancel()
	type target struct {
		name *string
		id   [16]byte
	}
	var targets []target
	for _, n := range r.TopicNames {
		targets = append(targets, target{name: &n})
	}
	if r.Version >= 6 {
		for _, t := range r.Topics {
			targets = append(targets, target{name: t.Topic, id: t.TopicID})
		}
	}
	img := s.cfg.Image.Image()
	for _, tg := range targets {
		out := kmsg.NewDeleteTopicsResponseTopic()
		out.Topic, out.TopicID = tg.name, tg.id
		fail := func(ke *kerr.Error, msg string) {
			out.ErrorCode = ke.Code
			if r.Version >= 5 {
				out.ErrorMessage = &msg
			}
			resp.Topics = append(resp.Topics, out)
		}
		name := ""
		switch {
		case tg.name != nil:
			name = *tg.name
		case tg.id != [16]byte{}:
			t, ok := img.TopicByID(fsm.TopicID(tg.id))
			if !ok {
				fail(kerr.UnknownTopicID, "no topic has this id")
				continue
			}
			name = t.Name
			out.Topic = &t.Name
		}
		if !s.allowed(c, kmsg.ACLOperationDelete, kmsg.ACLResourceTypeTopic, name) {
			fail(kerr.TopicAuthorizationFailed, notAdmin)
			continue
		}
		if err := rpc.Validate(&keelpb.DeleteTopicRequest{Name: name, Principal: c.principal}); err != nil {
			fail(kerr.UnknownTopicOrPartition, status.Convert(err).Message())
			continue
		}
		if t, ok := img.Topic(name); ok {
			out.TopicID = [16]byte(t.ID)
		}
		if err := s.cfg.Controller.DeleteTopic(ctx, &keelpb.DeleteTopicRequest{Name: name, Principal: c.principal}); err != nil {
			fail(topicAdminError(err))
			continue
		}
		s.awaitTopic(ctx, name, false)
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

func (s *Server) createPartitions(ctx context.Context, c *conn, r *kmsg.CreatePartitionsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.CreatePartitionsResponse)
	ctx, cancel := context.WithTimeout(ctx, adminTimeout(r.TimeoutMillis))
	defer cancel()
	for _, rt := range r.Topics {
		out := kmsg.NewCreatePartitionsResponseTopic()
		out.Topic = rt.Topic
		fail := func(ke *kerr.Error, msg string) {
			out.ErrorCode = ke.Code
			out.ErrorMessage = &msg
			resp.Topics = append(resp.Topics, out)
		}
		if !s.allowed(c, kmsg.ACLOperationAlter, kmsg.ACLResourceTypeTopic, rt.Topic) {
			fail(kerr.TopicAuthorizationFailed, notAdmin)
			continue
		}
		req := &keelpb.CreatePartitionsRequest{Topic: rt.Topic, Count: rt.Count, ValidateOnly: r.ValidateOnly, Principal: c.principal}
		for _, a := range rt.Assignment {
			req.Assignments = append(req.Assignments, &keelpb.PartitionAssignment{Replicas: a.Replicas})
		}
		if err := rpc.Validate(req); err != nil {
			fail(topicAdminError(err))
			continue
		}
		if _, err := s.cfg.Controller.CreatePartitions(ctx, req); err != nil {
			fail(topicAdminError(err))
			continue
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}
