package rpc

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/keel-dev/keel/proto/keelpb"
)

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func emptyAssignmentList(n int) []*keelpb.PartitionAssignment {
	as := make([]*keelpb.PartitionAssignment, n)
	for i := range as {
		as[i] = &keelpb.PartitionAssignment{}
	}
	return as
}

func replicaIDs(n int, from int32) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = from + int32(i)
	}
	return ids
}

// unpackedReplicas is a PartitionAssignment whose n replicas are sent one
// varint field each, as a proto2-style encoder would: the codec must count
// them as it counts a packed run.
func unpackedReplicas(n int) []byte {
	var b []byte
	for i := range n {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(i))
	}
	return b
}

// assignmentsOf is a CreateTopicRequest holding assignments encoded as given.
func assignmentsOf(encoded ...[]byte) []byte {
	var b []byte
	for _, a := range encoded {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, a)
	}
	return b
}

// TestCheckEntries counts repeated entries in raw requests: packed and
// unpacked, split over several runs, nested, with multi-byte ids, and
// refuses the first field over Validate's bound, naming it.
func TestCheckEntries(t *testing.T) {
	configs := func(n int) map[string]string {
		m := make(map[string]string, n)
		for i := range n {
			m[fmt.Sprintf("k%d", i)] = "v"
		}
		return m
	}
	partitions := func(n int) []*keelpb.TopicPartition {
		tps := make([]*keelpb.TopicPartition, n)
		for i := range tps {
			tps[i] = &keelpb.TopicPartition{Topic: "t", Partition: int32(i)}
		}
		return tps
	}
	assigned := func(rf ...int) *keelpb.CreateTopicRequest {
		r := &keelpb.CreateTopicRequest{Name: "t"}
		for _, n := range rf {
			r.Assignments = append(r.Assignments, &keelpb.PartitionAssignment{Replicas: replicaIDs(n, 0)})
		}
		return r
	}
	packed64 := mustMarshal(t, &keelpb.PartitionAssignment{Replicas: replicaIDs(40, 0)})
	packed25 := mustMarshal(t, &keelpb.PartitionAssignment{Replicas: replicaIDs(25, 40)})
	tests := []struct {
		name    string
		req     proto.Message // or raw, for a request of type typ
		raw     []byte
		typ     protoreflect.FullName
		wantErr string // "" passes; else the refusal's message
	}{
		{name: "no assignments", req: &keelpb.CreateTopicRequest{Name: "t", Partitions: 3, ReplicationFactor: 3}},
		{name: "100,000 empty assignments", req: &keelpb.CreateTopicRequest{Name: "t", Assignments: emptyAssignmentList(100_000)}},
		{name: "100,001 empty assignments", req: &keelpb.CreateTopicRequest{Name: "t", Assignments: emptyAssignmentList(100_001)},
			wantErr: "assignments: 100001 entries; at most 100000"},
		{name: "64 replicas", req: assigned(3, 64)},
		{name: "65 replicas, packed", req: assigned(3, 65),
			wantErr: "assignments[1].replicas: 65 entries; at most 64"},
		{name: "64 replicas with 5-byte ids", req: &keelpb.CreateTopicRequest{Name: "t", Assignments: []*keelpb.PartitionAssignment{{Replicas: replicaIDs(64, 1<<30)}}}},
		{name: "64 replicas, unpacked", raw: assignmentsOf(unpackedReplicas(64)), typ: "keel.v1.CreateTopicRequest"},
		{name: "65 replicas, unpacked", raw: assignmentsOf(unpackedReplicas(3), unpackedReplicas(65)), typ: "keel.v1.CreateTopicRequest",
			wantErr: "assignments[1].replicas: 65 entries; at most 64"},
		{name: "65 replicas in two packed runs", raw: assignmentsOf(append(bytes.Clone(packed64), packed25...)), typ: "keel.v1.CreateTopicRequest",
			wantErr: "assignments[0].replicas: 65 entries; at most 64"},
		{name: "64 configs", req: &keelpb.CreateTopicRequest{Name: "t", Configs: configs(64)}},
		{name: "65 configs", req: &keelpb.CreateTopicRequest{Name: "t", Configs: configs(65)},
			wantErr: "configs: 65 entries; at most 64"},
		{name: "CreatePartitions: 100,001 assignments", req: &keelpb.CreatePartitionsRequest{Topic: "t", Assignments: emptyAssignmentList(100_001)},
			wantErr: "assignments: 100001 entries; at most 100000"},
		{name: "ElectLeaders: 100,000 partitions", req: &keelpb.ElectLeadersRequest{Partitions: partitions(100_000)}},
		{name: "ElectLeaders: 100,001 partitions", req: &keelpb.ElectLeadersRequest{Partitions: partitions(100_001)},
			wantErr: "partitions: 100001 entries; at most 100000"},
		{name: "AlterPartition: 64 in the ISR", req: &keelpb.AlterPartitionRequest{NewIsr: replicaIDs(64, 0)}},
		{name: "AlterPartition: 65 in the ISR", req: &keelpb.AlterPartitionRequest{NewIsr: replicaIDs(65, 0)},
			wantErr: "new_isr: 65 entries; at most 64"},
		{name: "AlterPartitionReassignments: 65 replicas", req: &keelpb.AlterPartitionReassignmentsRequest{Topic: "t", Replicas: replicaIDs(65, 0)},
			wantErr: "replicas: 65 entries; at most 64"},
		{name: "AlterPartitionReassignments: a plan entry with 65 replicas", req: &keelpb.AlterPartitionReassignmentsRequest{Partitions: []*keelpb.ReassignmentTarget{
			{Topic: "t", Replicas: replicaIDs(3, 0)}, {Topic: "t", Partition: 1, Replicas: replicaIDs(65, 0)}}},
			wantErr: "partitions[1].replicas: 65 entries; at most 64"},
		{name: "no repeated fields", req: validHeartbeat},
		// Unknown fields are skipped, not counted.
		{name: "unknown fields", raw: protowire.AppendBytes(protowire.AppendTag(assignmentsOf(nil), 99, protowire.BytesType), make([]byte, 1000)),
			typ: "keel.v1.CreateTopicRequest"},
		// Malformed: left to proto.Unmarshal, which says what is wrong.
		{name: "truncated", raw: []byte{4<<3 | 2, 100, 0}, typ: "keel.v1.CreateTopicRequest"},
		{name: "bad tag", raw: []byte{0}, typ: "keel.v1.CreateTopicRequest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, typ := tt.raw, tt.typ
			if tt.req != nil {
				raw, typ = mustMarshal(t, tt.req), tt.req.ProtoReflect().Descriptor().FullName()
			}
			err := checkEntries(typ, raw)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("checkEntries = %v, want nil", err)
				}
				return
			}
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != tt.wantErr {
				t.Fatalf("checkEntries = %v, want InvalidArgument %q", err, tt.wantErr)
			}
		})
	}
}

