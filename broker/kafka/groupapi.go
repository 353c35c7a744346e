package kafka

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/acl"
)

// The group APIs: the listener authorizes each request as Kafka's
// KafkaApis does, answers what the client may not do, and hands the rest
// to the group coordinator (Config.Groups), which decides everything about
// the group. The coordinator's calls may wait (a JoinGroup up to the
// rebalance timeout, an OffsetCommit for its records to commit), so they
// run off the connection's reader, and their answers still go back in
// request order (answer.ready).

// groupKeys are the API keys served only with a coordinator
// (Config.Groups): without one they are neither advertised nor served.
var groupKeys = map[int16]bool{
	8:  true, // OffsetCommit
	9:  true, // OffsetFetch
	10: true, // FindCoordinator
	11: true, // JoinGroup
	12: true, // Heartbeat
	13: true, // LeaveGroup
	14: true, // SyncGroup
	15: true, // DescribeGroups
	16: true, // ListGroups
	42: true, // DeleteGroups
	47: true, // OffsetDelete
}

// serves says whether the listener serves key at all.
func (s *Server) serves(key int16) bool {
	if _, ok := versions[key]; !ok {
		return false
	}
	return s.groups != nil || !groupKeys[key]
}

// handleGroup answers a group request (groupKeys), or says it is none.
// The answer's response is set once ready is closed.
func (s *Server) handleGroup(ctx context.Context, c *conn, a *answer, req kmsg.Request) bool {
	var call func(context.Context) kmsg.Response
	// read: the request is a member's (join, sync, heartbeat, leave),
	// which needs READ on its group.
	read, group := false, ""
	switch r := req.(type) {
	case *kmsg.FindCoordinatorRequest:
		a.resp = s.findCoordinator(c, r)
		return true
	case *kmsg.JoinGroupRequest:
		read, group = true, r.Group
		call = func(ctx context.Context) kmsg.Response { return s.groups.JoinGroup(ctx, r) }
	case *kmsg.SyncGroupRequest:
		read, group = true, r.Group
		call = func(ctx context.Context) kmsg.Response { return s.groups.SyncGroup(ctx, r) }
	case *kmsg.HeartbeatRequest:
		read, group = true, r.Group
		call = func(ctx context.Context) kmsg.Response { return s.groups.Heartbeat(ctx, r) }
	case *kmsg.LeaveGroupRequest:
		read, group = true, r.Group
		call = func(ctx context.Context) kmsg.Response { return s.groups.LeaveGroup(ctx, r) }
	case *kmsg.OffsetCommitRequest:
		call = func(ctx context.Context) kmsg.Response { return s.offsetCommit(ctx, c, r) }
	case *kmsg.OffsetFetchRequest:
		call = func(ctx context.Context) kmsg.Response { return s.offsetFetch(ctx, c, r) }
	case *kmsg.OffsetDeleteRequest:
		call = func(ctx context.Context) kmsg.Response { return s.offsetDelete(ctx, c, r) }
	case *kmsg.DescribeGroupsRequest:
		call = func(ctx context.Context) kmsg.Response { return s.describeGroups(ctx, c, r) }
	case *kmsg.ListGroupsRequest:
		call = func(ctx context.Context) kmsg.Response { return s.listGroups(ctx, c, r) }
	case *kmsg.DeleteGroupsRequest:
		call = func(ctx context.Context) kmsg.Response { return s.deleteGroups(ctx, c, r) }
	default:
		return false
	}
	if read && !s.allowed(c, kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, group) {
		a.resp = errorResponse(req, kerr.GroupAuthorizationFailed.Code, "")
		return true
	}
	ready := make(chan struct{})
	a.ready = ready
	go func() {
		defer close(ready)
		a.resp = call(ctx)
	}()
	return true
}

