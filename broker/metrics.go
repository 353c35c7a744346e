package broker

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The broker agent's metric names (README: Metrics and health). Gauges are
// read from the agent's state when scraped; the counter and the histogram
// are updated where the events happen.
const (
	MetricMetadataOffset    = "keel_broker_metadata_offset"
	MetricBrokerEpoch       = "keel_broker_epoch"
	MetricBrokerState       = "keel_broker_state"
	MetricControllerEpoch   = "keel_broker_controller_epoch"
	MetricReplicas          = "keel_broker_replicas"
	MetricStreamReconnects  = "keel_broker_stream_reconnects_total"
	MetricHeartbeatDuration = "keel_broker_heartbeat_duration_seconds"
)

// brokerStates are the values of keel_broker_state's state label: every
// one is reported, 1 for the current state and 0 for the others.
var brokerStates = []string{StateRegistering, StateFenced, StateActive, StateShuttingDown}

// agentMetrics are the instruments the agent updates as things happen.
type agentMetrics struct {
	reconnects prometheus.Counter
	heartbeat  prometheus.Histogram
}

func newAgentMetrics() *agentMetrics {
	return &agentMetrics{
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricStreamReconnects,
			Help: "Times a metadata stream that a controller had taken (it sends its first push at once) ended and the broker opened a new one (after a controller failover, a refused push, a network failure); the attempts it took are not counted.",
		}),
		heartbeat: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    MetricHeartbeatDuration,
			Help:    "Round trip of the heartbeats the active controller answered, retries across controllers included.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
	}
}

var (
	descMetadataOffset = prometheus.NewDesc(MetricMetadataOffset,
		"The offset (controller raft index) of the last metadata batch this broker has applied.", nil, nil)
	descBrokerEpoch = prometheus.NewDesc(MetricBrokerEpoch,
		"This broker's epoch: the offset of its current registration; 0 before the first.", nil, nil)
	descBrokerState = prometheus.NewDesc(MetricBrokerState,
		"1 for the broker's current state, 0 for the others.", []string{"state"}, nil)
	descControllerEpoch = prometheus.NewDesc(MetricControllerEpoch,
		"The highest controller epoch this broker has seen on its metadata stream.", nil, nil)
	descReplicas = prometheus.NewDesc(MetricReplicas,
		"This broker's replicas by role.", []string{"role"}, nil)
)

// agentCollector computes the broker's gauges when scraped.
type agentCollector struct{ a *Agent }

func (c agentCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMetadataOffset, descBrokerEpoch, descBrokerState, descControllerEpoch, descReplicas} {
		ch <- d
	}
}

func (c agentCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.a.Status()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descMetadataOffset, float64(st.MetadataOffset))
	gauge(descBrokerEpoch, float64(st.BrokerEpoch))
	for _, s := range brokerStates {
		v := 0.0
		if s == st.State {
			v = 1
		}
		gauge(descBrokerState, v, s)
	}
	gauge(descControllerEpoch, float64(st.ControllerEpoch))
	roles := map[string]int{RoleLeader: 0, RoleFollower: 0}
	for _, r := range c.a.Replicas() {
		roles[r.Role]++
	}
	for role, n := range roles {
		gauge(descReplicas, float64(n), role)
	}
}

// registerMetrics registers the agent's metrics with cfg.Metrics, if set.
func (a *Agent) registerMetrics() error {
	if a.cfg.Metrics == nil {
		return nil
	}
	cols := append([]prometheus.Collector{agentCollector{a}, a.metrics.reconnects, a.metrics.heartbeat}, a.unauth.Collectors()...)
	cols = append(cols, a.unauth.ListenerCollectors("grpc")...)
	for _, col := range cols {
		if err := a.cfg.Metrics.Register(col); err != nil {
			a.unregisterMetrics()
			return fmt.Errorf("register the broker's metrics: %v", err)
		}
		a.registered = append(a.registered, col)
	}
	return nil
}

func (a *Agent) unregisterMetrics() {
	for _, col := range a.registered {
		a.cfg.Metrics.Unregister(col)
	}
	a.registered = nil
}

// brokerReadiness is what a broker's readiness is decided from.
type brokerReadiness struct {
	stopping bool
	state    string
	epoch    int64
	// caughtUp: the last heartbeat answer said the broker had applied the
	// metadata up to its registration (KRaft's unfencing rule).
	caughtUp bool
	// sinceHeartbeat is how long ago the active controller last answered a
	// heartbeat; heartbeatStale is how long is too long.
	sinceHeartbeat, heartbeatStale time.Duration
	// streamEpoch is the highest controller epoch seen on the metadata
	// stream; heartbeatEpoch the active controller's, from the heartbeats.
	streamEpoch, heartbeatEpoch int64
}

var errBrokerStopping = errors.New("the broker is stopping")

// check decides readiness: nil when the broker is registered, active
// (unfenced) and caught up with the controller, else why not. Caught up
// means it has applied the metadata up to its registration, its heartbeats
// are answered, and its stream follows the active controller (whose epoch
// the heartbeats report): the stream then carries every committed batch as
// it commits.
func (r brokerReadiness) check() error {
	switch {
	case r.stopping:
		return errBrokerStopping
	case r.state == StateShuttingDown:
		return errors.New("the broker is in controlled shutdown")
	case r.epoch == 0 || r.state == StateRegistering:
		return errors.New("the broker is not registered")
	case r.state == StateFenced:
		return errors.New("the broker is fenced")
	case !r.caughtUp:
		return errors.New("the broker has not applied the metadata up to its registration")
	case r.sinceHeartbeat > r.heartbeatStale:
		return fmt.Errorf("no heartbeat answered for %v", r.sinceHeartbeat.Round(time.Millisecond))
	case r.streamEpoch < r.heartbeatEpoch:
		return fmt.Errorf("the metadata stream follows controller epoch %d; the active controller's is %d", r.streamEpoch, r.heartbeatEpoch)
	}
	return nil
}

// Ready reports whether the broker is ready (nil) or why not: registered,
// active (unfenced) and caught up with the active controller (see
// brokerReadiness.check). It backs /readyz and the keel.v1.BrokerService
// health status.
func (a *Agent) Ready() error {
	a.mu.Lock()
	epoch, state := a.epoch, a.state
	a.mu.Unlock()
	since := time.Duration(1<<63 - 1)
	if at := a.heartbeatAt.Load(); at != 0 {
		since = time.Since(time.Unix(0, at))
	}
	return brokerReadiness{
		stopping:       a.stopping.Load(),
		state:          state,
		epoch:          epoch,
		caughtUp:       a.caughtUp.Load(),
		sinceHeartbeat: since,
		heartbeatStale: a.heartbeatTimeout() + a.cfg.HeartbeatInterval,
		streamEpoch:    a.replay.epoch.Load(),
		heartbeatEpoch: a.heartbeatEpoch.Load(),
	}.check()
}
