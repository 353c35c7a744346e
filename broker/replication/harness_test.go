package replication

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/clock"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// fakeClock is a clock that moves only when told to.
type fakeClock = clock.Fake

func newFakeClock() *fakeClock { return clock.NewFake() }

// Records.

var topicT = fsm.TopicID{0x7}

func applyBatch(t testing.TB, img *fsm.Image, records ...*keelpb.Record) *fsm.Image {
	t.Helper()
	next, err := fsm.Apply(img, img.Offset+1, 1, &keelpb.RecordBatch{Records: records})
	if err != nil {
		t.Fatalf("apply at %d: %v", img.Offset+1, err)
	}
	return next
}

func regRec(id int32) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_BrokerRegistration{BrokerRegistration: &keelpb.BrokerRegistrationRecord{
		BrokerId: id, IncarnationId: fmt.Sprintf("00000000-0000-0000-0000-%012d", id), Address: fmt.Sprintf("broker-%d", id),
		MinMetadataVersion: 1, MaxMetadataVersion: fsm.MaxMetadataVersion}}}
}

func unfenceRec(id int32, epoch int64) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_UnfenceBroker{UnfenceBroker: &keelpb.UnfenceBrokerRecord{BrokerId: id, BrokerEpoch: epoch}}}
}

func fenceRec(id int32, epoch int64) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_FenceBroker{FenceBroker: &keelpb.FenceBrokerRecord{BrokerId: id, BrokerEpoch: epoch}}}
}

// changeRec builds a PartitionChangeRecord of t-0; a nil leader or isr is
// "unchanged".
func changeRec(leader *int32, isr []int32) *keelpb.Record {
	r := &keelpb.PartitionChangeRecord{TopicId: bytes.Clone(topicT[:]), Partition: 0, Leader: leader}
	if isr != nil {
		r.Isr = &keelpb.Int32List{Values: isr}
	}
	return &keelpb.Record{Record: &keelpb.Record_PartitionChange{PartitionChange: r}}
}

func leaderID(id int32) *int32 { return &id }

// clusterImage: brokers 1-3 registered and active (epochs 2-4), topic "t"
// (configs as given) with partition 0 on replicas 1,2,3, ISR isr, led by 1.
func clusterImage(t testing.TB, configs map[string]string, isr ...int32) *fsm.Image {
	t.Helper()
	img := applyBatch(t, fsm.Empty(),
		&keelpb.Record{Record: &keelpb.Record_ClusterId{ClusterId: &keelpb.ClusterIdRecord{ClusterId: "c"}}},
		&keelpb.Record{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{Name: fsm.MetadataVersionFeature, Level: fsm.MaxMetadataVersion}}},
		&keelpb.Record{Record: &keelpb.Record_ControllerEpoch{ControllerEpoch: &keelpb.ControllerEpochRecord{Epoch: 1, LeaderId: 1}}})
	for id := int32(1); id <= 3; id++ {
		img = applyBatch(t, img, regRec(id))
	}
	img = applyBatch(t, img, unfenceRec(1, 2), unfenceRec(2, 3), unfenceRec(3, 4))
	return applyBatch(t, img,
		&keelpb.Record{Record: &keelpb.Record_Topic{Topic: &keelpb.TopicRecord{Name: "t", TopicId: bytes.Clone(topicT[:]), Configs: configs}}},
		&keelpb.Record{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{
			TopicId: bytes.Clone(topicT[:]), Partition: 0, Replicas: []int32{1, 2, 3}, Isr: isr, Leader: 1}}})
}

