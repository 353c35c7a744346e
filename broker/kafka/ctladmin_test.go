package kafka

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/tlsauth"
)

// partitionErrors flattens per-partition error codes, by "topic/partition".
type partitionErrors map[string]int16

func tpKey(topic string, p int32) string { return fmt.Sprintf("%s/%d", topic, p) }

func (m *fakeMeta) setCtlErr(err error) {
	m.withCtl(func(ctl *ctlAdminFake) { ctl.err = err })
}

// TestServer_ElectLeaders: each partition of an ElectLeaders gets Kafka's
// error for its own outcome; a partition named twice, negative or of an
// empty topic name is answered on the broker and not forwarded; a null
// topic list elects every partition and leaves out those that needed no
// election; an unknown election type refuses the request whole; a
// controller that does not answer is REQUEST_TIMED_OUT, retriable.
func TestServer_ElectLeaders(t *testing.T) {
	meta := newFakeMeta(t)
	s := startServer(t, 1, meta, NewMemoryBackend(), nil)
	meta.addBroker(2, "127.0.0.1:1")
	meta.createTopic("orders", []int32{1, 2}, []int32{2, 1}, []int32{1, 2})
	meta.moveLeader("orders", 0, 2)
	cl := newClient(t, []string{s.Addr()})
	elect := func(typ int8, topics map[string][]int32, order ...string) *kmsg.ElectLeadersResponse {
		t.Helper()
		req := kmsg.NewPtrElectLeadersRequest()
		req.ElectionType, req.TimeoutMillis = typ, 5000
		if topics != nil {
			req.Topics = []kmsg.ElectLeadersRequestTopic{}
		}
		for _, name := range order {
			rt := kmsg.NewElectLeadersRequestTopic()
			rt.Topic, rt.Partitions = name, topics[name]
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	flat := func(resp *kmsg.ElectLeadersResponse) partitionErrors {
		got := partitionErrors{}
		for _, rt := range resp.Topics {
			for _, p := range rt.Partitions {
				if _, dup := got[tpKey(rt.Topic, p.Partition)]; dup {
					t.Errorf("%s/%d answered twice", rt.Topic, p.Partition)
				}
				got[tpKey(rt.Topic, p.Partition)] = p.ErrorCode
			}
		}
		return got
	}

	resp := elect(0, map[string][]int32{"orders": {0, 1, 2, 2, -1}, "": {0}, "nosuch": {0}}, "orders", "", "nosuch")
	want := partitionErrors{
		tpKey("orders", 0):  0,
		tpKey("orders", 1):  kerr.ElectionNotNeeded.Code,
		tpKey("orders", 2):  kerr.InvalidRequest.Code,
		tpKey("orders", -1): kerr.UnknownTopicOrPartition.Code,
		tpKey("", 0):        kerr.UnknownTopicOrPartition.Code,
		tpKey("nosuch", 0):  kerr.UnknownTopicOrPartition.Code,
	}
	if got := flat(resp); !maps.Equal(got, want) {
		t.Errorf("preferred election: %v, want %v", got, want)
	}
	if resp.ErrorCode != 0 {
		t.Errorf("top-level error %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	if p, _ := meta.Image().Partition(mustTopic(t, meta, "orders").ID, 0); p.Leader != 1 {
		t.Errorf("orders/0 led by %d after the election, want its preferred 1", p.Leader)
	}
	if p, _ := meta.Image().Partition(mustTopic(t, meta, "orders").ID, 2); p.Leader != 1 {
		t.Errorf("orders/2, named twice, changed: led by %d", p.Leader)
	}

	// Every partition: the ones that needed no election are left out.
	meta.moveLeader("orders", 2, 2)
	if got := flat(elect(0, nil)); !maps.Equal(got, partitionErrors{tpKey("orders", 2): 0}) {
		t.Errorf("election of every partition: %v, want orders/2 only", got)
	}

	before := len(meta.forwardedPrincipals())
	resp = elect(7, map[string][]int32{"orders": {0}}, "orders")
	if resp.ErrorCode != kerr.InvalidRequest.Code || flat(resp)[tpKey("orders", 0)] != kerr.InvalidRequest.Code {
		t.Errorf("unknown election type: %+v", resp)
	}
	if n := len(meta.forwardedPrincipals()); n != before {
		t.Errorf("an unknown election type was forwarded")
	}

	// More partitions than the controller takes in one request.
	many := make([]int32, 100_001)
	for i := range many {
		many[i] = int32(i)
	}
	resp = elect(0, map[string][]int32{"orders": many}, "orders")
	if got := flat(resp); resp.ErrorCode != kerr.InvalidRequest.Code || len(got) != len(many) || got[tpKey("orders", 0)] != kerr.InvalidRequest.Code {
		t.Errorf("%d partitions: top-level %v, %d answered", len(many), kerr.ErrorForCode(resp.ErrorCode), len(got))
	}
	if n := len(meta.forwardedPrincipals()); n != before {
		t.Errorf("an election of %d partitions was forwarded", len(many))
	}

	meta.setCtlErr(status.Error(codes.Unavailable, "no active controller"))
	if got := flat(elect(1, map[string][]int32{"orders": {0}}, "orders")); got[tpKey("orders", 0)] != kerr.RequestTimedOut.Code {
		t.Errorf("controller away: %v, want REQUEST_TIMED_OUT", got)
	}
}

func mustTopic(t *testing.T, meta *fakeMeta, name string) *fsm.Topic {
	t.Helper()
	tp, ok := meta.Image().Topic(name)
	if !ok {
		t.Fatalf("no topic %s", name)
	}
	return tp
}

// TestServer_PartitionReassignments: each partition of an
// AlterPartitionReassignments gets its own outcome, as in Kafka, though
// the controller decides a plan whole: when it refuses the plan, the
// others are still made; an empty (not null) replica list, a broker named
// twice, a negative partition are refused on the broker; null cancels, and
// cancelling nothing is NO_REASSIGNMENT_IN_PROGRESS. The list shows the
// ongoing ones, of the partitions named or of all.
func TestServer_PartitionReassignments(t *testing.T) {
	meta := newFakeMeta(t)
	s := startServer(t, 1, meta, NewMemoryBackend(), nil)
	cl := newClient(t, []string{s.Addr()})
	meta.withCtl(func(ctl *ctlAdminFake) { ctl.refuse = map[topicPartition]bool{{"orders", 1}: true} })
	alter := func(parts ...kmsg.AlterPartitionAssignmentsRequestTopicPartition) partitionErrors {
		t.Helper()
		req := kmsg.NewPtrAlterPartitionAssignmentsRequest()
		rt := kmsg.NewAlterPartitionAssignmentsRequestTopic()
		rt.Topic, rt.Partitions = "orders", parts
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		got := partitionErrors{}
		for _, rt := range resp.Topics {
			for _, p := range rt.Partitions {
				got[tpKey(rt.Topic, p.Partition)] = p.ErrorCode
			}
		}
		return got
	}
	part := func(p int32, replicas []int32) kmsg.AlterPartitionAssignmentsRequestTopicPartition {
		return kmsg.AlterPartitionAssignmentsRequestTopicPartition{Partition: p, Replicas: replicas}
	}
	got := alter(part(0, []int32{2, 3}), part(1, []int32{3}), part(2, []int32{}), part(3, []int32{2, 2}), part(4, []int32{2}), part(4, nil), part(-1, []int32{2}))
	want := partitionErrors{
		tpKey("orders", 0):  0,
		tpKey("orders", 1):  kerr.InvalidReplicaAssignment.Code,
		tpKey("orders", 2):  kerr.InvalidReplicaAssignment.Code,
		tpKey("orders", 3):  kerr.InvalidReplicaAssignment.Code,
		tpKey("orders", 4):  kerr.InvalidRequest.Code,
		tpKey("orders", -1): kerr.UnknownTopicOrPartition.Code,
	}
	if !maps.Equal(got, want) {
		t.Errorf("alter: %v, want %v", got, want)
	}

	list := func(topics []kmsg.ListPartitionReassignmentsRequestTopic) *kmsg.ListPartitionReassignmentsResponse {
		t.Helper()
		req := kmsg.NewPtrListPartitionReassignmentsRequest()
		req.Topics = topics
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := list(nil)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("list: %+v, want orders/0 alone", resp)
	}
	if p := resp.Topics[0].Partitions[0]; p.Partition != 0 || !slices.Equal(p.AddingReplicas, []int32{2, 3}) || !slices.Equal(p.Replicas, []int32{1, 2, 3}) || !slices.Equal(p.RemovingReplicas, []int32{1}) {
		t.Errorf("orders/0 listed as %+v", p)
	}
	if resp := list([]kmsg.ListPartitionReassignmentsRequestTopic{{Topic: "orders", Partitions: []int32{5}}}); len(resp.Topics) != 0 {
		t.Errorf("list of orders/5, not moving: %+v", resp.Topics)
	}

	if got := alter(part(0, nil)); got[tpKey("orders", 0)] != 0 {
		t.Errorf("cancel: %v", got)
	}
	if got := alter(part(0, nil)); got[tpKey("orders", 0)] != kerr.NoReassignmentInProgress.Code {
		t.Errorf("cancel again: %v, want NO_REASSIGNMENT_IN_PROGRESS", got)
	}
	if resp := list(nil); len(resp.Topics) != 0 {
		t.Errorf("list after the cancel: %+v", resp.Topics)
	}
}

// TestServer_DescribeQuorum: the active controller's description in
// KIP-595/853's shape: leader, raft term, commit index as the high
// watermark, each voter's match index and last contact, a nonvoter as an
// observer, the controllers' addresses (v2); a request for another
// partition than the metadata log's is INVALID_REQUEST.
func TestServer_DescribeQuorum(t *testing.T) {
	meta := newFakeMeta(t)
	s := startServer(t, 1, meta, NewMemoryBackend(), nil)
	cl := newClient(t, []string{s.Addr()})
	quorum := &keelpb.DescribeQuorumResponse{NodeId: 2, Active: true, LeaderId: 2, RaftTerm: 7, ControllerEpoch: 3, CommitIndex: 100,
		Voters: []*keelpb.QuorumMember{
			{Id: 1, Address: "127.0.0.1:9091", Suffrage: "voter"},
			{Id: 2, Address: "127.0.0.1:9092", Suffrage: "voter"},
			{Id: 3, Address: "127.0.0.1:9093", Suffrage: "voter"},
			{Id: 4, Address: "127.0.0.1:9094", Suffrage: "nonvoter"},
		},
		Replication: []*keelpb.VoterReplication{
			{Id: 1, MatchIndex: 100, LastContactMs: 20},
			{Id: 2, MatchIndex: 101, LastContactMs: 0},
			{Id: 3, MatchIndex: 90, LastContactMs: -1},
		}}
	meta.withCtl(func(ctl *ctlAdminFake) { ctl.quorum = quorum })
	describe := func(topic string) *kmsg.DescribeQuorumResponse {
		t.Helper()
		req := kmsg.NewPtrDescribeQuorumRequest()
		req.Topics = []kmsg.DescribeQuorumRequestTopic{{Topic: topic, Partitions: []kmsg.DescribeQuorumRequestTopicPartition{{Partition: 0}}}}
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	start := time.Now().UnixMilli()
	resp := describe("__cluster_metadata")
	if resp.ErrorCode != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("describe: %+v", resp)
	}
	p := resp.Topics[0].Partitions[0]
	if p.LeaderID != 2 || p.LeaderEpoch != 7 || p.HighWatermark != 100 || len(p.CurrentVoters) != 3 || len(p.Observers) != 1 {
		t.Fatalf("partition: %+v", p)
	}
	v1, v2, v3, o4 := p.CurrentVoters[0], p.CurrentVoters[1], p.CurrentVoters[2], p.Observers[0]
	switch {
	case v1.ReplicaID != 1 || v1.LogEndOffset != 100 || v1.LastFetchTimestamp > start-20+5000 || v1.LastFetchTimestamp < start-20-5000 || v1.LastCaughtUpTimestamp != v1.LastFetchTimestamp:
		t.Errorf("voter 1: %+v", v1)
	case v2.ReplicaID != 2 || v2.LogEndOffset != 101 || v2.LastFetchTimestamp < start:
		t.Errorf("voter 2, the leader: %+v", v2)
	case v3.ReplicaID != 3 || v3.LogEndOffset != 90 || v3.LastFetchTimestamp != -1 || v3.LastCaughtUpTimestamp != -1:
		t.Errorf("voter 3, not heard from: %+v", v3)
	case o4.ReplicaID != 4 || o4.LogEndOffset != -1 || o4.LastFetchTimestamp != -1:
		t.Errorf("observer 4: %+v", o4)
	}
	if len(resp.Nodes) != 4 || resp.Nodes[3].NodeID != 4 || len(resp.Nodes[3].Listeners) != 1 || resp.Nodes[3].Listeners[0].Port != 9094 {
		t.Errorf("nodes: %+v", resp.Nodes)
	}
	if resp := describe("orders"); resp.ErrorCode != kerr.InvalidRequest.Code || len(resp.Topics) != 0 {
		t.Errorf("another topic: %+v", resp)
	}
	meta.setCtlErr(status.Error(codes.Unavailable, "no active controller"))
	if resp := describe("__cluster_metadata"); resp.ErrorCode != kerr.RequestTimedOut.Code {
		t.Errorf("controller away: %v, want REQUEST_TIMED_OUT", kerr.ErrorForCode(resp.ErrorCode))
	}
}

// TestServer_UpdateFeatures: metadata.version updates are forwarded (with
// validate_only), each other feature, an unsafe or unknown upgrade type, a
// level below 1 and a feature named twice are refused per feature on the
// broker, and ApiVersions carries the supported and finalized levels.
func TestServer_UpdateFeatures(t *testing.T) {
	meta := newFakeMeta(t)
	s := startServer(t, 1, meta, NewMemoryBackend(), nil)
	cl := newClient(t, []string{s.Addr()})
	update := func(validateOnly bool, updates ...kmsg.UpdateFeaturesRequestFeatureUpdate) map[string]int16 {
		t.Helper()
		req := kmsg.NewPtrUpdateFeaturesRequest()
		req.ValidateOnly, req.FeatureUpdates, req.TimeoutMillis = validateOnly, updates, 5000
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		if resp.ErrorCode != 0 {
			t.Fatalf("top-level error %v", kerr.ErrorForCode(resp.ErrorCode))
		}
		got := map[string]int16{}
		for _, r := range resp.Results {
			got[r.Feature] = r.ErrorCode
		}
		return got
	}
	fu := func(name string, level int16, typ int8) kmsg.UpdateFeaturesRequestFeatureUpdate {
		return kmsg.UpdateFeaturesRequestFeatureUpdate{Feature: name, MaxVersionLevel: level, UpgradeType: typ}
	}
	for _, tt := range []struct {
		name string
		u    []kmsg.UpdateFeaturesRequestFeatureUpdate
		want map[string]int16
	}{
		{"validate only", []kmsg.UpdateFeaturesRequestFeatureUpdate{fu("metadata.version", 3, 1)}, map[string]int16{"metadata.version": 0}},
		{"unknown feature", []kmsg.UpdateFeaturesRequestFeatureUpdate{fu("kraft.version", 1, 1)}, map[string]int16{"kraft.version": kerr.InvalidUpdateVersion.Code}},
		{"unsafe downgrade", []kmsg.UpdateFeaturesRequestFeatureUpdate{fu("metadata.version", 1, 3)}, map[string]int16{"metadata.version": kerr.InvalidUpdateVersion.Code}},
		{"unknown upgrade type", []kmsg.UpdateFeaturesRequestFeatureUpdate{fu("metadata.version", 2, 9)}, map[string]int16{"metadata.version": kerr.InvalidUpdateVersion.Code}},
		{"removal", []kmsg.UpdateFeaturesRequestFeatureUpdate{fu("metadata.version", 0, 2)}, map[string]int16{"metadata.version": kerr.InvalidUpdateVersion.Code}},
		{"named twice", []kmsg.UpdateFeaturesRequestFeatureUpdate{fu("metadata.version", 2, 1), fu("metadata.version", 3, 1)}, map[string]int16{"metadata.version": kerr.InvalidRequest.Code}},
		{"unsupported level", []kmsg.UpdateFeaturesRequestFeatureUpdate{fu("metadata.version", 9, 1)}, map[string]int16{"metadata.version": kerr.InvalidUpdateVersion.Code}},
	} {
		meta.withCtl(func(ctl *ctlAdminFake) { ctl.features = nil })
		if got := update(tt.name == "validate only", tt.u...); !maps.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
		var features []*keelpb.UpdateFeaturesRequest
		meta.withCtl(func(ctl *ctlAdminFake) { features = ctl.features })
		forwarded := len(features)
		switch tt.name {
		case "validate only":
			if forwarded != 1 || !features[0].GetValidateOnly() || features[0].GetMetadataVersion() != 3 {
				t.Errorf("validate only forwarded %v", features)
			}
		case "unsupported level":
			if forwarded != 1 {
				t.Errorf("%s: forwarded %d", tt.name, forwarded)
			}
		default:
			if forwarded != 0 {
				t.Errorf("%s: forwarded %v", tt.name, features)
			}
		}
	}
	if lvl := meta.Image().FinalizedMetadataVersion(); lvl != 1 {
		t.Errorf("level %d after a validate-only update", lvl)
	}

	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	if f := resp.FinalizedFeatures; len(f) != 1 || f[0].Name != "metadata.version" || f[0].MaxVersionLevel != 1 || f[0].MinVersionLevel != 1 {
		t.Errorf("finalized features %+v", f)
	}
	if f := resp.SupportedFeatures; len(f) != 1 || f[0].Name != "metadata.version" || f[0].MinVersion != 1 || f[0].MaxVersion != int16(fsm.MaxMetadataVersion) {
		t.Errorf("supported features %+v (broker 1 registered 1-%d)", f, fsm.MaxMetadataVersion)
	}
	if resp.FinalizedFeaturesEpoch != int64(meta.Image().Offset) {
		t.Errorf("finalized features epoch %d, want the image's offset %d", resp.FinalizedFeaturesEpoch, meta.Image().Offset)
	}
}

// TestServer_ControllerAdminAuthorization: with TLS, a client that is no
// admin may describe the quorum and list reassignments (DESCRIBE on the
// cluster) but not elect, reassign or update features (ALTER on the
// cluster): CLUSTER_AUTHORIZATION_FAILED, and nothing is forwarded.
func TestServer_ControllerAdminAuthorization(t *testing.T) {
	ca, err := tlsauth.NewCA("kafka test CA")
	if err != nil {
		t.Fatal(err)
	}
	certs := map[string]*tlsauth.Config{}
	for _, cn := range []string{"broker-1", "broker-2"} {
		if certs[cn], err = ca.Config(cn, "127.0.0.1"); err != nil {
			t.Fatal(err)
		}
	}
	meta := newFakeMeta(t)
	s := startServer(t, 1, meta, NewMemoryBackend(), func(c *Config) { c.TLS = certs["broker-1"] })
	meta.createTopic("orders", []int32{1})
	meta.withCtl(func(ctl *ctlAdminFake) {
		ctl.quorum = &keelpb.DescribeQuorumResponse{NodeId: 1, Active: true, RaftTerm: 2}
	})
	cl := newClient(t, []string{s.Addr()}, kgo.DialTLSConfig(userTLS(t, ca, "app-orders")))
	ctx := context.Background()

	el := kmsg.NewPtrElectLeadersRequest()
	el.Topics = []kmsg.ElectLeadersRequestTopic{{Topic: "orders", Partitions: []int32{0}}}
	if resp, err := el.RequestWith(ctx, cl); err != nil || resp.ErrorCode != kerr.ClusterAuthorizationFailed.Code || resp.Topics[0].Partitions[0].ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Errorf("ElectLeaders: %+v, %v", resp, err)
	}
	ar := kmsg.NewPtrAlterPartitionAssignmentsRequest()
	ar.Topics = []kmsg.AlterPartitionAssignmentsRequestTopic{{Topic: "orders", Partitions: []kmsg.AlterPartitionAssignmentsRequestTopicPartition{{Partition: 0, Replicas: []int32{2}}}}}
	if resp, err := ar.RequestWith(ctx, cl); err != nil || resp.ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Errorf("AlterPartitionReassignments: %+v, %v", resp, err)
	}
	uf := kmsg.NewPtrUpdateFeaturesRequest()
	uf.FeatureUpdates = []kmsg.UpdateFeaturesRequestFeatureUpdate{{Feature: "metadata.version", MaxVersionLevel: 2, UpgradeType: 1}}
	if resp, err := uf.RequestWith(ctx, cl); err != nil || resp.ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Errorf("UpdateFeatures: %+v, %v", resp, err)
	}
	if got := meta.forwardedPrincipals(); len(got) != 0 {
		t.Errorf("forwarded for %v", got)
	}
	meta.withCtl(func(ctl *ctlAdminFake) {
		if len(ctl.features) != 0 || ctl.reassignCalls != 0 {
			t.Errorf("refused requests reached the controller")
		}
	})

	// Reads need DESCRIBE on the cluster, which no ACL gives the
	// application.
	lr := kmsg.NewPtrListPartitionReassignmentsRequest()
	if resp, err := lr.RequestWith(ctx, cl); err != nil || resp.ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Errorf("ListPartitionReassignments: %+v, %v", resp, err)
	}
	dq := kmsg.NewPtrDescribeQuorumRequest()
	dq.Topics = []kmsg.DescribeQuorumRequestTopic{{Topic: "__cluster_metadata", Partitions: []kmsg.DescribeQuorumRequestTopicPartition{{Partition: 0}}}}
	if resp, err := dq.RequestWith(ctx, cl); err != nil || resp.ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Errorf("DescribeQuorum: %+v, %v", resp, err)
	}
}
