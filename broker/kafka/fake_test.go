package kafka

import (
	"context"
	"fmt"
	"hash/crc32"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

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
	// principals are the principals admin requests forwarded, in order.
	principals []string
	// ctl is the controller admin APIs' state (ctladmin_fake_test.go).
	ctl ctlAdminFake
}

// forwarded notes the principal of an admin request forwarded to it.
func (m *fakeMeta) forwarded(principal string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.principals = append(m.principals, principal)
}

// forwardedPrincipals are the principals forwarded so far.
func (m *fakeMeta) forwardedPrincipals() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.principals...)
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
		MinMetadataVersion: 1, MaxMetadataVersion: fsm.MaxMetadataVersion}}})
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
	m.forwarded(req.GetPrincipal())
	if _, ok := m.Image().Topic(req.GetName()); ok {
		return nil, status.Errorf(codes.AlreadyExists, "topic already exists: %q", req.GetName())
	}
	if req.GetReplicationFactor() > int32(m.Image().BrokerCount()) {
		return nil, rpc.InvalidArgument("replication_factor", "%d exceeds the %d registered brokers", req.GetReplicationFactor(), m.Image().BrokerCount())
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

func (m *fakeMeta) DeleteTopic(_ context.Context, req *keelpb.DeleteTopicRequest) error {
	m.forwarded(req.GetPrincipal())
	name := req.GetName()
	t, ok := m.Image().Topic(name)
	if !ok {
		return status.Errorf(codes.NotFound, "unknown topic or partition: topic %q", name)
	}
	return m.apply(&keelpb.Record{Record: &keelpb.Record_RemoveTopic{RemoveTopic: &keelpb.RemoveTopicRecord{TopicId: t.ID[:]}}})
}

// AlterConfigs sets and deletes (SET and DELETE; with replace, also
// deletes what is not named) as the controller does, all or none, and
// answers the resource's configs in effect.
func (m *fakeMeta) AlterConfigs(_ context.Context, req *keelpb.IncrementalAlterConfigsRequest) (*keelpb.IncrementalAlterConfigsResponse, error) {
	m.forwarded(req.GetPrincipal())
	img := m.Image()
	res := req.GetResource()
	own := img.ClusterConfigs()
	var t *fsm.Topic
	if res.GetType() == keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC {
		var ok bool
		if t, ok = img.Topic(res.GetName()); !ok {
			return nil, status.Errorf(codes.NotFound, "unknown topic or partition: topic %q", res.GetName())
		}
		own = t.Configs
	}
	var recs []*keelpb.Record
	named := map[string]bool{}
	for i, c := range req.GetConfigs() {
		named[c.GetName()] = true
		rec := &keelpb.ConfigRecord{ResourceType: res.GetType(), ResourceName: res.GetName(), Name: c.GetName()}
		if c.GetOp() == keelpb.AlterConfigOp_ALTER_CONFIG_OP_SET {
			v, err := fsm.CheckConfig(c.GetName(), c.GetValue())
			if err != nil {
				return nil, rpc.InvalidArgument(fmt.Sprintf("configs[%d]", i), "%v", err)
			}
			rec.Value = &v
		}
		recs = append(recs, &keelpb.Record{Record: &keelpb.Record_Config{Config: rec}})
	}
	if req.GetReplace() {
		for name := range own {
			if !named[name] {
				rec := &keelpb.ConfigRecord{ResourceType: res.GetType(), ResourceName: res.GetName(), Name: name}
				recs = append(recs, &keelpb.Record{Record: &keelpb.Record_Config{Config: rec}})
			}
		}
	}
	if !req.GetValidateOnly() {
		if err := m.apply(recs...); err != nil {
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
		img = m.Image()
	}
	vals := img.ClusterDefaults()
	if t != nil {
		t, _ = img.Topic(t.Name)
		vals = img.TopicConfigs(t)
	}
	resp := &keelpb.IncrementalAlterConfigsResponse{}
	for _, v := range vals {
		src := keelpb.ConfigSource(v.Source)
		resp.Configs = append(resp.Configs, &keelpb.ConfigEntry{Name: v.Name, Value: v.Value, Source: src})
	}
	return resp, nil
}

// AlterClientQuotas writes each entry's ops as records (at the level
// that allows them), an entry the state machine refuses answered with its
// error.
func (m *fakeMeta) AlterClientQuotas(_ context.Context, req *keelpb.AlterClientQuotasRequest) (*keelpb.AlterClientQuotasResponse, error) {
	m.forwarded(req.GetPrincipal())
	resp := &keelpb.AlterClientQuotasResponse{}
	for _, e := range req.GetEntries() {
		recs := []*keelpb.Record{{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{
			Name: fsm.MetadataVersionFeature, Level: fsm.ClientQuotaMetadataVersion}}}}
		for _, op := range e.GetOps() {
			recs = append(recs, &keelpb.Record{Record: &keelpb.Record_ClientQuota{ClientQuota: &keelpb.ClientQuotaRecord{
				Entity: e.GetEntity(), Key: op.GetKey(), Value: op.GetValue(), Remove: op.GetRemove()}}})
		}
		result := &keelpb.ClientQuotaResult{}
		if req.GetValidateOnly() {
			_, err := fsm.Apply(m.Image(), m.Image().Offset+1, 1, &keelpb.RecordBatch{Records: recs})
			if err != nil {
				result.Error = err.Error()
			}
		} else if err := m.apply(recs...); err != nil {
			result.Error = err.Error()
		}
		resp.Results = append(resp.Results, result)
	}
	resp.Offset = m.Image().Offset
	return resp, nil
}

// startServer serves broker id's Kafka listener on loopback over meta and
// backend, registered in meta with its address; it stops in t.Cleanup.
func startServer(t *testing.T, id int32, meta *fakeMeta, backend broker.Backend, mutate func(*Config)) *Server {
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

// CreateAcls writes the valid creations, as the controller does (without
// its authorization), moving the fake's level up to the ACLs' first.
func (m *fakeMeta) CreateAcls(_ context.Context, req *keelpb.CreateAclsRequest) (*keelpb.CreateAclsResponse, error) {
	m.forwarded(req.GetPrincipal())
	resp := &keelpb.CreateAclsResponse{Errors: make([]string, len(req.GetCreations()))}
	var recs []*keelpb.Record
	if m.Image().FinalizedMetadataVersion() < fsm.ACLMetadataVersion {
		recs = append(recs, &keelpb.Record{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{Name: fsm.MetadataVersionFeature, Level: fsm.ACLMetadataVersion}}})
	}
	for i, c := range req.GetCreations() {
		b := rpc.BindingFromProto(c)
		if err := b.Validate(); err != nil {
			resp.Errors[i] = err.Error()
			continue
		}
		m.mu.Lock()
		m.nextID++
		id := fsm.ACLID{byte(m.nextID >> 8), byte(m.nextID), 0xac}
		m.mu.Unlock()
		recs = append(recs, fsm.ACLRecord(id, b))
	}
	if err := m.apply(recs...); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return resp, nil
}

// DeleteAcls removes what each filter matches.
func (m *fakeMeta) DeleteAcls(_ context.Context, req *keelpb.DeleteAclsRequest) (*keelpb.DeleteAclsResponse, error) {
	m.forwarded(req.GetPrincipal())
	resp := &keelpb.DeleteAclsResponse{}
	var recs []*keelpb.Record
	for _, pf := range req.GetFilters() {
		f := rpc.FilterFromProto(pf)
		res := &keelpb.DeleteAclsResult{}
		for _, a := range m.Image().ACLs() {
			if f.Matches(a.Binding) {
				res.Deleted = append(res.Deleted, rpc.BindingProto(a.Binding))
				recs = append(recs, &keelpb.Record{Record: &keelpb.Record_RemoveAcl{RemoveAcl: &keelpb.RemoveAccessControlEntryRecord{Id: append([]byte(nil), a.ID[:]...)}}})
			}
		}
		resp.Results = append(resp.Results, res)
	}
	if len(recs) > 0 {
		if err := m.apply(recs...); err != nil {
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
	}
	return resp, nil
}
