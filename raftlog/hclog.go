package raftlog

import (
	"context"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// hclogAdapter sends raft's hclog output to a slog.Logger, so that a Keel
// process has one log stream with one format and one level setting. The slog
// handler decides what is enabled; hclog's own level setting is ignored.
type hclogAdapter struct {
	logger  *slog.Logger // carries implied args already
	name    string
	implied []any
	// peers hears of the voters the leader cannot contact (raft's "failed
	// to contact" lines); nil: no one.
	peers *peerWatch
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func newHCLogAdapter(l *slog.Logger, name string) *hclogAdapter {
	return &hclogAdapter{logger: l, name: name}
}

// slogLevel maps hclog levels onto slog's four: raft's Trace output is
// Debug-grade detail, and anything unknown is treated as Info rather than lost.
func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace, hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// emit builds the record by hand so its source position is raft's call site,
// not this adapter. Every exported logging method calls emit directly, which
// keeps the frame count fixed.
func (a *hclogAdapter) emit(level slog.Level, msg string, args []any) {
	if msg == "failed to contact" && level >= slog.LevelWarn {
		a.peers.silentArgs(args, time.Now())
	}
	level = relevel(level, msg, args)
	ctx := context.Background()
	h := a.logger.Handler()
	if !h.Enabled(ctx, level) {
		return
	}
	var pcs [1]uintptr
	runtime.Callers(3, pcs[:]) // skip Callers, emit, and the hclog method
	r := slog.NewRecord(time.Now(), level, msg, pcs[0])
	if a.name != "" {
		r.AddAttrs(slog.String("logger", a.name))
	}
	r.Add(hclogValues(args)...)
	_ = h.Handle(ctx, r)
}

// relevel sets the level of a raft message by what it means to an operator.
// Raft logs at Error what is routine in a healthy cluster: a stream that
// ends at shutdown, a peer that is down or restarting (raft retries it), a
// leader that learns of a newer term (leadership moved on), a follower
// behind the log's start (raft sends it a snapshot instead). An ERROR line
// from Keel should need someone to act.
func relevel(level slog.Level, msg string, args []any) slog.Level {
	if level < slog.LevelWarn {
		return level
	}
	switch msg {
	case "failed to decode incoming command", "failed to flush response":
		// The connection ended: this node's transport shut down, or the
		// peer closed it. Anything else is a peer that sent what raft
		// could not read, which the peer's own log explains.
		if connectionEnded(argError(args)) {
			return slog.LevelDebug
		}
		return slog.LevelWarn
	case "peer has newer term, stopping replication":
		// This node no longer leads; it says so when it steps down.
		return slog.LevelInfo
	case "failed to get log":
		// On a leader, replication falls back to sending the follower a
		// snapshot; anywhere else raft panics, which tells enough.
		if errors.Is(argError(args), raft.ErrLogNotFound) {
			return slog.LevelDebug
		}
	case "failed to heartbeat to", "failed to appendEntries to", "failed to pipeline appendEntries",
		"failed to start pipeline replication to", "failed to contact":
		// A peer that does not answer the leader (or, for the lease,
		// has not for a while), a line per retry: the leader logs the
		// outage's start and end once (peerWatch).
		return slog.LevelDebug
	case "heartbeat timeout reached, starting election":
		// With no leader known yet, the quorum's first election (every
		// start): the election that follows a lost leader stays a WARN.
		if argString(args, "last-leader-id") == "" {
			return slog.LevelInfo
		}
	case "rejecting vote request since we have a leader", "rejecting pre-vote request since we have a leader":
		// A voter back from a restart or a cut, which had not heard from
		// the leader yet: the leader stays, and the voter follows it.
		return slog.LevelInfo
	case "failed to make requestVote RPC":
		// A candidate's vote request to a voter that is down, once per
		// election: at every handoff, to the leader that is stopping.
		// The new leader tells of a voter still down (peerWatch).
		return slog.LevelInfo
	case "failed to send snapshot to":
		// A peer that does not answer: down, restarting or cut off. Raft
		// retries with a back-off; quorum status shows which.
		return slog.LevelWarn
	}
	return level
}

// connectionEnded reports whether err means only that a raft connection
// was closed, by either end.
func connectionEnded(err error) bool {
	return errors.Is(err, raft.ErrTransportShutdown) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// argError is the value of the "error" key in hclog's key-value args.
func argError(args []any) error {
	for _, key := range []string{"error", "err"} {
		if err, ok := argValue(args, key).(error); ok {
			return err
		}
	}
	return nil
}

// argString is the value of key in hclog's key-value args as text, "" if
// absent.
func argString(args []any, key string) string {
	if v := argValue(args, key); v != nil {
		return fmt.Sprint(v)
	}
	return ""
}

// argValue is the value of key in hclog's key-value args, nil if absent.
func argValue(args []any, key string) any {
	for i := 0; i+1 < len(args); i += 2 {
		if k, ok := args[i].(string); ok && k == key {
			return args[i+1]
		}
	}
	return nil
}

// hclogValues renders hclog's formatting wrappers, which raft uses (e.g.
// hclog.Fmt("%+v", servers)) and which slog would otherwise print as a raw
// slice with the verb in it.
func hclogValues(args []any) []any {
	var out []any
	for i, arg := range args {
		var v any
		switch a := arg.(type) {
		case hclog.Format:
			if len(a) == 0 {
				v = ""
			} else if f, ok := a[0].(string); ok {
				v = fmt.Sprintf(f, a[1:]...)
			} else {
				v = fmt.Sprint(a...)
			}
		case hclog.Hex:
			v = fmt.Sprintf("0x%x", int(a))
		case hclog.Octal:
			v = fmt.Sprintf("0%o", int(a))
		case hclog.Binary:
			v = fmt.Sprintf("0b%b", int(a))
		case error, slog.LogValuer, json.Marshaler, encoding.TextMarshaler:
			// Handlers render these themselves, in every format.
			if out != nil {
				out[i] = arg
			}
			continue
		case fmt.Stringer:
			// A raft value with no exported fields (the *raft.Raft raft logs
			// as "follower" or "leader") is {} in JSON: its String is what
			// the text format shows, so both show that.
			v = fmt.Sprint(a) // a nil receiver prints, not panics
		case raft.Server:
			v = fmt.Sprintf("%+v", a) // as the text format shows it: suffrage by name
		default:
			if out != nil {
				out[i] = arg
			}
			continue
		}
		if out == nil {
			out = slices.Clone(args) // copy only when something changes
		}
		out[i] = v
	}
	if out == nil {
		return args
	}
	return out
}

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	a.emit(slogLevel(level), msg, args)
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.emit(slog.LevelDebug, msg, args) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.emit(slog.LevelDebug, msg, args) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.emit(slog.LevelInfo, msg, args) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.emit(slog.LevelWarn, msg, args) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.emit(slog.LevelError, msg, args) }

func (a *hclogAdapter) enabled(level slog.Level) bool {
	return a.logger.Enabled(context.Background(), level)
}

func (a *hclogAdapter) IsTrace() bool { return a.enabled(slog.LevelDebug) }
func (a *hclogAdapter) IsDebug() bool { return a.enabled(slog.LevelDebug) }
func (a *hclogAdapter) IsInfo() bool  { return a.enabled(slog.LevelInfo) }
func (a *hclogAdapter) IsWarn() bool  { return a.enabled(slog.LevelWarn) }
func (a *hclogAdapter) IsError() bool { return a.enabled(slog.LevelError) }

func (a *hclogAdapter) ImpliedArgs() []any { return slices.Clone(a.implied) }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	return &hclogAdapter{
		logger:  a.logger.With(args...),
		name:    a.name,
		implied: append(slices.Clone(a.implied), args...),
		peers:   a.peers,
	}
}

func (a *hclogAdapter) Name() string { return a.name }

// Named appends to the name the way hclog does ("raft" → "raft.snapshot").
func (a *hclogAdapter) Named(name string) hclog.Logger {
	if a.name != "" {
		name = a.name + "." + name
	}
	return a.ResetNamed(name)
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	return &hclogAdapter{logger: a.logger, name: name, implied: a.implied, peers: a.peers}
}

// SetLevel is a no-op: the slog handler owns the level.
func (a *hclogAdapter) SetLevel(hclog.Level) {}

func (a *hclogAdapter) GetLevel() hclog.Level {
	switch {
	case a.enabled(slog.LevelDebug):
		return hclog.Debug
	case a.enabled(slog.LevelInfo):
		return hclog.Info
	case a.enabled(slog.LevelWarn):
		return hclog.Warn
	default:
		return hclog.Error
	}
}

// StandardLogger serves libraries that want a *log.Logger; their lines are
// logged at Info since they carry no level.
func (a *hclogAdapter) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	l := a.logger
	if a.name != "" {
		l = l.With("logger", a.name)
	}
	return slog.NewLogLogger(l.Handler(), slog.LevelInfo)
}

func (a *hclogAdapter) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return a.StandardLogger(opts).Writer()
}
