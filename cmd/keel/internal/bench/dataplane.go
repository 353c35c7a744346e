package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/broker/kafka"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest/keelproc"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// Defaults of the data path's flags.
const (
	DefaultRecordSize      = 1024
	DefaultDataPartitions  = 6
	DefaultProducers       = 4
	DefaultProduceDuration = 10 * time.Second
	DefaultCatchUpBytes    = 1 << 30
	// dataBrokers is how many `keel broker` processes the data path runs:
	// RF 3 on one machine.
	dataBrokers = 3
	// leaderCrashRate is the records per second of leader-crash's steady
	// producer: one a millisecond, the resolution of its figure.
	leaderCrashRate = 1000
)

// dataScenarios run on a cluster of their own: three controllers and three
// real `keel broker` processes with Kafka listeners, started from the same
// keel executable, driven by franz-go producers in the bench process.
var dataScenarios = map[string]bool{ScenarioProduce: true, ScenarioLeaderCrash: true, ScenarioCatchUp: true, ScenarioConsumeGroup: true}

// DataConfig configures the data path's scenarios.
type DataConfig struct {
	// RecordSize is each record's value, in bytes (1 KiB).
	RecordSize int
	// Partitions of the topics produce and catch-up write to (6); RF 3.
	Partitions int
	// Producers is how many franz-go clients produce at once (4).
	Producers int
	// Duration is how long each produce measurement lasts (10 s): acks=1,
	// acks=all, and acks=all at half its peak, each after a warm-up.
	Duration time.Duration
	// CatchUpBytes is what catch-up writes while a follower is down (1 GiB).
	CatchUpBytes int64
	// SessionTimeout is the controllers' --session-timeout; 0 leaves their
	// default (9 s), which leader-crash is reported with.
	SessionTimeout time.Duration
	// GroupRecords is what consume-group writes, then consumes (100,000).
	GroupRecords int64
}

func (c *DataConfig) check() error {
	if c.RecordSize == 0 {
		c.RecordSize = DefaultRecordSize
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultDataPartitions
	}
	if c.Producers == 0 {
		c.Producers = DefaultProducers
	}
	if c.Duration == 0 {
		c.Duration = DefaultProduceDuration
	}
	if c.CatchUpBytes == 0 {
		c.CatchUpBytes = DefaultCatchUpBytes
	}
	if c.GroupRecords == 0 {
		c.GroupRecords = DefaultGroupRecords
	}
	switch {
	case c.RecordSize < 1 || c.RecordSize > 512<<10:
		return fmt.Errorf("--record-size %d: between 1 and 524288 bytes", c.RecordSize)
	case c.Partitions < 1:
		return fmt.Errorf("--produce-partitions %d: at least 1", c.Partitions)
	case c.Producers < 1:
		return fmt.Errorf("--producers %d: at least 1", c.Producers)
	case c.Duration < 100*time.Millisecond:
		return fmt.Errorf("--produce-duration %v: at least 100ms", c.Duration)
	case c.CatchUpBytes < int64(c.RecordSize):
		return fmt.Errorf("--catch-up-bytes %d: at least one record (--record-size %d)", c.CatchUpBytes, c.RecordSize)
	case c.GroupRecords < 1:
		return fmt.Errorf("--group-records %d: at least 1", c.GroupRecords)
	case c.SessionTimeout < 0:
		return fmt.Errorf("--broker-session-timeout %v: must not be negative", c.SessionTimeout)
	}
	return nil
}

// dataCluster is the data path's cluster: a quorum and three brokers, each
// with a Kafka listener.
type dataCluster struct {
	q     *keelproc.Cluster
	admin *rpc.Client
	ids   []int32
	kafka map[int32]string // Kafka listener of each broker
}

// dataPath runs the data path's scenarios names, in order, on one cluster
// started for them, and adds their results to report.
func (r *runner) dataPath(ctx context.Context, report *Report, names []string) (*Report, error) {
	if len(names) == 0 {
		return report, nil
	}
	dc, err := r.startDataCluster(ctx)
	if dc != nil {
		defer dc.close()
	}
	if err != nil {
		return nil, dc.withLogs(ctx, fmt.Errorf("data path cluster: %w", err))
	}
	for _, name := range names {
		var res Result
		switch name {
		case ScenarioProduce:
			res, err = r.produce(ctx, dc)
		case ScenarioLeaderCrash:
			res, err = r.leaderCrash(ctx, dc)
		case ScenarioCatchUp:
			res, err = r.catchUp(ctx, dc)
		case ScenarioConsumeGroup:
			res, err = r.consumeGroup(ctx, dc)
		default:
			err = fmt.Errorf("unknown scenario %q", name)
		}
		if err != nil {
			return nil, dc.withLogs(ctx, fmt.Errorf("%s: %w", name, err))
		}
		report.Scenarios = append(report.Scenarios, res)
	}
	return report, nil
}

