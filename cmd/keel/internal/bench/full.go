package bench

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/tlsauth"
)

// fullBroker is a real broker in this process: a broker.Agent that replays
// the whole metadata image with the controllers' state machine. Its handler
// notes when each batch was applied.
type fullBroker struct {
	id      int32
	agent   *broker.Agent
	offsets offsetLog
	snaps   *snapshotCounter
}

// markHandler notes each applied offset; embedding NopHandler keeps the
// agent's role callbacks (computed as for a real broker) doing nothing.
type markHandler struct {
	broker.NopHandler
	offsets *offsetLog
}

func (h markHandler) MetadataChanged(_, after *fsm.Image) { h.offsets.add(after.Offset, time.Now()) }

func startFullBroker(id int32, rack, dataDir string, addrs []string, tlsCfg *tlsauth.Config, log *slog.Logger) (*fullBroker, error) {
	f := &fullBroker{id: id, snaps: &snapshotCounter{}}
	// The agent logs each snapshot it installs; counting that line is how
	// the bench learns of a full broker's snapshot re-sends.
	logger := slog.New(&countingHandler{Handler: log.Handler(), msg: "installed metadata snapshot", count: f.snaps})
	a, err := broker.Start(broker.Config{
		BrokerID: id, Listen: "127.0.0.1:0", Rack: rack, DataDir: dataDir, Controllers: addrs,
		Handler: markHandler{offsets: &f.offsets}, Logger: logger, TLS: tlsCfg,
	})
	if err != nil {
		return nil, err
	}
	f.agent = a
	return f, nil
}

func (f *fullBroker) ID() int32                                 { return f.id }
func (f *fullBroker) Kind() string                              { return "full" }
func (f *fullBroker) Offset() uint64                            { return f.offsets.current() }
func (f *fullBroker) ReachedAt(offset uint64) (time.Time, bool) { return f.offsets.reachedAt(offset) }
func (f *fullBroker) SnapshotsSince(t time.Time) int            { return f.snaps.since(t) }
func (f *fullBroker) Epoch() int64                              { return f.agent.Status().BrokerEpoch }
func (f *fullBroker) Close()                                    { f.agent.Close() }

type snapshotCounter struct {
	mu    sync.Mutex
	times []time.Time
}

func (c *snapshotCounter) add(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.times = append(c.times, t)
}

func (c *snapshotCounter) since(t time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.times {
		if !s.Before(t) {
			n++
		}
	}
	return n
}

// countingHandler passes records on and counts those with one message.
type countingHandler struct {
	slog.Handler
	msg   string
	count *snapshotCounter
}

// Enabled lets the counted message (Info) through whatever the level.
func (h *countingHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.Handler.Enabled(ctx, l)
}

func (h *countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.count.add(r.Time)
	}
	if h.Handler.Enabled(ctx, r.Level) {
		return h.Handler.Handle(ctx, r)
	}
	return nil
}

func (h *countingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &countingHandler{Handler: h.Handler.WithAttrs(attrs), msg: h.msg, count: h.count}
}

func (h *countingHandler) WithGroup(name string) slog.Handler {
	return &countingHandler{Handler: h.Handler.WithGroup(name), msg: h.msg, count: h.count}
}
