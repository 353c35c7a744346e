package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/proto/keelpb"
)

func TestParseReplicas(t *testing.T) {
	tests := []struct {
		in      string
		want    []int32
		wantErr string
	}{
		{"4,5,6", []int32{4, 5, 6}, ""},
		{"0", []int32{0}, ""},
		{" 4 , 5,6 ", []int32{4, 5, 6}, ""},
		{"\t1,\n2", []int32{1, 2}, ""},
		{"3,1,2", []int32{3, 1, 2}, ""}, // order is preference: kept
		{"007", []int32{7}, ""},
		{"2147483647", []int32{2147483647}, ""},
		{"", nil, "no replicas"},
		{"   ", nil, "no replicas"},
		{",", nil, "replica 1 is empty"},
		{"1,,2", nil, "replica 2 is empty"},
		{"1,2,", nil, "replica 3 is empty"},
		{",1", nil, "replica 1 is empty"},
		{"1,-2", nil, "replica 2: broker id -2: want 0 or more"},
		{"-0", nil, "broker id -0: want 0 or more"},
		{"-", nil, `broker id "-" is not a number`},
		{"+1", nil, `broker id "+1" is not a number`},
		{"1,x", nil, `replica 2: broker id "x" is not a number`},
		{"1 2", nil, `broker id "1 2" is not a number`},
		{"1.5", nil, `"1.5" is not a number`},
		{"0x10", nil, `"0x10" is not a number`},
		{"2147483648", nil, "2147483648 is too large"},
		{"99999999999999999999", nil, "is too large"},
		{"1,2,1", nil, "broker 1 is listed twice"},
		{"1,01", nil, "broker 1 is listed twice"},
		{"1;2", nil, `"1;2" is not a number`},
		{"1:2", nil, `"1:2" is not a number`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseReplicas(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseReplicas(%q) = %v, %v; want error %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("parseReplicas(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParseAssignment(t *testing.T) {
	tests := []struct {
		in        string
		wantFirst int32
		want      [][]int32
		wantErr   string
	}{
		{"0:1,2,3;1:2,3,1", 0, [][]int32{{1, 2, 3}, {2, 3, 1}}, ""},
		{"0:1", 0, [][]int32{{1}}, ""},
		{" 0 : 1 , 2 ; 1:2,1 ", 0, [][]int32{{1, 2}, {2, 1}}, ""},
		{"0:1,2;\n1:2,1", 0, [][]int32{{1, 2}, {2, 1}}, ""},
		{"3:1,2;4:2,3", 3, [][]int32{{1, 2}, {2, 3}}, ""}, // add-partitions: the new ones only
		{"2147483647:1", 2147483647, [][]int32{{1}}, ""},
		{"", 0, nil, "empty"},
		{" ", 0, nil, "empty"},
		{";", 0, nil, "entry 1 is empty"},
		{"0:1;", 0, nil, "entry 2 is empty"},
		{"0:1;;1:2", 0, nil, "entry 2 is empty"},
		{";0:1", 0, nil, "entry 1 is empty"},
		{"1,2,3", 0, nil, `entry 1, "1,2,3": want partition:broker,broker (e.g. 0:1,2,3)`},
		{"0:1;2,3", 0, nil, `entry 2, "2,3": want partition:broker`},
		{":1,2", 0, nil, "entry 1: partition empty"},
		{"x:1", 0, nil, `entry 1: partition "x" is not a number`},
		{"-1:1", 0, nil, "entry 1: partition -1: want 0 or more"},
		{"0:1;-1:2", 0, nil, "entry 2: partition -1: want 0 or more"},
		{"2147483648:1", 0, nil, "2147483648 is too large"},
		{"2147483647:1;2147483648:1", 0, nil, "2147483648 is too large"},
		{"0:", 0, nil, "partition 0: no replicas"},
		{"0: ", 0, nil, "partition 0: no replicas"},
		{"0:1,,2", 0, nil, "partition 0: replica 2 is empty"},
		{"0:1,-2", 0, nil, "partition 0: replica 2: broker id -2: want 0 or more"},
		{"0:1,a", 0, nil, `partition 0: replica 2: broker id "a" is not a number`},
		{"0:1,1", 0, nil, "partition 0: broker 1 is listed twice"},
		{"0:1:2", 0, nil, `partition 0: replica 1: broker id "1:2" is not a number`},
		{"0:1;0:2", 0, nil, "partition 0 is given twice"},
		{"0:1;1:2;1:3", 0, nil, "partition 1 is given twice"},
		{"0:1;2:2", 0, nil, "partition 2 follows partition 0: partition 1 is missing"},
		{"1:1;0:2", 0, nil, "partition 0 follows partition 1: partitions must be in order"},
		{"0:1,2;1:2", 0, nil, "partition 1 has 1 replicas, partition 0 has 2"},
		{"0:1;1:2,3", 0, nil, "partition 1 has 2 replicas, partition 0 has 1"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			first, got, err := parseAssignment(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseAssignment(%q) = %d, %v, %v; want error %q", tt.in, first, got, err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Fatalf("error is not one line: %q", err)
				}
				return
			}
			if err != nil || first != tt.wantFirst || fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("parseAssignment(%q) = %d, %v, %v; want %d, %v", tt.in, first, got, err, tt.wantFirst, tt.want)
			}
		})
	}
}

// FuzzParseAssignment checks what a parsed assignment promises, on any
// input: no panic, and on success non-empty, equally long replica lists of
// distinct non-negative ids, numbered from first without overflow, that
// print back to the same assignment.
func FuzzParseAssignment(f *testing.F) {
	for _, s := range []string{"0:1,2,3;1:2,3,1", " 0 : 1 ; 1 : 2 ", "0:1;;1:2", "0:1;2:2", "1:1;0:2", "-1:1", "0:1,1",
		"2147483647:1;2147483648:1", "0:", ":", ";", "0:1;0:1", "0:00,01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		first, got, err := parseAssignment(s)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
			return
		}
		if first < 0 || len(got) == 0 || int64(first)+int64(len(got))-1 > 1<<31-1 {
			t.Fatalf("parseAssignment(%q): first %d, %d partitions", s, first, len(got))
		}
		for _, r := range got {
			if len(r) == 0 || len(r) != len(got[0]) {
				t.Fatalf("parseAssignment(%q): replica lists %v", s, got)
			}
			for i, id := range r {
				if id < 0 || slices.Contains(r[:i], id) {
					t.Fatalf("parseAssignment(%q): replicas %v", s, r)
				}
			}
		}
		first2, got2, err := parseAssignment(formatAssignment(first, got))
		if err != nil || first2 != first || fmt.Sprint(got2) != fmt.Sprint(got) {
			t.Fatalf("parseAssignment(%q) = %d %v, but its format %q parses to %d %v, %v", s, first, got, formatAssignment(first, got), first2, got2, err)
		}
	})
}

