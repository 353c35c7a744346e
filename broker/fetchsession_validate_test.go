package broker

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/proto/keelpb"
)

func validSessionRequest() *keelpb.FetchSessionRequest {
	return &keelpb.FetchSessionRequest{ReplicaId: 2, BrokerEpoch: 3, MaxWaitMs: 500,
		Partitions: []*keelpb.FetchSessionPartition{{TopicId: make([]byte, 16), Partition: 1, LeaderEpoch: 1}},
		Forgotten:  []*keelpb.FetchSessionPartitionKey{{TopicId: make([]byte, 16), Partition: 2}}}
}

// invalidSessions are fetch session requests each wrong in one field.
func invalidSessions() []struct {
	name, field string
	req         *keelpb.FetchSessionRequest
} {
	edit := func(f func(*keelpb.FetchSessionRequest)) *keelpb.FetchSessionRequest {
		r := validSessionRequest()
		f(r)
		return r
	}
	return []struct {
		name, field string
		req         *keelpb.FetchSessionRequest
	}{
		{"a negative replica id", "replica_id", edit(func(r *keelpb.FetchSessionRequest) { r.ReplicaId = -1 })},
		{"a negative broker epoch", "broker_epoch", edit(func(r *keelpb.FetchSessionRequest) { r.BrokerEpoch = -1 })},
		{"a negative max wait", "max_wait_ms", edit(func(r *keelpb.FetchSessionRequest) { r.MaxWaitMs = -1 })},
		{"a negative max bytes", "max_bytes", edit(func(r *keelpb.FetchSessionRequest) { r.MaxBytes = -1 })},
		{"a short topic id", "partitions", edit(func(r *keelpb.FetchSessionRequest) { r.Partitions[0].TopicId = []byte("orders") })},
		{"a negative partition", "partitions", edit(func(r *keelpb.FetchSessionRequest) { r.Partitions[0].Partition = -1 })},
		{"a negative fetch offset", "partitions", edit(func(r *keelpb.FetchSessionRequest) { r.Partitions[0].FetchOffset = -1 })},
		{"a negative last fetched epoch", "partitions", edit(func(r *keelpb.FetchSessionRequest) { r.Partitions[0].LastFetchedEpoch = proto.Int32(-1) })},
		{"a forgotten partition's bad topic id", "forgotten", edit(func(r *keelpb.FetchSessionRequest) { r.Forgotten[0].TopicId = nil })},
	}
}

// oneRequest is a session stream that receives req.
type oneRequest struct {
	keelpb.BrokerService_FetchSessionServer
	req *keelpb.FetchSessionRequest
}

func (s oneRequest) Recv() (*keelpb.FetchSessionRequest, error) { return s.req, nil }

// TestBrokerService_RefusesInvalidSessionRequests: each request of a fetch
// session is validated before the data plane sees it.
func TestBrokerService_RefusesInvalidSessionRequests(t *testing.T) {
	if _, err := (validatedSession{oneRequest{req: validSessionRequest()}}).Recv(); err != nil {
		t.Fatalf("a valid request: %v", err)
	}
	for _, tc := range invalidSessions() {
		t.Run(tc.name, func(t *testing.T) {
			_, err := validatedSession{oneRequest{req: tc.req}}.Recv()
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tc.field) {
				t.Fatalf("err = %v; want InvalidArgument naming %s", err, tc.field)
			}
		})
	}
}
