package kafka

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/rpc"
)

// overTheWire is err as a gRPC client receives it: the status, details
// included, marshalled and read back, as grpc-go carries it in its
// grpc-status-details-bin trailer.
func overTheWire(t *testing.T, err error) error {
	t.Helper()
	b, merr := proto.Marshal(status.Convert(err).Proto())
	if merr != nil {
		t.Fatal(merr)
	}
	var p spb.Status
	if uerr := proto.Unmarshal(b, &p); uerr != nil {
		t.Fatal(uerr)
	}
	return status.FromProto(&p).Err()
}

// TestAdminError: a controller's refusal becomes the Kafka error a client
// acts on by its code, its reason and the field its BadRequest detail
// names, never by its message's text, which is passed on as it is.
func TestAdminError(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want *kerr.Error
	}{
		{"invalid topic name", rpc.InvalidArgument("name", "%q holds a character other than ASCII letters, digits, '.', '_' and '-'", "bad/name"), kerr.InvalidTopicException},
		{"invalid partition count", rpc.InvalidArgument("partitions", "0 is not positive"), kerr.InvalidPartitions},
		{"invalid partition count to add", rpc.InvalidArgument("count", "2 is not more than the topic's 3"), kerr.InvalidPartitions},
		{"invalid replication factor", rpc.InvalidArgument("replication_factor", "9 exceeds the 3 registered brokers"), kerr.InvalidReplicationFactor},
		{"invalid assignments", rpc.InvalidArgument("assignments", "partition 0 names broker 4 twice"), kerr.InvalidReplicaAssignment},
		{"invalid config", rpc.InvalidArgument("configs", "retention.ms: not a number"), kerr.InvalidConfig},
		{"a field Kafka has no error for", rpc.InvalidArgument("principal", "longer than 255 bytes"), kerr.InvalidRequest},
		// The field is the detail's, whatever the text says: a wrapper's
		// words before the field, or a refusal whose message starts with
		// what looks like a field. Read from the text, both were misread.
		{"message starts with other words", rpc.BadField(codes.InvalidArgument, "topic orders: replication_factor: 9 exceeds the 3 registered brokers", "replication_factor", "9 exceeds the 3 registered brokers"), kerr.InvalidReplicationFactor},
		{"message looks like a field", status.Error(codes.FailedPrecondition, "partitions: the topic is being deleted"), kerr.InvalidRequest},
		{"reason invalid replica assignment", rpc.WithReason(codes.FailedPrecondition, rpc.ReasonInvalidReplicaAssignment, "name: revert needs an unclean election"), kerr.InvalidReplicaAssignment},
		{"topic exists", status.Error(codes.AlreadyExists, "topic already exists: \"orders\""), kerr.TopicAlreadyExists},
		{"unknown topic", rpc.WithReason(codes.NotFound, rpc.ReasonUnknownTopicOrPartition, "unknown topic or partition: topic \"orders\""), kerr.UnknownTopicOrPartition},
		{"not authorised", status.Error(codes.PermissionDenied, "name: not an admin"), kerr.ClusterAuthorizationFailed},
		{"no quorum", status.Error(codes.Unavailable, "write not committed in time (no quorum?)"), kerr.RequestTimedOut},
		{"not a status", errors.New("name: connection reset"), kerr.UnknownServerError},
		{"internal", status.Error(codes.Internal, "name: disk on fire"), kerr.UnknownServerError},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.err
			if _, ok := status.FromError(err); ok {
				err = overTheWire(t, err)
			}
			got, msg := adminError(err)
			if got != tt.want {
				t.Errorf("adminError = %v, want %v", got, tt.want)
			}
			if want := status.Convert(tt.err).Message(); msg != want {
				t.Errorf("message = %q, want %q", msg, want)
			}
		})
	}
}