// TestCheckEntries_AllocatesNothing: counting a large valid request's
// entries allocates nothing, however many there are.
func TestCheckEntries_AllocatesNothing(t *testing.T) {
	req := &keelpb.CreateTopicRequest{Name: "t"}
	for i := range 100_000 {
		req.Assignments = append(req.Assignments, &keelpb.PartitionAssignment{Replicas: []int32{int32(i % 7), 100, 1 << 20}})
	}
	b := mustMarshal(t, req)
	name := req.ProtoReflect().Descriptor().FullName()
	if allocs := testing.AllocsPerRun(5, func() {
		if err := checkEntries(name, b); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Fatalf("checkEntries allocated %v times per call, want 0", allocs)
	}
}

func TestCheckSize(t *testing.T) {
	tests := []struct {
		typ      protoreflect.FullName
		size     int
		wantCode codes.Code
	}{
		{typ: "keel.v1.BrokerHeartbeatRequest", size: smallRequestBytes, wantCode: codes.OK},
		{typ: "keel.v1.BrokerHeartbeatRequest", size: smallRequestBytes + 1, wantCode: codes.ResourceExhausted},
		{typ: "keel.v1.RegisterBrokerRequest", size: 1 << 20, wantCode: codes.ResourceExhausted},
		{typ: "keel.v1.FetchRequest", size: smallRequestBytes + 1, wantCode: codes.ResourceExhausted},
		{typ: "keel.v1.CreateTopicRequest", size: maxRecvMsgBytes, wantCode: codes.OK},
		{typ: "keel.v1.CreatePartitionsRequest", size: maxRecvMsgBytes, wantCode: codes.OK},
		{typ: "keel.v1.ElectLeadersRequest", size: maxRecvMsgBytes, wantCode: codes.OK},
		{typ: "keel.v1.RestoreSnapshotRequest", size: restoreChunkBytes + 64, wantCode: codes.OK},
		// Not a keel request (health, reflection): small.
		{typ: "grpc.health.v1.HealthCheckRequest", size: smallRequestBytes + 1, wantCode: codes.ResourceExhausted},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %d", tt.typ.Name(), tt.size), func(t *testing.T) {
			err := checkSize(tt.typ, tt.size)
			if status.Code(err) != tt.wantCode {
				t.Fatalf("checkSize = %v, want %v", err, tt.wantCode)
			}
			if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("%s of %d bytes; at most %d for this method", tt.typ.Name(), tt.size, smallRequestBytes)) {
				t.Errorf("the refusal %q does not name the request, its size and the limit", err)
			}
		})
	}
}

