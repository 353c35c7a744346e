package rpc

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// Validate checks one request of a Keel service by the wire contract: the
// shape of every field, before any controller or broker looks at it. Its
// refusals are InvalidArgument naming the field. What only the image can
// decide (does the topic exist, is the broker registered) is not checked
// here. Every Keel gRPC server runs it on every message it receives
// (ServerOptions), and a client may call it before sending.
func Validate(req proto.Message) error {
	switch r := req.(type) {
	case *keelpb.AppendNoOpRequest:
		return validMaxLen("request_id", r.GetRequestId(), maxRequestIDLen)
	case *keelpb.RegisterBrokerRequest:
		return firstError(
			validBrokerID(r.GetBrokerId()),
			validIncarnationID(r.GetIncarnationId()),
			validAddress("address", r.GetAddress()),
			validMaxLen("rack", r.GetRack(), maxRackLen),
			validVersionRange(r.GetMinMetadataVersion(), r.GetMaxMetadataVersion()),
			validMaxLen("cluster_id", r.GetClusterId(), maxClusterIDLen),
			validOptionalAddress("kafka_address", r.GetKafkaAddress()),
			validPreviousBrokerEpoch(r.GetPreviousBrokerEpoch()),
		)
	case *keelpb.BrokerHeartbeatRequest:
		return firstError(validBrokerID(r.GetBrokerId()), validBrokerEpoch(r.GetBrokerEpoch()))
	case *keelpb.AllocateProducerIdsRequest:
		return firstError(validBrokerID(r.GetBrokerId()), validBrokerEpoch(r.GetBrokerEpoch()))
	case *keelpb.UnregisterBrokerRequest:
		// broker_epoch 0: whichever incarnation is registered (an operator
		// does not know it).
		if r.GetBrokerEpoch() == 0 {
			return validBrokerID(r.GetBrokerId())
		}
		return firstError(validBrokerID(r.GetBrokerId()), validBrokerEpoch(r.GetBrokerEpoch()))
	case *keelpb.StreamMetadataRequest:
		return firstError(
			validBrokerID(r.GetBrokerId()),
			validBrokerEpoch(r.GetBrokerEpoch()),
			validMaxLen("cluster_id", r.GetClusterId(), maxClusterIDLen),
		)
	case *keelpb.CreateTopicRequest:
		return firstError(
			validTopicName(r.GetName()),
			validPartitionCount("partitions", r.GetPartitions()),
			validRF(r.GetReplicationFactor()),
			validAssignments(r.GetAssignments()),
			validTopicCounts(r),
			validConfigMap(r.GetConfigs()),
			validPrincipal(r.GetPrincipal()),
		)
	case *keelpb.CreatePartitionsRequest:
		return firstError(
			validTopicRef("topic", r.GetTopic()),
			validPartitionCount("count", r.GetCount()),
			validNewPartitionTotal(r.GetCount()),
			validAssignments(r.GetAssignments()),
			validPrincipal(r.GetPrincipal()),
		)
	case *keelpb.DeleteTopicRequest:
		return firstError(validTopicRef("name", r.GetName()), validPrincipal(r.GetPrincipal()))
	case *keelpb.DescribeTopicRequest:
		return validTopicRef("name", r.GetName())
	case *keelpb.AlterPartitionRequest:
		return checkAlterPartition(r)
	case *keelpb.ReportReplicaLogsRequest:
		return checkReportReplicaLogs(r)
	case *keelpb.ElectLeadersRequest:
		return firstError(checkElectLeaders(r), validPrincipal(r.GetPrincipal()))
	case *keelpb.AlterPartitionReassignmentsRequest:
		return firstError(checkReassignment(r), validPrincipal(r.GetPrincipal()))
	case *keelpb.IncrementalAlterConfigsRequest:
		return checkAlterConfigs(r)
	case *keelpb.AlterUserScramCredentialsRequest:
		return checkAlterScram(r)
	case *keelpb.DescribeConfigsRequest:
		return validConfigResource(r.GetResource())
	case *keelpb.AlterClientQuotasRequest:
		return checkAlterClientQuotas(r)
	case *keelpb.AddVoterRequest:
		return firstError(validNodeID("id", r.GetId()), validAddress("address", r.GetAddress()))
	case *keelpb.RemoveVoterRequest:
		return validNodeID("id", r.GetId())
	case *keelpb.TransferLeadershipRequest:
		if r.TargetId != nil {
			return validNodeID("target_id", r.GetTargetId())
		}
		return nil
	case *keelpb.FetchRequest:
		return ValidateFetch(r)
	case *keelpb.LeaderContactRequest:
		return validNodeID("leader_id", r.GetLeaderId())
	case *keelpb.CompareImageRequest:
		switch d := r.GetMajorityDigest(); {
		case r.GetIndex() == 0:
			return invalidArgument("index", "must be at least 1")
		case len(d) != 0 && len(d) != sha256.Size:
			return invalidArgument("majority_digest", "%d bytes; a digest has %d", len(d), sha256.Size)
		}
		return validMaxLen("majority", r.GetMajority(), maxAddressLen)
	case *keelpb.AcknowledgedIndexRequest:
		return validNodeID("node_id", r.GetNodeId())
	case *keelpb.CreateAclsRequest:
		return firstError(validACLCount("creations", len(r.GetCreations())), validPrincipal(r.GetPrincipal()))
	case *keelpb.DeleteAclsRequest:
		return firstError(validACLCount("filters", len(r.GetFilters())), validPrincipal(r.GetPrincipal()))
	case *keelpb.DescribeAclsRequest:
		if r.GetFilter() == nil {
			return invalidArgument("filter", "is missing")
		}
		return nil
	case *keelpb.UpdateFeaturesRequest:
		if r.GetMetadataVersion() == 0 {
			return invalidArgument("metadata_version", "must be at least 1")
		}
		return validPrincipal(r.GetPrincipal())
	}
	// Requests with no fields to check (DescribeQuorum, ListBrokers,
	// ListTopics, FetchSnapshot, ...) and a snapshot upload's chunks, which
	// the restoring controller checks as it reads them.
	return nil
}

