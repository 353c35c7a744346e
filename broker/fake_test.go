package broker

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// fakeCluster is an in-test controller quorum: one log and one image, shared
// by nodes that each serve ControllerService on loopback. One node at a time
// is active; the others answer as followers do, with a leader hint. It keeps
// the controller-side rules a broker depends on (registration epochs, stale
// epochs refused, unfence once caught up, streams that end on leadership
// loss) and nothing else.
type fakeCluster struct {
	t         *testing.T
	clusterID string
	nodes     []*fakeNode

	mu         sync.Mutex
	img        *fsm.Image
	entries    []*keelpb.MetadataEntry
	active     int           // index into nodes
	changed    chan struct{} // closed and replaced on every append or failover
	holdFenced bool          // when set, heartbeats never unfence
	// registerErr, when set, answers RegisterBroker instead.
	registerErr error
	// registerErrFn, when set, answers the n-th RegisterBroker (from 1)
	// instead, unless it returns nil.
	registerErrFn func(n int) error
	// snapshotClusterID, when set, is the cluster id snapshots claim.
	snapshotClusterID string
	// partitioned, when set, keeps a deposed node's streams open and silent,
	// as a controller cut off by a network partition does.
	partitioned bool
	// Controlled shutdown, as the controller does it: the first heartbeat
	// with want_shutdown writes the broker's BrokerShuttingDown record and
	// moves the leaderships it holds to the next ISR member; should_shut_down
	// is answered once the broker has sent shutdownAfter such heartbeats
	// and applied those records. shutdownAfter < 0 never answers it.
	shutdownAfter int
	shutdownAt    map[int32]uint64 // the offset of each broker's shutdown batch
	wantShutdowns map[int32]int    // heartbeats with want_shutdown, by broker
	// streamErrFn, when set, answers the n-th StreamMetadata call to the
	// active node (from 1) instead, unless it returns nil.
	streamErrFn    func(n int) error
	streamAttempts int
	// alterErr, when set, answers AlterPartition instead (nil: go on).
	alterErr func(*keelpb.AlterPartitionRequest) error

	// What the brokers asked.
	registrations []*keelpb.RegisterBrokerRequest
	heartbeats    []*keelpb.BrokerHeartbeatRequest
	unregisters   []*keelpb.UnregisterBrokerRequest
	alters        []*keelpb.AlterPartitionRequest
	streams       []streamCall
	snapshots     int
}

type streamCall struct {
	node int32
	req  *keelpb.StreamMetadataRequest
}

type fakeNode struct {
	keelpb.UnimplementedControllerServiceServer
	c    *fakeCluster
	id   int32
	addr string
}

// newFakeCluster serves n fake controllers, node 1 active, with a log that
// already names the cluster and the first controller epoch.
func newFakeCluster(t *testing.T, n int) *fakeCluster {
	t.Helper()
	return newFakeClusterWith(t, n)
}

// newFakeClusterWith is newFakeCluster with each node's gRPC server made
// with opts (TLS).
func newFakeClusterWith(t *testing.T, n int, opts ...grpc.ServerOption) *fakeCluster {
	t.Helper()
	c := &fakeCluster{t: t, clusterID: "test-cluster", img: fsm.Empty(), changed: make(chan struct{}),
		shutdownAfter: 1, shutdownAt: map[int32]uint64{}, wantShutdowns: map[int32]int{}}
	for i := range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		node := &fakeNode{c: c, id: int32(i + 1), addr: lis.Addr().String()}
		g := grpc.NewServer(opts...)
		keelpb.RegisterControllerServiceServer(g, node)
		go g.Serve(lis)
		t.Cleanup(g.Stop)
		c.nodes = append(c.nodes, node)
	}
	c.append(clusterIDRec(c.clusterID), featureLevelRec(1), epochRec(1, 1))
	return c
}

func (c *fakeCluster) addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.addr
	}
	return out
}

// append commits one batch at the next index.
func (c *fakeCluster) append(records ...*keelpb.Record) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.appendLocked(records...)
}

func (c *fakeCluster) appendLocked(records ...*keelpb.Record) uint64 {
	c.t.Helper()
	data, err := fsm.EncodeBatch(records...)
	if err != nil {
		c.t.Fatal(err)
	}
	batch, _ := fsm.DecodeBatch(data)
	prev := c.img.Offset
	index := prev + 1
	next, err := fsm.Apply(c.img, index, 1, batch)
	if err != nil {
		c.t.Fatalf("fake controller: apply at %d: %v", index, err)
	}
	c.img = next
	c.entries = append(c.entries, &keelpb.MetadataEntry{PrevOffset: prev, Offset: index, Term: 1, Data: data})
	c.notifyLocked()
	return index
}

