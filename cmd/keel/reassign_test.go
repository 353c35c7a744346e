package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/cmd/keel/internal/reassign"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// fakeCluster is a controller that keeps brokers and topics and moves
// partitions as a plan asks: a move starts as the controller starts one
// (replicas: the target, then those removed) and completes when the test
// says, or, with autoComplete, one partition per DescribeTopic.
type fakeCluster struct {
	keelpb.UnimplementedControllerServiceServer

	mu           sync.Mutex
	brokers      []*keelpb.BrokerInfo
	topics       map[string][]*keelpb.PartitionDescription
	plans        []*keelpb.AlterPartitionReassignmentsRequest // every plan received
	autoComplete bool
	refuse       error             // when set, AlterPartitionReassignments fails with it
	configs      map[string]string // the cluster's configs (throttle_test.go)
}

func newFakeCluster(brokers string, topics map[string][][]int32) *fakeCluster {
	f := &fakeCluster{topics: map[string][]*keelpb.PartitionDescription{}}
	for _, spec := range strings.Split(brokers, ",") {
		parts := strings.Split(spec, ":")
		b := &keelpb.BrokerInfo{State: "active"}
		fmt.Sscan(parts[0], &b.Id)
		if len(parts) > 1 {
			b.Rack = parts[1]
		}
		if len(parts) > 2 {
			b.State = parts[2]
		}
		f.brokers = append(f.brokers, b)
	}
	for name, assignment := range topics {
		for i, r := range assignment {
			f.topics[name] = append(f.topics[name], &keelpb.PartitionDescription{Partition: int32(i), Leader: r[0],
				Replicas: slices.Clone(r), Isr: slices.Clone(r), AddingReplicas: []int32{}, RemovingReplicas: []int32{}})
		}
	}
	return f
}

func (f *fakeCluster) serve(t *testing.T) string {
	return serveGRPC(t, func(g *grpc.Server) { keelpb.RegisterControllerServiceServer(g, f) })
}

func (f *fakeCluster) ListBrokers(context.Context, *keelpb.ListBrokersRequest) (*keelpb.ListBrokersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &keelpb.ListBrokersResponse{Brokers: f.brokers}, nil
}

func (f *fakeCluster) ListTopics(context.Context, *keelpb.ListTopicsRequest) (*keelpb.ListTopicsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &keelpb.ListTopicsResponse{}
	for name, ps := range f.topics {
		resp.Topics = append(resp.Topics, &keelpb.TopicSummary{Name: name, Partitions: int32(len(ps))})
	}
	sort.Slice(resp.Topics, func(i, j int) bool { return resp.Topics[i].Name < resp.Topics[j].Name })
	return resp, nil
}

func (f *fakeCluster) DescribeTopic(_ context.Context, req *keelpb.DescribeTopicRequest) (*keelpb.DescribeTopicResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.autoComplete {
		f.completeOne()
	}
	ps, ok := f.topics[req.Name]
	if !ok {
		return nil, rpc.WithReason(codes.NotFound, rpc.ReasonUnknownTopicOrPartition, "unknown topic "+req.Name)
	}
	d := &keelpb.TopicDescription{Name: req.Name}
	for _, p := range ps {
		d.Partitions = append(d.Partitions, proto.Clone(p).(*keelpb.PartitionDescription))
	}
	return &keelpb.DescribeTopicResponse{Topic: d}, nil
}

func (f *fakeCluster) partition(topic string, p int32) *keelpb.PartitionDescription {
	for _, d := range f.topics[topic] {
		if d.Partition == p {
			return d
		}
	}
	return nil
}

func (f *fakeCluster) AlterPartitionReassignments(_ context.Context, req *keelpb.AlterPartitionReassignmentsRequest) (*keelpb.AlterPartitionReassignmentsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.plans = append(f.plans, req)
	if f.refuse != nil {
		return nil, f.refuse
	}
	if len(req.Partitions) == 0 { // the single form: a plan of one
		plan := &keelpb.AlterPartitionReassignmentsRequest{Partitions: []*keelpb.ReassignmentTarget{{Topic: req.Topic, Partition: req.Partition, Replicas: req.Replicas}}}
		resp, err := f.alter(plan)
		if err != nil {
			return nil, err
		}
		return &keelpb.AlterPartitionReassignmentsResponse{Partition: resp.Partitions[0].Partition}, nil
	}
	return f.alter(req)
}

