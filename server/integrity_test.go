package server_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/server"
)

// A follower whose image diverged answers no stale read and says why in
// DescribeQuorum; a healthy follower still answers. CompareImage gives a
// voter's digest at the leader's index, and a verdict stops a voter only
// when its own digest is another.
func TestControllerService_DivergedNode(t *testing.T) {
	c, active := startCluster(t, 3)
	c.WaitForApplied(active.FSM().Image().Offset)
	var followers []*server.Node
	for _, nd := range c.Nodes() {
		if nd != active {
			followers = append(followers, nd)
		}
	}
	bad, good := followers[0], followers[1]
	ctx := testCtx(t)

	own, ok := active.FSM().LatestDigest()
	if !ok {
		t.Fatal("the active controller has no digest")
	}
	resp, err := dialNode(t, good).CompareImage(ctx, &keelpb.CompareImageRequest{Index: own.Index, FromId: active.ID()})
	if err != nil || string(resp.GetDigest()) != string(own.Sum[:]) || resp.GetChainStart() != own.Start || resp.GetNodeId() != good.ID() {
		t.Fatalf("CompareImage on a healthy follower = %v, %v; want the leader's digest %v", resp, err, own)
	}
	verdict := &keelpb.CompareImageRequest{Index: own.Index, ChainStart: own.Start, MajorityDigest: own.Sum[:], Majority: "controllers of the test", FromId: active.ID()}
	if _, err := dialNode(t, good).CompareImage(ctx, verdict); err != nil || good.Controller().Diverged() != nil {
		t.Fatalf("a verdict with the follower's own digest: %v, diverged %v", err, good.Controller().Diverged())
	}
	other := proto.Clone(verdict).(*keelpb.CompareImageRequest)
	other.MajorityDigest = make([]byte, 32)
	resp, err = dialNode(t, bad).CompareImage(ctx, other)
	if err != nil || resp.GetDivergedIndex() != own.Index || !strings.Contains(resp.GetDivergedReason(), "differs from the one a majority of the voters hold (controllers of the test") {
		t.Fatalf("a verdict with another digest: %v, %v", resp, err)
	}

	_, err = dialNode(t, bad).ListBrokers(ctx, &keelpb.ListBrokersRequest{Stale: true})
	if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "does not answer stale reads: its metadata image diverged") {
		t.Errorf("a stale read on the diverged follower: %v", err)
	}
	if _, err := dialNode(t, good).ListBrokers(ctx, &keelpb.ListBrokersRequest{Stale: true}); err != nil {
		t.Errorf("a stale read on a healthy follower: %v", err)
	}
	d, err := dialNode(t, bad).DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{})
	if err != nil || d.Ready || d.DivergedIndex != own.Index || !strings.Contains(d.NotReadyReason, "diverged at index") {
		t.Errorf("DescribeQuorum of the diverged follower = %v, %v", d, err)
	}
}

// A node restarting on its data dir asks its peers before its raft starts,
// and answers theirs meanwhile: AcknowledgedIndex is served, every other
// call, the peer service's too, is Unavailable ("starting"). With no peer up it starts once the
// wait has passed.
func TestStartNode_AnswersPeersWhileStarting(t *testing.T) {
	const wait = 3 * time.Second
	c, _ := startCluster(t, 3, keeltest.WithTune(func(cfg *server.NodeConfig) { cfg.RollbackCheckWait = wait }))
	addr := c.Node(1).Addr()
	for _, id := range []int32{1, 2, 3} {
		c.Kill(id)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	start := time.Now()
	go func() {
		defer wg.Done()
		c.Restart(1)
	}()
	defer wg.Wait()

	ctx := testCtx(t)
	var acked *keelpb.AcknowledgedIndexResponse
	poll.UntilState(t, wait, "node 1 to answer AcknowledgedIndex while it starts", func() (bool, string) {
		// A connection per attempt: the port is bound again only as the
		// restart begins, and a refused dial would put a long-lived
		// connection into gRPC's reconnect back-off.
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return false, err.Error()
		}
		defer cc.Close()
		cl := keelpb.NewControllerServiceClient(cc)
		acked, err = cl.AcknowledgedIndex(ctx, &keelpb.AcknowledgedIndexRequest{NodeId: 2})
		if err != nil {
			return false, err.Error()
		}
		_, derr := cl.DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{})
		if st := status.Convert(derr); st.Code() != codes.Unavailable || st.Message() != "the controller is starting" {
			t.Errorf("DescribeQuorum while starting: %v", derr)
		}
		// A voter's crash election asks its peers; one still starting
		// has no raft to answer from, and must say so, not crash.
		_, lerr := keelpb.NewPeerServiceClient(cc).LeaderContact(ctx, &keelpb.LeaderContactRequest{LeaderId: 2})
		if st := status.Convert(lerr); st.Code() != codes.Unavailable || st.Message() != "the controller is starting" {
			t.Errorf("LeaderContact while starting: %v", lerr)
		}
		return true, ""
	})
	if acked.GetNodeId() != 1 {
		t.Errorf("AcknowledgedIndex answered by node %d", acked.GetNodeId())
	}
	wg.Wait()
	if took := time.Since(start); took < wait {
		t.Errorf("node 1 started %v after it was launched, with no peer up; want the wait, %v", took, wait)
	}
	c.Restart(2)
	c.Restart(3)
	c.WaitForActive(20 * time.Second)
}
