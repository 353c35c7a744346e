package kafka

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

type tp struct {
	topic     string
	partition int32
}

// fakeLog is one partition's log in memory: v2 batches with their base
// offsets, and the idempotent producers' batches seen, by (id, base
// sequence).
type fakeLog struct {
	batches [][]byte
	bases   []int64
	leo     int64
	seen    map[[2]int64]int64
}

// fakeBackend is a data plane in memory: every append is at once below the
// high watermark. refuse makes a partition answer an error.
type fakeBackend struct {
	mu      sync.Mutex
	logs    map[tp]*fakeLog
	grew    chan struct{} // closed and replaced on every append
	refuse  map[tp]error
	appends atomic.Int64
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{logs: map[tp]*fakeLog{}, grew: make(chan struct{}), refuse: map[tp]error{}}
}

func (b *fakeBackend) setRefusal(topic string, p int32, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refuse[tp{topic, p}] = err
}

func (b *fakeBackend) logLocked(topic string, p int32) *fakeLog {
	l := b.logs[tp{topic, p}]
	if l == nil {
		l = &fakeLog{seen: map[[2]int64]int64{}}
		b.logs[tp{topic, p}] = l
	}
	return l
}

func (b *fakeBackend) Produce(_ context.Context, topic string, partition int32, batch []byte, _ int16, _ time.Duration) (ProduceResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.refuse[tp{topic, partition}]; err != nil {
		return ProduceResult{}, err
	}
	l := b.logLocked(topic, partition)
	count := int64(int32(binary.BigEndian.Uint32(batch[23:]))) + 1
	pid, seq := int64(binary.BigEndian.Uint64(batch[43:])), int64(int32(binary.BigEndian.Uint32(batch[53:])))
	if pid >= 0 {
		if off, ok := l.seen[[2]int64{pid, seq}]; ok {
			return ProduceResult{BaseOffset: off, LogAppendTime: -1}, nil
		}
		l.seen[[2]int64{pid, seq}] = l.leo
	}
	stored := append([]byte(nil), batch...)
	binary.BigEndian.PutUint64(stored, uint64(l.leo))
	l.batches, l.bases = append(l.batches, stored), append(l.bases, l.leo)
	base := l.leo
	l.leo += count
	b.appends.Add(1)
	close(b.grew)
	b.grew = make(chan struct{})
	return ProduceResult{BaseOffset: base, LogAppendTime: -1}, nil
}

func (b *fakeBackend) Fetch(ctx context.Context, topic string, partition int32, _ int32, offset int64, maxBytes int32, maxWait time.Duration) (FetchResult, error) {
	deadline := time.NewTimer(maxWait)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		if err := b.refuse[tp{topic, partition}]; err != nil {
			b.mu.Unlock()
			return FetchResult{}, err
		}
		l := b.logLocked(topic, partition)
		if offset < 0 || offset > l.leo {
			b.mu.Unlock()
			return FetchResult{}, kerr.OffsetOutOfRange
		}
		if offset < l.leo || maxWait <= 0 {
			res := FetchResult{HighWatermark: l.leo}
			for i := range l.bases {
				next := l.leo
				if i+1 < len(l.bases) {
					next = l.bases[i+1]
				}
				if next <= offset {
					continue
				}
				if len(res.Records) > 0 && len(res.Records)+len(l.batches[i]) > int(maxBytes) {
					break
				}
				res.Records = append(res.Records, l.batches[i]...)
			}
			b.mu.Unlock()
			return res, nil
		}
		grew := b.grew
		b.mu.Unlock()
		select {
		case <-grew:
		case <-deadline.C:
			maxWait = 0
		case <-ctx.Done():
			return FetchResult{}, ctx.Err()
		}
	}
}

func (b *fakeBackend) ListOffsets(_ context.Context, topic string, partition int32, _ int32, timestamp int64) (int64, int32, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.refuse[tp{topic, partition}]; err != nil {
		return 0, 0, err
	}
	switch timestamp {
	case -2:
		return 0, 0, nil
	case -1:
		return b.logLocked(topic, partition).leo, 0, nil
	}
	return 0, 0, kerr.UnsupportedVersion
}

// fakeMeta is a metadata image driven by records, and a controller that
// writes them: what the agent and the active controller are to the
// listener.
type fakeMeta struct {
	t      testing.TB
	mu     sync.Mutex
	img    atomic.Pointer[fsm.Image]
	topics int
	nextID int64
	allocs atomic.Int64
}

func newFakeMeta(t testing.TB) *fakeMeta {
	m := &fakeMeta{t: t}
	m.img.Store(fsm.Empty())
	m.apply(
		&keelpb.Record{Record: &keelpb.Record_ClusterId{ClusterId: &keelpb.ClusterIdRecord{ClusterId: "kafka-test"}}},
		&keelpb.Record{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{Name: fsm.MetadataVersionFeature, Level: 1}}},
		&keelpb.Record{Record: &keelpb.Record_ControllerEpoch{ControllerEpoch: &keelpb.ControllerEpochRecord{Epoch: 1, LeaderId: 1}}},
	)
	return m
}

func (m *fakeMeta) Image() *fsm.Image { return m.img.Load() }

func (m *fakeMeta) apply(recs ...*keelpb.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	img := m.img.Load()
	next, err := fsm.Apply(img, img.Offset+1, 1, &keelpb.RecordBatch{Records: recs})
	if err != nil {
		return err
	}
	m.img.Store(next)
	return nil
}