// startDataCluster starts three controllers (no leader rebalance, and
// --session-timeout if set) and three brokers with Kafka listeners and
// the brokers' default data path settings (no fsync, Kafka's replica lag
// time and fetch wait), and waits until every broker is active. It returns
// what it started, also with an error, for the caller to close.
func (r *runner) startDataCluster(ctx context.Context) (*dataCluster, error) {
	// No automatic leader rebalance: it would move leaderships in the
	// middle of a measurement.
	flags := []string{"--leader-imbalance-check-interval", "-1s"}
	if d := r.cfg.Data.SessionTimeout; d > 0 {
		flags = append(flags, "--session-timeout", d.String())
	}
	statusf(r.cfg.Status, "data path: starting 3 controllers and %d brokers with Kafka listeners (%s)", dataBrokers, r.cfg.Executable)
	q, err := keelproc.New(keelproc.Config{
		Keel:            r.cfg.Executable,
		Dir:             filepath.Join(r.dir, "data"),
		Controllers:     3,
		Env:             r.cfg.Env,
		ControllerFlags: flags,
		Attempts:        3,
		StartTimeout:    time.Minute,
	})
	if err != nil {
		return nil, err
	}
	dc := &dataCluster{q: q, kafka: map[int32]string{}}
	r.meters.watch(q)
	if err := q.Start(ctx); err != nil {
		return dc, err
	}
	if dc.admin, err = rpc.NewClient(q.Addrs()); err != nil {
		return dc, err
	}
	kafka, err := keelproc.FreeAddrs(dataBrokers)
	if err != nil {
		return dc, err
	}
	var specs []keelproc.BrokerSpec
	for i := range dataBrokers {
		id := int32(i + 1)
		dc.ids = append(dc.ids, id)
		dc.kafka[id] = kafka[i]
		// The profiler on each broker's metrics listener (loopback), for
		// `go tool pprof` during a run kept with KEEL_BENCH_KEEP.
		specs = append(specs, keelproc.BrokerSpec{ID: id, Rack: rackOf(id), Metrics: true,
			Flags: []string{"--kafka-listen", kafka[i], "--pprof"}})
	}
	if err := q.StartBrokers(ctx, specs...); err != nil {
		return dc, err
	}
	return dc, dc.waitActive(ctx, dc.ids...)
}

// produceDurations is the brokers' histogram of produce request durations
// (the Kafka listener's metric), summed over the brokers.
func (dc *dataCluster) produceDurations(ctx context.Context) (histogram, error) {
	var addrs []string
	for _, nd := range dc.q.Brokers() {
		addrs = append(addrs, nd.MetricsAddr())
	}
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	h, err := scrapeHistogram(hctx, addrs, kafka.MetricRequestDuration, "request", "Produce")
	if err != nil {
		return histogram{}, fmt.Errorf("the brokers' produce durations: %w", err)
	}
	return h, nil
}

// close stops every process at once (kill -9: nothing reported needs a
// graceful stop).
func (dc *dataCluster) close() {
	if dc.admin != nil {
		dc.admin.Close()
	}
	var running []*keelproc.Node
	for _, nd := range dc.q.Nodes() {
		if nd.Running() {
			running = append(running, nd)
		}
	}
	_ = dc.q.Kill(running...)
	_ = dc.q.Close()
}

// withLogs adds the end of every process's log to err.
func (dc *dataCluster) withLogs(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted: %w", context.Cause(ctx))
	}
	if dc == nil {
		return err
	}
	msg := quorumLogs(dc.q, 10)
	for _, nd := range dc.q.Brokers() {
		tail, lerr := nd.LogTail(10)
		if lerr != nil {
			tail = lerr.Error()
		}
		msg += fmt.Sprintf("--- %s (%s):\n%s\n", nd.Name(), nd.LogPath(), tail)
	}
	return fmt.Errorf("%w\n%s", err, msg)
}

// seeds is every broker's Kafka listener.
func (dc *dataCluster) seeds() []string {
	var out []string
	for _, id := range dc.ids {
		out = append(out, dc.kafka[id])
	}
	return out
}

// waitActive waits until the controllers list every one of ids as active.
func (dc *dataCluster) waitActive(ctx context.Context, ids ...int32) error {
	return poll.Wait(ctx, 2*time.Minute, 20*time.Millisecond, fmt.Sprintf("brokers %v active", ids), func() (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := dc.admin.ListBrokers(cctx)
		if err != nil {
			return false, nil
		}
		n := 0
		for _, b := range resp.GetBrokers() {
			if slices.Contains(ids, b.GetId()) && b.GetState() == fsm.BrokerActive {
				n++
			}
		}
		return n == len(ids), nil
	})
}