func (c *fakeCluster) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// failover makes node index to active; it commits its controller epoch
// first, as a real new active controller does, and every stream of the old
// leader ends.
func (c *fakeCluster) failover(to int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.active = to
	c.appendLocked(epochRec(c.img.ControllerEpoch+1, c.nodes[to].id))
}

func (c *fakeCluster) image() *fsm.Image {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.img
}

func (c *fakeCluster) setHoldFenced(hold bool) {
	c.mu.Lock()
	c.holdFenced = hold
	c.mu.Unlock()
}

// counts returns how many calls of each kind the brokers made.
func (c *fakeCluster) counts() (registrations, heartbeats, streams, snapshots int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.registrations), len(c.heartbeats), len(c.streams), c.snapshots
}

func (c *fakeCluster) streamCalls() []streamCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]streamCall(nil), c.streams...)
}

func (c *fakeCluster) registrationCalls() []*keelpb.RegisterBrokerRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*keelpb.RegisterBrokerRequest(nil), c.registrations...)
}

// notActive is a follower's answer; the caller holds mu.
func (n *fakeNode) notActive() error {
	if n.c.nodes[n.c.active] == n {
		return nil
	}
	leader := n.c.nodes[n.c.active]
	return hintErr(codes.FailedPrecondition, leader.id, leader.addr)
}

func (n *fakeNode) RegisterBroker(_ context.Context, req *keelpb.RegisterBrokerRequest) (*keelpb.RegisterBrokerResponse, error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := n.notActive(); err != nil {
		return nil, err
	}
	c.registrations = append(c.registrations, req)
	if c.registerErr != nil {
		return nil, c.registerErr
	}
	if c.registerErrFn != nil {
		if err := c.registerErrFn(len(c.registrations)); err != nil {
			return nil, err
		}
	}
	if req.GetClusterId() != "" && req.GetClusterId() != c.clusterID {
		return nil, reasonErr(codes.FailedPrecondition, rpc.ReasonInconsistentClusterID,
			fmt.Sprintf("broker cluster id %s is not the cluster's %s", req.GetClusterId(), c.clusterID))
	}
	rec := registerRec(req.GetBrokerId(), req.GetIncarnationId())
	rec.GetBrokerRegistration().Address = req.GetAddress() // where followers fetch from
	rec.GetBrokerRegistration().KafkaAddress = req.GetKafkaAddress()
	epoch := c.appendLocked(rec)
	return &keelpb.RegisterBrokerResponse{BrokerEpoch: int64(epoch), ClusterId: c.clusterID, ControllerEpoch: c.img.ControllerEpoch}, nil
}

// AllocateProducerIds hands out the next block, as the controller does.
func (n *fakeNode) AllocateProducerIds(_ context.Context, req *keelpb.AllocateProducerIdsRequest) (*keelpb.AllocateProducerIdsResponse, error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := n.notActive(); err != nil {
		return nil, err
	}
	if _, err := c.checkEpoch(req.GetBrokerId(), req.GetBrokerEpoch()); err != nil {
		return nil, err
	}
	start := c.img.NextProducerID
	c.appendLocked(&keelpb.Record{Record: &keelpb.Record_ProducerIds{ProducerIds: &keelpb.ProducerIdsRecord{
		BrokerId: req.GetBrokerId(), BrokerEpoch: req.GetBrokerEpoch(), NextProducerId: start + fsm.ProducerIDBlockSize}}})
	return &keelpb.AllocateProducerIdsResponse{ProducerIdStart: start, ProducerIdLen: fsm.ProducerIDBlockSize}, nil
}

// checkEpoch answers as the controller does for a broker epoch that is not
// the current one; the caller holds mu.
func (c *fakeCluster) checkEpoch(id int32, epoch int64) (*fsm.Broker, error) {
	b, ok := c.img.Broker(id)
	if !ok {
		return nil, reasonErr(codes.FailedPrecondition, rpc.ReasonBrokerNotRegistered, fmt.Sprintf("broker %d is not registered", id))
	}
	if b.Epoch != epoch {
		return nil, reasonErr(codes.FailedPrecondition, rpc.ReasonStaleBrokerEpoch, fmt.Sprintf("broker %d epoch %d is stale", id, epoch))
	}
	return b, nil
}

