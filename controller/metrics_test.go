package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

func TestMetrics_CountImage(t *testing.T) {
	fence := func(id int32, epoch int64) []*keelpb.Record { return []*keelpb.Record{fenceRec(id, epoch)} }
	tests := []struct {
		name string
		img  func(t *testing.T) *fsm.Image
		want imageCounts
	}{
		{
			name: "empty cluster",
			img:  func(*testing.T) *fsm.Image { return fsm.Empty() },
			want: imageCounts{},
		},
		{
			// Brokers 1-3 active, 4 fenced; both partitions led by their
			// first replica.
			name: "balanced",
			img:  func(t *testing.T) *fsm.Image { return fixture(t, false) },
			want: imageCounts{topics: 1, partitions: 2, fencedBrokers: 1, activeBrokers: 3},
		},
		{
			name: "a leader that is not the first replica",
			img: func(t *testing.T) *fsm.Image {
				return fixture(t, false, []*keelpb.Record{change(0, leaderPtr(2), nil)})
			},
			want: imageCounts{imbalanced: 1, topics: 1, partitions: 2, fencedBrokers: 1, activeBrokers: 3},
		},
		{
			// Offline, not imbalanced: imbalance counts partitions with a leader.
			name: "a partition without a leader",
			img: func(t *testing.T) *fsm.Image {
				return fixture(t, false, []*keelpb.Record{change(1, leaderPtr(fsm.NoLeader), nil)})
			},
			want: imageCounts{offline: 1, topics: 1, partitions: 2, fencedBrokers: 1, activeBrokers: 3},
		},
		{
			name: "one of each, and a broker fenced",
			img: func(t *testing.T) *fsm.Image {
				return fixture(t, false,
					[]*keelpb.Record{change(0, leaderPtr(3), nil), change(1, leaderPtr(fsm.NoLeader), nil)},
					fence(2, 3))
			},
			want: imageCounts{offline: 1, imbalanced: 1, topics: 1, partitions: 2, fencedBrokers: 2, activeBrokers: 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := countImage(tt.img(t)); got != tt.want {
				t.Errorf("countImage = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func withMetrics() clusterOption { return func(c *testCluster) { c.metrics = true } }

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

// TestMetrics_QuorumReportsItsState scrapes the registries of an in-memory
// quorum: one active controller, the raft indexes, the hot-path histograms
// on the leader, a broker's stream lag, leader changes after a failover.
func TestMetrics_QuorumReportsItsState(t *testing.T) {
	c := newTestCluster(t, 3, withMetrics())
	leader := c.WaitForActive(5 * time.Second)
	epoch := registerActive(t, leader, 1, incA)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pushes, done := collectStream(ctx, leader, &keelpb.StreamMetadataRequest{BrokerId: 1, BrokerEpoch: epoch})
	index, err := leader.ctrl.Propose(context.Background(), noOp())
	if err != nil {
		t.Fatal(err)
	}
	c.WaitForApplied(index, 5*time.Second)

	active := 0.0
	for _, nd := range c.live() {
		m := scrape(t, nd.metrics)
		active += m[MetricActiveControllerCount]
		for name, want := range map[string]float64{
			MetricControllerEpoch:        1,
			MetricActiveBrokerCount:      1,
			MetricFencedBrokerCount:      0,
			MetricGlobalTopicCount:       0,
			MetricOfflinePartitionsCount: 0,
		} {
			if got, ok := m[name]; !ok || got != want {
				t.Errorf("node %d: %s = %v (present %v), want %v", nd.id, name, got, ok, want)
			}
		}
		if m[MetricRaftAppliedIndex] < float64(index) || m[MetricRaftCommitIndex] < float64(index) || m[MetricRaftLastIndex] < float64(index) {
			t.Errorf("node %d: applied %v, commit %v, last %v; want each at least %d", nd.id,
				m[MetricRaftAppliedIndex], m[MetricRaftCommitIndex], m[MetricRaftLastIndex], index)
		}
		if m[MetricRaftTerm] < 1 {
			t.Errorf("node %d: term %v", nd.id, m[MetricRaftTerm])
		}
	}
	if active != 1 {
		t.Errorf("%s summed over the quorum = %v, want 1", MetricActiveControllerCount, active)
	}

	m := scrape(t, leader.metrics)
	if m[MetricEventQueueTime] < 2 || m[MetricRaftCommitTime] < 3 {
		// Events: the registration, the unfencing heartbeat, the no-op;
		// commits: those and the epoch record.
		t.Errorf("leader: %v queue time samples, %v commit time samples; want at least 2 and 3",
			m[MetricEventQueueTime], m[MetricRaftCommitTime])
	}
	lag := MetricBrokerStreamLag + `{broker="1"}`
	waitFor(t, 5*time.Second, "broker 1's stream to catch up", func() bool {
		for len(pushes) > 0 {
			<-pushes
		}
		v, ok := scrape(t, leader.metrics)[lag]
		return ok && v == 0
	})

	// Every node learns of a leader; after a failover, the survivors of a
	// second.
	for _, nd := range c.live() {
		waitFor(t, 5*time.Second, fmt.Sprintf("node %d to count a leader", nd.id), func() bool {
			return scrape(t, nd.metrics)[MetricRaftLeaderChanges] >= 1
		})
	}
	before := map[int32]float64{}
	for _, nd := range c.live() {
		before[nd.id] = scrape(t, nd.metrics)[MetricRaftLeaderChanges]
	}
	c.Kill(leader.id)
	if err := <-done; err == nil {
		t.Error("the stream outlived its controller")
	}
	next := c.WaitForActive(5 * time.Second)
	for _, nd := range c.live() {
		waitFor(t, 5*time.Second, fmt.Sprintf("node %d to count the new leader", nd.id), func() bool {
			return scrape(t, nd.metrics)[MetricRaftLeaderChanges] > before[nd.id]
		})
	}
	if _, ok := scrape(t, next.metrics)[lag]; ok {
		t.Errorf("the new leader reports a stream lag for broker 1, which streams from nobody")
	}
	if v := scrape(t, next.metrics)[MetricActiveControllerCount]; v != 1 {
		t.Errorf("new leader: %s = %v", MetricActiveControllerCount, v)
	}
	// The killed node's Stop unregistered everything.
	if fams, _ := c.nodes[leader.id].metrics.Gather(); len(fams) != 0 {
		t.Errorf("a stopped controller left %d metric families registered", len(fams))
	}
}
