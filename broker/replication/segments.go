package replication

import (
	"math"
	"strconv"
	"time"

	"github.com/keel-dev/keel/broker/partlog"
	"github.com/keel-dev/keel/fsm"
)

// segmentConfig is what of a topic's configs an open log takes, and takes
// again when it changes (partlog.Log.Reconfigure): a change applies on
// every broker as soon as it has replayed it, with no log to reopen, as a
// KRaft broker's metadata publisher hands a ConfigRecord to its
// LogManager.
type segmentConfig struct {
	bytes, indexBytes, indexInterval int64
	ms                               time.Duration
}

// segmentConfigNames are the configs segmentConfig reads.
var segmentConfigNames = []string{fsm.SegmentBytes, fsm.SegmentMs, fsm.SegmentIndexBytes, fsm.IndexIntervalBytes}

func segmentConfigOf(img *fsm.Image, t *fsm.Topic) segmentConfig {
	num := func(name string) int64 {
		n, _ := strconv.ParseInt(img.TopicConfig(t, name).Value, 10, 64)
		return n
	}
	return segmentConfig{
		bytes:      num(fsm.SegmentBytes),
		indexBytes: num(fsm.SegmentIndexBytes),
		// Kafka's 0 indexes every batch; partlog's 0 is its default.
		indexInterval: max(num(fsm.IndexIntervalBytes), 1),
		ms:            time.Duration(min(num(fsm.SegmentMs), math.MaxInt64/int64(time.Millisecond))) * time.Millisecond,
	}
}

func (c segmentConfig) apply(pc *partlog.Config) {
	pc.SegmentBytes, pc.SegmentTime, pc.SegmentIndexBytes, pc.IndexIntervalBytes = c.bytes, c.ms, c.indexBytes, c.indexInterval
}

type segmentChange struct {
	r   *replica
	cfg segmentConfig
}

// segmentChanges lists the open logs whose segment configs differ in
// after, and records the new ones as theirs. Only topics that changed (a
// topic is a new pointer when it does) are looked at, unless a cluster
// default of one of the configs did. The caller holds mu.
func (m *Manager) segmentChanges(before, after *fsm.Image) []segmentChange {
	clusterChanged := before == nil
	for _, name := range segmentConfigNames {
		if clusterChanged {
			break
		}
		bv, bok := before.ClusterConfig(name)
		av, aok := after.ClusterConfig(name)
		clusterChanged = bv != av || bok != aok
	}
	var out []segmentChange
	for _, r := range m.replicas {
		t, ok := after.TopicByID(r.tp.TopicID)
		if !ok {
			continue
		}
		if !clusterChanged {
			if bt, ok := before.TopicByID(r.tp.TopicID); ok && bt == t {
				continue
			}
		}
		if c := segmentConfigOf(after, t); c != r.segments {
			r.segments = c
			out = append(out, segmentChange{r, c})
		}
	}
	return out
}

// reconfigure applies the changes to the logs, outside mu: Reconfigure
// waits for the log's writer.
func (m *Manager) reconfigure(changes []segmentChange) {
	for _, ch := range changes {
		var cfg partlog.Config
		ch.cfg.apply(&cfg)
		if err := ch.r.log.Reconfigure(cfg); err != nil {
			m.log.Warn("cannot apply a topic's changed segment configs", "topic", ch.r.topic, "partition", ch.r.tp.Partition, "err", err)
		}
	}
}
