package rpc

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/proto/keelpb"
)

func TestToStatus_Membership(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		code     codes.Code
		reason   string
		hintID   int32
		hintAddr string
	}{
		{name: "voter elsewhere", err: fmt.Errorf("%w: node 2 at b", controller.ErrVoterExists), code: codes.AlreadyExists},
		{name: "unknown voter", err: fmt.Errorf("%w: node 9", controller.ErrUnknownVoter), code: codes.NotFound},
		{name: "last voter", err: fmt.Errorf("%w: node 1", controller.ErrLastVoter), code: codes.FailedPrecondition},
		{name: "nonvoter target", err: fmt.Errorf("%w: node 4", controller.ErrNotVoter), code: codes.FailedPrecondition},
		{name: "configuration changed", err: fmt.Errorf("%w: since 7", controller.ErrConfigurationChanged), code: codes.Aborted},
		{name: "transfer failed", err: fmt.Errorf("%w: timeout", controller.ErrTransferFailed), code: codes.Unavailable},
		{name: "handed off to a known leader", err: &controller.NotLeaderError{LeaderID: 2, LeaderAddress: "h:2", HandedOff: true},
			code: codes.FailedPrecondition, reason: ReasonLeadershipTransferred, hintID: 2, hintAddr: "h:2"},
		{name: "handed off, new leader not known yet", err: &controller.NotLeaderError{LeaderID: -1, HandedOff: true},
			code: codes.Unavailable, reason: ReasonLeadershipTransferred, hintID: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := toStatus(tt.err)
			if status.Code(got) != tt.code || ReasonOf(got) != tt.reason {
				t.Fatalf("toStatus = %v (reason %q); want %v (reason %q)", got, ReasonOf(got), tt.code, tt.reason)
			}
			if tt.reason == "" {
				return
			}
			if hint, ok := LeaderHintOf(got); !ok || hint.LeaderId != tt.hintID || hint.LeaderAddress != tt.hintAddr {
				t.Fatalf("hint = %v, want %d@%s", hint, tt.hintID, tt.hintAddr)
			}
		})
	}
}

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
		return nil, toStatus(&controller.NotLeaderError{LeaderID: 2, LeaderAddress: nextAddr, HandedOff: true})
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