func (m *fakeMeta) must(recs ...*keelpb.Record) {
	m.t.Helper()
	if err := m.apply(recs...); err != nil {
		m.t.Fatal(err)
	}
}

// addBroker registers broker id, active, with its Kafka listener at addr.
func (m *fakeMeta) addBroker(id int32, addr string) {
	m.t.Helper()
	m.must(&keelpb.Record{Record: &keelpb.Record_BrokerRegistration{BrokerRegistration: &keelpb.BrokerRegistrationRecord{
		BrokerId: id, IncarnationId: fmt.Sprintf("inc-%d", id), Address: fmt.Sprintf("127.0.0.1:%d", 9200+id), KafkaAddress: addr,
		MinMetadataVersion: 1, MaxMetadataVersion: 1}}})
	b, _ := m.Image().Broker(id)
	m.must(&keelpb.Record{Record: &keelpb.Record_UnfenceBroker{UnfenceBroker: &keelpb.UnfenceBrokerRecord{BrokerId: id, BrokerEpoch: b.Epoch}}})
}

// topicRecords makes a topic whose partition i has replicas[i], led by
// the first.
func (m *fakeMeta) topicRecords(name string, replicas ...[]int32) []*keelpb.Record {
	m.topics++
	id := fsm.TopicID{byte(m.topics), 0xee}
	recs := []*keelpb.Record{{Record: &keelpb.Record_Topic{Topic: &keelpb.TopicRecord{Name: name, TopicId: id[:]}}}}
	for i, r := range replicas {
		recs = append(recs, &keelpb.Record{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{
			TopicId: id[:], Partition: int32(i), Replicas: r, Isr: r, Leader: r[0]}}})
	}
	return recs
}

func (m *fakeMeta) createTopic(name string, replicas ...[]int32) {
	m.t.Helper()
	m.must(m.topicRecords(name, replicas...)...)
}

// moveLeader makes broker to the leader of topic's partition p.
func (m *fakeMeta) moveLeader(topic string, p int32, to int32) {
	m.t.Helper()
	t, _ := m.Image().Topic(topic)
	m.must(&keelpb.Record{Record: &keelpb.Record_PartitionChange{PartitionChange: &keelpb.PartitionChangeRecord{
		TopicId: t.ID[:], Partition: p, Leader: &to}}})
}

func (m *fakeMeta) AllocateProducerIds(context.Context) (int64, int32, error) {
	m.allocs.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	start := m.nextID
	m.nextID += fsm.ProducerIDBlockSize
	return start, fsm.ProducerIDBlockSize, nil
}

// CreateTopic places every partition on broker 1 alone, or on the
// assignment given.
func (m *fakeMeta) CreateTopic(_ context.Context, req *keelpb.CreateTopicRequest) (*keelpb.CreateTopicResponse, error) {
	if _, ok := m.Image().Topic(req.GetName()); ok {
		return nil, status.Errorf(codes.AlreadyExists, "topic already exists: %q", req.GetName())
	}
	if req.GetReplicationFactor() > int32(m.Image().BrokerCount()) {
		return nil, status.Errorf(codes.InvalidArgument, "replication_factor: %d exceeds the %d registered brokers", req.GetReplicationFactor(), m.Image().BrokerCount())
	}
	var replicas [][]int32
	for _, a := range req.GetAssignments() {
		replicas = append(replicas, a.GetReplicas())
	}
	for range req.GetPartitions() - int32(len(replicas)) {
		replicas = append(replicas, []int32{1})
	}
	desc := &keelpb.TopicDescription{Name: req.GetName()}
	for i, r := range replicas {
		desc.Partitions = append(desc.Partitions, &keelpb.PartitionDescription{Partition: int32(i), Replicas: r})
	}
	if req.GetValidateOnly() {
		return &keelpb.CreateTopicResponse{Topic: desc}, nil
	}
	if err := m.apply(m.topicRecords(req.GetName(), replicas...)...); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &keelpb.CreateTopicResponse{Topic: desc}, nil
}

func (m *fakeMeta) CreatePartitions(context.Context, *keelpb.CreatePartitionsRequest) (*keelpb.CreatePartitionsResponse, error) {
	return nil, status.Error(codes.Unimplemented, "not in this fake")
}

func (m *fakeMeta) DeleteTopic(_ context.Context, name string) error {
	t, ok := m.Image().Topic(name)
	if !ok {
		return status.Errorf(codes.NotFound, "unknown topic or partition: topic %q", name)
	}
	return m.apply(&keelpb.Record{Record: &keelpb.Record_RemoveTopic{RemoveTopic: &keelpb.RemoveTopicRecord{TopicId: t.ID[:]}}})
}

// startServer serves broker id's Kafka listener on loopback over meta and
// backend, registered in meta with its address; it stops in t.Cleanup.
func startServer(t *testing.T, id int32, meta *fakeMeta, backend Backend, mutate func(*Config)) *Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{BrokerID: id, Image: meta, Backend: backend, Controller: meta, Logger: testLogger(t)}
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := Serve(lis, cfg)
	if err != nil {
		lis.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	meta.addBroker(id, s.Addr())
	return s
}

// crc32c is the v2 batch checksum.
func crc32c(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }
