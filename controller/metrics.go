package controller

import (
	"strconv"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-dev/keel/fsm"
)

// The controller's metric names: Kafka's controller and raft metrics in
// Prometheus style (README: Metrics and health). Gauges are computed when
// scraped, from the node's current image and raft's own counters, so the
// hot path keeps no books for them; the histograms and the counter are
// lock-free prometheus types updated where the events happen.
const (
	MetricActiveControllerCount          = "keel_controller_active_controller_count"
	MetricOfflinePartitionsCount         = "keel_controller_offline_partitions_count"
	MetricPreferredReplicaImbalanceCount = "keel_controller_preferred_replica_imbalance_count"
	MetricGlobalTopicCount               = "keel_controller_global_topic_count"
	MetricGlobalPartitionCount           = "keel_controller_global_partition_count"
	MetricFencedBrokerCount              = "keel_controller_fenced_broker_count"
	MetricActiveBrokerCount              = "keel_controller_active_broker_count"
	MetricControllerEpoch                = "keel_controller_epoch"
	MetricMetadataVersion                = "keel_controller_metadata_version"
	MetricEventQueueSize                 = "keel_controller_event_queue_size"
	MetricEventQueueTime                 = "keel_controller_event_queue_time_seconds"
	MetricBrokerStreamLag                = "keel_controller_broker_stream_lag_offsets"
	MetricRaftLastIndex                  = "keel_raft_last_index"
	MetricRaftCommitIndex                = "keel_raft_commit_index"
	MetricRaftAppliedIndex               = "keel_raft_applied_index"
	MetricRaftCommitTime                 = "keel_raft_commit_time_seconds"
	MetricRaftLeaderChanges              = "keel_raft_leader_changes_total"
	MetricRaftTerm                       = "keel_raft_term"
	MetricRefusedEntries                 = "keel_fsm_refused_entries_total"
	MetricAdoptedEntries                 = "keel_fsm_adopted_entries_total"
	MetricFencedBrokers                  = "keel_controller_fenced_brokers_total"
	MetricBrokerCrashProbes              = "keel_controller_broker_crash_probes_total"
	MetricImageDiverged                  = "keel_controller_image_diverged"
	MetricImageMismatches                = "keel_controller_image_mismatches_total"
	MetricPushEncodes                    = "keel_controller_push_encodes_total"
	MetricPushesSent                     = "keel_controller_pushes_sent_total"
)

// The causes MetricFencedBrokers counts fencings by.
const (
	// FenceCauseCrash: the broker's metadata stream connection closed and
	// it did not come back within the crash grace (crash.go).
	FenceCauseCrash = "crash"
	// FenceCauseSessionExpired: the broker was not heard from for a session
	// timeout.
	FenceCauseSessionExpired = "session_expired"
)

// latencyBuckets suit both the event queue (microseconds when idle) and a
// raft commit (milliseconds, seconds when a disk stalls).
var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// activeOnly marks a gauge that Kafka reports on the active controller only.
const activeOnly = " Kafka reports it on the active controller only; every Keel controller reports it from its own committed image, which followers share."

// metrics are the instruments the controller updates as things happen.
// They exist whether or not they are registered, so the hot path never
// checks.
type metrics struct {
	eventQueueTime prometheus.Histogram
	commitTime     prometheus.Histogram
	leaderChanges  prometheus.Counter
	fenced         *prometheus.CounterVec // by cause
	crashProbes    *prometheus.CounterVec // by result (crash.go)
	streams        streamPositions
	// imageMismatches counts voters whose image digest differed, per
	// comparison (integrity.go).
	imageMismatches prometheus.Counter
	// pushEncodes and pushesSent: pushes of entries encoded, and handed to
	// broker streams (pushcache.go).
	pushEncodes, pushesSent prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		eventQueueTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    MetricEventQueueTime,
			Help:    "Time an event waited in the active controller's queue, from submission until the event loop took it (Kafka: EventQueueTimeMs). Only the active controller observes it.",
			Buckets: latencyBuckets,
		}),
		commitTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    MetricRaftCommitTime,
			Help:    "Time from handing a controller write to raft until it was committed and applied (raft's apply future). Only the active controller writes.",
			Buckets: latencyBuckets,
		}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricRaftLeaderChanges,
			Help: "Raft leaders this node has learned of, itself included: one per leadership change it observed.",
		}),
		fenced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricFencedBrokers,
			Help: "Brokers this node fenced as the active controller without being asked, by cause: crash (its metadata stream's connection closed and it did not come back within the crash grace) or session_expired (not heard from for a session timeout).",
		}, []string{"cause"}),
		crashProbes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricBrokerCrashProbes,
			Help: "Dials of a broker's registered address that this node made as the active controller before fencing it for a crash, by result: refused (nothing listens: fenced), listening (the process lives: left to its session) or no_answer (a doubt: left to its session).",
		}, []string{"result"}),
		streams: streamPositions{byBroker: map[int32]*streamPosition{}},
		imageMismatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricImageMismatches,
			Help: "Voters whose image digest differed from the majority's (or, with no majority, from the others') when this node, as the active controller, compared them at one index; counted at every comparison. Anything above 0 is a controller to look at.",
		}),
		pushEncodes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricPushEncodes,
			Help: "Pushes of committed entries this node encoded as the active controller: one per position the broker streams were at, shared by every stream at it.",
		}),
		pushesSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricPushesSent,
			Help: "Pushes of committed entries this node handed to broker streams as the active controller; the ratio to " + MetricPushEncodes + " is how many streams shared each encoding.",
		}),
	}
	// Every cause and result is reported from the start, at 0.
	m.fenced.WithLabelValues(FenceCauseCrash)
	m.fenced.WithLabelValues(FenceCauseSessionExpired)
	for _, r := range []probeResult{probeRefused, probeListening, probeNoAnswer} {
		m.crashProbes.WithLabelValues(r.String())
	}
	return m
}