func (n *fakeNode) BrokerHeartbeat(_ context.Context, req *keelpb.BrokerHeartbeatRequest) (*keelpb.BrokerHeartbeatResponse, error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := n.notActive(); err != nil {
		return nil, err
	}
	c.heartbeats = append(c.heartbeats, req)
	b, err := c.checkEpoch(req.GetBrokerId(), req.GetBrokerEpoch())
	if err != nil {
		return nil, err
	}
	caughtUp := req.GetMetadataOffset() >= uint64(b.Epoch)
	if b.Fenced && caughtUp && !c.holdFenced && !req.GetWantShutdown() {
		c.appendLocked(unfenceRec(b.ID, b.Epoch))
		b, _ = c.img.Broker(b.ID)
	}
	resp := &keelpb.BrokerHeartbeatResponse{IsCaughtUp: caughtUp, IsFenced: b.Fenced,
		ControllerEpoch: c.img.ControllerEpoch, ControllerId: n.id}
	if req.GetWantShutdown() {
		c.wantShutdowns[b.ID]++
		if !b.Fenced && !b.ShuttingDown {
			c.shutdownAt[b.ID] = c.appendLocked(c.shutdownRecordsLocked(b)...)
		}
		if !b.Fenced && c.shutdownAfter >= 0 && c.wantShutdowns[b.ID] >= c.shutdownAfter &&
			req.GetMetadataOffset() >= c.shutdownAt[b.ID] {
			// As KRaft does, the controlled shutdown ends with the
			// broker fenced, still registered.
			c.appendLocked(fenceRec(b.ID, b.Epoch))
			b, _ = c.img.Broker(b.ID)
		}
		resp.IsFenced, resp.ShouldShutDown = b.Fenced, b.Fenced
	}
	return resp, nil
}

// shutdownRecordsLocked marks b shutting down and moves each leadership it
// holds to the next ISR member, which it removes from the ISR; a partition
// with no other ISR member keeps b as its leader (the real controller's
// rules are richer; the broker does not care which). The caller holds mu.
func (c *fakeCluster) shutdownRecordsLocked(b *fsm.Broker) []*keelpb.Record {
	recs := []*keelpb.Record{shuttingDownRec(b.ID, b.Epoch)}
	c.img.PartitionsOnBroker(b.ID, func(p *fsm.Partition) bool {
		if p.Leader != b.ID || len(p.ISR) < 2 {
			return true
		}
		isr := slices.DeleteFunc(slices.Clone(p.ISR), func(id int32) bool { return id == b.ID })
		recs = append(recs, changeRec(p.TopicID, p.Partition, &isr[0], isr, nil))
		return true
	})
	return recs
}

// AlterPartition checks a leader's ISR change as the controller does and
// commits it.
func (n *fakeNode) AlterPartition(_ context.Context, req *keelpb.AlterPartitionRequest) (*keelpb.AlterPartitionResponse, error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := n.notActive(); err != nil {
		return nil, err
	}
	c.alters = append(c.alters, req)
	if c.alterErr != nil {
		if err := c.alterErr(req); err != nil {
			return nil, err
		}
	}
	if _, err := c.checkEpoch(req.GetBrokerId(), req.GetBrokerEpoch()); err != nil {
		return nil, err
	}
	id, err := fsm.ParseTopicID(req.GetTopicId())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	p, ok := c.img.Partition(id, req.GetPartition())
	switch {
	case !ok:
		return nil, status.Errorf(codes.NotFound, "no partition %s/%d", id, req.GetPartition())
	case p.LeaderEpoch != req.GetLeaderEpoch():
		return nil, reasonErr(codes.FailedPrecondition, rpc.ReasonFencedLeaderEpoch, "stale leader epoch")
	case p.Leader != req.GetBrokerId():
		return nil, reasonErr(codes.InvalidArgument, rpc.ReasonInvalidRequest, "not the leader")
	case p.PartitionEpoch != req.GetPartitionEpoch():
		return nil, reasonErr(codes.FailedPrecondition, rpc.ReasonInvalidUpdateVersion, "stale partition epoch")
	}
	for _, m := range req.GetNewIsrWithEpochs() {
		if br, ok := c.img.Broker(m.GetBrokerId()); ok && m.GetBrokerEpoch() != -1 && m.GetBrokerEpoch() != br.Epoch {
			return nil, reasonErr(codes.FailedPrecondition, rpc.ReasonIneligibleReplica, fmt.Sprintf("broker %d epoch", m.GetBrokerId()))
		}
	}
	for _, b := range req.GetNewIsr() {
		if br, ok := c.img.Broker(b); !ok || !br.Eligible() || !slices.Contains(p.Replicas, b) {
			return nil, reasonErr(codes.FailedPrecondition, rpc.ReasonIneligibleReplica, fmt.Sprintf("broker %d", b))
		}
	}
	if !slices.Equal(req.GetNewIsr(), p.ISR) {
		c.appendLocked(changeRec(id, req.GetPartition(), nil, req.GetNewIsr(), nil))
		p, _ = c.img.Partition(id, req.GetPartition())
	}
	return &keelpb.AlterPartitionResponse{Partition: &keelpb.PartitionDescription{Partition: p.Partition, Leader: p.Leader,
		LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, Replicas: p.Replicas, Isr: p.ISR}}, nil
}

