package kafka

import (
	"context"
	"encoding/binary"
	"slices"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/keel-dev/keel/acl"
	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/broker/group"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
	"github.com/keel-dev/keel/tlsauth"
)

// fakeGroups is a coordinator that answers every request at once, and
// records what reached it.
type fakeGroups struct {
	mu      sync.Mutex
	calls   []string
	commits []kmsg.OffsetCommitRequestTopic
	elected map[int32]int32
	deleted []string
	log     group.Log
}

func newFakeGroups() *fakeGroups { return &fakeGroups{elected: map[int32]int32{}} }

func (f *fakeGroups) newGroups(log group.Log) Groups {
	f.log = log
	return f
}

func (f *fakeGroups) note(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeGroups) called() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeGroups) Elect(p, epoch, _ int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.elected[p] = epoch
}

func (f *fakeGroups) Resign(p int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.elected, p)
}

func (f *fakeGroups) TopicsDeleted(topics []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, topics...)
}

func (f *fakeGroups) deletedTopics() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.deleted)
}

func (f *fakeGroups) leads() map[int32]int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int32]int32{}
	for p, e := range f.elected {
		out[p] = e
	}
	return out
}

func (f *fakeGroups) JoinGroup(_ context.Context, r *kmsg.JoinGroupRequest) *kmsg.JoinGroupResponse {
	f.note("JoinGroup " + r.Group)
	resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.MemberID, resp.LeaderID, resp.Generation = "m1", "m1", 1
	return resp
}

func (f *fakeGroups) SyncGroup(_ context.Context, r *kmsg.SyncGroupRequest) *kmsg.SyncGroupResponse {
	f.note("SyncGroup " + r.Group)
	return r.ResponseKind().(*kmsg.SyncGroupResponse)
}

