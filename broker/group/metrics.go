package group

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the coordinator's keel_group_* metrics. The groups by state
// are counted when scraped, so that no transition can be missed.
type metrics struct {
	c          *Coordinator
	groups     *prometheus.Desc
	rebalances prometheus.Counter
	commits    prometheus.Counter
}

func newMetrics(c *Coordinator, reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		c: c,
		groups: prometheus.NewDesc("keel_group_groups",
			"Groups this broker coordinates, by state.", []string{"state"}, nil),
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "keel_group_rebalances_total",
			Help: "Rebalances started by the groups this broker coordinates.",
		}),
		commits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "keel_group_offset_commits_total",
			Help: "Partition offsets committed to __consumer_offsets by this broker's coordinator.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, col := range []prometheus.Collector{m, m.rebalances, m.commits} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("group: registering metrics: %w", err)
		}
	}
	return m, nil
}

// Describe implements prometheus.Collector for the groups by state.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) { ch <- m.groups }

// Collect implements prometheus.Collector for the groups by state.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	var counts [len(stateNames)]int
	m.c.mu.Lock()
	for _, part := range m.c.parts {
		for _, g := range part.groups {
			g.mu.Lock()
			counts[g.state]++
			g.mu.Unlock()
		}
	}
	m.c.mu.Unlock()
	for s, n := range counts {
		if state(s) == stateDead {
			continue // a Dead group is one being deleted or dropped
		}
		ch <- prometheus.MustNewConstMetric(m.groups, prometheus.GaugeValue, float64(n), state(s).String())
	}
}
