package bench

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"
)

// gapPeriod is how often the gap sampler asks to wake; gapLong is a gap a
// reader should see counted: longer than any produce or heartbeat p50.
const (
	gapPeriod = time.Millisecond
	gapLong   = 10 * time.Millisecond
	// idleBaseline is how long the sampler runs before anything starts:
	// the machine's own stalls (hypervisor steal, other work).
	idleBaseline = 2 * time.Second
)

// gapSampler is a goroutine of the bench process that sleeps gapPeriod
// at a time and notes how late each wake is. A latency figure of the same
// step then tells a stall of the machine (every process frozen, the
// sampler too) from Keel's own slowness (the sampler on time). It runs in
// the bench process, so the bench's own garbage collections and busy
// cores delay it too: a stall it sees is one a client of the bench saw.
type gapSampler struct {
	mu sync.Mutex
	// late is how late each wake was, in µs, in order: 4 bytes a
	// millisecond, 14 MB an hour.
	late []uint32
	stop chan struct{}
	done chan struct{}
}

func startGapSampler() *gapSampler {
	g := &gapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(g.done)
		prev := time.Now()
		for {
			select {
			case <-g.stop:
				return
			default:
			}
			time.Sleep(gapPeriod)
			now := time.Now()
			late := max(0, now.Sub(prev)-gapPeriod)
			prev = now
			g.mu.Lock()
			g.late = append(g.late, uint32(min(late.Microseconds(), math.MaxUint32)))
			g.mu.Unlock()
		}
	}()
	return g
}

func (g *gapSampler) close() {
	close(g.stop)
	<-g.done
}

// mark is where a step starts in the samples.
func (g *gapSampler) mark() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.late)
}

// since sums up the wakes after mark.
func (g *gapSampler) since(mark int) gapStats {
	g.mu.Lock()
	late := slices.Clone(g.late[min(mark, len(g.late)):])
	g.mu.Unlock()
	ds := make([]time.Duration, len(late))
	for i, us := range late {
		ds[i] = time.Duration(us) * time.Microsecond
	}
	return gapStatsOf(ds)
}

// idle runs the sampler alone for d (or until ctx ends): the machine's
// baseline.
func (g *gapSampler) idle(ctx context.Context, d time.Duration) gapStats {
	m := g.mark()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return g.since(m)
}

// gapStats sums up a step's scheduling gaps: how late the sampler woke.
type gapStats struct {
	wakes int
	max   time.Duration
	p99   time.Duration
	long  int // gaps above gapLong
}

func gapStatsOf(late []time.Duration) gapStats {
	s := gapStats{wakes: len(late), max: Percentile(late, 1), p99: Percentile(late, 0.99)}
	for _, d := range late {
		if d > gapLong {
			s.long++
		}
	}
	return s
}
