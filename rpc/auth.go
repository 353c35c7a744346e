package rpc

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/acl"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/tlsauth"
)

// access is who may call a method, by the caller's certificate.
type access int

const (
	// accessAny: any keel identity but a probe (controller, broker, admin).
	// Reads.
	accessAny access = iota + 1
	// accessAdmin: an admin certificate. Every operator action that changes
	// metadata, and snapshots.
	accessAdmin
	// accessBrokerSelf: the broker the request names in its field, or an
	// admin. What a broker says about itself.
	accessBrokerSelf
	// accessBrokerOrAdmin: any broker, or an admin. A broker's own service.
	accessBrokerOrAdmin
	// accessHealth: any keel identity, probes included. Health checks and
	// reflection (grpcServiceRules), the only calls a probe may make.
	accessHealth
	// accessController: a controller certificate, and no other, not even
	// an admin's. What the controllers of a quorum ask one another.
	accessController
	// accessReplica: the broker the request names in its field, and no
	// other identity, not even an admin's. A replica's fetch moves that
	// replica's progress, the high watermark and the ISR: a fetch in
	// another's name gets records acknowledged that only the leader holds
	// (Kafka lets only CLUSTER_ACTION fetch as a replica).
	accessReplica
	// accessForwarded: an admin certificate, or a broker forwarding the
	// request of a client whose principal, named in the request's field,
	// is an admin's (KIP-590's envelope). A broker's own certificate is
	// not enough: what only an operator may do stays so when a broker's
	// key is all a caller has.
	accessForwarded
)

// rule is one method's access; field names the request's broker id field
// for accessBrokerSelf.
type rule struct {
	access access
	field  protoreflect.Name
}

func brokerSelf(field protoreflect.Name) rule { return rule{access: accessBrokerSelf, field: field} }

func replicaSelf(field protoreflect.Name) rule { return rule{access: accessReplica, field: field} }

func forwardedAdmin(field protoreflect.Name) rule { return rule{access: accessForwarded, field: field} }

// readsRequest says whether authorize needs the request to decide on id:
// a broker's call about a broker id, or forwarding a client's principal.
func (r rule) readsRequest(id tlsauth.Identity) bool {
	return id.Role == tlsauth.RoleBroker && (r.access == accessBrokerSelf || r.access == accessReplica || r.access == accessForwarded)
}

var (
	anyIdentity    = rule{access: accessAny}
	adminOnly      = rule{access: accessAdmin}
	brokerOrAdmin  = rule{access: accessBrokerOrAdmin}
	healthCheck    = rule{access: accessHealth}
	controllerOnly = rule{access: accessController}
)

