package kafka

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/fsm"
)

// Client quota enforcement, as Kafka's ClientQuotaManager (produce and
// fetch bytes) and ClientRequestQuotaManager (request time) do it: each
// client's usage is measured over quotaSamples windows of quotaWindow
// (quota.window.num and quota.window.size.seconds), and a request that
// takes it over its quota is answered at once with throttle_time_ms, the
// time the rate needs to fall back to the quota; the connection then reads
// nothing more for that long (KIP-219: the broker mutes the channel, and
// clients from Kafka 2.0 wait on their side too). The quota is the one the
// client's (user, client id) falls under in this broker's image
// (fsm.Image.QuotaFor), so a change applies with the image; with no quotas
// set a request costs one length check.

const (
	// quotaSamples and quotaWindow are Kafka's defaults of
	// quota.window.num and quota.window.size.seconds.
	quotaSamples = 11
	quotaWindow  = time.Second
	// maxRequestThrottle bounds a request_percentage throttle to one
	// window, as ClientRequestQuotaManager does.
	maxRequestThrottle = quotaWindow
	// fetchKey is Fetch's API key.
	fetchKey = 1
	// sensorSweep is how often idle sensors are dropped. One idle for all
	// its windows measures nothing, so dropping it changes no answer.
	sensorSweep = time.Minute
)

// MetricThrottleSeconds counts the throttle time the listener gave
// clients, by quota (docs/metrics.md).
const MetricThrottleSeconds = "keel_kafka_throttle_seconds_total"

// rate is Kafka's Rate over a SampledStat: the sum of the samples of the
// last quotaSamples windows, over the time they span (at least all but
// one window, so that a new client is not measured over a few
// milliseconds).
type rate struct {
	samples [quotaSamples]struct {
		start int64 // unix ms the window started; 0: never used
		value float64
	}
	current int
}

func (r *rate) record(v float64, nowMs int64) {
	s := &r.samples[r.current]
	if s.start != 0 && nowMs-s.start >= quotaWindow.Milliseconds() {
		r.current = (r.current + 1) % quotaSamples
		s = &r.samples[r.current]
		s.start, s.value = 0, 0
	}
	if s.start == 0 {
		s.start = nowMs
	}
	s.value += v
}

// measure returns the rate per second and the span (ms) it is over.
func (r *rate) measure(nowMs int64) (perSecond float64, spanMs int64) {
	window := quotaWindow.Milliseconds()
	total, oldest := 0.0, nowMs
	for i := range r.samples {
		s := &r.samples[i]
		if s.start == 0 {
			continue
		}
		if nowMs-s.start >= quotaSamples*window {
			// Obsolete: Kafka's purgeObsoleteSamples resets it to now.
			s.start, s.value = nowMs, 0
		}
		total += s.value
		oldest = min(oldest, s.start)
	}
	spanMs = nowMs - oldest
	if full := spanMs / window; full < quotaSamples-1 {
		spanMs += (quotaSamples - 1 - full) * window
	}
	spanMs = max(spanMs, 1)
	return total / (float64(spanMs) / 1000), spanMs
}

// throttle records v and returns how long the client must wait for its
// rate to come back to bound (Kafka's QuotaUtils.throttleTime), 0 if it
// is within it.
func (r *rate) throttle(v, bound float64, nowMs int64) time.Duration {
	r.record(v, nowMs)
	got, span := r.measure(nowMs)
	if got <= bound {
		return 0
	}
	return time.Duration((got - bound) / bound * float64(span) * float64(time.Millisecond)).Round(time.Millisecond)
}

// sensorKey names the usage a quota is measured on: the quota's key and
// the entity the client shares it with (fsm.Image.QuotaFor).
type sensorKey struct {
	key    string
	entity fsm.QuotaEntity
}

type sensor struct {
	rate rate
	last int64 // unix ms of the latest record
}

// quotas are a listener's sensors.
type quotas struct {
	now     func() time.Time
	met     *prometheus.CounterVec // nil: no metrics
	mu      sync.Mutex
	sensors map[sensorKey]*sensor
	swept   time.Time
}

func newQuotas(reg prometheus.Registerer) (*quotas, error) {
	q := &quotas{now: time.Now, sensors: map[sensorKey]*sensor{}}
	if reg != nil {
		q.met = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricThrottleSeconds,
			Help: "Throttle time the Kafka listener gave clients over a client quota, by quota (producer_byte_rate, consumer_byte_rate, request_percentage).",
		}, []string{"quota"})
		if err := reg.Register(q.met); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// quotaUser is the user a principal's quotas are set on: its name without
// Kafka's "User:" type.
func quotaUser(principal string) string {
	name, _ := strings.CutPrefix(principal, "User:")
	return name
}

// charge records v against the quota of key the client falls under in
// img, if any, and returns its throttle. With unrecord, v is taken back
// at once when it throttles (a fetch answered empty instead).
func (q *quotas) charge(img *fsm.Image, key, user, clientID string, v float64, now time.Time, unrecord bool) time.Duration {
	bound, shared, ok := img.QuotaFor(key, user, clientID)
	if !ok {
		return 0
	}
	ms := now.UnixMilli()
	q.mu.Lock()
	defer q.mu.Unlock()
	if now.Sub(q.swept) >= sensorSweep {
		q.swept = now
		for k, s := range q.sensors {
			if ms-s.last >= quotaSamples*quotaWindow.Milliseconds() {
				delete(q.sensors, k)
			}
		}
	}
	k := sensorKey{key: key, entity: shared}
	s := q.sensors[k]
	if s == nil {
		s = &sensor{}
		q.sensors[k] = s
	}
	s.last = ms
	d := s.rate.throttle(v, bound, ms)
	if d > 0 && unrecord {
		s.rate.record(-v, ms)
	}
	if key == fsm.RequestPercentage {
		d = min(d, maxRequestThrottle)
	}
	if d > 0 && q.met != nil {
		q.met.WithLabelValues(key).Add(d.Seconds())
	}
	return d
}

