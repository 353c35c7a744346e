package rpc

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// controllerRequestCase is one request to a ControllerService method.
type controllerRequestCase struct {
	method string // as in keelpb.ControllerService_ServiceDesc
	name   string
	field  string // the request field a refusal must name
	req    proto.Message
}

// edited returns a copy of base changed by edit.
func edited[M proto.Message](base M, edit func(M)) M {
	m := proto.Clone(base).(M)
	edit(m)
	return m
}

// Valid requests, the bases the invalid ones are edited from.
var (
	validRegister = &keelpb.RegisterBrokerRequest{BrokerId: 1, IncarnationId: "8f0e6c1e-4b8a-4d43-9a55-0e8f3f6f3a10",
		Address: "127.0.0.1:9092", Rack: "a", MinMetadataVersion: 1, MaxMetadataVersion: 1}
	validHeartbeat      = &keelpb.BrokerHeartbeatRequest{BrokerId: 1, BrokerEpoch: 5, MetadataOffset: 9}
	validUnregister     = &keelpb.UnregisterBrokerRequest{BrokerId: 1, BrokerEpoch: 5}
	validStreamMetadata = &keelpb.StreamMetadataRequest{BrokerId: 1, BrokerEpoch: 5, FromOffset: 3, ClusterId: "c"}
	validCreateTopic    = &keelpb.CreateTopicRequest{Name: "orders.v1_x-y", Partitions: 3, ReplicationFactor: 2,
		Configs: map[string]string{fsm.UncleanLeaderElection: "true"}}
	validCreateAssigned = &keelpb.CreateTopicRequest{Name: "orders", Assignments: []*keelpb.PartitionAssignment{
		{Replicas: []int32{1, 2}}, {Replicas: []int32{2, 0}}}}
	validCreatePartitions = &keelpb.CreatePartitionsRequest{Topic: "orders", Count: 4}
	validAddAssigned      = &keelpb.CreatePartitionsRequest{Topic: "orders", Count: 4, Assignments: []*keelpb.PartitionAssignment{{Replicas: []int32{3, 1}}}}
	validAlterPartition   = &keelpb.AlterPartitionRequest{BrokerId: 1, BrokerEpoch: 5, TopicId: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
		Partition: 0, LeaderEpoch: 0, PartitionEpoch: 0, NewIsr: []int32{1, 2}}
	validReport = &keelpb.ReportReplicaLogsRequest{BrokerId: 1, BrokerEpoch: 5, Replicas: []*keelpb.ReplicaLog{
		{TopicId: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", Partition: 0, CurrentLeaderEpoch: 1, LastWrittenLeaderEpoch: 3, LogEndOffset: 120},
		{TopicId: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", Partition: 1, CurrentLeaderEpoch: 0, LastWrittenLeaderEpoch: -1},
	}}
	validElect = &keelpb.ElectLeadersRequest{Type: keelpb.ElectionType_ELECTION_TYPE_PREFERRED,
		Partitions: []*keelpb.TopicPartition{{Topic: "orders", Partition: 0}, {Topic: "orders", Partition: 1}, {Topic: "other", Partition: 0}}}
	validElectAll = &keelpb.ElectLeadersRequest{Type: keelpb.ElectionType_ELECTION_TYPE_UNCLEAN, All: true}
	validReassign = &keelpb.AlterPartitionReassignmentsRequest{Topic: "orders", Partition: 0, Replicas: []int32{1, 2, 3}}
	validAddVoter = &keelpb.AddVoterRequest{Id: 4, Address: "127.0.0.1:9094"}
	validPlan     = &keelpb.AlterPartitionReassignmentsRequest{Partitions: []*keelpb.ReassignmentTarget{
		{Topic: "orders", Partition: 0, Replicas: []int32{1, 2, 3}},
		{Topic: "orders", Partition: 1}, // a cancel
		{Topic: "other", Partition: 0, Replicas: []int32{4}}}}
	validAlterConf = &keelpb.IncrementalAlterConfigsRequest{
		Resource: &keelpb.ConfigResource{Type: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC, Name: "orders"},
		Configs: []*keelpb.AlterableConfig{
			{Name: fsm.MinInsyncReplicas, Op: keelpb.AlterConfigOp_ALTER_CONFIG_OP_SET, Value: "2"},
			{Name: fsm.UncleanLeaderElection, Op: keelpb.AlterConfigOp_ALTER_CONFIG_OP_SET, Value: "TRUE"},
			{Name: fsm.RetentionMs, Op: keelpb.AlterConfigOp_ALTER_CONFIG_OP_DELETE},
		}}
	clusterResource = &keelpb.ConfigResource{Type: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER}
)

// validControllerRequests are well-formed requests of every method that
// has input: they must pass the server's checks.
func validControllerRequests() []controllerRequestCase {
	return []controllerRequestCase{
		{method: "AppendNoOp", req: &keelpb.AppendNoOpRequest{RequestId: "r1"}},
		{method: "AppendNoOp", name: "no request id", req: &keelpb.AppendNoOpRequest{}},
		{method: "RegisterBroker", req: validRegister},
		{method: "RegisterBroker", name: "a cluster id, no rack", req: edited(validRegister, func(r *keelpb.RegisterBrokerRequest) { r.ClusterId, r.Rack, r.BrokerId = "c", "", 0 })},
		{method: "RegisterBroker", name: "a Kafka address", req: edited(validRegister, func(r *keelpb.RegisterBrokerRequest) { r.KafkaAddress = "127.0.0.1:9092" })},
		{method: "RegisterBroker", name: "an unclean shutdown reported", req: edited(validRegister, func(r *keelpb.RegisterBrokerRequest) { r.PreviousBrokerEpoch = -1 })},
		{method: "BrokerHeartbeat", req: validHeartbeat},
		{method: "AllocateProducerIds", req: &keelpb.AllocateProducerIdsRequest{BrokerId: 1, BrokerEpoch: 5}},
		{method: "UpdateFeatures", req: &keelpb.UpdateFeaturesRequest{MetadataVersion: 2}},
		{method: "AlterUserScramCredentials", req: &keelpb.AlterUserScramCredentialsRequest{Principal: "admin",
			Upsertions: []*keelpb.ScramCredentialUpsertion{{Name: "alice", Mechanism: 2, Iterations: 8192, Salt: []byte("s"), SaltedPassword: []byte("p")}},
			Deletions:  []*keelpb.ScramCredentialDeletion{{Name: "bob", Mechanism: 1}}}},
		{method: "CompareImage", req: &keelpb.CompareImageRequest{Index: 5, FromId: 1}},
		{method: "CompareImage", name: "a verdict", req: &keelpb.CompareImageRequest{Index: 5, FromId: 1, MajorityDigest: make([]byte, 32), Majority: "controllers 1, 2 of 3 hold it"}},
		{method: "AcknowledgedIndex", req: &keelpb.AcknowledgedIndexRequest{NodeId: 2}},
		{method: "UnregisterBroker", req: validUnregister},
		{method: "UnregisterBroker", name: "any incarnation (epoch 0)", req: edited(validUnregister, func(r *keelpb.UnregisterBrokerRequest) { r.BrokerEpoch = 0 })},
		{method: "StreamMetadata", req: validStreamMetadata},
		{method: "CreateTopic", req: validCreateTopic},
		{method: "CreateTopic", name: "assigned", req: validCreateAssigned},
		{method: "CreateTopic", name: "assigned, partitions given", req: edited(validCreateAssigned, func(r *keelpb.CreateTopicRequest) { r.Partitions = 2 })},
		{method: "CreateTopic", name: "validate only", req: edited(validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.ValidateOnly = true })},
		{method: "CreatePartitions", req: validCreatePartitions},
		{method: "CreatePartitions", name: "assigned", req: validAddAssigned},
		{method: "DeleteTopic", req: &keelpb.DeleteTopicRequest{Name: "orders"}},
		{method: "DeleteTopic", name: "forwarded for an admin", req: &keelpb.DeleteTopicRequest{Name: "orders", Principal: "admin-alice"}},
		{method: "DeleteTopic", name: "forwarded for a plaintext client", req: &keelpb.DeleteTopicRequest{Name: "orders", Principal: PlaintextPrincipal}},
		{method: "CreateTopic", name: "forwarded for a broker", req: edited(validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.Principal = "broker-3" })},
		{method: "CreatePartitions", name: "forwarded for an admin", req: edited(validCreatePartitions, func(r *keelpb.CreatePartitionsRequest) { r.Principal = "admin" })},
		{method: "DescribeTopic", req: &keelpb.DescribeTopicRequest{Name: "orders"}},
		{method: "AlterClientQuotas", req: quotaRequest("user", "producer_byte_rate", 1024)},
		{method: "AlterClientQuotas", name: "the default client id, removed, forwarded for an admin", req: edited(quotaRequest("client-id", "request_percentage", 0),
			func(r *keelpb.AlterClientQuotasRequest) {
				r.Entries[0].Entity[0].EntityName, r.Entries[0].Ops[0].Remove, r.Principal = nil, true, "admin"
			})},
		{method: "CreateTopic", name: "forwarded for an application", req: edited(validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.Principal = "User:app-orders" })},
		{method: "CreateAcls", req: &keelpb.CreateAclsRequest{Creations: []*keelpb.AclBinding{{}}, Principal: "User:admin"}},
		{method: "DeleteAcls", req: &keelpb.DeleteAclsRequest{Filters: []*keelpb.AclFilter{{}}}},
		{method: "DescribeAcls", req: &keelpb.DescribeAclsRequest{Filter: &keelpb.AclFilter{}}},
		{method: "AlterPartition", req: validAlterPartition},
		{method: "AlterPartition", name: "recovering", req: edited(validAlterPartition, func(r *keelpb.AlterPartitionRequest) {
			r.NewIsr, r.LeaderRecoveryState = []int32{1}, keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERING
		})},
		{method: "ReportReplicaLogs", req: validReport},
		{method: "ReportReplicaLogs", name: "nothing to report", req: &keelpb.ReportReplicaLogsRequest{BrokerId: 1, BrokerEpoch: 5}},
		{method: "IncrementalAlterConfigs", req: validAlterConf},
		{method: "IncrementalAlterConfigs", name: "cluster defaults, validate only", req: edited(validAlterConf, func(r *keelpb.IncrementalAlterConfigsRequest) {
			r.Resource, r.ValidateOnly = clusterResource, true
		})},
		{method: "IncrementalAlterConfigs", name: "append and subtract a list, forwarded", req: &keelpb.IncrementalAlterConfigsRequest{
			Resource: validAlterConf.Resource, Principal: "admin", Configs: []*keelpb.AlterableConfig{
				{Name: fsm.CleanupPolicy, Op: keelpb.AlterConfigOp_ALTER_CONFIG_OP_APPEND, Value: "delete"},
			}}},
		{method: "IncrementalAlterConfigs", name: "replace with nothing", req: &keelpb.IncrementalAlterConfigsRequest{
			Resource: validAlterConf.Resource, Replace: true}},
		{method: "DescribeConfigs", req: &keelpb.DescribeConfigsRequest{Resource: validAlterConf.Resource}},
		{method: "DescribeConfigs", name: "cluster defaults", req: &keelpb.DescribeConfigsRequest{Resource: clusterResource, Linearizable: true}},
		{method: "AlterPartition", name: "with epochs", req: edited(validAlterPartition, func(r *keelpb.AlterPartitionRequest) {
			r.NewIsr, r.NewIsrWithEpochs = nil, []*keelpb.BrokerState{{BrokerId: 1, BrokerEpoch: 5}, {BrokerId: 2, BrokerEpoch: -1}}
		})},
		{method: "AlterPartition", name: "with epochs, and the same ISR without", req: edited(validAlterPartition, func(r *keelpb.AlterPartitionRequest) {
			r.NewIsrWithEpochs = []*keelpb.BrokerState{{BrokerId: 1, BrokerEpoch: 5}, {BrokerId: 2, BrokerEpoch: 7}}
		})},
		{method: "ElectLeaders", req: validElect},
		{method: "ElectLeaders", name: "all", req: validElectAll},
		{method: "AlterPartitionReassignments", req: validReassign},
		{method: "AlterPartitionReassignments", name: "cancel", req: edited(validReassign, func(r *keelpb.AlterPartitionReassignmentsRequest) { r.Replicas = nil })},
		{method: "AlterPartitionReassignments", name: "plan", req: validPlan},
		{method: "AddVoter", req: validAddVoter},
		{method: "AddVoter", name: "a host name", req: edited(validAddVoter, func(r *keelpb.AddVoterRequest) { r.Address = "controller-4.example:9091" })},
		{method: "RemoveVoter", req: &keelpb.RemoveVoterRequest{Id: 3}},
		{method: "TransferLeadership", name: "any voter", req: &keelpb.TransferLeadershipRequest{}},
		{method: "TransferLeadership", name: "to a voter", req: &keelpb.TransferLeadershipRequest{TargetId: proto.Int32(2)}},
	}
}

