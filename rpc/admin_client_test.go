package rpc

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/proto/keelpb"
)

// adminController is a controller for the admin calls. A follower (hint set)
// refuses writes with a leader hint and answers reads from its own image.
type adminController struct {
	keelpb.UnimplementedControllerServiceServer
	active    bool
	hint      string // leader address a follower names
	noQuorum  bool   // DescribeQuorum is Unimplemented
	reads     atomic.Int32
	writes    atomic.Int32
	readErr   error
	topic     *keelpb.TopicDescription
	gotCreate atomic.Pointer[keelpb.CreateTopicRequest]
}

func (f *adminController) DescribeQuorum(context.Context, *keelpb.DescribeQuorumRequest) (*keelpb.DescribeQuorumResponse, error) {
	if f.noQuorum {
		return nil, status.Error(codes.Unimplemented, "no DescribeQuorum")
	}
	r := &keelpb.DescribeQuorumResponse{Active: f.active, LeaderId: -1}
	if f.hint != "" {
		r.LeaderId, r.LeaderAddress = 1, f.hint
	}
	return r, nil
}

func (f *adminController) refuseWrite() error {
	f.writes.Add(1)
	if f.active {
		return nil
	}
	return withHint(status.New(codes.FailedPrecondition, "not the leader"), 1, f.hint)
}

func (f *adminController) CreateTopic(_ context.Context, req *keelpb.CreateTopicRequest) (*keelpb.CreateTopicResponse, error) {
	if err := f.refuseWrite(); err != nil {
		return nil, err
	}
	f.gotCreate.Store(req)
	return &keelpb.CreateTopicResponse{Topic: &keelpb.TopicDescription{Name: req.Name, Id: "id-1"}}, nil
}

func (f *adminController) CreatePartitions(_ context.Context, req *keelpb.CreatePartitionsRequest) (*keelpb.CreatePartitionsResponse, error) {
	if err := f.refuseWrite(); err != nil {
		return nil, err
	}
	return &keelpb.CreatePartitionsResponse{Topic: &keelpb.TopicDescription{Name: req.Topic, Partitions: make([]*keelpb.PartitionDescription, req.Count)}}, nil
}

func (f *adminController) DeleteTopic(_ context.Context, req *keelpb.DeleteTopicRequest) (*keelpb.DeleteTopicResponse, error) {
	if err := f.refuseWrite(); err != nil {
		return nil, err
	}
	if req.Name != "t" {
		return nil, status.Errorf(codes.NotFound, "topic %q not found", req.Name)
	}
	return &keelpb.DeleteTopicResponse{}, nil
}

func (f *adminController) ElectLeaders(_ context.Context, req *keelpb.ElectLeadersRequest) (*keelpb.ElectLeadersResponse, error) {
	if err := f.refuseWrite(); err != nil {
		return nil, err
	}
	return &keelpb.ElectLeadersResponse{Results: []*keelpb.ElectionResult{{Topic: "t", Partition: 0, Leader: 2}}}, nil
}

func (f *adminController) AlterPartitionReassignments(_ context.Context, req *keelpb.AlterPartitionReassignmentsRequest) (*keelpb.AlterPartitionReassignmentsResponse, error) {
	if err := f.refuseWrite(); err != nil {
		return nil, err
	}
	return &keelpb.AlterPartitionReassignmentsResponse{Partition: &keelpb.PartitionDescription{Partition: req.Partition, AddingReplicas: req.Replicas}}, nil
}

func (f *adminController) read() error {
	f.reads.Add(1)
	return f.readErr
}

func (f *adminController) ListTopics(context.Context, *keelpb.ListTopicsRequest) (*keelpb.ListTopicsResponse, error) {
	if err := f.read(); err != nil {
		return nil, err
	}
	return &keelpb.ListTopicsResponse{Topics: []*keelpb.TopicSummary{{Name: "t", Partitions: 3}}}, nil
}

func (f *adminController) DescribeTopic(_ context.Context, req *keelpb.DescribeTopicRequest) (*keelpb.DescribeTopicResponse, error) {
	if err := f.read(); err != nil {
		return nil, err
	}
	if f.topic == nil || req.Name != f.topic.Name {
		return nil, status.Errorf(codes.NotFound, "topic %q not found", req.Name)
	}
	return &keelpb.DescribeTopicResponse{Topic: f.topic}, nil
}

func (f *adminController) ListPartitionReassignments(context.Context, *keelpb.ListPartitionReassignmentsRequest) (*keelpb.ListPartitionReassignmentsResponse, error) {
	if err := f.read(); err != nil {
		return nil, err
	}
	return &keelpb.ListPartitionReassignmentsResponse{Reassignments: []*keelpb.Reassignment{{Topic: "t", Replicas: []int32{4, 5, 6}}}}, nil
}