// alter applies a plan; the caller holds f.mu.
func (f *fakeCluster) alter(req *keelpb.AlterPartitionReassignmentsRequest) (*keelpb.AlterPartitionReassignmentsResponse, error) {
	for i, t := range req.Partitions { // all or nothing, as the controller
		p := f.partition(t.Topic, t.Partition)
		switch {
		case p == nil:
			return nil, rpc.WithReason(codes.NotFound, rpc.ReasonUnknownTopicOrPartition, fmt.Sprintf("partitions[%d]: unknown", i))
		case len(t.Replicas) == 0 && len(p.AddingReplicas)+len(p.RemovingReplicas) == 0:
			return nil, rpc.WithReason(codes.FailedPrecondition, rpc.ReasonNoReassignmentInProgress, fmt.Sprintf("partitions[%d]: no reassignment in progress", i))
		}
	}
	resp := &keelpb.AlterPartitionReassignmentsResponse{}
	for _, t := range req.Partitions {
		p := f.partition(t.Topic, t.Partition)
		if len(t.Replicas) == 0 { // cancel: back to the replicas less those added
			p.Replicas = slices.DeleteFunc(p.Replicas, func(b int32) bool { return slices.Contains(p.AddingReplicas, b) })
			p.AddingReplicas, p.RemovingReplicas = []int32{}, []int32{}
		} else {
			cur := slices.DeleteFunc(slices.Clone(p.Replicas), func(b int32) bool { return slices.Contains(p.RemovingReplicas, b) })
			var adding, removing []int32
			for _, b := range t.Replicas {
				if !slices.Contains(cur, b) {
					adding = append(adding, b)
				}
			}
			for _, b := range cur {
				if !slices.Contains(t.Replicas, b) {
					removing = append(removing, b)
				}
			}
			p.Replicas = append(slices.Clone(t.Replicas), removing...)
			p.AddingReplicas, p.RemovingReplicas = nonNil(adding), nonNil(removing)
		}
		resp.Partitions = append(resp.Partitions, &keelpb.ReassignedPartition{Topic: t.Topic, Partition: proto.Clone(p).(*keelpb.PartitionDescription)})
	}
	return resp, nil
}

func nonNil(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return s
}

func (f *fakeCluster) ListPartitionReassignments(context.Context, *keelpb.ListPartitionReassignmentsRequest) (*keelpb.ListPartitionReassignmentsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &keelpb.ListPartitionReassignmentsResponse{}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range f.topics {
			if !yield(k) {
				return
			}
		}
	}) {
		for _, p := range f.topics[name] {
			if len(p.AddingReplicas)+len(p.RemovingReplicas) > 0 {
				resp.Reassignments = append(resp.Reassignments, &keelpb.Reassignment{Topic: name, Partition: p.Partition,
					Replicas: p.Replicas, AddingReplicas: p.AddingReplicas, RemovingReplicas: p.RemovingReplicas})
			}
		}
	}
	return resp, nil
}

// completeOne completes one ongoing move, if any; the caller holds f.mu.
func (f *fakeCluster) completeOne() bool {
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range f.topics {
			if !yield(k) {
				return
			}
		}
	}) {
		for _, p := range f.topics[name] {
			if len(p.AddingReplicas)+len(p.RemovingReplicas) > 0 {
				p.Replicas = slices.DeleteFunc(p.Replicas, func(b int32) bool { return slices.Contains(p.RemovingReplicas, b) })
				p.Isr, p.Leader = slices.Clone(p.Replicas), p.Replicas[0]
				p.AddingReplicas, p.RemovingReplicas = []int32{}, []int32{}
				return true
			}
		}
	}
	return false
}

func (f *fakeCluster) completeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.completeOne() {
	}
}

func (f *fakeCluster) sentPlans() []*keelpb.AlterPartitionReassignmentsRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.plans)
}

// planFile writes content to a file of the test's.
func planFile(t *testing.T, name, content string) string {
	t.Helper()
	return writeFile(t, filepath.Join(t.TempDir(), name), content)
}

