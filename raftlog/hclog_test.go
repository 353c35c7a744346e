package raftlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// recordHandler keeps every record it is given, including those given to
// handlers derived from it by WithAttrs.
type recordHandler struct {
	level slog.Level
	attrs []slog.Attr
	sink  *recordSink
}

type recordSink struct {
	mu      sync.Mutex
	records []slog.Record
}

func newRecordHandler(level slog.Level) *recordHandler {
	return &recordHandler{level: level, sink: &recordSink{}}
}

func (h *recordHandler) records() []slog.Record {
	h.sink.mu.Lock()
	defer h.sink.mu.Unlock()
	return slices.Clone(h.sink.records)
}

func (h *recordHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.sink.mu.Lock()
	defer h.sink.mu.Unlock()
	r.AddAttrs(h.attrs...)
	h.sink.records = append(h.sink.records, r)
	return nil
}
func (h *recordHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &recordHandler{level: h.level, attrs: append(slices.Clone(h.attrs), as...), sink: h.sink}
}
func (h *recordHandler) WithGroup(string) slog.Handler { return h }

func attrsOf(r slog.Record) map[string]string {
	m := map[string]string{}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	return m
}

func TestHCLogAdapter_Levels(t *testing.T) {
	tests := []struct {
		name string
		log  func(hclog.Logger)
		want slog.Level
	}{
		{"trace", func(l hclog.Logger) { l.Trace("m") }, slog.LevelDebug},
		{"debug", func(l hclog.Logger) { l.Debug("m") }, slog.LevelDebug},
		{"info", func(l hclog.Logger) { l.Info("m") }, slog.LevelInfo},
		{"warn", func(l hclog.Logger) { l.Warn("m") }, slog.LevelWarn},
		{"error", func(l hclog.Logger) { l.Error("m") }, slog.LevelError},
		{"log trace", func(l hclog.Logger) { l.Log(hclog.Trace, "m") }, slog.LevelDebug},
		{"log info", func(l hclog.Logger) { l.Log(hclog.Info, "m") }, slog.LevelInfo},
		{"log error", func(l hclog.Logger) { l.Log(hclog.Error, "m") }, slog.LevelError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newRecordHandler(slog.LevelDebug)
			tt.log(newHCLogAdapter(slog.New(h), "raft"))
			recs := h.records()
			if len(recs) != 1 {
				t.Fatalf("got %d records, want 1", len(recs))
			}
			if got := recs[0].Level; got != tt.want {
				t.Errorf("level = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHCLogAdapter_NamesArgsAndFiltering(t *testing.T) {
	h := newRecordHandler(slog.LevelInfo)
	var l hclog.Logger = newHCLogAdapter(slog.New(h), "raft")
	l = l.Named("net").With("peer", "2")
	l.Debug("filtered out")
	l.Info("hello", "error", "x")

	recs := h.records()
	if len(recs) != 1 {
		t.Fatalf("got %d records, want 1 (Debug must be filtered at Info)", len(recs))
	}
	r := recs[0]
	got := attrsOf(r)
	for k, want := range map[string]string{"logger": "raft.net", "peer": "2", "error": "x"} {
		if got[k] != want {
			t.Errorf("attr %s = %q, want %q (all: %v)", k, got[k], want, got)
		}
	}
	if l.Name() != "raft.net" || l.IsDebug() || !l.IsInfo() || l.GetLevel() != hclog.Info {
		t.Errorf("Name=%q IsDebug=%v IsInfo=%v GetLevel=%v", l.Name(), l.IsDebug(), l.IsInfo(), l.GetLevel())
	}
	if src := r.Source(); src == nil || !strings.HasSuffix(src.File, "hclog_test.go") {
		t.Errorf("source = %+v, want the caller in hclog_test.go", src)
	}
}

func TestHCLogAdapter_StandardLogger(t *testing.T) {
	var buf bytes.Buffer
	l := newHCLogAdapter(slog.New(slog.NewTextHandler(&buf, nil)), "raft")
	l.StandardLogger(nil).Print("from std")
	if out := buf.String(); !strings.Contains(out, "from std") || !strings.Contains(out, "logger=raft") {
		t.Errorf("output %q lacks message or logger name", out)
	}
}

func TestHCLogValues(t *testing.T) {
	tests := []struct {
		name string
		args []any
		want []any
	}{
		{"plain", []any{"k", 1}, []any{"k", 1}},
		{"fmt", []any{"servers", hclog.Fmt("%+v", []int{1, 2})}, []any{"servers", "[1 2]"}},
		{"percent", []any{"p", hclog.Fmt("%0.2f%%", 50.0)}, []any{"p", "50.00%"}},
		{"hex", []any{"h", hclog.Hex(255)}, []any{"h", "0xff"}},
		{"octal", []any{"o", hclog.Octal(8)}, []any{"o", "010"}},
		{"binary", []any{"b", hclog.Binary(5)}, []any{"b", "0b101"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hclogValues(tt.args); !slices.Equal(got, tt.want) {
				t.Errorf("hclogValues(%v) = %v, want %v", tt.args, got, tt.want)
			}
		})
	}
}

// fakeRaft stands for *raft.Raft as raft logs it: no exported fields, a String.
type fakeRaft struct{ addr string }

func (r *fakeRaft) String() string { return "Node at " + r.addr + " [Follower]" }

func TestHCLogAdapter_Relevel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		level hclog.Level
		msg   string
		args  []any
		want  slog.Level
	}{
		{"a stream ends at shutdown", hclog.Error, "failed to decode incoming command", []any{"error", raft.ErrTransportShutdown}, slog.LevelDebug},
		{"a peer closed the stream", hclog.Error, "failed to decode incoming command", []any{"error", fmt.Errorf("read: %w", syscall.ECONNRESET)}, slog.LevelDebug},
		{"an answer to a closed connection", hclog.Error, "failed to flush response", []any{"error", fmt.Errorf("write tcp: %w", net.ErrClosed)}, slog.LevelDebug},
		{"a peer sent garbage", hclog.Error, "failed to decode incoming command", []any{"error", errors.New("msgpack decode error")}, slog.LevelWarn},
		{"a leadership handoff", hclog.Error, "peer has newer term, stopping replication", []any{"peer", raft.Server{ID: "2"}}, slog.LevelInfo},
		{"a follower behind the log gets a snapshot", hclog.Error, "failed to get log", []any{"index", 90, "error", raft.ErrLogNotFound}, slog.LevelDebug},
		{"a log store that fails", hclog.Error, "failed to get log", []any{"index", 90, "error", errors.New("i/o error")}, slog.LevelError},
		{"a peer down, heartbeat (peerWatch tells)", hclog.Error, "failed to heartbeat to", []any{"peer", "127.0.0.1:1", "error", io.EOF}, slog.LevelDebug},
		{"a peer down, append", hclog.Error, "failed to appendEntries to", []any{"peer", raft.Server{ID: "2"}, "error", io.EOF}, slog.LevelDebug},
		{"a peer down, pipeline", hclog.Error, "failed to pipeline appendEntries", []any{"peer", raft.Server{ID: "2"}, "error", io.EOF}, slog.LevelDebug},
		{"a peer down, lease", hclog.Warn, "failed to contact", []any{"server-id", raft.ServerID("2"), "time", time.Second}, slog.LevelDebug},
		{"a quorum lost", hclog.Warn, "failed to contact quorum of nodes, stepping down", nil, slog.LevelWarn},
		{"the first election", hclog.Warn, "heartbeat timeout reached, starting election", []any{"last-leader-addr", raft.ServerAddress(""), "last-leader-id", raft.ServerID("")}, slog.LevelInfo},
		{"a leader lost", hclog.Warn, "heartbeat timeout reached, starting election", []any{"last-leader-addr", raft.ServerAddress("127.0.0.1:1"), "last-leader-id", raft.ServerID("2")}, slog.LevelWarn},
		{"a returning voter's pre-vote", hclog.Warn, "rejecting pre-vote request since we have a leader", []any{"from", raft.ServerAddress("127.0.0.1:1")}, slog.LevelInfo},
		{"a returning voter's vote", hclog.Warn, "rejecting vote request since we have a leader", []any{"from", raft.ServerAddress("127.0.0.1:1")}, slog.LevelInfo},
		{"a candidate without a quorum", hclog.Warn, "Election timeout reached, restarting election", nil, slog.LevelWarn},
		{"a peer down, voting", hclog.Error, "failed to make requestVote RPC", []any{"error", io.EOF}, slog.LevelInfo},
		{"a snapshot not sent", hclog.Error, "failed to send snapshot to", []any{"error", io.EOF}, slog.LevelWarn},
		{"anything else keeps its level", hclog.Error, "failed to persist vote", []any{"error", errors.New("disk full")}, slog.LevelError},
		{"info stays info", hclog.Info, "failed to get log", nil, slog.LevelInfo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newRecordHandler(slog.LevelDebug)
			newHCLogAdapter(slog.New(h), "raft").Log(tc.level, tc.msg, tc.args...)
			recs := h.records()
			if len(recs) != 1 || recs[0].Level != tc.want {
				t.Fatalf("%q logged as %v, want %v", tc.msg, recs, tc.want)
			}
		})
	}
}

// In JSON every value raft logs keeps what the text format shows of it.
func TestHCLogAdapter_JSONKeepsEveryField(t *testing.T) {
	var buf bytes.Buffer
	a := newHCLogAdapter(slog.New(slog.NewJSONHandler(&buf, nil)), "raft")
	a.Info("entering follower state", "follower", &fakeRaft{"127.0.0.1:9091"}, "leader-address", raft.ServerAddress("127.0.0.1:9092"), "leader-id", raft.ServerID("2"))
	a.Info("pipelining replication", "peer", raft.Server{Suffrage: raft.Voter, ID: "3", Address: "127.0.0.1:9093"}, "took", 1500*time.Millisecond)
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		lines = append(lines, m)
	}
	if got := lines[0]["follower"]; got != "Node at 127.0.0.1:9091 [Follower]" {
		t.Errorf("follower = %#v, want raft's String", got)
	}
	if lines[0]["leader-id"] != "2" || lines[0]["leader-address"] != "127.0.0.1:9092" {
		t.Errorf("leader = %v", lines[0])
	}
	if got := lines[1]["peer"]; got != "{Suffrage:Voter ID:3 Address:127.0.0.1:9093}" {
		t.Errorf("peer = %#v", got)
	}
	if got := lines[1]["took"]; got != "1.5s" {
		t.Errorf("took = %#v", got)
	}
}