// TestRequestChecks_CoverEveryRequest: every repeated field a keel request
// can hold, at any depth, has its own bound; every bound and size limit
// names something that exists; and the valid requests of the Validate
// tests fit their methods' size.
func TestRequestChecks_CoverEveryRequest(t *testing.T) {
	seenField := map[protoreflect.FullName]bool{}
	var walk func(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool)
	walk = func(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) {
		if seen[md.FullName()] {
			return
		}
		seen[md.FullName()] = true
		for i := range md.Fields().Len() {
			fd := md.Fields().Get(i)
			if fd.Cardinality() == protoreflect.Repeated {
				seenField[fd.FullName()] = true
				if _, ok := repeatedBounds[fd.FullName()]; !ok {
					t.Errorf("%s (in a request of %s) has no bound in repeatedBounds", fd.FullName(), md.FullName())
				}
			}
			if fd.Message() != nil && !fd.IsMap() {
				walk(fd.Message(), seen)
			}
		}
	}
	methods := map[string]bool{}
	protoregistry.GlobalFiles.RangeFilesByPackage("keel.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				md := sd.Methods().Get(j)
				methods[fmt.Sprintf("/%s/%s", sd.FullName(), md.Name())] = true
				walk(md.Input(), map[protoreflect.FullName]bool{})
				if _, ok := requestLimits[md.Input().FullName()]; !ok {
					t.Errorf("%s's request %s has no size limit", md.FullName(), md.Input().FullName())
				}
			}
		}
		return true
	})
	for f := range repeatedBounds {
		if !seenField[f] {
			t.Errorf("repeatedBounds has %s, which is no repeated field of a keel request", f)
		}
	}
	for m := range largeRequestMethods {
		if !methods[m] {
			t.Errorf("largeRequestMethods has %s, which is no keel method", m)
		}
	}
	for _, tc := range validControllerRequests() {
		name := tc.req.ProtoReflect().Descriptor().FullName()
		if err := checkSize(name, proto.Size(tc.req)); err != nil {
			t.Errorf("%s: %v", caseName(tc), err)
		}
		if err := checkEntries(name, mustMarshal(t, tc.req)); err != nil {
			t.Errorf("%s: %v", caseName(tc), err)
		}
	}
}

// codecFake answers the calls the codec test makes.
type codecFake struct {
	keelpb.UnimplementedControllerServiceServer
}

func (codecFake) CreateTopic(_ context.Context, req *keelpb.CreateTopicRequest) (*keelpb.CreateTopicResponse, error) {
	return &keelpb.CreateTopicResponse{Topic: &keelpb.TopicDescription{Name: req.GetName()}}, nil
}

func (codecFake) StreamMetadata(req *keelpb.StreamMetadataRequest, ss grpc.ServerStreamingServer[keelpb.MetadataPush]) error {
	return ss.Send(&keelpb.MetadataPush{ControllerId: req.GetBrokerId()})
}

// TestServerCodec_RefusesBeforeDecoding: through a real server, a request
// over its method's size or over a bound is refused with its own code and
// message, for unary and streaming calls, and the next request on the same
// connection is served.
func TestServerCodec_RefusesBeforeDecoding(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(ServerOptions()...)
	keelpb.RegisterControllerServiceServer(g, codecFake{})
	go g.Serve(lis)
	defer g.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cl := keelpb.NewControllerServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wantCode := func(t *testing.T, err error, code codes.Code, msg string) {
		t.Helper()
		if st := status.Convert(err); st.Code() != code || st.Message() != msg {
			t.Fatalf("err = %v; want %v %q", err, code, msg)
		}
	}

	// Four MiB of empty assignments, the report's request, sent raw.
	body := bytes.Repeat([]byte{4<<3 | 2, 0}, (maxRecvMsgBytes-64)/2)
	var resp []byte
	err = cc.Invoke(ctx, keelpb.ControllerService_CreateTopic_FullMethodName, &body, &resp, grpc.ForceCodecV2(rawCodec{}))
	wantCode(t, err, codes.InvalidArgument, fmt.Sprintf("assignments: %d entries; at most 100000", len(body)/2))

	_, err = cl.CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: "t", Assignments: []*keelpb.PartitionAssignment{{Replicas: replicaIDs(65, 0)}}})
	wantCode(t, err, codes.InvalidArgument, "assignments[0].replicas: 65 entries; at most 64")

	big := edited(validStreamMetadata, func(r *keelpb.StreamMetadataRequest) { r.ClusterId = strings.Repeat("x", smallRequestBytes) })
	s, err := cl.StreamMetadata(ctx, big)
	if err == nil {
		_, err = s.Recv()
	}
	wantCode(t, err, codes.ResourceExhausted, fmt.Sprintf("StreamMetadataRequest of %d bytes; at most %d for this method", proto.Size(big), smallRequestBytes))

	// Valid requests are decoded and served, on the same connection.
	if resp, err := cl.CreateTopic(ctx, validCreateTopic); err != nil || resp.GetTopic().GetName() != validCreateTopic.GetName() {
		t.Fatalf("CreateTopic = %v, %v", resp, err)
	}
	s, err = cl.StreamMetadata(ctx, validStreamMetadata)
	if err != nil {
		t.Fatal(err)
	}
	if push, err := s.Recv(); err != nil || push.GetControllerId() != validStreamMetadata.GetBrokerId() {
		t.Fatalf("StreamMetadata: %v, %v", push, err)
	}
}