func (f *fakeGroups) Heartbeat(_ context.Context, r *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse {
	f.note("Heartbeat " + r.Group)
	return r.ResponseKind().(*kmsg.HeartbeatResponse)
}

func (f *fakeGroups) LeaveGroup(_ context.Context, r *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse {
	f.note("LeaveGroup " + r.Group)
	return r.ResponseKind().(*kmsg.LeaveGroupResponse)
}

func (f *fakeGroups) OffsetCommit(_ context.Context, r *kmsg.OffsetCommitRequest) *kmsg.OffsetCommitResponse {
	f.note("OffsetCommit " + r.Group)
	f.mu.Lock()
	f.commits = append(f.commits, r.Topics...)
	f.mu.Unlock()
	resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rt.Partitions = append(rt.Partitions, kmsg.OffsetCommitResponseTopicPartition{Partition: p.Partition})
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (f *fakeGroups) OffsetFetch(_ context.Context, _ int16, g string, topics []kmsg.OffsetFetchRequestGroupTopic, _ bool) kmsg.OffsetFetchResponseGroup {
	f.note("OffsetFetch " + g)
	out := kmsg.NewOffsetFetchResponseGroup()
	out.Group = g
	if topics == nil {
		topics = []kmsg.OffsetFetchRequestGroupTopic{{Topic: "orders", Partitions: []int32{0}}, {Topic: "secret", Partitions: []int32{0}}}
	}
	for _, t := range topics {
		rt := kmsg.NewOffsetFetchResponseGroupTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rt.Partitions = append(rt.Partitions, kmsg.OffsetFetchResponseGroupTopicPartition{Partition: p, Offset: 7})
		}
		out.Topics = append(out.Topics, rt)
	}
	return out
}

func (f *fakeGroups) OffsetDelete(_ context.Context, r *kmsg.OffsetDeleteRequest) *kmsg.OffsetDeleteResponse {
	f.note("OffsetDelete " + r.Group)
	return r.ResponseKind().(*kmsg.OffsetDeleteResponse)
}

func (f *fakeGroups) DescribeGroup(_ context.Context, _ int16, g string) kmsg.DescribeGroupsResponseGroup {
	f.note("DescribeGroup " + g)
	out := kmsg.NewDescribeGroupsResponseGroup()
	out.Group, out.State = g, "Stable"
	return out
}

func (f *fakeGroups) ListGroups(context.Context, []string, []string) ([]kmsg.ListGroupsResponseGroup, int16) {
	f.note("ListGroups")
	return []kmsg.ListGroupsResponseGroup{{Group: "g"}, {Group: "h"}}, 0
}

func (f *fakeGroups) DeleteGroup(_ context.Context, g string) int16 {
	f.note("DeleteGroup " + g)
	return 0
}

// TestServer_GroupRouting: FindCoordinator asks the controller for
// __consumer_offsets (as the broker's own, internal request) and answers
// COORDINATOR_NOT_AVAILABLE until it exists, then the leader of the
// group's partition; every group API reaches the coordinator; Metadata
// calls the topic internal.
func TestServer_GroupRouting(t *testing.T) {
	meta, fg := newFakeMeta(t), newFakeGroups()
	s := startServer(t, 1, meta, NewMemoryBackend(), func(c *Config) {
		c.Groups = fg.newGroups
		c.OffsetsTopicPartitions, c.OffsetsTopicReplicationFactor = 3, 1
	})
	cl := newClient(t, []string{s.Addr()}, kgo.RequestRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	find := func(version int16, keys ...string) *kmsg.FindCoordinatorResponse {
		t.Helper()
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.Version = version
		if version >= 4 {
			req.CoordinatorKeys = keys
		} else {
			req.CoordinatorKey = keys[0]
		}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := find(3, "g"); resp.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("FindCoordinator before __consumer_offsets: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	poll.Until(t, testTimeout, "__consumer_offsets created", func() bool {
		_, ok := meta.Image().Topic(group.OffsetsTopic)
		return ok
	})
	if p := meta.forwardedPrincipals(); len(p) != 1 || p[0] != "" {
		t.Fatalf("CreateTopic forwarded principals %q; want the broker's own request (none)", p)
	}
	if resp := find(3, "g"); resp.ErrorCode != 0 || resp.NodeID != 1 || resp.Port <= 0 {
		t.Fatalf("FindCoordinator v3: %+v", resp)
	}
	v4 := find(4, "g", "h")
	if len(v4.Coordinators) != 2 || v4.Coordinators[0].Key == v4.Coordinators[1].Key ||
		v4.Coordinators[0].NodeID != 1 || v4.Coordinators[1].NodeID != 1 || v4.Coordinators[1].ErrorCode != 0 {
		t.Fatalf("FindCoordinator v4: %+v", v4.Coordinators)
	}
	md := metadataOf(t, cl, group.OffsetsTopic)
	if len(md.Topics) != 1 || !md.Topics[0].IsInternal {
		t.Fatalf("Metadata of __consumer_offsets: %+v", md.Topics)
	}

	// Only the coordinator writes the topic.
	if code := produceRaw(t, cl, 1, group.OffsetsTopic, 0, []byte("v")).Topics[0].Partitions[0].ErrorCode; code != kerr.InvalidTopicException.Code {
		t.Fatalf("Produce to __consumer_offsets: %v", kerr.ErrorForCode(code))
	}

	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.ProtocolType, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = "g", "consumer", 10000, 10000
	if resp, err := join.RequestWith(ctx, cl); err != nil || resp.MemberID != "m1" {
		t.Fatalf("JoinGroup: %+v, %v", resp, err)
	}
	list := kmsg.NewPtrListGroupsRequest()
	if resp, err := list.RequestWith(ctx, cl); err != nil || len(resp.Groups) != 2 {
		t.Fatalf("ListGroups: %+v, %v", resp, err)
	}
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Groups = []string{"g"}
	if resp, err := del.RequestWith(ctx, cl); err != nil || len(resp.Groups) != 1 || resp.Groups[0].ErrorCode != 0 {
		t.Fatalf("DeleteGroups: %+v, %v", resp, err)
	}
	if got, want := fg.called(), []string{"JoinGroup g", "ListGroups", "DeleteGroup g"}; !slices.Equal(got, want) {
		t.Fatalf("the coordinator got %q, want %q", got, want)
	}
}

// TestServer_GroupAuthorization: an application's certificate needs READ
// on the group to join it or commit, READ on each topic it commits
// (TOPIC_AUTHORIZATION_FAILED for the others' partitions, the rest
// committed), DESCRIBE (which READ implies) to find its coordinator, list
// it or fetch offsets (the topics it may not describe left out of "all"),
// DELETE to delete it.
func TestServer_GroupAuthorization(t *testing.T) {
	ca, err := tlsauth.NewCA("kafka group acl test CA")
	if err != nil {
		t.Fatal(err)
	}
	brokerCert, err := ca.Config("broker-1", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	meta, fg := newFakeMeta(t), newFakeGroups()
	s := startServer(t, 1, meta, NewMemoryBackend(), func(c *Config) {
		c.TLS = brokerCert
		c.Groups = fg.newGroups
		c.OffsetsTopicReplicationFactor = 1
	})
	meta.createTopic("orders", []int32{1})
	meta.createTopic("secret", []int32{1})
	meta.grant(t,
		acl.Binding{Principal: "User:app", Host: "*", ResourceType: kmsg.ACLResourceTypeGroup, ResourceName: "g", PatternType: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationRead, Permission: kmsg.ACLPermissionTypeAllow},
		acl.Binding{Principal: "User:app", Host: "*", ResourceType: kmsg.ACLResourceTypeTopic, ResourceName: "orders", PatternType: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationRead, Permission: kmsg.ACLPermissionTypeAllow},
	)
	app := newClient(t, []string{s.Addr()}, kgo.DialTLSConfig(userTLS(t, ca, "app")), kgo.RequestRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	// Straight to broker 1: kgo would look up each group's coordinator
	// first, and fail there on the groups it may not describe.
	seedMetadata(t, app)
	direct := app.Broker(1)
	send := func(req kmsg.Request) kmsg.Response {
		t.Helper()
		resp, err := direct.Request(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	commit := func(g string) map[string]int16 {
		t.Helper()
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Version, req.Group, req.Generation, req.MemberID = 8, g, 1, "m1"
		for _, topic := range []string{"orders", "secret", "gone"} {
			rt := kmsg.NewOffsetCommitRequestTopic()
			rt.Topic = topic
			rt.Partitions = []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 5, LeaderEpoch: -1}}
			req.Topics = append(req.Topics, rt)
		}
		resp := send(req).(*kmsg.OffsetCommitResponse)
		out := map[string]int16{}
		for _, rt := range resp.Topics {
			for _, p := range rt.Partitions {
				out[rt.Topic] = p.ErrorCode
			}
		}
		return out
	}
	// The coordinator is found once __consumer_offsets exists (made on the
	// first FindCoordinator).
	poll.Until(t, testTimeout, "a coordinator for g", func() bool {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey = "g"
		resp, err := req.RequestWith(ctx, app)
		return err == nil && resp.ErrorCode == 0
	})
	got := commit("g")
	want := map[string]int16{"orders": 0, "secret": kerr.TopicAuthorizationFailed.Code, "gone": kerr.TopicAuthorizationFailed.Code}
	if len(got) != len(want) || got["orders"] != want["orders"] || got["secret"] != want["secret"] || got["gone"] != want["gone"] {
		t.Fatalf("OffsetCommit: %v, want %v", got, want)
	}
	if len(fg.commits) != 1 || fg.commits[0].Topic != "orders" {
		t.Fatalf("the coordinator committed %+v; want orders alone", fg.commits)
	}
	for topic, code := range commit("h") {
		if code != kerr.GroupAuthorizationFailed.Code {
			t.Fatalf("OffsetCommit to a group without READ: %s: %v", topic, kerr.ErrorForCode(code))
		}
	}
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.ProtocolType = "h", "consumer"
	if resp := send(join).(*kmsg.JoinGroupResponse); resp.ErrorCode != kerr.GroupAuthorizationFailed.Code {
		t.Fatalf("JoinGroup without READ: %+v", resp)
	}
	find := kmsg.NewPtrFindCoordinatorRequest()
	find.CoordinatorKeys = []string{"h"} // kgo sends v4
	if resp := send(find).(*kmsg.FindCoordinatorResponse); len(resp.Coordinators) != 1 || resp.Coordinators[0].ErrorCode != kerr.GroupAuthorizationFailed.Code {
		t.Fatalf("FindCoordinator without DESCRIBE: %+v", resp)
	}
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Groups = []string{"g"}
	if resp := send(del).(*kmsg.DeleteGroupsResponse); resp.Groups[0].ErrorCode != kerr.GroupAuthorizationFailed.Code {
		t.Fatalf("DeleteGroups without DELETE: %+v", resp)
	}
	// READ implies DESCRIBE (Kafka's ACL rules): g is listed, h is not.
	list := kmsg.NewPtrListGroupsRequest()
	if resp, err := list.RequestWith(ctx, app); err != nil || len(resp.Groups) != 1 || resp.Groups[0].Group != "g" {
		t.Fatalf("ListGroups with READ on g alone: %+v, %v", resp, err)
	}
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Version = 8
	fetch.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "g"}, {Group: "h"}}
	// An older client's OffsetFetch (v7: one group, named topics): the
	// topic it may not describe is refused by partition.
	old := newClient(t, []string{s.Addr()}, kgo.DialTLSConfig(userTLS(t, ca, "app")), kgo.RequestRetries(0), kgo.MaxVersions(kversion.V2_8_0()))
	seedMetadata(t, old)
	fetch7 := kmsg.NewPtrOffsetFetchRequest()
	fetch7.Group = "g"
	fetch7.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "orders", Partitions: []int32{0}}, {Topic: "secret", Partitions: []int32{0}}}
	raw7, err := old.Broker(1).Request(ctx, fetch7)
	if err != nil {
		t.Fatal(err)
	}
	codes7 := map[string]int16{}
	offsets7 := map[string]int64{}
	for _, rt := range raw7.(*kmsg.OffsetFetchResponse).Topics {
		for _, p := range rt.Partitions {
			codes7[rt.Topic], offsets7[rt.Topic] = p.ErrorCode, p.Offset
		}
	}
	if r7 := raw7.(*kmsg.OffsetFetchResponse); r7.Version != 7 || r7.ErrorCode != 0 || codes7["orders"] != 0 || offsets7["orders"] != 7 ||
		codes7["secret"] != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("OffsetFetch v%d: error %d, topics %+v", r7.Version, r7.ErrorCode, r7.Topics)
	}
	describe := kmsg.NewPtrDescribeGroupsRequest()
	describe.Groups, describe.IncludeAuthorizedOperations = []string{"g", "h"}, true
	if resp := send(describe).(*kmsg.DescribeGroupsResponse); len(resp.Groups) != 2 ||
		resp.Groups[0].AuthorizedOperations != 1<<kmsg.ACLOperationRead|1<<kmsg.ACLOperationDescribe ||
		resp.Groups[1].ErrorCode != kerr.GroupAuthorizationFailed.Code {
		t.Fatalf("DescribeGroups: %+v", resp.Groups)
	}
	resp := send(fetch).(*kmsg.OffsetFetchResponse)
	if len(resp.Groups) != 2 || resp.Groups[0].ErrorCode != 0 || len(resp.Groups[0].Topics) != 1 || resp.Groups[0].Topics[0].Topic != "orders" ||
		resp.Groups[1].ErrorCode != kerr.GroupAuthorizationFailed.Code {
		t.Fatalf("OffsetFetch v8 of all topics: %+v", resp.Groups)
	}
}