// offsetCommit commits what the client may: READ on the group, and on
// each topic (TOPIC_AUTHORIZATION_FAILED for the partitions of the others;
// UNKNOWN_TOPIC_OR_PARTITION for a topic the image does not have), as
// KafkaApis.handleOffsetCommitRequest does.
func (s *Server) offsetCommit(ctx context.Context, c *conn, r *kmsg.OffsetCommitRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
	fail := func(t kmsg.OffsetCommitRequestTopic, code int16) {
		out := kmsg.NewOffsetCommitResponseTopic()
		out.Topic = t.Topic
		for _, p := range t.Partitions {
			out.Partitions = append(out.Partitions, kmsg.OffsetCommitResponseTopicPartition{Partition: p.Partition, ErrorCode: code})
		}
		resp.Topics = append(resp.Topics, out)
	}
	if !s.allowed(c, kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, r.Group) {
		for _, t := range r.Topics {
			fail(t, kerr.GroupAuthorizationFailed.Code)
		}
		return resp
	}
	img := s.cfg.Image.Image()
	pass := *r
	pass.Topics = nil
	for _, t := range r.Topics {
		switch tp, ok := img.Topic(t.Topic); {
		case !s.allowed(c, kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, t.Topic):
			fail(t, kerr.TopicAuthorizationFailed.Code)
		case !ok:
			fail(t, kerr.UnknownTopicOrPartition.Code)
		default:
			// A partition the topic does not have is refused alone.
			known := t
			known.Partitions = nil
			var unknown kmsg.OffsetCommitRequestTopic
			unknown.Topic = t.Topic
			for _, p := range t.Partitions {
				if p.Partition < 0 || p.Partition >= tp.Partitions {
					unknown.Partitions = append(unknown.Partitions, p)
				} else {
					known.Partitions = append(known.Partitions, p)
				}
			}
			if len(unknown.Partitions) > 0 {
				fail(unknown, kerr.UnknownTopicOrPartition.Code)
			}
			if len(known.Partitions) > 0 {
				pass.Topics = append(pass.Topics, known)
			}
		}
	}
	if len(pass.Topics) == 0 && len(r.Topics) > 0 {
		return resp
	}
	got := s.groups.OffsetCommit(ctx, &pass)
	got.Topics = append(got.Topics, resp.Topics...)
	return got
}

// offsetFetch answers each group the client may DESCRIBE, with the
// offsets of the topics it may DESCRIBE: a named topic it may not is
// TOPIC_AUTHORIZATION_FAILED, and all topics (nil) leaves those out, as
// KafkaApis.handleOffsetFetchRequest does.
func (s *Server) offsetFetch(ctx context.Context, c *conn, r *kmsg.OffsetFetchRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
	if r.Version >= 8 {
		for _, g := range r.Groups {
			resp.Groups = append(resp.Groups, s.offsetFetchGroup(ctx, c, r.Version, g.Group, g.Topics, r.RequireStable))
		}
		return resp
	}
	var topics []kmsg.OffsetFetchRequestGroupTopic
	if r.Topics != nil {
		topics = make([]kmsg.OffsetFetchRequestGroupTopic, 0, len(r.Topics))
		for _, t := range r.Topics {
			topics = append(topics, kmsg.OffsetFetchRequestGroupTopic{Topic: t.Topic, Partitions: t.Partitions})
		}
	}
	g := s.offsetFetchGroup(ctx, c, r.Version, r.Group, topics, r.RequireStable)
	resp.ErrorCode = g.ErrorCode
	for _, t := range g.Topics {
		out := kmsg.NewOffsetFetchResponseTopic()
		out.Topic = t.Topic
		for _, p := range t.Partitions {
			out.Partitions = append(out.Partitions, kmsg.OffsetFetchResponseTopicPartition{
				Partition: p.Partition, Offset: p.Offset, LeaderEpoch: p.LeaderEpoch, Metadata: p.Metadata, ErrorCode: p.ErrorCode,
			})
		}
		resp.Topics = append(resp.Topics, out)
	}
	if r.Version < 2 && g.ErrorCode != 0 {
		// v0-1 have no group error: each partition asked for carries it.
		resp.Topics = nil
		for _, t := range r.Topics {
			out := kmsg.NewOffsetFetchResponseTopic()
			out.Topic = t.Topic
			for _, p := range t.Partitions {
				out.Partitions = append(out.Partitions, kmsg.OffsetFetchResponseTopicPartition{Partition: p, Offset: -1, LeaderEpoch: -1, ErrorCode: g.ErrorCode})
			}
			resp.Topics = append(resp.Topics, out)
		}
	}
	return resp
}

