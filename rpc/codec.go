package rpc

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/keel-dev/keel/proto/keelpb"
)

// Decoding is where a request costs memory: an empty PartitionAssignment is
// two bytes on the wire and about seventy once decoded, so 4 MiB of them
// take some 140 MiB. Validate refuses such a request, but only once it is
// decoded. The server codec refuses it before: it bounds each request's
// size by its method, and counts each repeated field's entries in the raw
// bytes against the bounds Validate applies, allocating nothing per entry.

// smallRequestBytes bounds the request of every method not in
// largeRequestMethods: registrations, heartbeats, reads, single-partition
// changes. Their fields are bounded well below this (maxAddressLen,
// maxReplicationFactor ids, ...).
const smallRequestBytes = 64 << 10

// largeRequestMethods are the methods whose requests may be as large as any
// (maxRecvMsgBytes): those that carry up to maxPartitionsPerRequest entries,
// and a snapshot upload's chunks (restoreChunkBytes of data each).
var largeRequestMethods = map[string]int{
	keelpb.ControllerService_CreateTopic_FullMethodName:                 maxRecvMsgBytes,
	keelpb.ControllerService_CreatePartitions_FullMethodName:            maxRecvMsgBytes,
	keelpb.ControllerService_ElectLeaders_FullMethodName:                maxRecvMsgBytes,
	keelpb.ControllerService_AlterPartitionReassignments_FullMethodName: maxRecvMsgBytes,
	keelpb.ControllerService_RestoreSnapshot_FullMethodName:             maxRecvMsgBytes,
	keelpb.ControllerService_ReportReplicaLogs_FullMethodName:           maxRecvMsgBytes,
	keelpb.BrokerService_FetchSession_FullMethodName:                    maxRecvMsgBytes,
}

// repeatedBounds is the most entries each repeated field of a request may
// hold: Validate's bounds. A repeated field of a keel request that is not
// here gets defaultRepeatedBound (a test checks there is none).
var repeatedBounds = map[protoreflect.FullName]int{
	"keel.v1.CreateTopicRequest.assignments":                maxPartitionsPerRequest,
	"keel.v1.CreateTopicRequest.configs":                    maxConfigs,
	"keel.v1.CreatePartitionsRequest.assignments":           maxPartitionsPerRequest,
	"keel.v1.PartitionAssignment.replicas":                  maxReplicationFactor,
	"keel.v1.ElectLeadersRequest.partitions":                maxPartitionsPerRequest,
	"keel.v1.AlterPartitionRequest.new_isr":                 maxReplicationFactor,
	"keel.v1.AlterPartitionRequest.new_isr_with_epochs":     maxReplicationFactor,
	"keel.v1.AlterPartitionReassignmentsRequest.replicas":   maxReplicationFactor,
	"keel.v1.AlterPartitionReassignmentsRequest.partitions": maxPartitionsPerRequest,
	"keel.v1.ReassignmentTarget.replicas":                   maxReplicationFactor,
	"keel.v1.IncrementalAlterConfigsRequest.configs":        maxConfigs,
	"keel.v1.ReportReplicaLogsRequest.replicas":             maxPartitionsPerRequest,
	"keel.v1.FetchSessionRequest.partitions":                MaxFetchSessionPartitions,
	"keel.v1.FetchSessionRequest.forgotten":                 MaxFetchSessionPartitions,

	"keel.v1.AlterUserScramCredentialsRequest.deletions":  maxScramAlterations,
	"keel.v1.AlterUserScramCredentialsRequest.upsertions": maxScramAlterations,
	"keel.v1.AlterClientQuotasRequest.entries":            maxQuotaEntries,
	"keel.v1.ClientQuotaAlteration.entity":                2,
	"keel.v1.ClientQuotaAlteration.ops":                   maxConfigs,
	"keel.v1.CreateAclsRequest.creations":                 maxACLsPerRequest,
	"keel.v1.DeleteAclsRequest.filters":                   maxACLsPerRequest,
}

// defaultRepeatedBound is the largest bound Validate applies to any list.
const defaultRepeatedBound = maxPartitionsPerRequest

// requestPlans and requestLimits are, by request type, what the codec
// checks: built once from the keel services' descriptors. A type no keel
// method takes (grpc health and reflection) has no plan and the small limit.
var requestPlans, requestLimits = buildRequestChecks()