// TestServer_UnservedAPIsAnswered: an API Keel does not serve gets its
// response with UNSUPPORTED_VERSION and a message, on a connection that
// stays open; without a coordinator the group APIs are neither advertised
// nor served.
func TestServer_UnservedAPIsAnswered(t *testing.T) {
	meta := newFakeMeta(t)
	s := startServer(t, 1, meta, NewMemoryBackend(), nil)
	meta.createTopic("t", []int32{1})
	cl := newClient(t, []string{s.Addr()}, kgo.RequestRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	av, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range av.ApiKeys {
		if groupKeys[k.ApiKey] {
			t.Fatalf("ApiVersions lists %s without a coordinator", kmsg.NameForKey(k.ApiKey))
		}
	}
	message := func(m *string) string {
		if m == nil {
			return ""
		}
		return *m
	}
	c := dial(t, s.Addr())
	corr := int32(0)
	// rawRequest sends req on c as is (a client's own version check would
	// refuse it) and reads its answer.
	rawRequest := func(req kmsg.Request) kmsg.Response {
		t.Helper()
		corr++
		var body []byte
		if req.IsFlexible() {
			body = append(body, 0) // the header's tags
		}
		writeFrame(t, c, frame(req.Key(), req.GetVersion(), corr, req.AppendTo(body)))
		raw := readFrame(t, c)
		if got := int32(binary.BigEndian.Uint32(raw)); got != corr {
			t.Fatalf("correlation %d, want %d", got, corr)
		}
		raw = raw[4:]
		if req.IsFlexible() {
			raw = raw[1:] // the response header's tags
		}
		resp := req.ResponseKind()
		resp.SetVersion(req.GetVersion())
		if err := resp.ReadFrom(raw); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, tc := range []struct {
		name  string
		req   kmsg.Request
		check func(kmsg.Response) (int16, string)
	}{
		{"JoinGroup without a coordinator", func() kmsg.Request {
			r := kmsg.NewPtrJoinGroupRequest()
			r.Version, r.Group, r.ProtocolType = 5, "g", "consumer"
			return r
		}(), func(r kmsg.Response) (int16, string) { return r.(*kmsg.JoinGroupResponse).ErrorCode, "" }},
		{"EndTxn", func() kmsg.Request {
			r := kmsg.NewPtrEndTxnRequest()
			r.Version, r.TransactionalID = 3, "tx"
			return r
		}(), func(r kmsg.Response) (int16, string) { return r.(*kmsg.EndTxnResponse).ErrorCode, "" }},
		{"TxnOffsetCommit (per partition)", func() kmsg.Request {
			r := kmsg.NewPtrTxnOffsetCommitRequest()
			r.Version, r.TransactionalID, r.Group = 3, "tx", "g"
			r.Topics = []kmsg.TxnOffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: 4, Offset: 1}}}}
			return r
		}(), func(r kmsg.Response) (int16, string) {
			rt := r.(*kmsg.TxnOffsetCommitResponse).Topics
			if len(rt) != 1 || rt[0].Topic != "t" || len(rt[0].Partitions) != 1 || rt[0].Partitions[0].Partition != 4 {
				return -1, ""
			}
			return rt[0].Partitions[0].ErrorCode, ""
		}},
		{"AddPartitionsToTxn v3 (partition numbers)", func() kmsg.Request {
			r := kmsg.NewPtrAddPartitionsToTxnRequest()
			r.Version, r.TransactionalID = 3, "tx"
			r.Topics = []kmsg.AddPartitionsToTxnRequestTopic{{Topic: "t", Partitions: []int32{2}}}
			return r
		}(), func(r kmsg.Response) (int16, string) {
			rt := r.(*kmsg.AddPartitionsToTxnResponse).Topics
			if len(rt) != 1 || rt[0].Topic != "t" || len(rt[0].Partitions) != 1 || rt[0].Partitions[0].Partition != 2 {
				return -1, ""
			}
			return rt[0].Partitions[0].ErrorCode, ""
		}},
		{"ConsumerGroupHeartbeat (KIP-848)", func() kmsg.Request {
			r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
			r.Group = "g"
			return r
		}(), func(r kmsg.Response) (int16, string) {
			resp := r.(*kmsg.ConsumerGroupHeartbeatResponse)
			return resp.ErrorCode, message(resp.ErrorMessage)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, msg := tc.check(rawRequest(tc.req))
			if code != kerr.UnsupportedVersion.Code {
				t.Fatalf("error %v; want UNSUPPORTED_VERSION", kerr.ErrorForCode(code))
			}
			if msg != "" && msg != "Keel does not serve ConsumerGroupHeartbeat" {
				t.Fatalf("message %q", msg)
			}
		})
	}
	// The connection is still open: a Metadata is answered on it.
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 1
	if resp := rawRequest(md).(*kmsg.MetadataResponse); len(resp.Brokers) != 1 {
		t.Fatalf("metadata after the unserved requests: %+v", resp)
	}
}

