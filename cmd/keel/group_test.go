package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The cases are named after kafka-consumer-groups.sh's options and the
// tests of its reset (ResetConsumerGroupOffsetTest) where they port one.
func TestParseTopicSpecs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		specs   []string
		want    topicSpecs
		wantErr string
	}{
		{name: "OnOneTopic", specs: []string{"orders"}, want: topicSpecs{"orders": nil}},
		{name: "OnOneTopicAndPartition", specs: []string{"orders:1"}, want: topicSpecs{"orders": {1}}},
		{name: "OnTopics", specs: []string{"orders", "bills"}, want: topicSpecs{"orders": nil, "bills": nil}},
		{name: "OnTopicsAndPartitions", specs: []string{"orders:2,0", "bills:1"}, want: topicSpecs{"orders": {0, 2}, "bills": {1}}},
		{name: "SameTopicTwiceTakesTheUnion", specs: []string{"orders:1,0", "orders:1,3"}, want: topicSpecs{"orders": {0, 1, 3}}},
		{name: "WholeTopicWinsOverPartitions", specs: []string{"orders:1", "orders", "orders:2"}, want: topicSpecs{"orders": nil}},
		{name: "NoTopic", specs: []string{":1"}, wantErr: `--topic ":1": want TOPIC`},
		{name: "NotANumber", specs: []string{"orders:x"}, wantErr: `partition "x" is not a partition number`},
		{name: "NegativePartition", specs: []string{"orders:-1"}, wantErr: `partition "-1"`},
		{name: "EmptyPartitionList", specs: []string{"orders:"}, wantErr: `partition ""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseTopicSpecs(tc.specs)
			if !errAsWanted(t, err, tc.wantErr) {
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestResetOpts_Target(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name    string
		opts    resetOpts
		want    resetTarget
		wantErr string
	}{
		{name: "ToEarliest", opts: resetOpts{earliest: true}, want: resetTarget{kind: resetToEarliest}},
		{name: "ToLatest", opts: resetOpts{latest: true}, want: resetTarget{kind: resetToLatest}},
		{name: "ToSpecificOffset", opts: resetOpts{toOffset: n(7)}, want: resetTarget{kind: resetToOffset, offset: 7}},
		{name: "ShiftMinus", opts: resetOpts{shiftBy: n(-3)}, want: resetTarget{kind: resetShiftBy, offset: -3}},
		{name: "ToZonedDateTime", opts: resetOpts{toDatetime: "2026-12-06T02:00:00+01:00"},
			want: resetTarget{kind: resetToDatetime, millis: time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC).UnixMilli()}},
		{name: "ToDateTimeWithMillis", opts: resetOpts{toDatetime: "2026-12-06T01:00:00.250Z"},
			want: resetTarget{kind: resetToDatetime, millis: time.Date(2026, 12, 6, 1, 0, 0, 250e6, time.UTC).UnixMilli()}},
		{name: "NoScenario", opts: resetOpts{}, wantErr: "one of --to-earliest"},
		{name: "TwoScenarios", opts: resetOpts{earliest: true, shiftBy: n(1)}, wantErr: "not --to-earliest and --shift-by"},
		{name: "NegativeOffset", opts: resetOpts{toOffset: n(-1)}, wantErr: "--to-offset -1: must not be negative"},
		{name: "LocalDateTimeWithoutZone", opts: resetOpts{toDatetime: "2026-12-06T01:00:00"}, wantErr: "want RFC 3339"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.opts.target()
			if !errAsWanted(t, err, tc.wantErr) {
				return
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestPlanReset(t *testing.T) {
	// Partition 0 holds offsets [10, 50) and the group committed 30;
	// partition 1 holds [0, 20) and has no commit; at the time asked for,
	// partition 0's first record is offset 40 and partition 1 has none.
	parts := []partitionOffsets{
		{topic: "orders", partition: 1, committed: -1, start: 0, end: 20, atTime: -1},
		{topic: "orders", partition: 0, committed: 30, start: 10, end: 50, atTime: 40},
	}
	for _, tc := range []struct {
		name    string
		parts   []partitionOffsets
		target  resetTarget
		want    []int64 // new offsets of partitions 0 and 1
		wantErr string
	}{
		{name: "ToEarliest", parts: parts, target: resetTarget{kind: resetToEarliest}, want: []int64{10, 0}},
		{name: "ToLatest", parts: parts, target: resetTarget{kind: resetToLatest}, want: []int64{50, 20}},
		{name: "ToSpecificOffset", parts: parts, target: resetTarget{kind: resetToOffset, offset: 15}, want: []int64{15, 15}},
		{name: "ToOffsetLowerThanEarliest", parts: parts, target: resetTarget{kind: resetToOffset, offset: 5}, want: []int64{10, 5}},
		{name: "ToOffsetHigherThanLatest", parts: parts, target: resetTarget{kind: resetToOffset, offset: 60}, want: []int64{50, 20}},
		{name: "ToLocalDateTime", parts: parts, target: resetTarget{kind: resetToDatetime, millis: 1}, want: []int64{40, 20}},
		{name: "ShiftPlus", parts: parts[1:], target: resetTarget{kind: resetShiftBy, offset: 5}, want: []int64{35}},
		{name: "ShiftMinus", parts: parts[1:], target: resetTarget{kind: resetShiftBy, offset: -5}, want: []int64{25}},
		{name: "ShiftByLowerThanEarliest", parts: parts[1:], target: resetTarget{kind: resetShiftBy, offset: -100}, want: []int64{10}},
		{name: "ShiftByHigherThanLatest", parts: parts[1:], target: resetTarget{kind: resetShiftBy, offset: 100}, want: []int64{50}},
		{name: "ShiftWithoutCommittedOffset", parts: parts, target: resetTarget{kind: resetShiftBy, offset: 1}, wantErr: "cannot shift the offset of orders-1"},
		{name: "NoTarget", parts: parts, wantErr: "no reset target"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := planReset(tc.parts, tc.target)
			if !errAsWanted(t, err, tc.wantErr) {
				return
			}
			var got []int64
			for i, r := range rows {
				if r.Partition != int32(i) {
					t.Fatalf("row %d is partition %d: rows not in partition order: %+v", i, r.Partition, rows)
				}
				got = append(got, r.NewOffset)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("new offsets %v, want %v", got, tc.want)
			}
			if rows[0].CurrentOffset != 30 {
				t.Fatalf("current offset of partition 0 = %d, want the commit 30", rows[0].CurrentOffset)
			}
		})
	}
}

func TestResettable(t *testing.T) {
	for _, tc := range []struct {
		state string
		ok    bool
	}{
		{"Empty", true}, {"Dead", true},
		{"Stable", false}, {"PreparingRebalance", false}, {"CompletingRebalance", false},
	} {
		t.Run(tc.state, func(t *testing.T) {
			err := resettable("app", tc.state)
			if (err == nil) != tc.ok {
				t.Fatalf("resettable(%s) = %v, want ok %v", tc.state, err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "stop its consumers first") {
				t.Fatalf("the refusal does not say what to do: %v", err)
			}
		})
	}
}

func TestGroupError(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"GroupAuthorizationFailed", kerr.GroupAuthorizationFailed, "group app: not authorized for this group (an ACL on the group is missing) (GROUP_AUTHORIZATION_FAILED)"},
		{"NonEmptyGroup", kerr.NonEmptyGroup, "group app: the group has active members; stop its consumers first (NON_EMPTY_GROUP)"},
		{"CoordinatorNotAvailable", kerr.CoordinatorNotAvailable, "(COORDINATOR_NOT_AVAILABLE)"},
		{"GroupIDNotFound", kerr.GroupIDNotFound, "group app: no such group (GROUP_ID_NOT_FOUND)"},
		{"WrappedKafkaError", fmt.Errorf("shard: %w", kerr.GroupAuthorizationFailed), "(GROUP_AUTHORIZATION_FAILED)"},
		{"OtherError", errors.New("dial tcp: refused"), "group app: dial tcp: refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := groupError("app", tc.err).Error()
			if !strings.Contains(got, tc.want) || strings.Contains(got, "\n") {
				t.Fatalf("got %q, want one line containing %q", got, tc.want)
			}
		})
	}
}

// TestGroupViewOf is describe's rendering of a group with one member that
// owns partitions 0 and 2 of orders, and a commit on partition 1 no one
// owns: kafka-consumer-groups.sh --describe's columns, and - for what is
// not known.
func TestGroupViewOf(t *testing.T) {
	inst := "web-1"
	members := []kadm.DescribedGroupMember{{MemberID: "m-1", InstanceID: &inst, ClientID: "cli", ClientHost: "/127.0.0.1"}}
	lag := kadm.GroupLag{"orders": {
		0: {Member: &members[0], Topic: "orders", Partition: 0, Commit: kadm.Offset{Topic: "orders", At: 7},
			End: kadm.ListedOffset{Offset: 10}, Lag: 3},
		1: {Topic: "orders", Partition: 1, Commit: kadm.Offset{Topic: "orders", Partition: 1, At: 4},
			End: kadm.ListedOffset{Offset: 4}, Lag: 0},
		2: {Member: &members[0], Topic: "orders", Partition: 2, Commit: kadm.Offset{At: -1},
			End: kadm.ListedOffset{Offset: 5}, Lag: 5},
	}}
	v := groupViewOf(kadm.DescribedGroupLag{Group: "app", State: "Stable", ProtocolType: "consumer", Protocol: "range",
		Coordinator: kadm.BrokerDetail{NodeID: 2}, Members: members, Lag: lag})
	// kadm decodes an assignment from DescribeGroups only; assignedOf is
	// what groupViewOf does with it.
	v.Members[0].Assigned = assignedOf([]kmsg.ConsumerMemberAssignmentTopic{
		{Topic: "orders", Partitions: []int32{2, 0}}, {Topic: "orders", Partitions: []int32{0}}})
	want := groupView{Group: "app", State: "Stable", ProtocolType: "consumer", Protocol: "range", Coordinator: 2,
		Members: []groupMemberRow{{MemberID: "m-1", InstanceID: "web-1", ClientID: "cli", Host: "/127.0.0.1",
			Assigned: map[string][]int32{"orders": {0, 2}}}},
		Partitions: []groupPartitionRow{
			{Topic: "orders", Partition: 0, CommittedOffset: 7, LogEndOffset: 10, Lag: 3, Owner: "m-1", Host: "/127.0.0.1", ClientID: "cli"},
			{Topic: "orders", Partition: 1, CommittedOffset: 4, LogEndOffset: 4, Lag: 0},
			{Topic: "orders", Partition: 2, CommittedOffset: -1, LogEndOffset: 5, Lag: 5, Owner: "m-1", Host: "/127.0.0.1", ClientID: "cli"},
		}}
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("got  %+v\nwant %+v", v, want)
	}
	var table bytes.Buffer
	if err := groupViewsTable(&table, []groupView{v}); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"GROUP app: state Stable, protocol consumer/range, 1 members, coordinator 2",
		"TOPIC   PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID  HOST        CLIENT-ID",
		"orders  0          7               10              3    m-1          /127.0.0.1  cli",
		"orders  1          4               4               0    -            -           -",
		"orders  2          -               5               5    m-1          /127.0.0.1  cli",
		"m-1          web-1              /127.0.0.1  cli        orders:0,2",
	} {
		if !strings.Contains(table.String(), line+"\n") {
			t.Errorf("table lacks the line %q:\n%s", line, table.String())
		}
	}
	var js bytes.Buffer
	if err := printJSON(&js, []groupView{v}); err != nil {
		t.Fatal(err)
	}
	var back []groupView
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || !reflect.DeepEqual(back, []groupView{want}) {
		t.Fatalf("JSON does not round-trip (%v):\n%s", err, js.String())
	}
}

func TestAssignedString(t *testing.T) {
	for _, tc := range []struct {
		in   map[string][]int32
		want string
	}{
		{map[string][]int32{}, "-"},
		{map[string][]int32{"b": {1}, "a": {0, 3}}, "a:0,3 b:1"},
	} {
		if got := assignedString(tc.in); got != tc.want {
			t.Errorf("assignedString(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestGroupResetOffsetsCmd_RefusesBadOptions: the options are checked
// before anything is asked of a broker (the bootstrap here is closed).
func TestGroupResetOffsetsCmd_RefusesBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"UnrecognizedScenario", []string{"app", "--topic", "orders"}, "one of --to-earliest"},
		{"TwoScenarios", []string{"app", "--topic", "orders", "--to-earliest", "--to-offset", "3"}, "not --to-earliest and --to-offset"},
		{"NeitherDryRunNorExecute", []string{"app", "--topic", "orders", "--to-earliest"}, "give --dry-run (print the plan) or --execute"},
		{"DryRunAndExecute", []string{"app", "--topic", "orders", "--to-earliest", "--dry-run", "--execute"}, "give --dry-run (print the plan) or --execute"},
		{"NoTopics", []string{"app", "--to-earliest", "--execute"}, "give --topic (repeatable) or --all-topics"},
		{"TopicsAndAllTopics", []string{"app", "--to-earliest", "--topic", "orders", "--all-topics", "--dry-run"}, "give --topic (repeatable) or --all-topics"},
		{"NoGroup", []string{"--to-earliest", "--all-topics", "--execute"}, "want one group name, got 0"},
		{"TwoGroups", []string{"a", "b", "--to-earliest", "--all-topics", "--execute"}, "want one group name, got 2"},
		{"BadOutput", []string{"app", "--to-earliest", "--all-topics", "--execute", "-o", "yaml"}, `-o "yaml"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runKeel(t, append([]string{"group", "reset-offsets", "--bootstrap", "127.0.0.1:1", "--timeout", "1s"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// errAsWanted fails t unless err is nil (want "") or contains want, and
// says whether the case goes on to check a result.
func errAsWanted(t *testing.T, err error, want string) bool {
	t.Helper()
	if want != "" {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want one containing %q", err, want)
		}
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}
