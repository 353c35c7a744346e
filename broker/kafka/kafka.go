package kafka

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/connlimit"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/tlsauth"
)

// ImageSource gives the broker's current metadata image; *broker.Agent is
// one.
type ImageSource interface {
	Image() *fsm.Image
}

// Controller is the broker's way to the active controller; *broker.Agent
// is one. Errors are the controllers' gRPC statuses. Admin requests carry
// the client's principal, which the controller authorizes.
type Controller interface {
	// AllocateProducerIds returns a block of producer ids for this broker.
	AllocateProducerIds(ctx context.Context) (start int64, count int32, err error)
	CreateTopic(ctx context.Context, req *keelpb.CreateTopicRequest) (*keelpb.CreateTopicResponse, error)
	CreatePartitions(ctx context.Context, req *keelpb.CreatePartitionsRequest) (*keelpb.CreatePartitionsResponse, error)
	DeleteTopic(ctx context.Context, req *keelpb.DeleteTopicRequest) error
	// AlterConfigs changes one resource's configs, all or none, and
	// returns its configs in effect afterwards.
	AlterConfigs(ctx context.Context, req *keelpb.IncrementalAlterConfigsRequest) (*keelpb.IncrementalAlterConfigsResponse, error)
	// The controller's admin APIs (ctladmin.go): writes forwarded with the
	// client's principal, reads answered by the active controller.
	ElectLeaders(ctx context.Context, req *keelpb.ElectLeadersRequest) (*keelpb.ElectLeadersResponse, error)
	AlterPartitionReassignments(ctx context.Context, req *keelpb.AlterPartitionReassignmentsRequest) (*keelpb.AlterPartitionReassignmentsResponse, error)
	ListPartitionReassignments(ctx context.Context) (*keelpb.ListPartitionReassignmentsResponse, error)
	UpdateFeatures(ctx context.Context, req *keelpb.UpdateFeaturesRequest) (*keelpb.UpdateFeaturesResponse, error)
	DescribeQuorum(ctx context.Context) (*keelpb.DescribeQuorumResponse, error)
	AlterUserScramCredentials(ctx context.Context, req *keelpb.AlterUserScramCredentialsRequest) (*keelpb.AlterUserScramCredentialsResponse, error)
	AlterClientQuotas(ctx context.Context, req *keelpb.AlterClientQuotasRequest) (*keelpb.AlterClientQuotasResponse, error)
	CreateAcls(ctx context.Context, req *keelpb.CreateAclsRequest) (*keelpb.CreateAclsResponse, error)
	DeleteAcls(ctx context.Context, req *keelpb.DeleteAclsRequest) (*keelpb.DeleteAclsResponse, error)
}

// Defaults.
const (
	// DefaultMaxRequestSize is Kafka's socket.request.max.bytes: a request
	// frame larger than this closes its connection before it is read.
	DefaultMaxRequestSize = 100 << 20
	// DefaultMaxOtherRequestSize bounds the frame of every request but a
	// produce: decoding one costs many times its size (otherRequestCost),
	// and a client's Fetch, Metadata or ListOffsets for thousands of
	// partitions takes some tens of KiB.
	DefaultMaxOtherRequestSize = 1 << 20
	// DefaultQueuedMaxRequestBytes is Kafka's queued.max.request.bytes:
	// the request bytes a broker holds, read and not answered yet, over all
	// its connections: as much for produce requests, and again for the
	// others (counted at their cost decoded, otherRequestCost times their
	// size).
	DefaultQueuedMaxRequestBytes = 256 << 20
	// DefaultConnectionMaxRequestBytes is the same for one connection: a
	// maximal produce request fits whole.
	DefaultConnectionMaxRequestBytes = DefaultMaxRequestSize
	// DefaultIdleTimeout is Kafka's connections.max.idle.ms.
	DefaultIdleTimeout = 10 * time.Minute
	// maxFetchResponse bounds one Fetch answer whatever the client asks.
	maxFetchResponse = 64 << 20
	// DefaultFetchMaxWait bounds a Fetch's wait for data whatever its
	// MaxWaitMillis: Kafka's consumer default fetch.max.wait.ms. Kafka's
	// broker takes the client's word, up to 24.8 days.
	DefaultFetchMaxWait = 500 * time.Millisecond
)