// invalidControllerRequests are requests each wrong in one field.
func invalidControllerRequests() []controllerRequestCase {
	long := func(n int) string { return strings.Repeat("x", n) }
	ids := func(n int) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(i)
		}
		return out
	}
	manyConfigs := map[string]string{}
	for i := range maxConfigs + 1 {
		manyConfigs[fmt.Sprintf("c%d", i)] = "v"
	}
	manyTPs := make([]*keelpb.TopicPartition, maxPartitionsPerRequest+1)
	for i := range manyTPs {
		manyTPs[i] = &keelpb.TopicPartition{Topic: "t", Partition: int32(i)}
	}

	register := func(name, field string, edit func(*keelpb.RegisterBrokerRequest)) controllerRequestCase {
		return controllerRequestCase{method: "RegisterBroker", name: name, field: field,
			req: edited(validRegister, edit)}
	}
	heartbeat := func(name, field string, edit func(*keelpb.BrokerHeartbeatRequest)) controllerRequestCase {
		return controllerRequestCase{method: "BrokerHeartbeat", name: name, field: field,
			req: edited(validHeartbeat, edit)}
	}
	unregister := func(name, field string, edit func(*keelpb.UnregisterBrokerRequest)) controllerRequestCase {
		return controllerRequestCase{method: "UnregisterBroker", name: name, field: field,
			req: edited(validUnregister, edit)}
	}
	streamMeta := func(name, field string, edit func(*keelpb.StreamMetadataRequest)) controllerRequestCase {
		return controllerRequestCase{method: "StreamMetadata", name: name, field: field,
			req: edited(validStreamMetadata, edit)}
	}
	create := func(name, field string, base *keelpb.CreateTopicRequest, edit func(*keelpb.CreateTopicRequest)) controllerRequestCase {
		return controllerRequestCase{method: "CreateTopic", name: name, field: field,
			req: edited(base, edit)}
	}
	addParts := func(name, field string, base *keelpb.CreatePartitionsRequest, edit func(*keelpb.CreatePartitionsRequest)) controllerRequestCase {
		return controllerRequestCase{method: "CreatePartitions", name: name, field: field,
			req: edited(base, edit)}
	}
	alter := func(name, field string, edit func(*keelpb.AlterPartitionRequest)) controllerRequestCase {
		return controllerRequestCase{method: "AlterPartition", name: name, field: field,
			req: edited(validAlterPartition, edit)}
	}
	report := func(name, field string, edit func(*keelpb.ReportReplicaLogsRequest)) controllerRequestCase {
		return controllerRequestCase{method: "ReportReplicaLogs", name: name, field: field,
			req: edited(validReport, edit)}
	}
	elect := func(name, field string, base *keelpb.ElectLeadersRequest, edit func(*keelpb.ElectLeadersRequest)) controllerRequestCase {
		return controllerRequestCase{method: "ElectLeaders", name: name, field: field,
			req: edited(base, edit)}
	}
	alterConf := func(name, field string, edit func(*keelpb.IncrementalAlterConfigsRequest)) controllerRequestCase {
		return controllerRequestCase{method: "IncrementalAlterConfigs", name: name, field: field,
			req: edited(validAlterConf, edit)}
	}
	reassign := func(name, field string, edit func(*keelpb.AlterPartitionReassignmentsRequest)) controllerRequestCase {
		return controllerRequestCase{method: "AlterPartitionReassignments", name: name, field: field,
			req: edited(validReassign, edit)}
	}
	plan := func(name, field string, edit func(*keelpb.AlterPartitionReassignmentsRequest)) controllerRequestCase {
		return controllerRequestCase{method: "AlterPartitionReassignments", name: name, field: field,
			req: edited(validPlan, edit)}
	}
	assign := func(rs ...[]int32) []*keelpb.PartitionAssignment {
		out := make([]*keelpb.PartitionAssignment, len(rs))
		for i, r := range rs {
			out[i] = &keelpb.PartitionAssignment{Replicas: r}
		}
		return out
	}
	addVoter := func(name, field string, edit func(*keelpb.AddVoterRequest)) controllerRequestCase {
		return controllerRequestCase{method: "AddVoter", name: name, field: field,
			req: edited(validAddVoter, edit)}
	}

	return []controllerRequestCase{
		{method: "AppendNoOp", name: "an over-long request id", field: "request_id",
			req: &keelpb.AppendNoOpRequest{RequestId: long(maxRequestIDLen + 1)}},

		register("a negative broker id", "broker_id", func(r *keelpb.RegisterBrokerRequest) { r.BrokerId = -1 }),
		register("no incarnation id", "incarnation_id", func(r *keelpb.RegisterBrokerRequest) { r.IncarnationId = "" }),
		register("a previous broker epoch below -1", "previous_broker_epoch", func(r *keelpb.RegisterBrokerRequest) { r.PreviousBrokerEpoch = -2 }),
		register("an incarnation id that is no UUID", "incarnation_id", func(r *keelpb.RegisterBrokerRequest) { r.IncarnationId = "broker-1" }),
		register("an incarnation id in braces", "incarnation_id", func(r *keelpb.RegisterBrokerRequest) { r.IncarnationId = "{" + validRegister.IncarnationId + "}" }),
		register("no address", "address", func(r *keelpb.RegisterBrokerRequest) { r.Address = "" }),
		register("an address without a port", "address", func(r *keelpb.RegisterBrokerRequest) { r.Address = "broker1" }),
		register("an address without a host", "address", func(r *keelpb.RegisterBrokerRequest) { r.Address = ":9092" }),
		register("port 0", "address", func(r *keelpb.RegisterBrokerRequest) { r.Address = "broker1:0" }),
		register("port 65536", "address", func(r *keelpb.RegisterBrokerRequest) { r.Address = "broker1:65536" }),
		register("an over-long address", "address", func(r *keelpb.RegisterBrokerRequest) { r.Address = long(maxAddressLen) + ":1" }),
		register("an over-long rack", "rack", func(r *keelpb.RegisterBrokerRequest) { r.Rack = long(maxRackLen + 1) }),
		register("metadata version 0", "min_metadata_version", func(r *keelpb.RegisterBrokerRequest) { r.MinMetadataVersion, r.MaxMetadataVersion = 0, 0 }),
		register("an empty version range", "max_metadata_version", func(r *keelpb.RegisterBrokerRequest) { r.MinMetadataVersion, r.MaxMetadataVersion = 3, 2 }),
		register("an over-long cluster id", "cluster_id", func(r *keelpb.RegisterBrokerRequest) { r.ClusterId = long(maxClusterIDLen + 1) }),
		register("a Kafka address without a port", "kafka_address", func(r *keelpb.RegisterBrokerRequest) { r.KafkaAddress = "broker1" }),
		{method: "UpdateFeatures", name: "metadata version 0", field: "metadata_version", req: &keelpb.UpdateFeaturesRequest{Downgrade: true}},
		{method: "AlterClientQuotas", name: "no entries", field: "entries", req: &keelpb.AlterClientQuotasRequest{}},
		{method: "AlterClientQuotas", name: "a principal that is no identity", field: "principal", req: edited(quotaRequest("user", "producer_byte_rate", 1),
			func(r *keelpb.AlterClientQuotasRequest) { r.Principal = "broker-07" })},
		{method: "AlterClientQuotas", name: "an unknown key", field: "entries[0]", req: quotaRequest("user", "producer_bytes", 1)},
		{method: "AlterClientQuotas", name: "a negative rate", field: "entries[0]", req: quotaRequest("user", "producer_byte_rate", -1)},
		{method: "AlterClientQuotas", name: "an unknown entity type", field: "entries[0]", req: quotaRequest("group", "producer_byte_rate", 1)},
		{method: "AlterClientQuotas", name: "an entity named twice", field: "entries[0]", req: edited(quotaRequest("user", "producer_byte_rate", 1),
			func(r *keelpb.AlterClientQuotasRequest) {
				r.Entries[0].Entity = append(r.Entries[0].Entity, r.Entries[0].Entity[0])
			})},
		{method: "CompareImage", name: "index 0", field: "index", req: &keelpb.CompareImageRequest{}},
		{method: "CompareImage", name: "a digest of 31 bytes", field: "majority_digest", req: &keelpb.CompareImageRequest{Index: 5, MajorityDigest: make([]byte, 31)}},
		{method: "CompareImage", name: "an over-long majority", field: "majority", req: &keelpb.CompareImageRequest{Index: 5, Majority: long(maxAddressLen + 1)}},
		{method: "AcknowledgedIndex", name: "node id 0", field: "node_id", req: &keelpb.AcknowledgedIndexRequest{}},
		{method: "AllocateProducerIds", name: "a negative broker id", field: "broker_id", req: &keelpb.AllocateProducerIdsRequest{BrokerId: -1, BrokerEpoch: 5}},
		{method: "AllocateProducerIds", name: "no broker epoch", field: "broker_epoch", req: &keelpb.AllocateProducerIdsRequest{BrokerId: 1}},

		heartbeat("a negative broker id", "broker_id", func(r *keelpb.BrokerHeartbeatRequest) { r.BrokerId = -1 }),
		heartbeat("broker epoch 0", "broker_epoch", func(r *keelpb.BrokerHeartbeatRequest) { r.BrokerEpoch = 0 }),
		heartbeat("a negative broker epoch", "broker_epoch", func(r *keelpb.BrokerHeartbeatRequest) { r.BrokerEpoch = -5 }),

		unregister("a negative broker id", "broker_id", func(r *keelpb.UnregisterBrokerRequest) { r.BrokerId = -1 }),
		unregister("a negative broker epoch", "broker_epoch", func(r *keelpb.UnregisterBrokerRequest) { r.BrokerEpoch = -1 }),

		streamMeta("a negative broker id", "broker_id", func(r *keelpb.StreamMetadataRequest) { r.BrokerId = -1 }),
		streamMeta("broker epoch 0", "broker_epoch", func(r *keelpb.StreamMetadataRequest) { r.BrokerEpoch = 0 }),
		streamMeta("an over-long cluster id", "cluster_id", func(r *keelpb.StreamMetadataRequest) { r.ClusterId = long(maxClusterIDLen + 1) }),

		create("no name", "name", validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.Name = "" }),
		create("the name dot", "name", validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.Name = "." }),
		create("the name dot-dot", "name", validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.Name = ".." }),
		create("a slash in the name", "name", validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.Name = "bad/name" }),
		create("a space in the name", "name", validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.Name = "bad name" }),
		create("a non-ASCII name", "name", validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.Name = "tópico" }),
		create("a 250-character name", "name", validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.Name = long(fsm.MaxTopicNameLen + 1) }),
		create("negative partitions", "partitions", validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.Partitions = -1 }),
		create("no partitions and no assignments", "partitions", validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.Partitions = 0 }),
		create("too many partitions", "partitions", validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.Partitions = maxPartitionsPerRequest + 1 }),
		create("partitions unlike the assignments", "partitions", validCreateAssigned, func(r *keelpb.CreateTopicRequest) { r.Partitions = 3 }),
		create("a negative replication factor", "replication_factor", validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.ReplicationFactor = -1 }),
		create("replication factor 0 and no assignments", "replication_factor", validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.ReplicationFactor = 0 }),
		create("too high a replication factor", "replication_factor", validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.ReplicationFactor = maxReplicationFactor + 1 }),
		create("a partition without replicas", "assignments", validCreateAssigned, func(r *keelpb.CreateTopicRequest) { r.Assignments = assign([]int32{1}, nil) }),
		create("a nil assignment", "assignments", validCreateAssigned, func(r *keelpb.CreateTopicRequest) { r.Assignments = append(r.Assignments, nil) }),
		create("a negative broker", "assignments", validCreateAssigned, func(r *keelpb.CreateTopicRequest) { r.Assignments = assign([]int32{1, -2}) }),
		create("a broker twice", "assignments", validCreateAssigned, func(r *keelpb.CreateTopicRequest) { r.Assignments = assign([]int32{1, 2}, []int32{3, 3}) }),
		create("unequal replication factors", "assignments", validCreateAssigned, func(r *keelpb.CreateTopicRequest) { r.Assignments = assign([]int32{1, 2}, []int32{3}) }),
		create("too many replicas", "assignments", validCreateAssigned, func(r *keelpb.CreateTopicRequest) { r.Assignments = assign(ids(maxReplicationFactor + 1)) }),
		create("too many configs", "configs", validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.Configs = manyConfigs }),
		create("an empty config key", "configs", validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.Configs = map[string]string{"": "x"} }),
		create("an over-long config key", "configs", validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.Configs = map[string]string{long(maxConfigKeyLen + 1): "x"} }),
		create("an unknown config", "configs", validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.Configs = map[string]string{"retention.hours": "1"} }),
		create("a broker config", "configs", validCreateTopic, func(r *keelpb.CreateTopicRequest) {
			r.Configs = map[string]string{fsm.LeaderReplicationThrottledRate: "1"}
		}),
		create("a bad config value", "configs", validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.Configs = map[string]string{fsm.SegmentBytes: "1000"} }),
		create("an over-long config value", "configs", validCreateTopic, func(r *keelpb.CreateTopicRequest) {
			r.Configs = map[string]string{fsm.UncleanLeaderElection: long(maxConfigValueLen + 1)}
		}),

		addParts("no topic", "topic", validCreatePartitions, func(r *keelpb.CreatePartitionsRequest) { r.Topic = "" }),
		addParts("an over-long topic", "topic", validCreatePartitions, func(r *keelpb.CreatePartitionsRequest) { r.Topic = long(fsm.MaxTopicNameLen + 1) }),
		addParts("count 0", "count", validCreatePartitions, func(r *keelpb.CreatePartitionsRequest) { r.Count = 0 }),
		addParts("a negative count", "count", validCreatePartitions, func(r *keelpb.CreatePartitionsRequest) { r.Count = -4 }),
		addParts("too high a count", "count", validCreatePartitions, func(r *keelpb.CreatePartitionsRequest) { r.Count = maxPartitionsPerRequest + 1 }),
		addParts("a partition without replicas", "assignments", validAddAssigned, func(r *keelpb.CreatePartitionsRequest) { r.Assignments = assign(nil) }),
		addParts("a broker twice", "assignments", validAddAssigned, func(r *keelpb.CreatePartitionsRequest) { r.Assignments = assign([]int32{2, 1, 2}) }),
		addParts("a negative broker", "assignments", validAddAssigned, func(r *keelpb.CreatePartitionsRequest) { r.Assignments = assign([]int32{-1}) }),

		{method: "DeleteTopic", name: "no name", field: "name",
			req: &keelpb.DeleteTopicRequest{}},
		{method: "DeleteTopic", name: "an over-long name", field: "name",
			req: &keelpb.DeleteTopicRequest{Name: long(fsm.MaxTopicNameLen + 1)}},
		{method: "DeleteTopic", name: "a principal that is no identity", field: "principal",
			req: &keelpb.DeleteTopicRequest{Name: "orders", Principal: "root"}},
		{method: "DeleteTopic", name: "an over-long principal", field: "principal",
			req: &keelpb.DeleteTopicRequest{Name: "orders", Principal: "admin-" + long(maxPrincipalLen)}},
		{method: "CreateAcls", name: "no creations", field: "creations", req: &keelpb.CreateAclsRequest{}},
		{method: "CreateAcls", name: "too many creations", field: "creations", req: &keelpb.CreateAclsRequest{Creations: make([]*keelpb.AclBinding, maxACLsPerRequest+1)}},
		{method: "CreateAcls", name: "a principal without User:", field: "principal", req: &keelpb.CreateAclsRequest{Creations: []*keelpb.AclBinding{{}}, Principal: "alice"}},
		{method: "DeleteAcls", name: "no filters", field: "filters", req: &keelpb.DeleteAclsRequest{}},
		{method: "DeleteAcls", name: "a principal without User:", field: "principal", req: &keelpb.DeleteAclsRequest{Filters: []*keelpb.AclFilter{{}}, Principal: "User:"}},
		{method: "DescribeAcls", name: "no filter", field: "filter", req: &keelpb.DescribeAclsRequest{}},
		create("a principal that is no identity", "principal", validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.Principal = "broker-07" }),
		addParts("a principal that is no identity", "principal", validCreatePartitions, func(r *keelpb.CreatePartitionsRequest) { r.Principal = "ANONYMOUS" }),
		{method: "ElectLeaders", name: "a principal that is no identity", field: "principal",
			req: &keelpb.ElectLeadersRequest{Type: keelpb.ElectionType_ELECTION_TYPE_PREFERRED, All: true, Principal: "root"}},
		{method: "AlterPartitionReassignments", name: "a principal that is no identity", field: "principal",
			req: &keelpb.AlterPartitionReassignmentsRequest{Topic: "orders", Replicas: []int32{1}, Principal: "root"}},
		{method: "UpdateFeatures", name: "a principal that is no identity", field: "principal",
			req: &keelpb.UpdateFeaturesRequest{MetadataVersion: 2, Principal: "root"}},

		{method: "AlterUserScramCredentials", name: "too many alterations", field: "upsertions",
			req: &keelpb.AlterUserScramCredentialsRequest{Upsertions: make([]*keelpb.ScramCredentialUpsertion, maxScramAlterations+1)}},
		{method: "AlterUserScramCredentials", name: "an over-long name to delete", field: "deletions",
			req: &keelpb.AlterUserScramCredentialsRequest{Deletions: []*keelpb.ScramCredentialDeletion{{Name: long(maxScramNameLen + 1)}}}},
		{method: "AlterUserScramCredentials", name: "an over-long salt", field: "upsertions",
			req: &keelpb.AlterUserScramCredentialsRequest{Upsertions: []*keelpb.ScramCredentialUpsertion{{Name: "alice", Salt: make([]byte, maxScramBytes+1)}}}},
		{method: "AlterUserScramCredentials", name: "a principal that is no identity", field: "principal",
			req: &keelpb.AlterUserScramCredentialsRequest{Principal: "root"}},

		{method: "DescribeTopic", name: "no name", field: "name",
			req: &keelpb.DescribeTopicRequest{Linearizable: true}},
		{method: "DescribeTopic", name: "an over-long name", field: "name",
			req: &keelpb.DescribeTopicRequest{Name: long(fsm.MaxTopicNameLen + 1)}},

		report("a negative broker id", "broker_id", func(r *keelpb.ReportReplicaLogsRequest) { r.BrokerId = -1 }),
		report("broker epoch 0", "broker_epoch", func(r *keelpb.ReportReplicaLogsRequest) { r.BrokerEpoch = 0 }),
		report("too many reports", "replicas", func(r *keelpb.ReportReplicaLogsRequest) {
			r.Replicas = make([]*keelpb.ReplicaLog, maxPartitionsPerRequest+1)
			for i := range r.Replicas {
				r.Replicas[i] = validReport.Replicas[0]
			}
		}),
		report("a topic name for a topic id", "replicas[1].topic_id", func(r *keelpb.ReportReplicaLogsRequest) { r.Replicas[1].TopicId = "orders" }),
		report("a negative partition", "replicas[0].partition", func(r *keelpb.ReportReplicaLogsRequest) { r.Replicas[0].Partition = -1 }),
		report("a negative leader epoch", "replicas[0].current_leader_epoch", func(r *keelpb.ReportReplicaLogsRequest) { r.Replicas[0].CurrentLeaderEpoch = -1 }),
		report("a last epoch below -1", "replicas[1].last_written_leader_epoch", func(r *keelpb.ReportReplicaLogsRequest) { r.Replicas[1].LastWrittenLeaderEpoch = -2 }),
		report("a negative log end offset", "replicas[0].log_end_offset", func(r *keelpb.ReportReplicaLogsRequest) { r.Replicas[0].LogEndOffset = -1 }),
		alter("a negative broker id", "broker_id", func(r *keelpb.AlterPartitionRequest) { r.BrokerId = -1 }),
		alter("broker epoch 0", "broker_epoch", func(r *keelpb.AlterPartitionRequest) { r.BrokerEpoch = 0 }),
		alter("no topic id", "topic_id", func(r *keelpb.AlterPartitionRequest) { r.TopicId = "" }),
		alter("a topic name for a topic id", "topic_id", func(r *keelpb.AlterPartitionRequest) { r.TopicId = "orders" }),
		alter("a topic id of 16 raw bytes", "topic_id", func(r *keelpb.AlterPartitionRequest) { r.TopicId = "0123456789abcdef" }),
		alter("a topic id with bad hex", "topic_id", func(r *keelpb.AlterPartitionRequest) { r.TopicId = "zf1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0" }),
		alter("a negative partition", "partition", func(r *keelpb.AlterPartitionRequest) { r.Partition = -1 }),
		alter("a negative leader epoch", "leader_epoch", func(r *keelpb.AlterPartitionRequest) { r.LeaderEpoch = -1 }),
		alter("a negative partition epoch", "partition_epoch", func(r *keelpb.AlterPartitionRequest) { r.PartitionEpoch = -1 }),
		alter("an empty ISR", "new_isr", func(r *keelpb.AlterPartitionRequest) { r.NewIsr = nil }),
		alter("an over-long ISR", "new_isr", func(r *keelpb.AlterPartitionRequest) { r.NewIsr = ids(maxReplicationFactor + 1) }),
		alter("a negative ISR member", "new_isr", func(r *keelpb.AlterPartitionRequest) { r.NewIsr = []int32{1, -2} }),
		alter("an ISR member twice", "new_isr", func(r *keelpb.AlterPartitionRequest) { r.NewIsr = []int32{1, 2, 1} }),
		alter("an ISR with epochs unlike new_isr", "new_isr", func(r *keelpb.AlterPartitionRequest) {
			r.NewIsrWithEpochs = []*keelpb.BrokerState{{BrokerId: 2, BrokerEpoch: 5}, {BrokerId: 1, BrokerEpoch: 7}}
		}),
		alter("an ISR member at broker epoch 0", "new_isr_with_epochs", func(r *keelpb.AlterPartitionRequest) {
			r.NewIsrWithEpochs = []*keelpb.BrokerState{{BrokerId: 1, BrokerEpoch: 5}, {BrokerId: 2}}
		}),
		alter("an ISR member at broker epoch -2", "new_isr_with_epochs", func(r *keelpb.AlterPartitionRequest) {
			r.NewIsrWithEpochs = []*keelpb.BrokerState{{BrokerId: 1, BrokerEpoch: -2}}
		}),
		alter("an ISR with epochs naming a broker twice", "new_isr_with_epochs", func(r *keelpb.AlterPartitionRequest) {
			r.NewIsr, r.NewIsrWithEpochs = nil, []*keelpb.BrokerState{{BrokerId: 1, BrokerEpoch: 5}, {BrokerId: 1, BrokerEpoch: 5}}
		}),
		alter("an ISR with epochs holding a negative id", "new_isr_with_epochs", func(r *keelpb.AlterPartitionRequest) {
			r.NewIsr, r.NewIsrWithEpochs = nil, []*keelpb.BrokerState{{BrokerId: -1, BrokerEpoch: 5}}
		}),
		alter("an over-long ISR with epochs", "new_isr_with_epochs", func(r *keelpb.AlterPartitionRequest) {
			r.NewIsr = nil
			for i := range maxReplicationFactor + 1 {
				r.NewIsrWithEpochs = append(r.NewIsrWithEpochs, &keelpb.BrokerState{BrokerId: int32(i), BrokerEpoch: -1})
			}
		}),

		alter("an unknown leader recovery state", "leader_recovery_state", func(r *keelpb.AlterPartitionRequest) { r.LeaderRecoveryState = 3 }),

		alterConf("no resource", "resource", func(r *keelpb.IncrementalAlterConfigsRequest) { r.Resource = nil }),
		alterConf("a topic without a name", "resource", func(r *keelpb.IncrementalAlterConfigsRequest) { r.Resource.Name = "" }),
		alterConf("the cluster with a name", "resource", func(r *keelpb.IncrementalAlterConfigsRequest) {
			r.Resource = &keelpb.ConfigResource{Type: clusterResource.Type, Name: "x"}
		}),
		alterConf("an unknown resource type", "resource", func(r *keelpb.IncrementalAlterConfigsRequest) { r.Resource.Type = 9 }),
		alterConf("no configs", "configs", func(r *keelpb.IncrementalAlterConfigsRequest) { r.Configs = nil }),
		alterConf("an unknown config", "configs", func(r *keelpb.IncrementalAlterConfigsRequest) { r.Configs[0].Name = "retention.hours" }),
		alterConf("a config twice", "configs", func(r *keelpb.IncrementalAlterConfigsRequest) { r.Configs[1].Name = fsm.MinInsyncReplicas }),
		alterConf("a value out of range", "configs", func(r *keelpb.IncrementalAlterConfigsRequest) { r.Configs[0].Value = "0" }),
		alterConf("a boolean that is none", "configs", func(r *keelpb.IncrementalAlterConfigsRequest) { r.Configs[1].Value = "yes" }),
		alterConf("a config not supported", "configs", func(r *keelpb.IncrementalAlterConfigsRequest) {
			r.Configs[0].Name, r.Configs[0].Value = "max.compaction.lag.ms", "60000"
		}),
		alterConf("a delete with a value", "configs", func(r *keelpb.IncrementalAlterConfigsRequest) { r.Configs[2].Value = "1" }),
		alterConf("no op", "configs", func(r *keelpb.IncrementalAlterConfigsRequest) {
			r.Configs[0].Op = keelpb.AlterConfigOp_ALTER_CONFIG_OP_UNSPECIFIED
		}),
		alterConf("append to a number", "configs", func(r *keelpb.IncrementalAlterConfigsRequest) {
			r.Configs[0].Op = keelpb.AlterConfigOp_ALTER_CONFIG_OP_APPEND
		}),
		alterConf("subtract from a boolean", "configs", func(r *keelpb.IncrementalAlterConfigsRequest) {
			r.Configs[1].Op = keelpb.AlterConfigOp_ALTER_CONFIG_OP_SUBTRACT
		}),
		alterConf("an unknown op", "configs", func(r *keelpb.IncrementalAlterConfigsRequest) { r.Configs[0].Op = 9 }),
		alterConf("replace with a delete", "configs", func(r *keelpb.IncrementalAlterConfigsRequest) { r.Replace = true }),
		alterConf("a principal that is no identity", "principal", func(r *keelpb.IncrementalAlterConfigsRequest) { r.Principal = "nobody" }),
		alterConf("an over-long value", "configs", func(r *keelpb.IncrementalAlterConfigsRequest) { r.Configs[0].Value = long(maxConfigValueLen + 1) }),

		{method: "DescribeConfigs", name: "no resource", field: "resource", req: &keelpb.DescribeConfigsRequest{}},
		{method: "DescribeConfigs", name: "an over-long topic", field: "resource", req: &keelpb.DescribeConfigsRequest{
			Resource: &keelpb.ConfigResource{Type: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC, Name: long(fsm.MaxTopicNameLen + 1)}}},

		elect("no type", "type", validElect, func(r *keelpb.ElectLeadersRequest) { r.Type = keelpb.ElectionType_ELECTION_TYPE_UNSPECIFIED }),
		elect("an unknown type", "type", validElect, func(r *keelpb.ElectLeadersRequest) { r.Type = 7 }),
		elect("partitions and all", "partitions", validElect, func(r *keelpb.ElectLeadersRequest) { r.All = true }),
		elect("neither partitions nor all", "partitions", validElect, func(r *keelpb.ElectLeadersRequest) { r.Partitions = nil }),
		elect("too many partitions", "partitions", validElect, func(r *keelpb.ElectLeadersRequest) { r.Partitions = manyTPs }),
		elect("a partition without a topic", "partitions", validElect, func(r *keelpb.ElectLeadersRequest) { r.Partitions[1].Topic = "" }),
		elect("a nil partition", "partitions", validElect, func(r *keelpb.ElectLeadersRequest) { r.Partitions = append(r.Partitions, nil) }),
		elect("an over-long topic", "partitions", validElect, func(r *keelpb.ElectLeadersRequest) { r.Partitions[0].Topic = long(fsm.MaxTopicNameLen + 1) }),
		elect("a negative partition", "partitions", validElect, func(r *keelpb.ElectLeadersRequest) { r.Partitions[2].Partition = -1 }),
		elect("a partition twice", "partitions", validElect, func(r *keelpb.ElectLeadersRequest) { r.Partitions[1].Partition = 0 }),

		reassign("no topic", "topic", func(r *keelpb.AlterPartitionReassignmentsRequest) { r.Topic = "" }),
		reassign("an over-long topic", "topic", func(r *keelpb.AlterPartitionReassignmentsRequest) { r.Topic = long(fsm.MaxTopicNameLen + 1) }),
		reassign("a negative partition", "partition", func(r *keelpb.AlterPartitionReassignmentsRequest) { r.Partition = -1 }),
		reassign("a negative replica", "replicas", func(r *keelpb.AlterPartitionReassignmentsRequest) { r.Replicas = []int32{1, -1} }),
		reassign("too many replicas", "replicas", func(r *keelpb.AlterPartitionReassignmentsRequest) { r.Replicas = ids(maxReplicationFactor + 1) }),
		reassign("a replica twice", "replicas", func(r *keelpb.AlterPartitionReassignmentsRequest) { r.Replicas = []int32{1, 2, 1} }),
		plan("a plan and a topic", "partitions", func(r *keelpb.AlterPartitionReassignmentsRequest) { r.Topic = "orders" }),
		plan("a plan and replicas", "partitions", func(r *keelpb.AlterPartitionReassignmentsRequest) { r.Replicas = []int32{1} }),
		plan("a plan with no topic", "partitions[2].topic", func(r *keelpb.AlterPartitionReassignmentsRequest) { r.Partitions[2].Topic = "" }),
		plan("a plan with an over-long topic", "partitions[0].topic", func(r *keelpb.AlterPartitionReassignmentsRequest) {
			r.Partitions[0].Topic = long(fsm.MaxTopicNameLen + 1)
		}),
		plan("a plan with a negative partition", "partitions[1].partition", func(r *keelpb.AlterPartitionReassignmentsRequest) { r.Partitions[1].Partition = -1 }),
		plan("a plan with a negative replica", "partitions[2].replicas", func(r *keelpb.AlterPartitionReassignmentsRequest) { r.Partitions[2].Replicas = []int32{-4} }),
		plan("a plan with a replica twice", "partitions[0].replicas", func(r *keelpb.AlterPartitionReassignmentsRequest) { r.Partitions[0].Replicas = []int32{1, 2, 1} }),
		plan("a plan naming a partition twice", "partitions[2]", func(r *keelpb.AlterPartitionReassignmentsRequest) { r.Partitions[2].Topic = "orders" }),

		addVoter("id 0", "id", func(r *keelpb.AddVoterRequest) { r.Id = 0 }),
		addVoter("a negative id", "id", func(r *keelpb.AddVoterRequest) { r.Id = -4 }),
		addVoter("no address", "address", func(r *keelpb.AddVoterRequest) { r.Address = "" }),
		addVoter("an address without a port", "address", func(r *keelpb.AddVoterRequest) { r.Address = "127.0.0.1" }),
		addVoter("an address without a host", "address", func(r *keelpb.AddVoterRequest) { r.Address = ":9094" }),
		addVoter("port 0", "address", func(r *keelpb.AddVoterRequest) { r.Address = "127.0.0.1:0" }),
		addVoter("port 65536", "address", func(r *keelpb.AddVoterRequest) { r.Address = "127.0.0.1:65536" }),
		addVoter("an over-long address", "address", func(r *keelpb.AddVoterRequest) { r.Address = long(maxAddressLen) + ":1" }),

		{method: "RemoveVoter", name: "id 0", field: "id", req: &keelpb.RemoveVoterRequest{}},
		{method: "RemoveVoter", name: "a negative id", field: "id", req: &keelpb.RemoveVoterRequest{Id: -1}},

		{method: "TransferLeadership", name: "target 0", field: "target_id",
			req: &keelpb.TransferLeadershipRequest{TargetId: proto.Int32(0)}},
		{method: "TransferLeadership", name: "a negative target", field: "target_id",
			req: &keelpb.TransferLeadershipRequest{TargetId: proto.Int32(-2)}},
	}
}

