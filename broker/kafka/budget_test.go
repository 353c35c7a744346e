package kafka

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
)

// step is one move of a budget test: a taker (by name) acquires n bytes,
// releases what it took, or gives up waiting (cancel); then the takers in
// granted have their bytes, and those in waiting do not.
type step struct {
	op      string // "acquire", "release", "cancel"
	who     string
	n       int64
	granted []string
	waiting []string
	inUse   int64
}

// taker is one acquire in flight.
type taker struct {
	cancel context.CancelFunc
	done   chan struct{}
	taken  int64
	waited bool
	err    error
}

func TestBudget(t *testing.T) {
	tests := []struct {
		name     string
		capacity int64
		steps    []step
	}{
		{name: "fits at once and comes back", capacity: 10, steps: []step{
			{op: "acquire", who: "a", n: 4, granted: []string{"a"}, inUse: 4},
			{op: "acquire", who: "b", n: 6, granted: []string{"b"}, inUse: 10},
			{op: "release", who: "a", inUse: 6},
			{op: "release", who: "b", inUse: 0},
		}},
		{name: "waits until released", capacity: 10, steps: []step{
			{op: "acquire", who: "a", n: 8, granted: []string{"a"}, inUse: 8},
			{op: "acquire", who: "b", n: 4, waiting: []string{"b"}, inUse: 8},
			{op: "release", who: "a", granted: []string{"b"}, inUse: 4},
		}},
		{name: "a frame larger than the budget waits for it empty, then takes it all", capacity: 10, steps: []step{
			{op: "acquire", who: "a", n: 3, granted: []string{"a"}, inUse: 3},
			{op: "acquire", who: "big", n: 100, waiting: []string{"big"}, inUse: 3},
			{op: "release", who: "a", granted: []string{"big"}, inUse: 10},
			{op: "release", who: "big", inUse: 0},
		}},
		{name: "a frame larger than an empty budget proceeds at once", capacity: 10, steps: []step{
			{op: "acquire", who: "big", n: 1 << 30, granted: []string{"big"}, inUse: 10},
		}},
		{name: "first come first served: a small take waits behind a large one", capacity: 10, steps: []step{
			{op: "acquire", who: "a", n: 6, granted: []string{"a"}, inUse: 6},
			{op: "acquire", who: "large", n: 8, waiting: []string{"large"}, inUse: 6},
			{op: "acquire", who: "small", n: 3, waiting: []string{"large", "small"}, inUse: 6},
			{op: "release", who: "a", granted: []string{"large"}, waiting: []string{"small"}, inUse: 8},
			{op: "release", who: "large", granted: []string{"small"}, inUse: 3},
		}},
		{name: "a waiter that gives up takes nothing and lets those behind it in", capacity: 10, steps: []step{
			{op: "acquire", who: "a", n: 6, granted: []string{"a"}, inUse: 6},
			{op: "acquire", who: "large", n: 8, waiting: []string{"large"}, inUse: 6},
			{op: "acquire", who: "small", n: 2, waiting: []string{"large", "small"}, inUse: 6},
			{op: "cancel", who: "large", granted: []string{"small"}, inUse: 8},
			{op: "release", who: "a", inUse: 2},
			{op: "release", who: "small", inUse: 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBudget(tt.capacity)
			takers := map[string]*taker{}
			for i, st := range tt.steps {
				switch st.op {
				case "acquire":
					ctx, cancel := context.WithCancel(context.Background())
					tk := &taker{cancel: cancel, done: make(chan struct{})}
					takers[st.who] = tk
					go func() {
						defer close(tk.done)
						tk.taken, tk.waited, tk.err = b.acquire(ctx, st.n)
					}()
				case "release":
					tk := takers[st.who]
					<-tk.done
					b.release(tk.taken)
					delete(takers, st.who)
				case "cancel":
					tk := takers[st.who]
					tk.cancel()
					<-tk.done
					if !errors.Is(tk.err, context.Canceled) || tk.taken != 0 {
						t.Fatalf("step %d: a canceled wait returned %d bytes, %v", i, tk.taken, tk.err)
					}
					delete(takers, st.who)
				}
				for _, who := range st.granted {
					select {
					case <-takers[who].done:
						if takers[who].err != nil {
							t.Fatalf("step %d: %s: %v", i, who, takers[who].err)
						}
					case <-time.After(5 * time.Second):
						t.Fatalf("step %d: %s still waits", i, who)
					}
				}
				for _, who := range st.waiting {
					// A waiter that is in the line is not granted: the
					// budget grants synchronously, under its lock, so by
					// the time inUse is read the grants are made.
					waitQueued(t, b, len(st.waiting))
					select {
					case <-takers[who].done:
						t.Fatalf("step %d: %s was granted %d bytes; it should wait", i, who, takers[who].taken)
					default:
					}
				}
				if got := b.inUse(); got != st.inUse {
					t.Fatalf("step %d: %d bytes in use, want %d", i, got, st.inUse)
				}
			}
			for who, tk := range takers {
				tk.cancel()
				<-tk.done
				b.release(tk.taken)
				delete(takers, who)
			}
			if got := b.inUse(); got != 0 {
				t.Fatalf("%d bytes in use once every taker is gone", got)
			}
		})
	}
}

// waitQueued waits until n takers wait in b's line.
func waitQueued(t *testing.T, b *budget, n int) {
	t.Helper()
	poll.UntilState(t, 5*time.Second, "takers in the budget's line", func() (bool, string) {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.waiters.Len() == n, fmt.Sprintf("%d waiting, want %d", b.waiters.Len(), n)
	})
}

// TestBudget_Unbounded: a nil budget (capacity 0) takes nothing.
func TestBudget_Unbounded(t *testing.T) {
	b := newBudget(0)
	n, waited, err := b.acquire(context.Background(), 1<<40)
	if n != 0 || waited || err != nil || b.inUse() != 0 {
		t.Fatalf("nil budget: took %d (waited %v, %v)", n, waited, err)
	}
	b.release(n)
}
