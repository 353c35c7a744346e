package main

import (
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/proto/keelpb"
)

// fakeQuorum is an active controller (node 1) that records membership
// requests. Its own address, once served, is in self.
type fakeQuorum struct {
	keelpb.UnimplementedControllerServiceServer
	mu       sync.Mutex
	self     string
	leader   int32 // the active node, as DescribeQuorum reports it
	requests []proto.Message
	err      error
}

func (f *fakeQuorum) record(req proto.Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req)
	return f.err
}

func (f *fakeQuorum) voters() []*keelpb.QuorumMember {
	return []*keelpb.QuorumMember{{Id: 1, Address: f.self, Suffrage: "voter"}, {Id: 4, Address: "127.0.0.1:9094", Suffrage: "voter"}}
}

func (f *fakeQuorum) DescribeQuorum(context.Context, *keelpb.DescribeQuorumRequest) (*keelpb.DescribeQuorumResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &keelpb.DescribeQuorumResponse{ClusterId: "c1", NodeId: f.leader, Active: true, ActiveEpoch: 7, LeaderId: f.leader,
		Voters: []*keelpb.QuorumMember{{Id: f.leader, Address: f.self, Suffrage: "voter"}}}, nil
}

func (f *fakeQuorum) AddVoter(_ context.Context, req *keelpb.AddVoterRequest) (*keelpb.AddVoterResponse, error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	return &keelpb.AddVoterResponse{ConfigurationIndex: 57, LeaderId: 1, Voters: f.voters()}, nil
}

func (f *fakeQuorum) RemoveVoter(_ context.Context, req *keelpb.RemoveVoterRequest) (*keelpb.RemoveVoterResponse, error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	return &keelpb.RemoveVoterResponse{ConfigurationIndex: 58, LeaderId: 1, Voters: f.voters()[:1]}, nil
}

func (f *fakeQuorum) TransferLeadership(_ context.Context, req *keelpb.TransferLeadershipRequest) (*keelpb.TransferLeadershipResponse, error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leader = req.GetTargetId()
	return &keelpb.TransferLeadershipResponse{PreviousLeaderId: 1, LeaderId: f.leader}, nil
}

func serveQuorum(t *testing.T, f *fakeQuorum) string {
	t.Helper()
	f.leader = 1
	f.self = serveGRPC(t, func(g *grpc.Server) { keelpb.RegisterControllerServiceServer(g, f) })
	return f.self
}

// joiner is a node waiting to be added: it answers DescribeQuorum as id.
type joiner struct {
	keelpb.UnimplementedControllerServiceServer
	id      int32
	cluster string
}

func (j *joiner) DescribeQuorum(context.Context, *keelpb.DescribeQuorumRequest) (*keelpb.DescribeQuorumResponse, error) {
	return &keelpb.DescribeQuorumResponse{NodeId: j.id, ClusterId: j.cluster, State: "follower", LeaderId: -1}, nil
}

func serveJoiner(t *testing.T, j *joiner) string {
	return serveGRPC(t, func(g *grpc.Server) { keelpb.RegisterControllerServiceServer(g, j) })
}

func TestQuorumAddVoter(t *testing.T) {
	f := &fakeQuorum{}
	addr := serveQuorum(t, f)
	node4 := serveJoiner(t, &joiner{id: 4})

	out, err := runKeel(t, "quorum", "add-voter", "4", node4, "--controllers", addr, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.requests) != 1 || !proto.Equal(f.requests[0], &keelpb.AddVoterRequest{Id: 4, Address: node4}) {
		t.Fatalf("requests = %v", f.requests)
	}
	want := "map[configuration_index:57 leader_id:1 voters:[map[address:" + addr + " id:1 suffrage:voter] map[address:127.0.0.1:9094 id:4 suffrage:voter]]]"
	if got := decodeJSON(t, out); got != want {
		t.Fatalf("add-voter -o json = %s\nwant %s", got, want)
	}

	out, err = runKeel(t, "quorum", "add-voter", "4", node4, "--controllers", addr)
	if err != nil || !strings.HasPrefix(out, "Voter 4 at "+node4+" is in the quorum (configuration index 57, active controller 1).") ||
		!strings.Contains(out, "4   127.0.0.1:9094") {
		t.Fatalf("add-voter table: %v\n%s", err, out)
	}

	// The node at ADDR is asked who it is first.
	node5 := serveJoiner(t, &joiner{id: 5})
	_, err = runKeel(t, "quorum", "add-voter", "4", node5, "--controllers", addr)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "is node 5, not node 4") {
		t.Fatalf("add-voter of the wrong node: %v", err)
	}
	other := serveJoiner(t, &joiner{id: 4, cluster: "c2"})
	_, err = runKeel(t, "quorum", "add-voter", "4", other, "--controllers", addr)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "belongs to cluster c2, not c1") {
		t.Fatalf("add-voter of another cluster's node: %v", err)
	}
	dead := freeAddr(t)
	_, err = runKeel(t, "quorum", "add-voter", "4", dead, "--controllers", addr, "--timeout", "2s")
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("add-voter of a node that is not up: %v", err)
	}
	if len(f.requests) != 2 {
		t.Fatalf("a refused check still sent AddVoter: %v", f.requests)
	}
	// --no-check adds it anyway.
	if _, err := runKeel(t, "quorum", "add-voter", "4", dead, "--controllers", addr, "--no-check"); err != nil || len(f.requests) != 3 {
		t.Fatalf("add-voter --no-check: %v, requests %v", err, f.requests)
	}
	// The controller's refusal is the command's error.
	f.err = status.Error(codes.AlreadyExists, "conflicts with a member of the quorum: node 4 is already a member at 127.0.0.1:9094")
	if _, err := runKeel(t, "quorum", "add-voter", "4", node4, "--controllers", addr); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("add-voter refused: %v", err)
	}
}