// describe returns the partitions of topic, as the active controller has
// them.
func (dc *dataCluster) describe(ctx context.Context, topic string) ([]*keelpb.PartitionDescription, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := dc.admin.DescribeTopic(cctx, topic)
	if err != nil {
		return nil, err
	}
	return resp.GetTopic().GetPartitions(), nil
}

// createTopic creates topic with partitions partitions, RF 3, and waits
// until every partition has a leader and all three replicas in its ISR.
func (dc *dataCluster) createTopic(ctx context.Context, topic string, partitions int) error {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	_, err := dc.admin.CreateTopic(cctx, &keelpb.CreateTopicRequest{Name: topic, Partitions: int32(partitions), ReplicationFactor: 3})
	cancel()
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	err = dc.waitISR(ctx, topic, 2*time.Minute, func(p *keelpb.PartitionDescription) bool {
		return p.GetLeader() >= 0 && len(p.GetIsr()) == len(p.GetReplicas())
	})
	if err != nil {
		return err
	}
	return dc.waitKafkaMetadata(ctx, topic, partitions)
}

// waitKafkaMetadata waits until the Kafka listener of every running broker
// answers a Metadata request with every partition of topic and its leader:
// each broker has applied the topic. The controller has it first; a broker
// busy applying something else (deleting the previous topic's logs) may
// not, and a producer would be told that the topic does not exist.
func (dc *dataCluster) waitKafkaMetadata(ctx context.Context, topic string, partitions int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(dc.seeds()...))
	if err != nil {
		return err
	}
	defer cl.Close()
	return poll.Wait(ctx, 2*time.Minute, 10*time.Millisecond, "every broker's Kafka metadata of "+topic, func() (bool, error) {
		for _, b := range cl.SeedBrokers() {
			req := kmsg.NewPtrMetadataRequest()
			t := kmsg.NewMetadataRequestTopic()
			t.Topic = kmsg.StringPtr(topic)
			req.Topics = append(req.Topics, t)
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := b.Request(cctx, req)
			cancel()
			if err != nil {
				continue // a broker that is down (catch-up stops one) has nothing to say
			}
			mr := resp.(*kmsg.MetadataResponse)
			if len(mr.Topics) != 1 || mr.Topics[0].ErrorCode != 0 || len(mr.Topics[0].Partitions) != partitions {
				return false, nil
			}
			for _, p := range mr.Topics[0].Partitions {
				if p.ErrorCode != 0 || p.Leader < 0 {
					return false, nil
				}
			}
		}
		return true, nil
	})
}

// deleteTopic deletes topic: its logs go, so that the runs do not fill the
// disk.
func (dc *dataCluster) deleteTopic(ctx context.Context, topic string) error {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := dc.admin.DeleteTopic(cctx, topic); err != nil {
		return fmt.Errorf("delete topic %s: %w", topic, err)
	}
	return nil
}

// waitISR polls topic's partitions every 10 ms until ok holds for each.
func (dc *dataCluster) waitISR(ctx context.Context, topic string, timeout time.Duration, ok func(*keelpb.PartitionDescription) bool) error {
	var last []*keelpb.PartitionDescription
	err := poll.Wait(ctx, timeout, 10*time.Millisecond, "the partitions of "+topic, func() (bool, error) {
		parts, err := dc.describe(ctx, topic)
		if err != nil || len(parts) == 0 {
			return false, nil
		}
		last = parts
		for _, p := range parts {
			if !ok(p) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && last != nil {
		err = fmt.Errorf("%w; last seen: %s", err, formatPartitions(last))
	}
	return err
}

func formatPartitions(parts []*keelpb.PartitionDescription) string {
	s := ""
	for _, p := range parts {
		s += fmt.Sprintf(" [%d leader %d isr %v]", p.GetPartition(), p.GetLeader(), p.GetIsr())
	}
	return s
}

// kafkaOpts are the options of every producer of the bench: the records go
// uncompressed (their values are random anyway), after an error the client
// asks for metadata again soon, so that a failover costs it little, and an
// unknown topic is retried.
// acks=1 needs idempotence off, as in Kafka's clients.
func kafkaOpts(seeds []string, topic string, acks kgo.Acks, allISR bool) []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(acks),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.MetadataMinAge(100 * time.Millisecond),
		// A broker that has not applied the topic yet answers that it does
		// not exist; the bench created it, so that is never final.
		kgo.UnknownTopicRetries(-1),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond })}
	if !allISR {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	return opts
}

var errNoAcks = errors.New("no record was acknowledged")