// streamPositions records, per broker, the offset of the last batch its
// metadata stream has sent; the gap to the committed offset is what the
// stream still has to push. Kafka's controller queues requests per broker;
// Keel's sender reads the retained history instead, so this gap is its
// queue.
type streamPositions struct {
	mu       sync.Mutex
	byBroker map[int32]*streamPosition
}

type streamPosition struct{ offset atomic.Uint64 }

// open starts tracking a broker's stream; a newer stream of the same broker
// replaces an older one that has not ended yet.
func (s *streamPositions) open(broker int32, from uint64) *streamPosition {
	p := &streamPosition{}
	p.offset.Store(from)
	s.mu.Lock()
	s.byBroker[broker] = p
	s.mu.Unlock()
	return p
}

func (s *streamPositions) close(broker int32, p *streamPosition) {
	s.mu.Lock()
	if s.byBroker[broker] == p {
		delete(s.byBroker, broker)
	}
	s.mu.Unlock()
}

func (s *streamPositions) each(fn func(broker int32, offset uint64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, p := range s.byBroker {
		fn(id, p.offset.Load())
	}
}

// imageCounts are the image-derived gauges.
type imageCounts struct {
	offline, imbalanced          int // partitions
	topics, partitions           int
	fencedBrokers, activeBrokers int
}

// countImage computes imageCounts. A partition is offline when it has no
// leader; imbalanced when it has one that is not its preferred (first)
// replica, as Kafka counts them. Active brokers are the registered,
// unfenced ones (shutting down included, as KRaft counts them).
func countImage(img *fsm.Image) imageCounts {
	n := imageCounts{topics: img.TopicCount(), partitions: img.PartitionCount()}
	img.EachPartition(func(p *fsm.Partition) bool {
		switch {
		case p.Leader == fsm.NoLeader:
			n.offline++
		case len(p.Replicas) > 0 && p.Leader != p.Replicas[0]:
			n.imbalanced++
		}
		return true
	})
	for _, b := range img.Brokers() {
		if b.Fenced {
			n.fencedBrokers++
		} else {
			n.activeBrokers++
		}
	}
	return n
}

// collector computes the controller's gauges when scraped.
type collector struct {
	c *Controller

	// The partition counts need a scan of every partition: done once per
	// image, not once per scrape, since an idle cluster's image does not
	// change. The pointer is weak so that an image the FSM has replaced is
	// not kept alive for the sake of a comparison.
	mu        sync.Mutex
	lastImg   weak.Pointer[fsm.Image]
	lastCount imageCounts
}

var (
	descActiveControllerCount = prometheus.NewDesc(MetricActiveControllerCount,
		"1 on the active controller (its epoch record has committed), 0 on every other node: the sum over the quorum is 1 when all is well.", nil, nil)
	descOfflinePartitions = prometheus.NewDesc(MetricOfflinePartitionsCount,
		"Partitions without a leader (leader -1)."+activeOnly, nil, nil)
	descImbalance = prometheus.NewDesc(MetricPreferredReplicaImbalanceCount,
		"Partitions with a leader that is not their preferred (first) replica."+activeOnly, nil, nil)
	descTopics = prometheus.NewDesc(MetricGlobalTopicCount,
		"Topics in the cluster."+activeOnly, nil, nil)
	descPartitions = prometheus.NewDesc(MetricGlobalPartitionCount,
		"Partitions of every topic."+activeOnly, nil, nil)
	descFenced = prometheus.NewDesc(MetricFencedBrokerCount,
		"Registered brokers that are fenced."+activeOnly, nil, nil)
	descActiveBrokers = prometheus.NewDesc(MetricActiveBrokerCount,
		"Registered brokers that are not fenced (shutting down included)."+activeOnly, nil, nil)
	descEpoch = prometheus.NewDesc(MetricControllerEpoch,
		"The controller epoch of this node's committed image: the epoch of the latest active controller.", nil, nil)
	descMetadataVersion = prometheus.NewDesc(MetricMetadataVersion,
		"The finalized metadata.version of this node's committed image (docs/features.md).", nil, nil)
	descQueueSize = prometheus.NewDesc(MetricEventQueueSize,
		"Events waiting in the controller's event queue; always 0 except on the active controller.", nil, nil)
	descStreamLag = prometheus.NewDesc(MetricBrokerStreamLag,
		"Per broker, the committed offset (raft index) minus the offset of the last batch its metadata stream has sent: what the stream still has to push. Only the active controller holds streams.", []string{"broker"}, nil)
	descLastIndex = prometheus.NewDesc(MetricRaftLastIndex,
		"The last index in this node's raft log (or its latest snapshot).", nil, nil)
	descCommitIndex = prometheus.NewDesc(MetricRaftCommitIndex,
		"The commit index as this node knows it: the leader's own, or the one a follower last heard from the leader.", nil, nil)
	descAppliedIndex = prometheus.NewDesc(MetricRaftAppliedIndex,
		"The raft index of the last batch this node's state machine has applied to its image (its metadata offset).", nil, nil)
	descTerm = prometheus.NewDesc(MetricRaftTerm,
		"This node's current raft term.", nil, nil)
	descRefused = prometheus.NewDesc(MetricRefusedEntries,
		"Committed entries this node's state machine refused since it started. The active controller checks each batch before raft, so the leader's state machine accepted each of them: a node that refuses one holds another image than the quorum's and stops acting on it ("+MetricImageDiverged+").", nil, nil)
	descImageDiverged = prometheus.NewDesc(MetricImageDiverged,
		"1 when this node does not act on its metadata image: it refused a committed entry, or its image digest differed from the majority's. It is then not ready and never the active controller.", nil, nil)
	descAdopted = prometheus.NewDesc(MetricAdoptedEntries,
		"Committed entries this node's state machine applied by adopting the image the active controller had already computed for them, rather than decoding and applying them again. It moves only on the active controller.", nil, nil)
)

func (col *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descActiveControllerCount, descOfflinePartitions, descImbalance, descTopics,
		descPartitions, descFenced, descActiveBrokers, descEpoch, descMetadataVersion, descQueueSize, descStreamLag, descLastIndex,
		descCommitIndex, descAppliedIndex, descTerm, descRefused, descAdopted, descImageDiverged} {
		ch <- d
	}
}