// TestServer_FindTransactionCoordinator: a transaction coordinator is
// not served: UNSUPPORTED_VERSION, and a message that says so.
func TestServer_FindTransactionCoordinator(t *testing.T) {
	meta := newFakeMeta(t)
	s := startServer(t, 1, meta, NewMemoryBackend(), func(c *Config) { c.Groups = newFakeGroups().newGroups })
	cl := newClient(t, []string{s.Addr()}, kgo.RequestRetries(0))
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.Version, req.CoordinatorType, req.CoordinatorKeys = 4, coordinatorTransaction, []string{"tx"}
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	if c := resp.Coordinators; len(c) != 1 || c[0].ErrorCode != kerr.UnsupportedVersion.Code || c[0].ErrorMessage == nil || *c[0].ErrorMessage != noTransactions {
		t.Fatalf("FindCoordinator(TRANSACTION): %+v", c)
	}
}

// TestGroupLog_AppendLoad: what Append writes, Load reads back in order,
// tombstones included, from the log start to the log end.
func TestGroupLog_AppendLoad(t *testing.T) {
	b := NewMemoryBackend()
	l := newGroupLog(b)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	batches := [][]group.Record{
		{{Key: []byte("k1"), Value: []byte("v1")}, {Key: []byte("k2"), Value: []byte("v2")}},
		{{Key: []byte("k1")}},
	}
	for _, recs := range batches {
		if err := l.Append(ctx, 3, recs); err != nil {
			t.Fatal(err)
		}
	}
	type read struct {
		offset     int64
		key, value string
		tombstone  bool
	}
	var got []read
	if err := l.Load(ctx, 3, func(offset int64, r group.Record) error {
		got = append(got, read{offset, string(r.Key), string(r.Value), r.Value == nil})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []read{{0, "k1", "v1", false}, {1, "k2", "v2", false}, {2, "k1", "", true}}
	if !slices.Equal(got, want) {
		t.Fatalf("Load read %+v, want %+v", got, want)
	}
	b.setRefusal(group.OffsetsTopic, 3, kerr.NotLeaderForPartition)
	if err := l.Load(ctx, 3, func(int64, group.Record) error { return nil }); err != kerr.NotLeaderForPartition {
		t.Fatalf("Load on a partition not led: %v", err)
	}
}

// TestGroupElections: the coordinator is elected for the
// __consumer_offsets partitions this broker leads (those led before it is
// attached too) and resigns them on a new leader or a stopped replica;
// other topics are none of its business; it is told of topics deleted.
func TestGroupElections(t *testing.T) {
	meta := newFakeMeta(t)
	meta.addBroker(1, "127.0.0.1:9092")
	meta.createTopic(group.OffsetsTopic, []int32{1}, []int32{1})
	e := NewGroupElections(nil)
	e.MetadataChanged(fsm.Empty(), meta.Image())
	topic, _ := meta.Image().Topic(group.OffsetsTopic)
	e.BecomeLeader(broker.PartitionState{Topic: group.OffsetsTopic, TopicID: topic.ID, Partition: 0, Leader: 1, LeaderEpoch: 4})
	e.BecomeLeader(broker.PartitionState{Topic: "orders", Partition: 0, Leader: 1, LeaderEpoch: 1})
	fg := newFakeGroups()
	e.attach(fg)
	if got := fg.leads(); len(got) != 1 || got[0] != 4 {
		t.Fatalf("after attach: %v", got)
	}
	e.BecomeLeader(broker.PartitionState{Topic: group.OffsetsTopic, TopicID: topic.ID, Partition: 1, Leader: 1, LeaderEpoch: 2})
	e.BecomeFollower(broker.PartitionState{Topic: group.OffsetsTopic, TopicID: topic.ID, Partition: 0, Leader: 2, LeaderEpoch: 5})
	if got := fg.leads(); len(got) != 1 || got[1] != 2 {
		t.Fatalf("after a new leader of 0: %v", got)
	}
	e.StopReplica(topic.ID, 1, true)
	if got := fg.leads(); len(got) != 0 {
		t.Fatalf("after the replica of 1 stopped: %v", got)
	}
	// A deleted topic's offsets are dropped; batches that delete nothing
	// tell nothing.
	meta.createTopic("orders", []int32{1})
	before := meta.Image()
	e.MetadataChanged(before, before)
	orders, _ := before.Topic("orders")
	meta.must(&keelpb.Record{Record: &keelpb.Record_RemoveTopic{RemoveTopic: &keelpb.RemoveTopicRecord{TopicId: orders.ID[:]}}})
	e.MetadataChanged(before, meta.Image())
	if got := fg.deletedTopics(); !slices.Equal(got, []string{"orders"}) {
		t.Fatalf("topics deleted: %q, want orders", got)
	}
	e.detach()
	e.BecomeLeader(broker.PartitionState{Topic: group.OffsetsTopic, TopicID: topic.ID, Partition: 0, Leader: 1, LeaderEpoch: 6})
	if got := fg.leads(); len(got) != 0 {
		t.Fatalf("elected after detach: %v", got)
	}
}

// grant writes ACLs, as the controller would.
func (m *fakeMeta) grant(t *testing.T, bindings ...acl.Binding) {
	t.Helper()
	req := &keelpb.CreateAclsRequest{}
	for _, b := range bindings {
		req.Creations = append(req.Creations, rpc.BindingProto(b))
	}
	resp, err := m.CreateAcls(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range resp.Errors {
		if e != "" {
			t.Fatal(e)
		}
	}
}

// TestServer_FindCoordinatorTooFewBrokers: with fewer live brokers than
// __consumer_offsets' replication factor, nothing is asked of the
// controller, and the client is told which flag to change.
func TestServer_FindCoordinatorTooFewBrokers(t *testing.T) {
	meta := newFakeMeta(t)
	s := startServer(t, 1, meta, NewMemoryBackend(), func(c *Config) { c.Groups = newFakeGroups().newGroups })
	cl := newClient(t, []string{s.Addr()}, kgo.RequestRetries(0))
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKeys = []string{"g"}
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	const want = "__consumer_offsets needs 3 live brokers for its replication factor (--offsets-topic-replication-factor); the cluster has 1"
	if c := resp.Coordinators; len(c) != 1 || c[0].ErrorCode != kerr.CoordinatorNotAvailable.Code || c[0].ErrorMessage == nil || *c[0].ErrorMessage != want {
		t.Fatalf("FindCoordinator: %+v", c)
	}
	if p := meta.forwardedPrincipals(); len(p) != 0 {
		t.Fatalf("the controller was asked %d times", len(p))
	}
}
