package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/broker/group"
)

// Groups is the group coordinator the listener hands group requests to:
// package broker/group's Coordinator. The listener finds the coordinator
// (FindCoordinator), authorizes every request (READ, DESCRIBE or DELETE on
// the group, READ or DESCRIBE on the topics), and tells Groups which
// __consumer_offsets partitions this broker leads; Groups answers with
// Kafka's error codes, NOT_COORDINATOR for a group whose partition this
// broker does not lead and COORDINATOR_LOAD_IN_PROGRESS while it loads it.
// Each response is built with the request's ResponseKind, at its version.
type Groups interface {
	// Elect tells it that this broker leads partition of partitions
	// __consumer_offsets partitions in leaderEpoch: it loads the
	// partition's groups (again, for a new epoch). Resign, that it does
	// not lead partition any more: it drops the partition's groups, and
	// every request waiting on one fails with NOT_COORDINATOR.
	Elect(partition, leaderEpoch, partitions int32)
	Resign(partition int32)

	JoinGroup(ctx context.Context, r *kmsg.JoinGroupRequest) *kmsg.JoinGroupResponse
	SyncGroup(ctx context.Context, r *kmsg.SyncGroupRequest) *kmsg.SyncGroupResponse
	Heartbeat(ctx context.Context, r *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse
	LeaveGroup(ctx context.Context, r *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse
	// OffsetCommit commits the request's offsets; the listener has already
	// removed the topics the client may not READ (and answers them).
	OffsetCommit(ctx context.Context, r *kmsg.OffsetCommitRequest) *kmsg.OffsetCommitResponse
	// OffsetFetch answers one group's committed offsets (a v8+ request's
	// groups one by one, a v0-7 request as one): topics nil asks for all
	// of them, which the listener then filters by DESCRIBE on the topic.
	OffsetFetch(ctx context.Context, version int16, group string, topics []kmsg.OffsetFetchRequestGroupTopic, requireStable bool) kmsg.OffsetFetchResponseGroup
	// OffsetDelete deletes a group's committed offsets for partitions no
	// member is subscribed to (KIP-496).
	OffsetDelete(ctx context.Context, r *kmsg.OffsetDeleteRequest) *kmsg.OffsetDeleteResponse
	DescribeGroup(ctx context.Context, version int16, group string) kmsg.DescribeGroupsResponseGroup
	// ListGroups lists the groups of the partitions loaded here, filtered
	// by state (KIP-518) and type (KIP-848) when the filters are not
	// empty; code is COORDINATOR_LOAD_IN_PROGRESS while a partition loads.
	ListGroups(ctx context.Context, states, types []string) (groups []kmsg.ListGroupsResponseGroup, code int16)
	// DeleteGroup deletes an empty group and its offsets: 0,
	// NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, NOT_COORDINATOR, ...
	DeleteGroup(ctx context.Context, group string) int16
}

// NewGroups makes the listener's Groups once the listener has made the Log
// it writes through (over Config.Backend); Config.Groups is one.
type NewGroups func(log group.Log) Groups