func (col *collector) counts(img *fsm.Image) imageCounts {
	col.mu.Lock()
	defer col.mu.Unlock()
	if w := weak.Make(img); col.lastImg != w {
		col.lastImg, col.lastCount = w, countImage(img)
	}
	return col.lastCount
}

func (col *collector) Collect(ch chan<- prometheus.Metric) {
	c := col.c
	img := c.fsm.Image()
	n := col.counts(img)
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	active := 0.0
	queued := 0
	if l := c.active.Load(); l != nil {
		active = 1
		queued = len(l.events)
	}
	gauge(descActiveControllerCount, active)
	gauge(descOfflinePartitions, float64(n.offline))
	gauge(descImbalance, float64(n.imbalanced))
	gauge(descTopics, float64(n.topics))
	gauge(descPartitions, float64(n.partitions))
	gauge(descFenced, float64(n.fencedBrokers))
	gauge(descActiveBrokers, float64(n.activeBrokers))
	gauge(descEpoch, float64(img.ControllerEpoch))
	gauge(descMetadataVersion, float64(img.FinalizedMetadataVersion()))
	gauge(descQueueSize, float64(queued))
	c.metrics.streams.each(func(broker int32, sent uint64) {
		lag := uint64(0)
		if img.Offset > sent {
			lag = img.Offset - sent
		}
		gauge(descStreamLag, float64(lag), strconv.Itoa(int(broker)))
	})
	gauge(descLastIndex, float64(c.quorum.LastIndex()))
	gauge(descCommitIndex, float64(c.quorum.CommitIndex()))
	gauge(descAppliedIndex, float64(img.Offset))
	gauge(descTerm, float64(c.quorum.CurrentTerm()))
	ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(c.fsm.Refused()))
	ch <- prometheus.MustNewConstMetric(descAdopted, prometheus.CounterValue, float64(c.fsm.Adopted()))
	diverged := 0.0
	if c.fsm.Diverged() != nil {
		diverged = 1
	}
	gauge(descImageDiverged, diverged)
}

// startMetrics registers the controller's metrics with reg and starts
// counting leader changes. It runs in Start, once the log the collector
// reads is set. Like prometheus.MustRegister it panics if reg already holds
// these metrics (two controllers on one registry).
func (c *Controller) startMetrics(reg prometheus.Registerer) {
	m := c.metrics
	c.metricsCollectors = []prometheus.Collector{&collector{c: c}, m.eventQueueTime, m.commitTime, m.leaderChanges, m.fenced, m.crashProbes, m.imageMismatches, m.pushEncodes, m.pushesSent}
	reg.MustRegister(c.metricsCollectors...)
	// The log may drop an observation rather than wait (a leader change
	// missed under a burst of them leaves the counter one short, which is
	// acceptable).
	c.stopObserving = c.quorum.ObserveLeaders(func(leader int32) {
		if leader >= 0 {
			m.leaderChanges.Inc()
		}
	})
}

// stopMetrics undoes startMetrics.
func (c *Controller) stopMetrics() {
	if c.stopObserving == nil {
		return
	}
	c.stopObserving()
	for _, col := range c.metricsCollectors {
		c.cfg.Metrics.Unregister(col)
	}
}
