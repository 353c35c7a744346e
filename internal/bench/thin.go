package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// Event kinds a thin broker notes from the records it scans.
const (
	EventRegister        = "register"
	EventFence           = "fence"
	EventUnfence         = "unfence"
	EventShuttingDown    = "shutting_down"
	EventUnregister      = "unregister"
	EventControllerEpoch = "controller_epoch"
	EventTopic           = "topic"
)

// Event is one record of interest, seen in the entry at Offset, received
// At.
type Event struct {
	Kind   string
	Broker int32  // broker records
	Epoch  int64  // broker epoch, or controller epoch for EventControllerEpoch
	Name   string // EventTopic
	Offset uint64
	At     time.Time
}

// recordField maps a Record's oneof field number to its name, from the
// generated descriptor (so renumbering cannot silently break the scan).
var recordField = func() map[protowire.Number]protoreflect.Name {
	m := map[protowire.Number]protoreflect.Name{}
	fields := (&keelpb.Record{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		m[fields.Get(i).Number()] = fields.Get(i).Name()
	}
	return m
}()

// scanBatch calls fn with the field name and encoded body of every record
// in a raft entry, without decoding the records: a batch of 10,000
// PartitionRecords costs a walk over its bytes.
func scanBatch(data []byte, fn func(name protoreflect.Name, body []byte)) error {
	if len(data) == 0 || data[0] != fsm.EntryFormatV1 {
		return errors.New("not a Keel entry")
	}
	b := data[1:]
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if num != 1 || typ != protowire.BytesType { // RecordBatch.records
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		rec, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		rnum, rtyp, m := protowire.ConsumeTag(rec)
		if m < 0 || rtyp != protowire.BytesType {
			continue // an empty record: nothing to see
		}
		body, k := protowire.ConsumeBytes(rec[m:])
		if k < 0 {
			return protowire.ParseError(k)
		}
		fn(recordField[rnum], body)
	}
	return nil
}

// snapshotIndex reads the raft index from the header at the start of a
// snapshot stream, without reading the rest.
func snapshotIndex(first []byte) (uint64, error) {
	h, err := fsm.ReadSnapshotHeader(bytes.NewReader(first))
	if err != nil {
		return 0, err
	}
	return h.GetIndex(), nil
}

// partKey names one partition.
type partKey struct {
	topic     fsm.TopicID
	partition int32
}

// leaderWatch follows the partitions a broker led when it was stopped, from
// the leader changes in the stream, until every one has another leader.
type leaderWatch struct {
	victim int32

	mu        sync.Mutex
	remaining map[partKey]struct{}
	doneAt    time.Time
	offset    uint64 // of the entry that gave the last one a new leader
}

func newLeaderWatch(victim int32, led []partKey) *leaderWatch {
	w := &leaderWatch{victim: victim, remaining: make(map[partKey]struct{}, len(led))}
	for _, k := range led {
		w.remaining[k] = struct{}{}
	}
	return w
}

func (w *leaderWatch) observe(c *keelpb.PartitionChangeRecord, offset uint64, at time.Time) {
	if c.Leader == nil {
		return
	}
	l := c.GetLeader()
	var k partKey
	copy(k.topic[:], c.GetTopicId())
	k.partition = c.GetPartition()
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.remaining[k]; !ok {
		return
	}
	if l == w.victim || l == fsm.NoLeader {
		return
	}
	delete(w.remaining, k)
	w.offset = max(w.offset, offset)
	if len(w.remaining) == 0 {
		w.doneAt = at
	}
}

// state reports how many partitions still lack a new leader and, once none
// does, when the last one got one and in which entry.
func (w *leaderWatch) state() (left int, doneAt time.Time, offset uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.remaining), w.doneAt, w.offset
}

// latencies collects heartbeat latencies while on.
type latencies struct {
	mu       sync.Mutex
	on       bool
	samples  []time.Duration
	failures int
}

func (l *latencies) start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on, l.samples, l.failures = true, nil, 0
}

func (l *latencies) stop() ([]time.Duration, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on = false
	return l.samples, l.failures
}

func (l *latencies) add(d time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.on {
		return
	}
	if err != nil {
		l.failures++
		return
	}
	l.samples = append(l.samples, d)
}

