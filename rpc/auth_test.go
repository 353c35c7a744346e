package rpc

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/tlsauth"
)

// TestMethodRules_CoverEveryMethod: every method of every service in the
// keel proto package has exactly one rule, and a rule that reads a broker
// id names an int32 field of the method's request, one that reads a
// forwarded principal a string field. A new RPC without a rule
// fails here (and would be refused to everyone at run time).
func TestMethodRules_CoverEveryMethod(t *testing.T) {
	seen := map[string]bool{}
	protoregistry.GlobalFiles.RangeFilesByPackage("keel.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				md := sd.Methods().Get(j)
				full := fmt.Sprintf("/%s/%s", sd.FullName(), md.Name())
				seen[full] = true
				r, ok := methodRules[full]
				if !ok {
					t.Errorf("%s has no rule in methodRules", full)
					continue
				}
				kind := map[access]protoreflect.Kind{accessBrokerSelf: protoreflect.Int32Kind, accessReplica: protoreflect.Int32Kind,
					accessForwarded: protoreflect.StringKind}
				if want, ok := kind[r.access]; ok {
					f := md.Input().Fields().ByName(r.field)
					if f == nil || f.Kind() != want || f.Cardinality() == protoreflect.Repeated {
						t.Errorf("%s: rule reads %s, which %s does not have as %s", full, r.field, md.Input().FullName(), want)
					}
				}
			}
		}
		return true
	})
	if len(seen) == 0 {
		t.Fatal("no keel.v1 services registered")
	}
	for m := range methodRules {
		if !seen[m] {
			t.Errorf("methodRules has %s, which is no method of a keel service", m)
		}
	}
}

func identity(t *testing.T, cn string) tlsauth.Identity {
	t.Helper()
	id, err := tlsauth.ParseIdentity(cn)
	if err != nil && id.Role != tlsauth.RoleNone {
		t.Fatal(err)
	}
	return id
}

