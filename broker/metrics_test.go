package broker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

func TestBrokerReadiness_Check(t *testing.T) {
	ready := brokerReadiness{state: StateActive, epoch: 7, caughtUp: true,
		sinceHeartbeat: 100 * time.Millisecond, heartbeatStale: 5 * time.Second, streamEpoch: 3, heartbeatEpoch: 3}
	tests := []struct {
		name    string
		mutate  func(*brokerReadiness)
		wantErr string // "" for ready
	}{
		{name: "active and caught up", mutate: func(*brokerReadiness) {}},
		{name: "stream ahead of the heartbeats' epoch", mutate: func(r *brokerReadiness) { r.streamEpoch = 4 }},
		{name: "stopping", mutate: func(r *brokerReadiness) { r.stopping = true }, wantErr: "stopping"},
		{name: "controlled shutdown", mutate: func(r *brokerReadiness) { r.state = StateShuttingDown }, wantErr: "controlled shutdown"},
		{name: "registering", mutate: func(r *brokerReadiness) { r.state, r.epoch = StateRegistering, 0 }, wantErr: "not registered"},
		{name: "fenced", mutate: func(r *brokerReadiness) { r.state = StateFenced }, wantErr: "fenced"},
		{name: "behind its registration", mutate: func(r *brokerReadiness) { r.caughtUp = false }, wantErr: "up to its registration"},
		{name: "heartbeats unanswered", mutate: func(r *brokerReadiness) { r.sinceHeartbeat = 6 * time.Second }, wantErr: "no heartbeat answered for 6s"},
		{
			name:    "stream on a deposed controller",
			mutate:  func(r *brokerReadiness) { r.heartbeatEpoch = 4 },
			wantErr: "follows controller epoch 3; the active controller's is 4",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ready
			tt.mutate(&r)
			err := r.check()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("check() = %v, want ready", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("check() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// gatherBroker reads reg as name{label values} → value (a histogram gives
// its sample count).
func gatherBroker(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			for _, l := range m.GetLabel() {
				name += "{" + l.GetValue() + "}"
			}
			out[name] = metricValue(m)
		}
	}
	return out
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

func TestAgent_MetricsAndHealth(t *testing.T) {
	c := newFakeCluster(t, 2)
	reg := prometheus.NewRegistry()
	a := startAgent(t, c, func(cfg *Config) { cfg.Metrics = reg })

	// Before the broker is active the health service says NOT_SERVING.
	cc, err := grpc.NewClient(a.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	health := healthpb.NewHealthClient(cc)
	serving := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("health check %q: %v", service, err)
		}
		return resp.GetStatus()
	}
	if got := serving(""); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("overall health %v, want SERVING once started", got)
	}

	poll.Until(t, waitTimeout, "the broker to be active", inSync(a, c))
	tid := fsm.TopicID{0x9}
	c.append(topicRec("t", tid), partitionRec(tid, 0, []int32{1}, []int32{1}, 1), partitionRec(tid, 1, []int32{2, 1}, []int32{2, 1}, 2))
	poll.Until(t, waitTimeout, "the broker to be ready", func() bool { return a.Ready() == nil && inSync(a, c)() })
	service := keelpb.BrokerService_ServiceDesc.ServiceName
	poll.Until(t, waitTimeout, "health SERVING", func() bool { return serving(service) == healthpb.HealthCheckResponse_SERVING })

	st := a.Status()
	m := gatherBroker(t, reg)
	for name, want := range map[string]float64{
		MetricMetadataOffset:                  float64(st.MetadataOffset),
		MetricBrokerEpoch:                     float64(st.BrokerEpoch),
		MetricControllerEpoch:                 1,
		MetricBrokerState + "{active}":        1,
		MetricBrokerState + "{fenced}":        0,
		MetricBrokerState + "{registering}":   0,
		MetricBrokerState + "{shutting_down}": 0,
		MetricReplicas + "{leader}":           1,
		MetricReplicas + "{follower}":         1,
		MetricStreamReconnects:                0,
	} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	if m[MetricHeartbeatDuration] < 1 {
		t.Errorf("%s has %v samples, want some", MetricHeartbeatDuration, m[MetricHeartbeatDuration])
	}

	// A failover ends the stream: the broker reconnects to the new leader,
	// which refuses its first three attempts (not ready yet).
	c.mu.Lock()
	refuseFrom := c.streamAttempts + 1
	c.streamErrFn = func(n int) error {
		if n < refuseFrom+3 {
			return status.Error(codes.Unavailable, "not ready yet")
		}
		return nil
	}
	c.mu.Unlock()
	c.failover(1)
	poll.Until(t, waitTimeout, "the broker to follow the new controller", func() bool {
		return a.Status().ControllerEpoch == 2 && a.Ready() == nil
	})
	// One stream ended, one reconnect, however many attempts it took.
	c.mu.Lock()
	attempts := c.streamAttempts - refuseFrom + 1
	c.mu.Unlock()
	if m := gatherBroker(t, reg); m[MetricStreamReconnects] != 1 || m[MetricControllerEpoch] != 2 || attempts < 4 {
		t.Errorf("after a failover: %v reconnects in %d attempts, controller epoch %v; want 1 in at least 4, and 2",
			m[MetricStreamReconnects], attempts, m[MetricControllerEpoch])
	}

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Ready(); !errors.Is(err, errBrokerStopping) {
		t.Errorf("Ready after Close = %v, want %v", err, errBrokerStopping)
	}
	if fams, _ := reg.Gather(); len(fams) != 0 {
		t.Errorf("Close left %d metric families registered", len(fams))
	}
}

func TestStart_RefusesARegistryThatHasItsMetrics(t *testing.T) {
	c := newFakeCluster(t, 1)
	reg := prometheus.NewRegistry()
	startAgent(t, c, func(cfg *Config) { cfg.Metrics = reg })
	_, err := Start(Config{BrokerID: 2, Listen: "127.0.0.1:0", DataDir: t.TempDir(), Controllers: c.addrs(),
		Logger: discardLogger(), Metrics: reg})
	if err == nil || !strings.Contains(err.Error(), "register the broker's metrics") {
		t.Fatalf("Start on a registry that has the metrics: %v, want a registration error", err)
	}
}
