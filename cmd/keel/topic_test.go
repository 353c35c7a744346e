package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// fakeAdmin is an active controller for the admin calls: it records each
// request and answers with what the test set. It does not implement
// DescribeQuorum, so reads go to it as the first controller that answers.
type fakeAdmin struct {
	keelpb.UnimplementedControllerServiceServer

	mu              sync.Mutex
	calls           []string
	last            proto.Message // the last request
	err             error         // when set, every call fails with it
	topic           *keelpb.TopicDescription
	topics          []*keelpb.TopicSummary
	results         []*keelpb.ElectionResult
	reassignments   []*keelpb.Reassignment
	noTopicInAnswer bool
	// described answers DescribeTopic by name, before topic.
	described map[string]*keelpb.TopicDescription
	// errFor fails one method's calls, before err.
	errFor map[string]error
}

// record notes a call; the caller holds f.mu.
func (f *fakeAdmin) record(name string, req proto.Message) error {
	f.calls = append(f.calls, name)
	f.last = req
	if err, ok := f.errFor[name]; ok {
		return err
	}
	return f.err
}

// got returns the calls made and the last request.
func (f *fakeAdmin) got() ([]string, proto.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string{}, f.calls...), f.last
}

// set changes what the fake answers.
func (f *fakeAdmin) set(change func(f *fakeAdmin)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f)
}

func (f *fakeAdmin) answerTopic() *keelpb.TopicDescription {
	if f.noTopicInAnswer {
		return nil
	}
	return f.topic
}

func (f *fakeAdmin) CreateTopic(_ context.Context, req *keelpb.CreateTopicRequest) (*keelpb.CreateTopicResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("CreateTopic", req); err != nil {
		return nil, err
	}
	return &keelpb.CreateTopicResponse{Topic: f.answerTopic()}, nil
}

func (f *fakeAdmin) CreatePartitions(_ context.Context, req *keelpb.CreatePartitionsRequest) (*keelpb.CreatePartitionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("CreatePartitions", req); err != nil {
		return nil, err
	}
	return &keelpb.CreatePartitionsResponse{Topic: f.answerTopic()}, nil
}

func (f *fakeAdmin) DeleteTopic(_ context.Context, req *keelpb.DeleteTopicRequest) (*keelpb.DeleteTopicResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("DeleteTopic", req); err != nil {
		return nil, err
	}
	return &keelpb.DeleteTopicResponse{}, nil
}

func (f *fakeAdmin) ListTopics(_ context.Context, req *keelpb.ListTopicsRequest) (*keelpb.ListTopicsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("ListTopics", req); err != nil {
		return nil, err
	}
	return &keelpb.ListTopicsResponse{Topics: f.topics}, nil
}

func (f *fakeAdmin) DescribeTopic(_ context.Context, req *keelpb.DescribeTopicRequest) (*keelpb.DescribeTopicResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("DescribeTopic", req); err != nil {
		return nil, err
	}
	if d, ok := f.described[req.Name]; ok {
		return &keelpb.DescribeTopicResponse{Topic: d}, nil
	}
	if f.topic == nil || f.topic.Name != req.Name {
		return nil, status.Errorf(codes.NotFound, "topic %q not found", req.Name)
	}
	return &keelpb.DescribeTopicResponse{Topic: f.topic}, nil
}

func (f *fakeAdmin) ElectLeaders(_ context.Context, req *keelpb.ElectLeadersRequest) (*keelpb.ElectLeadersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("ElectLeaders", req); err != nil {
		return nil, err
	}
	return &keelpb.ElectLeadersResponse{Results: f.results}, nil
}

func (f *fakeAdmin) AlterPartitionReassignments(_ context.Context, req *keelpb.AlterPartitionReassignmentsRequest) (*keelpb.AlterPartitionReassignmentsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("AlterPartitionReassignments", req); err != nil {
		return nil, err
	}
	return &keelpb.AlterPartitionReassignmentsResponse{Partition: &keelpb.PartitionDescription{
		Partition: req.Partition, Leader: 1, LeaderEpoch: 2, PartitionEpoch: 5,
		Replicas: []int32{1, 2, 3, 4}, Isr: []int32{1, 2, 3}, AddingReplicas: req.Replicas}}, nil
}

