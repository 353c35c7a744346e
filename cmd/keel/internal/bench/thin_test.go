package bench

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
)

var topicID = fsm.TopicID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

func encode(t *testing.T, recs ...*keelpb.Record) []byte {
	t.Helper()
	data, err := fsm.EncodeBatch(recs...)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func leader(l int32) *int32 { return &l }

func TestScanBatch(t *testing.T) {
	recs := append(partitionRecords(3),
		&keelpb.Record{Record: &keelpb.Record_FenceBroker{FenceBroker: &keelpb.FenceBrokerRecord{BrokerId: 9, BrokerEpoch: 3}}},
		&keelpb.Record{Record: &keelpb.Record_PartitionChange{PartitionChange: &keelpb.PartitionChangeRecord{TopicId: topicID[:], Leader: leader(2)}}},
		&keelpb.Record{},
	)
	var names []protoreflect.Name
	var fence keelpb.FenceBrokerRecord
	if err := scanBatch(encode(t, recs...), func(name protoreflect.Name, body []byte) {
		names = append(names, name)
		if name == "fence_broker" {
			if err := proto.Unmarshal(body, &fence); err != nil {
				t.Fatal(err)
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	want := []protoreflect.Name{"partition", "partition", "partition", "fence_broker", "partition_change"}
	if len(names) != len(want) {
		t.Fatalf("scanned %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("scanned %v, want %v", names, want)
		}
	}
	if fence.GetBrokerId() != 9 || fence.GetBrokerEpoch() != 3 {
		t.Fatalf("fence record %v", &fence)
	}
	for _, bad := range [][]byte{nil, {0}, {fsm.EntryFormatV1, 0x0a, 0x05}} {
		if err := scanBatch(bad, func(protoreflect.Name, []byte) {}); err == nil {
			t.Errorf("scanBatch(%x) accepted a bad entry", bad)
		}
	}
}

// imageAt returns an image at offset, with a cluster id.
func imageAt(t *testing.T, offset uint64) *fsm.Image {
	t.Helper()
	img, err := fsm.Apply(fsm.Empty(), offset, 1, &keelpb.RecordBatch{Records: []*keelpb.Record{
		{Record: &keelpb.Record_ClusterId{ClusterId: &keelpb.ClusterIdRecord{ClusterId: "c"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestSnapshotIndex(t *testing.T) {
	var buf bytes.Buffer
	if err := fsm.WriteSnapshot(&buf, imageAt(t, 42)); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	if got, err := snapshotIndex(data[:len(data)/2+1]); err != nil || got != 42 {
		t.Fatalf("snapshotIndex = %d, %v; want 42", got, err)
	}
	for _, bad := range [][]byte{nil, []byte("KEELSNAP"), []byte("NOTASNAPSHOT"), data[:12]} {
		if _, err := snapshotIndex(bad); err == nil {
			t.Errorf("snapshotIndex(%q) accepted a bad start", bad)
		}
	}
}

func TestOffsetLog(t *testing.T) {
	var l offsetLog
	t0 := time.Unix(100, 0)
	l.add(5, t0)
	l.add(9, t0.Add(time.Second))
	l.add(7, t0.Add(2*time.Second)) // behind: ignored
	if l.current() != 9 {
		t.Fatalf("current = %d, want 9", l.current())
	}
	for _, tc := range []struct {
		offset uint64
		want   time.Time
		ok     bool
	}{
		{1, t0, true}, {5, t0, true}, {6, t0.Add(time.Second), true}, {9, t0.Add(time.Second), true}, {10, time.Time{}, false},
	} {
		got, ok := l.reachedAt(tc.offset)
		if ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("reachedAt(%d) = %v, %v; want %v, %v", tc.offset, got, ok, tc.want, tc.ok)
		}
	}
}

func TestLeaderWatch(t *testing.T) {
	w := newLeaderWatch(3, []partKey{{topicID, 0}, {topicID, 1}})
	at := time.Unix(200, 0)
	change := func(p, l int32) *keelpb.PartitionChangeRecord {
		return &keelpb.PartitionChangeRecord{TopicId: topicID[:], Partition: p, Leader: leader(l)}
	}
	w.observe(change(0, 3), 10, at)                                                     // still the victim
	w.observe(change(0, fsm.NoLeader), 10, at)                                          // no leader
	w.observe(&keelpb.PartitionChangeRecord{TopicId: topicID[:], Partition: 0}, 10, at) // no leader change
	w.observe(change(7, 1), 10, at)                                                     // not watched
	if left, _, _ := w.state(); left != 2 {
		t.Fatalf("%d left, want 2", left)
	}
	w.observe(change(0, 1), 11, at)
	w.observe(change(1, 2), 12, at.Add(time.Second))
	left, doneAt, offset := w.state()
	if left != 0 || offset != 12 || !doneAt.Equal(at.Add(time.Second)) {
		t.Fatalf("state = %d, %v, %d; want 0, %v, 12", left, doneAt, offset, at.Add(time.Second))
	}
}

// fakeController serves what a thin broker uses: registration, heartbeats
// (release once a shutting-down broker reports releaseAt), a stream of a
// snapshot at offset 5 and, once go is closed, entries 6 and 7.
type fakeController struct {
	keelpb.UnimplementedControllerServiceServer
	snapshot     []byte
	entries      []*keelpb.MetadataEntry
	goOn         chan struct{}
	releaseAt    uint64
	unregistered chan struct{}

	mu         sync.Mutex
	heartbeats []*keelpb.BrokerHeartbeatRequest
}

func (f *fakeController) RegisterBroker(context.Context, *keelpb.RegisterBrokerRequest) (*keelpb.RegisterBrokerResponse, error) {
	return &keelpb.RegisterBrokerResponse{BrokerEpoch: 5, ClusterId: "c", ControllerEpoch: 1}, nil
}

func (f *fakeController) BrokerHeartbeat(_ context.Context, req *keelpb.BrokerHeartbeatRequest) (*keelpb.BrokerHeartbeatResponse, error) {
	f.mu.Lock()
	f.heartbeats = append(f.heartbeats, req)
	f.mu.Unlock()
	return &keelpb.BrokerHeartbeatResponse{
		IsFenced:       req.GetMetadataOffset() < 5,
		ShouldShutDown: req.GetWantShutdown() && req.GetMetadataOffset() >= f.releaseAt,
	}, nil
}

func (f *fakeController) UnregisterBroker(context.Context, *keelpb.UnregisterBrokerRequest) (*keelpb.UnregisterBrokerResponse, error) {
	close(f.unregistered)
	return &keelpb.UnregisterBrokerResponse{}, nil
}

func (f *fakeController) StreamMetadata(req *keelpb.StreamMetadataRequest, s grpc.ServerStreamingServer[keelpb.MetadataPush]) error {
	if req.GetFromOffset() == 0 {
		half := len(f.snapshot) / 2
		for _, c := range []*keelpb.SnapshotChunk{{Data: f.snapshot[:half]}, {Data: f.snapshot[half:], Last: true}} {
			if err := s.Send(&keelpb.MetadataPush{ControllerEpoch: 1, Body: &keelpb.MetadataPush_Snapshot{Snapshot: c}}); err != nil {
				return err
			}
		}
	}
	select {
	case <-f.goOn:
	case <-s.Context().Done():
		return nil
	}
	var todo []*keelpb.MetadataEntry
	for _, e := range f.entries {
		if e.Offset > req.GetFromOffset() {
			todo = append(todo, e)
		}
	}
	if err := s.Send(&keelpb.MetadataPush{ControllerEpoch: 1, Body: &keelpb.MetadataPush_Entries{Entries: &keelpb.MetadataEntries{Entries: todo}}}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

func (f *fakeController) lastHeartbeat() *keelpb.BrokerHeartbeatRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.heartbeats) == 0 {
		return nil
	}
	return f.heartbeats[len(f.heartbeats)-1]
}

func TestThinBroker(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs last
	var snap bytes.Buffer
	if err := fsm.WriteSnapshot(&snap, imageAt(t, 5)); err != nil {
		t.Fatal(err)
	}
	f := &fakeController{
		snapshot: snap.Bytes(),
		entries: []*keelpb.MetadataEntry{
			{PrevOffset: 5, Offset: 6, Term: 1, Data: encode(t,
				&keelpb.Record{Record: &keelpb.Record_Topic{Topic: &keelpb.TopicRecord{Name: "t", TopicId: topicID[:]}}},
				&keelpb.Record{Record: &keelpb.Record_FenceBroker{FenceBroker: &keelpb.FenceBrokerRecord{BrokerId: 9, BrokerEpoch: 3}}})},
			{PrevOffset: 6, Offset: 7, Term: 1, Data: encode(t,
				&keelpb.Record{Record: &keelpb.Record_PartitionChange{PartitionChange: &keelpb.PartitionChangeRecord{TopicId: topicID[:], Partition: 0, Leader: leader(2)}}},
				&keelpb.Record{Record: &keelpb.Record_ControllerEpoch{ControllerEpoch: &keelpb.ControllerEpochRecord{Epoch: 4, LeaderId: 1}}})},
		},
		goOn:         make(chan struct{}),
		releaseAt:    7,
		unregistered: make(chan struct{}),
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	keelpb.RegisterControllerServiceServer(g, f)
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); <-served })

	hb := &latencies{}
	hb.start()
	b, err := startThinBroker(1, "r1", []string{lis.Addr().String()}, 20*time.Millisecond, hb, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Kill)
	ctx := context.Background()
	await := func(what string, cond func() bool) {
		t.Helper()
		if err := poll.Wait(ctx, 10*time.Second, time.Millisecond, what, func() (bool, error) { return cond(), nil }); err != nil {
			t.Fatal(err)
		}
	}
	await("the snapshot", func() bool { return b.Offset() == 5 })
	if b.Epoch() != 5 || b.SnapshotsSince(time.Time{}) != 1 {
		t.Fatalf("epoch %d, %d snapshots; want 5, 1", b.Epoch(), b.SnapshotsSince(time.Time{}))
	}
	w := newLeaderWatch(3, []partKey{{topicID, 0}})
	b.setWatch(w)
	close(f.goOn)
	await("the entries", func() bool { return b.Offset() == 7 })
	await("a heartbeat acknowledging offset 7", func() bool { h := f.lastHeartbeat(); return h != nil && h.GetMetadataOffset() == 7 })

	at6, ok6 := b.ReachedAt(6)
	at7, ok7 := b.ReachedAt(7)
	if _, ok := b.ReachedAt(8); !ok6 || !ok7 || ok || at7.Before(at6) {
		t.Fatalf("ReachedAt: 6 at %v (%v), 7 at %v (%v), 8 found %v", at6, ok6, at7, ok7, ok)
	}
	if ev := b.Events(EventFence); len(ev) != 1 || ev[0].Broker != 9 || ev[0].Epoch != 3 || ev[0].Offset != 6 {
		t.Errorf("fence events %+v", ev)
	}
	if ev := b.Events(EventTopic); len(ev) != 1 || ev[0].Name != "t" || ev[0].Offset != 6 {
		t.Errorf("topic events %+v", ev)
	}
	if ev := b.Events(EventControllerEpoch); len(ev) != 1 || ev[0].Epoch != 4 || ev[0].Offset != 7 {
		t.Errorf("controller epoch events %+v", ev)
	}
	if left, _, offset := w.state(); left != 0 || offset != 7 {
		t.Errorf("leader watch: %d left, offset %d; want 0, 7", left, offset)
	}
	if lat, failed := hb.stop(); len(lat) == 0 || failed != 0 {
		t.Errorf("%d heartbeat latencies, %d failures", len(lat), failed)
	}

	took, err := b.Shutdown(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if took < 0 {
		t.Fatalf("controlled shutdown took %v", took)
	}
	// As broker.Agent's, a controlled shutdown leaves the broker
	// registered (fenced): unregistering is an operator's act.
	select {
	case <-f.unregistered:
		t.Fatal("the broker unregistered after its controlled shutdown")
	default:
	}
	if h := f.lastHeartbeat(); !h.GetWantShutdown() {
		t.Fatalf("the last heartbeat %v did not ask to shut down", h)
	}
}