// methodRules is the one table of who may call what when TLS is on. Every
// method of every keel service must be here (a test checks): a method
// without a rule is refused to everyone.
//
// An admin certificate may do everything, brokers' calls included: an
// operator may fence a dead broker in its name, and `keel bench` attaches
// its simulated brokers with the operator's certificate. Only the
// controllers' questions to one another are theirs alone.
var methodRules = map[string]rule{
	// Controller service: reads.
	keelpb.ControllerService_DescribeQuorum_FullMethodName:             anyIdentity,
	keelpb.ControllerService_ListBrokers_FullMethodName:                anyIdentity,
	keelpb.ControllerService_ListTopics_FullMethodName:                 anyIdentity,
	keelpb.ControllerService_DescribeTopic_FullMethodName:              anyIdentity,
	keelpb.ControllerService_ListPartitionReassignments_FullMethodName: anyIdentity,
	keelpb.ControllerService_DescribeConfigs_FullMethodName:            anyIdentity,
	keelpb.ControllerService_DescribeFeatures_FullMethodName:           anyIdentity,
	// Users, mechanisms and iterations: never a salt or a key.
	keelpb.ControllerService_DescribeUserScramCredentials_FullMethodName: anyIdentity,
	// What a starting controller asks its peers about itself (a data dir
	// rolled back): an index, nothing more.
	keelpb.ControllerService_AcknowledgedIndex_FullMethodName: anyIdentity,

	// Controller service: one controller to another. A verdict stops the
	// voter it reaches from acting on its image when its own digest differs
	// from the one sent: only the controllers decide that.
	keelpb.ControllerService_CompareImage_FullMethodName: controllerOnly,

	// Controller service: a broker about itself.
	keelpb.ControllerService_RegisterBroker_FullMethodName:  brokerSelf("broker_id"),
	keelpb.ControllerService_BrokerHeartbeat_FullMethodName: brokerSelf("broker_id"),
	keelpb.ControllerService_StreamMetadata_FullMethodName:  brokerSelf("broker_id"),
	keelpb.ControllerService_AlterPartition_FullMethodName:  brokerSelf("broker_id"),
	// A broker's report of its own replicas' logs, which elects the
	// partitions that await them.
	keelpb.ControllerService_ReportReplicaLogs_FullMethodName: brokerSelf("broker_id"),
	// A block of producer ids for the idempotent producers a broker's
	// Kafka listener serves.
	keelpb.ControllerService_AllocateProducerIds_FullMethodName: brokerSelf("broker_id"),

	// Controller service: operator actions.
	keelpb.ControllerService_AppendNoOp_FullMethodName: adminOnly,
	// Removing a broker for good is the operator's decision (Kafka's
	// UnregisterBroker needs ALTER on the cluster): a broker that stops
	// stays registered, fenced.
	keelpb.ControllerService_UnregisterBroker_FullMethodName: adminOnly,
	// Topics: an operator, or a broker forwarding a Kafka admin client's
	// CreateTopics, DeleteTopics or CreatePartitions with the client's
	// principal, as KRaft brokers forward them to the controller in an
	// envelope; a Metadata request's auto-creation
	// (auto.create.topics.enable) is forwarded so too. Elections and
	// reassignments likewise (Kafka's need ALTER on the cluster).
	keelpb.ControllerService_CreateTopic_FullMethodName:                 forwardedAdmin("principal"),
	keelpb.ControllerService_CreatePartitions_FullMethodName:            forwardedAdmin("principal"),
	keelpb.ControllerService_DeleteTopic_FullMethodName:                 forwardedAdmin("principal"),
	keelpb.ControllerService_ElectLeaders_FullMethodName:                forwardedAdmin("principal"),
	keelpb.ControllerService_AlterPartitionReassignments_FullMethodName: forwardedAdmin("principal"),
	keelpb.ControllerService_CreateAcls_FullMethodName:                  forwardedAdmin("principal"),
	keelpb.ControllerService_DeleteAcls_FullMethodName:                  forwardedAdmin("principal"),
	// Brokers read the ACLs from their replayed image; keel acl list is an
	// operator's (Kafka: DESCRIBE on the cluster).
	keelpb.ControllerService_DescribeAcls_FullMethodName:       adminOnly,
	keelpb.ControllerService_FetchSnapshot_FullMethodName:      adminOnly,
	keelpb.ControllerService_RestoreSnapshot_FullMethodName:    adminOnly,
	keelpb.ControllerService_AddVoter_FullMethodName:           adminOnly,
	keelpb.ControllerService_RemoveVoter_FullMethodName:        adminOnly,
	keelpb.ControllerService_TransferLeadership_FullMethodName: adminOnly,
	// Configs: an operator, or a broker forwarding a Kafka client's
	// IncrementalAlterConfigs or AlterConfigs (Kafka: ALTER_CONFIGS).
	keelpb.ControllerService_IncrementalAlterConfigs_FullMethodName: forwardedAdmin("principal"),
	// Client quotas: an operator, or a broker forwarding a Kafka client's
	// AlterClientQuotas (Kafka's needs ALTER_CONFIGS on the cluster).
	keelpb.ControllerService_AlterClientQuotas_FullMethodName: forwardedAdmin("principal"),
	// Raising or lowering metadata.version (Kafka's UpdateFeatures needs
	// ALTER on the cluster), by an operator or forwarded by a broker.
	keelpb.ControllerService_UpdateFeatures_FullMethodName: forwardedAdmin("principal"),

	// SCRAM credentials: an operator (keel user), or a broker forwarding a
	// Kafka client's AlterUserScramCredentials (ALTER on the cluster).
	keelpb.ControllerService_AlterUserScramCredentials_FullMethodName: forwardedAdmin("principal"),

	// Peer service, between the controllers of a quorum: a voter asks the
	// others before its crash election deposes a leader. An answer steers
	// an election, so only a controller may ask.
	keelpb.PeerService_LeaderContact_FullMethodName: controllerOnly,

	// Broker service, on brokers. A fetch reports the fetching replica's
	// progress, which moves it into the ISR: only that replica may send it,
	// and the leader serves it only while the image makes that broker a
	// replica of the partition (broker/replication).
	keelpb.BrokerService_Inspect_FullMethodName: brokerOrAdmin,
	keelpb.BrokerService_Fetch_FullMethodName:   replicaSelf("replica_id"),
	// A fetch session: each of its requests, as a fetch.
	keelpb.BrokerService_FetchSession_FullMethodName: replicaSelf("replica_id"),
	// A scrub reads every byte the broker holds and may cut a follower's
	// log: an operator's call.
	keelpb.BrokerService_ScrubLogs_FullMethodName: adminOnly,
}