// makeBatch builds a v2 batch of n records as a client sends it (base
// offset 0), idempotent when pid > 0.
func makeBatch(t testing.TB, n int, pid int64, seq int32) []byte {
	t.Helper()
	var recs []byte
	for i := range n {
		r := kmsg.Record{TimestampDelta64: int64(i), OffsetDelta: int32(i), Key: []byte("k"), Value: []byte(fmt.Sprintf("value-%d", i))}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	producer, pepoch, first := int64(-1), int16(-1), int32(-1)
	if pid > 0 {
		producer, pepoch, first = pid, 0, seq
	}
	rb := kmsg.RecordBatch{Length: int32(49 + len(recs)), Magic: 2, LastOffsetDelta: int32(n - 1),
		FirstTimestamp: time.Now().UnixMilli(), MaxTimestamp: time.Now().UnixMilli() + int64(n-1),
		ProducerID: producer, ProducerEpoch: pepoch, FirstSequence: first, NumRecords: int32(n), Records: recs}
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// batchOffsets lists the base offsets and epochs of the batches in records.
func batchOffsets(records []byte) [][2]int64 {
	var out [][2]int64
	for len(records) >= 61 {
		base := int64(binary.BigEndian.Uint64(records))
		size := 12 + int(binary.BigEndian.Uint32(records[8:]))
		epoch := int64(int32(binary.BigEndian.Uint32(records[12:])))
		out = append(out, [2]int64{base, epoch})
		records = records[size:]
	}
	return out
}

// The controllers, as a data plane sees them through its Link.

type fakeController struct {
	t        testing.TB
	mu       sync.Mutex
	img      *fsm.Image
	requests []broker.ISRChange
	// refuse, when set, refuses every AlterPartition with it.
	refuse error
	// logs are the replicas' logs reported, by broker, in order.
	logs map[int32][]broker.ReplicaLog
}

func (c *fakeController) image() *fsm.Image {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.img
}

func (c *fakeController) commit(records ...*keelpb.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.img = applyBatch(c.t, c.img, records...)
}

type ctlLink struct {
	c  *fakeController
	id int32
}

func (l ctlLink) BrokerID() int32 { return l.id }
func (l ctlLink) BrokerEpoch() int64 {
	if b, ok := l.c.image().Broker(l.id); ok {
		return b.Epoch
	}
	return 0
}

// AlterPartition checks and commits an ISR change as the controller does.
func (l ctlLink) AlterPartition(_ context.Context, ch broker.ISRChange) (*keelpb.PartitionDescription, error) {
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests = append(c.requests, ch)
	if c.refuse != nil {
		return nil, c.refuse
	}
	p, ok := c.img.Partition(ch.TopicID, ch.Partition)
	switch {
	case !ok:
		return nil, status.Error(codes.NotFound, "no such partition")
	case p.LeaderEpoch != ch.LeaderEpoch:
		return nil, reasonErr(codes.FailedPrecondition, rpc.ReasonFencedLeaderEpoch, "stale leader epoch")
	case p.PartitionEpoch != ch.PartitionEpoch:
		return nil, reasonErr(codes.FailedPrecondition, rpc.ReasonInvalidUpdateVersion, "stale partition epoch")
	}
	for i, id := range ch.ISR {
		b, ok := c.img.Broker(id)
		if !ok || !b.Eligible() || (len(ch.BrokerEpochs) > 0 && ch.BrokerEpochs[i] != b.Epoch) {
			return nil, reasonErr(codes.FailedPrecondition, rpc.ReasonIneligibleReplica, fmt.Sprintf("broker %d", id))
		}
	}
	rec := changeRec(nil, ch.ISR)
	if p.Recovering() {
		recovered := keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERED
		rec.GetPartitionChange().LeaderRecoveryState = &recovered
	}
	c.img = applyBatch(c.t, c.img, rec)
	p, _ = c.img.Partition(ch.TopicID, ch.Partition)
	return &keelpb.PartitionDescription{Partition: p.Partition, Leader: p.Leader, LeaderEpoch: p.LeaderEpoch,
		PartitionEpoch: p.PartitionEpoch, Replicas: p.Replicas, Isr: p.ISR}, nil
}

// ReportReplicaLogs records the reports.
func (l ctlLink) ReportReplicaLogs(_ context.Context, logs []broker.ReplicaLog) error {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	if l.c.logs == nil {
		l.c.logs = map[int32][]broker.ReplicaLog{}
	}
	l.c.logs[l.id] = append(l.c.logs[l.id], logs...)
	return nil
}

func reasonErr(code codes.Code, reason, msg string) error {
	st, err := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: rpc.ErrorDomain})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// env is brokers 1-3, each a Manager with its logs in a temp dir, linked
// to one fake controller, fetching from each other in process. Fetches and
// ISR changes are driven by hand: every step is synchronous.
type env struct {
	t     *testing.T
	clock *fakeClock
	ctl   *fakeController
	ms    map[int32]*Manager
	seen  map[int32]*fsm.Image
	dirs  map[int32]string
	// noSessions makes every leader answer FetchSession Unimplemented.
	noSessions bool
}

const testLag = 10 * time.Second

func newEnv(t *testing.T, img *fsm.Image) *env {
	t.Helper()
	e := &env{t: t, clock: newFakeClock(), ctl: &fakeController{t: t, img: img}, ms: map[int32]*Manager{},
		seen: map[int32]*fsm.Image{}, dirs: map[int32]string{}}
	for id := int32(1); id <= 3; id++ {
		e.dirs[id] = t.TempDir()
		e.start(id)
	}
	t.Cleanup(func() {
		for _, m := range e.ms {
			if err := m.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		}
	})
	e.publish()
	return e
}

// start starts (or restarts, on the same dir) broker id's manager.
func (e *env) start(id int32) {
	e.t.Helper()
	m, err := New(Config{DataDir: e.dirs[id], ReplicaLagTimeMax: testLag, FetchMaxWait: time.Millisecond,
		Logger: testLogger(e.t).With("broker", id), clock: e.clock, manualFetch: true,
		dial: func(addr string) (fetchClient, error) { return netConn{e, addr}, nil }})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := m.attach(ctlLink{e.ctl, id}); err != nil {
		e.t.Fatal(err)
	}
	e.ms[id] = m
	delete(e.seen, id)
}

// publish gives every manager the committed image, as its agent would.
func (e *env) publish() {
	e.t.Helper()
	img := e.ctl.image()
	for id, m := range e.ms {
		before := e.seen[id]
		if before == nil {
			before = fsm.Empty()
		}
		m.MetadataChanged(before, img)
		ch := broker.DiffReplicas(id, before, img)
		for _, s := range ch.Stopped {
			m.StopReplica(s.TopicID, s.Partition, s.Delete)
		}
		for _, p := range ch.Leaders {
			m.BecomeLeader(p)
		}
		for _, p := range ch.Followers {
			m.BecomeFollower(p)
		}
		e.seen[id] = img
	}
}

// netConn is a follower's connection to a leader, in process.
type netConn struct {
	e    *env
	addr string
}

func (c netConn) Fetch(ctx context.Context, req *keelpb.FetchRequest) (*keelpb.FetchResponse, error) {
	var id int32
	if _, err := fmt.Sscanf(c.addr, "broker-%d", &id); err != nil || c.e.ms[id] == nil {
		return nil, status.Errorf(codes.Unavailable, "no broker at %s", c.addr)
	}
	if err := rpc.ValidateFetch(req); err != nil {
		return nil, err
	}
	return c.e.ms[id].ReplicaFetch(ctx, req)
}

func (netConn) Close() error { return nil }

// replica returns broker id's replica of t-0.
func (e *env) replica(id int32) *replica {
	e.t.Helper()
	m := e.ms[id]
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.replicas[broker.TopicPartition{TopicID: topicT, Partition: 0}]
	if r == nil {
		e.t.Fatalf("broker %d holds no replica of t-0", id)
	}
	return r
}

// fetch makes follower id fetch once from its leader; it returns the
// fetch's error.
func (e *env) fetch(id int32) error {
	e.t.Helper()
	m, r := e.ms[id], e.replica(id)
	r.mu.Lock()
	gen, leader, epoch, role := r.gen, r.leader, r.leaderEpoch, r.role
	r.mu.Unlock()
	if role != broker.RoleFollower {
		e.t.Fatalf("broker %d is %s, not a follower", id, role)
	}
	return m.fetchOnce(context.Background(), r, gen, leader, epoch)
}

// mustFetch fetches until the follower has nothing more to fetch.
func (e *env) catchUp(id int32) {
	e.t.Helper()
	for range 100 {
		before := e.replica(id).log.LogEndOffset()
		if err := e.fetch(id); err != nil {
			e.t.Fatalf("broker %d fetch: %v", id, err)
		}
		if e.replica(id).log.LogEndOffset() == before {
			return
		}
	}
	e.t.Fatalf("broker %d never caught up", id)
}

// send sends broker id's queued ISR changes, if any, and publishes the
// result; it reports whether an AlterPartition went out.
func (e *env) send(id int32) bool {
	e.t.Helper()
	e.ctl.mu.Lock()
	before := len(e.ctl.requests)
	e.ctl.mu.Unlock()
	for e.ms[id].sendOne(context.Background()) {
	}
	e.publish()
	e.ctl.mu.Lock()
	defer e.ctl.mu.Unlock()
	return len(e.ctl.requests) > before
}

func (e *env) hw(id int32) int64 {
	st, _ := e.ms[id].State(topicT, 0)
	return st.HighWatermark
}

func (e *env) leo(id int32) int64 { return e.replica(id).log.LogEndOffset() }

func (e *env) isr() []int32 {
	p, _ := e.ctl.image().Partition(topicT, 0)
	return p.ISR
}

// produce appends n records at broker id with acks 1.
func (e *env) produce(id int32, n int) broker.ProduceResult {
	e.t.Helper()
	res, err := e.ms[id].Produce(context.Background(), "t", 0, makeBatch(e.t, n, 0, 0), AcksLeader, time.Second)
	if err != nil {
		e.t.Fatalf("produce at broker %d: %v", id, err)
	}
	return res
}
