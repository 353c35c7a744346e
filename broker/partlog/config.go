package partlog

import (
	"fmt"
	"log/slog"
	"math"
	"time"
)

// Config is a log's configuration, named after the Kafka topic configs it
// stands for. The zero value of a field takes the default.
type Config struct {
	// SegmentBytes rolls the active segment when a batch would take it past
	// this size (segment.bytes; 1 GiB). At most 2 GiB - 1: positions are
	// 32-bit in the index.
	SegmentBytes int64
	// SegmentTime rolls the active segment when a batch comes this long
	// after its first (segment.ms; 7 days), by the log's clock: since the
	// first append in this process for a segment that was opened with
	// data.
	SegmentTime time.Duration
	// SegmentIndexBytes rolls the active segment when its .index reaches
	// this size (segment.index.bytes; 10 MiB).
	SegmentIndexBytes int64
	// IndexIntervalBytes is how many bytes of batches go between two
	// entries of the sparse .index (index.interval.bytes; 4 KiB).
	IndexIntervalBytes int64
	// MaxBatchBytes refuses a leader's batch over this size with
	// ErrBatchTooLarge (max.message.bytes; 1 MiB + 12 bytes), and bounds
	// what recovery takes for a torn write rather than for damage.
	MaxBatchBytes int64
	// FlushMessages fsyncs the log once this many records have been
	// appended since the last fsync (flush.messages); 0 never does. 1 is
	// an fsync per append.
	FlushMessages int64
	// FlushInterval fsyncs the log when an append or MaybeFlush finds the
	// last fsync older than this (flush.ms); 0 never does.
	FlushInterval time.Duration
	// Logger gets recovery's and truncation's messages; nil discards them.
	Logger *slog.Logger
	// Now is the clock of FlushInterval; nil is time.Now.
	Now func() time.Time
	// OnFail, when set, is called once, with the error, when a write first
	// fails and the log turns to refusing writes (ErrFailed): its disk is
	// full or broken. It is called under the log's write lock, so it must
	// not call the log. Kafka's LogDirFailureChannel.
	OnFail func(error)
}

// Defaults, Kafka's.
const (
	DefaultSegmentBytes       = 1 << 30
	DefaultSegmentIndexBytes  = 10 << 20
	DefaultIndexIntervalBytes = 4096
	DefaultMaxBatchBytes      = 1<<20 + 12
	DefaultSegmentTime        = 7 * 24 * time.Hour
)

func (c Config) withDefaults() (Config, error) {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.SegmentBytes, DefaultSegmentBytes)
	def(&c.SegmentIndexBytes, DefaultSegmentIndexBytes)
	def(&c.IndexIntervalBytes, DefaultIndexIntervalBytes)
	def(&c.MaxBatchBytes, DefaultMaxBatchBytes)
	if c.SegmentTime == 0 {
		c.SegmentTime = DefaultSegmentTime
	}
	switch {
	case c.SegmentBytes < batchHeaderSize || c.SegmentBytes > math.MaxInt32:
		return c, fmt.Errorf("partlog: SegmentBytes %d is outside [%d, %d]", c.SegmentBytes, batchHeaderSize, math.MaxInt32)
	case c.SegmentIndexBytes < indexEntrySize:
		return c, fmt.Errorf("partlog: SegmentIndexBytes %d is under one entry (%d)", c.SegmentIndexBytes, indexEntrySize)
	case c.IndexIntervalBytes < 0, c.MaxBatchBytes < batchHeaderSize, c.FlushMessages < 0, c.FlushInterval < 0, c.SegmentTime < 0:
		return c, fmt.Errorf("partlog: negative or too small IndexIntervalBytes, MaxBatchBytes, FlushMessages, FlushInterval or SegmentTime")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

func (c *Config) maxIndexEntries() int64 { return c.SegmentIndexBytes / indexEntrySize }

// Retention is what Retain deletes by. The zero value deletes nothing.
type Retention struct {
	// Time deletes sealed segments whose newest batch timestamp is older
	// than this (retention.ms); 0 or less keeps them (Kafka's -1).
	Time time.Duration
	// Bytes deletes the oldest sealed segments while the log without them
	// still holds at least this many bytes (retention.bytes); 0 or less has
	// no limit (Kafka's -1).
	Bytes int64
	// ProducerIDExpiration forgets idempotent producers whose last batch's
	// timestamp is older than this (producer.id.expiration.ms); 0 keeps
	// them while their batches are in the log.
	ProducerIDExpiration time.Duration
}
