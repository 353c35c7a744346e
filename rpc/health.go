package rpc

import (
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
)

// healthInterval is how often a Health re-decides its service's status:
// readiness depends on raft's commit index and on heartbeats, which signal
// nothing when they move, so it is polled. Each check is a few atomic loads.
const healthInterval = 100 * time.Millisecond

// Health is the standard gRPC health service (grpc.health.v1) of one
// server, kept up to date from a readiness check.
type Health struct {
	srv     *health.Server
	service string
	ready   func() error

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// ServeHealth registers grpc.health.v1 and server reflection (v1 and
// v1alpha, as grpcurl uses) on g; call it before g.Serve. The server's
// overall status ("") is SERVING from now on, and service's is SERVING
// while ready returns nil and NOT_SERVING otherwise, re-checked every
// 100 ms by a goroutine that Shutdown stops.
func ServeHealth(g *grpc.Server, service string, ready func() error) *Health {
	h := &Health{
		srv:     health.NewServer(),
		service: service,
		ready:   ready,
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	h.srv.SetServingStatus(service, servingStatus(ready()))
	healthpb.RegisterHealthServer(g, h.srv)
	reflection.Register(g)
	go h.watch()
	return h
}

func servingStatus(err error) healthpb.HealthCheckResponse_ServingStatus {
	if err != nil {
		return healthpb.HealthCheckResponse_NOT_SERVING
	}
	return healthpb.HealthCheckResponse_SERVING
}

func (h *Health) watch() {
	defer close(h.done)
	tick := time.NewTicker(healthInterval)
	defer tick.Stop()
	last := healthpb.HealthCheckResponse_SERVICE_UNKNOWN
	for {
		// Set only on a change: each set wakes every Watch stream.
		if s := servingStatus(h.ready()); s != last {
			h.srv.SetServingStatus(h.service, s)
			last = s
		}
		select {
		case <-h.stop:
			return
		case <-tick.C:
		}
	}
}

// Shutdown makes every status NOT_SERVING for good, so that load balancers
// drain the server before it stops, and stops the watcher. Call it first
// when stopping the server. It may be called more than once.
func (h *Health) Shutdown() {
	h.once.Do(func() {
		close(h.stop)
		<-h.done
		h.srv.Shutdown()
	})
}

// grpcServiceRules authorize, with TLS, the gRPC services Keel's servers
// run beside their own: any keel identity may check health and list the
// services, and these are all a probe certificate (probe, probe-<name>: a
// load balancer's, a monitoring system's) may call. Reflection describes
// the services' schema, which is public (the .proto files); it reads no
// metadata.
var grpcServiceRules = map[string]rule{
	healthpb.Health_Check_FullMethodName:                                   healthCheck,
	healthpb.Health_List_FullMethodName:                                    healthCheck,
	healthpb.Health_Watch_FullMethodName:                                   healthCheck,
	reflectionv1.ServerReflection_ServerReflectionInfo_FullMethodName:      healthCheck,
	reflectionv1alpha.ServerReflection_ServerReflectionInfo_FullMethodName: healthCheck,
}

// ruleFor is the rule for method: Keel's own (methodRules) or gRPC's.
func ruleFor(method string) (rule, bool) {
	if r, ok := methodRules[method]; ok {
		return r, true
	}
	r, ok := grpcServiceRules[method]
	return r, ok
}