func TestAuthorize(t *testing.T) {
	const (
		describe    = keelpb.ControllerService_DescribeQuorum_FullMethodName
		listTopics  = keelpb.ControllerService_ListTopics_FullMethodName
		create      = keelpb.ControllerService_CreateTopic_FullMethodName
		noop        = keelpb.ControllerService_AppendNoOp_FullMethodName
		restore     = keelpb.ControllerService_RestoreSnapshot_FullMethodName
		register    = keelpb.ControllerService_RegisterBroker_FullMethodName
		heartbeat   = keelpb.ControllerService_BrokerHeartbeat_FullMethodName
		unregister  = keelpb.ControllerService_UnregisterBroker_FullMethodName
		stream      = keelpb.ControllerService_StreamMetadata_FullMethodName
		alter       = keelpb.ControllerService_AlterPartition_FullMethodName
		inspect     = keelpb.BrokerService_Inspect_FullMethodName
		fetch       = keelpb.BrokerService_Fetch_FullMethodName
		addParts    = keelpb.ControllerService_CreatePartitions_FullMethodName
		deleteTopic = keelpb.ControllerService_DeleteTopic_FullMethodName
	)
	reg := func(id int32) proto.Message { return &keelpb.RegisterBrokerRequest{BrokerId: id} }
	tests := []struct {
		caller   string
		method   string
		req      proto.Message
		wantCode codes.Code
		wantMsg  string
	}{
		// Reads: any keel identity.
		{caller: "controller-1", method: describe, wantCode: codes.OK},
		{caller: "broker-1", method: describe, wantCode: codes.OK},
		{caller: "admin", method: listTopics, wantCode: codes.OK},
		{caller: "broker-7", method: listTopics, wantCode: codes.OK},
		{caller: "nobody", method: describe, wantCode: codes.PermissionDenied, wantMsg: `DescribeQuorum: certificate "nobody" names no keel role`},

		// Operator actions: admin only.
		{caller: "admin", method: create, wantCode: codes.OK},
		{caller: "admin-alice", method: restore, wantCode: codes.OK},
		{caller: "controller-1", method: create, wantCode: codes.PermissionDenied, wantMsg: "CreateTopic needs an admin certificate; the caller's is controller-1"},
		{caller: "controller-2", method: noop, wantCode: codes.PermissionDenied, wantMsg: "AppendNoOp needs an admin certificate; the caller's is controller-2"},
		{caller: "broker-1", method: restore, wantCode: codes.PermissionDenied, wantMsg: "RestoreSnapshot needs an admin certificate"},

		// A broker about itself: only as its own id.
		{caller: "broker-1", method: register, req: reg(1), wantCode: codes.OK},
		{caller: "broker-0", method: register, req: reg(0), wantCode: codes.OK},
		{caller: "broker-1", method: register, req: reg(2), wantCode: codes.PermissionDenied, wantMsg: "broker_id 2: certificate is for broker 1"},
		{caller: "broker-1", method: heartbeat, req: &keelpb.BrokerHeartbeatRequest{BrokerId: 3}, wantCode: codes.PermissionDenied, wantMsg: "broker_id 3: certificate is for broker 1"},
		{caller: "broker-1", method: stream, req: &keelpb.StreamMetadataRequest{BrokerId: 1}, wantCode: codes.OK},
		{caller: "broker-1", method: alter, req: &keelpb.AlterPartitionRequest{BrokerId: 4}, wantCode: codes.PermissionDenied, wantMsg: "broker_id 4: certificate is for broker 1"},
		// Unregistering is the operator's act, not a broker's, even about itself.
		{caller: "broker-1", method: unregister, req: &keelpb.UnregisterBrokerRequest{BrokerId: 1}, wantCode: codes.PermissionDenied, wantMsg: "UnregisterBroker needs an admin certificate; the caller's is broker-1"},
		{caller: "controller-1", method: register, req: reg(1), wantCode: codes.PermissionDenied, wantMsg: "RegisterBroker needs the certificate of the broker in broker_id (broker-<broker_id>) or an admin's; the caller's is controller-1"},
		// An admin may act for any broker (keel bench), and unregister one.
		{caller: "admin", method: unregister, req: &keelpb.UnregisterBrokerRequest{BrokerId: 9}, wantCode: codes.OK},
		{caller: "admin", method: register, req: reg(5), wantCode: codes.OK},

		// One controller to another: a controller's or an admin's.
		{caller: "controller-2", method: keelpb.ControllerService_CompareImage_FullMethodName, wantCode: codes.OK},
		{caller: "admin", method: keelpb.ControllerService_CompareImage_FullMethodName, wantCode: codes.PermissionDenied, wantMsg: "CompareImage needs a controller certificate; the caller's is admin"},
		{caller: "broker-1", method: keelpb.ControllerService_CompareImage_FullMethodName, wantCode: codes.PermissionDenied, wantMsg: "CompareImage needs a controller certificate; the caller's is broker-1"},
		{caller: "broker-1", method: keelpb.ControllerService_AcknowledgedIndex_FullMethodName, wantCode: codes.OK},

		// Topics: an admin, or a broker forwarding an admin client's request
		// (KIP-590's envelope); a broker's own certificate is not enough.
		{caller: "admin", method: create, req: &keelpb.CreateTopicRequest{}, wantCode: codes.OK},
		{caller: "admin", method: create, req: &keelpb.CreateTopicRequest{Principal: "broker-2"}, wantCode: codes.OK},
		{caller: "broker-1", method: create, req: &keelpb.CreateTopicRequest{Principal: "admin"}, wantCode: codes.OK},
		{caller: "broker-1", method: addParts, req: &keelpb.CreatePartitionsRequest{Principal: "admin-alice"}, wantCode: codes.OK},
		{caller: "broker-1", method: deleteTopic, req: &keelpb.DeleteTopicRequest{Principal: "admin"}, wantCode: codes.OK},
		{caller: "broker-1", method: deleteTopic, req: &keelpb.DeleteTopicRequest{Principal: "User:admin-ops"}, wantCode: codes.OK},
		{caller: "broker-1", method: deleteTopic, req: &keelpb.DeleteTopicRequest{Principal: "User:app-orders"}, wantCode: codes.PermissionDenied, wantMsg: `forwards the request of "User:app-orders", whom no ACL allows it`},
		{caller: "broker-1", method: "/keel.v1.ControllerService/CreateAcls", req: &keelpb.CreateAclsRequest{Principal: "User:admin"}, wantCode: codes.OK},
		{caller: "broker-1", method: "/keel.v1.ControllerService/DeleteAcls", req: &keelpb.DeleteAclsRequest{Principal: "User:broker-1"}, wantCode: codes.PermissionDenied},
		{caller: "broker-1", method: "/keel.v1.ControllerService/DescribeAcls", wantCode: codes.PermissionDenied},
		// A broker's own request for an internal topic (__consumer_offsets):
		// no principal; the controller creates nothing but an internal
		// topic so (controller.checkInternal).
		{caller: "broker-1", method: create, req: &keelpb.CreateTopicRequest{Internal: true}, wantCode: codes.OK},
		{caller: "broker-1", method: create, req: &keelpb.CreateTopicRequest{Internal: true, Principal: "User:alice"}, wantCode: codes.PermissionDenied},
		{caller: "broker-1", method: create, req: &keelpb.CreateTopicRequest{}, wantCode: codes.PermissionDenied, wantMsg: "CreateTopic needs an admin certificate, or a broker forwarding an admin client's request in principal; the caller's is broker-1, which forwards none"},
		{caller: "broker-1", method: deleteTopic, req: &keelpb.DeleteTopicRequest{}, wantCode: codes.PermissionDenied, wantMsg: "DeleteTopic needs an admin certificate, or a broker forwarding"},
		{caller: "broker-1", method: addParts, req: &keelpb.CreatePartitionsRequest{}, wantCode: codes.PermissionDenied, wantMsg: "CreatePartitions needs an admin certificate, or a broker forwarding"},
		{caller: "broker-1", method: create, req: &keelpb.CreateTopicRequest{Principal: "broker-1"}, wantCode: codes.PermissionDenied, wantMsg: `CreateTopic needs an admin certificate; broker-1 forwards the request of "broker-1"`},
		{caller: "broker-1", method: deleteTopic, req: &keelpb.DeleteTopicRequest{Principal: "broker-3"}, wantCode: codes.PermissionDenied, wantMsg: `DeleteTopic needs an admin certificate; broker-1 forwards the request of "broker-3"`},
		{caller: "broker-1", method: create, req: &keelpb.CreateTopicRequest{Principal: "controller-1"}, wantCode: codes.PermissionDenied, wantMsg: `forwards the request of "controller-1"`},
		{caller: "broker-1", method: create, req: &keelpb.CreateTopicRequest{Principal: "probe"}, wantCode: codes.PermissionDenied, wantMsg: `forwards the request of "probe"`},
		{caller: "broker-1", method: create, req: &keelpb.CreateTopicRequest{Principal: PlaintextPrincipal}, wantCode: codes.PermissionDenied, wantMsg: `forwards the request of "User:ANONYMOUS"`},
		{caller: "broker-1", method: create, req: &keelpb.CreateTopicRequest{Principal: "nobody"}, wantCode: codes.PermissionDenied, wantMsg: `forwards the request of "nobody"`},
		// Only a broker's certificate vouches for a forwarded principal.
		{caller: "controller-1", method: create, req: &keelpb.CreateTopicRequest{Principal: "admin"}, wantCode: codes.PermissionDenied, wantMsg: "CreateTopic needs an admin certificate; the caller's is controller-1"},
		{caller: "probe", method: deleteTopic, req: &keelpb.DeleteTopicRequest{Principal: "admin"}, wantCode: codes.PermissionDenied, wantMsg: "DeleteTopic: a probe certificate"},
		{caller: "nobody", method: create, req: &keelpb.CreateTopicRequest{Principal: "admin"}, wantCode: codes.PermissionDenied, wantMsg: `certificate "nobody" names no keel role`},

		// The broker service.
		{caller: "broker-2", method: inspect, wantCode: codes.OK},
		{caller: "admin", method: inspect, wantCode: codes.OK},
		{caller: "controller-1", method: inspect, wantCode: codes.PermissionDenied, wantMsg: "Inspect needs a broker or admin certificate; the caller's is controller-1"},
		{caller: "broker-2", method: fetch, req: &keelpb.FetchRequest{ReplicaId: 2}, wantCode: codes.OK},
		{caller: "broker-2", method: fetch, req: &keelpb.FetchRequest{ReplicaId: 3}, wantCode: codes.PermissionDenied, wantMsg: "replica_id 3: certificate is for broker 2"},
		// A fetch as a replica is that replica's alone, not even an admin's:
		// one in another's name gets records acknowledged that only the
		// leader holds (Kafka: CLUSTER_ACTION).
		{caller: "admin", method: fetch, req: &keelpb.FetchRequest{ReplicaId: 2}, wantCode: codes.PermissionDenied, wantMsg: "Fetch needs the certificate of the broker in replica_id (broker-<replica_id>); the caller's is admin"},
		{caller: "admin-alice", method: fetch, req: &keelpb.FetchRequest{ReplicaId: 0}, wantCode: codes.PermissionDenied, wantMsg: "the caller's is admin-alice"},
		{caller: "controller-1", method: fetch, req: &keelpb.FetchRequest{ReplicaId: 1}, wantCode: codes.PermissionDenied, wantMsg: "Fetch needs the certificate of the broker in replica_id (broker-<replica_id>); the caller's is controller-1"},
		{caller: "broker-0", method: fetch, req: &keelpb.FetchRequest{ReplicaId: -1}, wantCode: codes.PermissionDenied, wantMsg: "replica_id -1: certificate is for broker 0"},
		{caller: "admin", method: keelpb.BrokerService_ScrubLogs_FullMethodName, wantCode: codes.OK},
		{caller: "broker-2", method: keelpb.BrokerService_ScrubLogs_FullMethodName, wantCode: codes.PermissionDenied, wantMsg: "ScrubLogs needs an admin certificate; the caller's is broker-2"},

		// A probe: health and reflection, nothing else.
		{caller: "probe", method: healthpb.Health_Check_FullMethodName, wantCode: codes.OK},
		{caller: "probe-lb", method: healthpb.Health_Watch_FullMethodName, wantCode: codes.OK},
		{caller: "probe", method: healthpb.Health_List_FullMethodName, wantCode: codes.OK},
		{caller: "probe", method: reflectionv1.ServerReflection_ServerReflectionInfo_FullMethodName, wantCode: codes.OK},
		{caller: "probe", method: describe, wantCode: codes.PermissionDenied, wantMsg: "DescribeQuorum: a probe certificate (probe) may only check health; this needs a controller, broker or admin certificate"},
		{caller: "probe-lb", method: listTopics, wantCode: codes.PermissionDenied, wantMsg: "ListTopics: a probe certificate (probe-lb) may only check health"},
		{caller: "probe", method: create, wantCode: codes.PermissionDenied, wantMsg: "CreateTopic: a probe certificate"},
		{caller: "probe", method: keelpb.ControllerService_AddVoter_FullMethodName, wantCode: codes.PermissionDenied, wantMsg: "AddVoter: a probe certificate"},
		{caller: "probe", method: register, req: reg(0), wantCode: codes.PermissionDenied, wantMsg: "RegisterBroker: a probe certificate"},
		{caller: "probe", method: inspect, wantCode: codes.PermissionDenied, wantMsg: "Inspect: a probe certificate"},
		{caller: "probe", method: fetch, req: &keelpb.FetchRequest{ReplicaId: 0}, wantCode: codes.PermissionDenied, wantMsg: "Fetch: a probe certificate"},
		// Everyone else may check health too.
		{caller: "broker-3", method: healthpb.Health_Check_FullMethodName, wantCode: codes.OK},
		{caller: "controller-2", method: reflectionv1.ServerReflection_ServerReflectionInfo_FullMethodName, wantCode: codes.OK},
		{caller: "admin-ops", method: healthpb.Health_Watch_FullMethodName, wantCode: codes.OK},
		{caller: "nobody", method: healthpb.Health_Check_FullMethodName, wantCode: codes.PermissionDenied, wantMsg: `Check: certificate "nobody" names no keel role`},

		// The peer service: controllers only, not even an admin.
		{caller: "controller-2", method: keelpb.PeerService_LeaderContact_FullMethodName, wantCode: codes.OK},
		{caller: "admin", method: keelpb.PeerService_LeaderContact_FullMethodName, wantCode: codes.PermissionDenied, wantMsg: "LeaderContact needs a controller certificate; the caller's is admin"},
		{caller: "broker-1", method: keelpb.PeerService_LeaderContact_FullMethodName, wantCode: codes.PermissionDenied, wantMsg: "LeaderContact needs a controller certificate; the caller's is broker-1"},
		{caller: "probe", method: keelpb.PeerService_LeaderContact_FullMethodName, wantCode: codes.PermissionDenied, wantMsg: "LeaderContact needs a controller certificate; the caller's is probe"},

		// Fail closed.
		{caller: "admin", method: "/keel.v1.ControllerService/Unknown", wantCode: codes.PermissionDenied, wantMsg: "has no authorization rule"},
	}
	for _, tt := range tests {
		t.Run(tt.caller+" "+shortMethod(tt.method), func(t *testing.T) {
			err := authorize(identity(t, tt.caller), tt.method, tt.req)
			if got := status.Code(err); got != tt.wantCode {
				t.Fatalf("authorize = %v, want code %v", err, tt.wantCode)
			}
			if tt.wantMsg != "" && !strings.Contains(status.Convert(err).Message(), tt.wantMsg) {
				t.Errorf("message %q does not contain %q", status.Convert(err).Message(), tt.wantMsg)
			}
		})
	}
}

