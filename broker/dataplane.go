package broker

import (
	"context"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// DataPlane is the part of a broker that holds replicas: a Handler told of
// every role change, that serves its followers' fetches on the broker's gRPC
// service, sends its ISR changes through the agent, and reports its replicas
// to `keel broker inspect`. Package broker/replication's Manager is the
// reference broker's, with a log per replica (broker/partlog).
type DataPlane interface {
	Handler
	// Start is called once, by broker.Start before the agent applies any
	// metadata, with the agent's side of the link. An error fails Start.
	Start(Link) error
	// ReplicaFetch serves BrokerService.Fetch: a follower replica fetching
	// from this broker as its partition leader. The request has passed
	// rpc.ValidateFetch. Errors are gRPC statuses. (It is not named Fetch so
	// that a data plane can serve its clients' fetches under that name.)
	ReplicaFetch(context.Context, *keelpb.FetchRequest) (*keelpb.FetchResponse, error)
	// Replicas reports the replicas this broker holds, in topic name then
	// partition order.
	Replicas() []ReplicaStatus
	// Close stops everything Start started and waits for it. The agent calls
	// it once, after its own loops have stopped.
	Close() error
}

// SessionDataPlane is a DataPlane that serves fetch sessions too
// (BrokerService.FetchSession); a broker whose data plane is not one answers
// them Unimplemented, and its followers fetch each partition on its own.
type SessionDataPlane interface {
	DataPlane
	// ReplicaFetchSession serves one follower's session until the stream
	// ends. Each request Recv returns has passed rpc.ValidateFetchSession.
	ReplicaFetchSession(FetchSessionStream) error
}

// FetchSessionStream is the leader's side of a fetch session. SendMsg takes
// a keelpb.FetchSessionResponse, or a value that encodes itself as one
// (rpc.WireMarshaler).
type FetchSessionStream interface {
	Context() context.Context
	Recv() (*keelpb.FetchSessionRequest, error)
	SendMsg(m any) error
}

// Link is what the agent offers its data plane. *Agent implements it.
type Link interface {
	// BrokerID is this broker's id.
	BrokerID() int32
	// BrokerEpoch is this broker's current broker epoch, 0 until its first
	// registration is accepted: what its fetches carry (KIP-903).
	BrokerEpoch() int64
	// AlterPartition sends a partition leader's ISR change to the active
	// controller, stamped with this broker's id and current broker epoch,
	// each ISR member with its broker epoch (KIP-903), and returns the
	// partition as the controller left it. Refusals carry a reason
	// (rpc.ReasonOf): FailedPrecondition with FENCED_LEADER_EPOCH,
	// INVALID_UPDATE_VERSION, INELIGIBLE_REPLICA (a member fenced, shutting
	// down, or registered again since), STALE_BROKER_EPOCH, or
	// NOT_CONTROLLER (the controller is behind this broker's metadata);
	// InvalidArgument with INVALID_REQUEST; NotFound for a partition that
	// no longer exists; Unavailable when no controller answered (the change
	// may or may not have been made). After any refusal the leader waits
	// for the metadata to show a newer partition state and decides again:
	// retrying with the same epochs can only be refused again.
	AlterPartition(ctx context.Context, change ISRChange) (*keelpb.PartitionDescription, error)
	// ReportReplicaLogs sends the active controller the logs of replicas
	// whose partition awaits its replicas' logs
	// (fsm.Partition.AwaitsReplicaLogs), or whose log holds a leader
	// epoch above the one the metadata gives the partition (see
	// ReplicaLog). A data plane that keeps logs must report them, or a
	// partition restored from a snapshot never gets a leader. Refusals:
	// FailedPrecondition with STALE_BROKER_EPOCH; Unavailable when no
	// controller answered. The controller acts on a report only while
	// the partition is as the report says (its leader epoch), so a data
	// plane reports again when that changes, and to each new active
	// controller (a new controller epoch).
	ReportReplicaLogs(ctx context.Context, logs []ReplicaLog) error
}

// ISRChange is a partition leader's request to set the ISR, valid only at
// the leader and partition epochs it names. It also says the leader has
// recovered (KIP-704's RECOVERED, the AlterPartition default): a partition
// led after an unclean election is RECOVERING until its leader's first
// change.
type ISRChange struct {
	TopicID        fsm.TopicID
	Partition      int32
	LeaderEpoch    int32
	PartitionEpoch int32
	ISR            []int32
	// BrokerEpochs, when set, holds the broker epoch of each member of ISR,
	// in its order, as the leader knows it: a data plane that learns its
	// followers' epochs from their fetches (as Kafka's does) gives them
	// here, so that a follower that restarted since it fetched is refused.
	// Otherwise the agent sends each member's epoch in its own image.
	BrokerEpochs []int64
}

// Replica roles, as `keel broker inspect` shows them.
const (
	RoleLeader   = "leader"
	RoleFollower = "follower"
	// RoleStopped: the replica is held but not replicated (the broker is
	// stopping).
	RoleStopped = "stopped"
)

// ReplicaStatus is one replica as its broker sees it.
type ReplicaStatus struct {
	Topic          string
	TopicID        fsm.TopicID
	Partition      int32
	Role           string // RoleLeader, RoleFollower or RoleStopped
	Leader         int32
	LeaderEpoch    int32
	PartitionEpoch int32
	Replicas, ISR  []int32
}