func TestQuorumRemoveVoter(t *testing.T) {
	f := &fakeQuorum{}
	addr := serveQuorum(t, f)
	out, err := runKeel(t, "quorum", "remove-voter", "4", "--controllers", addr, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	want := "map[configuration_index:58 leader_id:1 voters:[map[address:" + addr + " id:1 suffrage:voter]]]"
	if got := decodeJSON(t, out); got != want || !proto.Equal(f.requests[0], &keelpb.RemoveVoterRequest{Id: 4}) {
		t.Fatalf("remove-voter -o json = %s (requests %v)\nwant %s", got, f.requests, want)
	}
	out, err = runKeel(t, "quorum", "remove-voter", "4", "--controllers", addr)
	if err != nil || !strings.HasPrefix(out, "Voter 4 is out of the quorum (configuration index 58, active controller 1).") {
		t.Fatalf("remove-voter table: %v\n%s", err, out)
	}
	f.err = status.Error(codes.NotFound, "not a member of the quorum: node 9")
	_, err = runKeel(t, "quorum", "remove-voter", "9", "--controllers", addr)
	if status.Code(err) != codes.NotFound || errorLine(err) != "NotFound: not a member of the quorum: node 9" {
		t.Fatalf("remove-voter of an unknown node: %v", err)
	}
}

func TestQuorumTransferLeadership(t *testing.T) {
	f := &fakeQuorum{}
	addr := serveQuorum(t, f)
	out, err := runKeel(t, "quorum", "transfer-leadership", "--to", "3", "--controllers", addr, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	if got := decodeJSON(t, out); got != "map[controller_epoch:7 leader_id:3 previous_leader_id:1]" {
		t.Fatalf("transfer-leadership -o json = %s", got)
	}
	if !proto.Equal(f.requests[0], &keelpb.TransferLeadershipRequest{TargetId: proto.Int32(3)}) {
		t.Fatalf("request = %v", f.requests[0])
	}
	f.leader = 1
	out, err = runKeel(t, "quorum", "transfer-leadership", "--to", "2", "--controllers", addr)
	if err != nil || out != "Leadership moved from node 1 to node 2; node 2 is the active controller at epoch 7.\n" {
		t.Fatalf("transfer-leadership table: %v\n%s", err, out)
	}
}

func TestQuorumMembershipArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"add-voter without ADDR", []string{"quorum", "add-voter", "4"}, "accepts 2 arg(s), received 1"},
		{"add-voter id 0", []string{"quorum", "add-voter", "0", "127.0.0.1:9094"}, `ID "0": want a node id, a positive integer`},
		{"add-voter id x", []string{"quorum", "add-voter", "x", "127.0.0.1:9094"}, `ID "x": want a node id`},
		{"add-voter with an id in ADDR", []string{"quorum", "add-voter", "4", "4@127.0.0.1:9094"}, "want host:port alone"},
		{"add-voter ADDR without a port", []string{"quorum", "add-voter", "4", "127.0.0.1"}, `ADDR: bad address "127.0.0.1"`},
		{"add-voter ADDR port 0", []string{"quorum", "add-voter", "4", "h:0"}, `port "0" is not in 1..65535`},
		{"add-voter with a bad output", []string{"quorum", "add-voter", "4", "h:1", "-o", "yaml"}, `-o "yaml"`},
		{"remove-voter without ID", []string{"quorum", "remove-voter"}, "accepts 1 arg(s), received 0"},
		{"remove-voter id -1", []string{"quorum", "remove-voter", "-1"}, "unknown shorthand flag"},
		{"remove-voter id 2147483648", []string{"quorum", "remove-voter", "2147483648"}, `ID "2147483648"`},
		{"transfer-leadership --to 0", []string{"quorum", "transfer-leadership", "--to", "0"}, `--to "0": want a node id`},
		{"transfer-leadership --to empty", []string{"quorum", "transfer-leadership", "--to", ""}, `--to "": want a node id`},
		{"transfer-leadership with an argument", []string{"quorum", "transfer-leadership", "2"}, `unknown command "2"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runKeel(t, tt.args...)
			if err == nil || !strings.Contains(errorLine(err), tt.wantErr) || strings.Contains(errorLine(err), "\n") {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