func serveAdmin(t *testing.T, f *adminController) string {
	return serveBrokerTestServices(t, func(g *grpc.Server) { keelpb.RegisterControllerServiceServer(g, f) })
}

// adminPair serves an active controller and a follower that names it.
func adminPair(t *testing.T) (leader, follower *adminController, leaderAddr, followerAddr string) {
	t.Helper()
	topic := &keelpb.TopicDescription{Name: "t", Id: "id-1"}
	leader = &adminController{active: true, topic: topic}
	leaderAddr = serveAdmin(t, leader)
	follower = &adminController{hint: leaderAddr, topic: topic}
	return leader, follower, leaderAddr, serveAdmin(t, follower)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestClient_AdminWritesGoToTheActiveController(t *testing.T) {
	leader, follower, leaderAddr, followerAddr := adminPair(t)
	c, _ := NewClient([]string{followerAddr})
	defer c.Close()
	ctx := testCtx(t)

	req := &keelpb.CreateTopicRequest{Name: "t", Partitions: 2, ReplicationFactor: 3,
		Configs: map[string]string{"unclean.leader.election.enable": "true"}, ValidateOnly: true}
	created, err := c.CreateTopic(ctx, req)
	if err != nil || created.GetTopic().GetId() != "id-1" {
		t.Fatalf("CreateTopic = %v, %v", created, err)
	}
	if got := leader.gotCreate.Load(); !proto.Equal(got, req) {
		t.Fatalf("leader got %v, want %v", got, req)
	}
	if c.Leader() != leaderAddr {
		t.Fatalf("Leader() = %q, want %q", c.Leader(), leaderAddr)
	}
	added, err := c.CreatePartitions(ctx, &keelpb.CreatePartitionsRequest{Topic: "t", Count: 4})
	if err != nil || len(added.GetTopic().GetPartitions()) != 4 {
		t.Fatalf("CreatePartitions = %v, %v", added, err)
	}
	if err := c.DeleteTopic(ctx, "t"); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	if err := c.DeleteTopic(ctx, "missing"); status.Code(err) != codes.NotFound {
		t.Fatalf("DeleteTopic(missing) = %v, want NotFound", err)
	}
	elected, err := c.ElectLeaders(ctx, &keelpb.ElectLeadersRequest{Type: keelpb.ElectionType_ELECTION_TYPE_PREFERRED, All: true})
	if err != nil || len(elected.GetResults()) != 1 || elected.Results[0].Leader != 2 {
		t.Fatalf("ElectLeaders = %v, %v", elected, err)
	}
	moved, err := c.AlterPartitionReassignments(ctx, &keelpb.AlterPartitionReassignmentsRequest{Topic: "t", Partition: 1, Replicas: []int32{4, 5}})
	if err != nil || moved.GetPartition().GetPartition() != 1 || len(moved.Partition.AddingReplicas) != 2 {
		t.Fatalf("AlterPartitionReassignments = %v, %v", moved, err)
	}
	// The client asked which controller is active before its first write
	// (the follower named the leader), so no write went to the follower.
	if follower.writes.Load() != 0 || leader.writes.Load() != 6 {
		t.Fatalf("writes: follower %d, leader %d; want 0 and 6", follower.writes.Load(), leader.writes.Load())
	}
}

func TestClient_ReadsPreferTheActiveController(t *testing.T) {
	leader, follower, leaderAddr, followerAddr := adminPair(t)
	c, _ := NewClient([]string{followerAddr, leaderAddr})
	defer c.Close()
	ctx := testCtx(t)

	resp, err := c.DescribeTopic(ctx, "t")
	if err != nil || resp.GetTopic().GetId() != "id-1" {
		t.Fatalf("DescribeTopic = %v, %v", resp, err)
	}
	if _, err := c.ListTopics(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListPartitionReassignments(ctx); err != nil {
		t.Fatal(err)
	}
	if follower.reads.Load() != 0 || leader.reads.Load() != 3 {
		t.Fatalf("reads: follower %d, leader %d; want 0 and 3", follower.reads.Load(), leader.reads.Load())
	}
	// The active controller found for the read is where writes start.
	if c.Leader() != leaderAddr {
		t.Fatalf("Leader() = %q, want %q", c.Leader(), leaderAddr)
	}
}

// A follower that names the leader sends the read there even when the
// leader's address was not given.
func TestClient_ReadFollowsTheNamedLeader(t *testing.T) {
	leader, follower, _, followerAddr := adminPair(t)
	c, _ := NewClient([]string{followerAddr})
	defer c.Close()
	if _, err := c.DescribeTopic(testCtx(t), "t"); err != nil {
		t.Fatal(err)
	}
	if follower.reads.Load() != 0 || leader.reads.Load() != 1 {
		t.Fatalf("reads: follower %d, leader %d; want 0 and 1", follower.reads.Load(), leader.reads.Load())
	}
}

func TestClient_ReadFallsBack(t *testing.T) {
	topic := &keelpb.TopicDescription{Name: "t", Id: "id-1"}
	tests := []struct {
		name     string
		setup    func(t *testing.T) (addrs []string, answering *adminController)
		wantCode codes.Code
	}{
		{"past a dead controller", func(t *testing.T) ([]string, *adminController) {
			f := &adminController{topic: topic}
			return []string{unusedLoopbackAddr(t), serveAdmin(t, f)}, f
		}, codes.OK},
		{"when no controller says who leads", func(t *testing.T) ([]string, *adminController) {
			f := &adminController{topic: topic, noQuorum: true}
			return []string{serveAdmin(t, f)}, f
		}, codes.OK},
		{"when the named leader is down", func(t *testing.T) ([]string, *adminController) {
			f := &adminController{topic: topic, hint: unusedLoopbackAddr(t)}
			return []string{serveAdmin(t, f)}, f
		}, codes.OK},
		{"when the active controller fails the read", func(t *testing.T) ([]string, *adminController) {
			busy := &adminController{active: true, topic: topic, readErr: status.Error(codes.Unavailable, "stepping down")}
			f := &adminController{topic: topic}
			return []string{serveAdmin(t, busy), serveAdmin(t, f)}, f
		}, codes.OK},
		{"none answers", func(t *testing.T) ([]string, *adminController) {
			return []string{unusedLoopbackAddr(t), unusedLoopbackAddr(t)}, nil
		}, codes.Unavailable},
		{"every controller refuses alike", func(t *testing.T) ([]string, *adminController) {
			f := &adminController{topic: topic, readErr: status.Error(codes.Unimplemented, "not yet")}
			return []string{serveAdmin(t, f), serveAdmin(t, f)}, nil
		}, codes.Unimplemented},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addrs, answering := tt.setup(t)
			c, _ := NewClient(addrs)
			defer c.Close()
			resp, err := c.DescribeTopic(testCtx(t), "t")
			if status.Code(err) != tt.wantCode {
				t.Fatalf("err = %v, want %v", err, tt.wantCode)
			}
			if answering != nil && (resp.GetTopic().GetId() != "id-1" || answering.reads.Load() != 1) {
				t.Fatalf("DescribeTopic = %v after %d reads", resp, answering.reads.Load())
			}
		})
	}
}

