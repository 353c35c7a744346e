package integration

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest/keelproc"
	"github.com/keel-dev/keel/raftlog"
)

// A controller that is down for seconds is one WARN in the leader's log
// when it goes and one INFO when it is back, not a line per heartbeat
// (hashicorp/raft logs each failed one, about five a second).
func TestLogs_PeerDownIsOneWarnThenOneInfo(t *testing.T) {
	checkPeerOutageLines(t, "failed_heartbeats=", (*Cluster).Stop, (*Cluster).Start)
}

// A controller paused (or cut off without a reset) fails no request
// before the transport's timeout: the leader's lease check tells it is
// silent, in one WARN, and its return is one INFO.
func TestLogs_PeerPausedIsOneWarnThenOneInfo(t *testing.T) {
	checkPeerOutageLines(t, "down_for=", (*Cluster).Pause, (*Cluster).Resume)
}

// checkPeerOutageLines takes a follower down and back up, for seconds,
// and checks what the survivors logged about it: one WARN, and one INFO
// with want and how long it lasted.
func checkPeerOutageLines(t *testing.T, want string, down, up func(*Cluster, int32)) {
	t.Helper()
	c := startCluster(t, 3)
	leader, _ := c.WaitForActive(t, activeTimeout)
	peer := c.IDs()[0]
	if peer == leader {
		peer = c.IDs()[1]
	}
	// What the survivors logged before the outage is not this test's.
	from := map[int32]int{}
	for _, id := range c.IDs() {
		if id != peer {
			from[id] = len(logText(t, c.node(id)))
		}
	}
	survivorsLog := func() string {
		var b strings.Builder
		for id, n := range from {
			b.WriteString(logText(t, c.node(id))[n:])
		}
		return b.String()
	}

	down(c, peer)
	poll.Until(t, 30*time.Second, "the leader to log that the peer is down", func() bool {
		return strings.Contains(survivorsLog(), raftlog.PeerDownMessage)
	})
	// The outage itself: its length, not a wait for a condition, is what
	// this test is about (about 20 heartbeats).
	time.Sleep(4 * time.Second)
	up(c, peer)
	poll.Until(t, 30*time.Second, "the leader to log that the peer is back", func() bool {
		return strings.Contains(survivorsLog(), raftlog.PeerBackMessage)
	})

	addr := c.Addr(peer)
	var about []string
	for _, line := range strings.Split(survivorsLog(), "\n") {
		if strings.Contains(line, "level=DEBUG") {
			continue
		}
		if strings.Contains(line, addr) || strings.Contains(line, raftlog.PeerDownMessage) || strings.Contains(line, raftlog.PeerBackMessage) {
			about = append(about, line)
		}
	}
	t.Logf("the survivors' lines about node %d:\n%s", peer, strings.Join(about, "\n"))
	warns := 0
	var back string
	for _, line := range about {
		switch {
		case strings.Contains(line, "level=WARN"), strings.Contains(line, "level=ERROR"):
			warns++
		case strings.Contains(line, raftlog.PeerBackMessage):
			back = line
		}
	}
	// Raft's pipeline lines (aborted at the outage, started again at
	// its end) are INFO and once each.
	if warns != 1 || len(about) > 4 {
		t.Fatalf("%d lines about node %d (%s), %d of them WARN or ERROR; want one WARN and at most 4 lines:\n%s",
			len(about), peer, addr, warns, strings.Join(about, "\n"))
	}
	for _, w := range []string{"level=INFO", "down_for=", want} {
		if !strings.Contains(back, w) {
			t.Errorf("the line of the peer's return lacks %q: %s", w, back)
		}
	}
}

// logText is nd's whole log, every process of it.
func logText(t *testing.T, nd *keelproc.Node) string {
	t.Helper()
	b, err := os.ReadFile(nd.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