// validateUnary checks a unary call's request before its handler runs.
func validateUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if msg, ok := req.(proto.Message); ok {
		if err := Validate(msg); err != nil {
			return nil, err
		}
	}
	return handler(ctx, req)
}

// validateStream checks every message a streaming call receives.
func validateStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, validatedStream{ss})
}

type validatedStream struct{ grpc.ServerStream }

func (s validatedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if msg, ok := m.(proto.Message); ok {
		return Validate(msg)
	}
	return nil
}

// Bounds on requests, so that one request cannot make one raft entry, or
// what the controller stores and logs, grow without limit.
const (
	maxRequestIDLen         = 128
	maxPartitionsPerRequest = 100_000
	maxReplicationFactor    = 64
	maxConfigs              = 64
	maxConfigKeyLen         = 255
	maxConfigValueLen       = 4096
)

// validTopicName is fsm.CheckTopicName as a field refusal.
func validTopicName(name string) error {
	if err := fsm.CheckTopicName(name); err != nil {
		return invalidArgument("name", "%v", err)
	}
	return nil
}

func validPartitionCount(field string, n int32) error {
	if n < 0 || n > maxPartitionsPerRequest {
		return invalidArgument(field, "%d is outside 1..%d", n, maxPartitionsPerRequest)
	}
	return nil
}

func validRF(rf int32) error {
	if rf < 0 || rf > maxReplicationFactor {
		return invalidArgument("replication_factor", "%d is outside 1..%d", rf, maxReplicationFactor)
	}
	return nil
}

func validAssignments(as []*keelpb.PartitionAssignment) error {
	if len(as) > maxPartitionsPerRequest {
		return invalidArgument("assignments", "%d partitions; at most %d", len(as), maxPartitionsPerRequest)
	}
	for i, a := range as {
		switch n := len(a.GetReplicas()); {
		case n == 0:
			return invalidArgument("assignments", "partition %d has no replicas", i)
		case n > maxReplicationFactor:
			return invalidArgument("assignments", "partition %d has %d replicas; at most %d", i, n, maxReplicationFactor)
		case n != len(as[0].GetReplicas()):
			return invalidArgument("assignments", "partition %d has %d replicas, partition 0 has %d: the replication factor must be equal", i, n, len(as[0].GetReplicas()))
		}
		for _, id := range a.GetReplicas() {
			if id < 0 {
				return invalidArgument("assignments", "partition %d: broker id %d is negative", i, id)
			}
		}
		if id, ok := duplicateID(a.GetReplicas()); ok {
			return invalidArgument("assignments", "partition %d names broker %d twice", i, id)
		}
	}
	return nil
}