// authFake answers the calls the TLS test makes.
type authFake struct {
	keelpb.UnimplementedControllerServiceServer
}

func (authFake) DescribeQuorum(context.Context, *keelpb.DescribeQuorumRequest) (*keelpb.DescribeQuorumResponse, error) {
	return &keelpb.DescribeQuorumResponse{NodeId: 1}, nil
}

func (authFake) CreateTopic(_ context.Context, req *keelpb.CreateTopicRequest) (*keelpb.CreateTopicResponse, error) {
	return &keelpb.CreateTopicResponse{Topic: &keelpb.TopicDescription{Name: req.GetName()}}, nil
}

func (authFake) RegisterBroker(_ context.Context, req *keelpb.RegisterBrokerRequest) (*keelpb.RegisterBrokerResponse, error) {
	return &keelpb.RegisterBrokerResponse{BrokerEpoch: int64(req.GetBrokerId()) + 100}, nil
}

func (authFake) StreamMetadata(req *keelpb.StreamMetadataRequest, ss grpc.ServerStreamingServer[keelpb.MetadataPush]) error {
	return ss.Send(&keelpb.MetadataPush{ControllerId: req.GetBrokerId()})
}

type authBrokerFake struct {
	keelpb.UnimplementedBrokerServiceServer
}

func (authBrokerFake) Inspect(context.Context, *keelpb.InspectRequest) (*keelpb.InspectResponse, error) {
	return &keelpb.InspectResponse{BrokerId: 1}, nil
}