// Config configures a Server.
type Config struct {
	// BrokerID is this broker's id: the leader partitions must name for
	// Produce, Fetch, ListOffsets and OffsetForLeaderEpoch to be served
	// here.
	BrokerID int32
	// Image is the broker's replayed metadata (required).
	Image ImageSource
	// Ready, when set, holds back every request until it is closed
	// (broker.Agent.CaughtUp): a broker that has not caught up with the
	// metadata log would answer that the cluster's topics do not exist,
	// and clients give up on them. Connections are accepted meanwhile and
	// wait, as a KRaft broker serves requests only after its initial
	// catch-up. Nil serves at once.
	Ready <-chan struct{}
	// Backend is the data plane (required): package broker/replication's
	// Manager, or a MemoryBackend.
	Backend broker.Backend
	// Controller forwards admin requests and allocates producer ids
	// (required).
	Controller Controller
	// TLS, when set, serves TLS with the broker's certificate and requires
	// a client certificate from the cluster's CA: a keel identity but a
	// probe (a super user), or an application's (tlsauth.RoleUser), whose
	// principal User:NAME the image's ACLs authorize. Nil is plaintext,
	// where anyone who reaches the port may do everything.
	TLS *tlsauth.Config
	// SASL offers SASL/SCRAM (sasl.go); the zero value is SASLOff.
	SASL SASLMode
	// SuperUsers are principals (User:NAME) allowed everything, beside the
	// keel roles' certificates: Kafka's super.users.
	SuperUsers []string
	// MaxRequestSize bounds a request frame; default DefaultMaxRequestSize.
	MaxRequestSize int32
	// MaxOtherRequestSize bounds the frame of any request but a produce;
	// default DefaultMaxOtherRequestSize. A frame over its limit closes
	// its connection before its body is read, as Kafka does.
	MaxOtherRequestSize int32
	// QueuedMaxRequestBytes bounds the bytes of the produce requests the
	// listener holds, read and not answered yet, and again those of the
	// other requests (see DefaultQueuedMaxRequestBytes);
	// ConnectionMaxRequestBytes, those of one connection. A connection
	// whose next request does not fit reads nothing until it does; a
	// request larger than a budget waits until that budget is free, then
	// takes it whole. Defaults DefaultQueuedMaxRequestBytes and
	// DefaultConnectionMaxRequestBytes.
	QueuedMaxRequestBytes, ConnectionMaxRequestBytes int64
	// MaxBatchSize bounds one produced batch, whatever its topic's
	// max.message.bytes (which every produce is checked against, from the
	// image); default MaxRequestSize: the frame cap is the broker's
	// maximum, as socket.request.max.bytes is Kafka's.
	MaxBatchSize int32
	// IdleTimeout closes a connection that sends nothing for this long;
	// default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// FetchMaxWait bounds how long a Fetch waits for MinBytes, whatever
	// the client asks; default DefaultFetchMaxWait.
	FetchMaxWait time.Duration
	// Conns bounds the connections the listener holds, counted from
	// accept (before TLS): in all, per source address, and not yet
	// through their TLS handshake (in plaintext: their first request).
	// A connection beyond a bound is closed as soon as it is accepted.
	// The zero value bounds nothing.
	Conns connlimit.Limits
	// Groups, when set, makes the group coordinator (groups.go) over the
	// __consumer_offsets partitions this broker leads. Nil serves no
	// consumer groups.
	Groups NewGroups
	// GroupElections, with Groups, tells the coordinator which
	// __consumer_offsets partitions this broker leads: the agent's
	// Handler (broker/node wires it). Nil elects nothing (tests call
	// Elect themselves).
	GroupElections *GroupElections
	// OffsetsTopicPartitions and OffsetsTopicReplicationFactor are those
	// of __consumer_offsets, when this broker asks for it (Kafka's
	// offsets.topic.num.partitions and offsets.topic.replication.factor);
	// defaults DefaultOffsetsTopicPartitions and
	// DefaultOffsetsTopicReplicationFactor.
	OffsetsTopicPartitions        int32
	OffsetsTopicReplicationFactor int16
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics, when set, takes the listener's request metrics
	// (docs/metrics.md).
	Metrics prometheus.Registerer

	// noQuotas leaves the quota code out altogether: the baseline of the
	// benchmark that shows what it costs (tests only).
	noQuotas bool
}
