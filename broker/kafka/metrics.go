package kafka

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/broker/batchcheck"
)

// The Kafka listener's metric names (docs/metrics.md), after Kafka's
// kafka.network:type=RequestMetrics.
const (
	MetricRequestDuration   = "keel_kafka_request_duration_seconds"
	MetricProduceCommitWait = "keel_kafka_produce_commit_wait_seconds"
	MetricFetchWaits        = "keel_kafka_fetch_waits"
	MetricProduceRefused    = "keel_kafka_produce_refused_batches_total"
	MetricRequestBytesInUse = "keel_kafka_request_bytes_in_use"
	MetricRequestBytesWaits = "keel_kafka_request_bytes_waits_total"
	MetricSASLAuth          = "keel_kafka_sasl_authentications_total"
	MetricUnservedRequests  = "keel_kafka_unserved_requests_total"
)

// requestBuckets run from half a millisecond to 10 s, finer where a
// produce's replication round trip lies.
var requestBuckets = []float64{.0005, .001, .002, .005, .01, .015, .02, .03, .05, .1, .25, .5, 1, 2.5, 5, 10}

// serverMetrics are the listener's instruments; nil observes nothing.
type serverMetrics struct {
	duration   *prometheus.HistogramVec
	commitWait prometheus.Histogram
	fetchWaits prometheus.Gauge
	refusals   *prometheus.CounterVec
	bytesInUse *prometheus.GaugeVec
	bytesWaits prometheus.Counter
	saslAuth   *prometheus.CounterVec
	unserved   *prometheus.CounterVec
	// byKey holds each served API's histogram, so that a request does not
	// look its label up.
	byKey map[int16]prometheus.Observer
}

func newServerMetrics(reg prometheus.Registerer) (*serverMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &serverMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricRequestDuration,
			Help:    "Time from a request's arrival (its whole frame read) to its response written, by request type (Kafka's TotalTimeMs); an acks=all produce includes its wait for the followers.",
			Buckets: requestBuckets,
		}, []string{"request"}),
		commitWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    MetricProduceCommitWait,
			Help:    "Time an acks=all produce waited, after appending, for its batches to commit: the followers' fetch round trip (Kafka's RemoteTimeMs of Produce).",
			Buckets: requestBuckets,
		}),
		fetchWaits: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: MetricFetchWaits,
			Help: "Fetch requests waiting for data now (Kafka's DelayedOperationPurgatory PurgatorySize for Fetch): each holds one goroutine, and ends by --kafka-fetch-max-wait or with its connection.",
		}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricProduceRefused,
			Help: "Produced batches refused before they were appended, by reason (batchcheck's: framing, magic, crc, header, control, timestamp, codec, compression, records, too_large): Kafka's InvalidMessageCrcRecordsPerSec and its LogValidator's refusals.",
		}, []string{"reason"}),
		bytesInUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricRequestBytesInUse,
			Help: "Bytes of the Kafka requests read and not answered yet, out of --kafka-queued-max-request-bytes, by budget: produce requests, and the others (counted at their cost decoded).",
		}, []string{"requests"}),
		bytesWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricRequestBytesWaits,
			Help: "Kafka requests whose connection waited, before reading them, for their bytes to fit in its budget or the broker's (back-pressure).",
		}),
		saslAuth: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricSASLAuth,
			Help: "SASL authentications on the Kafka listener, by mechanism and result (ok, failed: a wrong password, an unknown user or a malformed message; unsupported_mechanism).",
		}, []string{"mechanism", "result"}),
		unserved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricUnservedRequests,
			Help: "Kafka requests of an API, or a version of one, that Keel does not serve, by API (Unknown: a key kmsg does not know); each client id's first of an API is logged.",
		}, []string{"api"}),
		byKey: map[int16]prometheus.Observer{},
	}
	for _, r := range batchcheck.Reasons {
		m.refusals.WithLabelValues(string(r))
	}
	for key := range versions {
		m.byKey[key] = m.duration.WithLabelValues(kmsg.NameForKey(key))
	}
	for _, c := range []prometheus.Collector{m.duration, m.commitWait, m.fetchWaits, m.refusals, m.bytesInUse, m.bytesWaits, m.saslAuth, m.unserved} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// request observes one request answered, from its arrival.
func (m *serverMetrics) request(key int16, since time.Time) {
	if m == nil {
		return
	}
	if o, ok := m.byKey[key]; ok {
		o.Observe(time.Since(since).Seconds())
	}
}

// sasl counts one SASL authentication's end. An unsupported mechanism is
// counted without its name: a client chooses it.
func (m *serverMetrics) sasl(mechanism, result string) {
	if m == nil {
		return
	}
	if result == "unsupported_mechanism" {
		mechanism = ""
	}
	m.saslAuth.WithLabelValues(mechanism, result).Inc()
}

// unservedRequest counts one request of an API or version not served.
func (m *serverMetrics) unservedRequest(api string) {
	if m == nil {
		return
	}
	m.unserved.WithLabelValues(api).Inc()
}

// committed observes an acks=all produce's wait for its commits.
func (m *serverMetrics) committed(since time.Time) {
	if m == nil {
		return
	}
	m.commitWait.Observe(time.Since(since).Seconds())
}

// fetchWaiting counts a fetch starting (1) or ending (-1) a wait.
func (m *serverMetrics) fetchWaiting(delta float64) {
	if m == nil {
		return
	}
	m.fetchWaits.Add(delta)
}

// refused counts a produced batch refused for reason.
func (m *serverMetrics) refused(reason batchcheck.Reason) {
	if m == nil {
		return
	}
	m.refusals.WithLabelValues(string(reason)).Inc()
}

// budgetInUse is what sets the bytes in use of the broker's request
// budget for requests ("produce" or "other").
func (m *serverMetrics) budgetInUse(requests string) func(used int64) {
	if m == nil {
		return nil
	}
	g := m.bytesInUse.WithLabelValues(requests)
	return func(used int64) { g.Set(float64(used)) }
}

// budgetWaited counts a request that waited for its bytes.
func (m *serverMetrics) budgetWaited() {
	if m == nil {
		return
	}
	m.bytesWaits.Inc()
}