// controllerMethodsWithoutInput take nothing that can be invalid: their
// requests hold no fields but bools (checked below).
var controllerMethodsWithoutInput = map[string]bool{
	"DescribeQuorum":             true,
	"ListBrokers":                true,
	"ListTopics":                 true,
	"ListPartitionReassignments": true,
	"FetchSnapshot":              true,
	"DescribeFeatures":           true,

	"DescribeUserScramCredentials": true,
}

// anyValueFields are request fields every value of which is valid, so that
// no case needs to name them.
var anyValueFields = map[protoreflect.FullName]bool{
	"keel.v1.BrokerHeartbeatRequest.metadata_offset": true, // the broker's own applied offset, 0 for none
	"keel.v1.StreamMetadataRequest.from_offset":      true, // behind the retained history gets an image
	"keel.v1.CompareImageRequest.from_id":            true, // the asking controller, named in the reason only
	"keel.v1.CompareImageRequest.chain_start":        true, // 0 (the empty image) or any entry's index
}

func caseName(tc controllerRequestCase) string {
	if tc.name == "" {
		return tc.method
	}
	return tc.method + "/" + tc.name
}

// inputOf is the request type of a ControllerService method.
func inputOf(method string) protoreflect.MessageDescriptor {
	sd := keelpb.File_controller_proto.Services().ByName("ControllerService")
	return sd.Methods().ByName(protoreflect.Name(method)).Input()
}

