package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/keel-dev/keel/broker"
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

// thinBroker is a simulated broker without an image: its broker.Session
// registers, heartbeats every interval with the last offset it received and
// holds the metadata stream (following the active controller), as
// broker.Agent's does; the thin broker is the session's Follower, and only
// notes the records of the stream that concern the bench instead of
// replaying them, so that thousands fit in one process. A controlled
// shutdown works as broker.Agent's.
type thinBroker struct {
	id      int32
	rack    string
	client  *rpc.Client
	session *broker.Session
	log     *slog.Logger
	// lis is its port, the address it registers: the active controller
	// dials it before fencing the broker for a crash, and a live process's
	// port accepts. Nothing is served on it. Kill closes it, as a dead
	// process's port closes; Silence keeps it (a paused process's port
	// still accepts).
	lis net.Listener

	offsets offsetLog

	// The snapshot being received on the current stream, if inSnap: the
	// offset its header gives. Owned by the session's stream loop.
	inSnap  bool
	snapIdx uint64

	mu        sync.Mutex
	epoch     int64
	clusterID string
	events    []Event
	// shuttingDown: other brokers in controlled shutdown, from the records.
	shuttingDown map[int32]bool
	snapshots    snapshotCounter // image snapshots received
	watch        *leaderWatch

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
		id: id, rack: rack, client: client, lis: lis,
		log:          log.With("broker_id", id),
		shuttingDown: map[int32]bool{},
		cancel:       cancel,
	}
	b.session = broker.NewSession(broker.SessionConfig{
		BrokerID:          id,
		Controllers:       addrs,
		Client:            client,
		HeartbeatInterval: interval,
		SpreadHeartbeats:  true,
		Logger:            b.log,
		Follower:          b,
		ClusterID:         b.cluster,
		Registration:      b.registration,
		Registered:        b.registered,
		Refused: func(err error) (time.Time, error) {
			b.log.Debug("registration failed; retrying", "err", status.Convert(err).Message())
			return time.Time{}, nil
		},
		Answered:        func(_ *keelpb.BrokerHeartbeatResponse, took time.Duration) { hb.add(took, nil) },
		HeartbeatFailed: func(err error, took time.Duration) { hb.add(took, err) },
	})
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		if err := b.session.Run(ctx); err != nil && ctx.Err() == nil {
			b.log.Warn("thin broker stopped", "err", err)
		}
	}()
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
	return b.snapshots.since(t)
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
	b.session.RequestShutdown()
	var err error
	select {
	case <-b.session.Released():
	case <-ctx.Done():
		err = fmt.Errorf("controlled shutdown of broker %d: %w", b.id, ctx.Err())
	}
	b.cancel()
	b.wg.Wait()
	asked, released := b.session.ShutdownTimes()
	b.stopOnce.Do(func() {
		b.client.Close()
		b.lis.Close()
	})
	return released.Sub(asked), err
}

// cluster is the cluster id the last registration was answered with.
func (b *thinBroker) cluster() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.clusterID
}

// registration is the request of each registration attempt: a new
// incarnation each time.
func (b *thinBroker) registration() *keelpb.RegisterBrokerRequest {
	return &keelpb.RegisterBrokerRequest{
		BrokerId:           b.id,
		IncarnationId:      uuid.NewString(),
		Address:            b.lis.Addr().String(),
		Rack:               b.rack,
		MinMetadataVersion: fsm.MinMetadataVersion,
		MaxMetadataVersion: fsm.MaxMetadataVersion,
		ClusterId:          b.cluster(),
	}
}

func (b *thinBroker) registered(resp *keelpb.RegisterBrokerResponse) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.epoch, b.clusterID = resp.GetBrokerEpoch(), resp.GetClusterId()
	return nil
}

// errOffsetGap: an entry does not continue the offset received.
var errOffsetGap = errors.New("metadata entry does not continue the offset received")

// FromOffset is where the next stream resumes: the offset received
// (broker.Follower).
func (b *thinBroker) FromOffset() uint64 { return b.offsets.current() }

// Handle notes one push's offset and scans its entries (broker.Follower).
func (b *thinBroker) Handle(push *keelpb.MetadataPush) error {
	now := time.Now()
	switch body := push.GetBody().(type) {
	case *keelpb.MetadataPush_Entries:
		if b.inSnap {
			return errors.New("entries in the middle of a snapshot")
		}
		last := b.offsets.current()
		for _, e := range body.Entries.GetEntries() {
			if e.GetOffset() <= last {
				continue
			}
			if e.GetPrevOffset() != last {
				return fmt.Errorf("%w: entry %d follows %d, received up to %d", errOffsetGap, e.GetOffset(), e.GetPrevOffset(), last)
			}
			b.scan(e.GetData(), e.GetOffset(), now)
			last = e.GetOffset()
		}
		b.offsets.add(last, now)
	case *keelpb.MetadataPush_Snapshot:
		if !b.inSnap {
			idx, err := snapshotIndex(body.Snapshot.GetData())
			if err != nil {
				return err
			}
			b.inSnap, b.snapIdx = true, idx
		}
		if body.Snapshot.GetLast() {
			b.inSnap = false
			b.snapshots.add(now)
			b.offsets.add(b.snapIdx, now)
		}
	default:
		return errors.New("a metadata push with no body")
	}
	return nil
}

// Reset forgets a snapshot whose stream ended (broker.Follower).
func (b *thinBroker) Reset() { b.inSnap = false }

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

// OthersShuttingDown reports whether another broker is in controlled
// shutdown, as far as the records received tell (broker.Follower).
func (b *thinBroker) OthersShuttingDown() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.shuttingDown) > 0
}