// quotaCharge is what one request owes its client's quotas: settled by
// the writer once its answer is ready (settleQuota).
type quotaCharge struct {
	img            *fsm.Image
	user, clientID string
	// throttle is what the request's produce bytes and time came to.
	throttle time.Duration
	// fetch: the answer's bytes are charged to the consumer quota.
	fetch bool
}

// chargeRequest charges a request just handled: a produce's bytes, and
// every request's handling time. It returns nil, at the cost of a length
// check, when the image sets no quotas.
func (s *Server) chargeRequest(c *conn, a *answer, frameSize int, started time.Time) *quotaCharge {
	if s.quotas == nil {
		return nil
	}
	img := s.cfg.Image.Image()
	if img.ClientQuotaCount() == 0 {
		return nil
	}
	qc := &quotaCharge{img: img, user: quotaUser(c.principal)}
	if a.h.clientID != nil {
		qc.clientID = *a.h.clientID
	}
	now := s.quotas.now()
	handled := now.Sub(started)
	switch a.h.key {
	case produceKey:
		qc.throttle = s.quotas.charge(img, fsm.ProducerByteRate, qc.user, qc.clientID, float64(frameSize), now, false)
	case fetchKey:
		qc.fetch = true
	}
	// request_percentage: per cent of one second of one thread.
	pct := float64(handled) / float64(time.Second) * 100
	qc.throttle = max(qc.throttle, s.quotas.charge(img, fsm.RequestPercentage, qc.user, qc.clientID, pct, now, false))
	if qc.throttle > 0 {
		// Muted from now, before the reader reads on: an acks=0 produce's
		// answer never comes for the writer to mute after.
		c.mute(now.Add(qc.throttle))
	}
	return qc
}

// capFetch bounds a fetch's answer to what its client's consumer quota
// allows over all the quota windows but one (Kafka's
// getMaxValueInQuotaWindow): a larger answer would always throttle, be
// answered empty, and the consumer never get anything.
func (s *Server) capFetch(c *conn, h header, r *kmsg.FetchRequest) {
	if s.quotas == nil {
		return
	}
	img := s.cfg.Image.Image()
	if img.ClientQuotaCount() == 0 {
		return
	}
	clientID := ""
	if h.clientID != nil {
		clientID = *h.clientID
	}
	bound, _, ok := img.QuotaFor(fsm.ConsumerByteRate, quotaUser(c.principal), clientID)
	if !ok {
		return
	}
	limit := bound * (quotaSamples - 1) * quotaWindow.Seconds()
	if limit < float64(r.MaxBytes) || r.MaxBytes <= 0 && limit < maxFetchResponse {
		r.MaxBytes = int32(max(limit, 1))
	}
}

// settleQuota finishes a's charge once its answer is ready: a fetch's
// bytes, then the throttle in the answer (if any: an acks=0 produce has
// none) and on the connection. A fetch that throttles is answered empty,
// its bytes not charged, as Kafka does.
func (s *Server) settleQuota(c *conn, a *answer) {
	qc := a.quota
	throttle := qc.throttle
	if fr, ok := a.resp.(*kmsg.FetchResponse); ok && qc.fetch {
		n := 0
		for _, t := range fr.Topics {
			for _, p := range t.Partitions {
				n += len(p.RecordBatches)
			}
		}
		if d := s.quotas.charge(qc.img, fsm.ConsumerByteRate, qc.user, qc.clientID, float64(n), s.quotas.now(), true); d > 0 {
			throttle = max(throttle, d)
			fr.Topics = nil
		}
	}
	if throttle <= 0 {
		return
	}
	s.log.Debug("client throttled over its quota", "request", kmsg.NameForKey(a.h.key), "principal", c.principal,
		"client_id", qc.clientID, "throttle", throttle)
	ms := int32(min(throttle.Milliseconds(), 1<<31-1))
	if tr, ok := a.resp.(kmsg.ThrottleResponse); ok {
		if have, _ := tr.Throttle(); have < ms {
			a.resp.(kmsg.SetThrottleResponse).SetThrottle(ms)
		}
	}
	c.mute(s.quotas.now().Add(throttle))
}

// mute holds back the connection's next request until t (KIP-219).
func (c *conn) mute(t time.Time) {
	for {
		old := c.mutedUntil.Load()
		if old >= t.UnixNano() || c.mutedUntil.CompareAndSwap(old, t.UnixNano()) {
			return
		}
	}
}

// awaitUnmuted waits until the connection's throttle has passed, and
// says whether it waited; ok is false when ctx ended first.
func (c *conn) awaitUnmuted(ctx context.Context) (waited, ok bool) {
	until := c.mutedUntil.Load()
	if until == 0 {
		return false, true
	}
	d := time.Until(time.Unix(0, until))
	if d <= 0 {
		return false, true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true, true
	case <-ctx.Done():
		return true, false
	}
}