// serveTLS serves the fake controller and broker services with cfg's
// certificate and the authorization interceptors, on loopback.
func serveTLS(t *testing.T, cfg *tlsauth.Config) string {
	t.Helper()
	return serveWith(t, ServerOptions(WithTLS(cfg)), func(g *grpc.Server) {
		keelpb.RegisterControllerServiceServer(g, authFake{})
		keelpb.RegisterBrokerServiceServer(g, authBrokerFake{})
	})
}

// TestAuth_OverTLS runs the interceptors behind a real TLS server with
// certificates from a throwaway CA.
func TestAuth_OverTLS(t *testing.T) {
	certs, ca := testCerts(t)
	// A certificate naming no role cannot be loaded as a Config: build its
	// tls.Config by hand.
	nobodyCert, nobodyKey, err := ca.Issue("nobody")
	if err != nil {
		t.Fatal(err)
	}
	nobodyPair, err := tls.X509KeyPair(nobodyCert, nobodyKey)
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := tlsauth.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := otherCA.Config("admin")
	if err != nil {
		t.Fatal(err)
	}

	addr := serveTLS(t, certs["controller-1"])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	controller := func(t *testing.T, opts ...Option) keelpb.ControllerServiceClient {
		t.Helper()
		c, err := NewClient([]string{addr}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cl, err := c.Controller(addr)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	raw := func(t *testing.T, cfg *tls.Config) keelpb.ControllerServiceClient {
		t.Helper()
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return keelpb.NewControllerServiceClient(cc)
	}
	wantCode := func(t *testing.T, err error, code codes.Code, msg string) {
		t.Helper()
		if status.Code(err) != code {
			t.Fatalf("error = %v, want code %v", err, code)
		}
		if msg != "" && !strings.Contains(status.Convert(err).Message(), msg) {
			t.Errorf("message %q does not contain %q", status.Convert(err).Message(), msg)
		}
	}

	t.Run("admin creates a topic", func(t *testing.T) {
		resp, err := controller(t, WithTLS(certs["admin"])).CreateTopic(ctx, validCreateTopic)
		if err != nil || resp.GetTopic().GetName() != validCreateTopic.GetName() {
			t.Fatalf("CreateTopic = %v, %v", resp, err)
		}
	})
	t.Run("a broker forwards a Kafka admin client's topic creation", func(t *testing.T) {
		forwarded := edited(validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.Principal = "admin-alice" })
		resp, err := controller(t, WithTLS(certs["broker-1"])).CreateTopic(ctx, forwarded)
		if err != nil || resp.GetTopic().GetName() != validCreateTopic.GetName() {
			t.Fatalf("CreateTopic = %v, %v", resp, err)
		}
	})
	t.Run("a broker cannot create topics on its own", func(t *testing.T) {
		_, err := controller(t, WithTLS(certs["broker-1"])).CreateTopic(ctx, validCreateTopic)
		wantCode(t, err, codes.PermissionDenied, "CreateTopic needs an admin certificate, or a broker forwarding an admin client's request in principal; the caller's is broker-1, which forwards none")
		_, err = controller(t, WithTLS(certs["broker-1"])).CreateTopic(ctx, edited(validCreateTopic, func(r *keelpb.CreateTopicRequest) { r.Principal = "broker-2" }))
		wantCode(t, err, codes.PermissionDenied, `CreateTopic needs an admin certificate; broker-1 forwards the request of "broker-2"`)
	})
	t.Run("a controller cannot create topics", func(t *testing.T) {
		_, err := controller(t, WithTLS(certs["controller-1"])).CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: "t", Principal: "admin"})
		wantCode(t, err, codes.PermissionDenied, "CreateTopic needs an admin certificate; the caller's is controller-1")
	})
	t.Run("a broker registers as itself only", func(t *testing.T) {
		cl := controller(t, WithTLS(certs["broker-1"]))
		if resp, err := cl.RegisterBroker(ctx, validRegister); err != nil || resp.GetBrokerEpoch() != 101 {
			t.Fatalf("RegisterBroker as itself = %v, %v", resp, err)
		}
		_, err := cl.RegisterBroker(ctx, edited(validRegister, func(r *keelpb.RegisterBrokerRequest) { r.BrokerId = 2 }))
		wantCode(t, err, codes.PermissionDenied, "broker_id 2: certificate is for broker 1")
	})
	t.Run("a broker streams its own metadata only", func(t *testing.T) {
		cl := controller(t, WithTLS(certs["broker-1"]))
		s, err := cl.StreamMetadata(ctx, validStreamMetadata)
		if err != nil {
			t.Fatal(err)
		}
		if push, err := s.Recv(); err != nil || push.GetControllerId() != 1 {
			t.Fatalf("own stream: %v, %v", push, err)
		}
		s, err = cl.StreamMetadata(ctx, edited(validStreamMetadata, func(r *keelpb.StreamMetadataRequest) { r.BrokerId = 2 }))
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Recv()
		wantCode(t, err, codes.PermissionDenied, "broker_id 2: certificate is for broker 1")
	})
	t.Run("reads for any identity", func(t *testing.T) {
		for _, cn := range []string{"controller-1", "broker-1", "admin"} {
			if _, err := controller(t, WithTLS(certs[cn])).DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{}); err != nil {
				t.Errorf("%s: DescribeQuorum: %v", cn, err)
			}
		}
	})
	t.Run("a certificate naming no role", func(t *testing.T) {
		cfg := certs["admin"].Client()
		cfg.Certificates = []tls.Certificate{nobodyPair}
		_, err := raw(t, cfg).DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{})
		wantCode(t, err, codes.PermissionDenied, `certificate "nobody" names no keel role`)
	})
	t.Run("no client certificate is refused", func(t *testing.T) {
		cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: certs["admin"].Client().RootCAs}
		_, err := raw(t, cfg).DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{})
		wantCode(t, err, codes.Unavailable, "")
	})
	t.Run("another CA's certificate is refused", func(t *testing.T) {
		_, err := controller(t, WithTLS(stranger)).DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{})
		wantCode(t, err, codes.Unavailable, "")
	})
	t.Run("a plaintext client cannot reach it", func(t *testing.T) {
		_, err := controller(t).DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{})
		wantCode(t, err, codes.Unavailable, "")
	})
	t.Run("a client wants a controller's certificate", func(t *testing.T) {
		brokerAddr := serveTLS(t, certs["broker-1"])
		c, err := NewClient([]string{brokerAddr}, WithTLS(certs["admin"]))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cl, err := c.Controller(brokerAddr)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{})
		wantCode(t, err, codes.Unavailable, "not a controller certificate")

		// DialBroker wants a broker's, and gets it.
		bc, err := DialBroker(brokerAddr, WithTLS(certs["admin"]))
		if err != nil {
			t.Fatal(err)
		}
		defer bc.Close()
		if resp, err := bc.Inspect(ctx); err != nil || resp.GetBrokerId() != 1 {
			t.Fatalf("Inspect = %v, %v", resp, err)
		}
		bc2, err := DialBroker(addr, WithTLS(certs["admin"]))
		if err != nil {
			t.Fatal(err)
		}
		defer bc2.Close()
		_, err = bc2.Inspect(ctx)
		wantCode(t, err, codes.Unavailable, "not a broker certificate")
	})
	t.Run("inspect needs a broker or admin", func(t *testing.T) {
		bc, err := DialBroker(serveTLS(t, certs["broker-1"]), WithTLS(certs["controller-1"]))
		if err != nil {
			t.Fatal(err)
		}
		defer bc.Close()
		_, err = bc.Inspect(ctx)
		wantCode(t, err, codes.PermissionDenied, "Inspect needs a broker or admin certificate; the caller's is controller-1")
	})
}

// TestServerOptions_PlaintextAuthorizesNothing: without TLS no caller is
// identified, so nothing is authorized (every valid request is served, as
// before mTLS existed); the requests are still checked (Validate).
func TestServerOptions_PlaintextAuthorizesNothing(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(ServerOptions()...)
	keelpb.RegisterControllerServiceServer(g, authFake{})
	go g.Serve(lis)
	defer g.Stop()
	c, err := NewClient([]string{lis.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := c.Controller(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cl.CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: "t", Partitions: 1, ReplicationFactor: 1}); err != nil {
		t.Fatalf("plaintext CreateTopic: %v", err)
	}
	_, err = cl.CreateTopic(ctx, &keelpb.CreateTopicRequest{Name: "t"})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != "partitions: 0; at least 1 without assignments" {
		t.Fatalf("plaintext CreateTopic with no partitions: %v; want InvalidArgument naming partitions", err)
	}
}
