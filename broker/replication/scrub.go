package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/broker/partlog"
)

// Damage that still parses (a flipped bit in a sealed segment, a wrong log
// start) is invisible to Open, which reads sealed segments' headers only,
// and to Kafka. Three checks find it here:
//
//   - the scrub (partlog.Log.Scrub) reads every sealed segment of every
//     log at ScrubBytesPerSecond, pass after pass, and on demand (keel
//     broker scrub, ScrubLogs);
//   - a follower checks the CRC-32C of every batch it fetches before it
//     appends it (partlog.ValidPrefix): it appends the batches before a
//     damaged one, refuses the rest, and fetches them again;
//   - a leader checks every batch a consumer's fetch reads before it
//     serves it (checkRead), and serves none that fails.
//
// A follower whose own log is damaged cuts it where the good log ends and
// fetches the rest from its leader again: it is behind the leader's log
// end until it has, so it joins the ISR only then (the ISR rule: a fetch
// that reaches the leader's log end). A leader whose log is damaged keeps
// leading and says so (a log line, the damage metric, keel broker scrub);
// no follower copies the damaged batch and no consumer is served it.

// The data plane's metric names (README: Metrics and health).
const (
	MetricScrubBytes = "keel_broker_log_scrub_bytes_total"
	MetricLogDamage  = "keel_broker_log_damage_total"
)

// Values of keel_broker_log_damage_total's found label.
const (
	foundByScrub = "scrub" // this broker's scrub, in its own log
	foundByFetch = "fetch" // a follower here, in its leader's answer
	foundByRead  = "read"  // a consumer's fetch, in this leader's log
)

// DefaultScrubBytesPerSecond is the background scrub's default rate: a
// broker reads its sealed segments again at most this fast.
const DefaultScrubBytesPerSecond = 10 << 20

// scrubPause is the pause between two passes of the background scrub: a
// broker with little data does not read it again and again.
const scrubPause = 10 * time.Second

// scrubMetrics are the scrub's instruments.
type scrubMetrics struct {
	bytes  prometheus.Counter
	damage *prometheus.CounterVec
}

func newScrubMetrics() scrubMetrics {
	m := scrubMetrics{
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricScrubBytes,
			Help: "Bytes of sealed segments the scrub has read and verified (the background scrub and keel broker scrub).",
		}),
		damage: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricLogDamage,
			Help: "Damage found in logs: found=scrub in this broker's own logs, found=read in a consumer's read of them (not served), found=fetch in a leader's answer that a follower here refused; each damage counted once.",
		}, []string{"found"}),
	}
	for _, found := range []string{foundByScrub, foundByFetch, foundByRead} {
		m.damage.WithLabelValues(found)
	}
	return m
}

func (m scrubMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.bytes, m.damage}
}

// replicaDamage is what is known of damage in one replica's log, and in
// its leader's. Guarded by the replica's mu.
type replicaDamage struct {
	// own is the damage the last scrub found in this replica's log, nil
	// if it found none; repaired once the log was cut below it.
	own      *partlog.Damage
	repaired bool
	// leader is the last batch this replica, following, refused from its
	// leader as damaged: "" if none.
	leader string
	// read is the last damage a consumer's read met, leading: "" if none.
	read string
}

// pacer bounds a scrub's rate: after every rate/100 bytes it waits for
// them (about 10 ms a time, rather than a timer for every header).
type pacer struct {
	m    *Manager
	rate int64 // bytes per second; 0 does not wait
	owed int64
}

func (p *pacer) pace(ctx context.Context, n int64) error {
	p.m.scrubMetrics.bytes.Add(float64(n))
	if p.rate <= 0 {
		return ctx.Err()
	}
	p.owed += n
	if p.owed < p.rate/100 {
		return nil
	}
	d := time.Duration(float64(p.owed) / float64(p.rate) * float64(time.Second))
	p.owed = 0
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-p.m.clock.After(d):
		return nil
	}
}

// runScrub scrubs every log, pass after pass, at ScrubBytesPerSecond,
// pausing scrubPause between passes, until Close.
func (m *Manager) runScrub() {
	defer m.wg.Done()
	p := &pacer{m: m, rate: m.cfg.ScrubBytesPerSecond}
	for {
		for _, r := range m.logs() {
			m.scrub(m.ctx, r, p.pace)
			if m.ctx.Err() != nil {
				return
			}
		}
		select {
		case <-m.ctx.Done():
			return
		case <-m.clock.After(scrubPause):
		}
	}
}

// scrub scrubs r's log and acts on what it finds.
func (m *Manager) scrub(ctx context.Context, r *replica, pace func(context.Context, int64) error) (partlog.ScrubResult, error) {
	res, err := r.log.Scrub(ctx, pace)
	if err != nil {
		if !errors.Is(err, partlog.ErrClosed) && ctx.Err() == nil {
			m.log.Warn("cannot scrub a log", "topic", r.topic, "partition", r.tp.Partition, "err", err)
		}
		return res, err
	}
	if res.Damage != nil {
		m.damaged(r, res.Damage)
		return res, nil
	}
	// Clean: a follower's repaired log, or a damaged segment retention
	// deleted.
	r.mu.Lock()
	r.damage.own, r.damage.repaired = nil, false
	r.mu.Unlock()
	return res, nil
}