// errReregister: the controller no longer knows this broker epoch.
var errReregister = errors.New("broker epoch no longer current")

// thinBroker is a simulated broker without an image: it registers,
// heartbeats every interval with the last offset it received, consumes the
// metadata stream (following the active controller) and notes the records
// that concern the bench. A controlled shutdown works as broker.Agent's.
type thinBroker struct {
	id       int32
	rack     string
	addrs    []string
	interval time.Duration
	client   *rpc.Client
	hb       *latencies
	log      *slog.Logger
	// lis is its port, the address it registers: the active controller
	// dials it before fencing the broker for a crash, and a live process's
	// port accepts. Nothing is served on it. Kill closes it, as a dead
	// process's port closes; Silence keeps it (a paused process's port
	// still accepts).
	lis net.Listener

	offsets offsetLog

	mu        sync.Mutex
	epoch     int64
	clusterID string
	fenced    bool
	events    []Event
	// shuttingDown: other brokers in controlled shutdown, from the records.
	shuttingDown map[int32]bool
	snapshots    []time.Time
	watch        *leaderWatch

	poke         chan struct{}
	wantShutdown atomic.Bool
	released     chan struct{}
	releaseOnce  sync.Once
	// askedAt and releasedAt time a controlled shutdown: the first
	// heartbeat that asked, and the answer that allowed it.
	askedAt, releasedAt time.Time

	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopOnce sync.Once
}

func startThinBroker(id int32, rack string, addrs []string, interval time.Duration, hb *latencies, log *slog.Logger, opts ...rpc.Option) (*thinBroker, error) {
	client, err := rpc.NewClient(addrs, opts...)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("thin broker %d: %v", id, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &thinBroker{
		id: id, rack: rack, addrs: addrs, interval: interval, client: client, hb: hb, lis: lis,
		log:          log.With("broker_id", id),
		poke:         make(chan struct{}, 1),
		released:     make(chan struct{}),
		shuttingDown: map[int32]bool{},
		cancel:       cancel,
	}
	b.wg.Add(1)
	go b.run(ctx)
	return b, nil
}

func (b *thinBroker) ID() int32                                 { return b.id }
func (b *thinBroker) Kind() string                              { return "thin" }
func (b *thinBroker) Offset() uint64                            { return b.offsets.current() }
func (b *thinBroker) ReachedAt(offset uint64) (time.Time, bool) { return b.offsets.reachedAt(offset) }

// Epoch is the broker epoch of the current registration, 0 before one.
func (b *thinBroker) Epoch() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.epoch
}

// SnapshotsSince counts the image snapshots received since t.
func (b *thinBroker) SnapshotsSince(t time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, s := range b.snapshots {
		if !s.Before(t) {
			n++
		}
	}
	return n
}

// Events returns the events of kind noted so far.
func (b *thinBroker) Events(kind string) []Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Event
	for _, e := range b.events {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func (b *thinBroker) setWatch(w *leaderWatch) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.watch = w
}

// Kill stops the broker without a word, as a crash would: no more
// heartbeats, its streams and its port closed, no unregistration.
func (b *thinBroker) Kill() {
	b.stopOnce.Do(func() {
		b.cancel()
		b.wg.Wait()
		b.client.Close()
		b.lis.Close()
	})
}

// Silence stops the broker's heartbeats and streams but leaves its
// connections open: what a paused process or a network cut looks like to
// the controllers (no crash to see), until Kill or Close.
func (b *thinBroker) Silence() {
	b.cancel()
	b.wg.Wait()
}

// Close is Kill: a broker the bench no longer needs.
func (b *thinBroker) Close() { b.Kill() }

// Shutdown runs a controlled shutdown: heartbeats ask to shut down (the
// first at once, one after every push received) until the controller
// answers that the broker may exit. It returns the time from the first
// asking heartbeat to that answer, when the controller has fenced it. Then
// the broker stops, still registered (fenced), as broker.Agent.Shutdown
// does.
func (b *thinBroker) Shutdown(ctx context.Context) (time.Duration, error) {
	b.wantShutdown.Store(true)
	b.pokeHeartbeat()
	var err error
	select {
	case <-b.released:
	case <-ctx.Done():
		err = fmt.Errorf("controlled shutdown of broker %d: %w", b.id, ctx.Err())
	}
	b.cancel()
	b.wg.Wait()
	b.mu.Lock()
	took := b.releasedAt.Sub(b.askedAt)
	b.mu.Unlock()
	b.stopOnce.Do(func() {
		b.client.Close()
		b.lis.Close()
	})
	return took, err
}