// jsonLineAfter is the line after the one that is header, in out.
func jsonLineAfter(t *testing.T, out, header string) reassign.Plan {
	t.Helper()
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if l == header {
			for _, next := range lines[i+1:] {
				if strings.TrimSpace(next) != "" {
					p, err := reassign.ParsePlan([]byte(next))
					if err != nil {
						t.Fatalf("the line after %q does not parse as a plan: %v\n%s", header, err, out)
					}
					return p
				}
			}
		}
	}
	t.Fatalf("no %q in\n%s", header, out)
	return reassign.Plan{}
}

const twoPartitionPlan = `{"version":1,"partitions":[
  {"topic":"orders","partition":0,"replicas":[2,3],"log_dirs":["any","any"]},
  {"topic":"orders","partition":1,"replicas":[3,1]}]}`

func TestPartitionReassign_Plan(t *testing.T) {
	f := newFakeCluster("1,2,3", map[string][][]int32{"orders": {{1, 2}, {2, 3}}})
	addr := f.serve(t)
	plan := planFile(t, "move.json", twoPartitionPlan)

	out, err := runKeel(t, "partition", "reassign", "--controllers", addr, "--plan", plan)
	if err != nil {
		t.Fatalf("reassign --plan: %v\n%s", err, out)
	}
	if got := jsonLineAfter(t, out, "Current partition replica assignment"); got.String() !=
		`{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[1,2],"log_dirs":["any","any"]},{"topic":"orders","partition":1,"replicas":[2,3],"log_dirs":["any","any"]}]}` {
		t.Errorf("the rollback plan is %s", got)
	}
	for _, want := range []string{"Save this to use as the --plan file during rollback", "Successfully started partition reassignments for orders-0,orders-1",
		"orders  0          1       0             0                2,3,1     1,2  -    -                  recovered  3       1"} {
		if !strings.Contains(out, want) {
			t.Errorf("reassign --plan output lacks %q:\n%s", want, out)
		}
	}
	sent := f.sentPlans()
	want := &keelpb.AlterPartitionReassignmentsRequest{Partitions: []*keelpb.ReassignmentTarget{
		{Topic: "orders", Partition: 0, Replicas: []int32{2, 3}}, {Topic: "orders", Partition: 1, Replicas: []int32{3, 1}}}}
	if len(sent) != 1 || !proto.Equal(sent[0], want) {
		t.Fatalf("requests %v; want one: %v", sent, want)
	}

	// --cancel cancels the plan's ongoing moves.
	out, err = runKeel(t, "partition", "reassign", "--controllers", addr, "--plan", plan, "--cancel", "-o", "json")
	if err != nil {
		t.Fatalf("reassign --plan --cancel: %v\n%s", err, out)
	}
	var cancelled cancelView
	if err := json.Unmarshal([]byte(out), &cancelled); err != nil || !slices.Equal(cancelled.Cancelled, []string{"orders-0", "orders-1"}) {
		t.Fatalf("reassign --plan --cancel -o json: %v\n%s", err, out)
	}
	out, err = runKeel(t, "partition", "reassign", "--controllers", addr, "--plan", plan, "--cancel")
	if err != nil || !strings.Contains(out, "nothing to cancel") {
		t.Fatalf("a second cancel: %v\n%s", err, out)
	}
}

