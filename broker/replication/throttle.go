package replication

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/fsm"
)

// Replication throttles (Kafka's ReplicationQuotaManager): the cluster's
// leader.replication.throttled.rate caps the bytes/s this broker sends, as
// leader, to throttled replicas, and follower.replication.throttled.rate
// the bytes/s it fetches for its own throttled replicas. A replica is
// throttled while a reassignment is adding it and it is not in the ISR
// (Kafka's shouldLeaderThrottle and shouldFollowerThrottle skip in-sync
// replicas): moves are capped, and replicas in sync never are.
//
// The rule is Kafka's: while a quota is exceeded, the leader answers a
// throttled replica's fetch with no records, and the follower does not ask
// for its throttled replicas; the bytes that do go are recorded against
// the quota. Each quota is a bucket of one second's bytes that may run
// into debt: an answer of any size goes, and the next waits until the
// bytes are paid for, so the long-run rate is the configured one.

// The throttles' metric names (docs/metrics.md).
const (
	MetricThrottleBytes   = "keel_replication_throttle_bytes_total"
	MetricThrottleSeconds = "keel_replication_throttle_seconds_total"
)

// quota is one throttle's bucket. Not safe for concurrent use.
type quota struct {
	// rate is in bytes/s; math.MaxInt64 is none.
	rate int64
	// tokens are the bytes that may go now; below zero, the quota is
	// exceeded. At most one second's worth.
	tokens float64
	last   time.Time
}

// setRate changes the rate, keeping the debt.
func (q *quota) setRate(now time.Time, rate int64) {
	q.refill(now)
	q.rate = rate
	q.tokens = min(q.tokens, float64(rate))
}

func (q *quota) refill(now time.Time) {
	if q.last.IsZero() {
		q.last = now
	}
	if dt := now.Sub(q.last); dt > 0 {
		q.tokens = min(q.tokens+float64(q.rate)*dt.Seconds(), float64(q.rate))
		q.last = now
	}
}

// wait is how long until the quota is no longer exceeded: 0 if it is not.
// A rate of 0 never refills: the wait is an hour (callers bound it).
func (q *quota) wait(now time.Time) time.Duration {
	q.refill(now)
	if q.tokens >= 0 {
		return 0
	}
	if q.rate == 0 {
		return time.Hour
	}
	return time.Duration(math.Ceil(-q.tokens / float64(q.rate) * float64(time.Second)))
}

// record counts n bytes sent.
func (q *quota) record(now time.Time, n int) {
	q.refill(now)
	q.tokens -= float64(n)
}

// throttleRates are the rates an image sets.
type throttleRates struct {
	img              *fsm.Image
	leader, follower int64
}

// throttles are a Manager's two quotas and their metrics.
type throttles struct {
	rates atomic.Pointer[throttleRates]

	mu               sync.Mutex
	leader, follower quota

	bytes, seconds *prometheus.CounterVec
}

func newThrottles() *throttles {
	return &throttles{
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricThrottleBytes,
			Help: "Bytes of throttled replicas (a reassignment adding them), by side: leader sent, follower fetched."}, []string{"side"}),
		seconds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricThrottleSeconds,
			Help: "Seconds fetches of throttled replicas were held back by the replication throttle, by side."}, []string{"side"}),
	}
}

func (t *throttles) collectors() []prometheus.Collector {
	return []prometheus.Collector{t.bytes, t.seconds}
}

// ratesOf returns img's rates, read once per image.
func (t *throttles) ratesOf(img *fsm.Image) *throttleRates {
	if r := t.rates.Load(); r != nil && r.img == img {
		return r
	}
	r := &throttleRates{img: img}
	r.leader, r.follower = img.ReplicationThrottle()
	t.rates.Store(r)
	return r
}

// throttledReplica reports whether broker id's replica of tp is throttled
// in img: a reassignment is adding it, and it is not in the ISR.
func throttledReplica(img *fsm.Image, tp broker.TopicPartition, id int32) bool {
	p, ok := img.Partition(tp.TopicID, tp.Partition)
	return ok && slices.Contains(p.AddingReplicas, id) && !p.InISR(id)
}

// side is one quota of a Manager: the leader's or the follower's.
func (m *Manager) side(leader bool) (q *quota, rate int64, label string, img *fsm.Image) {
	img = m.img.Load()
	r := m.throttle.ratesOf(img)
	if leader {
		return &m.throttle.leader, r.leader, "leader", img
	}
	return &m.throttle.follower, r.follower, "follower", img
}

// throttled is leaderThrottled and followerThrottled.
func (m *Manager) throttled(leader bool, tp broker.TopicPartition, id int32) time.Duration {
	q, rate, _, img := m.side(leader)
	if rate == math.MaxInt64 || !throttledReplica(img, tp, id) {
		return 0
	}
	m.throttle.mu.Lock()
	defer m.throttle.mu.Unlock()
	now := m.clock.Now()
	if q.rate != rate {
		q.setRate(now, rate)
	}
	return q.wait(now)
}

// recordBytes is recordLeaderBytes and recordFollowerBytes.
func (m *Manager) recordBytes(leader bool, tp broker.TopicPartition, id int32, n int) {
	q, rate, label, img := m.side(leader)
	if n == 0 || rate == math.MaxInt64 || !throttledReplica(img, tp, id) {
		return
	}
	m.throttle.mu.Lock()
	now := m.clock.Now()
	if q.rate != rate {
		q.setRate(now, rate)
	}
	q.record(now, n)
	m.throttle.mu.Unlock()
	m.throttle.bytes.WithLabelValues(label).Add(float64(n))
}

// leaderThrottled is how long this broker, leading tp, holds back the
// records follower fetches: 0 unless follower's replica is throttled and
// the leader quota is exceeded, else the time until the quota allows
// again. While it is not 0 the leader answers that replica no records of
// tp (it may first wait, at most as long as the fetch may wait).
func (m *Manager) leaderThrottled(tp broker.TopicPartition, follower int32) time.Duration {
	return m.throttled(true, tp, follower)
}

// recordLeaderBytes counts n bytes of tp sent to follower against the
// leader quota, if follower's replica is throttled. Call it with every
// answer's record bytes.
func (m *Manager) recordLeaderBytes(tp broker.TopicPartition, follower int32, n int) {
	m.recordBytes(true, tp, follower, n)
}

// followerThrottled is how long this broker, following tp, waits before
// asking for it: 0 unless its replica is throttled and the follower quota
// is exceeded, else the time until the quota allows again. While it is not
// 0 the follower leaves tp out of its fetches.
func (m *Manager) followerThrottled(tp broker.TopicPartition) time.Duration {
	return m.throttled(false, tp, m.self)
}

// recordFollowerBytes counts n bytes fetched for tp against the follower
// quota, if this broker's replica is throttled. Call it with every
// answer's record bytes.
func (m *Manager) recordFollowerBytes(tp broker.TopicPartition, n int) {
	m.recordBytes(false, tp, m.self, n)
}

// throttleWait waits d, at most limit, or until ctx ends, and counts the
// time held back under side.
func (m *Manager) throttleWait(ctx context.Context, leader bool, d, limit time.Duration) {
	d = min(d, limit)
	if d <= 0 {
		return
	}
	start := m.clock.Now()
	select {
	case <-ctx.Done():
	case <-m.clock.After(d):
	}
	label := "follower"
	if leader {
		label = "leader"
	}
	m.throttle.seconds.WithLabelValues(label).Add(m.clock.Now().Sub(start).Seconds())
}
