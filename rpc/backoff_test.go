package rpc

import (
	"context"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

// TestClient_ResetBackoffRedialsAtOnce: a connection whose dials keep
// failing waits out gRPC's growing back-off between them; ResetBackoff
// makes it dial again at once. An address never dialled is left alone.
func TestClient_ResetBackoffRedialsAtOnce(t *testing.T) {
	const addr = "127.0.0.1:1"
	var mu sync.Mutex
	var dials []time.Time
	refuse := func(context.Context, string) (net.Conn, error) {
		mu.Lock()
		dials = append(dials, time.Now())
		mu.Unlock()
		return nil, syscall.ECONNREFUSED
	}
	seen := func() (n int, gap time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if n = len(dials); n >= 2 {
			gap = dials[n-1].Sub(dials[n-2])
		}
		return n, gap
	}
	c, err := NewClient([]string{addr}, WithDialer(refuse))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.ResetBackoff(addr)
	if n, _ := seen(); n != 0 {
		t.Fatalf("%d dials of an address never used", n)
	}
	cl, err := c.Controller(addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, _ = cl.DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{})
	cancel()
	// The back-off grows by 1.6 from 50 ms: wait until it is long.
	const long = 400 * time.Millisecond
	poll.Until(t, 20*time.Second, "gRPC's back-off between failed dials to pass "+long.String(), func() bool {
		_, gap := seen()
		return gap >= long
	})
	before, _ := seen()
	reset := time.Now()
	c.ResetBackoff(addr)
	poll.Until(t, 10*time.Second, "a dial after ResetBackoff", func() bool {
		n, _ := seen()
		return n > before
	})
	// The next dial without the reset was at least 1.6 x 400 ms x 0.8 away.
	if took := time.Since(reset); took > long/2 {
		t.Fatalf("the dial came %v after ResetBackoff; want it at once, not after the back-off", took)
	}
}