func (c *fakeCluster) alterCalls() []*keelpb.AlterPartitionRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*keelpb.AlterPartitionRequest(nil), c.alters...)
}

func (c *fakeCluster) heartbeatCalls() []*keelpb.BrokerHeartbeatRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*keelpb.BrokerHeartbeatRequest(nil), c.heartbeats...)
}

func (n *fakeNode) UnregisterBroker(_ context.Context, req *keelpb.UnregisterBrokerRequest) (*keelpb.UnregisterBrokerResponse, error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := n.notActive(); err != nil {
		return nil, err
	}
	c.unregisters = append(c.unregisters, req)
	b, err := c.checkEpoch(req.GetBrokerId(), req.GetBrokerEpoch())
	if err != nil {
		return nil, err
	}
	if !b.Fenced {
		return nil, reasonErr(codes.FailedPrecondition, rpc.ReasonBrokerNotFenced, fmt.Sprintf("broker %d is not fenced", b.ID))
	}
	c.appendLocked(unregisterRec(req.GetBrokerId(), req.GetBrokerEpoch()))
	return &keelpb.UnregisterBrokerResponse{BrokerEpoch: b.Epoch}, nil
}

// StreamMetadata sends a snapshot to a new broker, then every entry after
// the broker's offset as it commits, until this node stops being active.
func (n *fakeNode) StreamMetadata(req *keelpb.StreamMetadataRequest, stream keelpb.ControllerService_StreamMetadataServer) error {
	c := n.c
	c.mu.Lock()
	if err := n.notActive(); err != nil {
		c.mu.Unlock()
		return err
	}
	c.streamAttempts++
	if c.streamErrFn != nil {
		if err := c.streamErrFn(c.streamAttempts); err != nil {
			c.mu.Unlock()
			return err
		}
	}
	c.streams = append(c.streams, streamCall{node: n.id, req: req})
	if _, err := c.checkEpoch(req.GetBrokerId(), req.GetBrokerEpoch()); err != nil {
		c.mu.Unlock()
		return err
	}
	epoch := c.img.ControllerEpoch
	sent := req.GetFromOffset()
	var snap *fsm.Image
	if sent == 0 {
		snap, sent = c.img, c.img.Offset
		c.snapshots++
	}
	wrongCluster := c.snapshotClusterID
	c.mu.Unlock()

	if snap != nil {
		if wrongCluster != "" {
			snap = otherCluster(c.t, snap, wrongCluster)
		}
		for _, chunk := range snapshotChunks(c.t, snap, 37) {
			if err := stream.Send(&keelpb.MetadataPush{ControllerEpoch: epoch, ControllerId: n.id,
				Body: &keelpb.MetadataPush_Snapshot{Snapshot: chunk}}); err != nil {
				return err
			}
		}
	}
	for {
		c.mu.Lock()
		deposed := c.nodes[c.active] != n || c.img.ControllerEpoch != epoch
		if deposed && !c.partitioned {
			c.mu.Unlock()
			return status.Error(codes.Unavailable, "leadership lost")
		}
		var pending []*keelpb.MetadataEntry
		for _, e := range c.entries {
			if e.Offset > sent && !deposed {
				pending = append(pending, e)
			}
		}
		changed := c.changed
		c.mu.Unlock()
		if len(pending) > 0 {
			if err := stream.Send(&keelpb.MetadataPush{ControllerEpoch: epoch, ControllerId: n.id,
				Body: &keelpb.MetadataPush_Entries{Entries: &keelpb.MetadataEntries{Entries: pending}}}); err != nil {
				return err
			}
			sent = pending[len(pending)-1].Offset
			continue
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

// otherCluster is an image of another cluster at img's offset.
func otherCluster(t *testing.T, img *fsm.Image, id string) *fsm.Image {
	t.Helper()
	data, err := fsm.EncodeBatch(clusterIDRec(id), featureLevelRec(1), epochRec(1, 1))
	if err != nil {
		t.Fatal(err)
	}
	batch, _ := fsm.DecodeBatch(data)
	other, err := fsm.Apply(fsm.Empty(), img.Offset, img.Term, batch)
	if err != nil {
		t.Fatal(err)
	}
	return other
}

// snapshotChunks cuts img's snapshot stream into chunks of size bytes.
func snapshotChunks(t *testing.T, img *fsm.Image, size int) []*keelpb.SnapshotChunk {
	t.Helper()
	var buf bytes.Buffer
	if err := fsm.WriteSnapshot(&buf, img); err != nil {
		t.Fatal(err)
	}
	return cut(buf.Bytes(), size)
}

func cut(data []byte, size int) []*keelpb.SnapshotChunk {
	var out []*keelpb.SnapshotChunk
	for len(data) > size {
		out = append(out, &keelpb.SnapshotChunk{Data: data[:size]})
		data = data[size:]
	}
	return append(out, &keelpb.SnapshotChunk{Data: data, Last: true})
}

func reasonErr(code codes.Code, reason, msg string) error {
	st, err := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: rpc.ErrorDomain})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

func hintErr(code codes.Code, id int32, addr string) error {
	st, err := status.New(code, "not the active controller").WithDetails(&keelpb.LeaderHint{LeaderId: id, LeaderAddress: addr})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// Records.

func clusterIDRec(id string) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_ClusterId{ClusterId: &keelpb.ClusterIdRecord{ClusterId: id}}}
}

func featureLevelRec(level uint32) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{Name: fsm.MetadataVersionFeature, Level: level}}}
}

