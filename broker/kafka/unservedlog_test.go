package kafka

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// lockedBuffer is a log sink the server's goroutines write to.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// clientFrame is a request frame with header v1 from client id.
func clientFrame(key, version int16, corr int32, client string, body []byte) []byte {
	var h bytes.Buffer
	binary.Write(&h, binary.BigEndian, key)
	binary.Write(&h, binary.BigEndian, version)
	binary.Write(&h, binary.BigEndian, corr)
	binary.Write(&h, binary.BigEndian, int16(len(client)))
	h.WriteString(client)
	h.Write(body)
	return sized(h.Bytes())
}

// Requests Keel does not serve are each counted, by API, and logged once
// per client id and API: answered ones (EndTxn gets UNSUPPORTED_VERSION)
// and those that close the connection (a version of Metadata not served,
// an API key no one knows) alike.
func TestServer_UnservedCountedAndLoggedOncePerClient(t *testing.T) {
	var logs lockedBuffer
	reg := prometheus.NewRegistry()
	meta := newFakeMeta(t)
	s := startServer(t, 1, meta, NewMemoryBackend(), func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		c.Metrics = reg
	})
	endTxn := kmsg.NewEndTxnRequest()
	endTxn.SetVersion(1) // not flexible: header v1
	for _, client := range []string{"app-1", "app-1", "app-2"} {
		c := dial(t, s.Addr())
		for i := range 3 {
			writeFrame(t, c, clientFrame(endTxn.Key(), endTxn.GetVersion(), int32(i), client, endTxn.AppendTo(nil)))
			readFrame(t, c)
		}
		c.Close()
	}
	for range 2 {
		// Metadata v99 and API key 999 close the connection.
		for _, f := range [][]byte{clientFrame(3, 99, 1, "app-1", nil), clientFrame(999, 0, 1, "app-1", nil)} {
			c := dial(t, s.Addr())
			writeFrame(t, c, f)
			if _, err := c.Read(make([]byte, 1)); err == nil {
				t.Fatal("an unserved version was answered; want the connection closed")
			}
			c.Close()
		}
	}

	counts := counters(t, reg, MetricUnservedRequests, "api")
	for api, want := range map[string]float64{"EndTxn": 9, "Metadata": 2, "Unknown": 2} {
		if got := counts[api]; got != want {
			t.Errorf("%s{api=%q} = %v, want %v", MetricUnservedRequests, api, got, want)
		}
	}
	var lines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "does not serve") || strings.Contains(l, "request refused") {
			lines = append(lines, l)
		}
	}
	want := []string{"client_id=app-1 .* api=EndTxn", "client_id=app-2 .* api=EndTxn", "client_id=app-1 .* api=Metadata", "client_id=app-1 .* api=Unknown"}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d (one per client and API):\n%s", len(lines), len(want), strings.Join(lines, "\n"))
	}
	for i, w := range want {
		client, api, _ := strings.Cut(w, " .* ")
		if !strings.Contains(lines[i], "level=WARN") || !strings.Contains(lines[i], client) || !strings.Contains(lines[i], api) {
			t.Errorf("line %d: %s; want a WARN with %s and %s", i, lines[i], client, api)
		}
	}
}

// The memory of clients logged is bounded: past unservedSeenMax it starts
// over. So are the lines a minute, whoever asks.
func TestUnservedSeen_Bounded(t *testing.T) {
	var u unservedSeen
	now := time.Now()
	if !u.first("a", 26, now) || u.first("a", 26, now) {
		t.Fatal("a client's first request of an API is not told from its next")
	}
	if !u.first("a", 25, now) || !u.first("b", 26, now) {
		t.Fatal("another API or client is taken as seen")
	}
	logged := 3
	for i := range 2 * unservedSeenMax {
		// A client id a request, for minutes.
		if u.first(fmt.Sprint("client-", i), 26, now.Add(time.Duration(i)*time.Second)) {
			logged++
		}
		if n := len(u.seen); n > unservedSeenMax {
			t.Fatalf("%d remembered, want at most %d", n, unservedSeenMax)
		}
	}
	minutes := (2*unservedSeenMax + 59) / 60
	if logged > (minutes+1)*unservedLinesPerMinute {
		t.Fatalf("%d lines in %d minutes, want at most %d a minute", logged, minutes, unservedLinesPerMinute)
	}
	if !u.first("late", 26, now.Add(time.Hour)) {
		t.Fatal("a client is not logged after the bound's minute")
	}
}