func buildRequestChecks() (map[protoreflect.FullName]*msgPlan, map[protoreflect.FullName]int) {
	plans := map[protoreflect.FullName]*msgPlan{}
	limits := map[protoreflect.FullName]int{}
	built := map[protoreflect.FullName]*msgPlan{}
	protoregistry.GlobalFiles.RangeFilesByPackage(keelpb.File_controller_proto.Package(), func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				md := sd.Methods().Get(j)
				in := md.Input()
				limit, ok := largeRequestMethods[fmt.Sprintf("/%s/%s", sd.FullName(), md.Name())]
				if !ok {
					limit = smallRequestBytes
				}
				// Each keel method has a request type of its own; were one
				// shared, it would get the larger limit.
				limits[in.FullName()] = max(limits[in.FullName()], limit)
				if p := planFor(in, built, map[protoreflect.FullName]bool{}); p != nil {
					plans[in.FullName()] = p
				}
			}
		}
		return true
	})
	return plans, limits
}

// msgPlan is what the codec looks at in one message type: its repeated
// fields, and its message fields whose type has repeated fields somewhere.
type msgPlan struct {
	fields []fieldPlan
}

// maxPlanFields bounds a plan's fields, so that a check counts them in an
// array on the stack.
const maxPlanFields = 16

type fieldPlan struct {
	num      protowire.Number
	name     protoreflect.Name
	repeated bool
	max      int      // entries allowed, if repeated
	packed   packing  // how an occurrence of the field holds its entries
	sub      *msgPlan // the element message's plan; nil: nothing to check in it
}

// planFor builds md's plan, nil if md holds no repeated field at any depth.
// A type that contains itself cannot be bounded by a static plan; no keel
// request does, and one that did would panic here, at start-up.
func planFor(md protoreflect.MessageDescriptor, built map[protoreflect.FullName]*msgPlan, building map[protoreflect.FullName]bool) *msgPlan {
	if p, ok := built[md.FullName()]; ok {
		return p
	}
	if building[md.FullName()] {
		panic(fmt.Sprintf("rpc: request type %s contains itself; the server codec cannot bound it", md.FullName()))
	}
	building[md.FullName()] = true
	defer delete(building, md.FullName())
	var p msgPlan
	for i := range md.Fields().Len() {
		fd := md.Fields().Get(i)
		f := fieldPlan{num: fd.Number(), name: fd.Name(), repeated: fd.Cardinality() == protoreflect.Repeated}
		if fd.Message() != nil {
			f.sub = planFor(fd.Message(), built, building)
		}
		if !f.repeated && f.sub == nil {
			continue
		}
		if f.repeated {
			f.max = defaultRepeatedBound
			if b, ok := repeatedBounds[fd.FullName()]; ok {
				f.max = b
			}
			f.packed = packingOf(fd.Kind())
		}
		p.fields = append(p.fields, f)
	}
	var out *msgPlan
	if len(p.fields) > 0 {
		if len(p.fields) > maxPlanFields {
			panic(fmt.Sprintf("rpc: request type %s has %d repeated or nested fields; the server codec counts at most %d", md.FullName(), len(p.fields), maxPlanFields))
		}
		out = &p
	}
	built[md.FullName()] = out
	return out
}

// packing is how one length-delimited occurrence of a repeated field holds
// its entries.
type packing int

const (
	notPacked     packing = iota // one entry: a message, a string, a map entry
	packedVarint                 // a packed run of varints
	packedFixed32                // a packed run of 4-byte values
	packedFixed64                // a packed run of 8-byte values
)

// packingOf is how a repeated field of kind k is packed.
func packingOf(k protoreflect.Kind) packing {
	switch k {
	case protoreflect.BoolKind, protoreflect.EnumKind, protoreflect.Int32Kind, protoreflect.Sint32Kind,
		protoreflect.Uint32Kind, protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Uint64Kind:
		return packedVarint
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return packedFixed32
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return packedFixed64
	}
	return notPacked
}

// entryRefusal is a repeated field over its bound: path names it from the
// request down ("assignments[3].replicas").
type entryRefusal struct {
	path       string
	count, max int
}

func (r *entryRefusal) err() error {
	return invalidArgument(r.path, "%d entries; at most %d", r.count, r.max)
}