// TestValidate_RefusesInvalidRequests: each request wrong in one field is
// refused with InvalidArgument naming the field.
func TestValidate_RefusesInvalidRequests(t *testing.T) {
	for _, tc := range invalidControllerRequests() {
		t.Run(caseName(tc), func(t *testing.T) {
			if got := tc.req.ProtoReflect().Descriptor(); got != inputOf(tc.method) {
				t.Fatalf("the case sends %s, but %s takes %s", got.FullName(), tc.method, inputOf(tc.method).FullName())
			}
			err := Validate(tc.req)
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tc.field) {
				t.Fatalf("err = %v; want InvalidArgument naming %s", err, tc.field)
			}
		})
	}
}

// TestValidate_PassesValidRequests: well-formed requests pass.
func TestValidate_PassesValidRequests(t *testing.T) {
	for _, tc := range validControllerRequests() {
		t.Run(caseName(tc), func(t *testing.T) {
			if got := tc.req.ProtoReflect().Descriptor(); got != inputOf(tc.method) {
				t.Fatalf("the case sends %s, but %s takes %s", got.FullName(), tc.method, inputOf(tc.method).FullName())
			}
			if err := Validate(tc.req); err != nil {
				t.Fatalf("a valid request was refused: %v", err)
			}
		})
	}
}