// NotFound is the same answer from every controller: no second try.
func TestClient_ReadReturnsDefiniteAnswersAtOnce(t *testing.T) {
	a := &adminController{}
	b := &adminController{}
	c, _ := NewClient([]string{serveAdmin(t, a), serveAdmin(t, b)})
	defer c.Close()
	_, err := c.DescribeTopic(testCtx(t), "missing")
	if status.Code(err) != codes.NotFound || a.reads.Load()+b.reads.Load() != 1 {
		t.Fatalf("err = %v after %d reads, want NotFound after 1", err, a.reads.Load()+b.reads.Load())
	}
}

// A controller that hangs does not hold up finding the active one.
func TestClient_FindLeaderDoesNotWaitForAHungController(t *testing.T) {
	leader := &adminController{active: true, topic: &keelpb.TopicDescription{Name: "t"}}
	hung := &hangingController{release: make(chan struct{})}
	defer close(hung.release)
	hungAddr := serveBrokerTestServices(t, func(g *grpc.Server) { keelpb.RegisterControllerServiceServer(g, hung) })
	c, _ := NewClient([]string{hungAddr, serveAdmin(t, leader)})
	defer c.Close()
	start := time.Now()
	if _, err := c.DescribeTopic(testCtx(t), "t"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > attemptTimeout/2 {
		t.Fatalf("read took %v with one controller hung", d)
	}
}

type hangingController struct {
	keelpb.UnimplementedControllerServiceServer
	release chan struct{}
}

func (h *hangingController) DescribeQuorum(ctx context.Context, _ *keelpb.DescribeQuorumRequest) (*keelpb.DescribeQuorumResponse, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-h.release:
		return nil, status.Error(codes.Unavailable, "released")
	}
}