func (b *thinBroker) pokeHeartbeat() {
	select {
	case b.poke <- struct{}{}:
	default:
	}
}

func (b *thinBroker) release(at time.Time) {
	b.releaseOnce.Do(func() {
		b.mu.Lock()
		b.releasedAt = at
		b.mu.Unlock()
		close(b.released)
	})
}

// run registers, then runs a session (heartbeats and the stream) until the
// controller forgets the registration, then again, until stopped.
func (b *thinBroker) run(ctx context.Context) {
	defer b.wg.Done()
	for ctx.Err() == nil {
		epoch, err := b.register(ctx)
		if err != nil {
			return // stopped
		}
		err = b.session(ctx, epoch)
		if errors.Is(err, errReregister) && b.wantShutdown.Load() {
			b.release(time.Now()) // gone from the cluster: nothing to hand over
			return
		}
	}
}

func (b *thinBroker) register(ctx context.Context) (int64, error) {
	bo := backoff{min: 100 * time.Millisecond, max: 5 * time.Second} // as broker.Agent's
	for {
		b.mu.Lock()
		cid := b.clusterID
		b.mu.Unlock()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := b.client.RegisterBroker(rctx, &keelpb.RegisterBrokerRequest{
			BrokerId:           b.id,
			IncarnationId:      uuid.NewString(),
			Address:            b.lis.Addr().String(),
			Rack:               b.rack,
			MinMetadataVersion: fsm.MinMetadataVersion,
			MaxMetadataVersion: fsm.MaxMetadataVersion,
			ClusterId:          cid,
		})
		cancel()
		if err == nil {
			b.mu.Lock()
			b.epoch, b.clusterID, b.fenced = resp.GetBrokerEpoch(), resp.GetClusterId(), true
			b.mu.Unlock()
			return resp.GetBrokerEpoch(), nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		b.log.Debug("registration failed; retrying", "err", status.Convert(err).Message())
		if err := sleep(ctx, bo.next()); err != nil {
			return 0, err
		}
	}
}

func (b *thinBroker) session(ctx context.Context, epoch int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	streamDone := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		streamDone <- b.streamLoop(ctx, epoch)
	}()
	err := b.heartbeatLoop(ctx, epoch, streamDone)
	cancel()
	wg.Wait()
	return err
}

func (b *thinBroker) heartbeatLoop(ctx context.Context, epoch int64, streamDone <-chan error) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	first := true
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-streamDone:
			return err
		case <-b.poke:
		case <-timer.C:
		}
		want := b.wantShutdown.Load()
		sent := time.Now()
		if want {
			b.mu.Lock()
			if b.askedAt.IsZero() {
				b.askedAt = sent
			}
			b.mu.Unlock()
		}
		hctx, hcancel := context.WithTimeout(ctx, max(2*b.interval, 4*time.Second))
		resp, err := b.client.BrokerHeartbeat(hctx, &keelpb.BrokerHeartbeatRequest{
			BrokerId: b.id, BrokerEpoch: epoch, MetadataOffset: b.offsets.current(), WantShutdown: want,
		})
		hcancel()
		took := time.Since(sent)
		// The first periodic heartbeat comes after a random part of the
		// interval, so brokers started together spread over it.
		next := b.interval
		if first {
			next, first = rand.N(b.interval)+time.Millisecond, false
		}
		if want {
			next = min(next, 50*time.Millisecond) // as broker.Agent's shutdownPoll
		}
		timer.Reset(next)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		b.hb.add(took, err)
		if err != nil {
			switch rpc.ReasonOf(err) {
			case rpc.ReasonStaleBrokerEpoch, rpc.ReasonBrokerNotRegistered:
				return errReregister
			}
			b.log.Debug("heartbeat failed", "err", status.Convert(err).Message())
			continue
		}
		b.mu.Lock()
		b.fenced = resp.GetIsFenced()
		b.mu.Unlock()
		if want && resp.GetShouldShutDown() {
			b.release(time.Now())
		}
	}
}