func (s *Server) offsetFetchGroup(ctx context.Context, c *conn, version int16, group string, topics []kmsg.OffsetFetchRequestGroupTopic, requireStable bool) kmsg.OffsetFetchResponseGroup {
	if !s.allowed(c, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeGroup, group) {
		out := kmsg.NewOffsetFetchResponseGroup()
		out.Group, out.ErrorCode = group, kerr.GroupAuthorizationFailed.Code
		return out
	}
	if topics == nil {
		g := s.groups.OffsetFetch(ctx, version, group, nil, requireStable)
		g.Topics = slices.DeleteFunc(g.Topics, func(t kmsg.OffsetFetchResponseGroupTopic) bool {
			return !s.allowed(c, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, t.Topic)
		})
		return g
	}
	var pass []kmsg.OffsetFetchRequestGroupTopic
	var denied []kmsg.OffsetFetchResponseGroupTopic
	for _, t := range topics {
		if s.allowed(c, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, t.Topic) {
			pass = append(pass, t)
			continue
		}
		out := kmsg.NewOffsetFetchResponseGroupTopic()
		out.Topic = t.Topic
		for _, p := range t.Partitions {
			out.Partitions = append(out.Partitions, kmsg.OffsetFetchResponseGroupTopicPartition{Partition: p, Offset: -1, LeaderEpoch: -1, ErrorCode: kerr.TopicAuthorizationFailed.Code})
		}
		denied = append(denied, out)
	}
	if pass == nil {
		// Every topic refused: nothing to ask the coordinator (and an
		// empty list must not read as "all topics").
		out := kmsg.NewOffsetFetchResponseGroup()
		out.Group, out.Topics = group, denied
		return out
	}
	g := s.groups.OffsetFetch(ctx, version, group, pass, requireStable)
	g.Topics = append(g.Topics, denied...)
	return g
}

// offsetDelete needs DELETE on the group and READ on each topic.
func (s *Server) offsetDelete(ctx context.Context, c *conn, r *kmsg.OffsetDeleteRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.OffsetDeleteResponse)
	if !s.allowed(c, kmsg.ACLOperationDelete, kmsg.ACLResourceTypeGroup, r.Group) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp
	}
	pass := *r
	pass.Topics = nil
	var denied []kmsg.OffsetDeleteResponseTopic
	for _, t := range r.Topics {
		if s.allowed(c, kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, t.Topic) {
			pass.Topics = append(pass.Topics, t)
			continue
		}
		out := kmsg.NewOffsetDeleteResponseTopic()
		out.Topic = t.Topic
		for _, p := range t.Partitions {
			out.Partitions = append(out.Partitions, kmsg.OffsetDeleteResponseTopicPartition{Partition: p.Partition, ErrorCode: kerr.TopicAuthorizationFailed.Code})
		}
		denied = append(denied, out)
	}
	if len(pass.Topics) == 0 && len(r.Topics) > 0 {
		resp.Topics = denied
		return resp
	}
	got := s.groups.OffsetDelete(ctx, &pass)
	got.Topics = append(got.Topics, denied...)
	return got
}

// describeGroups describes each group the client may DESCRIBE.
func (s *Server) describeGroups(ctx context.Context, c *conn, r *kmsg.DescribeGroupsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, g := range r.Groups {
		if !s.allowed(c, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeGroup, g) {
			out := kmsg.NewDescribeGroupsResponseGroup()
			out.Group, out.ErrorCode = g, kerr.GroupAuthorizationFailed.Code
			resp.Groups = append(resp.Groups, out)
			continue
		}
		out := s.groups.DescribeGroup(ctx, r.Version, g)
		if r.IncludeAuthorizedOperations {
			// KIP-430: the operations on the group the client may do.
			out.AuthorizedOperations = 0
			for _, op := range []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationDescribe, kmsg.ACLOperationDelete} {
				if s.allowed(c, op, kmsg.ACLResourceTypeGroup, g) {
					out.AuthorizedOperations |= 1 << op
				}
			}
		}
		resp.Groups = append(resp.Groups, out)
	}
	return resp
}

// listGroups lists every group for a client that may DESCRIBE the
// cluster, else the groups it may DESCRIBE.
func (s *Server) listGroups(ctx context.Context, c *conn, r *kmsg.ListGroupsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ListGroupsResponse)
	groups, code := s.groups.ListGroups(ctx, r.StatesFilter, r.TypesFilter)
	resp.ErrorCode = code
	if !s.allowed(c, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeCluster, acl.ClusterName) {
		groups = slices.DeleteFunc(groups, func(g kmsg.ListGroupsResponseGroup) bool {
			return !s.allowed(c, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeGroup, g.Group)
		})
	}
	resp.Groups = groups
	return resp
}

// deleteGroups deletes each group the client may DELETE.
func (s *Server) deleteGroups(ctx context.Context, c *conn, r *kmsg.DeleteGroupsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteGroupsResponse)
	for _, g := range r.Groups {
		out := kmsg.NewDeleteGroupsResponseGroup()
		out.Group = g
		if !s.allowed(c, kmsg.ACLOperationDelete, kmsg.ACLResourceTypeGroup, g) {
			out.ErrorCode = kerr.GroupAuthorizationFailed.Code
		} else {
			out.ErrorCode = s.groups.DeleteGroup(ctx, g)
		}
		resp.Groups = append(resp.Groups, out)
	}
	return resp
}
