package replication

import "github.com/prometheus/client_golang/prometheus"

// The fetch sessions' metric names (docs/metrics.md).
const (
	MetricFetchSessions          = "keel_broker_fetch_sessions"
	MetricFetchSessionAnswers    = "keel_broker_fetch_session_answers_total"
	MetricFetchSessionPartitions = "keel_broker_fetch_session_answer_partitions"
	MetricFetchSessionBytes      = "keel_broker_fetch_session_answer_bytes_total"
)

// sessionMetrics are the fetch sessions' instruments: sessions open on
// either side (one per follower and leader broker pair), and what the
// leader's answers carry.
type sessionMetrics struct {
	vec        *prometheus.GaugeVec
	open       prometheus.Gauge // served, as leader
	following  prometheus.Gauge // fetching, as follower
	answers    prometheus.Counter
	partitions prometheus.Histogram
	bytes      prometheus.Counter
}

func newSessionMetrics() sessionMetrics {
	vec := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricFetchSessions,
		Help: "Fetch sessions open: side=leader those this broker serves (one per follower broker), side=follower those it fetches on (one per leader broker).",
	}, []string{"side"})
	return sessionMetrics{
		vec:       vec,
		open:      vec.WithLabelValues("leader"),
		following: vec.WithLabelValues("follower"),
		answers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricFetchSessionAnswers,
			Help: "Fetch session answers this broker sent as leader.",
		}),
		partitions: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    MetricFetchSessionPartitions,
			Help:    "Partitions per fetch session answer this broker sent as leader (only those with news).",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8),
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricFetchSessionBytes,
			Help: "Bytes of record batches in the fetch session answers this broker sent as leader.",
		}),
	}
}

func (m sessionMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.vec, m.answers, m.partitions, m.bytes}
}