// uploadMethods take input that the restoring controller checks as it
// reads it (a snapshot's bytes), not Validate: server's tests cover them.
var uploadMethods = map[string]bool{"RestoreSnapshot": true}

// TestValidate_EveryMethodValidated: every method of the service has
// invalid-request cases, or takes no input that can be invalid, and every
// field of its request is named by a case or can hold any value. A new
// method or field without checks fails here.
func TestValidate_EveryMethodValidated(t *testing.T) {
	fields := map[string]map[string]bool{} // method → fields cases name
	for _, tc := range invalidControllerRequests() {
		if fields[tc.method] == nil {
			fields[tc.method] = map[string]bool{}
		}
		fields[tc.method][tc.field] = true
	}
	valid := map[string]bool{}
	for _, tc := range validControllerRequests() {
		valid[tc.method] = true
	}
	desc := keelpb.ControllerService_ServiceDesc
	var methods []string
	for _, m := range desc.Methods {
		methods = append(methods, m.MethodName)
	}
	for _, s := range desc.Streams {
		methods = append(methods, s.StreamName)
	}
	sd := keelpb.File_controller_proto.Services().ByName("ControllerService")
	seen := map[string]bool{}
	for _, m := range methods {
		seen[m] = true
		in := sd.Methods().ByName(protoreflect.Name(m)).Input()
		switch {
		case uploadMethods[m]:
		case controllerMethodsWithoutInput[m] && fields[m] != nil:
			t.Errorf("%s has invalid-request cases but is listed as taking no input", m)
		case controllerMethodsWithoutInput[m]:
			for i := range in.Fields().Len() {
				if f := in.Fields().Get(i); f.Kind() != protoreflect.BoolKind {
					t.Errorf("%s is listed as taking no input, but %s can be invalid", m, f.FullName())
				}
			}
		case fields[m] == nil:
			t.Errorf("%s has no invalid-request case and is not listed as taking no input", m)
		default:
			for i := range in.Fields().Len() {
				f := in.Fields().Get(i)
				if f.Kind() != protoreflect.BoolKind && !fields[m][string(f.Name())] && !anyValueFields[f.FullName()] {
					t.Errorf("%s: no invalid-request case names %s, and it is not listed as taking any value", m, f.FullName())
				}
			}
			if !valid[m] {
				t.Errorf("%s has no valid-request case", m)
			}
		}
	}
	for m := range fields {
		if !seen[m] {
			t.Errorf("cases name %s, which is no method of the service", m)
		}
	}
	for m := range controllerMethodsWithoutInput {
		if !seen[m] {
			t.Errorf("controllerMethodsWithoutInput has %s, which is no method of the service", m)
		}
	}
}

// A malformed ISR is refused with Kafka's INVALID_REQUEST, as the
// controller refuses an ISR that is not a set of the partition's replicas.
func TestValidate_MalformedISRIsInvalidRequest(t *testing.T) {
	for _, isr := range [][]int32{nil, {1, 1}, {-1}} {
		err := Validate(edited(validAlterPartition, func(r *keelpb.AlterPartitionRequest) { r.NewIsr = isr }))
		if status.Code(err) != codes.InvalidArgument || ReasonOf(err) != ReasonInvalidRequest {
			t.Errorf("new_isr %v: %v (reason %q); want InvalidArgument, %s", isr, err, ReasonOf(err), ReasonInvalidRequest)
		}
	}
}

// quotaRequest is an AlterClientQuotas of one entity of type typ named
// "alice", setting key to value.
func quotaRequest(typ, key string, value float64) *keelpb.AlterClientQuotasRequest {
	name := "alice"
	return &keelpb.AlterClientQuotasRequest{Entries: []*keelpb.ClientQuotaAlteration{{
		Entity: []*keelpb.ClientQuotaEntityData{{EntityType: typ, EntityName: &name}},
		Ops:    []*keelpb.ClientQuotaOp{{Key: key, Value: value}}}}}
}
