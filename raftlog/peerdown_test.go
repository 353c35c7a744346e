package raftlog

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// peerEvent is one request's outcome at an offset from the test's start.
type peerEvent struct {
	at        time.Duration
	term      uint64
	heartbeat bool
	failed    bool
}

func heartbeatReq(term uint64) *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{Term: term}
}

func appendReq(term uint64) *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{Term: term, PrevLogEntry: 7, LeaderCommitIndex: 7,
		Entries: []*raft.Log{{Index: 8}}}
}

// outage is n failed heartbeats every gap from start, in term 1.
func outage(start time.Duration, n int, gap time.Duration) []peerEvent {
	var evs []peerEvent
	for i := range n {
		evs = append(evs, peerEvent{at: start + time.Duration(i)*gap, term: 1, heartbeat: true, failed: true})
	}
	return evs
}

func ok(at time.Duration) peerEvent { return peerEvent{at: at, term: 1, heartbeat: true} }

type wantLine struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func TestPeerWatch_Lines(t *testing.T) {
	ms := time.Millisecond
	cat := func(parts ...[]peerEvent) []peerEvent {
		var out []peerEvent
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		events []peerEvent
		want   []wantLine
	}{
		{
			name:   "a healthy peer logs nothing",
			events: []peerEvent{ok(0), ok(30 * ms), ok(60 * ms)},
		},
		{
			name: "a peer down for 30 heartbeats: one WARN, then one INFO with how long and how many",
			events: cat([]peerEvent{ok(0)}, outage(100*ms, 30, 150*ms),
				[]peerEvent{{at: 200 * ms, term: 1, failed: true}, {at: 1200 * ms, term: 1, failed: true}}, []peerEvent{ok(5100 * ms)}),
			want: []wantLine{
				{slog.LevelWarn, PeerDownMessage, map[string]string{"peer": "2", "address": "127.0.0.1:9"}},
				{slog.LevelInfo, PeerBackMessage, map[string]string{"peer": "2", "down_for": "5s", "failed_heartbeats": "30", "failed_appends": "2"}},
			},
		},
		{
			name:   "a peer still down logs one WARN only",
			events: outage(0, 200, 150*ms),
			want:   []wantLine{{slog.LevelWarn, PeerDownMessage, nil}},
		},
		{
			name: "a peer that flaps: outages within the quiet window are counted in the next WARN",
			events: cat(outage(0, 2, 100*ms), []peerEvent{ok(300 * ms)},
				outage(2*time.Second, 1, 0), []peerEvent{ok(2100 * ms)},
				outage(4*time.Second, 1, 0), []peerEvent{ok(4100 * ms)},
				outage(11*time.Second, 1, 0), []peerEvent{ok(11200 * ms)}),
			want: []wantLine{
				{slog.LevelWarn, PeerDownMessage, nil},
				{slog.LevelInfo, PeerBackMessage, map[string]string{"down_for": "300ms", "failed_heartbeats": "2"}},
				{slog.LevelWarn, PeerDownMessage, map[string]string{"earlier_outages": "2"}},
				{slog.LevelInfo, PeerBackMessage, map[string]string{"down_for": "200ms", "failed_heartbeats": "1"}},
			},
		},
		{
			name: "an outage that starts in the quiet window and lasts is logged when the window ends",
			events: cat(outage(0, 1, 0), []peerEvent{ok(100 * ms)},
				outage(time.Second, 70, 150*ms), []peerEvent{ok(12 * time.Second)}),
			want: []wantLine{
				{slog.LevelWarn, PeerDownMessage, nil},
				{slog.LevelInfo, PeerBackMessage, map[string]string{"down_for": "100ms"}},
				{slog.LevelWarn, PeerDownMessage, map[string]string{"down_for": "9s"}},
				{slog.LevelInfo, PeerBackMessage, map[string]string{"down_for": "11s", "failed_heartbeats": "70"}},
			},
		},
		{
			name: "a new leadership forgets the old one's outage, and a late answer of the old one is ignored",
			events: cat(outage(0, 3, 150*ms),
				[]peerEvent{{at: time.Second, term: 2, heartbeat: true}, {at: 1100 * ms, term: 1, heartbeat: true, failed: true}}),
			want: []wantLine{{slog.LevelWarn, PeerDownMessage, nil}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newRecordHandler(slog.LevelInfo)
			w := newPeerWatch(slog.New(h))
			start := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
			for _, ev := range tc.events {
				req := appendReq(ev.term)
				if ev.heartbeat {
					req = heartbeatReq(ev.term)
				}
				var err error
				if ev.failed {
					err = errors.New("dial tcp 127.0.0.1:9: connect: connection refused")
				}
				w.answered("2", "127.0.0.1:9", req, err, start.Add(ev.at))
			}
			recs := h.records()
			if len(recs) != len(tc.want) {
				for _, r := range recs {
					t.Logf("%v %s %v", r.Level, r.Message, attrsOf(r))
				}
				t.Fatalf("%d lines, want %d", len(recs), len(tc.want))
			}
			for i, want := range tc.want {
				r := recs[i]
				if r.Level != want.level || r.Message != want.msg {
					t.Errorf("line %d: %v %q, want %v %q", i, r.Level, r.Message, want.level, want.msg)
				}
				got := attrsOf(r)
				for k, v := range want.attrs {
					if got[k] != v {
						t.Errorf("line %d: %s=%q, want %q (%v)", i, k, got[k], v, got)
					}
				}
			}
		})
	}
}

