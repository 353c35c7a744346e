package kafka

import (
	"container/list"
	"context"
	"sync"
)

// budget is a pool of request bytes (Kafka's queued.max.request.bytes
// memory pool): a connection takes a frame's bytes before it reads the
// frame, and gives them back once the request's answer is written, so the
// requests a broker holds in memory never add up to more than the pool.
// Takers wait in arrival order: a large frame is not starved by a stream
// of small ones. A take larger than the whole pool is cut to the pool, so
// that it waits only until the pool is empty and then proceeds alone: it
// is never refused and never waits forever.
type budget struct {
	capacity int64

	mu      sync.Mutex
	used    int64
	waiters list.List // of *budgetWaiter, oldest first
	// onChange, when set, is told the bytes in use after each change
	// (a metric); called under mu.
	onChange func(used int64)
}

type budgetWaiter struct {
	n     int64
	ready chan struct{} // closed when the bytes are granted
}

// newBudget is a pool of capacity bytes; capacity <= 0 is unbounded (nil).
func newBudget(capacity int64) *budget {
	if capacity <= 0 {
		return nil
	}
	return &budget{capacity: capacity}
}

// acquire takes n bytes, waiting while they do not fit, and returns what
// was taken (n, or the capacity if n is larger), to give back with
// release, and whether it had to wait. It fails only when ctx ends first,
// having taken nothing. A nil budget takes nothing and never waits.
func (b *budget) acquire(ctx context.Context, n int64) (taken int64, waited bool, err error) {
	if b == nil || n <= 0 {
		return 0, false, nil
	}
	n = min(n, b.capacity)
	b.mu.Lock()
	if b.waiters.Len() == 0 && b.used+n <= b.capacity {
		b.used += n
		b.changed()
		b.mu.Unlock()
		return n, false, nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	e := b.waiters.PushBack(w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return n, true, nil
	case <-ctx.Done():
		b.mu.Lock()
		defer b.mu.Unlock()
		select {
		case <-w.ready:
			// Granted meanwhile: hand the bytes on.
			b.releaseLocked(n)
		default:
			b.waiters.Remove(e)
			// The waiter gone may have held back smaller ones behind it.
			b.grantLocked()
		}
		return 0, true, ctx.Err()
	}
}

// release gives back n bytes taken by acquire.
func (b *budget) release(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.releaseLocked(n)
}

func (b *budget) releaseLocked(n int64) {
	b.used -= n
	if b.used < 0 {
		panic("kafka: request budget released more than it lent")
	}
	b.changed()
	b.grantLocked()
}

// grantLocked grants the waiters at the head of the line whose bytes fit.
func (b *budget) grantLocked() {
	for e := b.waiters.Front(); e != nil; e = b.waiters.Front() {
		w := e.Value.(*budgetWaiter)
		if b.used+w.n > b.capacity {
			return
		}
		b.waiters.Remove(e)
		b.used += w.n
		b.changed()
		close(w.ready)
	}
}

func (b *budget) changed() {
	if b.onChange != nil {
		b.onChange(b.used)
	}
}

// inUse is the bytes taken and not given back.
func (b *budget) inUse() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