// authorize decides whether id may call method with req. req may be nil
// unless the rule reads it from a broker's call (rule.readsRequest).
// Refusals are PermissionDenied, naming the caller and what was needed.
func authorize(id tlsauth.Identity, method string, req proto.Message) error {
	r, ok := ruleFor(method)
	if !ok {
		return status.Errorf(codes.PermissionDenied, "%s has no authorization rule; refused to everyone", method)
	}
	name := shortMethod(method)
	switch {
	case id.Role == tlsauth.RoleNone || id.Role == tlsauth.RoleUser:
		return status.Errorf(codes.PermissionDenied, "%s: certificate %q names no keel role", name, id.Name)
	case r.access == accessHealth:
		return nil
	case r.access == accessController:
		if id.Role == tlsauth.RoleController {
			return nil
		}
		return status.Errorf(codes.PermissionDenied, "%s needs a controller certificate; the caller's is %s", name, id)
	case id.Role == tlsauth.RoleProbe:
		return status.Errorf(codes.PermissionDenied, "%s: a probe certificate (%s) may only check health; this needs a controller, broker or admin certificate", name, id)
	case id.Role == tlsauth.RoleAdmin && r.access != accessReplica:
		return nil
	}
	switch r.access {
	case accessAny:
		return nil
	case accessAdmin:
		return status.Errorf(codes.PermissionDenied, "%s needs an admin certificate; the caller's is %s", name, id)
	case accessBrokerOrAdmin:
		if id.Role == tlsauth.RoleBroker {
			return nil
		}
		return status.Errorf(codes.PermissionDenied, "%s needs a broker or admin certificate; the caller's is %s", name, id)
	case accessForwarded:
		if id.Role != tlsauth.RoleBroker {
			return status.Errorf(codes.PermissionDenied, "%s needs an admin certificate; the caller's is %s", name, id)
		}
		return authorizeForwarded(id, name, req, r.field)
	case accessBrokerSelf, accessReplica:
		if id.Role != tlsauth.RoleBroker {
			orAdmin := " or an admin's"
			if r.access == accessReplica {
				orAdmin = ""
			}
			return status.Errorf(codes.PermissionDenied, "%s needs the certificate of the broker in %s (broker-<%s>)%s; the caller's is %s", name, r.field, r.field, orAdmin, id)
		}
		want, err := requestBrokerID(req, r.field)
		if err != nil {
			return status.Errorf(codes.Internal, "%s: %v", name, err)
		}
		if want != id.ID {
			return status.Errorf(codes.PermissionDenied, "%s %d: certificate is for broker %d", r.field, want, id.ID)
		}
		return nil
	}
	return status.Errorf(codes.PermissionDenied, "%s: unknown access rule", name)
}

