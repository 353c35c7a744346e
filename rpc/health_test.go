package rpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/tlsauth"
)

// TestGRPCServiceRules_CoverHealthAndReflection: with TLS, every method of
// the health and reflection services has a rule (else the interceptor
// refuses it to everyone), the one probes may use too, and none shadows a
// keel method.
func TestGRPCServiceRules_CoverHealthAndReflection(t *testing.T) {
	seen := map[string]bool{}
	for _, pkg := range []protoreflect.FullName{"grpc.health.v1", "grpc.reflection.v1", "grpc.reflection.v1alpha"} {
		protoregistry.GlobalFiles.RangeFilesByPackage(pkg, func(fd protoreflect.FileDescriptor) bool {
			for i := range fd.Services().Len() {
				sd := fd.Services().Get(i)
				for j := range sd.Methods().Len() {
					full := fmt.Sprintf("/%s/%s", sd.FullName(), sd.Methods().Get(j).Name())
					seen[full] = true
					if r, ok := grpcServiceRules[full]; !ok || r.access != accessHealth {
						t.Errorf("%s: rule %+v (present %v), want any identity and probes", full, r, ok)
					}
				}
			}
			return true
		})
	}
	if len(seen) < 5 {
		t.Fatalf("found only %d health and reflection methods: %v", len(seen), seen)
	}
	for m := range grpcServiceRules {
		if !seen[m] {
			t.Errorf("grpcServiceRules has %s, which is no health or reflection method", m)
		}
		if _, ok := methodRules[m]; ok {
			t.Errorf("%s is in both rule tables", m)
		}
	}
}

// serveHealth serves the fake controller service, health and reflection on
// loopback (with TLS when cfg is set) and returns its address and Health.
func serveHealth(t *testing.T, cfg *tlsauth.Config, ready func() error) (string, *Health) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(ServerOptions(WithTLS(cfg))...)
	keelpb.RegisterControllerServiceServer(g, authFake{})
	h := ServeHealth(g, keelpb.ControllerService_ServiceDesc.ServiceName, ready)
	go g.Serve(lis)
	t.Cleanup(func() {
		h.Shutdown()
		g.Stop()
	})
	return lis.Addr().String(), h
}

func dialTest(t *testing.T, addr string, cfg *tlsauth.Config) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, clientDialOptions(buildOptions([]Option{WithTLS(cfg)}), tlsauth.RoleController)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// listServices asks a server's reflection service for its services.
func listServices(ctx context.Context, cc *grpc.ClientConn) ([]string, error) {
	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	_ = stream.CloseSend()
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names, nil
}

func TestServeHealth_FollowsReadinessAndDrainsOnShutdown(t *testing.T) {
	var ready atomic.Bool
	addr, h := serveHealth(t, nil, func() error {
		if ready.Load() {
			return nil
		}
		return errors.New("not caught up")
	})
	cl := healthpb.NewHealthClient(dialTest(t, addr, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	service := keelpb.ControllerService_ServiceDesc.ServiceName
	check := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := cl.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("Check(%q): %v", service, err)
		}
		return resp.GetStatus()
	}
	waitStatus := func(service string, want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		poll.Until(t, 5*time.Second, fmt.Sprintf("%q to become %v", service, want), func() bool { return check(service) == want })
	}
	if got := check(""); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("overall status %v, want SERVING once started", got)
	}
	if got := check(service); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("%s while not ready: %v, want NOT_SERVING", service, got)
	}
	ready.Store(true)
	waitStatus(service, healthpb.HealthCheckResponse_SERVING)
	ready.Store(false)
	waitStatus(service, healthpb.HealthCheckResponse_NOT_SERVING)
	ready.Store(true)
	waitStatus(service, healthpb.HealthCheckResponse_SERVING)

	h.Shutdown()
	h.Shutdown() // idempotent
	if got := check(""); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("overall status after Shutdown: %v, want NOT_SERVING", got)
	}
	if got := check(service); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("%s after Shutdown: %v, want NOT_SERVING though ready", service, got)
	}
}

// TestServeHealth_OverTLS: any keel identity, a probe's included, may check
// health and use reflection; the interceptor refuses neither. A probe may
// do nothing else.
func TestServeHealth_OverTLS(t *testing.T) {
	ca, err := tlsauth.NewCA("keel health test CA")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Config("controller-1")
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := serveHealth(t, server, func() error { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, cn := range []string{"controller-2", "broker-1", "admin", "probe", "probe-lb"} {
		cfg, err := ca.Config(cn)
		if err != nil {
			t.Fatal(err)
		}
		cc := dialTest(t, addr, cfg)
		resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: keelpb.ControllerService_ServiceDesc.ServiceName})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("%s: Check = %v, %v; want SERVING", cn, resp, err)
		}
		names, err := listServices(ctx, cc)
		if err != nil {
			t.Errorf("%s: reflection: %v", cn, err)
			continue
		}
		for _, want := range []string{keelpb.ControllerService_ServiceDesc.ServiceName, healthpb.Health_ServiceDesc.ServiceName} {
			if !slices.Contains(names, want) {
				t.Errorf("%s: reflection lists %v, without %s", cn, names, want)
			}
		}
		// Watch streams the status; the first message is the current one.
		wctx, wcancel := context.WithCancel(ctx)
		w, err := healthpb.NewHealthClient(cc).Watch(wctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = w.Recv()
		}
		wcancel()
		if err != nil {
			t.Errorf("%s: Watch: %v", cn, err)
		}
		_, err = keelpb.NewControllerServiceClient(cc).DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{})
		if probe := strings.HasPrefix(cn, "probe"); probe != (status.Code(err) == codes.PermissionDenied) {
			t.Errorf("%s: DescribeQuorum = %v; want PermissionDenied for a probe only", cn, err)
		}
	}
}