// TestPartitionReassign_PlanRefusedWhole: a plan file with one bad entry is
// refused before anything is sent, naming the file, the entry and the
// field; a plan the controller refuses changes nothing and fails.
func TestPartitionReassign_PlanRefusedWhole(t *testing.T) {
	f := newFakeCluster("1,2,3", map[string][][]int32{"orders": {{1, 2}, {2, 3}}})
	addr := f.serve(t)
	tests := []struct {
		name, plan, want string
	}{
		{"a replica twice", `{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[2,3]},{"topic":"orders","partition":1,"replicas":[3,3]}]}`,
			"partitions[1] (orders-1): replicas 3,3 name broker 3 twice"},
		{"not JSON", `{"version":1,`, "not valid JSON"},
		{"a log dir", `{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[2],"log_dirs":["/d"]}]}`, `log_dirs: "/d"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := planFile(t, "bad.json", tt.plan)
			out, err := runKeel(t, "partition", "reassign", "--controllers", addr, "--plan", path)
			if err == nil || !strings.Contains(err.Error(), "--plan "+path+": ") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("reassign --plan %s: %v\n%s; want an error naming the file and %q", tt.name, err, out, tt.want)
			}
		})
	}
	if _, err := runKeel(t, "partition", "reassign", "--controllers", addr, "--plan", filepath.Join(t.TempDir(), "none.json")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("a missing plan file: %v", err)
	}
	if sent := f.sentPlans(); len(sent) != 0 {
		t.Fatalf("a bad plan sent %v", sent)
	}

	f.mu.Lock()
	f.refuse = rpc.InvalidArgument("partitions[1].replicas", "orders/1: partition 1: broker 9 is not registered; nothing in the plan was applied")
	f.mu.Unlock()
	path := planFile(t, "move.json", twoPartitionPlan)
	out, err := runKeel(t, "partition", "reassign", "--controllers", addr, "--plan", path)
	if err == nil || !strings.Contains(errorLine(err), "InvalidArgument: partitions[1].replicas: ") || strings.Contains(out, "Successfully") {
		t.Fatalf("a refused plan: %v\n%s", err, out)
	}
}

func TestPartitionReassign_Generate(t *testing.T) {
	f := newFakeCluster("1:a,2:a,3:b,4:b,5:c,6:c", map[string][][]int32{
		"orders": {{1, 2, 3}, {1, 2, 3}, {1, 2, 3}}, "payments": {{1, 2, 3}, {1, 2, 3}, {1, 2, 3}}, "other": {{1}}})
	addr := f.serve(t)
	out, err := runKeel(t, "partition", "reassign", "--controllers", addr, "--generate", "--topics", "orders,payments", "--brokers", "1,2,3,4,5,6")
	if err != nil {
		t.Fatalf("reassign --generate: %v\n%s", err, out)
	}
	current := jsonLineAfter(t, out, "Current partition replica assignment")
	proposed := jsonLineAfter(t, out, "Proposed partition reassignment configuration")
	if len(current.Partitions) != 6 || len(proposed.Partitions) != 6 {
		t.Fatalf("current %v, proposed %v; want the 6 partitions of orders and payments", current, proposed)
	}
	racks := map[int32]string{1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
	preferred := map[int32]int{}
	for _, e := range proposed.Partitions {
		seen := map[string]bool{}
		for _, b := range e.Replicas {
			if seen[racks[b]] {
				t.Errorf("%s: %v puts two replicas in rack %s", e.Name(), e.Replicas, racks[b])
			}
			seen[racks[b]] = true
		}
		preferred[e.Replicas[0]]++
	}
	if len(preferred) != 6 {
		t.Errorf("preferred leaders %v; want six partitions led by six brokers", preferred)
	}
	if sent := f.sentPlans(); len(sent) != 0 {
		t.Fatalf("--generate wrote %v", sent)
	}

	// -o json: both plans.
	out, err = runKeel(t, "partition", "reassign", "--controllers", addr, "--generate", "--topics", "other", "--brokers", "5", "-o", "json")
	var v generateView
	if err != nil || json.Unmarshal([]byte(out), &v) != nil || v.Proposed.String() != `{"version":1,"partitions":[{"topic":"other","partition":0,"replicas":[5],"log_dirs":["any"]}]}` {
		t.Fatalf("--generate -o json: %v\n%s", err, out)
	}
	for _, tt := range []struct{ args, want string }{
		{"--topics orders --brokers 1,2", "--brokers 1,2: partition orders-0 has 3 replicas, more than the 2 brokers given (1,2)"},
		{"--topics orders --brokers 1,2,9", "--brokers 1,2,9: broker 9 is not registered"},
		{"--topics nope --brokers 1", "NotFound: unknown topic nope"},
		{"--topics orders", "--generate needs --brokers"},
		{"--brokers 1", "--generate needs --topics"},
	} {
		args := append([]string{"partition", "reassign", "--controllers", addr, "--generate"}, strings.Fields(tt.args)...)
		if out, err := runKeel(t, args...); err == nil || !strings.Contains(errorLine(err), tt.want) {
			t.Errorf("reassign --generate %s: %v\n%s; want %q", tt.args, err, out, tt.want)
		}
	}
}

func TestPartitionReassign_Verify(t *testing.T) {
	f := newFakeCluster("1,2,3", map[string][][]int32{"orders": {{1, 2}, {2, 3}, {1, 2}}})
	addr := f.serve(t)
	plan := planFile(t, "move.json", `{"version":1,"partitions":[
	  {"topic":"orders","partition":0,"replicas":[2,3]},
	  {"topic":"orders","partition":1,"replicas":[2,3]},
	  {"topic":"orders","partition":2,"replicas":[3,1]},
	  {"topic":"gone","partition":0,"replicas":[1]}]}`)
	if _, err := runKeel(t, "partition", "reassign", "--controllers", addr, "--topic", "orders", "--partition", "0", "--replicas", "2,3"); err != nil {
		t.Fatal(err)
	}
	out, err := runKeel(t, "partition", "reassign", "--controllers", addr, "--verify", plan)
	want := `Status of partition reassignment:
Partition gone-0 does not exist.
Reassignment of partition orders-0 is still in progress.
Reassignment of partition orders-1 is completed.
There is no active reassignment of partition orders-2, but replica set is 1,2 rather than 3,1.
`
	if out != want || err == nil || errorLine(err) != "3 of 4 partitions of the plan are not complete" {
		t.Fatalf("reassign --verify: %v\n%s\nwant\n%s", err, out, want)
	}

	f.completeAll()
	complete := planFile(t, "done.json", `{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[2,3]},{"topic":"orders","partition":1,"replicas":[2,3]}]}`)
	out, err = runKeel(t, "partition", "reassign", "--controllers", addr, "--verify", complete, "-o", "json")
	var statuses []reassign.Status
	if err != nil || json.Unmarshal([]byte(out), &statuses) != nil || len(statuses) != 2 || statuses[0].State != "complete" || statuses[1].State != "complete" {
		t.Fatalf("reassign --verify once complete: %v\n%s", err, out)
	}
}

func TestPartitionReassign_FormsDoNotMix(t *testing.T) {
	for _, tt := range []struct{ args, want string }{
		{"--plan p.json --topic orders", "--plan takes the partitions from the file: give it without --topic"},
		{"--plan p.json --verify p.json", "give it without --verify"},
		{"--verify p.json --cancel", "--verify checks the plan file's partitions: give it without --cancel"},
		{"--generate --topics a --brokers 1 --replicas 1", "--generate proposes a plan for --topics over --brokers: give it without --replicas"},
		{"--topics a", "--topics and --brokers go with --generate"},
		{"--partition 0 --replicas 1", "--topic is required (or --plan FILE, --generate, --verify FILE)"},
	} {
		args := append([]string{"partition", "reassign", "--controllers", "127.0.0.1:1"}, strings.Fields(tt.args)...)
		if out, err := runKeel(t, args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("reassign %s: %v\n%s; want %q", tt.args, err, out, tt.want)
		}
	}
}

func TestBrokerDrain(t *testing.T) {
	assignment := [][]int32{{1, 2, 3}, {2, 3, 4}, {3, 4, 1}, {4, 1, 2}, {1, 2, 4}, {2, 4, 1}}
	t.Run("waits, with progress, until the broker holds nothing", func(t *testing.T) {
		f := newFakeCluster("1,2,3,4,5", map[string][][]int32{"orders": assignment, "payments": {{4}}})
		f.autoComplete = true
		addr := f.serve(t)
		out, err := runKeel(t, "broker", "drain", "--controllers", addr, "--broker-id", "4", "--poll-interval", "10ms", "--wait-timeout", "20s")
		if err != nil {
			t.Fatalf("drain: %v\n%s", err, out)
		}
		current := jsonLineAfter(t, out, "Current partition replica assignment")
		if len(current.Partitions) != 6 {
			t.Errorf("the rollback plan %v; want the 6 partitions on broker 4", current)
		}
		for _, want := range []string{"Draining broker 4: 6 partitions to move off it (6 moves started).", "moved 6/6 partitions off broker 4",
			"Broker 4 is drained: it holds no replicas and leads no partitions."} {
			if !strings.Contains(out, want) {
				t.Errorf("drain output lacks %q:\n%s", want, out)
			}
		}
		sent := f.sentPlans()
		if len(sent) != 1 || len(sent[0].Partitions) != 6 {
			t.Fatalf("requests %v; want one plan of 6 moves", sent)
		}
		for _, p := range sent[0].Partitions {
			if slices.Contains(p.Replicas, 4) {
				t.Errorf("the drain moves %s/%d to %v", p.Topic, p.Partition, p.Replicas)
			}
		}
	})
	t.Run("--no-wait returns at once; --cancel cancels the moves off it", func(t *testing.T) {
		f := newFakeCluster("1,2,3,4,5", map[string][][]int32{"orders": assignment})
		addr := f.serve(t)
		out, err := runKeel(t, "broker", "drain", "--controllers", addr, "--broker-id", "4", "--no-wait", "-o", "json")
		var v drainView
		if err != nil || json.Unmarshal([]byte(out), &v) != nil || v.Done || v.Total != 5 || v.Moved != 0 || len(v.Plan.Partitions) != 5 {
			t.Fatalf("drain --no-wait -o json: %v\n%s", err, out)
		}
		// Another move, not off broker 4, is left alone by the cancel.
		if _, err := runKeel(t, "partition", "reassign", "--controllers", addr, "--topic", "orders", "--partition", "0", "--replicas", "1,2,5"); err != nil {
			t.Fatal(err)
		}
		out, err = runKeel(t, "broker", "drain", "--controllers", addr, "--broker-id", "4", "--cancel")
		if err != nil || !strings.Contains(out, "Cancelled the moves off broker 4 of 5 partitions: orders-1,orders-2,orders-3,orders-4,orders-5") {
			t.Fatalf("drain --cancel: %v\n%s", err, out)
		}
		var v2 []reassignmentRow
		out, err = runKeel(t, "partition", "reassignments", "--controllers", addr, "-o", "json")
		if err != nil || json.Unmarshal([]byte(out), &v2) != nil || len(v2) != 1 || v2[0].Partition != 0 {
			t.Fatalf("after the cancel, reassignments: %v\n%s; want orders-0's alone", err, out)
		}
	})
	t.Run("refused whole when a partition has nowhere to go", func(t *testing.T) {
		f := newFakeCluster("1,2,3,4,5:r:fenced", map[string][][]int32{"orders": assignment, "wide": {{1, 2}, {1, 2, 3, 4}}})
		addr := f.serve(t)
		out, err := runKeel(t, "broker", "drain", "--controllers", addr, "--broker-id", "4", "--wait-timeout", "20s")
		if err == nil || !strings.Contains(err.Error(), "cannot drain broker 4: partition wide-1 has replicas 1,2,3,4") || len(f.sentPlans()) != 0 {
			t.Fatalf("drain with 3 active brokers left for RF 4: %v\n%s; want a refusal and nothing sent", err, out)
		}
	})
	t.Run("a broker that holds nothing", func(t *testing.T) {
		f := newFakeCluster("1,2,3,4", map[string][][]int32{"orders": {{1, 2}}})
		addr := f.serve(t)
		out, err := runKeel(t, "broker", "drain", "--controllers", addr, "--broker-id", "4")
		if err != nil || out != "Broker 4 holds no replicas: nothing to move.\n" {
			t.Fatalf("drain of an empty broker: %v\n%q", err, out)
		}
	})
	for _, tt := range []struct{ args, want string }{
		{"", "--broker-id is required"},
		{"--broker-id 4 --cancel --no-wait", "--cancel does not wait"},
		{"--broker-id 4 --poll-interval 0s", "--poll-interval 0s: want a positive duration"},
		{"--broker-id 9 --controllers ADDR", "broker 9 is not registered"},
	} {
		f := newFakeCluster("1,2", nil)
		args := append([]string{"broker", "drain", "--controllers", f.serve(t)}, strings.Fields(strings.ReplaceAll(tt.args, "--controllers ADDR", ""))...)
		if out, err := runKeel(t, args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("drain %s: %v\n%s; want %q", tt.args, err, out, tt.want)
		}
	}
}