// authorizeForwarded decides on broker's request forwarded for a client:
// the principal in field must be an admin's (User:admin, User:admin-NAME).
// A broker's certificate vouches for the principal it forwards, as a KRaft
// broker's does for its envelope, but is no admin's itself. Another
// principal may still be allowed by the controller's ACLs
// (authorizeForwardedByACL).
func authorizeForwarded(broker tlsauth.Identity, name string, req proto.Message, field protoreflect.Name) error {
	principal, err := requestString(req, field)
	if err != nil {
		return status.Errorf(codes.Internal, "%s: %v", name, err)
	}
	if ct, ok := req.(*keelpb.CreateTopicRequest); ok && ct.GetInternal() && principal == "" {
		// The broker's own request for an internal topic it needs
		// (__consumer_offsets): the controller creates nothing else so.
		return nil
	}
	if principal == "" {
		return status.Errorf(codes.PermissionDenied, "%s needs an admin certificate, or a broker forwarding an admin client's request in %s; the caller's is %s, which forwards none", name, field, broker)
	}
	if PrincipalIdentity(principal).Role != tlsauth.RoleAdmin {
		return status.Errorf(codes.PermissionDenied, "%s needs an admin certificate; %s forwards the request of %q, whom no ACL allows it", name, broker, principal)
	}
	return nil
}

// ACLDecider decides a Kafka principal's operation on a resource by the
// ACLs of the server's image (WithForwardedACLs).
type ACLDecider func(principal string, op kmsg.ACLOperation, typ kmsg.ACLResourceType, name string) bool

// authorizeForwardedByACL allows a broker's request forwarded for a
// principal that is no admin's when the ACLs allow what the request does,
// as Kafka's controller authorizes a forwarded request's principal:
// CREATE on the cluster or the topic for CreateTopic, DELETE or ALTER on
// the topic for DeleteTopic and CreatePartitions, ALTER_CONFIGS on the
// topic or the cluster for config and quota changes, ALTER on the cluster
// for the ACL, election, reassignment, feature and credential changes.
func authorizeForwardedByACL(acls ACLDecider, req proto.Message) bool {
	cluster := func(op kmsg.ACLOperation, principal string) bool {
		return acls(principal, op, kmsg.ACLResourceTypeCluster, acl.ClusterName)
	}
	topic := func(op kmsg.ACLOperation, principal, name string) bool {
		return acls(principal, op, kmsg.ACLResourceTypeTopic, name)
	}
	switch r := req.(type) {
	case *keelpb.CreateTopicRequest:
		return cluster(kmsg.ACLOperationCreate, r.GetPrincipal()) || topic(kmsg.ACLOperationCreate, r.GetPrincipal(), r.GetName())
	case *keelpb.DeleteTopicRequest:
		return r.GetPrincipal() != "" && topic(kmsg.ACLOperationDelete, r.GetPrincipal(), r.GetName())
	case *keelpb.CreatePartitionsRequest:
		return r.GetPrincipal() != "" && topic(kmsg.ACLOperationAlter, r.GetPrincipal(), r.GetTopic())
	case *keelpb.CreateAclsRequest:
		return r.GetPrincipal() != "" && cluster(kmsg.ACLOperationAlter, r.GetPrincipal())
	case *keelpb.DeleteAclsRequest:
		return r.GetPrincipal() != "" && cluster(kmsg.ACLOperationAlter, r.GetPrincipal())
	case *keelpb.IncrementalAlterConfigsRequest:
		if r.GetPrincipal() == "" {
			return false
		}
		if res := r.GetResource(); res.GetType() == keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC {
			return topic(kmsg.ACLOperationAlterConfigs, r.GetPrincipal(), res.GetName())
		}
		return cluster(kmsg.ACLOperationAlterConfigs, r.GetPrincipal())
	case *keelpb.AlterClientQuotasRequest:
		return r.GetPrincipal() != "" && cluster(kmsg.ACLOperationAlterConfigs, r.GetPrincipal())
	case *keelpb.ElectLeadersRequest:
		return r.GetPrincipal() != "" && cluster(kmsg.ACLOperationAlter, r.GetPrincipal())
	case *keelpb.AlterPartitionReassignmentsRequest:
		return r.GetPrincipal() != "" && cluster(kmsg.ACLOperationAlter, r.GetPrincipal())
	case *keelpb.UpdateFeaturesRequest:
		return r.GetPrincipal() != "" && cluster(kmsg.ACLOperationAlter, r.GetPrincipal())
	case *keelpb.AlterUserScramCredentialsRequest:
		return r.GetPrincipal() != "" && cluster(kmsg.ACLOperationAlter, r.GetPrincipal())
	}
	return false
}