// streamLoop holds the metadata stream to the active controller,
// reconnecting (to the leader a follower names, else the next address) from
// the last offset received, until ctx ends or the controller no longer
// knows the broker epoch.
func (b *thinBroker) streamLoop(ctx context.Context, epoch int64) error {
	target := b.client.Leader()
	next := 0
	if target == "" {
		target, next = b.addrs[0], 1
	}
	// The same back-off as broker.Agent's stream loop: 25ms doubling to
	// 250ms, with jitter, reset by a stream that delivered something; the
	// first hop to a hinted leader is taken at once, and a leader that is
	// taking over is asked again after 5ms.
	bo := backoff{min: 25 * time.Millisecond, max: 250 * time.Millisecond}
	followed := false
	for {
		accepted, err := b.streamOnce(ctx, target, epoch)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if accepted > 0 {
			bo.reset()
		}
		switch rpc.ReasonOf(err) {
		case rpc.ReasonStaleBrokerEpoch, rpc.ReasonBrokerNotRegistered:
			return errReregister
		}
		pause, follow := true, false
		if rpc.ReasonOf(err) == rpc.ReasonNotReady {
			pause = false
			if err := sleep(ctx, rpc.NotReadyPause); err != nil {
				return err
			}
		} else if hint, _ := rpc.LeaderHintOf(err); hint != nil && hint.GetLeaderAddress() != "" && hint.GetLeaderAddress() != target {
			target, follow = hint.GetLeaderAddress(), true
			pause = followed
		} else if l := b.client.Leader(); l != "" && l != target {
			target = l
		} else if len(b.addrs) > 1 {
			for range b.addrs {
				cand := b.addrs[next%len(b.addrs)]
				next++
				if cand != target {
					target = cand
					break
				}
			}
		}
		followed = follow
		b.log.Debug("metadata stream ended; reconnecting", "to", target, "err", err)
		if pause {
			if err := sleep(ctx, bo.next()); err != nil {
				return err
			}
		}
	}
}

// backoff grows a pause from min to max, doubling, with jitter (as
// broker.Agent's).
type backoff struct {
	min, max, cur time.Duration
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	half := b.cur / 2
	return half + rand.N(half+1)
}

func (b *backoff) reset() { b.cur = 0 }

// errOffsetGap: an entry does not continue the offset received.
var errOffsetGap = errors.New("metadata entry does not continue the offset received")

func (b *thinBroker) streamOnce(ctx context.Context, target string, epoch int64) (int, error) {
	cl, err := b.client.Controller(target)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b.mu.Lock()
	cid := b.clusterID
	b.mu.Unlock()
	stream, err := cl.StreamMetadata(ctx, &keelpb.StreamMetadataRequest{
		BrokerId: b.id, BrokerEpoch: epoch, FromOffset: b.offsets.current(), ClusterId: cid,
	})
	if err != nil {
		return 0, err
	}
	var (
		accepted int
		inSnap   bool
		snapIdx  uint64
	)
	for {
		push, err := stream.Recv()
		if err == io.EOF {
			return accepted, errors.New("the controller ended the metadata stream")
		}
		if err != nil {
			return accepted, err
		}
		now := time.Now()
		switch body := push.GetBody().(type) {
		case *keelpb.MetadataPush_Entries:
			if inSnap {
				return accepted, errors.New("entries in the middle of a snapshot")
			}
			last := b.offsets.current()
			for _, e := range body.Entries.GetEntries() {
				if e.GetOffset() <= last {
					continue
				}
				if e.GetPrevOffset() != last {
					return accepted, fmt.Errorf("%w: entry %d follows %d, received up to %d", errOffsetGap, e.GetOffset(), e.GetPrevOffset(), last)
				}
				b.scan(e.GetData(), e.GetOffset(), now)
				last = e.GetOffset()
			}
			b.offsets.add(last, now)
		case *keelpb.MetadataPush_Snapshot:
			if !inSnap {
				if snapIdx, err = snapshotIndex(body.Snapshot.GetData()); err != nil {
					return accepted, err
				}
				inSnap = true
			}
			if body.Snapshot.GetLast() {
				inSnap = false
				b.mu.Lock()
				b.snapshots = append(b.snapshots, now)
				b.mu.Unlock()
				b.offsets.add(snapIdx, now)
			}
		default:
			return accepted, errors.New("a metadata push with no body")
		}
		accepted++
		b.mu.Lock()
		catchUp := b.fenced && b.offsets.current() >= uint64(b.epoch)
		b.mu.Unlock()
		// A controlled shutdown (this broker's or another's) waits for every
		// active broker to report the moves applied: report at once, as
		// broker.Agent does.
		if catchUp || b.wantShutdown.Load() || b.othersShuttingDown() {
			b.pokeHeartbeat()
		}
	}
}

