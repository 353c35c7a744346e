package replication

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-dev/keel/broker/partlog"
	"github.com/keel-dev/keel/fsm"
)

// The log cleaner (cleanup.policy=compact): one goroutine per broker
// (Kafka's log.cleaner.threads=1) cleans the dirtiest log whose dirty
// ratio reaches its topic's min.cleanable.dirty.ratio, then the next, and
// rests CleanerBackoff when none does (log.cleaner.backoff.ms). Each
// replica, leader or follower, cleans its own log below its high
// watermark: what it removes, every replica that may lead holds a newer
// record of the same key for (partlog.Log.Clean).

// DefaultCleanerBackoff is Kafka's log.cleaner.backoff.ms.
const DefaultCleanerBackoff = 15 * time.Second

// The cleaner's metric names (docs/metrics.md).
const (
	MetricCleanerBytes         = "keel_log_cleaner_bytes_total"
	MetricCleanerRuns          = "keel_log_cleaner_runs_total"
	MetricCleanerLastRun       = "keel_log_cleaner_last_run_seconds"
	MetricCleanerMaxDirtyRatio = "keel_log_cleaner_max_dirty_ratio"
)

// cleanerMetrics are the cleaner's instruments.
type cleanerMetrics struct {
	bytes     prometheus.Counter
	runs      prometheus.Counter
	lastRun   prometheus.Gauge
	maxDirty  prometheus.Gauge
	collected []prometheus.Collector
}

func newCleanerMetrics() cleanerMetrics {
	m := cleanerMetrics{
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricCleanerBytes,
			Help: "Bytes of log segments the log cleaner read and rewrote (cleanup.policy=compact)."}),
		runs: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricCleanerRuns,
			Help: "Logs the log cleaner cleaned."}),
		lastRun: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricCleanerLastRun,
			Help: "How long the log cleaner's last clean of a log took, in seconds."}),
		maxDirty: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricCleanerMaxDirtyRatio,
			Help: "The largest dirty ratio of a compacted log this broker holds, at the cleaner's last look (Kafka's max-dirty-percent, as a ratio)."}),
	}
	m.collected = []prometheus.Collector{m.bytes, m.runs, m.lastRun, m.maxDirty}
	return m
}

// compaction reads a topic's compaction configs from img: false if the
// topic is not compacted.
func compaction(img *fsm.Image, t *fsm.Topic) (partlog.Compaction, bool) {
	if !slices.Contains(strings.Split(img.TopicConfig(t, fsm.CleanupPolicy).Value, ","), "compact") {
		return partlog.Compaction{}, false
	}
	ms := func(name string) time.Duration {
		n, _ := strconv.ParseInt(img.TopicConfig(t, name).Value, 10, 64)
		return time.Duration(min(n, int64(1<<63-1)/int64(time.Millisecond))) * time.Millisecond
	}
	ratio, _ := strconv.ParseFloat(img.TopicConfig(t, fsm.MinCleanableDirtyRatio).Value, 64)
	return partlog.Compaction{DeleteRetention: ms(fsm.DeleteRetentionMs), MinCleanableRatio: ratio, MinLag: ms(fsm.MinCompactionLagMs)}, true
}

// deletes reports whether the topic's cleanup.policy deletes old segments
// (retention.ms, retention.bytes).
func deletes(img *fsm.Image, t *fsm.Topic) bool {
	return slices.Contains(strings.Split(img.TopicConfig(t, fsm.CleanupPolicy).Value, ","), "delete")
}

// runCleaner cleans logs, dirtiest first, until Close.
func (m *Manager) runCleaner() {
	defer m.wg.Done()
	for {
		if !m.cleanDirtiest() {
			select {
			case <-m.ctx.Done():
				return
			case <-m.clock.After(m.cfg.CleanerBackoff):
			}
		}
		if m.ctx.Err() != nil {
			return
		}
	}
}

// cleanDirtiest cleans the compacted log with the largest dirty ratio at
// or above its topic's minimum, and reports whether it cleaned one.
func (m *Manager) cleanDirtiest() bool {
	img := m.img.Load()
	now := m.clock.Now()
	var (
		best      *replica
		bestC     partlog.Compaction
		bestRatio = -1.0
		bestHW    int64
		maxRatio  float64
	)
	for _, r := range m.logs() {
		t, ok := img.TopicByID(r.tp.TopicID)
		if !ok {
			continue
		}
		c, ok := compaction(img, t)
		if !ok {
			continue
		}
		r.mu.Lock()
		hw := r.hw
		r.mu.Unlock()
		ratio, dirty := r.log.DirtyRatio(now, c, hw)
		maxRatio = max(maxRatio, ratio)
		if dirty > 0 && ratio >= c.MinCleanableRatio && ratio > bestRatio {
			best, bestC, bestRatio, bestHW = r, c, ratio, hw
		}
	}
	m.cleanerMetrics.maxDirty.Set(maxRatio)
	if best == nil {
		return false
	}
	start := time.Now()
	res, err := best.log.Clean(now, bestC, bestHW)
	m.cleanerMetrics.lastRun.Set(time.Since(start).Seconds())
	switch {
	case err != nil:
		if !errors.Is(err, partlog.ErrClosed) {
			m.log.Warn("log cleaner failed", "topic", best.topic, "partition", best.tp.Partition, "err", err)
		}
		return false
	case !res.Ran:
		return false
	}
	m.cleanerMetrics.runs.Inc()
	m.cleanerMetrics.bytes.Add(float64(res.BytesRead))
	m.log.Debug("log cleaner cleaned a log", "topic", best.topic, "partition", best.tp.Partition, "dirty_ratio", res.DirtyRatio,
		"segments", res.Segments, "bytes_read", res.BytesRead, "bytes_written", res.BytesWritten,
		"records_removed", res.RecordsRemoved, "cleaned_offset", res.CleanedOffset)
	return true
}
