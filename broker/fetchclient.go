package broker

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// Reasons of the errors BrokerService.Fetch answers, carried as a
// google.rpc.ErrorInfo in rpc.ErrorDomain (read them with rpc.ReasonOf):
// Kafka's fetch error codes. Fetch also answers rpc.ReasonFencedLeaderEpoch
// (FailedPrecondition) for a fetch at an older leader epoch than the
// leader's, the follower then waits for the metadata to catch up, and
// rpc.ReasonUnknownTopicOrPartition (NotFound) for a replica the broker
// does not hold.
const (
	// ReasonUnknownLeaderEpoch: the fetch names a newer leader epoch than
	// the leader has applied; the follower retries.
	ReasonUnknownLeaderEpoch = "UNKNOWN_LEADER_EPOCH"
	// ReasonNotLeaderOrFollower: the broker does not lead the partition, or
	// the fetcher is not one of its replicas.
	ReasonNotLeaderOrFollower = "NOT_LEADER_OR_FOLLOWER"
	// ReasonOffsetOutOfRange: the fetch offset is past the log end.
	ReasonOffsetOutOfRange = "OFFSET_OUT_OF_RANGE"
)

// FetchClient is a follower's connection to its partition leader's
// BrokerService (DialLeader makes one).
type FetchClient interface {
	Fetch(ctx context.Context, req *keelpb.FetchRequest) (*keelpb.FetchResponse, error)
	// FetchSession opens a fetch session (BrokerService.FetchSession);
	// a leader of an older version answers its first receive Unimplemented.
	FetchSession(ctx context.Context, opts ...grpc.CallOption) (keelpb.BrokerService_FetchSessionClient, error)
	Close() error
}

// grpcFetchClient is a gRPC connection to a leader's BrokerService.
type grpcFetchClient struct {
	cc *grpc.ClientConn
	keelpb.BrokerServiceClient
}

func (c grpcFetchClient) Fetch(ctx context.Context, req *keelpb.FetchRequest) (*keelpb.FetchResponse, error) {
	return c.BrokerServiceClient.Fetch(ctx, req)
}

func (c grpcFetchClient) Close() error { return c.cc.Close() }

// DialLeader connects lazily to a partition leader's BrokerService at addr,
// with creds and opts (a data plane whose fetches carry records raises the
// receive size). Reconnects back off to a second at most (not gRPC's two
// minutes), so a restarted leader is fetched from again within a fetch
// interval or two.
func DialLeader(addr string, creds credentials.TransportCredentials, opts ...grpc.DialOption) (FetchClient, error) {
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           grpcbackoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
	}, append(rpc.PooledDialOptions(), opts...)...)...)
	if err != nil {
		return nil, fmt.Errorf("leader address %q: %w", addr, err)
	}
	return grpcFetchClient{cc: cc, BrokerServiceClient: keelpb.NewBrokerServiceClient(cc)}, nil
}