func validConfigMap(m map[string]string) error {
	if len(m) > maxConfigs {
		return invalidArgument("configs", "%d entries; at most %d", len(m), maxConfigs)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch {
		case k == "":
			return invalidArgument("configs", "a key is empty")
		case len(k) > maxConfigKeyLen:
			return invalidArgument("configs", "key %q is longer than %d bytes", fsm.Truncate(k), maxConfigKeyLen)
		case len(m[k]) > maxConfigValueLen:
			return invalidArgument("configs", "%s: the value is longer than %d bytes", fsm.Truncate(k), maxConfigValueLen)
		}
		if _, err := fsm.CheckTopicConfig(k, m[k]); err != nil {
			return invalidArgument("configs", "%v", err)
		}
	}
	return nil
}

// validConfigResource checks what a config request names: a topic by a
// possible name, or the cluster defaults by none.
func validConfigResource(r *keelpb.ConfigResource) error {
	switch r.GetType() {
	case keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC:
		return validTopicRef("resource.name", r.GetName())
	case keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER:
		if r.GetName() != "" {
			return invalidArgument("resource.name", "%q: the cluster defaults have no name", fsm.Truncate(r.GetName()))
		}
		return nil
	}
	return invalidArgument("resource.type", "%v is not topic or cluster", r.GetType())
}

// checkAlterConfigs checks an IncrementalAlterConfigs request: each config
// once, known, and with a value fsm.CheckConfig takes (SET, APPEND), none
// (DELETE), or the items of a list (SUBTRACT); with replace, only SETs.
func checkAlterConfigs(r *keelpb.IncrementalAlterConfigsRequest) error {
	if err := firstError(validConfigResource(r.GetResource()), validPrincipal(r.GetPrincipal())); err != nil {
		return err
	}
	cs := r.GetConfigs()
	least := 1
	if r.GetReplace() {
		// A legacy AlterConfigs naming nothing puts every config back.
		least = 0
	}
	if len(cs) < least || len(cs) > maxConfigs {
		return invalidArgument("configs", "%d entries; want %d..%d", len(cs), least, maxConfigs)
	}
	for i, c := range cs {
		field := fmt.Sprintf("configs[%d]", i)
		switch {
		case c.GetName() == "":
			return invalidArgument(field+".name", "is empty")
		case len(c.GetName()) > maxConfigKeyLen:
			return invalidArgument(field+".name", "longer than %d bytes", maxConfigKeyLen)
		case len(c.GetValue()) > maxConfigValueLen:
			return invalidArgument(field+".value", "longer than %d bytes", maxConfigValueLen)
		case slices.ContainsFunc(cs[:i], func(o *keelpb.AlterableConfig) bool { return o.GetName() == c.GetName() }):
			return invalidArgument(field+".name", "%s is named twice", c.GetName())
		case r.GetReplace() && c.GetOp() != keelpb.AlterConfigOp_ALTER_CONFIG_OP_SET:
			return invalidArgument(field+".op", "%v: replacing a resource's configs only sets them", c.GetOp())
		}
		switch c.GetOp() {
		case keelpb.AlterConfigOp_ALTER_CONFIG_OP_SET, keelpb.AlterConfigOp_ALTER_CONFIG_OP_APPEND:
			if _, err := fsm.CheckConfig(c.GetName(), c.GetValue()); err != nil {
				return invalidArgument(field, "%v", err)
			}
		case keelpb.AlterConfigOp_ALTER_CONFIG_OP_DELETE, keelpb.AlterConfigOp_ALTER_CONFIG_OP_SUBTRACT:
			if _, ok := fsm.LookupConfig(c.GetName()); !ok {
				_, err := fsm.CheckConfig(c.GetName(), "")
				return invalidArgument(field+".name", "%v", err)
			}
			if c.GetOp() == keelpb.AlterConfigOp_ALTER_CONFIG_OP_DELETE && c.GetValue() != "" {
				return invalidArgument(field+".value", "a delete takes no value")
			}
		default:
			return invalidArgument(field+".op", "%v is not set, delete, append or subtract", c.GetOp())
		}
		if op := c.GetOp(); op == keelpb.AlterConfigOp_ALTER_CONFIG_OP_APPEND || op == keelpb.AlterConfigOp_ALTER_CONFIG_OP_SUBTRACT {
			if d, _ := fsm.LookupConfig(c.GetName()); d.Type != fsm.TypeList {
				return invalidArgument(field+".op", "%v: %s is a %s, not a list", op, c.GetName(), d.Type)
			}
		}
	}
	return nil
}