// check counts the entries of p's repeated fields in b, one encoded
// message, and refuses the first field over its bound. It stops at the
// first malformed byte and lets proto.Unmarshal say what is wrong. Nothing
// is allocated unless a field is refused.
func (p *msgPlan) check(b []byte) *entryRefusal {
	var counts [maxPlanFields]int
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		i := p.index(num)
		if i < 0 {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return nil
			}
			b = b[n:]
			continue
		}
		f := &p.fields[i]
		if typ != protowire.BytesType {
			// An unpacked scalar element (or a field of the wrong wire
			// type, which proto.Unmarshal refuses).
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return nil
			}
			b = b[n:]
			counts[i]++
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if !f.repeated {
			if r := f.sub.check(v); r != nil {
				r.path = fmt.Sprintf("%s.%s", f.name, r.path)
				return r
			}
			continue
		}
		counts[i] += f.entries(v)
		// Past the bound the field is refused whatever its entries hold:
		// only count the rest, for the refusal's number.
		if f.sub != nil && counts[i] <= f.max {
			if r := f.sub.check(v); r != nil {
				r.path = fmt.Sprintf("%s[%d].%s", f.name, counts[i]-1, r.path)
				return r
			}
		}
	}
	for i := range p.fields {
		if f := &p.fields[i]; f.repeated && counts[i] > f.max {
			return &entryRefusal{path: string(f.name), count: counts[i], max: f.max}
		}
	}
	return nil
}

func (p *msgPlan) index(num protowire.Number) int {
	for i := range p.fields {
		if p.fields[i].num == num {
			return i
		}
	}
	return -1
}

// entries is how many elements one length-delimited occurrence of f
// holds: one message, string or map entry, or a packed run of scalars.
func (f *fieldPlan) entries(v []byte) int {
	switch f.packed {
	case packedVarint:
		// Each varint ends with the one byte whose high bit is clear.
		n := 0
		for _, c := range v {
			if c < 0x80 {
				n++
			}
		}
		return n
	case packedFixed32:
		return len(v) / 4
	case packedFixed64:
		return len(v) / 8
	}
	return 1
}

// requestLimit is the most bytes a request of type name may take.
func requestLimit(name protoreflect.FullName) int {
	if l, ok := requestLimits[name]; ok {
		return l
	}
	return smallRequestBytes
}

// checkSize refuses a request of type name of size bytes above its
// method's limit, as ResourceExhausted.
func checkSize(name protoreflect.FullName, size int) error {
	if limit := requestLimit(name); size > limit {
		return status.Errorf(codes.ResourceExhausted, "%s of %d bytes; at most %d for this method", name.Name(), size, limit)
	}
	return nil
}

// checkEntries refuses a request of type name, encoded as b, one of whose
// repeated fields holds more entries than its bound, as InvalidArgument
// naming the field.
func checkEntries(name protoreflect.FullName, b []byte) error {
	if p := requestPlans[name]; p != nil {
		if r := p.check(b); r != nil {
			return r.err()
		}
	}
	return nil
}

// serverCodec decodes every request a Keel server receives, checking it
// first (checkSize, checkEntries). It is forced on the server (grpc.ForceServerCodecV2)
// so that no client can pick another codec by content subtype.
//
// gRPC turns any Unmarshal error into Internal ("failed to unmarshal"), and
// a refusal must keep its code and say which field is wrong. So a refused
// request is left undecoded (empty), its refusal is kept here by the
// message, and refusedUnary and refusedStream, the first interceptors of
// the server, return it before anything else sees the message.
// serverCallOptions installs the codec and those interceptors together.
type serverCodec struct {
	refusals sync.Map // the message gRPC asked to fill → its refusal
}

var _ encoding.CodecV2 = (*serverCodec)(nil)

// Marshal encodes the responses as gRPC's proto codec does, with Keel's
// buffer pool, or sends a WireMarshaler's own encoding (pooledCodec).
func (c *serverCodec) Marshal(v any) (mem.BufferSlice, error) {
	return pooledCodec{}.Marshal(v)
}

func (c *serverCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("cannot decode into %T: not a protobuf message", v)
	}
	name := m.ProtoReflect().Descriptor().FullName()
	// Before materializing: a request above its size is not even copied.
	if err := checkSize(name, data.Len()); err != nil {
		c.refusals.Store(v, err)
		return nil
	}
	return withBytes(data, func(b []byte) error {
		if err := checkEntries(name, b); err != nil {
			c.refusals.Store(v, err)
			return nil
		}
		return proto.Unmarshal(b, m)
	})
}

func (c *serverCodec) Name() string { return grpcproto.Name }

// refused returns, and forgets, the refusal of the request the codec was
// asked to decode into m.
func (c *serverCodec) refused(m any) error {
	if err, ok := c.refusals.LoadAndDelete(m); ok {
		return err.(error)
	}
	return nil
}

// refusedUnary returns the codec's refusal of a unary call's request.
func (c *serverCodec) refusedUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := c.refused(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// refusedStream returns the codec's refusal of a message a streaming call
// receives, from RecvMsg.
func (c *serverCodec) refusedStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, refusedStream{ServerStream: ss, codec: c})
}

type refusedStream struct {
	grpc.ServerStream
	codec *serverCodec
}

func (s refusedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.codec.refused(m)
}
