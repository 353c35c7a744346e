package controller_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

// scrape gathers reg into name (with labels, sorted: name{k="v"}) → value;
// a histogram gives its sample count.
func scrape(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			out[seriesName(f.GetName(), m)] = value(m)
		}
	}
	return out
}

func seriesName(name string, m *dto.Metric) string {
	if len(m.GetLabel()) == 0 {
		return name
	}
	var labels []string
	for _, l := range m.GetLabel() {
		labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	sort.Strings(labels)
	return name + "{" + strings.Join(labels, ",") + "}"
}

func value(m *dto.Metric) float64 {
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

// TestMetrics_QuorumReportsItsState scrapes the registries of a quorum:
// one active controller, the raft indexes, the hot-path histograms
// on the leader, a broker's stream lag, leader changes after a failover.
func TestMetrics_QuorumReportsItsState(t *testing.T) {
	c := newCluster(t, 3, withMetrics())
	leader := c.WaitForActive(5 * time.Second)
	epoch := registerActive(t, leader, 1, incA)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pushes, done := collectStream(ctx, leader, &keelpb.StreamMetadataRequest{BrokerId: 1, BrokerEpoch: epoch})
	index, err := leader.Controller().Propose(context.Background(), noOp())
	if err != nil {
		t.Fatal(err)
	}
	c.WaitForApplied(index)

	active := 0.0
	for _, nd := range c.Nodes() {
		m := scrape(t, c.Metrics(nd.ID()))
		active += m[controller.MetricActiveControllerCount]
		for name, want := range map[string]float64{
			controller.MetricControllerEpoch:        1,
			controller.MetricMetadataVersion:        float64(fsm.MaxMetadataVersion),
			controller.MetricActiveBrokerCount:      1,
			controller.MetricFencedBrokerCount:      0,
			controller.MetricGlobalTopicCount:       0,
			controller.MetricOfflinePartitionsCount: 0,
		} {
			if got, ok := m[name]; !ok || got != want {
				t.Errorf("node %d: %s = %v (present %v), want %v", nd.ID(), name, got, ok, want)
			}
		}
		if m[controller.MetricRaftAppliedIndex] < float64(index) || m[controller.MetricRaftCommitIndex] < float64(index) || m[controller.MetricRaftLastIndex] < float64(index) {
			t.Errorf("node %d: applied %v, commit %v, last %v; want each at least %d", nd.ID(),
				m[controller.MetricRaftAppliedIndex], m[controller.MetricRaftCommitIndex], m[controller.MetricRaftLastIndex], index)
		}
		if m[controller.MetricRaftTerm] < 1 {
			t.Errorf("node %d: term %v", nd.ID(), m[controller.MetricRaftTerm])
		}
	}
	if active != 1 {
		t.Errorf("%s summed over the quorum = %v, want 1", controller.MetricActiveControllerCount, active)
	}

	m := scrape(t, c.Metrics(leader.ID()))
	if m[controller.MetricEventQueueTime] < 2 || m[controller.MetricRaftCommitTime] < 3 {
		// Events: the registration, the unfencing heartbeat, the no-op;
		// commits: those and the epoch record.
		t.Errorf("leader: %v queue time samples, %v commit time samples; want at least 2 and 3",
			m[controller.MetricEventQueueTime], m[controller.MetricRaftCommitTime])
	}
	lag := controller.MetricBrokerStreamLag + `{broker="1"}`
	poll.Until(t, 5*time.Second, "broker 1's stream to catch up", func() bool {
		for len(pushes) > 0 {
			<-pushes
		}
		v, ok := scrape(t, c.Metrics(leader.ID()))[lag]
		return ok && v == 0
	})

	// Every node learns of a leader; after a failover, the survivors of a
	// second.
	for _, nd := range c.Nodes() {
		poll.Until(t, 5*time.Second, fmt.Sprintf("node %d to count a leader", nd.ID()), func() bool {
			return scrape(t, c.Metrics(nd.ID()))[controller.MetricRaftLeaderChanges] >= 1
		})
	}
	before := map[int32]float64{}
	for _, nd := range c.Nodes() {
		before[nd.ID()] = scrape(t, c.Metrics(nd.ID()))[controller.MetricRaftLeaderChanges]
	}
	c.Kill(leader.ID())
	if err := <-done; err == nil {
		t.Error("the stream outlived its controller")
	}
	next := c.WaitForActive(5 * time.Second)
	for _, nd := range c.Nodes() {
		poll.Until(t, 5*time.Second, fmt.Sprintf("node %d to count the new leader", nd.ID()), func() bool {
			return scrape(t, c.Metrics(nd.ID()))[controller.MetricRaftLeaderChanges] > before[nd.ID()]
		})
	}
	if _, ok := scrape(t, c.Metrics(next.ID()))[lag]; ok {
		t.Errorf("the new leader reports a stream lag for broker 1, which streams from nobody")
	}
	if v := scrape(t, c.Metrics(next.ID()))[controller.MetricActiveControllerCount]; v != 1 {
		t.Errorf("new leader: %s = %v", controller.MetricActiveControllerCount, v)
	}
	// The killed node's Stop unregistered everything.
	if fams, _ := c.Metrics(leader.ID()).Gather(); len(fams) != 0 {
		t.Errorf("a stopped controller left %d metric families registered", len(fams))
	}
}