func FuzzParseReplicas(f *testing.F) {
	for _, s := range []string{"4,5,6", " 1 , 2", "1,,2", "-1", "1,1", "2147483648", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseReplicas(s)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
			return
		}
		for i, id := range got {
			if id < 0 || slices.Contains(got[:i], id) {
				t.Fatalf("parseReplicas(%q) = %v", s, got)
			}
		}
		if len(got) == 0 {
			t.Fatalf("parseReplicas(%q) = no replicas, no error", s)
		}
	})
}

func TestPartitionAddPartitions(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want *keelpb.CreatePartitionsRequest
	}{
		{"placed", []string{"--count", "6"}, &keelpb.CreatePartitionsRequest{Topic: "orders", Count: 6}},
		{"assigned", []string{"--assignment", "2:1,2;3:2,3"}, &keelpb.CreatePartitionsRequest{Topic: "orders", Count: 4,
			Assignments: []*keelpb.PartitionAssignment{{Replicas: []int32{1, 2}}, {Replicas: []int32{2, 3}}}}},
		{"assigned, with a count that agrees", []string{"--assignment", "2:1,2", "--count", "3", "--validate-only"},
			&keelpb.CreatePartitionsRequest{Topic: "orders", Count: 3, ValidateOnly: true,
				Assignments: []*keelpb.PartitionAssignment{{Replicas: []int32{1, 2}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeAdmin{topic: sampleTopic()}
			args := append([]string{"partition", "add-partitions", "--topic", "orders", "--controllers", serveAdmin(t, fake), "-o", "json"}, tt.args...)
			out, err := runKeel(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			if calls, req := fake.got(); len(calls) != 1 || !proto.Equal(req, tt.want) {
				t.Fatalf("calls %v, request %v\nwant %v", calls, req, tt.want)
			}
			if got := decodeJSON(t, out); got != sampleTopicJSON {
				t.Fatalf("add-partitions -o json = %s\nwant %s", got, sampleTopicJSON)
			}
		})
	}
}

func TestPartitionElect(t *testing.T) {
	preferred := keelpb.ElectionType_ELECTION_TYPE_PREFERRED
	tests := []struct {
		name      string
		args      []string
		wantCalls []string
		want      *keelpb.ElectLeadersRequest
	}{
		{"all", []string{"--type", "preferred", "--all"}, []string{"ElectLeaders"},
			&keelpb.ElectLeadersRequest{Type: preferred, All: true}},
		{"one partition", []string{"--type", "unclean", "--topic", "orders", "--partition", "1"}, []string{"ElectLeaders"},
			&keelpb.ElectLeadersRequest{Type: keelpb.ElectionType_ELECTION_TYPE_UNCLEAN, Partitions: []*keelpb.TopicPartition{{Topic: "orders", Partition: 1}}}},
		{"partition 0", []string{"--type", "preferred", "--topic", "orders", "--partition", "0"}, []string{"ElectLeaders"},
			&keelpb.ElectLeadersRequest{Type: preferred, Partitions: []*keelpb.TopicPartition{{Topic: "orders", Partition: 0}}}},
		{"a whole topic", []string{"--type", "preferred", "--topic", "orders"}, []string{"DescribeTopic", "ElectLeaders"},
			&keelpb.ElectLeadersRequest{Type: preferred, Partitions: []*keelpb.TopicPartition{{Topic: "orders", Partition: 0}, {Topic: "orders", Partition: 1}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeAdmin{topic: sampleTopic(), results: []*keelpb.ElectionResult{
				{Topic: "orders", Partition: 1, Leader: -1, Error: "no live replica in the ISR"},
				{Topic: "orders", Partition: 0, Leader: 2},
			}}
			addr := serveAdmin(t, fake)
			out, err := runKeel(t, append([]string{"partition", "elect", "--controllers", addr, "-o", "json"}, tt.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if calls, req := fake.got(); !slices.Equal(calls, tt.wantCalls) || !proto.Equal(req, tt.want) {
				t.Fatalf("calls %v, request %v\nwant %v, %v", calls, req, tt.wantCalls, tt.want)
			}
			// Results in order; a failed election is reported, not fatal.
			want := "[map[error: leader:2 partition:0 topic:orders] map[error:no live replica in the ISR leader:-1 partition:1 topic:orders]]"
			if got := decodeJSON(t, out); got != want {
				t.Fatalf("elect -o json = %s\nwant %s", got, want)
			}
		})
	}

	fake := &fakeAdmin{topic: sampleTopic(), results: []*keelpb.ElectionResult{
		{Topic: "orders", Partition: 1, Leader: -1, Error: "no live replica in the ISR"},
		{Topic: "orders", Partition: 0, Leader: 2},
	}}
	addr := serveAdmin(t, fake)
	out, err := runKeel(t, "partition", "elect", "--controllers", addr, "--type", "preferred", "--all")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 3 || fmt.Sprint(strings.Fields(lines[1])) != "[orders 0 2 ok]" ||
		!strings.HasSuffix(lines[2], "none    no live replica in the ISR") {
		t.Fatalf("elect table: %v\n%s", err, out)
	}
	// A topic that does not exist fails before any election.
	_, err = runKeel(t, "partition", "elect", "--controllers", addr, "--type", "preferred", "--topic", "missing")
	if calls, _ := fake.got(); status.Code(err) != codes.NotFound || calls[len(calls)-1] != "DescribeTopic" {
		t.Fatalf("elect on a missing topic: %v after %v", err, calls)
	}
	// The request itself failing is an error.
	fake.set(func(f *fakeAdmin) { f.err = status.Error(codes.InvalidArgument, "partitions: unknown topic") })
	if _, err = runKeel(t, "partition", "elect", "--controllers", addr, "--type", "preferred", "--all"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("elect with a refused request: %v", err)
	}
}

func TestPartitionReassign(t *testing.T) {
	fake := &fakeAdmin{}
	addr := serveAdmin(t, fake)
	out, err := runKeel(t, "partition", "reassign", "--controllers", addr, "-o", "json", "--topic", "orders", "--partition", "0", "--replicas", "4, 5,6")
	if err != nil {
		t.Fatal(err)
	}
	if _, req := fake.got(); !proto.Equal(req, &keelpb.AlterPartitionReassignmentsRequest{Topic: "orders", Partition: 0, Replicas: []int32{4, 5, 6}}) {
		t.Fatalf("request %v", req)
	}
	want := "map[adding_replicas:[4 5 6] eligible_leader_replicas:[] isr:[1 2 3] last_known_elr:[] leader:1 leader_epoch:2 leader_recovery_state:recovered " +
		"partition:0 partition_epoch:5 removing_replicas:[] replicas:[1 2 3 4] topic:orders]"
	if got := decodeJSON(t, out); got != want {
		t.Fatalf("reassign -o json = %s\nwant %s", got, want)
	}

	out, err = runKeel(t, "partition", "reassign", "--controllers", addr, "--topic", "orders", "--partition", "2", "--cancel")
	if err != nil || !strings.HasPrefix(out, "cancelled the reassignment of topic orders partition 2\n") {
		t.Fatalf("cancel: %v\n%s", err, out)
	}
	// Cancelling is a request with no replicas.
	if _, req := fake.got(); !proto.Equal(req, &keelpb.AlterPartitionReassignmentsRequest{Topic: "orders", Partition: 2}) {
		t.Fatalf("cancel request %v", req)
	}
}

func TestPartitionReassignments(t *testing.T) {
	fake := &fakeAdmin{reassignments: []*keelpb.Reassignment{
		{Topic: "b", Partition: 0, Replicas: []int32{1, 2, 3, 4}, AddingReplicas: []int32{4}, RemovingReplicas: []int32{1}},
		{Topic: "a", Partition: 2, Replicas: []int32{5, 6}, AddingReplicas: []int32{5, 6}},
	}}
	addr := serveAdmin(t, fake)
	out, err := runKeel(t, "partition", "reassignments", "--controllers", addr, "-o", "json")
	want := "[map[adding_replicas:[5 6] partition:2 removing_replicas:[] replicas:[5 6] topic:a] " +
		"map[adding_replicas:[4] partition:0 removing_replicas:[1] replicas:[1 2 3 4] topic:b]]"
	if err != nil || decodeJSON(t, out) != want {
		t.Fatalf("reassignments -o json: %v\n%s\nwant %s", err, out, want)
	}
	out, err = runKeel(t, "partition", "reassignments", "--controllers", addr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 3 || fmt.Sprint(strings.Fields(lines[1])) != "[a 2 5,6 5,6 -]" {
		t.Fatalf("reassignments table: %v\n%s", err, out)
	}
	fake.set(func(f *fakeAdmin) { f.reassignments = nil })
	if out, err = runKeel(t, "partition", "reassignments", "--controllers", addr, "-o", "json"); err != nil || strings.TrimSpace(out) != "[]" {
		t.Fatalf("no reassignments: %q, %v", out, err)
	}
	if out, err = runKeel(t, "partition", "reassignments", "--controllers", addr); err != nil || out != "No reassignments in progress.\n" {
		t.Fatalf("no reassignments: %q, %v", out, err)
	}
}

// Bad flags fail with one line naming the flag, before any RPC.
func TestTopicAndPartitionFlagErrors(t *testing.T) {
	fake := &fakeAdmin{}
	addr := serveAdmin(t, fake)
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"create without a name", []string{"topic", "create", "--partitions", "1", "--replication-factor", "1"}, "topic name required: keel topic create NAME"},
		{"create with two names", []string{"topic", "create", "a", "b"}, `want one topic name, got 2`},
		{"create without partitions", []string{"topic", "create", "t", "--replication-factor", "1"}, "--partitions is required (or give --assignment)"},
		{"create without a replication factor", []string{"topic", "create", "t", "--partitions", "1"}, "--replication-factor is required (or give --assignment)"},
		{"create with no partitions", []string{"topic", "create", "t", "--partitions", "0", "--replication-factor", "1"}, "--partitions 0: want at least 1"},
		{"create with a negative replication factor", []string{"topic", "create", "t", "--partitions", "1", "--replication-factor", "-1"}, "--replication-factor -1: want at least 1"},
		{"create with a non-numeric partition count", []string{"topic", "create", "t", "--partitions", "x"}, `invalid argument "x" for "--partitions"`},
		{"create with a malformed assignment", []string{"topic", "create", "t", "--assignment", "0:1,2;2:2,3"}, "--assignment: partition 2 follows partition 0: partition 1 is missing"},
		{"create with an empty assignment", []string{"topic", "create", "t", "--assignment", ""}, "--assignment: empty"},
		{"create with an assignment not from 0", []string{"topic", "create", "t", "--assignment", "1:1,2"}, "--assignment: partitions must be numbered from 0, not 1"},
		{"create with partitions that disagree", []string{"topic", "create", "t", "--assignment", "0:1,2", "--partitions", "2"}, "--partitions 2 disagrees with --assignment, which has 1 partition"},
		{"create with a replication factor that disagrees", []string{"topic", "create", "t", "--assignment", "0:1,2", "--replication-factor", "3"}, "--replication-factor 3 disagrees with --assignment, which has 2 replicas per partition"},
		{"create with a bad config", []string{"topic", "create", "t", "--partitions", "1", "--replication-factor", "1", "--config", "retention"}, `--config: "retention": want key=value`},
		{"create with a bad output", []string{"topic", "create", "t", "--partitions", "1", "--replication-factor", "1", "-o", "yaml"}, `-o "yaml"`},
		{"delete without a name", []string{"topic", "delete"}, "topic name required: keel topic delete NAME"},
		{"describe with an empty name", []string{"topic", "describe", ""}, "topic name required"},
		{"list with an argument", []string{"topic", "list", "x"}, `unknown command "x"`},
		{"add-partitions without a topic", []string{"partition", "add-partitions", "--count", "3"}, "--topic is required"},
		{"add-partitions without a count", []string{"partition", "add-partitions", "--topic", "t"}, "--count is required"},
		{"add-partitions with a zero count", []string{"partition", "add-partitions", "--topic", "t", "--count", "0"}, "--count 0: want the new total number of partitions"},
		{"add-partitions with a malformed assignment", []string{"partition", "add-partitions", "--topic", "t", "--assignment", "3:1;3:2"}, "--assignment: partition 3 is given twice"},
		{"add-partitions with a count that disagrees", []string{"partition", "add-partitions", "--topic", "t", "--assignment", "3:1;4:2", "--count", "6"}, "--count 6 disagrees with --assignment, whose last partition is 4 (a count of 5)"},
		{"elect without a type", []string{"partition", "elect", "--all"}, "--type is required: preferred or unclean"},
		{"elect with a bad type", []string{"partition", "elect", "--type", "clean", "--all"}, `--type "clean": want preferred or unclean`},
		{"elect without a target", []string{"partition", "elect", "--type", "preferred"}, "give --topic T [--partition P], or --all"},
		{"elect with all and a topic", []string{"partition", "elect", "--type", "preferred", "--all", "--topic", "t"}, "--all elects for every partition: give it without --topic and --partition"},
		{"elect with all and a partition", []string{"partition", "elect", "--type", "preferred", "--all", "--partition", "0"}, "--all elects for every partition"},
		{"elect with a partition but no topic", []string{"partition", "elect", "--type", "preferred", "--partition", "0"}, "--partition needs --topic"},
		{"elect with a negative partition", []string{"partition", "elect", "--type", "preferred", "--topic", "t", "--partition", "-1"}, "--partition -1: want a partition index, 0 or more"},
		{"reassign without a topic", []string{"partition", "reassign", "--partition", "0", "--replicas", "1"}, "--topic is required"},
		{"reassign without a partition", []string{"partition", "reassign", "--topic", "t", "--replicas", "1"}, "--partition is required"},
		{"reassign with a negative partition", []string{"partition", "reassign", "--topic", "t", "--partition", "-2", "--replicas", "1"}, "--partition -2: want a partition index"},
		{"reassign without replicas or cancel", []string{"partition", "reassign", "--topic", "t", "--partition", "0"}, "give --replicas B1,B2,... (the target replicas), or --cancel"},
		{"reassign with replicas and cancel", []string{"partition", "reassign", "--topic", "t", "--partition", "0", "--replicas", "1", "--cancel"}, "--cancel takes no --replicas"},
		{"reassign with empty replicas", []string{"partition", "reassign", "--topic", "t", "--partition", "0", "--replicas", ""}, "--replicas: no replicas"},
		{"reassign with a repeated replica", []string{"partition", "reassign", "--topic", "t", "--partition", "0", "--replicas", "4,5,4"}, "--replicas: broker 4 is listed twice"},
		{"reassign with a negative replica", []string{"partition", "reassign", "--topic", "t", "--partition", "0", "--replicas", "4,-5"}, "--replicas: replica 2: broker id -5: want 0 or more"},
		{"reassignments with a bad output", []string{"partition", "reassignments", "-o", "yaml"}, `-o "yaml"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runKeel(t, append(tt.args, "--controllers", addr)...)
			if err == nil || !strings.Contains(errorLine(err), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			if strings.Contains(errorLine(err), "\n") {
				t.Fatalf("error is not one line: %q", errorLine(err))
			}
			if calls, _ := fake.got(); len(calls) != 0 {
				t.Fatalf("calls %v before the flags were checked", calls)
			}
		})
	}
}