// requestString reads the string field named field from req.
func requestString(req proto.Message, field protoreflect.Name) (string, error) {
	fd, m, err := requestField(req, field, protoreflect.StringKind)
	if err != nil {
		return "", err
	}
	return m.Get(fd).String(), nil
}

// requestField finds the singular field named field, of kind kind, in req.
func requestField(req proto.Message, field protoreflect.Name, kind protoreflect.Kind) (protoreflect.FieldDescriptor, protoreflect.Message, error) {
	if req == nil {
		return nil, nil, fmt.Errorf("no request to read %s from", field)
	}
	m := req.ProtoReflect()
	fd := m.Descriptor().Fields().ByName(field)
	if fd == nil || fd.Kind() != kind || fd.Cardinality() == protoreflect.Repeated {
		return nil, nil, fmt.Errorf("%s has no %s field %s", m.Descriptor().FullName(), kind, field)
	}
	return fd, m, nil
}

// requestBrokerID reads the int32 field named field from req.
func requestBrokerID(req proto.Message, field protoreflect.Name) (int32, error) {
	fd, m, err := requestField(req, field, protoreflect.Int32Kind)
	if err != nil {
		return 0, err
	}
	return int32(m.Get(fd).Int()), nil
}

// shortMethod is "CreateTopic" for "/keel.v1.ControllerService/CreateTopic".
func shortMethod(full string) string {
	return full[strings.LastIndex(full, "/")+1:]
}

// callerIdentity reads the identity of the caller's verified certificate.
func callerIdentity(ctx context.Context) (tlsauth.Identity, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return tlsauth.Identity{}, status.Error(codes.Unauthenticated, "no peer information: is TLS on?")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 {
		return tlsauth.Identity{}, status.Error(codes.Unauthenticated, "no verified client certificate")
	}
	// The leaf of a verified chain: the certificate the handshake checked.
	id, _ := tlsauth.PeerIdentity(info.State.VerifiedChains[0])
	return id, nil
}

// authUnary authorizes every unary call by the caller's certificate; a
// broker's forwarded request that the certificates alone refuse, by acls
// (nil: none).
func authUnary(acls ACLDecider) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		id, err := callerIdentity(ctx)
		if err != nil {
			return nil, err
		}
		msg, _ := req.(proto.Message)
		if err := authorize(id, info.FullMethod, msg); err != nil {
			r, _ := ruleFor(info.FullMethod)
			if acls == nil || id.Role != tlsauth.RoleBroker || r.access != accessForwarded || !authorizeForwardedByACL(acls, msg) {
				return nil, err
			}
		}
		return handler(ctx, req)
	}
}

// authStream authorizes every streaming call: at once when the certificate
// alone decides, and otherwise (a broker calling about a broker id) on
// every message the client sends.
func authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	id, err := callerIdentity(ss.Context())
	if err != nil {
		return err
	}
	if r, ok := ruleFor(info.FullMethod); !ok || !r.readsRequest(id) {
		if err := authorize(id, info.FullMethod, nil); err != nil {
			return err
		}
		return handler(srv, ss)
	}
	return handler(srv, &authorizedStream{ServerStream: ss, id: id, method: info.FullMethod})
}

// authorizedStream authorizes each message as the handler receives it.
type authorizedStream struct {
	grpc.ServerStream
	id     tlsauth.Identity
	method string
}

func (s *authorizedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	msg, _ := m.(proto.Message)
	return authorize(s.id, s.method, msg)
}