func epochRec(epoch int64, leader int32) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_ControllerEpoch{ControllerEpoch: &keelpb.ControllerEpochRecord{Epoch: epoch, LeaderId: leader}}}
}

func noOpRec() *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_NoOp{NoOp: &keelpb.NoOpRecord{}}}
}

func registerRec(id int32, incarnation string) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_BrokerRegistration{BrokerRegistration: &keelpb.BrokerRegistrationRecord{
		BrokerId: id, IncarnationId: incarnation, Address: fmt.Sprintf("127.0.0.1:%d", 9200+id),
		MinMetadataVersion: 1, MaxMetadataVersion: 1,
	}}}
}

func fenceRec(id int32, epoch int64) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_FenceBroker{FenceBroker: &keelpb.FenceBrokerRecord{BrokerId: id, BrokerEpoch: epoch}}}
}

func unfenceRec(id int32, epoch int64) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_UnfenceBroker{UnfenceBroker: &keelpb.UnfenceBrokerRecord{BrokerId: id, BrokerEpoch: epoch}}}
}

func shuttingDownRec(id int32, epoch int64) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_BrokerShuttingDown{BrokerShuttingDown: &keelpb.BrokerShuttingDownRecord{BrokerId: id, BrokerEpoch: epoch}}}
}

func topicRec(name string, id fsm.TopicID) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_Topic{Topic: &keelpb.TopicRecord{Name: name, TopicId: bytes.Clone(id[:])}}}
}

func partitionRec(id fsm.TopicID, p int32, replicas, isr []int32, leader int32) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{
		TopicId: bytes.Clone(id[:]), Partition: p, Replicas: replicas, Isr: isr, Leader: leader}}}
}

// changeRec builds a PartitionChangeRecord; a nil leader or slice is "unchanged".
func changeRec(id fsm.TopicID, p int32, leader *int32, isr, replicas []int32) *keelpb.Record {
	r := &keelpb.PartitionChangeRecord{TopicId: bytes.Clone(id[:]), Partition: p, Leader: leader}
	if isr != nil {
		r.Isr = &keelpb.Int32List{Values: isr}
	}
	if replicas != nil {
		r.Replicas = &keelpb.Int32List{Values: replicas}
	}
	return &keelpb.Record{Record: &keelpb.Record_PartitionChange{PartitionChange: r}}
}

func removeTopicRec(id fsm.TopicID) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_RemoveTopic{RemoveTopic: &keelpb.RemoveTopicRecord{TopicId: bytes.Clone(id[:])}}}
}

func leaderID(id int32) *int32 { return &id }

func unregisterRec(id int32, epoch int64) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_UnregisterBroker{UnregisterBroker: &keelpb.UnregisterBrokerRecord{BrokerId: id, BrokerEpoch: epoch}}}
}
