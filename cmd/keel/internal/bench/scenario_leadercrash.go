package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

// crashRun is one run of leader-crash.
type crashRun struct {
	// toAck is from the kill to the first record acknowledged by the new
	// leader; toLeader is from the kill until the controller names a new
	// leader.
	toAck, toLeader time.Duration
	// failed records, whose produce returned an error; retried records,
	// handed to the client before the kill and acknowledged by the new
	// leader: in flight to the dead leader or queued for it, each sent
	// (again) to the new one; requestErrors are produce requests that
	// failed on the connection (written or read).
	failed, retried, requestErrors int64
	// use is the machine's from the kill until the new leader has
	// acknowledged half a second of writes.
	use stepUse
}

// leaderCrash: kill -9 of the broker leading a partition while a producer
// writes to it with acks=all at a steady 1,000 records a second. The
// controller moves the leadership once the broker's session has expired
// (its --session-timeout, 9 s by default, unless --broker-session-timeout
// says otherwise); the producer's client finds the new leader in its
// metadata and sends its records there. Its median_s and max_s are the
// time from the kill to the first record acknowledged after it. The killed
// broker is restarted, and back in the ISR, before the next run.
func (r *runner) leaderCrash(ctx context.Context, dc *dataCluster) (Result, error) {
	var runs []crashRun
	for run := 1; run <= r.cfg.Runs; run++ {
		topic := fmt.Sprintf("bench-leader-crash-%d", run)
		if err := dc.createTopic(ctx, topic, 1); err != nil {
			return Result{}, err
		}
		parts, err := dc.describe(ctx, topic)
		if err != nil {
			return Result{}, err
		}
		victim := parts[0].GetLeader()
		statusf(r.cfg.Status, "leader-crash: run %d/%d: kill -9 of broker %d, leader of %s under %d acks=all records/s",
			run, r.cfg.Runs, victim, topic, leaderCrashRate)
		cr, err := r.crashOnce(ctx, dc, topic, victim)
		if err != nil {
			return Result{}, err
		}
		statusf(r.cfg.Status, "leader-crash: run %d/%d: new leader after %v, first write acknowledged after %v; %d retried, %d failed",
			run, r.cfg.Runs, cr.toLeader.Round(time.Millisecond), cr.toAck.Round(time.Millisecond), cr.retried, cr.failed)
		runs = append(runs, cr)
		if err := dc.q.StartNodes(ctx, dc.q.Broker(victim)); err != nil {
			return Result{}, fmt.Errorf("restart broker %d: %w", victim, err)
		}
		if err := dc.waitActive(ctx, victim); err != nil {
			return Result{}, err
		}
		if err := dc.deleteTopic(ctx, topic); err != nil {
			return Result{}, err
		}
	}
	return crashResult(r.cfg.Data, runs), nil
}

// crashResult sums up leader-crash's runs.
func crashResult(d DataConfig, runs []crashRun) Result {
	var toAck []time.Duration
	var toLeader []float64
	var failed, retried, reqErrs float64
	var steps []stepUse
	for _, cr := range runs {
		steps = append(steps, cr.use)
		toAck = append(toAck, cr.toAck)
		toLeader = append(toLeader, cr.toLeader.Seconds())
		failed += float64(cr.failed)
		retried += float64(cr.retried)
		reqErrs += float64(cr.requestErrors)
	}
	session := d.SessionTimeout
	if session == 0 {
		session = controller.DefaultSessionTimeout
	}
	return newResult(ScenarioLeaderCrash, 1, dataBrokers, toAck, withUse(steps,
		Figure{"session_timeout_s", session.Seconds()},
		Figure{"new_leader_median_s", Median(toLeader)},
		Figure{"new_leader_max_s", Max(toLeader)},
		Figure{"rate_records_per_s", leaderCrashRate},
		Figure{"failed_writes", failed},
		Figure{"retried_writes", retried},
		Figure{"produce_request_errors", reqErrs},
	)...)
}

// produceWatch watches the producer's connections: it counts produce
// requests that failed on the connection (written or read), and notes when
// a produce response was first read from a broker other than the victim
// after the kill. A response from the victim may still arrive just after
// the kill (it was on its way); an acknowledgement read after another
// broker's first produce response is the new leader's.
type produceWatch struct {
	errs   atomic.Int64
	victim atomic.Int32
	killed atomic.Bool
	other  atomic.Int64 // unix nanos of the first response from another broker after the kill
}

