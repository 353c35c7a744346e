package rpc

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/tlsauth"
)

// TestAuthorizeMethod: before the request is read, a call is refused
// exactly when no request could make it allowed, with authorize's refusal;
// only a broker's call about a broker id, or forwarding a principal, waits
// for the request.
func TestAuthorizeMethod(t *testing.T) {
	const (
		describe  = keelpb.ControllerService_DescribeQuorum_FullMethodName
		create    = keelpb.ControllerService_AppendNoOp_FullMethodName
		restore   = keelpb.ControllerService_RestoreSnapshot_FullMethodName
		register  = keelpb.ControllerService_RegisterBroker_FullMethodName
		heartbeat = keelpb.ControllerService_BrokerHeartbeat_FullMethodName
		stream    = keelpb.ControllerService_StreamMetadata_FullMethodName
		inspect   = keelpb.BrokerService_Inspect_FullMethodName
		fetch     = keelpb.BrokerService_Fetch_FullMethodName
		topic     = keelpb.ControllerService_CreateTopic_FullMethodName
	)
	tests := []struct {
		caller   string
		method   string
		wantCode codes.Code
		wantMsg  string
	}{
		{caller: "broker-1", method: describe, wantCode: codes.OK},
		{caller: "controller-2", method: describe, wantCode: codes.OK},
		{caller: "nobody", method: describe, wantCode: codes.PermissionDenied, wantMsg: `DescribeQuorum: certificate "nobody" names no keel role`},

		{caller: "admin", method: create, wantCode: codes.OK},
		{caller: "broker-1", method: create, wantCode: codes.PermissionDenied, wantMsg: "AppendNoOp needs an admin certificate; the caller's is broker-1"},
		{caller: "controller-1", method: restore, wantCode: codes.PermissionDenied, wantMsg: "RestoreSnapshot needs an admin certificate; the caller's is controller-1"},

		// A broker about a broker id: decided on the request, after decoding.
		{caller: "broker-1", method: register, wantCode: codes.OK},
		{caller: "broker-7", method: heartbeat, wantCode: codes.OK},
		{caller: "broker-7", method: stream, wantCode: codes.OK},
		{caller: "broker-2", method: fetch, wantCode: codes.OK},
		{caller: "admin", method: register, wantCode: codes.OK},
		{caller: "controller-1", method: register, wantCode: codes.PermissionDenied, wantMsg: "RegisterBroker needs the certificate of the broker in broker_id (broker-<broker_id>) or an admin's; the caller's is controller-1"},
		{caller: "controller-1", method: fetch, wantCode: codes.PermissionDenied, wantMsg: "Fetch needs the certificate of the broker in replica_id"},
		// A replica's fetch is no admin's: refused before decoding.
		{caller: "admin", method: fetch, wantCode: codes.PermissionDenied, wantMsg: "Fetch needs the certificate of the broker in replica_id (broker-<replica_id>); the caller's is admin"},

		// A broker forwarding a client's principal: decided on the request.
		{caller: "broker-1", method: topic, wantCode: codes.OK},
		{caller: "admin", method: topic, wantCode: codes.OK},
		{caller: "controller-1", method: topic, wantCode: codes.PermissionDenied, wantMsg: "CreateTopic needs an admin certificate; the caller's is controller-1"},

		{caller: "controller-1", method: inspect, wantCode: codes.PermissionDenied, wantMsg: "Inspect needs a broker or admin certificate; the caller's is controller-1"},
		{caller: "broker-3", method: inspect, wantCode: codes.OK},

		{caller: "admin", method: "/keel.v1.ControllerService/Unknown", wantCode: codes.PermissionDenied, wantMsg: "has no authorization rule; refused to everyone"},
		{caller: "broker-1", method: "/keel.v1.Other/Method", wantCode: codes.PermissionDenied, wantMsg: "has no authorization rule; refused to everyone"},
	}
	for _, tt := range tests {
		t.Run(tt.caller+" "+shortMethod(tt.method), func(t *testing.T) {
			err := authorizeMethod(identity(t, tt.caller), tt.method)
			if got := status.Code(err); got != tt.wantCode {
				t.Fatalf("authorizeMethod = %v, want code %v", err, tt.wantCode)
			}
			if tt.wantMsg != "" && !strings.Contains(status.Convert(err).Message(), tt.wantMsg) {
				t.Errorf("message %q does not contain %q", status.Convert(err).Message(), tt.wantMsg)
			}
		})
	}
}

// rawCodec sends and receives a message's bytes as they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// rawCall calls method on the controller at addr with body as the
// request's bytes, presenting cfg's certificate.
func rawCall(t *testing.T, addr string, cfg *tlsauth.Config, method string, body []byte) error {
	t.Helper()
	creds := credentials.NewTLS(cfg.Client(tlsauth.RoleController))
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var resp []byte
	return cc.Invoke(ctx, method, &body, &resp)
}

// TestAuthorizeTap_RefusesBeforeDecoding sends requests that cannot be
// decoded (a truncated field): a caller whose certificate may never call
// the method gets its PermissionDenied, which proves the request was not
// decoded; one who may call it gets the decoding error.
func TestAuthorizeTap_RefusesBeforeDecoding(t *testing.T) {
	certs, _ := testCerts(t)
	addr := serveTLS(t, certs["controller-1"])
	garbage := []byte{1<<3 | 2, 100, 'x'} // field 1, 100 bytes long, 1 there

	tests := []struct {
		caller   string
		method   string
		wantCode codes.Code
		wantMsg  string
	}{
		{caller: "broker-1", method: keelpb.ControllerService_AppendNoOp_FullMethodName, wantCode: codes.PermissionDenied, wantMsg: "AppendNoOp needs an admin certificate; the caller's is broker-1"},
		{caller: "controller-1", method: keelpb.ControllerService_AddVoter_FullMethodName, wantCode: codes.PermissionDenied, wantMsg: "AddVoter needs an admin certificate; the caller's is controller-1"},
		{caller: "controller-1", method: keelpb.ControllerService_BrokerHeartbeat_FullMethodName, wantCode: codes.PermissionDenied, wantMsg: "BrokerHeartbeat needs the certificate of the broker in broker_id"},
		{caller: "admin", method: "/keel.v1.ControllerService/NoSuchMethod", wantCode: codes.PermissionDenied, wantMsg: "has no authorization rule"},
		// Allowed by the certificate alone: decoded, and the decoding fails.
		{caller: "admin", method: keelpb.ControllerService_CreateTopic_FullMethodName, wantCode: codes.Internal, wantMsg: "unmarshal"},
		{caller: "broker-1", method: keelpb.ControllerService_BrokerHeartbeat_FullMethodName, wantCode: codes.Internal, wantMsg: "unmarshal"},
	}
	for _, tt := range tests {
		t.Run(tt.caller+" "+shortMethod(tt.method), func(t *testing.T) {
			err := rawCall(t, addr, certs[tt.caller], tt.method, garbage)
			if st := status.Convert(err); st.Code() != tt.wantCode || !strings.Contains(st.Message(), tt.wantMsg) {
				t.Fatalf("call = %v; want %v containing %q", err, tt.wantCode, tt.wantMsg)
			}
		})
	}
}