// damaged acts on damage a scrub found in r's log: a follower cuts its log
// where the good log ends and fetches the rest again; a leader, or a
// stopped replica, logs it and keeps it in its state for keel broker
// scrub. A damaged index (the batches are good) is only reported: the
// broker rebuilds it when the log is opened again.
func (m *Manager) damaged(r *replica, d *partlog.Damage) {
	r.roleMu.RLock()
	defer r.roleMu.RUnlock()
	r.mu.Lock()
	role, gen := r.role, r.gen
	again := r.damage.own != nil && *r.damage.own == *d
	r.damage.own, r.damage.repaired = d, false
	r.mu.Unlock()
	if again && (role != broker.RoleFollower || d.Index) {
		return // kept as it is: counted and logged when first found
	}
	m.scrubMetrics.damage.WithLabelValues(foundByScrub).Inc()
	if role != broker.RoleFollower || d.Index {
		m.log.Error("a replica's log is damaged: its followers refuse the damaged batch; move the partition's leadership away, or stop the broker and repair the log",
			"topic", r.topic, "partition", r.tp.Partition, "role", role, "damage", d.String())
		return
	}
	m.log.Error("a replica's log is damaged: cutting it where the good log ends, and fetching the rest from the leader again",
		"topic", r.topic, "partition", r.tp.Partition, "damage", d.String(), "log_end_offset", r.log.LogEndOffset(), "truncate_to", d.Offset)
	if err := r.log.TruncateTo(d.Offset); err != nil {
		m.log.Error("cannot cut a damaged log", "topic", r.topic, "partition", r.tp.Partition, "err", err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen == gen {
		r.damage.repaired = true
	}
	r.hw = min(r.hw, r.log.LogEndOffset())
	r.notify()
}

// refusedFromLeader notes a fetch answer this follower refused as damaged
// (a bad CRC, a batch that does not parse): logged and counted once per
// offset; the follower appends nothing and fetches it again.
func (m *Manager) refusedFromLeader(r *replica, offset int64, err error) {
	r.mu.Lock()
	leader, what := r.leader, err.Error()
	first := r.damage.leader != what
	r.damage.leader = what
	r.mu.Unlock()
	if !first {
		return
	}
	m.scrubMetrics.damage.WithLabelValues(foundByFetch).Inc()
	m.log.Error("refused the leader's batches: its log is damaged; appended none from the damaged one on, fetching them again",
		"topic", r.topic, "partition", r.tp.Partition, "leader", leader, "fetch_offset", offset, "err", what)
}

// checkRead checks the CRC-32C of every batch a consumer's fetch read from
// r's log before it is served: the batches before a damaged one are
// served, and a read that starts at one fails (KAFKA_STORAGE_ERROR), so
// that no consumer gets damaged bytes as good (librdkafka does not check
// CRCs by default). The damage is counted and logged once.
func (m *Manager) checkRead(r *replica, records []byte) ([]byte, error) {
	n, damaged := partlog.ValidPrefix(records)
	if damaged == nil {
		return records, nil
	}
	r.mu.Lock()
	what := damaged.Error()
	first := r.damage.read != what
	r.damage.read = what
	r.mu.Unlock()
	if first {
		m.scrubMetrics.damage.WithLabelValues(foundByRead).Inc()
		m.log.Error("a consumer's read met damage in this leader's log: serving the batches before it, refusing it; move the partition's leadership away, or stop the broker and repair the log",
			"topic", r.topic, "partition", r.tp.Partition, "err", what)
	}
	if n == 0 {
		return nil, fmt.Errorf("the log is damaged: %v", damaged)
	}
	return records[:n], nil
}

// ScrubLogs scrubs every log now, at full speed (keel broker scrub), and
// reports each, with the damage known from earlier scrubs and fetches.
func (m *Manager) ScrubLogs(ctx context.Context) ([]broker.ScrubbedLog, error) {
	p := &pacer{m: m}
	var out []broker.ScrubbedLog
	for _, r := range m.logs() {
		res, err := m.scrub(ctx, r, p.pace)
		if err != nil && !errors.Is(err, partlog.ErrClosed) {
			return nil, err
		}
		r.mu.Lock()
		s := broker.ScrubbedLog{Topic: r.topic, TopicID: r.tp.TopicID, Partition: r.tp.Partition, Role: r.role,
			Segments: res.Segments, Bytes: res.Bytes, Repaired: r.damage.repaired, LeaderDamage: r.damage.leader,
			LogStartOffset: r.log.LogStartOffset(), LogEndOffset: r.log.LogEndOffset()}
		if d := r.damage.own; d != nil {
			s.Damage, s.DamageOffset = d.String(), d.Offset
		}
		r.mu.Unlock()
		out = append(out, s)
	}
	broker.SortScrubbed(out)
	return out, nil
}