// validTopicCounts checks a CreateTopic's partitions and replication factor
// against its assignments: without assignments both must be positive; with
// them, partitions is their number or 0.
func validTopicCounts(req *keelpb.CreateTopicRequest) error {
	n := len(req.GetAssignments())
	switch {
	case n == 0 && req.GetPartitions() < 1:
		return invalidArgument("partitions", "%d; at least 1 without assignments", req.GetPartitions())
	case n == 0 && req.GetReplicationFactor() < 1:
		return invalidArgument("replication_factor", "%d; at least 1 without assignments", req.GetReplicationFactor())
	case n > 0 && req.GetPartitions() != 0 && int(req.GetPartitions()) != n:
		return invalidArgument("partitions", "%d, but %d assignments are given", req.GetPartitions(), n)
	}
	return nil
}

// validNewPartitionTotal: CreatePartitions' count is the new total, and a
// topic has at least one partition already.
func validNewPartitionTotal(n int32) error {
	if n < 1 {
		return invalidArgument("count", "%d; the new total must be at least 1", n)
	}
	return nil
}

func validTopicID(id string) error {
	if _, err := fsm.ParseTopicID(id); err != nil || len(id) != 36 {
		return invalidArgument("topic_id", "%q is not a topic id (a UUID)", fsm.Truncate(id))
	}
	return nil
}

// checkAlterPartition checks an AlterPartition's shape. Its ISR comes in
// new_isr_with_epochs (each member's broker epoch, -1 when unknown) or, from
// a sender that predates it, in new_isr; given both, they must name the same
// brokers in the same order. A malformed ISR is refused with reason
// INVALID_REQUEST, as the controller refuses one that is not a set of the
// partition's replicas.
func checkAlterPartition(r *keelpb.AlterPartitionRequest) error {
	if err := firstError(
		validBrokerID(r.GetBrokerId()),
		validBrokerEpoch(r.GetBrokerEpoch()),
		validTopicID(r.GetTopicId()),
		validNonNegative("partition", r.GetPartition()),
		validNonNegative("leader_epoch", r.GetLeaderEpoch()),
		validNonNegative("partition_epoch", r.GetPartitionEpoch()),
	); err != nil {
		return err
	}
	if _, ok := keelpb.LeaderRecoveryState_name[int32(r.GetLeaderRecoveryState())]; !ok {
		return invalidArgument("leader_recovery_state", "%d is not RECOVERED or RECOVERING", r.GetLeaderRecoveryState())
	}
	withEpochs := r.GetNewIsrWithEpochs()
	if len(withEpochs) > 0 {
		ids := make([]int32, len(withEpochs))
		for i, m := range withEpochs {
			ids[i] = m.GetBrokerId()
			if e := m.GetBrokerEpoch(); e != -1 && e <= 0 {
				return invalidISR("new_isr_with_epochs", "broker %d has broker_epoch %d; want its epoch, or -1 when it is not known", m.GetBrokerId(), e)
			}
		}
		if err := validISR("new_isr_with_epochs", ids); err != nil {
			return err
		}
		if len(r.GetNewIsr()) > 0 && !slices.Equal(r.GetNewIsr(), ids) {
			return invalidISR("new_isr", "%v is not the ISR new_isr_with_epochs gives (%v); send the same brokers in both, or only new_isr_with_epochs", r.GetNewIsr(), ids)
		}
		return nil
	}
	return validISR("new_isr", r.GetNewIsr())
}

// validISR checks a requested ISR: 1 to maxReplicationFactor brokers, none
// negative, none twice.
func validISR(field string, isr []int32) error {
	if len(isr) == 0 || len(isr) > maxReplicationFactor {
		return invalidISR(field, "has %d members; want 1..%d", len(isr), maxReplicationFactor)
	}
	if slices.ContainsFunc(isr, func(id int32) bool { return id < 0 }) {
		return invalidISR(field, "%v holds a negative broker id", isr)
	}
	if id, ok := duplicateID(isr); ok {
		return invalidISR(field, "%v names broker %d twice", isr, id)
	}
	return nil
}

// invalidISR refuses a malformed ISR: InvalidArgument naming the field,
// with Kafka's reason.
func invalidISR(field, format string, args ...any) error {
	return WithReason(codes.InvalidArgument, ReasonInvalidRequest, field+": "+fmt.Sprintf(format, args...))
}

