package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-dev/keel/internal/clock"
	"github.com/keel-dev/keel/tlsauth"
)

// Kafka's defaults.
const (
	// DefaultReplicaLagTimeMax is Kafka's replica.lag.time.max.ms: an ISR
	// member that has not caught up with its leader for this long leaves
	// the ISR.
	DefaultReplicaLagTimeMax = 30 * time.Second
	// DefaultFetchMaxWait is Kafka's replica.fetch.wait.max.ms: a
	// follower's fetch with nothing to read waits this long on the leader.
	DefaultFetchMaxWait = 500 * time.Millisecond
	// DefaultFetchMaxBytes is Kafka's replica.fetch.max.bytes.
	DefaultFetchMaxBytes = 1 << 20
	// DefaultFetchBackoff is Kafka's replica.fetch.backoff.ms: the pause
	// after a failed fetch.
	DefaultFetchBackoff = time.Second
	// DefaultHighWatermarkCheckpointInterval is Kafka's
	// replica.high.watermark.checkpoint.interval.ms.
	DefaultHighWatermarkCheckpointInterval = 5 * time.Second
	// DefaultRetentionCheckInterval is Kafka's
	// log.retention.check.interval.ms.
	DefaultRetentionCheckInterval = 5 * time.Minute
	// DefaultFlushCheckInterval is how often logs are checked against
	// FlushInterval (Kafka's log.flush.scheduler.interval.ms, whose default
	// never checks; here it only matters when FlushInterval is set).
	DefaultFlushCheckInterval = time.Second
	// DefaultMaxBatchBytes is the largest batch a log takes: the Kafka
	// listener's frame cap (Kafka's socket.request.max.bytes), which no
	// produced batch can exceed whatever its topic's max.message.bytes.
	DefaultMaxBatchBytes = 100 << 20
)

// Config configures a Manager.
type Config struct {
	// DataDir is the broker's data dir; the logs live in DataDir/logs.
	DataDir string
	// ReplicaLagTimeMax: see DefaultReplicaLagTimeMax. The leader checks
	// every half of it, as Kafka does.
	ReplicaLagTimeMax time.Duration
	// FetchMaxWait, FetchMaxBytes, FetchBackoff: the followers' fetches.
	FetchMaxWait  time.Duration
	FetchMaxBytes int32
	FetchBackoff  time.Duration
	// FetchResponseMaxBytes bounds the records of one fetch session answer
	// (see DefaultFetchResponseMaxBytes).
	FetchResponseMaxBytes int
	// FlushInterval fsyncs a log whose last fsync is older than this
	// (Kafka's flush.ms for every topic); 0 leaves durability to
	// replication, Kafka's default.
	FlushInterval time.Duration
	// MaxBatchBytes: see DefaultMaxBatchBytes. A topic's max.message.bytes
	// is checked by the Kafka listener, on every produce.
	MaxBatchBytes int64
	// FlushCheckInterval: see DefaultFlushCheckInterval.
	FlushCheckInterval time.Duration
	// HighWatermarkCheckpointInterval: see its default.
	HighWatermarkCheckpointInterval time.Duration
	// RetentionCheckInterval: how often retention.ms and retention.bytes
	// are applied; see its default.
	RetentionCheckInterval time.Duration
	// CleanerBackoff is how long the log cleaner rests when no compacted
	// log is dirty enough (cleaner.go); see its default.
	CleanerBackoff time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// TLS, when set, is the broker's mutual TLS, to fetch from leaders
	// with. Nil is plaintext.
	TLS *tlsauth.Config
	// Dialer, when set, opens the connections to leaders instead of a
	// plain TCP dial: test wiring, like broker.Config.Dialer.
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
	// ScrubBytesPerSecond is the background scrub's rate (scrub.go): every
	// sealed segment is read again and verified at most this fast, pass
	// after pass. 0 runs no background scrub (keel broker scrub still
	// works); see DefaultScrubBytesPerSecond.
	ScrubBytesPerSecond int64
	// Metrics, when set, gets the data plane's metrics (scrub.go) at Start.
	Metrics prometheus.Registerer

	// Tests replace the clock and the connections to leaders, and may
	// drive the followers' fetches by hand (manualFetch: no fetch loops).
	clock       clock.Clock
	dial        func(addr string) (fetchClient, error)
	manualFetch bool
}

func (c *Config) check() error {
	if c.DataDir == "" {
		return errors.New("replication: a data dir is required")
	}
	for name, d := range map[string]time.Duration{
		"replica lag time max": c.ReplicaLagTimeMax, "fetch max wait": c.FetchMaxWait, "fetch backoff": c.FetchBackoff,
		"flush interval": c.FlushInterval, "flush check interval": c.FlushCheckInterval,
		"high watermark checkpoint interval": c.HighWatermarkCheckpointInterval, "retention check interval": c.RetentionCheckInterval,
		"cleaner backoff": c.CleanerBackoff,
	} {
		if d < 0 {
			return fmt.Errorf("replication: %s %v is negative", name, d)
		}
	}
	if c.ScrubBytesPerSecond < 0 {
		return fmt.Errorf("replication: scrub rate %d bytes per second is negative", c.ScrubBytesPerSecond)
	}
	if c.MaxBatchBytes < 0 {
		return fmt.Errorf("replication: max batch bytes %d is negative", c.MaxBatchBytes)
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.FetchMaxBytes < 0 {
		return fmt.Errorf("replication: fetch max bytes %d is negative", c.FetchMaxBytes)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.ReplicaLagTimeMax, DefaultReplicaLagTimeMax)
	def(&c.FetchMaxWait, DefaultFetchMaxWait)
	def(&c.FetchBackoff, DefaultFetchBackoff)
	def(&c.FlushCheckInterval, DefaultFlushCheckInterval)
	def(&c.HighWatermarkCheckpointInterval, DefaultHighWatermarkCheckpointInterval)
	def(&c.RetentionCheckInterval, DefaultRetentionCheckInterval)
	def(&c.CleanerBackoff, DefaultCleanerBackoff)
	if c.FetchMaxBytes == 0 {
		c.FetchMaxBytes = DefaultFetchMaxBytes
	}
	switch {
	case c.FetchResponseMaxBytes < 0:
		return fmt.Errorf("replication: fetch response max bytes %d is negative", c.FetchResponseMaxBytes)
	case c.FetchResponseMaxBytes > math.MaxInt32:
		return fmt.Errorf("replication: fetch response max bytes %d is above %d", c.FetchResponseMaxBytes, math.MaxInt32)
	case c.FetchResponseMaxBytes == 0:
		c.FetchResponseMaxBytes = DefaultFetchResponseMaxBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.clock == nil {
		c.clock = clock.Wall{}
	}
	return nil
}
