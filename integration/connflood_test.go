package integration

// Connections must not be held for free: 3,000 connections that each sent
// half a TLS ClientHello once stayed open past 20s (9,990 made the leader
// step down), and 2,000 plaintext connections that sent only the raft
// marker were never closed.

import (
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/raftlog"
)

// openFDs is the number of file descriptors pid holds.
func openFDs(t testing.TB, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Skipf("no /proc to count a process's descriptors in: %v", err)
	}
	return len(fds)
}

// stranger is one connection of a flood: what it sent, and when the
// server closed it.
type stranger struct {
	kind   string
	opened time.Time
	closed time.Time // zero while open
}

// flood opens n connections to addr, the i-th sending starts[i%len(starts)]
// and then nothing, and watches each until the server closes it or the
// test ends (its cleanup closes them all). It returns once all are open.
func flood(t *testing.T, addr string, n int, starts map[string][]byte) (conns []*stranger, mu *sync.Mutex) {
	t.Helper()
	var kinds []string
	for k := range starts {
		kinds = append(kinds, k)
	}
	mu = &sync.Mutex{}
	conns = make([]*stranger, n)
	done := make(chan struct{})
	var watchers sync.WaitGroup
	var open []net.Conn
	t.Cleanup(func() {
		close(done)
		for _, c := range open {
			c.Close()
		}
		watchers.Wait()
	})
	// Dial from a few goroutines at once, as a flood would.
	const dialers = 64
	next := make(chan int)
	var dialed sync.WaitGroup
	var errMu sync.Mutex
	var dialErr error
	for range dialers {
		dialed.Add(1)
		go func() {
			defer dialed.Done()
			for i := range next {
				s := &stranger{kind: kinds[i%len(kinds)]}
				c, err := net.DialTimeout("tcp", addr, 10*time.Second)
				if err == nil {
					_, err = c.Write(starts[s.kind])
				}
				if err != nil {
					// The server may close a connection beyond its bound
					// before the write: that is a refusal, not an error.
					s.opened = time.Now()
					s.closed = s.opened
					if c == nil {
						errMu.Lock()
						dialErr = err
						errMu.Unlock()
					}
				} else {
					s.opened = time.Now()
				}
				mu.Lock()
				conns[i] = s
				if c != nil {
					open = append(open, c)
				}
				mu.Unlock()
				if c == nil || !s.closed.IsZero() {
					continue
				}
				watchers.Add(1)
				go func() {
					defer watchers.Done()
					buf := make([]byte, 512)
					for {
						if _, err := c.Read(buf); err != nil {
							select {
							case <-done: // closed by the test
							default:
								mu.Lock()
								s.closed = time.Now()
								mu.Unlock()
							}
							return
						}
						// A TLS alert, an HTTP/2 settings frame: read on
						// to the close.
					}
				}()
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	dialed.Wait()
	if dialErr != nil {
		t.Fatalf("dial %s: %v", addr, dialErr)
	}
	return conns, mu
}

// TestConnFlood_StrangersClosedLeaderKept floods the active controller
// with 3,000 connections that start a handshake and stop: half a TLS
// ClientHello, the raft marker alone, the marker and half a raft TLS
// handshake (and in plaintext: half the HTTP/2 preface, the marker alone,
// nothing at all). Each is closed within its deadline (5s to speak and to
// finish a handshake; in plaintext raft, 10s for a first request), most of
// them at once because the port holds at most 1,024 strangers; meanwhile
// the leader stays leader and commits, and its descriptors come back down.
func TestConnFlood_StrangersClosedLeaderKept(t *testing.T) {
	halfHello := []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03}
	for _, tt := range []struct {
		name     string
		tls      bool
		starts   map[string][]byte
		deadline time.Duration // the longest a stranger may be held
	}{
		{name: "TLS", tls: true, deadline: 5 * time.Second, starts: map[string][]byte{
			"half a ClientHello":             halfHello,
			"the raft marker":                {raftlog.RaftMarker},
			"half a raft TLS handshake":      append([]byte{raftlog.RaftMarker}, halfHello...),
			"half a ClientHello, one byte":   halfHello[:1],
			"the marker, then half a record": {raftlog.RaftMarker, 0x16, 0x03},
		}},
		{name: "plaintext", deadline: 10 * time.Second, starts: map[string][]byte{
			"half the HTTP/2 preface": []byte("PRI * HTTP/2.0\r\n"),
			"the raft marker":         {raftlog.RaftMarker},
			"nothing":                 nil,
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var opts []clusterOption
			if tt.tls {
				opts = append(opts, withTLS(newTestPKI(t)))
			}
			c := startCluster(t, 3, opts...)
			leader, epoch := c.WaitForActive(t, activeTimeout)
			c.appendNoOp(t, 10*time.Second) // the harness's client holds its connection
			nd := c.node(leader)
			fdsBefore, rssBefore := openFDs(t, nd.Pid()), peakRSS(t, nd.Pid())

			const n = 3000
			start := time.Now()
			conns, mu := flood(t, c.Addr(leader), n, tt.starts)
			t.Logf("%d connections opened in %v", n, time.Since(start).Round(time.Millisecond))

			// The leader commits with the port full of strangers.
			c.appendNoOp(t, 10*time.Second)

			// Every stranger is closed, each within its deadline (and
			// some slack for a loaded two-core machine).
			slack := 4 * time.Second
			poll.UntilState(t, tt.deadline+slack+10*time.Second, "every stranger to be closed", func() (bool, string) {
				mu.Lock()
				defer mu.Unlock()
				open := map[string]int{}
				for _, s := range conns {
					if s.closed.IsZero() {
						open[s.kind]++
					}
				}
				return len(open) == 0, fmt.Sprintf("still open after %v: %v", time.Since(start).Round(time.Second), open)
			})
			mu.Lock()
			longest := map[string]time.Duration{}
			atOnce := 0
			for _, s := range conns {
				d := s.closed.Sub(s.opened)
				longest[s.kind] = max(longest[s.kind], d)
				if d < time.Second {
					atOnce++
				}
			}
			mu.Unlock()
			t.Logf("closed at once (within 1s): %d of %d; the longest held, by kind: %v", atOnce, n, longest)
			for kind, d := range longest {
				if d > tt.deadline+slack {
					t.Errorf("%s: a connection was held %v; want at most its deadline, %v", kind, d.Round(time.Millisecond), tt.deadline)
				}
			}
			if atOnce < n-1024-100 { // the bound, and some that finished before the flood peaked
				t.Errorf("%d of %d connections were closed at once; want all but the 1,024 the port holds", atOnce, n)
			}

			// Still the leader, in the same epoch, and committing.
			if now, nowEpoch := c.WaitForActive(t, activeTimeout); now != leader || nowEpoch != epoch {
				t.Errorf("after the flood the active controller is %d in epoch %d; before it was %d in epoch %d", now, nowEpoch, leader, epoch)
			}
			c.appendNoOp(t, 10*time.Second)
			poll.UntilState(t, 20*time.Second, "the leader's descriptors to come back down", func() (bool, string) {
				fds := openFDs(t, nd.Pid())
				return fds <= fdsBefore+10, fmt.Sprintf("%d open, %d before the flood", fds, fdsBefore)
			})
			if out := nd.Output(); !strings.Contains(out, "too many connections whose peer has not yet authenticated") {
				t.Error("the leader did not log its refusals")
			}
			rssAfter := peakRSS(t, nd.Pid())
			t.Logf("leader %d: %d descriptors before the flood; peak RSS %d MiB before, %d MiB after (+%d MiB)",
				leader, fdsBefore, rssBefore>>20, rssAfter>>20, (rssAfter-rssBefore)>>20)
		})
	}
}
