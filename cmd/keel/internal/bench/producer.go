package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keel-dev/keel/internal/poll"
)

// load is what a set of franz-go producers writes: RecordSize-byte records
// of random bytes to a topic (Kafka's default partitioner: records without
// keys stick to one partition per batch), from Producers clients at once.
type load struct {
	seeds      []string
	topic      string
	producers  int
	recordSize int
	allISR     bool // acks=all (idempotent) rather than acks=1
	// rate, if above 0, paces the producers together at that many records
	// per second; 0 produces as fast as the cluster acknowledges (each
	// client keeps franz-go's default 10,000 records buffered).
	rate float64
	// warmup from the first acknowledgement (the clients have their
	// metadata and producer ids by then), then window: the
	// acknowledgements that arrive in the window are counted (and, with
	// latencies, timed).
	warmup, window time.Duration
	// records, if above 0, stops the producers after that many records in
	// all instead of after the window; every acknowledgement counts.
	records   int64
	latencies bool
	// meters, if set, measure the window (not with records).
	meters *meters
}

// loadResult is what a load did.
type loadResult struct {
	// acked in the window (every one, with records), and their bytes.
	acked int64
	bytes int64
	// took is the window, or with records from the first record handed
	// over until the last acknowledged.
	took time.Duration
	// failed is every record whose produce failed.
	failed int64
	// latencies of the records produced and acknowledged in the window.
	latencies []time.Duration
	// use is the machine's during the window, if the load had meters.
	use stepUse
}

// bytesPerS and recordsPerS are the load's throughput.
func (r loadResult) bytesPerS() float64   { return float64(r.bytes) / r.took.Seconds() }
func (r loadResult) recordsPerS() float64 { return float64(r.acked) / r.took.Seconds() }

// run runs the load and waits until every record produced is acknowledged
// or failed.
func (l load) run(ctx context.Context) (loadResult, error) {
	acks := kgo.LeaderAck()
	if l.allISR {
		acks = kgo.AllISRAcks()
	}
	clients := make([]*kgo.Client, l.producers)
	for i := range clients {
		cl, err := kgo.NewClient(kafkaOpts(l.seeds, l.topic, acks, l.allISR)...)
		if err != nil {
			for _, c := range clients[:i] {
				c.Close()
			}
			return loadResult{}, err
		}
		clients[i] = cl
	}
	defer func() {
		for _, cl := range clients {
			cl.Close()
		}
	}()
	value := make([]byte, l.recordSize)
	_, _ = rand.Read(value)

	var use stepUse
	var (
		acked, failed, handed atomic.Int64
		mu                    sync.Mutex
		lat                   []time.Duration
		lastAck               atomic.Int64 // unix nanos
	)
	start := time.Now()
	// The window, in unix nanoseconds: none until the first ack.
	var from, to atomic.Int64
	from.Store(math.MaxInt64)
	counted := func(t time.Time) bool {
		return l.records > 0 || (t.UnixNano() >= from.Load() && t.UnixNano() <= to.Load())
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var sent float64
			for {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				if l.rate > 0 {
					// Pacing, not synchronisation: the producer's share of
					// the rate, caught up each millisecond.
					due := time.Since(start).Seconds() * l.rate / float64(l.producers)
					if sent >= due {
						time.Sleep(time.Millisecond)
						continue
					}
				}
				if l.records > 0 && handed.Add(1) > l.records {
					return
				}
				sent++
				t0 := time.Now()
				cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
					if err != nil {
						failed.Add(1)
						return
					}
					now := time.Now()
					if lastAck.Swap(now.UnixNano()) == 0 && l.records == 0 {
						f := now.Add(l.warmup)
						to.Store(f.Add(l.window).UnixNano())
						from.Store(f.UnixNano())
					}
					if !counted(now) {
						return
					}
					acked.Add(1)
					if l.latencies && t0.UnixNano() >= from.Load() {
						mu.Lock()
						lat = append(lat, now.Sub(t0))
						mu.Unlock()
					}
				})
			}
		}()
	}
	if l.records == 0 {
		_ = poll.Wait(ctx, 2*time.Minute, 5*time.Millisecond, "a first acknowledgement", func() (bool, error) {
			// to, not lastAck: the first acknowledgement sets it just after.
			return to.Load() != 0 || failed.Load() > 0, nil
		})
		// The window is known now: timers, not polling.
		if end := to.Load(); end > 0 {
			var mark stepMark
			if l.meters != nil {
				sleepUntil(ctx, time.Unix(0, end).Add(-l.window))
				mark = l.meters.begin()
			}
			sleepUntil(ctx, time.Unix(0, end))
			if l.meters != nil {
				use = l.meters.end(mark)
			}
		}
		close(stop)
	}
	wg.Wait()
	for _, cl := range clients {
		fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := cl.Flush(fctx)
		cancel()
		if err != nil {
			return loadResult{}, fmt.Errorf("flush the producers: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return loadResult{}, err
	}
	res := loadResult{acked: acked.Load(), failed: failed.Load(), latencies: lat, took: l.window, use: use}
	if l.records > 0 {
		res.took = time.Unix(0, lastAck.Load()).Sub(start)
	}
	res.bytes = res.acked * int64(l.recordSize)
	if res.acked == 0 || res.took <= 0 {
		return res, fmt.Errorf("%w (%d failed)", errNoAcks, res.failed)
	}
	return res, nil
}

// sleepUntil waits until t, or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}
