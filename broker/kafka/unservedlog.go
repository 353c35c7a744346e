package kafka

import (
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A client that sends a request Keel does not serve usually sends it
// again: on every connection, or on every poll. Each is counted
// (keel_kafka_unserved_requests_total, by API), and logged once per client
// id and API, so that the log says who asks for what without a line per
// request.

// unservedSeenMax bounds the clients and APIs remembered as logged: a
// client that varies its client id must not grow the broker's memory. Past
// it the memory starts over, and a client is logged again.
const unservedSeenMax = 1024

// unservedLinesPerMinute bounds the lines, whoever asks: a client that
// varies its client id, before it has authenticated, must not fill the
// log. A client past the bound is logged at its next request once the
// minute is over.
const unservedLinesPerMinute = 30

// errNotServed marks a request refused, and its connection closed,
// because Keel does not serve its API or version: logged by noteUnserved,
// not as a malformed request.
var errNotServed = errors.New("not served")

type unservedKey struct {
	client string
	key    int16
}

// unservedSeen is the clients and APIs already logged.
type unservedSeen struct {
	mu   sync.Mutex
	seen map[unservedKey]struct{}
	// minute is when the current minute of lines began; lines, how many
	// it has had.
	minute time.Time
	lines  int
}

// first reports whether client's request of key, at now, is to be logged:
// the first seen (since the memory last started over), within the bound
// of lines a minute. It remembers the ones it logs.
func (u *unservedSeen) first(client string, key int16, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	k := unservedKey{client, key}
	if _, ok := u.seen[k]; ok {
		return false
	}
	if now.Sub(u.minute) >= time.Minute {
		u.minute, u.lines = now, 0
	}
	if u.lines >= unservedLinesPerMinute {
		return false
	}
	u.lines++
	if u.seen == nil || len(u.seen) >= unservedSeenMax {
		u.seen = make(map[unservedKey]struct{})
	}
	u.seen[k] = struct{}{}
	return true
}

// apiName names key as the metric's label does: kmsg's name, or "Unknown"
// for a key kmsg does not know (one label for all of them).
func apiName(key int16) string { return kmsg.NameForKey(key) }

// noteUnserved counts a request of an API or version Keel does not serve,
// and logs the client's first of the API. answer says what the client got.
func (s *Server) noteUnserved(c *conn, h header, answer string) {
	s.met.unservedRequest(apiName(h.key))
	client := ""
	if h.clientID != nil {
		client = *h.clientID
	}
	if !s.unserved.first(client, h.key, time.Now()) {
		return
	}
	remote := ""
	if c.raw != nil {
		remote = c.raw.RemoteAddr().String()
	}
	s.log.Warn("kafka listener: a client asked for an API Keel does not serve; its next such requests are counted, not logged",
		"client_id", client, "remote", remote, "api", apiName(h.key), "api_key", h.key, "version", h.version, "answer", answer)
}