// A peer that is silent (paused, or cut off without a reset) fails no
// request before the transport's timeout: raft's lease check tells first,
// through the adapter, and the outage is one WARN and one INFO as well.
func TestPeerWatch_Silent(t *testing.T) {
	h := newRecordHandler(slog.LevelInfo)
	w := newPeerWatch(slog.New(h))
	a := newHCLogAdapter(slog.New(h), "raft")
	a.peers = w
	start := time.Now() // the adapter reads the clock
	w.answered("2", "127.0.0.1:9", heartbeatReq(1), nil, start)
	// raft's lease check, at Warn then (past three leases) at Debug; each
	// line itself at Debug.
	for i := 1; i <= 4; i++ {
		a.Warn("failed to contact", "server-id", raft.ServerID("2"), "time", time.Duration(i)*300*time.Millisecond)
	}
	a.Debug("failed to contact", "server-id", raft.ServerID("2"), "time", 2*time.Second)
	// The heartbeat held by the paused peer fails at the transport's
	// timeout, and the next is answered.
	w.answered("2", "127.0.0.1:9", heartbeatReq(1), errors.New("i/o timeout"), start.Add(10*time.Second))
	w.answered("2", "127.0.0.1:9", heartbeatReq(1), nil, start.Add(11*time.Second))

	recs := h.records()
	if len(recs) != 2 || recs[0].Level != slog.LevelWarn || recs[0].Message != PeerDownMessage ||
		recs[1].Level != slog.LevelInfo || recs[1].Message != PeerBackMessage {
		for _, r := range recs {
			t.Logf("%v %s %v", r.Level, r.Message, attrsOf(r))
		}
		t.Fatalf("%d lines; want one WARN and one INFO", len(recs))
	}
	if got := attrsOf(recs[0]); got["peer"] != "2" || got["down_for"] != "300ms" {
		t.Errorf("the WARN: %v; want peer 2 down for 300ms", got)
	}
	got := attrsOf(recs[1])
	if d, err := time.ParseDuration(got["down_for"]); err != nil || d < 11*time.Second || got["failed_heartbeats"] != "1" {
		t.Errorf("the INFO: %v; want down for 11.3s and 1 failed heartbeat", got)
	}
}

func TestIsHeartbeat(t *testing.T) {
	if !isHeartbeat(heartbeatReq(3)) {
		t.Error("a heartbeat is not recognised")
	}
	if isHeartbeat(appendReq(3)) {
		t.Error("an append is taken for a heartbeat")
	}
	if isHeartbeat(&raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 7, LeaderCommitIndex: 7}) {
		t.Error("an empty append (raft's commit-index nudge) is taken for a heartbeat")
	}
}