func (h *produceWatch) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil && key == int16(kmsg.Produce) {
		h.errs.Add(1)
	}
}

func (h *produceWatch) OnBrokerRead(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key != int16(kmsg.Produce) {
		return
	}
	if err != nil {
		h.errs.Add(1)
		return
	}
	if h.killed.Load() && meta.NodeID != h.victim.Load() {
		h.other.CompareAndSwap(0, time.Now().UnixNano())
	}
}

// fromNewLeader reports whether an acknowledgement at now came from the
// new leader.
func (h *produceWatch) fromNewLeader(now time.Time) bool {
	o := h.other.Load()
	return o != 0 && now.UnixNano() >= o
}

// crashOnce is one run: the producer, the kill, the waits.
func (r *runner) crashOnce(ctx context.Context, dc *dataCluster, topic string, victim int32) (crashRun, error) {
	var hook produceWatch
	hook.victim.Store(victim)
	cl, err := kgo.NewClient(append(kafkaOpts(dc.seeds(), topic, kgo.AllISRAcks(), true), kgo.WithHooks(&hook))...)
	if err != nil {
		return crashRun{}, err
	}
	defer cl.Close()
	value := make([]byte, r.cfg.Data.RecordSize)
	_, _ = rand.Read(value)

	var (
		mu       sync.Mutex
		killAt   time.Time // zero until the kill
		firstAck time.Time // the first acknowledgement after the kill
		acked    int
		after    int // acknowledged after the kill
		out      crashRun
	)
	pctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		start := time.Now()
		for sent := 0; pctx.Err() == nil; {
			if due := int(time.Since(start).Seconds() * leaderCrashRate); sent >= due {
				time.Sleep(time.Millisecond) // pacing
				continue
			}
			sent++
			mu.Lock()
			before := killAt.IsZero()
			mu.Unlock()
			// Produce blocks while the client's buffer is full (10,000
			// records: ten seconds of this producer).
			cl.Produce(pctx, &kgo.Record{Partition: 0, Value: value}, func(_ *kgo.Record, err error) {
				now := time.Now()
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if pctx.Err() == nil {
						out.failed++
					}
					return
				}
				acked++
				if killAt.IsZero() || !hook.fromNewLeader(now) {
					return
				}
				after++
				if firstAck.IsZero() {
					firstAck = now
				}
				if before {
					out.retried++
				}
			})
		}
	}()
	defer func() {
		stop()
		<-done
	}()
	count := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return acked, after
	}
	// A second of acknowledged writes first: the producer is steady.
	if err := poll.Wait(ctx, time.Minute, 5*time.Millisecond, "a second of acknowledged writes", func() (bool, error) {
		n, _ := count()
		return n >= leaderCrashRate, nil
	}); err != nil {
		return crashRun{}, err
	}
	mark := r.meters.begin()
	mu.Lock()
	killAt = time.Now()
	mu.Unlock()
	hook.killed.Store(true)
	if err := dc.q.Kill(dc.q.Broker(victim)); err != nil {
		return crashRun{}, err
	}
	timeout := 2*time.Minute + r.cfg.Data.SessionTimeout
	err = dc.waitISR(ctx, topic, timeout, func(p *keelpb.PartitionDescription) bool {
		return p.GetLeader() >= 0 && p.GetLeader() != victim && !slices.Contains(p.GetIsr(), victim)
	})
	if err != nil {
		return crashRun{}, fmt.Errorf("a new leader: %w", err)
	}
	out.toLeader = time.Since(killAt)
	// Half a second of writes acknowledged by the new leader: the retried
	// ones are all in by then.
	if err := poll.Wait(ctx, timeout, 5*time.Millisecond, "writes acknowledged by the new leader", func() (bool, error) {
		_, n := count()
		return n >= leaderCrashRate/2, nil
	}); err != nil {
		return crashRun{}, err
	}
	use := r.meters.end(mark)
	stop()
	<-done
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	_ = cl.Flush(fctx) // records cut short by stop fail, and are not counted
	cancel()
	mu.Lock()
	defer mu.Unlock()
	out.toAck = firstAck.Sub(killAt)
	out.requestErrors = hook.errs.Load()
	out.use = use
	return out, nil
}