func checkElectLeaders(r *keelpb.ElectLeadersRequest) error {
	typ := r.GetType()
	if typ != keelpb.ElectionType_ELECTION_TYPE_PREFERRED && typ != keelpb.ElectionType_ELECTION_TYPE_UNCLEAN {
		return invalidArgument("type", "want preferred or unclean")
	}
	if r.GetAll() == (len(r.GetPartitions()) > 0) {
		return invalidArgument("partitions", "give either partitions or all, not both or neither")
	}
	if len(r.GetPartitions()) > maxPartitionsPerRequest {
		return invalidArgument("partitions", "%d; at most %d", len(r.GetPartitions()), maxPartitionsPerRequest)
	}
	return validTopicPartitions(r.GetPartitions())
}

// validTopicPartitions checks an election's partitions one by one: each
// names a possible topic and partition, and none twice (the election is one
// batch: a partition named twice would be decided twice from one image).
func validTopicPartitions(tps []*keelpb.TopicPartition) error {
	type key struct {
		topic     string
		partition int32
	}
	seen := make(map[key]bool, len(tps))
	for i, tp := range tps {
		// The field names are built only on refusal: there may be 100,000.
		switch {
		case tp.GetTopic() == "":
			return invalidArgument(fmt.Sprintf("partitions[%d].topic", i), "is empty")
		case len(tp.GetTopic()) > fsm.MaxTopicNameLen:
			return invalidArgument(fmt.Sprintf("partitions[%d].topic", i), "longer than %d bytes", fsm.MaxTopicNameLen)
		case tp.GetPartition() < 0:
			return invalidArgument(fmt.Sprintf("partitions[%d].partition", i), "%d is negative", tp.GetPartition())
		}
		k := key{tp.GetTopic(), tp.GetPartition()}
		if seen[k] {
			return invalidArgument(fmt.Sprintf("partitions[%d]", i), "%s/%d is named twice", k.topic, k.partition)
		}
		seen[k] = true
	}
	return nil
}

// checkReassignment checks the single form (topic, partition, replicas) or
// a plan (partitions), never both. A plan is one decision, as an election
// is: a partition named twice would be decided twice from one image.
func checkReassignment(r *keelpb.AlterPartitionReassignmentsRequest) error {
	plan := r.GetPartitions()
	if len(plan) == 0 {
		return checkReassignmentTarget(-1, r.GetTopic(), r.GetPartition(), r.GetReplicas())
	}
	switch {
	case r.GetTopic() != "" || r.GetPartition() != 0 || len(r.GetReplicas()) > 0:
		return invalidArgument("partitions", "give either topic, partition and replicas, or partitions, not both")
	case len(plan) > maxPartitionsPerRequest:
		return invalidArgument("partitions", "%d; at most %d", len(plan), maxPartitionsPerRequest)
	}
	type key struct {
		topic     string
		partition int32
	}
	seen := make(map[key]int, len(plan))
	for i, t := range plan {
		if err := checkReassignmentTarget(i, t.GetTopic(), t.GetPartition(), t.GetReplicas()); err != nil {
			return err
		}
		k := key{t.GetTopic(), t.GetPartition()}
		if j, ok := seen[k]; ok {
			return invalidArgument(fmt.Sprintf("partitions[%d]", i), "%s/%d is named twice (also partitions[%d])", k.topic, k.partition, j)
		}
		seen[k] = i
	}
	return nil
}

// checkReassignmentTarget checks one partition's move: plan entry i, or the
// single form when i is -1.
func checkReassignmentTarget(i int, topic string, partition int32, replicas []int32) error {
	// The field names are built only on refusal: a plan may have 100,000.
	field := func(name string) string {
		if i < 0 {
			return name
		}
		return fmt.Sprintf("partitions[%d].%s", i, name)
	}
	switch {
	case topic == "":
		return invalidArgument(field("topic"), "is empty")
	case len(topic) > fsm.MaxTopicNameLen:
		return validMaxLen(field("topic"), topic, fsm.MaxTopicNameLen)
	case partition < 0:
		return invalidArgument(field("partition"), "%d is negative", partition)
	case len(replicas) > maxReplicationFactor || slices.ContainsFunc(replicas, func(id int32) bool { return id < 0 }):
		return invalidArgument(field("replicas"), "want 1..%d broker ids, none negative", maxReplicationFactor)
	}
	if id, ok := duplicateID(replicas); ok {
		return invalidArgument(field("replicas"), "%v names broker %d twice", replicas, id)
	}
	return nil
}

func validNodeID(field string, id int32) error {
	if id <= 0 {
		return invalidArgument(field, "%d is not a node id (it must be positive)", id)
	}
	return nil
}