// scan notes the records of one entry that concern the bench.
func (b *thinBroker) scan(data []byte, offset uint64, at time.Time) {
	b.mu.Lock()
	w := b.watch
	b.mu.Unlock()
	var evs []Event
	err := scanBatch(data, func(name protoreflect.Name, body []byte) {
		ev := Event{Offset: offset, At: at}
		switch name {
		case "partition_change":
			if w != nil {
				c := &keelpb.PartitionChangeRecord{}
				if proto.Unmarshal(body, c) == nil {
					w.observe(c, offset, at)
				}
			}
			return
		case "controller_epoch":
			r := &keelpb.ControllerEpochRecord{}
			if proto.Unmarshal(body, r) != nil {
				return
			}
			ev.Kind, ev.Epoch, ev.Broker = EventControllerEpoch, r.GetEpoch(), r.GetLeaderId()
		case "broker_registration":
			r := &keelpb.BrokerRegistrationRecord{}
			if proto.Unmarshal(body, r) != nil {
				return
			}
			ev.Kind, ev.Broker, ev.Epoch = EventRegister, r.GetBrokerId(), r.GetBrokerEpoch()
		case "fence_broker":
			r := &keelpb.FenceBrokerRecord{}
			if proto.Unmarshal(body, r) != nil {
				return
			}
			ev.Kind, ev.Broker, ev.Epoch = EventFence, r.GetBrokerId(), r.GetBrokerEpoch()
		case "unfence_broker":
			r := &keelpb.UnfenceBrokerRecord{}
			if proto.Unmarshal(body, r) != nil {
				return
			}
			ev.Kind, ev.Broker, ev.Epoch = EventUnfence, r.GetBrokerId(), r.GetBrokerEpoch()
		case "broker_shutting_down":
			r := &keelpb.BrokerShuttingDownRecord{}
			if proto.Unmarshal(body, r) != nil {
				return
			}
			ev.Kind, ev.Broker, ev.Epoch = EventShuttingDown, r.GetBrokerId(), r.GetBrokerEpoch()
		case "unregister_broker":
			r := &keelpb.UnregisterBrokerRecord{}
			if proto.Unmarshal(body, r) != nil {
				return
			}
			ev.Kind, ev.Broker, ev.Epoch = EventUnregister, r.GetBrokerId(), r.GetBrokerEpoch()
		case "topic":
			r := &keelpb.TopicRecord{}
			if proto.Unmarshal(body, r) != nil {
				return
			}
			ev.Kind, ev.Name = EventTopic, r.GetName()
		default:
			return
		}
		evs = append(evs, ev)
	})
	if err != nil {
		b.log.Warn("could not scan a metadata entry", "offset", offset, "err", err)
	}
	if len(evs) > 0 {
		b.mu.Lock()
		b.events = append(b.events, evs...)
		for _, ev := range evs {
			switch ev.Kind {
			case EventShuttingDown:
				if ev.Broker != b.id {
					b.shuttingDown[ev.Broker] = true
				}
			case EventFence, EventUnregister, EventRegister:
				delete(b.shuttingDown, ev.Broker)
			}
		}
		b.mu.Unlock()
	}
}

// othersShuttingDown reports whether another broker is in controlled
// shutdown, as far as the records received tell.
func (b *thinBroker) othersShuttingDown() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.shuttingDown) > 0
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
