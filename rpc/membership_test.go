package rpc

import (
	"context"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/proto/keelpb"
)

// membershipController answers the membership calls with its funcs.
type membershipController struct {
	keelpb.UnimplementedControllerServiceServer
	calls    atomic.Int32
	remove   func(*keelpb.RemoveVoterRequest) (*keelpb.RemoveVoterResponse, error)
	transfer func(*keelpb.TransferLeadershipRequest) (*keelpb.TransferLeadershipResponse, error)
}

func (f *membershipController) RemoveVoter(_ context.Context, req *keelpb.RemoveVoterRequest) (*keelpb.RemoveVoterResponse, error) {
	f.calls.Add(1)
	return f.remove(req)
}

func (f *membershipController) TransferLeadership(_ context.Context, req *keelpb.TransferLeadershipRequest) (*keelpb.TransferLeadershipResponse, error) {
	f.calls.Add(1)
	return f.transfer(req)
}

func serveMembership(t *testing.T, f *membershipController) string {
	t.Helper()
	return serveBrokerTestServices(t, func(g *grpc.Server) { keelpb.RegisterControllerServiceServer(g, f) })
}

// TestClient_RemoveVoterFollowsAHandoff: the active controller asked to
// remove itself hands leadership on and points at the new leader; the client
// asks the new leader, which removes it, and reports the handoff.
func TestClient_RemoveVoterFollowsAHandoff(t *testing.T) {
	next := &membershipController{remove: func(req *keelpb.RemoveVoterRequest) (*keelpb.RemoveVoterResponse, error) {
		return &keelpb.RemoveVoterResponse{ConfigurationIndex: 42, LeaderId: 2,
			Voters: []*keelpb.QuorumMember{{Id: 2, Address: "b:2", Suffrage: "voter"}, {Id: 3, Address: "c:3", Suffrage: "voter"}}}, nil
	}}
	nextAddr := serveMembership(t, next)
	old := &membershipController{remove: func(req *keelpb.RemoveVoterRequest) (*keelpb.RemoveVoterResponse, error) {
		if req.Id != 1 {
			return nil, status.Errorf(codes.Internal, "asked to remove %d", req.Id)
		}
		return nil, NotLeader(codes.FailedPrecondition, "handed off", 2, nextAddr, ReasonLeadershipTransferred)
	}}
	oldAddr := serveMembership(t, old)

	c, _ := NewClient([]string{oldAddr})
	defer c.Close()
	got, err := c.RemoveVoter(testCtx(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	if got.HandedOffBy != 1 || got.ConfigurationIndex != 42 || len(got.Voters) != 2 || got.LeaderId != 2 {
		t.Fatalf("RemoveVoter = %+v", got)
	}
	if old.calls.Load() != 1 || next.calls.Load() != 1 {
		t.Fatalf("calls: old leader %d, new leader %d", old.calls.Load(), next.calls.Load())
	}

	// Removing a follower reports no handoff.
	got, err = c.RemoveVoter(testCtx(t), 3)
	if err != nil || got.HandedOffBy != 0 {
		t.Fatalf("RemoveVoter(3) = %+v, %v", got, err)
	}
}

// TestClient_TransferLeadershipSendsTheTargetOnlyWhenGiven: 0 means "any
// voter" and is sent as an absent target, not as target 0.
func TestClient_TransferLeadershipSendsTheTargetOnlyWhenGiven(t *testing.T) {
	var seen []*keelpb.TransferLeadershipRequest
	f := &membershipController{transfer: func(req *keelpb.TransferLeadershipRequest) (*keelpb.TransferLeadershipResponse, error) {
		seen = append(seen, req)
		return &keelpb.TransferLeadershipResponse{PreviousLeaderId: 1, LeaderId: 2}, nil
	}}
	c, _ := NewClient([]string{serveMembership(t, f)})
	defer c.Close()
	for _, target := range []int32{0, 3} {
		if _, err := c.TransferLeadership(testCtx(t), target); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 2 || seen[0].TargetId != nil || seen[1].TargetId == nil || *seen[1].TargetId != 3 {
		t.Fatalf("requests = %v", seen)
	}
}