func (f *fakeAdmin) ListPartitionReassignments(_ context.Context, req *keelpb.ListPartitionReassignmentsRequest) (*keelpb.ListPartitionReassignmentsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("ListPartitionReassignments", req); err != nil {
		return nil, err
	}
	return &keelpb.ListPartitionReassignmentsResponse{Reassignments: f.reassignments}, nil
}

func serveAdmin(t *testing.T, f *fakeAdmin) string {
	t.Helper()
	return serveGRPC(t, func(g *grpc.Server) { keelpb.RegisterControllerServiceServer(g, f) })
}

// sampleTopic has a led partition, a leaderless one and one being moved,
// listed out of order and with nil lists where the JSON must show [].
func sampleTopic() *keelpb.TopicDescription {
	return &keelpb.TopicDescription{
		Name: "orders", Id: "tid", Configs: map[string]string{"unclean.leader.election.enable": "true", "a": "b"},
		Partitions: []*keelpb.PartitionDescription{
			{Partition: 1, Leader: -1, LeaderEpoch: 4, PartitionEpoch: 9, Replicas: []int32{2, 3, 5}, Isr: []int32{2},
				EligibleLeaderReplicas: []int32{3}, LastKnownElr: []int32{5},
				LeaderRecoveryState: keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERING, NoLeaderReason: "no leader: the reason"},
			{Partition: 0, Leader: 1, LeaderEpoch: 1, PartitionEpoch: 3, Replicas: []int32{1, 2, 4}, Isr: []int32{1, 2},
				AddingReplicas: []int32{4}, RemovingReplicas: []int32{}},
		},
		EffectiveConfigs: []*keelpb.ConfigEntry{
			{Name: "unclean.leader.election.enable", Value: "true", Source: keelpb.ConfigSource_CONFIG_SOURCE_TOPIC},
			{Name: "min.insync.replicas", Value: "2", Source: keelpb.ConfigSource_CONFIG_SOURCE_CLUSTER_DEFAULT},
			{Name: "retention.ms", Value: "604800000", Source: keelpb.ConfigSource_CONFIG_SOURCE_DEFAULT},
		},
	}
}

const sampleTopicJSON = `map[configs:map[a:b unclean.leader.election.enable:true] ` +
	`effective_configs:[map[name:min.insync.replicas source:cluster_default value:2] map[name:retention.ms source:default value:604800000] ` +
	`map[name:unclean.leader.election.enable source:topic value:true]] id:tid name:orders partitions:[` +
	`map[adding_replicas:[4] eligible_leader_replicas:[] isr:[1 2] last_known_elr:[] leader:1 leader_epoch:1 leader_recovery_state:recovered ` +
	`partition:0 partition_epoch:3 removing_replicas:[] replicas:[1 2 4]] ` +
	`map[adding_replicas:[] eligible_leader_replicas:[3] isr:[2] last_known_elr:[5] leader:-1 leader_epoch:4 leader_recovery_state:recovering ` +
	`no_leader_reason:no leader: the reason partition:1 partition_epoch:9 removing_replicas:[] replicas:[2 3 5]]]]`

// decodeJSON decodes printed JSON to generic values, printed with fmt.
func decodeJSON(t *testing.T, out string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	return fmt.Sprint(v)
}

