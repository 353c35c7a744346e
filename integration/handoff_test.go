package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest/keelproc"
)

// maxRestartPause bounds the unavailability of one restart in a rolling
// restart: a leadership transfer and a takeover (20-40 ms here), with room
// for a loaded machine, below what a transfer the target loses costs: an
// election after it (0.8-1.1 s here, when the target was told to take over
// before it held the leader's last entry).
const maxRestartPause = 600 * time.Millisecond

// TestRollingRestartHandsOffLeadership restarts every controller in turn,
// with SIGTERM, while one client writes back to back: each round stops the
// active controller if it has not been restarted yet (so leadership moves
// at least once, usually twice), otherwise a follower that has not, starts
// it again and waits until it has caught up before the next. A leader being
// stopped transfers leadership first, so writes pause for a leadership
// transfer, not an election timeout. The test reports each restart's
// unavailability window: the longest gap between two acknowledged writes
// from the stop until the node is back and caught up.
func TestRollingRestartHandsOffLeadership(t *testing.T) {
	c := startCluster(t, 3)
	c.WaitForActive(t, activeTimeout)

	w := startWriter(c)
	t.Cleanup(w.stop)
	restarted := map[int32]bool{}
	var gaps []time.Duration
	for round := 1; round <= len(c.IDs()); round++ {
		leader, epoch := c.WaitForActive(t, activeTimeout)
		id := leader
		if restarted[id] {
			for _, other := range c.IDs() {
				if !restarted[other] {
					id = other
					break
				}
			}
		}
		restarted[id] = true
		role := "follower"
		if id == leader {
			role = "active controller"
		}
		w.waitWrites(t, 20)
		before := time.Now()
		c.Stop(id) // SIGTERM, and exit status 0
		if id == leader {
			if !strings.Contains(c.node(leader).Output(), "leadership transferred before stopping") {
				t.Fatalf("round %d: node %d did not transfer leadership before stopping; output ends:\n%s",
					round, leader, keelproc.LastLines(c.node(leader).Output(), 15))
			}
			next, nextEpoch := c.WaitForActive(t, activeTimeout)
			if next == leader || nextEpoch <= epoch {
				t.Fatalf("round %d: active %d epoch %d after stopping leader %d at epoch %d", round, next, nextEpoch, leader, epoch)
			}
		}
		c.Restart(id)
		// Caught up (what `keel quorum status` shows) before the next.
		c.WaitForApplied(t, c.IDs(), c.appendNoOp(t, 10*time.Second).Index)
		w.waitWrites(t, 20)
		gap := w.longestGapSince(before)
		gaps = append(gaps, gap)
		now, nowEpoch := c.WaitForActive(t, activeTimeout)
		t.Logf("restart %d: node %d (%s) stopped and restarted; node %d active at epoch %d; writes paused for at most %.1fms",
			round, id, role, now, nowEpoch, ms(gap))
		if gap > maxRestartPause {
			t.Fatalf("restart %d: writes paused for %s", round, gap)
		}
	}
	if len(restarted) != len(c.IDs()) {
		t.Fatalf("restarted %v, want every node", restarted)
	}
	w.stop()
	if errs := w.failures(); len(errs) > 0 {
		t.Logf("%d writes were refused or timed out during the restarts and retried; first: %s", len(errs), errs[0])
	}
	slices.Sort(gaps)
	t.Logf("rolling restart: longest write pause per restart median %.1fms max %.1fms", ms(gaps[len(gaps)/2]), ms(gaps[len(gaps)-1]))
}

// writer commits no-ops back to back and records when each was acknowledged.
type writer struct {
	mu     sync.Mutex
	acks   []time.Time
	errs   []string
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func startWriter(c *Cluster) *writer {
	ctx, cancel := context.WithCancel(context.Background())
	w := &writer{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := c.Client().AppendNoOp(wctx, newRequestID())
			wcancel()
			now := time.Now()
			w.mu.Lock()
			if err == nil {
				w.acks = append(w.acks, now)
			} else if ctx.Err() == nil {
				w.errs = append(w.errs, err.Error())
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *writer) stop() {
	w.once.Do(func() { w.cancel(); <-w.done })
}

// waitWrites waits until n more writes have been acknowledged.
func (w *writer) waitWrites(t *testing.T, n int) {
	t.Helper()
	w.mu.Lock()
	want := len(w.acks) + n
	w.mu.Unlock()
	poll.UntilState(t, 30*time.Second, fmt.Sprintf("%d writes acknowledged", want), func() (bool, string) {
		w.mu.Lock()
		got := len(w.acks)
		w.mu.Unlock()
		return got >= want, fmt.Sprintf("%d acknowledged; failures: %v", got, w.failures())
	})
}

// longestGapSince is the longest time between two acknowledgements from the
// last one before since onwards.
func (w *writer) longestGapSince(since time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	i, _ := slices.BinarySearchFunc(w.acks, since, func(a, b time.Time) int { return a.Compare(b) })
	i = max(i-1, 0)
	var longest time.Duration
	for ; i+1 < len(w.acks); i++ {
		longest = max(longest, w.acks[i+1].Sub(w.acks[i]))
	}
	return longest
}

func (w *writer) failures() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.errs)
}
