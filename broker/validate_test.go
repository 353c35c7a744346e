package broker

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/keel-dev/keel/proto/keelpb"
)

var validFetchRequest = &keelpb.FetchRequest{ReplicaId: 2, TopicId: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
	Partition: 0, LeaderEpoch: 1, FetchOffset: 0}

// invalidFetches are fetches each wrong in one field, by the field.
func invalidFetches() []struct {
	name, field string
	req         *keelpb.FetchRequest
} {
	edit := func(f func(*keelpb.FetchRequest)) *keelpb.FetchRequest {
		r := proto.Clone(validFetchRequest).(*keelpb.FetchRequest)
		f(r)
		return r
	}
	return []struct {
		name, field string
		req         *keelpb.FetchRequest
	}{
		{"a negative replica id", "replica_id", edit(func(r *keelpb.FetchRequest) { r.ReplicaId = -1 })},
		{"no topic id", "topic_id", edit(func(r *keelpb.FetchRequest) { r.TopicId = "" })},
		{"a topic name for a topic id", "topic_id", edit(func(r *keelpb.FetchRequest) { r.TopicId = "orders" })},
		{"an over-long topic id", "topic_id", edit(func(r *keelpb.FetchRequest) { r.TopicId = strings.Repeat("0", 1<<20) })},
		{"a topic id with bad hex", "topic_id", edit(func(r *keelpb.FetchRequest) { r.TopicId = "zf1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0" })},
		{"a negative partition", "partition", edit(func(r *keelpb.FetchRequest) { r.Partition = -1 })},
		{"a negative leader epoch", "leader_epoch", edit(func(r *keelpb.FetchRequest) { r.LeaderEpoch = -1 })},
		{"a negative fetch offset", "fetch_offset", edit(func(r *keelpb.FetchRequest) { r.FetchOffset = -1 })},
		{"a negative broker epoch", "broker_epoch", edit(func(r *keelpb.FetchRequest) { r.BrokerEpoch = -1 })},
		{"a negative last fetched epoch", "last_fetched_epoch", edit(func(r *keelpb.FetchRequest) { r.LastFetchedEpoch = proto.Int32(-1) })},
		{"a negative max bytes", "max_bytes", edit(func(r *keelpb.FetchRequest) { r.MaxBytes = -1 })},
		{"a negative max wait", "max_wait_ms", edit(func(r *keelpb.FetchRequest) { r.MaxWaitMs = -1 })},
		{"a negative log start offset", "log_start_offset", edit(func(r *keelpb.FetchRequest) { r.LogStartOffset = -1 })},
	}
}

// TestBrokerService_RefusesInvalidFetches: a fetch wrong in one field is
// refused with InvalidArgument naming it, before the service looks at its
// agent or data plane (it has neither: a fetch that got through would
// panic). The error quotes no more than a bounded part of the request.
func TestBrokerService_RefusesInvalidFetches(t *testing.T) {
	for _, tc := range invalidFetches() {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("the fetch got past validation (panic: %v)", p)
					}
				}()
				_, err = brokerService{}.Fetch(context.Background(), tc.req)
			}()
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tc.field) {
				t.Fatalf("err = %v; want InvalidArgument naming %s", err, tc.field)
			}
			if len(st.Message()) > 200 {
				t.Errorf("the error is %d bytes long", len(st.Message()))
			}
		})
	}
}

// TestBrokerService_PassesValidFetches: a well-formed fetch gets past the
// checks, here to a broker without a data plane.
func TestBrokerService_PassesValidFetches(t *testing.T) {
	_, err := brokerService{a: &Agent{cfg: Config{BrokerID: 1}}}.Fetch(context.Background(), validFetchRequest)
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("a valid fetch to a broker without a data plane: err = %v, want Unimplemented", err)
	}
}

// TestBrokerService_EveryMethodValidated: every method of BrokerService has
// invalid-request cases for every field of its request, or takes no input.
// A new method or field without checks fails here.
func TestBrokerService_EveryMethodValidated(t *testing.T) {
	withoutInput := map[string]bool{"Inspect": true, "ScrubLogs": true}
	checked := map[string]map[string]bool{"Fetch": {}, "FetchSession": {}}
	for _, tc := range invalidFetches() {
		checked["Fetch"][tc.field] = true
	}
	for _, tc := range invalidSessions() {
		checked["FetchSession"][tc.field] = true
	}
	sd := keelpb.File_broker_proto.Services().ByName("BrokerService")
	desc := keelpb.BrokerService_ServiceDesc
	var methods []string
	for _, m := range desc.Methods {
		methods = append(methods, m.MethodName)
	}
	for _, s := range desc.Streams {
		methods = append(methods, s.StreamName)
	}
	for _, m := range methods {
		in := sd.Methods().ByName(protoreflect.Name(m)).Input()
		fields, ok := checked[m]
		if !ok && !withoutInput[m] {
			t.Errorf("%s has no invalid-request case and is not listed as taking no input", m)
			continue
		}
		for i := range in.Fields().Len() {
			f := in.Fields().Get(i)
			if f.Kind() != protoreflect.BoolKind && !fields[string(f.Name())] {
				t.Errorf("%s: no invalid-request case names %s", m, f.FullName())
			}
		}
	}
}
