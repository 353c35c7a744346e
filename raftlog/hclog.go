package raftlog

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"runtime"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter sends raft's hclog output to a slog.Logger, so that a Keel
// process has one log stream with one format and one level setting. The slog
// handler decides what is enabled; hclog's own level setting is ignored.
type hclogAdapter struct {
	logger  *slog.Logger // carries implied args already
	name    string
	implied []any
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
	return &hclogAdapter{logger: a.logger, name: name, implied: a.implied}
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