func TestTopicDescribe(t *testing.T) {
	fake := &fakeAdmin{topic: sampleTopic()}
	addr := serveAdmin(t, fake)

	out, err := runKeel(t, "topic", "describe", "orders", "--controllers", addr, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	if got := decodeJSON(t, out); got != sampleTopicJSON {
		t.Fatalf("topic describe -o json = %s\nwant %s", got, sampleTopicJSON)
	}

	out, err = runKeel(t, "topic", "describe", "orders", "--controllers", addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Topic:   orders\n", "ID:      tid\n", "Configs: a=b, unclean.leader.election.enable=true\n"} {
		if !strings.Contains(out, want) {
			t.Fatalf("topic describe lacks %q:\n%s", want, out)
		}
	}
	// Every config in effect, with its source, between the header and the partitions.
	if !regexp.MustCompile(`CONFIG +VALUE +SOURCE\nmin\.insync\.replicas +2 +cluster_default\nretention\.ms +604800000 +default\n` +
		`unclean\.leader\.election\.enable +true +topic\n`).MatchString(out) {
		t.Fatalf("topic describe configs table:\n%s", out)
	}
	// The partitions, then why each leaderless one has no leader.
	lines := strings.Split(strings.TrimSpace(out), "\n")
	rows := lines[len(lines)-4:]
	if !strings.HasPrefix(rows[0], "PARTITION") || strings.Fields(rows[1])[0] != "0" ||
		fmt.Sprint(strings.Fields(rows[2])) != "[1 none 4 9 2,3,5 2 3 5 recovering - -]" || rows[3] != "partition 1: no leader: the reason" {
		t.Fatalf("topic describe table:\n%s", out)
	}

	// A topic without configs or partitions still prints {} and [].
	fake.set(func(f *fakeAdmin) { f.topic = &keelpb.TopicDescription{Name: "empty", Id: "e"} })
	if out, err = runKeel(t, "topic", "describe", "empty", "--controllers", addr, "-o", "json"); err != nil ||
		decodeJSON(t, out) != "map[configs:map[] effective_configs:[] id:e name:empty partitions:[]]" {
		t.Fatalf("empty topic: %s, %v", out, err)
	}

	_, err = runKeel(t, "topic", "describe", "missing", "--controllers", addr)
	if status.Code(err) != codes.NotFound || !strings.Contains(errorLine(err), `NotFound: topic "missing" not found`) {
		t.Fatalf("missing topic: %v", err)
	}
}

func TestTopicList(t *testing.T) {
	fake := &fakeAdmin{topics: []*keelpb.TopicSummary{
		{Name: "b", Id: "id-b", Partitions: 3, ReplicationFactor: 2},
		{Name: "a", Id: "id-a", Partitions: 1, ReplicationFactor: 3},
	}}
	addr := serveAdmin(t, fake)
	out, err := runKeel(t, "topic", "list", "--controllers", addr, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	want := "[map[id:id-a name:a partitions:1 replication_factor:3] map[id:id-b name:b partitions:3 replication_factor:2]]"
	if got := decodeJSON(t, out); got != want {
		t.Fatalf("topic list -o json = %s\nwant %s", got, want)
	}
	out, err = runKeel(t, "topic", "list", "--controllers", addr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || fmt.Sprint(strings.Fields(lines[1])) != "[a id-a 1 3]" {
		t.Fatalf("topic list =\n%s (%v)", out, err)
	}
	fake.set(func(f *fakeAdmin) { f.topics = nil })
	if out, err = runKeel(t, "topic", "list", "--controllers", addr, "-o", "json"); err != nil || strings.TrimSpace(out) != "[]" {
		t.Fatalf("no topics: %q, %v", out, err)
	}
}

func TestTopicDelete(t *testing.T) {
	fake := &fakeAdmin{}
	addr := serveAdmin(t, fake)
	out, err := runKeel(t, "topic", "delete", "orders", "--controllers", addr, "-o", "json")
	if err != nil || decodeJSON(t, out) != "map[deleted:true name:orders]" {
		t.Fatalf("topic delete: %s, %v", out, err)
	}
	if _, req := fake.got(); !proto.Equal(req, &keelpb.DeleteTopicRequest{Name: "orders"}) {
		t.Fatalf("request %v", req)
	}
	if out, err = runKeel(t, "topic", "delete", "orders", "--controllers", addr); err != nil || out != "deleted topic orders\n" {
		t.Fatalf("topic delete: %q, %v", out, err)
	}
}

func TestTopicCreate(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want *keelpb.CreateTopicRequest
	}{
		{"placed", []string{"--partitions", "3", "--replication-factor", "2"},
			&keelpb.CreateTopicRequest{Name: "orders", Partitions: 3, ReplicationFactor: 2}},
		{"assigned", []string{"--assignment", "0:1,2,3;1:2,3,1"},
			&keelpb.CreateTopicRequest{Name: "orders", Partitions: 2, ReplicationFactor: 3, Assignments: []*keelpb.PartitionAssignment{
				{Replicas: []int32{1, 2, 3}}, {Replicas: []int32{2, 3, 1}}}}},
		{"assigned, with counts that agree", []string{"--assignment", "0:4", "--partitions", "1", "--replication-factor", "1"},
			&keelpb.CreateTopicRequest{Name: "orders", Partitions: 1, ReplicationFactor: 1, Assignments: []*keelpb.PartitionAssignment{{Replicas: []int32{4}}}}},
		{"with configs, validate only", []string{"--partitions", "1", "--replication-factor", "1", "--validate-only",
			"--config", "unclean.leader.election.enable=true", "--config", "cleanup.policy=compact,delete"},
			&keelpb.CreateTopicRequest{Name: "orders", Partitions: 1, ReplicationFactor: 1, ValidateOnly: true,
				Configs: map[string]string{"unclean.leader.election.enable": "true", "cleanup.policy": "compact,delete"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeAdmin{topic: sampleTopic()}
			args := append([]string{"topic", "create", "orders", "--controllers", serveAdmin(t, fake), "-o", "json"}, tt.args...)
			out, err := runKeel(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			if calls, req := fake.got(); len(calls) != 1 || !proto.Equal(req, tt.want) {
				t.Fatalf("calls %v, request %v\nwant %v", calls, req, tt.want)
			}
			// The created topic is printed as describe prints it.
			if got := decodeJSON(t, out); got != sampleTopicJSON {
				t.Fatalf("topic create -o json = %s\nwant %s", got, sampleTopicJSON)
			}
		})
	}
}

func TestTopicCreate_Table(t *testing.T) {
	fake := &fakeAdmin{topic: sampleTopic()}
	addr := serveAdmin(t, fake)
	out, err := runKeel(t, "topic", "create", "orders", "--controllers", addr, "--partitions", "2", "--replication-factor", "3", "--validate-only")
	if err != nil || !strings.HasPrefix(out, "validated, nothing written\nTopic:   orders\n") || !strings.Contains(out, "PARTITION") {
		t.Fatalf("validate-only create: %v\n%s", err, out)
	}
	out, err = runKeel(t, "topic", "create", "orders", "--controllers", addr, "--partitions", "2", "--replication-factor", "3")
	if err != nil || !strings.HasPrefix(out, "Topic:   orders\n") {
		t.Fatalf("create: %v\n%s", err, out)
	}

	// A controller that answers without the topic: it is read back.
	fake.set(func(f *fakeAdmin) { f.noTopicInAnswer = true })
	out, err = runKeel(t, "topic", "create", "orders", "--controllers", addr, "--partitions", "2", "--replication-factor", "3", "-o", "json")
	if calls, _ := fake.got(); err != nil || decodeJSON(t, out) != sampleTopicJSON || calls[len(calls)-1] != "DescribeTopic" {
		t.Fatalf("create answered without the topic: %v, calls %v\n%s", err, calls, out)
	}

	fake.set(func(f *fakeAdmin) { f.err = status.Error(codes.AlreadyExists, `topic "orders" already exists`) })
	_, err = runKeel(t, "topic", "create", "orders", "--controllers", addr, "--partitions", "2", "--replication-factor", "3")
	if got := errorLine(err); got != `AlreadyExists: topic "orders" already exists` {
		t.Fatalf("create of a taken name: %q", got)
	}
}

// Until the controller implements the admin calls, they fail with one
// clear line.
func TestTopicList_Unimplemented(t *testing.T) {
	addr := serveGRPC(t, func(g *grpc.Server) {
		keelpb.RegisterControllerServiceServer(g, &keelpb.UnimplementedControllerServiceServer{})
	})
	_, err := runKeel(t, "topic", "list", "--controllers", addr)
	if got := errorLine(err); !strings.HasPrefix(got, "Unimplemented: method ListTopics not implemented") {
		t.Fatalf("err = %q", got)
	}
}

func TestParseConfigs(t *testing.T) {
	tests := []struct {
		name    string
		in      []string
		want    map[string]string
		wantErr string
	}{
		{"none", nil, nil, ""},
		{"one", []string{"unclean.leader.election.enable=true"}, map[string]string{"unclean.leader.election.enable": "true"}, ""},
		{"value with = and ,", []string{"a=b=c,d"}, map[string]string{"a": "b=c,d"}, ""},
		{"empty value", []string{"a="}, map[string]string{"a": ""}, ""},
		{"spaces around", []string{" a = b "}, map[string]string{"a": "b"}, ""},
		{"several", []string{"a=1", "b=2"}, map[string]string{"a": "1", "b": "2"}, ""},
		{"no =", []string{"a"}, nil, `"a": want key=value`},
		{"empty key", []string{"=b"}, nil, `"=b": empty key`},
		{"empty item", []string{""}, nil, `"": want key=value`},
		{"space in key", []string{"a b=c"}, nil, "space or control character"},
		{"twice", []string{"a=1", "a=2"}, nil, "a given twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseConfigs(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("parseConfigs(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

// healthTopics are three topics of three replicas each: "ok" is fully in
// sync; "sick" has a partition under-replicated (ISR 2), one at its min ISR
// of 2 and without a leader, and a healthy one; "min1" has an ISR of 1, at
// the default min ISR.
func healthTopics() map[string]*keelpb.TopicDescription {
	p := func(n, leader int32, isr ...int32) *keelpb.PartitionDescription {
		return &keelpb.PartitionDescription{Partition: n, Leader: leader, Replicas: []int32{1, 2, 3}, Isr: isr}
	}
	return map[string]*keelpb.TopicDescription{
		"ok":   {Name: "ok", Id: "id-ok", Partitions: []*keelpb.PartitionDescription{p(0, 1, 1, 2, 3)}},
		"sick": {Name: "sick", Id: "id-sick", Configs: map[string]string{"min.insync.replicas": "2"}, Partitions: []*keelpb.PartitionDescription{p(0, 1, 1, 2), p(1, -1, 2, 3), p(2, 3, 1, 2, 3)}},
		"min1": {Name: "min1", Id: "id-min1", Partitions: []*keelpb.PartitionDescription{p(0, 2, 2)}},
	}
}

func TestTopicDescribe_AllAndFilters(t *testing.T) {
	topics := healthTopics()
	fake := &fakeAdmin{described: topics}
	for _, name := range []string{"sick", "ok", "min1"} {
		fake.topics = append(fake.topics, &keelpb.TopicSummary{Name: name})
	}
	addr := serveAdmin(t, fake)

	// partitions runs describe -o json with args and returns topic -> partitions.
	partitions := func(args ...string) map[string][]int32 {
		t.Helper()
		out, err := runKeel(t, append(append([]string{"topic", "describe"}, args...), "--controllers", addr, "-o", "json")...)
		if err != nil {
			t.Fatalf("keel topic describe %s: %v", strings.Join(args, " "), err)
		}
		var views []topicView
		if err := json.Unmarshal([]byte(out), &views); err != nil {
			t.Fatalf("keel topic describe %s: want a JSON array: %v\n%s", strings.Join(args, " "), err, out)
		}
		got := map[string][]int32{}
		for _, v := range views {
			got[v.Name] = []int32{}
			for _, p := range v.Partitions {
				got[v.Name] = append(got[v.Name], p.Partition)
			}
		}
		return got
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "map[min1:[0] ok:[0] sick:[0 1 2]]"},
		{[]string{"--under-replicated-partitions"}, "map[min1:[0] sick:[0 1]]"},
		{[]string{"--under-min-isr-partitions"}, "map[]"},
		{[]string{"--at-min-isr-partitions"}, "map[min1:[0] sick:[0 1]]"},
		{[]string{"--unavailable-partitions"}, "map[sick:[1]]"},
		{[]string{"--unavailable-partitions", "--at-min-isr-partitions"}, "map[min1:[0] sick:[0 1]]"},
	} {
		if got := fmt.Sprint(partitions(tt.args...)); got != tt.want {
			t.Errorf("keel topic describe %s: partitions %s, want %s", strings.Join(tt.args, " "), got, tt.want)
		}
	}

	// Below the min ISR: sick's partitions of ISR 2 are under a min ISR of 3.
	fake.set(func(*fakeAdmin) { topics["sick"].Configs["min.insync.replicas"] = "3" })
	if got := fmt.Sprint(partitions("--under-min-isr-partitions")); got != "map[sick:[0 1]]" {
		t.Errorf("with min.insync.replicas=3: under-min-isr partitions %s, want map[sick:[0 1]]", got)
	}

	// The value in effect wins: a cluster default of 3 with no topic value.
	fake.set(func(*fakeAdmin) {
		delete(topics["sick"].Configs, "min.insync.replicas")
		topics["sick"].EffectiveConfigs = []*keelpb.ConfigEntry{{Name: "min.insync.replicas", Value: "3", Source: keelpb.ConfigSource_CONFIG_SOURCE_CLUSTER_DEFAULT}}
	})
	if got := fmt.Sprint(partitions("--under-min-isr-partitions")); got != "map[sick:[0 1]]" {
		t.Errorf("with a cluster default of min.insync.replicas=3: under-min-isr partitions %s, want map[sick:[0 1]]", got)
	}
	fake.set(func(*fakeAdmin) { topics["sick"].EffectiveConfigs = nil })

	// Tables: every topic in name order, blank-line separated.
	out, err := runKeel(t, "topic", "describe", "--controllers", addr)
	if err != nil {
		t.Fatal(err)
	}
	if i, j, k := strings.Index(out, "Topic:   min1"), strings.Index(out, "Topic:   ok"), strings.Index(out, "Topic:   sick"); i < 0 || !(i < j && j < k) {
		t.Errorf("keel topic describe: want min1, ok, sick in order:\n%s", out)
	}
	// One topic with a filter that matches nothing says so in one line.
	out, err = runKeel(t, "topic", "describe", "ok", "--unavailable-partitions", "--controllers", addr)
	if err != nil || out != "No partitions of ok are unavailable.\n" {
		t.Errorf("keel topic describe ok --unavailable-partitions: %q, %v", out, err)
	}
	// ... and so does every topic.
	fake.set(func(*fakeAdmin) { topics["sick"].Configs["min.insync.replicas"] = "2" })
	out, err = runKeel(t, "topic", "describe", "--under-min-isr-partitions", "--controllers", addr)
	if err != nil || out != "No partitions are under min ISR.\n" {
		t.Errorf("keel topic describe --under-min-isr-partitions with none under: %q, %v", out, err)
	}
	// A filter that matches prints those partitions only: no configs.
	out, err = runKeel(t, "topic", "describe", "--under-replicated-partitions", "--controllers", addr)
	if err != nil || strings.Contains(out, "Configs") || strings.Contains(out, "min.insync.replicas") {
		t.Errorf("keel topic describe --under-replicated-partitions: want only partitions: %v\n%s", err, out)
	}
}

// TestPartitionFilters_Table: with a filter, describe prints one table of
// the matching partitions, each with its topic, or one line naming what
// none is, as kafka-topics --describe --under-replicated-partitions does.
func TestPartitionFilters_Table(t *testing.T) {
	p := func(n, leader int32, isr ...int32) partitionRow {
		return partitionRow{Partition: n, Leader: leader, Replicas: []int32{1, 2, 3}, ISR: isr, ELR: []int32{}, LastKnownELR: []int32{}}
	}
	sick := topicView{Name: "sick", Configs: map[string]string{"min.insync.replicas": "2"}, Partitions: []partitionRow{p(0, 1, 1, 2), p(1, -1, 2, 3), p(2, 3, 1, 2, 3)}}
	sick.Partitions[1].NoLeaderReason = "waiting for an ELR member"
	ok := topicView{Name: "ok", Partitions: []partitionRow{p(0, 1, 1, 2, 3)}}
	for _, tt := range []struct {
		name    string
		f       partitionFilters
		topic   string // the name given, or "" for every topic
		views   []topicView
		want    []string // lines, trimmed of the table's padding
		notWant string
	}{
		{"UnderReplicatedAcrossTopics", partitionFilters{underReplicated: true}, "", []topicView{ok, sick}, []string{
			"TOPIC PARTITION LEADER",
			"sick 0 1",
			"sick 1 none",
			"sick partition 1: waiting for an ELR member",
		}, "ok"},
		{"UnavailableOneTopic", partitionFilters{unavailable: true}, "sick", []topicView{sick}, []string{"sick 1 none"}, "sick 0"},
		{"NoneOfATopic", partitionFilters{unavailable: true}, "ok", []topicView{ok}, []string{"No partitions of ok are unavailable."}, "TOPIC"},
		{"NoneAtAll", partitionFilters{underMinISR: true, unavailable: true}, "", nil, []string{"No partitions are under min ISR or unavailable."}, "TOPIC"},
		{"AtMinISR", partitionFilters{atMinISR: true}, "", []topicView{ok, sick}, []string{"sick 0 1", "sick 1 none"}, "sick 2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			views := make([]topicView, 0, len(tt.views))
			for _, v := range tt.views {
				if v = tt.f.filter(v); tt.topic != "" || len(v.Partitions) > 0 {
					views = append(views, v)
				}
			}
			var b strings.Builder
			if err := tt.f.table(&b, tt.topic, views); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			squeezed := regexp.MustCompile(` +`).ReplaceAllString(out, " ")
			for _, w := range tt.want {
				if !strings.Contains(squeezed, w) {
					t.Errorf("want a line starting %q in:\n%s", w, out)
				}
			}
			if strings.Contains(out, "Configs") || strings.Contains(squeezed, tt.notWant) {
				t.Errorf("want no configs and no %q in:\n%s", tt.notWant, out)
			}
		})
	}
}

func TestTopicList_Pattern(t *testing.T) {
	fake := &fakeAdmin{}
	for _, name := range []string{"orders", "orders.eu", "orders.us", "audit"} {
		fake.topics = append(fake.topics, &keelpb.TopicSummary{Name: name, Id: "id-" + name, Partitions: 1, ReplicationFactor: 1})
	}
	addr := serveAdmin(t, fake)
	for _, tt := range []struct{ pattern, want string }{
		{`orders\..*`, "orders.eu orders.us"},
		{"orders", "orders"}, // the whole name, not a part of it
		{"audit|orders", "audit orders"},
		{"nothing", ""},
	} {
		out, err := runKeel(t, "topic", "list", "--pattern", tt.pattern, "--controllers", addr, "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var rows []topicSummary
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var names []string
		for _, r := range rows {
			names = append(names, r.Name)
		}
		if got := strings.Join(names, " "); got != tt.want {
			t.Errorf("topic list --pattern %q = %q, want %q", tt.pattern, got, tt.want)
		}
	}
	_, err := runKeel(t, "topic", "list", "--pattern", "a(", "--controllers", addr)
	if err == nil || errorLine(err) != `--pattern "a(": missing closing ): `+"`a(`" {
		t.Errorf("topic list --pattern a(: err = %v", err)
	}
}

func TestTopic_IfNotExistsAndIfExists(t *testing.T) {
	fake := &fakeAdmin{topic: sampleTopic(), errFor: map[string]error{
		"CreateTopic": status.Error(codes.AlreadyExists, `topic "orders" already exists`),
		"DeleteTopic": rpc.WithReason(codes.NotFound, rpc.ReasonUnknownTopicOrPartition, `unknown topic or partition: topic "gone"`),
	}}
	addr := serveAdmin(t, fake)
	create := []string{"topic", "create", "orders", "--partitions", "1", "--replication-factor", "1", "--controllers", addr}

	if _, err := runKeel(t, create...); status.Code(err) != codes.AlreadyExists {
		t.Errorf("create of an existing topic: err = %v, want AlreadyExists", err)
	}
	out, err := runKeel(t, append(create, "--if-not-exists")...)
	if err != nil || !strings.Contains(out, "topic orders already exists; nothing created\n") || !strings.Contains(out, "Topic:   orders\n") {
		t.Errorf("create --if-not-exists of an existing topic: %v\n%s", err, out)
	}

	del := []string{"topic", "delete", "gone", "--controllers", addr}
	if _, err := runKeel(t, del...); status.Code(err) != codes.NotFound {
		t.Errorf("delete of an unknown topic: err = %v, want NotFound", err)
	}
	out, err = runKeel(t, append(del, "--if-exists")...)
	if err != nil || out != "topic gone does not exist; nothing deleted\n" {
		t.Errorf("delete --if-exists of an unknown topic: %q, %v", out, err)
	}
	out, err = runKeel(t, append(del, "--if-exists", "-o", "json")...)
	if err != nil || decodeJSON(t, out) != "map[deleted:false name:gone]" {
		t.Errorf("delete --if-exists -o json of an unknown topic: %q, %v", out, err)
	}
	// Any other refusal is still one.
	fake.set(func(f *fakeAdmin) { f.errFor["DeleteTopic"] = status.Error(codes.PermissionDenied, "no") })
	if _, err := runKeel(t, append(del, "--if-exists")...); status.Code(err) != codes.PermissionDenied {
		t.Errorf("delete --if-exists refused otherwise: err = %v, want PermissionDenied", err)
	}
}
